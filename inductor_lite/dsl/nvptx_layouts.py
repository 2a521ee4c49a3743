"""Choose the layout of every block value of a kernel (the NVPTX lowering's plan).

One default blocked layout per rank, shaped by the kernel's memory accesses: the
fastest dim is the one along which the pointers are most contiguous, and each thread
holds as many consecutive elements as the widest provable access (16 bytes). Then a
forward pass gives each value a *home* layout:

- reductions produce ``slice(parent, axis)``; ``x[:, None]`` of a slice is the parent
  again, so the usual ``sum(x, 1)[:, None]`` never moves data;
- loads take their pointer's layout, elementwise ops their first placed operand's;
- a load or store of a whole tile whose pointers run contiguously along another dim
  than the default layout's fastest gets a layout of its own along that dim (Triton's
  coalescing pass): one side of a transpose is then as coalesced as the other, and
  its values move between the two layouts through shared memory;
- values computed only from constants, ``arange``, ``splat`` and scalars are `FREE`:
  the lowering recomputes them in whatever layout a consumer wants (cheap integer
  index math), which is what keeps ``xindex``/``rindex`` conversion-free;
- everything else without a preference gets the default layout of its rank.

A value needed in a layout other than its home is converted through shared memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

from . import ir
from .axis_info import AxisInfo, vector_width
from .layout import WARP_SIZE, BlockedLayout, Layout, SliceLayout, default_blocked_layout, expand_layout

FREE = "free"
"""Home of a value that is recomputed in each layout a consumer asks for."""

Home = Union[Layout, str, None]

_REMATERIALIZABLE = frozenset(
    {"constant", "splat", "arange", "broadcast", "expand_dims", "binary", "compare", "select", "cast",
     "bitcast", "math"}
)


def element_bytes(t: ir.ElementType) -> int:
    """Bytes one element of ``t`` takes in global memory (bool is one byte)."""
    return 8 if isinstance(t, ir.PointerType) else t.itemsize


@dataclass
class LayoutPlan:
    """``homes[value.id]``: a layout, `FREE`, or None for scalars; ``defaults[rank]``."""

    num_warps: int
    defaults: dict[int, BlockedLayout]
    homes: dict[int, Home] = field(default_factory=dict)
    accesses: dict[int, BlockedLayout] = field(default_factory=dict)
    """``id(op)`` of a whole-tile load/store with contiguous pointers -> the layout
    coalesced along them (a load only where that is not the default)."""

    def home(self, v: ir.Value) -> Home:
        if v.type.is_scalar:
            return None
        return self.homes.get(v.id, FREE)

    def placed(self, v: ir.Value) -> Optional[Layout]:
        """The home if it is a layout, else None (scalar or `FREE`)."""
        h = self.home(v)
        return None if h is None or h == FREE else h

    def default(self, rank: int) -> BlockedLayout:
        return self.defaults[rank]

    def store_layout(self, op: ir.Op) -> Layout:
        """The layout a block store is done in: its pointer's if placed; else its
        value's, unless that runs along another dim than the store's coalesced layout,
        which then takes over (the value converts); else its mask's, else the default."""
        ptr, value = op.operands[0], op.operands[1]
        mask = op.operands[2] if len(op.operands) > 2 else None
        coalesced = self.accesses.get(id(op))
        home = self.placed(value)
        if coalesced is not None and isinstance(home, BlockedLayout) and home.order[0] != coalesced.order[0]:
            home = None
        return (self.placed(ptr) or home or coalesced or (self.placed(mask) if mask is not None else None)
                or self.default(len(ptr.type.shape)))


def _walk_values(fn: ir.Function):
    yield from fn.arg_values
    for op in fn.walk():
        yield from op.results
        if op.opcode == "for":
            yield op.attrs["iv"]
            yield from op.attrs["carried"]


def _blocked(tile: list[int], num_warps: int, fast: int, vec: int, reduced: set[int]) -> BlockedLayout:
    """The blocked layout of ``tile`` with ``fast`` fastest, ``vec`` elements a thread
    along it, and warps placed off the ``reduced`` dims first."""
    rank = len(tile)
    numel = 1
    for s in tile:
        numel *= s
    order = (fast,) + tuple(d for d in reversed(range(rank)) if d != fast)
    vec = min(vec, tile[fast], max(1, numel // (WARP_SIZE * num_warps)))
    warp_order = tuple(d for d in order if d not in reduced) + tuple(d for d in order if d in reduced)
    return default_blocked_layout(tuple(tile), num_warps, vec=vec, order=order, warp_order=warp_order)


def _layouts(fn: ir.Function, num_warps: int,
             axis: dict[int, AxisInfo]) -> tuple[dict[int, BlockedLayout], dict[int, BlockedLayout]]:
    """The default layout per rank, and the accesses that get a layout of their own."""
    tiles: dict[int, list[int]] = {}
    for v in _walk_values(fn):
        shape = v.type.shape
        if shape:
            t = tiles.setdefault(len(shape), [1] * len(shape))
            tiles[len(shape)] = [max(a, b) for a, b in zip(t, shape)]
    # Each memory access votes (elements moved, fast dim, contiguity, vector width);
    # the biggest access decides which dim is fastest.
    votes: dict[int, list[tuple[int, int, int, int]]] = {}
    accesses: list[tuple[ir.Op, int, int, int, int]] = []  # (op, rank, fast dim, its contiguity, vec)
    for op in fn.walk():
        if op.opcode not in ("load", "store"):
            continue
        ptr = op.operands[0]
        if ptr.type.is_scalar or ptr.id not in axis:
            continue
        info = axis[ptr.id]
        mask = op.operands[1] if op.opcode == "load" and len(op.operands) > 1 else (
            op.operands[2] if op.opcode == "store" and len(op.operands) > 2 else None)
        mask_info = axis.get(mask.id) if mask is not None else None
        rank = len(ptr.type.shape)
        fast = max(range(rank), key=lambda d: (info.contiguity[d], d))
        vec = vector_width(info, element_bytes(ptr.type.element.element), fast, mask_info)
        votes.setdefault(rank, []).append((ptr.type.numel, fast, info.contiguity[fast], vec))
        accesses.append((op, rank, fast, info.contiguity[fast], vec))
    # Dims that reductions and scans run along get warps last, so they stay inside warps.
    reduced: dict[int, set[int]] = {}
    for op in fn.walk():
        if op.opcode in ("reduce", "argreduce", "welford_combine", "scan") and op.attrs.get("axis") is not None:
            reduced.setdefault(len(op.operands[0].type.shape), set()).add(op.attrs["axis"])
    defaults = {}
    for rank, tile in tiles.items():
        fast, vec = rank - 1, 1
        if votes.get(rank):
            fast = max(votes[rank], key=lambda v: (v[0], v[2], v[3], v[1]))[1]
            vec = max(v[3] for v in votes[rank] if v[1] == fast)
        defaults[rank] = _blocked(tile, num_warps, fast, vec, reduced.get(rank, set()))
    own = {}
    for op, rank, fast, contiguity, vec in accesses:
        tile = tiles[rank]
        whole_tile = op.operands[0].type.shape == tuple(tile)
        if not whole_tile or contiguity == 1:
            continue
        if fast != defaults[rank].order[0]:
            own[id(op)] = _blocked(tile, num_warps, fast, vec, reduced.get(rank, set()))
        elif op.opcode == "store":
            own[id(op)] = defaults[rank]
    return defaults, own


class _Planner:
    def __init__(self, plan: LayoutPlan):
        self.plan = plan

    def set(self, v: ir.Value, home: Home) -> None:
        if not v.type.is_scalar:
            self.plan.homes[v.id] = home

    def placed_or_default(self, v: ir.Value) -> Layout:
        return self.plan.placed(v) or self.plan.default(len(v.type.shape))

    def block(self, block: ir.Block) -> None:
        for op in block.ops:
            if op.opcode == "for":
                self.loop(op)
            elif op.results:
                self.op(op)

    def op(self, op: ir.Op) -> None:
        res = op.results[0]
        if res.type.is_scalar and len(op.results) == 1:
            return
        blocks = [o for o in op.operands if not o.type.is_scalar]
        placed = [self.plan.placed(o) for o in blocks]
        first = next((p for p in placed if p is not None), None)
        code = op.opcode
        if code in _REMATERIALIZABLE and first is None:
            self.set(res, FREE)
        elif code == "broadcast":
            self.set(res, first)
        elif code == "expand_dims":
            self.set(res, expand_layout(first, op.attrs["axis"]) or self.plan.default(len(res.type.shape)))
        elif code == "load":
            self.set(res, first or self.plan.accesses.get(id(op)) or self.plan.default(len(res.type.shape)))
        elif code in _REMATERIALIZABLE:
            self.set(res, first or self.plan.default(len(res.type.shape)))
        elif code in ("reduce", "argreduce", "welford_combine") and op.attrs.get("axis") is not None:
            parent = first or self.plan.default(len(blocks[0].type.shape))
            for r in op.results:
                self.set(r, SliceLayout(parent, op.attrs["axis"]))
        elif code == "scan":  # keeps its operands' layout: no data moves before the scan
            for r in op.results:
                self.set(r, first or self.plan.default(len(r.type.shape)))
        elif code == "cluster_gather":  # every thread holds every program's value: no shuffles to reduce it
            self.set(res, BlockedLayout(res.type.shape, (WARP_SIZE,), (self.plan.num_warps,), (0,)))
        elif code == "welford_combine":
            for r in op.results:
                self.set(r, first or self.plan.default(len(r.type.shape)))
        else:  # reshape and anything new: the default layout of the result's rank
            for r in op.results:
                self.set(r, self.plan.default(len(r.type.shape)))

    def loop(self, op: ir.Op) -> None:
        inits = op.operands[3:]
        carried, body = op.attrs["carried"], op.attrs["body"]
        homes: list[Home] = [self.plan.placed(i) or FREE if not i.type.is_scalar else None for i in inits]
        if FREE in homes:
            # An init without a placement (e.g. `zeros`) takes the layout of what the body
            # yields: plan the body once with those accumulators floating, read the yield.
            for c, h in zip(carried, homes):
                self.set(c, h)
            self.block(body)
            yielded = body.ops[-1].operands if body.ops and body.ops[-1].opcode == "yield" else [None] * len(homes)
            homes = [(self.plan.placed(y) if y is not None else None) or self.plan.default(len(c.type.shape))
                     if h == FREE else h for c, h, y in zip(carried, homes, yielded)]
        for c, h in zip(carried, homes):
            self.set(c, h)
        self.block(body)
        for r, h in zip(op.results, homes):
            self.set(r, h)


def plan_layouts(fn: ir.Function, num_warps: int, axis: dict[int, AxisInfo]) -> LayoutPlan:
    """The `LayoutPlan` of ``fn`` for programs of ``num_warps`` warps.

    Raises:
        ValueError: a block dim or ``num_warps`` that is not a power of two.
    """
    defaults, accesses = _layouts(fn, num_warps, axis)
    plan = LayoutPlan(num_warps, defaults, accesses=accesses)
    _Planner(plan).block(fn.body)
    return plan
