"""Read/write dependencies of IR nodes as sympy index expressions.

A `MemoryDep` says "this node touches buffer ``name`` at ``index``", where ``index``
is a sympy expression over the node's loop variables ``var_names`` whose ranges are
``size``: the x variables ``i0, i1, ...`` of its ``ranges`` and, for a `Reduction`,
the r variables ``r0, r1, ...`` of its ``reduction_ranges``. A `StarDep` is a
dependency on a whole buffer (extern calls).

Every scheduled node has a *group* ``(numel, rnumel)``: its x domain size and its
reduction size (1 for a Pointwise). A kernel of group ``(N, R)`` runs ``xindex`` over
``[0, N)`` and ``rindex`` over ``[0, R)``; `kernel_vars` places a node in it:

- a Reduction of group ``(N, R)``: its x variables from ``xindex``, its r variables
  from ``rindex`` (row-major);
- a Pointwise of ``N * R`` elements (a *full-domain* node: a reduction's prologue or
  a consumer of its rows): its variables from the flat position ``xindex * R +
  rindex``, split at a dimension boundary where the sizes allow;
- a Pointwise of ``N`` elements (an *x-only* node: an epilogue such as ``mean``'s
  division): its variables from ``xindex``;
- a *column* reduction (`column_read_writes`: the first stage of a split outer sum,
  seen as the unsplit sum it is a piece of, `ir.nodes.SplitOrigin`) of ``R`` outputs
  over ``N`` rows: its reduced variables from ``xindex``, its output variables from
  ``rindex``. It reduces across the kernel's rows while the kernel's own reductions
  run along them (TorchInductor's mix-order reductions).

`MemoryDep.kernel_index` is the access under that placement, simplified: two nodes of
one kernel touch the same element at the same ``(xindex, rindex)`` exactly when their
kernel indices are equal, which is what fusion legality checks.

Reads are found by running a node's ``inner_fn`` under `ReadRecorder`, an ``ops``
handler that records every ``load`` and ignores everything else.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional, Sequence

import sympy
from torch.utils._sympy.functions import FloorDiv

from ..ir.indexing import Expr, contiguous_strides, flat_to_vars, index_var, known_equal, product, simplify_index
from ..ir.nodes import ComputedBuffer, Reduction, Scan, ScatterBuffer
from ..ir.ops import OpsHandler, set_ops_handler

FLAT = index_var("xindex")
"""The x index symbol: position in the row-major order of a kernel's x domain."""
RFLAT = index_var("rindex")
"""The r index symbol: position in the row-major order of a kernel's reduction domain."""


@dataclasses.dataclass(frozen=True)
class MemoryDep:
    """An access of ``name`` at ``index`` (elements) for each point of ``size``.

    ``var_names[d]`` ranges over ``[0, size[d])``.
    """

    name: str
    index: Expr
    var_names: tuple[sympy.Symbol, ...]
    size: tuple[Expr, ...]

    def numel(self) -> Expr:
        return product(self.size)

    def flat_index(self) -> Expr:
        """``index`` over `FLAT` in a pointwise kernel over this access's whole domain."""
        return _kernel_index(self.index, self.var_names, tuple(flat_to_vars(FLAT, self.size)), self.numel(),
                             sympy.Integer(1))

    def kernel_index(self, placement: "Placement", numel: Expr, rnumel: Expr) -> Expr:
        """``index`` over `FLAT` and `RFLAT` in a kernel of group ``(numel, rnumel)``,
        given the node's `Placement` there (see `kernel_vars`)."""
        return _kernel_index(self.index, placement.vars, placement.exprs, numel, rnumel)

    def __str__(self) -> str:
        return f"MemoryDep({self.name}, {self.index}, {dict(zip(self.var_names, self.size))})"


@dataclasses.dataclass(frozen=True)
class StarDep:
    """A dependency on every element of buffer ``name``."""

    name: str

    def __str__(self) -> str:
        return f"StarDep({self.name})"


@dataclasses.dataclass(frozen=True)
class Placement:
    """A node's loop variables ``vars`` as expressions ``exprs`` of `FLAT`/`RFLAT` in a
    kernel, and its role there: ``reduction``, ``full`` (Pointwise over the whole
    ``numel * rnumel`` domain), ``x`` (Pointwise over the x domain only) or ``column``
    (a reduction across the kernel's rows)."""

    vars: tuple[sympy.Symbol, ...]
    exprs: tuple[Expr, ...]
    role: str


def _split_point(ranges: Sequence[Expr], numel: Expr) -> Optional[int]:
    """``k`` with ``prod(ranges[:k]) == numel``, or None."""
    running: Expr = sympy.Integer(1)
    for k in range(len(ranges) + 1):
        if known_equal(running, numel):
            return k
        if k < len(ranges):
            running = running * ranges[k]
    return None


def kernel_vars(x_vars: Sequence[sympy.Symbol], ranges: Sequence[Expr], r_vars: Sequence[sympy.Symbol],
                reduction_ranges: Sequence[Expr], numel: Expr, rnumel: Expr) -> Optional[Placement]:
    """Where a node with these loop variables sits in a kernel of group ``(numel,
    rnumel)`` (see the module docstring), or None when it cannot be part of one."""
    own_numel = product(ranges)
    if r_vars:
        if not (known_equal(own_numel, numel) and known_equal(product(reduction_ranges), rnumel)):
            return None
        exprs = flat_to_vars(FLAT, ranges) + flat_to_vars(RFLAT, reduction_ranges)
        return Placement(tuple(x_vars) + tuple(r_vars), tuple(exprs), "reduction")
    if known_equal(own_numel, numel):
        return Placement(tuple(x_vars), tuple(flat_to_vars(FLAT, ranges)), "x" if rnumel != 1 else "full")
    if rnumel == 1 or not known_equal(own_numel, numel * rnumel):
        return None
    k = _split_point(ranges, numel)
    if k is not None:
        exprs = flat_to_vars(FLAT, ranges[:k]) + flat_to_vars(RFLAT, ranges[k:])
    else:
        exprs = flat_to_vars(FLAT * rnumel + RFLAT, ranges)
    return Placement(tuple(x_vars), tuple(exprs), "full")


@functools.lru_cache(maxsize=16384)
def _kernel_index(index: Expr, var_names: tuple, exprs: tuple, numel: Expr, rnumel: Expr) -> Expr:
    substitution = dict(zip(var_names, exprs))
    ranges = {FLAT: numel, RFLAT: rnumel} if rnumel != 1 else {FLAT: numel}
    return simplify_index(sympy.sympify(index).xreplace(substitution), ranges)


class ReadRecorder(OpsHandler):
    """Ops handler recording each ``load(name, index)`` as a `MemoryDep`."""

    def __init__(self, var_names: Sequence[sympy.Symbol], size: Sequence[Expr]):
        self.var_names = tuple(var_names)
        self.size = tuple(size)
        self.reads: list[MemoryDep] = []
        self.index_exprs: list[Expr] = []
        self.indirect_ranges: dict[sympy.Symbol, Expr] = {}

    def indirect_indexing(self, x: Any, size: Any, check: bool = True, wrap_neg: bool = True) -> sympy.Symbol:
        symbol = super().indirect_indexing(x, size, check, wrap_neg)
        self.indirect_ranges[symbol] = sympy.sympify(size)
        return symbol

    def load(self, name: str, index: Expr) -> None:
        dep = MemoryDep(name, sympy.expand(index), self.var_names, self.size)
        if dep not in self.reads:
            self.reads.append(dep)

    def index_expr(self, expr: Expr, dtype: Any) -> None:
        self.index_exprs.append(sympy.expand(expr))

    def masked(self, mask: Any, body, other: Any) -> None:
        body()

    def default(self, name: str, *args: Any) -> None:
        return None


@dataclasses.dataclass
class ReadWrites:
    """All accesses of one Pointwise or Reduction node, in program order, and the
    index expressions it computes with (``index_exprs``, over the same loop variables).
    ``x_vars``/``ranges`` and ``r_vars``/``reduction_ranges`` are its loop variables
    (no r variables for a Pointwise); ``indirect_ranges`` maps each index symbol of a
    loaded value (``ops.indirect_indexing``) to the size of the dimension it indexes
    (it is in ``(-size, size)`` wherever an access uses it)."""

    reads: list[MemoryDep]
    writes: list[MemoryDep]
    index_exprs: list[Expr]
    x_vars: tuple[sympy.Symbol, ...]
    ranges: tuple[Expr, ...]
    r_vars: tuple[sympy.Symbol, ...] = ()
    reduction_ranges: tuple[Expr, ...] = ()
    indirect_ranges: dict[sympy.Symbol, Expr] = dataclasses.field(default_factory=dict)
    column: bool = False

    def placement(self, numel: Expr, rnumel: Expr) -> Optional[Placement]:
        if self.column:  # reduced rows along xindex, outputs along rindex
            if not (known_equal(product(self.reduction_ranges), numel) and known_equal(product(self.ranges), rnumel)):
                return None
            exprs = flat_to_vars(RFLAT, self.ranges) + flat_to_vars(FLAT, self.reduction_ranges)
            return Placement(self.x_vars + self.r_vars, tuple(exprs), "column")
        return kernel_vars(self.x_vars, self.ranges, self.r_vars, self.reduction_ranges, numel, rnumel)

    def read_names(self) -> set[str]:
        return {d.name for d in self.reads}


def _write_dep(buffer: ComputedBuffer, x_vars: list, r_vars: list) -> MemoryDep:
    """The write of ``buffer`` at its loop variables: at every x position, and for a
    `Scan` at every scan position too."""
    loops = buffer.data
    if isinstance(loops, Scan):
        return MemoryDep(buffer.name, sympy.expand(buffer.store_index(x_vars, r_vars)), tuple(x_vars + r_vars),
                         tuple(loops.ranges) + tuple(loops.scan_ranges))
    return MemoryDep(buffer.name, sympy.expand(buffer.store_index(x_vars)), tuple(x_vars), tuple(loops.ranges))


def extract_read_writes(buffer: ComputedBuffer) -> ReadWrites:
    """The reads of ``buffer``'s ``inner_fn`` and its write through its layout.

    Raises:
        TypeError: ``buffer`` is not a ComputedBuffer.
    """
    if not isinstance(buffer, ComputedBuffer):
        raise TypeError(f"extract_read_writes needs a ComputedBuffer, got {type(buffer).__name__}")
    loops = buffer.data
    x_vars = loops.index_vars()
    r_vars, r_ranges = [], []
    if isinstance(loops, (Reduction, Scan)):
        r_vars, r_ranges = loops.reduction_vars(), loops.reduction_ranges
    recorder = ReadRecorder(x_vars + r_vars, list(loops.ranges) + list(r_ranges))
    with set_ops_handler(recorder):
        if isinstance(loops, (Reduction, Scan)):
            loops.inner_fn(x_vars, r_vars)
        else:
            loops.inner_fn(x_vars)
        # a scatter's store index loads index tensors: reads too
        write = _write_dep(buffer, x_vars, r_vars)
    if isinstance(buffer, ScatterBuffer):
        # it updates its target in place: ordered after the target's writer (a read there)
        recorder.load(buffer.target.name, write.index)
    return ReadWrites(recorder.reads, [write], recorder.index_exprs, tuple(x_vars), tuple(loops.ranges),
                      tuple(r_vars), tuple(r_ranges), recorder.indirect_ranges)


def column_read_writes(buffer: ComputedBuffer) -> Optional[ReadWrites]:
    """The accesses of a split reduction's first stage ``buffer`` seen as the unsplit
    reduction it computes pieces of (``column`` ReadWrites: loop variables of its
    `ir.nodes.SplitOrigin`, outputs ``x_vars``, reduced rows ``r_vars``), or None when
    it records no origin. Its write is the partial of its row's piece:
    ``partial[flat_row // chunk, outputs]``."""
    loops = buffer.data
    origin = loops.split_origin if isinstance(loops, Reduction) else None
    if origin is None:
        return None
    x_vars = [index_var(f"c{d}") for d in range(len(origin.ranges))]
    r_vars = [index_var(f"q{d}") for d in range(len(origin.reduction_ranges))]
    recorder = ReadRecorder(x_vars + r_vars, list(origin.ranges) + list(origin.reduction_ranges))
    with set_ops_handler(recorder):
        origin.inner_fn(x_vars, r_vars)
    row = sum(v * stride for v, stride in zip(r_vars, contiguous_strides(origin.reduction_ranges)))
    write = MemoryDep(buffer.name, sympy.expand(buffer.store_index([FloorDiv(row, origin.chunk)] + x_vars)),
                      tuple(x_vars + r_vars), tuple(origin.ranges) + tuple(origin.reduction_ranges))
    return ReadWrites(recorder.reads, [write], recorder.index_exprs, tuple(x_vars), tuple(origin.ranges),
                      tuple(r_vars), tuple(origin.reduction_ranges), recorder.indirect_ranges, column=True)
