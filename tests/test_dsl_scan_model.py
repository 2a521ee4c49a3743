"""The NVPTX scan lowering's algorithm, checked on CPU by running it on a SIMT model.

`nvptx_scan.ScanCodegen.lower_scan` builds LLVM IR through a handful of hooks (the
builder, ``shuffle``, shared-memory stores and loads, thread coordinates, the
combine). `_SimtModel` implements those hooks on torch tensors holding one value per
thread of a CTA, with PTX's ``shfl.sync`` semantics, so the lowering's own code runs
for every thread at once. The results must equal a sequential scan, for layouts that
put the scan axis in registers, lanes, warps and repeated chunks (with replicated
lanes and warps), forward and reverse, with a commutative combine (a sum) and a
non-commutative one (a running max with its index, ties taking the later element).
The GPU tests of test_dsl_scan.py run the real thing.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from llvmlite import ir as llir

from inductor_lite.dsl import ir
from inductor_lite.dsl.layout import default_blocked_layout, distribute
from inductor_lite.dsl.nvptx_reduce import flat_offset
from inductor_lite.dsl.nvptx_scan import ScanCodegen


class _Value:
    """One value per thread."""

    type = None

    def __init__(self, t: torch.Tensor):
        self.t = t


class _Builder:
    """The `llvmlite.ir.IRBuilder` calls the scan lowering makes, on `_Value`s."""

    def __init__(self, threads: int):
        self.threads = threads

    def v(self, x) -> torch.Tensor:
        return torch.full((self.threads,), x.constant) if isinstance(x, llir.Constant) else x.t

    def _op(f):
        return lambda self, a, b, name="": _Value(f(self.v(a), self.v(b)))

    add = _op(torch.add)
    sub = _op(torch.sub)
    mul = _op(torch.mul)
    and_ = _op(torch.bitwise_and)
    or_ = _op(torch.bitwise_or)
    lshr = _op(torch.bitwise_right_shift)

    def not_(self, a, name=""):
        return _Value(torch.bitwise_not(self.v(a)))

    def icmp_unsigned(self, op, a, b, name=""):
        f = {"==": torch.eq, "!=": torch.ne, "<": torch.lt, ">=": torch.ge}[op]
        return _Value(f(self.v(a), self.v(b)))

    def select(self, c, a, b, name=""):
        return _Value(torch.where(self.v(c).bool(), self.v(a), self.v(b)))


class _SimtModel(ScanCodegen):
    def __init__(self, layout, num_warps: int, inputs: dict, combine):
        self.threads = n = 32 * num_warps
        self.b = self.entry_b = _Builder(n)
        self.lane, self.warp = _Value(torch.arange(n) % 32), _Value(torch.arange(n) // 32)
        self._thread_cache = {}
        self.layout, self.inputs, self.py_combine = layout, inputs, combine
        self.plan = self
        self.shared: dict = {}
        self.pred = None
        self.outputs: dict = {}

    # the plan
    def placed(self, value):
        return self.layout

    def default(self, rank):
        return self.layout

    # thread coordinates and registers
    def coords(self, dist) -> torch.Tensor:
        t = torch.arange(self.threads)
        c = torch.zeros(self.threads, dist.rank, dtype=torch.int64)
        for source, bases in ((t % 32, dist.lane_bases), (t // 32, dist.warp_bases)):
            for i, basis in enumerate(bases):
                c ^= ((source >> i) & 1)[:, None] * torch.tensor(basis, dtype=torch.int64)
        return c

    def elements(self, dist, data: torch.Tensor, off) -> torch.Tensor:
        c = self.coords(dist) ^ torch.tensor(off, dtype=torch.int64)
        return data[tuple(c.T)]

    def regs(self, x, layout):
        dist = distribute(layout, x.type.shape)
        return [_Value(self.elements(dist, self.inputs[x.id], off)) for off in dist.reg_offsets]

    def bind_regs(self, value, dist, regs):
        self.outputs[value.id] = (dist, regs)

    def flat_index(self, dist, reg):
        strides = [1] * dist.rank
        for d in reversed(range(dist.rank - 1)):
            strides[d] = strides[d + 1] * dist.shape[d + 1]
        base = (self.coords(dist) * torch.tensor(strides, dtype=torch.int64)).sum(1)
        return _Value(base + flat_offset(dist, reg))

    def compressed_warp_bits(self, bits):
        acc = torch.zeros(self.threads, dtype=torch.int64)
        for k, bit in enumerate(bits):
            acc |= ((self.warp.t >> bit) & 1) << k
        return _Value(acc)

    # PTX's shfl.sync with the operands `ReduceCodegen.shuffle` passes
    def shuffle(self, x, mode, lane_arg):
        lane = torch.arange(self.threads) % 32
        d = self.b.v(lane_arg)
        if mode == "up":
            src = torch.where(lane - d < 0, lane, lane - d)
        elif mode == "down":
            src = torch.where(lane + d > 31, lane, lane + d)
        else:
            src = d & 31
        return _Value(x.t[torch.arange(self.threads) - lane + src])

    # shared memory: one dict per byte offset, slot -> value
    def reserve_shared(self, nbytes):
        pass

    def barrier(self):
        pass

    def barrier_before_shared_write(self):
        pass

    @contextlib.contextmanager
    def _maybe_if(self, pred):
        self.pred = None if pred is None else self.b.v(pred).bool()
        yield
        self.pred = None

    def smem_store(self, value, offset, slot, t):
        memory = self.shared.setdefault(offset, {})
        for i, (s, x) in enumerate(zip(self.b.v(slot).tolist(), self.b.v(value).tolist())):
            if self.pred is None or self.pred[i]:
                assert memory.setdefault(s, x) == x, "two threads wrote different values to one slot"
                memory[s] = x

    def smem_load(self, offset, slot, t):
        memory = self.shared[offset]
        return _Value(torch.tensor([memory[s] for s in self.b.v(slot).tolist()]))

    def _region_combine(self, op):
        return lambda a, c: tuple(_Value(x) for x in self.py_combine([v.t for v in a], [v.t for v in c]))


def _sum(a, c):
    return [a[0] + c[0]]


def _max_with_index(a, c):
    take = c[0] >= a[0]
    return [torch.where(take, c[0], a[0]), torch.where(take, c[1], a[1])]


def _sequential(combine, xs: list[torch.Tensor], axis: int, reverse: bool) -> list[torch.Tensor]:
    xs = [x.flip(axis) if reverse else x for x in xs]
    state = [x.select(axis, 0) for x in xs]
    out = [[s] for s in state]
    for i in range(1, xs[0].shape[axis]):
        state = combine(state, [x.select(axis, i) for x in xs])
        for o, s in zip(out, state):
            o.append(s)
    return [torch.stack(o, axis).flip(axis) if reverse else torch.stack(o, axis) for o in out]


# (shape, num_warps, vec, order, warp_order): the scan axis in registers, lanes, warps,
# chunks of registers beyond them, with replicated lanes (8 x 8 over 32 lanes) or warps.
LAYOUTS = [((64,), 1, 2, None, None), ((256,), 4, 1, None, None), ((2048,), 4, 4, None, None),
           ((2048,), 8, 1, None, None), ((8, 16), 1, 4, None, None), ((8, 8), 4, 1, None, None),
           ((4, 128), 2, 2, (0, 1), None), ((2, 512), 8, 4, None, (0, 1)), ((16, 64), 4, 1, None, (1, 0)),
           ((32, 8), 8, 1, (0, 1), (1, 0)), ((4, 1024), 8, 2, None, (0, 1))]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_scan_lowering_on_a_simt_model(layout, reverse):
    shape, num_warps, vec, order, warp_order = layout
    blocked = default_blocked_layout(shape, num_warps, vec=vec, order=order, warp_order=warp_order)
    gen = torch.Generator().manual_seed(len(shape) * 100 + num_warps)
    for axis in range(len(shape)):
        for combine, nvals in ((_sum, 1), (_max_with_index, 2)):
            xs = [torch.randint(-5, 6, shape, generator=gen) for _ in range(nvals)]
            if nvals == 2:  # the index along the axis
                xs[1] = torch.arange(shape[axis]).reshape([-1 if d == axis else 1 for d in range(len(shape))])
                xs[1] = xs[1].expand(shape).contiguous()
            operands = [ir.Value(ir.BlockType(ir.int64, shape)) for _ in xs]
            results = [ir.Value(ir.BlockType(ir.int64, shape)) for _ in xs]
            model = _SimtModel(blocked, num_warps, {v.id: x for v, x in zip(operands, xs)}, combine)
            model.lower_scan(ir.Op("scan", operands, results, {"axis": axis, "reverse": reverse}))
            for r, want in zip(results, _sequential(combine, xs, axis, reverse)):
                dist, regs = model.outputs[r.id]
                for off, reg in zip(dist.reg_offsets, regs):
                    assert torch.equal(reg.t, model.elements(dist, want, off)), (blocked, axis, off)
