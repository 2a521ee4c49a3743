"""Read/write dependencies of IR nodes as sympy index expressions.

A `MemoryDep` says "this node touches buffer ``name`` at ``index``", where ``index``
is a sympy expression over the node's loop variables ``var_names`` whose ranges are
``size``. `MemoryDep.flat_index` rewrites the index over the row-major flat position
in the node's iteration domain; two nodes with equal domains touch the same element
at the same flat position exactly when their flat indices are equal, which is what
fusion legality needs. A `StarDep` is a dependency on a whole buffer (extern calls).

Reads are found by running a node's ``inner_fn`` under `ReadRecorder`, an ``ops``
handler that records every ``load`` and ignores everything else.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import sympy

from ..ir.indexing import Expr, flat_to_vars, index_var, product, simplify_index
from ..ir.nodes import ComputedBuffer
from ..ir.ops import OpsHandler, set_ops_handler

FLAT = index_var("xindex")
"""The flat index symbol: position in the row-major order of a node's iteration domain."""


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
        """``index`` as a canonical expression of `FLAT` over ``[0, numel)``."""
        return _flat_index(self.index, self.var_names, self.size)

    def __str__(self) -> str:
        return f"MemoryDep({self.name}, {self.index}, {dict(zip(self.var_names, self.size))})"


@dataclasses.dataclass(frozen=True)
class StarDep:
    """A dependency on every element of buffer ``name``."""

    name: str

    def __str__(self) -> str:
        return f"StarDep({self.name})"


@functools.lru_cache(maxsize=8192)
def _flat_index(index: Expr, var_names: tuple[sympy.Symbol, ...], size: tuple[Expr, ...]) -> Expr:
    substitution = dict(zip(var_names, flat_to_vars(FLAT, size)))
    return simplify_index(sympy.sympify(index).xreplace(substitution), {FLAT: product(size)})


class ReadRecorder(OpsHandler):
    """Ops handler recording each ``load(name, index)`` as a `MemoryDep`."""

    def __init__(self, var_names: Sequence[sympy.Symbol], size: Sequence[Expr]):
        self.var_names = tuple(var_names)
        self.size = tuple(size)
        self.reads: list[MemoryDep] = []
        self.index_exprs: list[Expr] = []

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
    """All accesses of one Pointwise node, in program order, and the index
    expressions it computes with (``index_exprs``, over the same loop variables)."""

    reads: list[MemoryDep]
    writes: list[MemoryDep]
    index_exprs: list[Expr] = dataclasses.field(default_factory=list)

    def read_names(self) -> set[str]:
        return {d.name for d in self.reads}


def extract_read_writes(buffer: ComputedBuffer) -> ReadWrites:
    """The reads of ``buffer``'s ``inner_fn`` and its write through its layout.

    Raises:
        TypeError: ``buffer`` is not a ComputedBuffer.
    """
    if not isinstance(buffer, ComputedBuffer):
        raise TypeError(f"extract_read_writes needs a ComputedBuffer, got {type(buffer).__name__}")
    loops = buffer.data
    var_names = loops.index_vars()
    recorder = ReadRecorder(var_names, loops.ranges)
    with set_ops_handler(recorder):
        loops.inner_fn(var_names)
    write = MemoryDep(buffer.name, sympy.expand(buffer.store_index(var_names)), tuple(var_names), tuple(loops.ranges))
    return ReadWrites(recorder.reads, [write], recorder.index_exprs)
