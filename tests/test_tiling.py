"""2-D tiled pointwise kernels: the tiling choice (`scheduler.tiling`), the kernels
end to end against eager (CPU interpreter, and CUDA marked `gpu`), and the shared
memory swizzle the NVPTX lowering moves a tile between layouts with."""

import pytest
import torch
import torch.nn.functional as F

from inductor_lite.dsl.layout import _combine, default_blocked_layout, distribute
from inductor_lite.dsl.nvptx_reduce import _row_major_strides, _swizzle, swizzle_map
from inductor_lite.scheduler.dependencies import FLAT
from inductor_lite.scheduler.tiling import Tiling, choose_tiling, memory_order_placements, stride_hint
from test_codegen import build
from test_reductions import device, fresh, run_compiled  # noqa: F401  (fixtures used by every test here)
from test_scheduler import kernel_groups, schedule

PATTERNS = {
    "transpose_add": (lambda x: x.t().contiguous() + 1, [(67, 130)]),
    "transpose_add_other": (lambda x, y: x.t() + y, [(40, 50), (50, 40)]),
    "permute_021": (lambda x: x.permute(0, 2, 1).contiguous() * 2, [(3, 40, 24)]),
    "permute_201": (lambda x: x.permute(2, 0, 1) + 1, [(17, 33, 20)]),
    "to_channels_last": (lambda x: x.contiguous(memory_format=torch.channels_last).relu(), [(2, 20, 9, 7)]),
    "conv_weight_to_channels_last": (lambda w: w.contiguous(memory_format=torch.channels_last) * 2,
                                     [(24, 20, 3, 3)]),
    "size_one_dim": (lambda x: x.permute(2, 1, 0).contiguous() - 1, [(30, 1, 40)]),
    "permuted_layout_op": (lambda x: x.transpose(-1, -2) * 2, [(3, 40, 24)]),  # the output keeps the layout
    "permuted_layout_cast": (lambda x: x.transpose(-1, -2).to(torch.float64), [(3, 40, 24)]),
    "row_values": (lambda x, r, b: x * r + b, [(3, 40, 300), (3, 40, 1), (300,)]),
    "row_values_padded_output": (lambda x, r: F.pad(x * r, (0, 7)), [(40, 300), (40, 1)]),
    # padded rows too: the row values' loads past the last row stay masked
    "row_values_padded_rows": (lambda x, r: F.pad(x * r, (0, 7, 2, 5)), [(40, 300), (40, 1)]),
}


def _tiling(fn, *shapes):
    (group,) = kernel_groups(schedule(fn, *[torch.randn(s) for s in shapes]))
    return choose_tiling(group, lambda name: 4)


def test_tiling_follows_the_strides():
    assert _tiling(lambda x: x.t().contiguous() + 1, (64, 128)) == Tiling(128, 64, transposed=True)
    # NCHW -> NHWC: rows are (n, c), each row an h*w plane read contiguously
    assert _tiling(lambda x: x.contiguous(memory_format=torch.channels_last) * 2,
                   (2, 32, 16, 16)) == Tiling(64, 256, transposed=True)
    assert _tiling(lambda x: x.permute(2, 0, 1) + 1, (32, 64, 128)) == Tiling(128, 2048, transposed=True)
    # every access contiguous already, or a broadcast: 1-D
    assert _tiling(lambda x: x + 1, (64, 128)) is None
    assert _tiling(lambda x, b: x + b, (64, 128), (128,)) is None
    assert _tiling(lambda x, b: x + b, (64, 300), (300,)) is None
    # a 3x3 convolution weight to channels-last: rows of 9 read contiguously, each of the
    # 9 taps written contiguously over the input channels
    assert _tiling(lambda w: w.contiguous(memory_format=torch.channels_last) * 1,
                   (64, 32, 3, 3)) == Tiling(2048, 9, transposed=True)
    # a side shorter than a useful tile stays 1-D
    assert _tiling(lambda x: x.t().contiguous() + 1, (4, 4096)) is None


def test_one_value_a_row_gets_row_tiles():
    """Rows of a length that is not a power of two reading one value a row (a
    normalisation's statistic, a label): tiled in rows, not transposed, so the value is
    loaded once a tile row instead of each element dividing its index by the length.
    A power-of-two length divides by a shift: 1-D."""
    assert _tiling(lambda x, r: x * r, (64, 300), (64, 1)) == Tiling(64, 300)
    assert _tiling(lambda x, r, b: x * r + b, (8, 64, 300), (8, 64, 1), (300,)) == Tiling(512, 300)
    assert _tiling(lambda x, r: x * r, (64, 128), (64, 1)) is None


def _memory_order(fn, *shapes):
    (group,) = kernel_groups(schedule(fn, *[torch.randn(s) for s in shapes]))
    return group, memory_order_placements(group, lambda name: True)


def test_accesses_of_one_permuted_layout_run_in_memory_order():
    # the attention probabilities' transposed bf16 copy of a backward: read and write
    # both run along dim 1, so the flat index runs in memory order, every access stride 1
    group, placements = _memory_order(lambda p: p.transpose(-1, -2).to(torch.bfloat16), (4, 64, 48))
    assert placements is not None
    for node in group.nodes:
        for dep in node.read_writes.reads + node.read_writes.writes:
            assert stride_hint(dep.kernel_index(placements[node.name], group.numel, 1), FLAT) == 1
    # contiguous already, or a real transpose (tiled instead): no reordering
    assert _memory_order(lambda x: x * 2, (64, 48))[1] is None
    assert _memory_order(lambda x: x.t().contiguous() + 1, (64, 48))[1] is None


def test_memory_order_with_dynamic_shapes(tmp_path, device, monkeypatch):
    """Under dynamic=True a strided slice of a channels-last input, kept channels-last,
    runs in memory order too: its strides are compared at the example sizes (with
    symbolic sizes, ``1 // s`` and ``1 % s`` at the origin stay unevaluated)."""
    from inductor_lite.codegen import kernel as kernel_module

    found = []
    original = kernel_module.memory_order_placements
    monkeypatch.setattr(kernel_module, "memory_order_placements",
                        lambda group, stored: found.append(original(group, stored)) or found[-1])
    fn = lambda x: x[..., ::2] * 2  # noqa: E731
    for shape in [(2, 8, 9, 11), (3, 5, 7, 6)]:
        x = torch.randn(shape).to(memory_format=torch.channels_last)
        _, got = run_compiled(fn, x, tmp_path=tmp_path, dynamic=True)
        assert got.stride() == fn(x).stride()
    assert found and all(placements is not None for placements in found)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_tiled_kernels_match_eager(name, dtype, tmp_path, device):
    fn, shapes = PATTERNS[name]
    make = (lambda s: torch.randint(-50, 50, s)) if dtype == torch.int64 else \
        (lambda s: torch.randn(s, dtype=dtype))
    args = [make(s) for s in shapes]
    names, got = run_compiled(fn, *args, tmp_path=tmp_path)
    assert names and all(n.startswith("poi_") for n in names) and len(names) == 1
    assert got.stride() == fn(*args).stride()


def test_tiled_kernels_with_dynamic_shapes(tmp_path, device):
    fn = lambda x: x.t().contiguous() * 2 + 1  # noqa: E731
    for rows, cols in [(20, 30), (33, 47), (64, 17), (100, 64)]:
        run_compiled(fn, torch.randn(rows, cols), tmp_path=tmp_path, dynamic=True)


def test_tiled_kernel_is_two_dimensional():
    code = build(lambda x: x.t().contiguous() + 1, torch.randn(64, 96))
    (kernel,) = code.kernels
    assert [block for _, block in kernel.grid] == ["XBLOCK", "YBLOCK"]
    assert all({"XBLOCK", "YBLOCK"} <= set(c.kwargs) for c in kernel.configs)
    (flat,) = build(lambda x: x + 1, torch.randn(64, 96)).kernels
    assert [block for _, block in flat.grid] == ["XBLOCK"]


def _slot(dist, reg, lane, warp, swizzle):
    coords = [a ^ b ^ c for a, b, c in zip(_combine(dist.reg_bases, reg, dist.rank),
                                           _combine(dist.lane_bases, lane, dist.rank),
                                           _combine(dist.warp_bases, warp, dist.rank))]
    return _swizzle(sum(x * s for x, s in zip(coords, _row_major_strides(dist.shape))), swizzle)


@pytest.mark.parametrize("shape,vec,slot_bytes", [((64, 64), 4, 4), ((32, 128), 4, 4), ((128, 64), 4, 4),
                                                  ((64, 64), 8, 2), ((16, 256), 4, 4), ((64, 64), 2, 8)])
def test_swizzle_is_a_bijection_free_of_bank_conflicts(shape, vec, slot_bytes, device):
    if device != "cpu":
        pytest.skip("pure layout arithmetic")
    src = distribute(default_blocked_layout(shape, 4, vec=vec, order=(0, 1)), shape)
    dst = distribute(default_blocked_layout(shape, 4, vec=vec, order=(1, 0)), shape)
    swizzle = swizzle_map(src, dst, slot_bytes)
    numel = shape[0] * shape[1]
    assert sorted(_swizzle(i, swizzle) for i in range(numel)) == list(range(numel))
    for dist in (src, dst):
        for reg in range(dist.num_regs):
            words = {_slot(dist, reg, lane, 0, swizzle) * slot_bytes // 4 for lane in range(32)}
            banks = {w % 32 for w in words}
            # an 8-byte slot spans two banks: 16 distinct pairs are conflict-free
            assert len(banks) * (2 if slot_bytes == 8 else 1) >= min(32, len(words) * (2 if slot_bytes == 8 else 1))
