"""2-D tiling of pointwise kernels, chosen from the MemoryDep strides.

A pointwise kernel over ``N`` elements is 1-D: each program takes ``XBLOCK``
consecutive flat positions. An access whose unit-stride loop variable is not the
innermost one (one side of a transpose or permute, a channels-last <-> contiguous
copy) then moves with a stride, a cache line per element. A `Tiling` splits the flat
domain into ``ynumel * xnumel`` with ``flat = yindex * xnumel + xindex``; the kernel
runs over ``[YBLOCK, XBLOCK]`` tiles, and an access contiguous along ``yindex`` is as
coalesced as one contiguous along ``xindex`` (the DSL gives each access a layout
along its own contiguous axis and moves values between the two through shared memory).
A kernel over rows that reads one value a row (a label, a normalisation's statistics)
is tiled too, in long rows: in 1-D each element would divide its flat index by the row
length to find its row's value.

A pointwise kernel whose accesses all run contiguously along one loop variable that is
not the innermost (a cast or an op between tensors of one permuted layout, such as
attention probabilities cast to bf16 in the transposed layout of the backward's GEMM)
needs no tile: `memory_order_placements` runs its flat index in the memory order of its
stores instead (TorchInductor reorders such loops by stride order too), and every
access becomes a contiguous 1-D one.

Candidates follow TorchInductor's ``candidate_tilings`` (``codegen/simd.py``): for
each access, the loop variable with stride 1; when it is not the node's innermost
variable, split the node's ranges right after it, so that this variable ends up in
``yindex``. A candidate wins when it makes more bytes coalesced (stride 1 along a tile
axis, or 0 along ``xindex``: a broadcast value) than the 1-D kernel does, or as many
with fewer accesses dividing the index per element (`choose_tiling`); strides are
measured as TorchInductor's stride hints are, as the index's difference between
neighbouring positions at the origin.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import sympy
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from ..ir.indexing import (
    Expr, flat_to_vars, index_var, is_power_of_2, known_equal, product, shape_env_size_hint, simplify_index,
)
from .dependencies import FLAT, Placement

YFLAT = index_var("yindex")
"""The y index symbol of a tiled kernel: the tile row, ``flat // xnumel``."""

MIN_TILE_DIM = 8
"""A static side shorter than this is not tiled: most of a tile's lanes would be masked,
or its rows would be too short to coalesce. 8 admits a 3x3 convolution weight's copy to
channels-last (``[C_out, C_in, 9] -> [C_out, 9, C_in]``, a side of 9 in tiles 16 wide),
whose 1-D kernel writes every element a row of ``C_in`` apart."""


@dataclasses.dataclass(frozen=True)
class Tiling:
    """The flat domain of a pointwise kernel as ``ynumel`` rows of ``xnumel``.
    ``transposed``: some access runs contiguously along ``yindex`` (square tiles, values
    moved between layouts through shared memory); otherwise every access runs along
    ``xindex`` or is one value a row, and tiles are long rows
    (`codegen.heuristics.pointwise_row_tiled`)."""

    ynumel: Expr
    xnumel: Expr
    transposed: bool = False

    def ranges(self) -> dict[sympy.Symbol, Expr]:
        return {FLAT: self.xnumel, YFLAT: self.ynumel}

    def split(self, index: Expr) -> Expr:
        """``index`` (over the flat `FLAT`) over ``yindex`` and ``xindex``, simplified."""
        flat = sympy.sympify(index).xreplace({FLAT: YFLAT * self.xnumel + FLAT})
        return simplify_index(flat, self.ranges())


def stride_hint(index: Expr, var: sympy.Symbol, others: tuple = ()) -> Optional[Expr]:
    """``index(var=1) - index(var=0)`` with ``others`` at 0: the stride of an access
    along ``var`` near the origin (TorchInductor's stride hints), or None when it cannot
    be evaluated."""
    at = {o: 0 for o in others}
    try:
        # expand, not simplify: simplify costs ~0.5 s on a symbolic index, per access
        return sympy.expand(index.subs({**at, var: 1}) - index.subs({**at, var: 0}))
    except (TypeError, ZeroDivisionError):
        return None


def _is_one(value: Optional[Expr]) -> bool:
    return value is not None and value == 1


def _is_one_or_zero(value: Optional[Expr]) -> bool:
    """Stride 1 (contiguous) or 0 (a value broadcast along the axis, such as a row's
    label in a kernel over the row's elements): either way neighbouring lanes share
    cache lines, so a tile would not help it."""
    return value is not None and value in (0, 1)


def _static_at_least(n: Expr, minimum: int) -> bool:
    n = sympy.sympify(n)
    return not n.is_number or int(n) >= minimum


def _candidates(group) -> list[Tiling]:
    out: list[Tiling] = []
    for node in group.nodes:
        rw = node.read_writes
        for dep in rw.reads + rw.writes:
            for k, var in enumerate(rw.x_vars):
                if not _is_one(stride_hint(dep.index, var, rw.x_vars)):
                    continue
                inner = product(rw.ranges[k + 1:])
                if inner == 1:
                    break
                tiling = Tiling(sympy.cancel(group.numel / inner), inner)
                if (tiling not in out and sympy.fraction(tiling.ynumel)[1] == 1
                        and _static_at_least(tiling.ynumel, MIN_TILE_DIM)
                        and _static_at_least(tiling.xnumel, MIN_TILE_DIM)):
                    out.append(tiling)
                break
    return out


def _divides_per_element(index: Expr) -> bool:
    """Whether ``index`` divides ``xindex`` by a size that is not a power of two: a
    multiply-high and more per element (a few dozen instructions for a size known only
    at run time), where a power of two is a shift or a mask and a division of
    ``yindex`` alone happens once a tile row."""
    return any(FLAT in atom.free_symbols and not all(map(is_power_of_2, atom.args[1:]))
               for atom in index.atoms(FloorDiv, ModularIndexing))


def _score(group, tiling: Optional[Tiling], element_size: Callable[[str], int]) -> tuple[int, int, bool]:
    """``(coalesced bytes, -accesses dividing per element, transposed)`` of ``group``
    tiled as ``tiling`` (None: 1-D). An access is coalesced with stride 1 along a tile
    axis, or 0 along ``xindex`` (a broadcast value); transposed when some coalesced
    access runs along ``yindex``."""
    coalesced = dividing = 0
    transposed = False
    for node in group.nodes:
        rw = node.read_writes
        placement = rw.placement(group.numel, group.rnumel)
        for dep in rw.reads + rw.writes:
            index = dep.kernel_index(placement, group.numel, group.rnumel)
            if tiling is None:
                ok = _is_one_or_zero(stride_hint(index, FLAT, ()))
            else:
                index = tiling.split(index)
                along_x = _is_one_or_zero(stride_hint(index, FLAT, (YFLAT,)))
                ok = along_x or _is_one(stride_hint(index, YFLAT, (FLAT,)))
                transposed |= ok and not along_x
            coalesced += element_size(dep.name) if ok else 0
            dividing += _divides_per_element(index)
    return coalesced, -dividing, transposed


def choose_tiling(group, element_size: Callable[[str], int]) -> Optional[Tiling]:
    """The tiling of a pointwise `KernelGroup`, or None for a 1-D kernel: the form
    that makes the most bytes coalesced, then the one whose accesses divide the index
    per element least often; the 1-D kernel on a tie. (A kernel over rows that loads
    each row's own values, such as a label or a normalisation's statistics, divides
    every element's flat index by the row length in 1-D; tiled by rows, it loads them
    once a tile row.)

    Args:
        group: a pointwise group (``rnumel == 1``); reductions are never tiled here
            (their r axis is their second tile axis).
        element_size: bytes of an element of a buffer, by name.
    """
    if group.is_reduction:
        return None
    best, best_score = None, _score(group, None, element_size)[:2]
    for tiling in _candidates(group):
        *score, transposed = _score(group, tiling, element_size)
        if tuple(score) > best_score:
            best, best_score = dataclasses.replace(tiling, transposed=transposed), tuple(score)
    return best


def memory_order_placements(group, stored: Callable[[str], bool]) -> Optional[dict[str, Placement]]:
    """Each node's placement in a 1-D kernel whose flat index runs in memory order, or
    None when the logical order serves as well or a tiling is needed.

    Applies to a pointwise group whose nodes share their ranges, where every read from
    memory and every stored write (``stored(name)``) has stride 1 along the same loop
    variable and that variable is not the innermost: the variables are then ordered by
    the first stored write's strides, largest first, and the result is used only when
    it makes every one of those accesses contiguous in the flat index. Symbolic strides
    are compared at the shape environment's example sizes (`shape_env_size_hint`), as
    TorchInductor's stride hints are: any order is correct, the hints only pick one.
    """
    if group.is_reduction or group.has_scatter():
        return None
    first = group.nodes[0].read_writes
    if len(first.ranges) < 2 or any(len(n.read_writes.ranges) != len(first.ranges) or not all(
            known_equal(a, b) for a, b in zip(n.read_writes.ranges, first.ranges)) for n in group.nodes):
        return None
    written = group.writes()
    # (node, access) for every read from memory and every stored write
    accesses = [(n, d) for n in group.nodes for d in n.read_writes.reads if d.name not in written]
    accesses += [(n, d) for n in group.nodes for d in n.read_writes.writes if stored(d.name)]
    unit = {next((k for k, v in enumerate(n.read_writes.x_vars)
                  if _is_one(stride_hint(d.index, v, n.read_writes.x_vars))), None) for n, d in accesses}
    inner = max((k for k, size in enumerate(first.ranges) if size != 1), default=0)
    store = next((d for n, d in accesses if d in n.read_writes.writes), None)
    if len(unit) != 1 or None in unit or unit == {inner} or store is None:
        return None
    strides = [stride_hint(store.index, v, first.x_vars) for v in first.x_vars]
    if any(s is None for s in strides):
        return None
    hint = shape_env_size_hint()  # symbolic strides order as at the example sizes
    order = sorted(range(len(strides)), key=lambda k: -hint(strides[k]))
    exprs = tuple(flat_to_vars(FLAT, [first.ranges[k] for k in order]))
    placements = {n.name: Placement(tuple(n.read_writes.x_vars[k] for k in order), exprs, "full") for n in group.nodes}
    # at the example sizes: with symbolic ones, ``1 // s`` and ``1 % s`` stay unevaluated
    if not all(hint(stride_hint(d.kernel_index(placements[n.name], group.numel, 1), FLAT, ()) or 0) == 1
               for n, d in accesses):
        return None
    return placements
