"""Layouts: which thread of a program holds which element of a block.

A program is one CTA of ``32 * num_warps`` threads. A *layout* says how a block of a
given rank is spread over registers, lanes and warps; applied to a concrete shape it
gives a `Distribution`.

`BlockedLayout` (Triton's ``#blocked``): each thread owns ``size_per_thread[d]``
consecutive elements along each dim, ``threads_per_warp`` lanes and
``warps_per_cta`` warps tile the block, ``order`` lists dims fastest first. The
layout tile repeats when the shape is larger (more registers) and is replicated
when it is smaller (several threads hold the same element).

`SliceLayout` (Triton's ``#slice``): the layout of a reduction result; its parent's
layout with one dim removed, so ``x[:, None]`` on a reduced value lands back in the
parent layout without moving data.

A `Distribution` is the concrete form (a linear layout over GF(2), as in Triton's
``LinearLayout``, restricted to power-of-two shapes): each bit of the register
index, of the lane id and of the warp id contributes a fixed coordinate vector, and
an element's coordinates are the XOR (here: the sum, since the vectors use disjoint
bits) of the vectors of the set bits. A zero vector marks replication.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Union

WARP_SIZE = 32


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def log2(n: int) -> int:
    assert is_pow2(n), n
    return n.bit_length() - 1


@dataclass(frozen=True)
class BlockedLayout:
    """Triton-style blocked layout; every tuple has one entry per dim.

    ``size_per_thread``: consecutive elements per thread along each dim;
    ``threads_per_warp``: lanes along each dim (product 32); ``warps_per_cta``: warps
    along each dim (product ``num_warps``); ``order``: dims from fastest to slowest.
    """

    size_per_thread: tuple[int, ...]
    threads_per_warp: tuple[int, ...]
    warps_per_cta: tuple[int, ...]
    order: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.order)

    @property
    def num_warps(self) -> int:
        n = 1
        for w in self.warps_per_cta:
            n *= w
        return n

    def __post_init__(self):
        r = len(self.order)
        if not (len(self.size_per_thread) == len(self.threads_per_warp) == len(self.warps_per_cta) == r):
            raise ValueError(f"blocked layout fields disagree on rank: {self}")
        if sorted(self.order) != list(range(r)):
            raise ValueError(f"blocked layout order {self.order} is not a permutation of 0..{r - 1}")
        tpw = 1
        for t in self.threads_per_warp:
            tpw *= t
        if tpw != WARP_SIZE:
            raise ValueError(f"threads_per_warp {self.threads_per_warp} must multiply to {WARP_SIZE}")
        for v in self.size_per_thread + self.threads_per_warp + self.warps_per_cta:
            if not is_pow2(v):
                raise ValueError(f"blocked layout entries must be powers of two: {self}")

    def __repr__(self) -> str:
        return (f"blocked(spt={list(self.size_per_thread)}, tpw={list(self.threads_per_warp)}, "
                f"wpc={list(self.warps_per_cta)}, order={list(self.order)})")


@dataclass(frozen=True)
class SliceLayout:
    """``parent`` with dim ``axis`` removed (the layout of a reduction over ``axis``)."""

    parent: "Layout"
    axis: int

    @property
    def rank(self) -> int:
        return self.parent.rank - 1

    @property
    def num_warps(self) -> int:
        return self.parent.num_warps

    def __repr__(self) -> str:
        return f"slice({self.parent!r}, axis={self.axis})"


Layout = Union[BlockedLayout, SliceLayout]


@dataclass(frozen=True)
class Distribution:
    """A layout applied to a shape: one coordinate vector per register, lane and warp bit.

    ``reg_bases[i]``, ``lane_bases[i]``, ``warp_bases[i]``: coordinates contributed by
    bit ``i`` of the register index, lane id and warp id. Register ``j`` of lane ``l``
    in warp ``w`` holds the element at the XOR of the vectors of the set bits. All-zero
    lane/warp vectors mean those threads hold copies (replicas).
    """

    shape: tuple[int, ...]
    reg_bases: tuple[tuple[int, ...], ...]
    lane_bases: tuple[tuple[int, ...], ...]
    warp_bases: tuple[tuple[int, ...], ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def num_regs(self) -> int:
        return 1 << len(self.reg_bases)

    @functools.cached_property
    def reg_offsets(self) -> tuple[tuple[int, ...], ...]:
        """Compile-time coordinates of every register (the lane/warp part excluded)."""
        return tuple(_combine(self.reg_bases, j, self.rank) for j in range(self.num_regs))

    @functools.cached_property
    def reg_of_offset(self) -> dict[tuple[int, ...], int]:
        return {off: j for j, off in enumerate(self.reg_offsets)}

    @property
    def replica_lane_mask(self) -> int:
        """Lane-id bits that only select copies of the same elements."""
        return sum(1 << i for i, b in enumerate(self.lane_bases) if not any(b))

    @property
    def replica_warp_mask(self) -> int:
        return sum(1 << i for i, b in enumerate(self.warp_bases) if not any(b))

    @property
    def has_replicas(self) -> bool:
        return bool(self.replica_lane_mask or self.replica_warp_mask)

    def thread_terms(self, dim: int) -> list[tuple[str, int, int, int]]:
        """How lane and warp ids build the runtime coordinate along ``dim``.

        Returns ``(source, shift, mask, scale)`` terms, ``source`` being ``"lane"`` or
        ``"warp"``; the coordinate is the sum of ``((source >> shift) & mask) * scale``.
        Runs of consecutive id bits that map to consecutive powers of two are merged.
        """
        terms = []
        for source, bases in (("lane", self.lane_bases), ("warp", self.warp_bases)):
            i = 0
            while i < len(bases):
                v = bases[i][dim]
                if v == 0:
                    i += 1
                    continue
                n = 1
                while i + n < len(bases) and bases[i + n][dim] == v << n and not _other_dims(bases[i + n], dim):
                    n += 1
                terms.append((source, i, (1 << n) - 1, v))
                i += n
        return terms


def _other_dims(vec: tuple[int, ...], dim: int) -> bool:
    return any(c for d, c in enumerate(vec) if d != dim)


def _combine(bases, index: int, rank: int) -> tuple[int, ...]:
    out = [0] * rank
    i = 0
    while index:
        if index & 1:
            out = [a ^ b for a, b in zip(out, bases[i])]
        index >>= 1
        i += 1
    return tuple(out)


def _unit(rank: int, dim: int, value: int) -> tuple[int, ...]:
    v = [0] * rank
    v[dim] = value
    return tuple(v)


@functools.lru_cache(maxsize=4096)
def distribute(layout: Layout, shape: tuple[int, ...]) -> Distribution:
    """The `Distribution` of ``layout`` over a block of ``shape``.

    Raises:
        ValueError: rank mismatch, or a dim that is not a power of two.
    """
    shape = tuple(shape)
    if layout.rank != len(shape):
        raise ValueError(f"layout {layout!r} has rank {layout.rank}, shape {shape} has rank {len(shape)}")
    for s in shape:
        if not is_pow2(s):
            raise ValueError(f"block shape {shape}: every dim must be a power of two")
    if isinstance(layout, SliceLayout):
        full = shape[: layout.axis] + (1,) + shape[layout.axis:]
        parent = distribute(layout.parent, full)

        def drop(vec):
            return vec[: layout.axis] + vec[layout.axis + 1:]

        return Distribution(
            shape,
            tuple(drop(b) for b in parent.reg_bases),
            tuple(drop(b) for b in parent.lane_bases),
            tuple(drop(b) for b in parent.warp_bases),
        )
    return _distribute_blocked(layout, shape)


def _distribute_blocked(layout: BlockedLayout, shape: tuple[int, ...]) -> Distribution:
    rank = len(shape)
    spt_bases, rep_bases, lane_bases, warp_bases = [], [], [], []
    for d in layout.order:
        s = min(layout.size_per_thread[d], shape[d])
        t = min(layout.threads_per_warp[d], shape[d] // s)
        w = min(layout.warps_per_cta[d], shape[d] // (s * t))
        reps = shape[d] // (s * t * w)
        spt_bases += [_unit(rank, d, 1 << i) for i in range(log2(s))]
        lane_bases += [_unit(rank, d, s << i) if (1 << i) < t else (0,) * rank
                       for i in range(log2(layout.threads_per_warp[d]))]
        warp_bases += [_unit(rank, d, (s * t) << i) if (1 << i) < w else (0,) * rank
                       for i in range(log2(layout.warps_per_cta[d]))]
        rep_bases += [_unit(rank, d, (s * t * w) << i) for i in range(log2(reps))]
    return Distribution(shape, tuple(spt_bases + rep_bases), tuple(lane_bases), tuple(warp_bases))


def expand_layout(layout: Layout, axis: int) -> Layout | None:
    """A layout of rank+1 whose slice at ``axis`` distributes like ``layout``.

    ``slice(P, axis)`` gives back ``P``; a blocked layout gets a unit dim inserted
    (slowest in ``order``). Returns None for a slice along another axis.
    """
    if isinstance(layout, SliceLayout):
        return layout.parent if layout.axis == axis else None

    def ins(t, v):
        return t[:axis] + (v,) + t[axis:]

    order = tuple(d + 1 if d >= axis else d for d in layout.order) + (axis,)
    return BlockedLayout(ins(layout.size_per_thread, 1), ins(layout.threads_per_warp, 1),
                         ins(layout.warps_per_cta, 1), order)


def default_blocked_layout(tile: tuple[int, ...], num_warps: int, *, vec: int = 1,
                           order: tuple[int, ...] | None = None,
                           warp_order: tuple[int, ...] | None = None) -> BlockedLayout:
    """The blocked layout for a block of shape ``tile`` (after Triton's default encoding).

    ``vec`` consecutive elements per thread along the fastest dim ``order[0]`` (capped
    by the tile). Lanes are handed out along ``order``, warps along ``warp_order``
    (default ``order``; the lowering puts reduced dims last so that reductions stay
    inside warps): each dim takes at most what it can fill, the last dim what is left.

    Raises:
        ValueError: ``num_warps`` or a tile dim is not a power of two.
    """
    rank = len(tile)
    if not is_pow2(num_warps):
        raise ValueError(f"num_warps={num_warps} must be a power of two")
    for s in tile:
        if not is_pow2(s):
            raise ValueError(f"block shape {tile}: every dim must be a power of two")
    order = tuple(order) if order is not None else tuple(reversed(range(rank)))
    warp_order = tuple(warp_order) if warp_order is not None else order
    spt = [1] * rank
    spt[order[0]] = max(1, min(vec, tile[order[0]]))
    tpw, wpc = [1] * rank, [1] * rank
    lanes_left = WARP_SIZE
    for d in order[:-1]:
        tpw[d] = max(1, min(tile[d] // spt[d], lanes_left))
        lanes_left //= tpw[d]
    tpw[order[-1]] = lanes_left
    warps_left = num_warps
    for d in warp_order[:-1]:
        wpc[d] = max(1, min(tile[d] // (spt[d] * tpw[d]), warps_left))
        warps_left //= wpc[d]
    wpc[warp_order[-1]] = warps_left
    return BlockedLayout(tuple(spt), tuple(tpw), tuple(wpc), order)
