"""Reductions along an axis, and layout conversions through shared memory.

A reduction runs in three steps over the input's `Distribution`: combine the
registers of each thread that share the other coordinates (a balanced tree, in
register order); butterfly-shuffle
(``shfl.sync.bfly``) over the lane bits that walk the axis; then, if warps split the
axis, every warp writes its partial to shared memory, a barrier, and every thread
reads and combines all partials of its rows in warp order. The result has the
``slice`` layout of the input, and every thread that holds a row holds the same
bits.

max and min over fp16/bf16 on sm_80+ do the first step on the 16-bit values
themselves, two to a 32-bit register (``max.NaN.bf16x2``: half the instructions and no
conversions), then go on in fp32; either way the result is one of the inputs (or NaN),
so the bits are the same as combining in fp32. A min over ``where(c, i, n)``, with
``i`` the index along the axis (an ``arange(0, ...)`` broadcast into place) and ``n``
a constant no smaller than the axis, is the first index where ``c`` holds (else
``n``): each thread finds its first with one select per value, immediates for the
register offsets, and adds its own offset once, instead of materialising every index
and taking minima.

A Welford reduction of raw values (``m2`` the constant 0: ``dl.welford(x, 0.0, w,
axis)``) does the first step in two passes over the thread's registers: the weighted
mean, then the sum of weighted squared deviations from it. That is the exact state
of those values, found with a few instructions a value, where combining them one at
a time costs a division each; the threads' states then combine as any others.

The reduction state is a tuple of scalars: ``(value,)`` for sum/prod/max/min,
``(value, index)`` for argmax/argmin (ties go to the lower index; NaN wins, as in
torch), ``(mean, m2, weight)`` for Welford (the parallel combine of Chan et al.,
"Updating Formulae and a Pairwise Algorithm for Computing Sample Variances", 1979, as
in TorchInductor's ``welford_combine``). Non-commutative combines see their operands
in lane order so that all lanes compute identical bits.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable, Optional, Sequence

from llvmlite import ir as llir

from . import ir
from .layout import Distribution, SliceLayout, distribute
from .nvptx_ops import F16, F32, F64, FP_CONTRACT, I1, I8, I16, I32, I64, LoweringError

State = tuple
Combine = Callable[[State, State], State]


SUM_CHAINS = 4
"""Independent accumulator chains of a thread's sum of squared deviations
(`_two_pass_state`): enough to issue an fma each cycle over the 4-cycle fp32 latency of
sm_80 and sm_90."""

LANE_COMBINE_MIN_WARPS = 8
"""Partials from this many warps on are combined by lanes and shuffles, not each by
every thread (`ReduceCodegen._combine_across_warps`): with fewer, the thread's own
combines cost no more than the shuffles."""


def _row_major_strides(shape: Sequence[int]) -> list[int]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return strides[::-1]


def flat_offset(dist: Distribution, reg: int) -> int:
    """Row-major flat index of register ``reg``'s compile-time coordinates."""
    return sum(o * s for o, s in zip(dist.reg_offsets[reg], _row_major_strides(dist.shape)))


def _lane_bits(dist: Distribution) -> set[int]:
    """Bits of the row-major flat index that the lane id walks (one per non-replica lane bit)."""
    strides = _row_major_strides(dist.shape)
    return {sum(c * s for c, s in zip(basis, strides)).bit_length() - 1 for basis in dist.lane_bases if any(basis)}


def swizzle_map(src: Distribution, dst: Distribution, slot_bytes: int) -> dict[int, int]:
    """An XOR swizzle of shared-memory slots for a conversion from ``src`` to ``dst``:
    ``{bit h: bank bit t}`` means slot ``i`` goes to ``i ^ (((i >> h) & 1) << t)``.

    Shared memory has 32 banks of 4 bytes. Writing in ``src`` order and reading in
    ``dst`` order at the plain row-major slot makes one of them walk a column (a
    transpose): lanes 32 apart in the slot index hit one bank, and the access
    serialises 32 ways. XORing each lane-walked bit above the bank bits into a bank
    bit that no other lane bit of that distribution uses gives every lane of a warp
    its own bank on both sides (the idea of Triton's swizzled shared layouts). Only
    bank bits change, from bits above them, so the map is a bijection of ``[0, n)``.
    """
    word_shift = max(0, 2 - (slot_bytes.bit_length() - 1))  # slot-index bits inside one 4-byte word
    bank_bits = set(range(word_shift, word_shift + 5 - max(0, (slot_bytes.bit_length() - 1) - 2)))
    lanes = [_lane_bits(src), _lane_bits(dst)]
    used = [bits & bank_bits for bits in lanes]
    out = {}
    for h in sorted((lanes[0] | lanes[1]) - bank_bits):
        if h < max(bank_bits):
            continue
        sides = [i for i in (0, 1) if h in lanes[i]]
        free = sorted(bank_bits - set().union(*(used[i] for i in sides)))
        if free:
            out[h] = free[0]
            for i in sides:
                used[i].add(free[0])
    return out


def _swizzle(index: int, swizzle: dict[int, int]) -> int:
    for h, t in swizzle.items():
        index ^= ((index >> h) & 1) << t
    return index


def _slot_bytes(t: llir.Type) -> int:
    if t in (I64, F64) or isinstance(t, llir.PointerType):
        return 8
    if t in (I16, F16):
        return 2
    if t in (I1, I8):
        return 1
    return 4


def _thread_groups(values: list, src: Distribution, axis: int, out: Distribution) -> list[list]:
    """A thread's registers grouped by output register: those with equal coordinates
    off ``axis``, in register order."""
    groups: dict[tuple[int, ...], list] = {}
    for j, v in enumerate(values):
        off = src.reg_offsets[j]
        groups.setdefault(off[:axis] + off[axis + 1:], []).append(v)
    return [groups[out.reg_offsets[k]] for k in range(out.num_regs)]


def _pairwise(states: list[State], combine: Combine) -> State:
    """Combine ``states`` as a balanced tree of neighbours, order kept: a dependency
    chain of log2(n) combines instead of n - 1 (a thread's registers are reduced while
    its loads are the only other work in flight), and pairwise sums round less."""
    while len(states) > 1:
        paired = [combine(states[i], states[i + 1]) for i in range(0, len(states) - 1, 2)]
        states = paired + states[len(paired) * 2:]
    return states[0]


def _equal_constants(a: llir.Value, c: llir.Value) -> bool:
    return isinstance(a, llir.Constant) and isinstance(c, llir.Constant) and a.constant == c.constant


class ReduceCodegen:
    """Mixin of the NVPTX lowering: ``reduce``/``argreduce``/``welford_combine``, and
    `convert` (any layout or shape of the same size -> any other, via shared memory)."""

    # -- shared memory --------------------------------------------------------------------
    def smem_at(self, byte_offset: int, index: llir.Value, t: llir.Type) -> llir.Value:
        base = self.b.gep(self.shared_base(), [llir.Constant(I32, self.scratch_offset + byte_offset)],
                          source_etype=I8)
        return self.b.gep(base, [index], source_etype=t)

    def smem_store(self, value, byte_offset: int, index, t) -> None:
        v = self.b.zext(value, I8) if value.type == I1 else value
        self.b.store(v, self.smem_at(byte_offset, index, v.type), align=_slot_bytes(v.type))

    def smem_load(self, byte_offset: int, index, t: llir.Type) -> llir.Value:
        st = I8 if t == I1 else t
        v = self.b.load(self.smem_at(byte_offset, index, st), typ=st, align=_slot_bytes(st))
        return self.b.icmp_unsigned("!=", v, llir.Constant(I8, 0)) if t == I1 else v

    def flat_index(self, dist: Distribution, reg: int) -> llir.Value:
        off = flat_offset(dist, reg)
        base = self.flat_base(dist)
        return self.b.add(base, llir.Constant(I32, off)) if off else base

    def _swizzled_indices(self, dist: Distribution, swizzle: dict[int, int]) -> list[llir.Value]:
        """Every register's shared-memory slot under ``swizzle`` (see `swizzle_map`).
        The lane/warp part and the register part of the flat index use disjoint bits and
        the swizzle is linear over XOR, so the thread's part is swizzled once and each
        register's part is a constant."""
        base = self.flat_base(dist)
        if swizzle:
            b, moved = self.b, base
            for h, t in swizzle.items():
                bit = b.and_(b.lshr(base, llir.Constant(I32, h)), llir.Constant(I32, 1))
                moved = b.xor(moved, b.shl(bit, llir.Constant(I32, t)))
            base = moved
        out = []
        for reg in range(dist.num_regs):
            off = _swizzle(flat_offset(dist, reg), swizzle)
            out.append(self.b.xor(base, llir.Constant(I32, off)) if off else base)
        return out

    def convert(self, regs: list[llir.Value], src: Distribution, dst: Distribution) -> list[llir.Value]:
        """Move a block from distribution ``src`` to ``dst`` (same element count; the
        shapes may differ, which is a row-major reshape) through shared memory.

        One scalar ``st.shared``/``ld.shared`` per register, at slots swizzled
        (`swizzle_map`) so that neither side's warps conflict on banks. The layout
        plan (`nvptx_layouts`) keeps loads, elementwise chains, reductions and
        ``[:, None]`` broadcasts in one layout; conversions come from ``reshape``,
        from mixing a 1-D loaded block with a 1-D reduction result, and from an access
        whose own layout follows another axis than its neighbours' (one side of a
        transpose in a tiled kernel)."""
        n_src = 1
        for s in src.shape:
            n_src *= s
        n_dst = 1
        for s in dst.shape:
            n_dst *= s
        if n_src != n_dst:
            raise LoweringError(f"cannot convert a block of shape {src.shape} to shape {dst.shape}")
        t = regs[0].type
        self.reserve_shared(n_src * _slot_bytes(t))
        swizzle = swizzle_map(src, dst, _slot_bytes(t))
        self.barrier_before_shared_write()
        for r, slot in zip(regs, self._swizzled_indices(src, swizzle)):
            self.smem_store(r, 0, slot, t)
        self.barrier()
        return [self.smem_load(0, slot, t) for slot in self._swizzled_indices(dst, swizzle)]

    # -- shuffles -------------------------------------------------------------------------
    def shfl_xor(self, x: llir.Value, lane_mask: int) -> llir.Value:
        """``x`` from lane ``lane ^ lane_mask`` of the same warp (any scalar type)."""
        return self.shuffle(x, "bfly", llir.Constant(I32, lane_mask))

    def shuffle(self, x: llir.Value, mode: str, lane_arg: llir.Value) -> llir.Value:
        """PTX ``shfl.sync.{mode}`` of ``x`` (any scalar type) over the whole warp:
        ``bfly`` reads lane ``lane ^ lane_arg``, ``idx`` lane ``lane_arg``, ``up`` lane
        ``lane - lane_arg`` and ``down`` lane ``lane + lane_arg``; a lane whose source is
        outside the warp (``up``/``down``) gets its own ``x``."""
        b = self.b
        t = x.type
        if isinstance(x, llir.Constant):  # the same in every lane
            return x
        if t in (I64, F64):
            bits = b.bitcast(x, I64) if t == F64 else x
            lo = self.shuffle(b.trunc(bits, I32), mode, lane_arg)
            hi = self.shuffle(b.trunc(b.lshr(bits, llir.Constant(I64, 32)), I32), mode, lane_arg)
            out = b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), llir.Constant(I64, 32)))
            return b.bitcast(out, F64) if t == F64 else out
        if t == F32:
            return b.bitcast(self.shuffle(b.bitcast(x, I32), mode, lane_arg), F32)
        if t == F16:
            return b.bitcast(self.shuffle(b.bitcast(x, I16), mode, lane_arg), F16)
        if t in (I1, I8, I16):
            return b.trunc(self.shuffle(b.zext(x, I32), mode, lane_arg), t)
        if t != I32:
            raise LoweringError(f"cannot shuffle a value of type {t}")
        # The last operand packs the segment mask (0: the whole warp) and the clamp lane:
        # 0 for `up` (nothing below lane 0), 31 for the others.
        clamp = llir.Constant(I32, 0 if mode == "up" else 31)
        args = [llir.Constant(I32, -1), x, lane_arg, clamp]
        return self.call(f"llvm.nvvm.shfl.sync.{mode}.i32", I32, args)

    # -- the three steps ------------------------------------------------------------------------
    def _reduce_across_threads(self, result: list[State], src: Distribution, axis: int, out: Distribution,
                               combine: Combine, commutative: bool) -> list[State]:
        """Steps 2 and 3: shuffles over the lane bits of ``axis``, then shared memory
        across warps; ``result`` holds each thread's combined registers."""
        for bit, basis in enumerate(src.lane_bases):
            if basis[axis]:
                result = [self._shuffle_combine(s, 1 << bit, combine, commutative) for s in result]
        warp_bits = [bit for bit, basis in enumerate(src.warp_bases) if basis[axis]]
        if warp_bits:
            result = self._combine_across_warps(result, out, warp_bits, combine, commutative)
        return result

    def _shuffle_combine(self, s: State, lane_mask: int, combine: Combine, commutative: bool) -> State:
        other = tuple(self.shfl_xor(c, lane_mask) for c in s)
        if commutative:
            return combine(s, other)
        upper = self.b.icmp_unsigned("!=", self.b.and_(self.lane, llir.Constant(I32, lane_mask)),
                                     llir.Constant(I32, 0))
        lo = tuple(self.b.select(upper, o, c) for c, o in zip(s, other))
        hi = tuple(self.b.select(upper, c, o) for c, o in zip(s, other))
        return combine(lo, hi)

    def _combine_across_warps(self, result: list[State], out: Distribution, warp_bits: list[int],
                              combine: Combine, commutative: bool) -> list[State]:
        """Step 3: each warp's partials through shared memory. A thread then combines
        all of them itself; or, from `LANE_COMBINE_MIN_WARPS` partials on where the
        output is the same in each group of that many lanes, lane ``i`` reads partial
        ``i`` and shuffles combine them: log2(n) combines a thread instead of n - 1
        (LayerNorm bf16's streamed kernel over 16 warps: 995 PTX instructions an
        iteration instead of 1064).
        Both build the same tree, so the bits are the same."""
        b = self.b
        groups = 1 << len(warp_bits)
        numel = 1
        for s in out.shape:
            numel *= s
        types = [c.type for c in result[0]]
        # Components that are constants (a Welford weight) are the same everywhere.
        constant = [all(isinstance(s[i], llir.Constant) for s in result) for i in range(len(types))]
        offsets, size = [], 0
        for t in types:
            size = (size + 15) // 16 * 16
            offsets.append(size)
            size += numel * groups * _slot_bytes(t)
        self.reserve_shared(size)
        warp_index = self.compressed_warp_bits(tuple(warp_bits))
        # One writer per (row, warp): lanes and warps that hold copies stay quiet.
        axis_warp_mask = sum(1 << w for w in warp_bits)
        quiet_lanes = out.replica_lane_mask
        quiet_warps = out.replica_warp_mask & ~axis_warp_mask
        writer = self.thread_predicate(quiet_lanes, quiet_warps)
        self.barrier_before_shared_write()
        with self._maybe_if(writer):
            for k, s in enumerate(result):
                slot = b.add(b.mul(self.flat_index(out, k), llir.Constant(I32, groups)), warp_index)
                for c, off, fixed in zip(s, offsets, constant):
                    if not fixed:
                        self.smem_store(c, off, slot, c.type)
        self.barrier()
        lanes = groups >= LANE_COMBINE_MIN_WARPS and (groups - 1) & ~out.replica_lane_mask == 0
        pick = b.and_(self.lane, llir.Constant(I32, groups - 1)) if lanes else None

        def partial(mine: State, slot: llir.Value) -> State:
            return tuple(c if fixed else self.smem_load(off, slot, t)
                         for c, t, off, fixed in zip(mine, types, offsets, constant))

        combined = []
        for k, mine in enumerate(result):
            row = b.mul(self.flat_index(out, k), llir.Constant(I32, groups))
            if lanes:
                state = partial(mine, b.add(row, pick))
                for bit in range(len(warp_bits)):
                    state = self._shuffle_combine(state, 1 << bit, combine, commutative)
            else:
                state = _pairwise([partial(mine, b.add(row, llir.Constant(I32, g))) for g in range(groups)], combine)
            combined.append(state)
        return combined

    def _maybe_if(self, pred):
        return contextlib.nullcontext() if pred is None else self.b.if_then(pred)

    # -- combines -------------------------------------------------------------------------------
    def _compute_type(self, elem: ir.DType) -> ir.DType:
        return ir.float32 if self.is_half(elem) else elem

    def _reduce_combine(self, kind: str, t: ir.DType) -> tuple[Combine, bool]:
        if kind in ("sum", "prod"):
            if t.kind == "bool":
                raise LoweringError(f"{kind} over bool: cast to an integer type first")
            op = "add" if kind == "sum" else "mul"
        elif kind in ("max", "min"):
            op = "maximum" if kind == "max" else "minimum"
        else:
            raise LoweringError(f"unknown reduction {kind!r}")
        return (lambda a, c: (self.binary(op, a[0], c[0], t),)), True

    def _arg_combine(self, kind: str, t: ir.DType) -> Combine:
        b = self.b
        op = ">" if kind == "argmax" else "<"

        def combine(a: State, c: State) -> State:
            (va, ia), (vc, ic) = a, c
            if t.is_floating:
                a_nan = b.fcmp_unordered("uno", va, va)
                c_nan = b.fcmp_unordered("uno", vc, vc)
                better = b.or_(b.fcmp_ordered(op, va, vc), b.and_(a_nan, b.not_(c_nan)))
                equal = b.or_(b.fcmp_ordered("==", va, vc), b.and_(a_nan, c_nan))
            else:
                cmp = b.icmp_signed if t.is_signed else b.icmp_unsigned
                better = cmp(op, va, vc)
                equal = b.icmp_unsigned("==", va, vc)
            take_a = b.or_(better, b.and_(equal, b.icmp_signed("<", ia, ic)))
            return b.select(take_a, va, vc), b.select(take_a, ia, ic)

        return combine

    def _welford_combine(self) -> Combine:
        b = self.b

        def combine(a: State, c: State) -> State:
            (mean_a, m2_a, w_a), (mean_c, m2_c, w_c) = a, c
            t = mean_a.type
            if _equal_constants(w_a, w_c) and w_a.constant > 0:
                # Equal weights known at compile time (raw values, no mask): the mean of
                # the means, no division, and the same bits in either order.
                delta = b.fsub(mean_c, mean_a)
                mean = b.fmul(b.fadd(mean_a, mean_c), llir.Constant(t, 0.5))
                spread = b.fmul(b.fmul(delta, delta), llir.Constant(t, w_a.constant / 2))
                return mean, b.fadd(b.fadd(m2_a, m2_c), spread), llir.Constant(t, 2 * w_a.constant)
            zero = llir.Constant(t, 0.0)
            delta = b.fsub(mean_c, mean_a)
            w = b.fadd(w_a, w_c)
            w_c_over_w = b.select(b.fcmp_ordered("==", w, zero), zero, b.fdiv(w_c, w))
            mean = b.fadd(mean_a, b.fmul(delta, w_c_over_w))
            m2 = b.fadd(b.fadd(m2_a, m2_c), b.fmul(b.fmul(b.fmul(delta, delta), w_a), w_c_over_w))
            return mean, m2, w

        return combine

    # -- ops ----------------------------------------------------------------------------------------
    def lower_reduction(self, op: ir.Op) -> None:
        """Lower ``reduce``/``argreduce``/``welford_combine`` and bind its results."""
        axis = op.attrs.get("axis")
        xs = op.operands
        if op.opcode == "welford_combine" and axis is None:
            self._lower_welford_elementwise(op)
            return
        if op.opcode == "welford_combine" and len(xs) != 3:
            raise LoweringError(f"welford_combine along an axis takes (mean, m2, weight), got {len(xs)} operands")
        in_shape = xs[0].type.shape
        if not 0 <= axis < len(in_shape):
            raise LoweringError(f"{op.opcode} axis {axis} out of range for shape {in_shape}")
        layout = next((self.plan.placed(x) for x in xs if self.plan.placed(x) is not None), None)
        layout = layout or self.plan.default(len(in_shape))
        src = distribute(layout, in_shape)
        out_layout = SliceLayout(layout, axis)
        out_shape = op.results[0].type.shape
        out = distribute(out_layout, out_shape)
        elem = xs[0].type.element
        combine, commutative = self._combine_of(op, self._compute_type(elem))
        partials = self._thread_partials(op, layout, src, axis, out, combine)
        result = self._reduce_across_threads(partials, src, axis, out, combine, commutative)
        if op.opcode == "argreduce":
            columns = [[s[1] for s in result]]
        else:
            columns = [[self.from_compute(c, elem) for c in col] for col in zip(*result)]
        for value, regs in zip(op.results, columns):
            self.bind_result(value, out_layout, list(regs))

    def _combine_of(self, op: ir.Op, t: ir.DType) -> tuple[Combine, bool]:
        """The state combine of a reduction op over compute type ``t``, and whether it
        is commutative (else shuffles order its operands by lane)."""
        if op.opcode == "reduce":
            return self._reduce_combine(op.attrs["combine"], t)
        if op.opcode == "argreduce":
            kind = op.attrs["combine"]
            if kind not in ("argmax", "argmin"):
                raise LoweringError(f"unknown argreduce {kind!r}")
            return self._arg_combine(kind, t), True
        if not t.is_floating:
            raise LoweringError("welford_combine needs float operands")
        # Raw values of a constant weight combine symmetrically (see _welford_combine).
        return self._welford_combine(), self._raw_values(op) and self._is_constant(op.operands[2])

    def _thread_partials(self, op: ir.Op, layout, src: Distribution, axis: int, out: Distribution,
                         combine: Combine) -> list[State]:
        """Step 1: each thread's registers combined, one state per output register. The
        special cases of the module docstring (a first-index search; max/min over half
        values on sm_80+; Welford of raw values) have their own in-thread code; the
        rest is a balanced tree of ``combine``."""
        kind = op.attrs.get("combine")
        x = op.operands[0]
        first = self._first_index_pattern(x, axis) if kind == "min" else None
        if first is not None:
            cond, sentinel = first
            base = self.thread_coord(src, axis)
            offsets = [src.reg_offsets[j][axis] for j in range(src.num_regs)]
            groups = _thread_groups(list(zip(offsets, self.regs(cond, layout))), src, axis, out)
            return [(self._first_true(group, base, sentinel),) for group in groups]
        half = self._widened_half(x) if kind in ("max", "min") and self.cc >= (8, 0) else None
        if half is not None:
            groups = _thread_groups(self.regs(half, layout), src, axis, out)
            return [(self._packed_extreme(g, kind, half.type.element),) for g in groups]
        elem = x.type.element
        states = list(zip(*[[self.to_compute(r, elem) for r in self.regs(v, layout)] for v in op.operands]))
        if op.opcode == "argreduce":
            coord = self.thread_coord(src, axis)
            states = [s + (self.b.add(coord, llir.Constant(I32, src.reg_offsets[j][axis])),)
                      for j, s in enumerate(states)]
        groups = _thread_groups(states, src, axis, out)
        if op.opcode == "welford_combine" and self._raw_values(op):
            # A rematerialised x is widened again for the deviations, not kept live.
            again = (_thread_groups(self.regs(x, layout), src, axis, out) if x.id in self.remat
                     else [[v for v, _, _ in g] for g in groups])
            return [self._two_pass_state(g, xs) for g, xs in zip(groups, again)]
        return [_pairwise(g, combine) for g in groups]

    def _first_index_pattern(self, x: ir.Value, axis: int):
        """(c, n) if ``x`` is ``where(c, i, n)`` over int32 with ``i`` the index along
        ``axis`` and ``n`` a constant at least the axis' size (see the module
        docstring), else None."""
        op = self.defs.get(x.id)
        if op is None or op.opcode != "select" or x.type.element != ir.int32:
            return None
        cond, index, fill = op.operands
        fill_op = self.defs.get(fill.id)
        if fill_op is None or fill_op.opcode != "constant" or fill_op.attrs["value"] < x.type.shape[axis]:
            return None
        return (cond, int(fill_op.attrs["value"])) if self._is_axis_index(index, axis) else None

    def _is_axis_index(self, v: ir.Value, axis: int) -> bool:
        """``v[..., i, ...] == i`` along ``axis``: an ``arange(0, n)`` brought into
        place by ``expand_dims`` and ``broadcast`` (which keep its extent)."""
        dim, extent = axis, v.type.shape[axis]
        while True:
            op = self.defs.get(v.id)
            if op is None:
                return False
            if op.opcode == "arange":
                return op.attrs["start"] == 0 and dim == 0 and v.type.shape[0] == extent
            if op.opcode == "broadcast":
                v = op.operands[0]
                if v.type.shape[dim] != extent:
                    return False
            elif op.opcode == "expand_dims":
                new = op.attrs["axis"] % len(v.type.shape)
                if new == dim:
                    return False
                dim -= new < dim
                v = op.operands[0]
            else:
                return False

    def _first_true(self, group: list[tuple[int, llir.Value]], base: llir.Value, sentinel: int) -> llir.Value:
        """The least ``base + offset`` over a thread's (offset, condition) pairs whose
        condition holds, else ``sentinel``: a chain of selects from the last offset."""
        b = self.b
        idx = llir.Constant(I32, -1)
        for offset, cond in sorted(group, key=lambda p: p[0], reverse=True):
            idx = b.select(cond, llir.Constant(I32, offset), idx)
        found = b.icmp_signed(">=", idx, llir.Constant(I32, 0))
        return b.select(found, b.add(idx, base), llir.Constant(I32, sentinel))

    def _widened_half(self, x: ir.Value):
        """The fp16/bf16 value that ``x`` widens to fp32 (the frontend's cast before a
        reduction over half values), or None."""
        op = self.defs.get(x.id)
        if op is None or op.opcode != "cast" or x.type.element != ir.float32:
            return None
        source = op.operands[0]
        return source if self.is_half(source.type.element) else None

    def _packed_extreme(self, regs: list[llir.Value], kind: str, elem: ir.DType) -> llir.Value:
        """max or min (NaN-propagating) of one thread's fp16/bf16 registers, as fp32: a
        tree of ``max.NaN.{bf16x2,f16x2}`` over pairs packed in 32-bit registers, then
        the last pair's halves (and any odd one out) in fp32. Inline PTX: LLVM would
        scalarise the vector intrinsic and widen each scalar to fp32."""
        b = self.b
        bits = [r if r.type == I16 else b.bitcast(r, I16) for r in regs]
        asm = llir.InlineAsm(llir.FunctionType(I32, [I32, I32]),
                             f"{kind}.NaN.{'f16x2' if elem == ir.float16 else 'bf16x2'} $0, $1, $2;", "=r,r,r")
        sixteen = llir.Constant(I32, 16)
        pairs = [(b.or_(b.zext(bits[i], I32), b.shl(b.zext(bits[i + 1], I32), sixteen)),)
                 for i in range(0, len(bits) - 1, 2)]
        halves = bits[len(pairs) * 2:]
        if pairs:
            (v,) = _pairwise(pairs, lambda a, c: (b.call(asm, [a[0], c[0]]),))
            halves = [b.trunc(v, I16), b.trunc(b.lshr(v, sixteen), I16)] + halves
        combine, _ = self._reduce_combine(kind, ir.float32)
        as_f32 = [(self.to_f32(h if elem != ir.float16 else b.bitcast(h, F16), elem),) for h in halves]
        return _pairwise(as_f32, combine)[0]

    def _is_constant(self, v: ir.Value, value: Optional[float] = None) -> bool:
        """``v`` is a constant block (equal to ``value``, if given)."""
        op = self.defs.get(v.id)
        return op is not None and op.opcode == "constant" and (value is None or op.attrs["value"] == value)

    def _raw_values(self, op: ir.Op) -> bool:
        """A Welford reduction of raw values: m2 is the constant 0."""
        return self._is_constant(op.operands[1], 0.0)

    def _two_pass_state(self, group: list[State], xs: list[llir.Value]) -> State:
        """The Welford state (mean, m2, weight) of a thread's (x, 0, w) registers: the
        weighted mean (a pairwise sum, in register order), then the weighted squared
        deviations from it (0, 0, 0 if every weight is 0), of ``xs`` (the same x
        values, possibly widened anew), summed in `SUM_CHAINS` chains over the
        registers in turn and then pairwise: a square added to a chain contracts to
        one fma, where a tree of squares takes a multiply and an add for half of
        them."""
        b = self.b
        t = group[0][0].type
        zero = llir.Constant(t, 0.0)

        def add(a: llir.Value, c: llir.Value) -> llir.Value:
            return b.fadd(a, c, flags=FP_CONTRACT)

        def pairwise_sum(values: list[llir.Value]) -> llir.Value:
            return _pairwise([(v,) for v in values], lambda a, c: (add(a[0], c[0]),))[0]

        def chained_sum(values: list[llir.Value]) -> llir.Value:
            return pairwise_sum([functools.reduce(add, values[i::SUM_CHAINS])
                                 for i in range(min(SUM_CHAINS, len(values)))])

        if all(isinstance(w, llir.Constant) for _, _, w in group):  # e.g. 1.0: no mask
            weight = llir.Constant(t, sum(w.constant for _, _, w in group))
        else:
            weight = pairwise_sum([w for _, _, w in group])
        weighted = pairwise_sum([b.fmul(x, w, flags=FP_CONTRACT) for x, _, w in group])
        mean = b.select(b.fcmp_ordered("==", weight, zero), zero, b.fdiv(weighted, weight))
        deviations = [b.fsub(x, mean, flags=FP_CONTRACT) for x in xs]
        m2 = chained_sum([b.fmul(b.fmul(d, d, flags=FP_CONTRACT), w, flags=FP_CONTRACT)
                          for d, (_, _, w) in zip(deviations, group)])
        return mean, m2, weight

    def _lower_welford_elementwise(self, op: ir.Op) -> None:
        if len(op.operands) != 6:
            raise LoweringError(f"elementwise welford_combine takes 6 operands, got {len(op.operands)}")
        layout = self.plan.placed(op.results[0])
        elem = op.operands[0].type.element
        cols = [[self.to_compute(r, elem) for r in self.operand_regs(x, layout)] for x in op.operands]
        combine = self._welford_combine()
        out = [combine(tuple(c[i] for c in cols[:3]), tuple(c[i] for c in cols[3:])) for i in range(len(cols[0]))]
        for value, col in zip(op.results, zip(*out)):
            self.bind_result(value, layout, [self.from_compute(c, elem) for c in col])

    def to_compute(self, x: llir.Value, elem: ir.ElementType) -> llir.Value:
        return self.to_f32(x, elem) if self.is_half(elem) else x

    def from_compute(self, x: llir.Value, elem: ir.ElementType) -> llir.Value:
        return self.from_f32(x, elem) if self.is_half(elem) else x

