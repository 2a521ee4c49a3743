"""Scans along an axis: the ``scan`` op (``dl.associative_scan``, ``dl.cumsum``).

The structure follows Triton's ScanOpToLLVM. The scan keeps its operand's layout, and
along the axis a blocked layout (or a slice of one) holds, from the lowest index bits
up: ``S`` consecutive elements in each thread's registers, ``Tl`` lanes, ``W`` warps,
and ``C`` repeats of that pattern in more registers (*chunks*). For every row (the
coordinates off the axis) and chunk:

1. each thread scans its ``S`` registers in order;
2. the threads' totals are scanned over the ``Tl`` lanes in log2(Tl) steps of
   ``shfl.sync.up`` (Hillis and Steele, "Data parallel algorithms", 1986), then one
   more shuffle gives each lane the total of the lanes before it;
3. the carry from earlier warps and chunks: with ``W == 1`` the last lane's total of
   each chunk is broadcast (``shfl.sync.idx``) and the chunks combine in order; with
   warps on the axis, the last lane of each warp writes its chunk total to shared
   memory, and after a barrier every thread combines the totals of all (chunk, warp)
   units before its own;
4. each register combines (carry, earlier lanes, its own running value).

Combines always take the state of the lower indices first (the higher ones with
``reverse``, which mirrors every step), so a combine need not be commutative. The
combine region is lowered inline, on scalars, once per combine.
"""

from __future__ import annotations

from typing import Callable, Union

from llvmlite import ir as llir

from . import ir
from .layout import Distribution, SliceLayout, distribute
from .nvptx_ops import I32, LoweringError
from .nvptx_reduce import _slot_bytes

State = tuple
Valid = Union[bool, llir.Value]
"""Whether an optional state is present: known at compile time, or an i1."""


def split_axis(dist: Distribution, axis: int) -> tuple[int, int, int, tuple[int, ...], int]:
    """How ``dist`` spreads dim ``axis``: ``(S, lane_shift, Tl, warp_bits, C)``, i.e.
    ``S`` registers a thread, then ``Tl`` lanes (lane-id bits from ``lane_shift`` up),
    then the warp-id bits ``warp_bits`` (lowest first), then ``C`` chunks of registers.

    Raises:
        LoweringError: a layout that walks the axis in another order (not a blocked
            layout or a slice of one).
    """

    def along(bases):
        out = []
        for i, v in enumerate(bases):
            if v[axis]:
                if any(c for d, c in enumerate(v) if d != axis):
                    raise LoweringError(f"scan along axis {axis}: the layout mixes it with other dims")
                out.append((i, v[axis]))
        return out

    regs, lanes, warps = along(dist.reg_bases), along(dist.lane_bases), along(dist.warp_bases)
    threads = [v for _, v in lanes + warps]
    lowest = min(threads) if threads else dist.shape[axis]
    low = sorted(v for _, v in regs if v < lowest)
    high = sorted(v for _, v in regs if v >= lowest)
    s, tl, w = 1 << len(low), 1 << len(lanes), 1 << len(warps)
    expected = ([1 << i for i in range(len(low))], [s << i for i in range(len(lanes))],
                [s * tl << i for i in range(len(warps))], [s * tl * w << i for i in range(len(high))])
    got = (low, [v for _, v in lanes], [v for _, v in warps], high)
    lane_bits = [i for i, _ in lanes]
    if got != expected or lane_bits != list(range(lane_bits[0], lane_bits[0] + len(lane_bits)) if lanes else []):
        raise LoweringError(f"scan along axis {axis}: unsupported layout {dist}")
    return s, lane_bits[0] if lanes else 0, tl, tuple(i for i, _ in warps), 1 << len(high)


class ScanCodegen:
    """Mixin of the NVPTX lowering: the ``scan`` op."""

    def lower_scan(self, op: ir.Op) -> None:
        """Lower ``scan`` (see the module docstring) and bind its results in the layout
        the plan gives them (their operand's)."""
        axis, reverse = op.attrs["axis"], op.attrs["reverse"]
        shape = op.operands[0].type.shape
        layout = self.plan.placed(op.results[0]) or self.plan.default(len(shape))
        dist = distribute(layout, shape)
        s, lane_shift, tl, warp_bits, chunks = split_axis(dist, axis)
        combine = self._region_combine(op)
        states = list(zip(*[self.regs(x, layout) for x in op.operands]))
        rows = distribute(SliceLayout(layout, axis), shape[:axis] + shape[axis + 1:])
        period = s * tl * (1 << len(warp_bits))
        # members[k][c][i]: the register of row k, chunk c, position i along the axis.
        members = [[[0] * s for _ in range(chunks)] for _ in range(rows.num_regs)]
        for j, off in enumerate(dist.reg_offsets):
            members[rows.reg_of_offset[off[:axis] + off[axis + 1:]]][off[axis] // period][off[axis] % s] = j
        order = list(range(chunks))[::-1] if reverse else list(range(chunks))
        lane_index = self._axis_lane_index(lane_shift, tl)
        out: list = [None] * dist.num_regs
        running: dict[tuple[int, int], list[State]] = {}
        totals: dict[tuple[int, int], State] = {}
        for k in range(rows.num_regs):
            for c in order:
                seq = members[k][c][::-1] if reverse else members[k][c]
                run = [states[seq[0]]]
                for j in seq[1:]:
                    run.append(combine(run[-1], states[j]))
                running[k, c] = run
                totals[k, c] = self._lane_scan(run[-1], lane_shift, tl, lane_index, reverse, combine)
        carries = self._carries(totals, rows, order, lane_shift, tl, lane_index, warp_bits, reverse, combine)
        for k in range(rows.num_regs):
            for c in order:
                before = self._lanes_before(totals[k, c], lane_shift, tl, lane_index, reverse)
                prefix, valid = self._merge(*carries[k, c], *before, combine)
                seq = members[k][c][::-1] if reverse else members[k][c]
                for j, own in zip(seq, running[k, c]):
                    out[j] = self._merge(prefix, valid, own, True, combine)[0]
        for i, value in enumerate(op.results):
            self.bind_regs(value, dist, [state[i] for state in out])

    # -- the combine ----------------------------------------------------------------------------
    def _region_combine(self, op: ir.Op) -> Callable[[State, State], State]:
        """The scan's combine region as a function of two states of scalar registers."""
        args, ops = op.attrs["args"], op.attrs["body"].ops

        def combine(a: State, c: State) -> State:
            self.scopes.append({})
            try:
                for v, x in zip(args, a + c):
                    self.bind_scalar(v, x)
                for inner in ops[:-1]:
                    self.lower_op(inner)
                return tuple(self.scalar(v) for v in ops[-1].operands)
            finally:
                self.scopes.pop()

        return combine

    def _merge(self, a: State, a_valid: Valid, c: State, c_valid: Valid,
               combine: Callable[[State, State], State]) -> tuple[State, Valid]:
        """``combine(a, c)`` where both states are present, else the one that is."""
        if a_valid is False:
            return c, c_valid
        if c_valid is False:
            return a, a_valid
        both = combine(a, c)
        b = self.b
        if a_valid is True and c_valid is True:
            return both, True
        if a_valid is True:
            return tuple(b.select(c_valid, x, y) for x, y in zip(both, a)), True
        if c_valid is True:
            return tuple(b.select(a_valid, x, y) for x, y in zip(both, c)), True
        picked = tuple(b.select(c_valid, b.select(a_valid, x, z), y) for x, y, z in zip(both, a, c))
        return picked, b.or_(a_valid, c_valid)

    # -- lanes ------------------------------------------------------------------------------------
    def _axis_lane_index(self, lane_shift: int, tl: int) -> llir.Value:
        """i32: this lane's index among the ``tl`` lanes along the scan axis."""
        key = ("scan_lane", lane_shift, tl)
        if key not in self._thread_cache:
            b = self.entry_b
            self._thread_cache[key] = b.and_(b.lshr(self.lane, llir.Constant(I32, lane_shift)),
                                             llir.Constant(I32, tl - 1))
        return self._thread_cache[key]

    def _from_earlier_lane(self, s: State, steps: int, lane_shift: int, tl: int, lane_index: llir.Value,
                           reverse: bool) -> tuple[State, llir.Value]:
        """The state of the lane ``steps`` earlier along the axis, and whether it exists."""
        b = self.b
        delta = llir.Constant(I32, steps << lane_shift)
        other = tuple(self.shuffle(x, "down" if reverse else "up", delta) for x in s)
        if reverse:
            return other, b.icmp_unsigned("<", lane_index, llir.Constant(I32, tl - steps))
        return other, b.icmp_unsigned(">=", lane_index, llir.Constant(I32, steps))

    def _lane_scan(self, s: State, lane_shift: int, tl: int, lane_index: llir.Value, reverse: bool,
                   combine) -> State:
        """Inclusive scan of one state per lane over the ``tl`` lanes of the axis."""
        steps = 1
        while steps < tl:
            other, valid = self._from_earlier_lane(s, steps, lane_shift, tl, lane_index, reverse)
            s = self._merge(other, valid, s, True, combine)[0]
            steps *= 2
        return s

    def _lanes_before(self, inclusive: State, lane_shift: int, tl: int, lane_index: llir.Value,
                      reverse: bool) -> tuple[State, Valid]:
        """The combined totals of the earlier lanes of this warp (absent in the first)."""
        if tl == 1:
            return inclusive, False
        return self._from_earlier_lane(inclusive, 1, lane_shift, tl, lane_index, reverse)

    # -- warps and chunks ------------------------------------------------------------------------
    def _carries(self, totals: dict, rows: Distribution, order: list[int], lane_shift: int, tl: int,
                 lane_index: llir.Value, warp_bits: tuple[int, ...], reverse: bool,
                 combine) -> dict[tuple[int, int], tuple[State, Valid]]:
        """Per (row, chunk): the combined state of every element of earlier chunks and,
        in this chunk, of earlier warps (absent for the first)."""
        b = self.b
        last_lane = None
        if tl > 1:
            mask = llir.Constant(I32, (tl - 1) << lane_shift)
            last_lane = b.and_(self.lane, b.not_(mask)) if reverse else b.or_(self.lane, mask)
        if not warp_bits:
            out = {}
            for k in range(rows.num_regs):
                carry: tuple[State, Valid] = ((), False)
                for c in order[:-1]:  # the last chunk's total carries into nothing
                    out[k, c] = carry
                    total = totals[k, c]
                    if last_lane is not None:
                        total = tuple(self.shuffle(x, "idx", last_lane) for x in total)
                    carry = self._merge(*carry, total, True, combine)
                out[k, order[-1]] = carry
            return out
        return self._carries_across_warps(totals, rows, order, tl, lane_index, warp_bits, reverse, combine)

    def _carries_across_warps(self, totals: dict, rows: Distribution, order: list[int], tl: int,
                              lane_index: llir.Value, warp_bits: tuple[int, ...], reverse: bool,
                              combine) -> dict[tuple[int, int], tuple[State, Valid]]:
        """`_carries` with warps on the axis: each warp's chunk totals through shared
        memory, slot ``(row * C + chunk) * W + warp``."""
        b = self.b
        warps, chunks = 1 << len(warp_bits), len(order)
        numel = 1
        for n in rows.shape:
            numel *= n
        units = numel * chunks * warps
        types = [x.type for x in next(iter(totals.values()))]
        offsets, size = [], 0
        for t in types:
            size = (size + 15) // 16 * 16
            offsets.append(size)
            size += units * _slot_bytes(t)
        self.reserve_shared(size)
        warp_index = self.compressed_warp_bits(warp_bits)
        if reverse:
            warp_index = b.sub(llir.Constant(I32, warps - 1), warp_index)
        writer = None
        if tl > 1:
            writer = b.icmp_unsigned("==", lane_index, llir.Constant(I32, 0 if reverse else tl - 1))

        def slot(k: int, c: int, w) -> llir.Value:
            row = b.mul(self.flat_index(rows, k), llir.Constant(I32, chunks))
            return b.add(b.mul(b.add(row, llir.Constant(I32, c)), llir.Constant(I32, warps)), w)

        # Replicas of a row write the same bits to the same slot.
        self.barrier_before_shared_write()
        with self._maybe_if(writer):
            for (k, c), total in totals.items():
                for x, off in zip(total, offsets):
                    self.smem_store(x, off, slot(k, c, warp_index), x.type)
        self.barrier()
        out = {}
        for k in range(rows.num_regs):
            # Units in scan order: chunk by chunk, warps in scan order within one
            # (`warp_index` counts from the first warp in scan order).
            before: list[tuple[State, Valid]] = []
            acc: tuple[State, Valid] = ((), False)
            for c in order:
                for w in range(warps):
                    before.append(acc)
                    unit = tuple(self.smem_load(off, slot(k, c, llir.Constant(I32, w)), t)
                                 for off, t in zip(offsets, types))
                    acc = self._merge(*acc, unit, True, combine)
            for i, c in enumerate(order):
                candidates = before[i * warps:(i + 1) * warps]
                state, valid = candidates[0]
                for w, (other, other_valid) in enumerate(candidates[1:], start=1):
                    mine = b.icmp_unsigned("==", warp_index, llir.Constant(I32, w))
                    if valid is False:  # only the very first unit has nothing before it
                        state, valid = other, b.icmp_unsigned("!=", warp_index, llir.Constant(I32, 0))
                        continue
                    state = tuple(b.select(mine, x, y) for x, y in zip(other, state))
                out[k, c] = (state, valid)
        return out
