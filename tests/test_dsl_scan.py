"""The DSL's scans: ``dl.associative_scan``, ``dl.cumsum``, ``dl.cumprod``.

CPU: the interpreter matches torch (cumsum, cumprod, a two-value cummax with
indices, reverse scans, a combine function defined inside the kernel, 1-D and 2-D
blocks), bad uses raise CompilationError, and the kernels compile to PTX that
assembles for sm_80 and sm_90 under layouts that put the scan axis in registers,
lanes, warps and repeated chunks. GPU (``gpu`` marker): the same kernels run and
match torch.
"""

from __future__ import annotations

import pytest
import torch

import inductor_lite.dsl as dl
from inductor_lite.dsl import assembler, compiler

CCS = [(8, 0), (9, 0)]
needs_assembler = pytest.mark.skipif(not assembler.can_assemble(), reason="needs nvJitLink or ptxas")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _max_with_index(v0, i0, v1, i1):
    """cummax's combine: the later element wins ties (torch.cummax) and NaN sticks."""
    take = ((v1 >= v0) | (v1 != v1)) & (v0 == v0)
    return dl.where(take, v1, v0), dl.where(take, i1, i0)


@dl.kernel
def row_scans(x_ptr, sum_ptr, prod_ptr, max_ptr, idx_ptr, rows, cols, XBLOCK: dl.constexpr,
              RBLOCK: dl.constexpr, REVERSE: dl.constexpr):
    xindex = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    rindex = dl.arange(0, RBLOCK)[None, :]
    mask = (xindex < rows) & (rindex < cols)
    offsets = xindex * cols + rindex
    # Masked lanes hold each scan's identity, so a reverse scan starts clean.
    x = dl.load(x_ptr + offsets, mask=mask, other=0.0)
    dl.store(sum_ptr + offsets, dl.cumsum(x, 1, reverse=REVERSE), mask=mask)
    ones = dl.where(mask, x, 1.0)
    dl.store(prod_ptr + offsets, dl.cumprod(ones, 1, reverse=REVERSE), mask=mask)
    lowest = dl.where(mask, x, float("-inf"))
    index = dl.broadcast_to(rindex, (XBLOCK, RBLOCK))
    value, where = dl.associative_scan((lowest, index), 1, _max_with_index, reverse=REVERSE)
    dl.store(max_ptr + offsets, value, mask=mask)
    dl.store(idx_ptr + offsets, where, mask=mask)


@dl.kernel
def flat_scan(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offsets = dl.arange(0, BLOCK)
    mask = offsets < n
    x = dl.load(x_ptr + offsets, mask=mask, other=0)

    def add(a, b):  # a combine function defined in the kernel
        return a + b

    dl.store(out_ptr + offsets, dl.associative_scan(x, 0, add), mask=mask)


@dl.kernel
def half_cumsum(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offsets = dl.arange(0, BLOCK)
    mask = offsets < n
    x = dl.load(x_ptr + offsets, mask=mask, other=0.0)
    dl.store(out_ptr + offsets, dl.cumsum(x, 0), mask=mask)


def _run_rows(device, rows, cols, xblock, rblock, reverse, num_warps=4):
    g = torch.Generator().manual_seed(rows * 1000 + cols)
    x = torch.randn(rows, cols, generator=g).to(device)
    outs = [torch.full_like(x, float("nan")) for _ in range(3)] + [torch.full((rows, cols), -1, dtype=torch.int32,
                                                                              device=device)]
    row_scans[(dl.cdiv(rows, xblock),)](x, *outs, rows, cols, XBLOCK=xblock, RBLOCK=rblock, REVERSE=reverse,
                                        num_warps=num_warps)
    flip = (lambda t: t.flip(1)) if reverse else (lambda t: t)
    xd = flip(x.double())
    want_sum = flip(xd.cumsum(1))
    want_prod = flip(xd.cumprod(1))
    want_max, want_idx = torch.cummax(flip(x), 1)
    want_max, want_idx = flip(want_max), flip(want_idx)
    if reverse:
        want_idx = cols - 1 - want_idx
    torch.testing.assert_close(outs[0].double(), want_sum, rtol=1e-5, atol=1e-5 * cols)
    torch.testing.assert_close(outs[1].double(), want_prod, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(outs[2], want_max, rtol=0, atol=0)
    assert torch.equal(outs[3].long(), want_idx)


# (rows, cols, XBLOCK, RBLOCK, num_warps): axis in registers only, lanes, warps, chunks.
SHAPES = [(5, 10, 2, 16, 4), (3, 37, 1, 64, 1), (4, 1000, 1, 1024, 4), (6, 300, 2, 512, 8),
          (16, 7, 8, 8, 2), (2, 2500, 1, 4096, 32)]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape", SHAPES[:3], ids=str)
def test_row_scans_match_torch_in_interpreter(shape, reverse):
    _run_rows("cpu", *shape[:4], reverse)


def test_cummax_ties_take_the_later_index():
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0]])
    outs = [torch.empty_like(x) for _ in range(3)] + [torch.empty(1, 5, dtype=torch.int32)]
    row_scans[(1,)](x, *outs, 1, 5, XBLOCK=1, RBLOCK=8, REVERSE=False)
    assert outs[3].tolist() == [torch.cummax(x, 1).indices.int().tolist()[0]]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8])
def test_local_combine_function_on_integers(dtype):
    x = torch.randint(-100, 100, (50,), dtype=dtype)
    out = torch.zeros(50, dtype=dtype)
    flat_scan[(1,)](x, out, 50, BLOCK=64)
    # An int8 scan keeps int8 (wrapping), as Triton's associative_scan does.
    assert torch.equal(out, x.cumsum(0).to(dtype))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_cumsum_accumulates_in_fp32(dtype):
    x = torch.rand(300, dtype=dtype) + 0.5
    out = torch.empty(300, dtype=torch.float32)
    half_cumsum[(1,)](x, out, 300, BLOCK=512)
    torch.testing.assert_close(out.double(), x.double().cumsum(0), rtol=1e-5, atol=1e-4)


def _compile_errors(body_fn):
    with pytest.raises(dl.CompilationError) as info:
        body_fn[(1,)](torch.zeros(8), 8, BLOCK=8)
    return str(info.value)


def test_combine_function_arity_is_checked():
    def two(a, b, c):
        return a

    @dl.kernel
    def k(x_ptr, n, BLOCK: dl.constexpr):
        x = dl.load(x_ptr + dl.arange(0, BLOCK))
        dl.store(x_ptr + dl.arange(0, BLOCK), dl.associative_scan(x, 0, two))

    assert "takes 3 parameters" in _compile_errors(k)


def test_combine_function_cannot_read_runtime_values():
    @dl.kernel
    def k(x_ptr, n, BLOCK: dl.constexpr):
        x = dl.load(x_ptr + dl.arange(0, BLOCK))
        scale = x * 2

        def uses_scale(a, b):
            return a + b * scale

        dl.store(x_ptr + dl.arange(0, BLOCK), dl.associative_scan(x, 0, uses_scale))

    assert "'scale' is not defined" in _compile_errors(k)


def test_scan_axis_out_of_range_is_an_error():
    @dl.kernel
    def k(x_ptr, n, BLOCK: dl.constexpr):
        x = dl.load(x_ptr + dl.arange(0, BLOCK))
        dl.store(x_ptr + dl.arange(0, BLOCK), dl.cumsum(x, 1))

    assert "axis" in _compile_errors(k)


def _row_fn(xblock, rblock, reverse):
    x = torch.zeros(4)
    spec = row_scans.specialize([x, x, x, x, torch.zeros(4, dtype=torch.int32), 4, 4],
                                dict(XBLOCK=xblock, RBLOCK=rblock, REVERSE=reverse))
    return row_scans.build_ir(spec)


@needs_assembler
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_scans_compile_and_assemble(shape, reverse):
    _, _, xblock, rblock, num_warps = shape
    fn = _row_fn(xblock, rblock, reverse)
    for cc in CCS:
        out = compiler.compile_ptx(fn, cc=cc, num_warps=num_warps)
        assembler.check_ptx_assembles(out.ptx, cc)
    mode = "down" if reverse else "up"
    if rblock >= 64:  # the axis spans lanes: a shuffle scan
        assert f"shfl.sync.{mode}" in out.ptx


@needs_assembler
def test_flat_and_half_scans_assemble():
    for kernel, args, block in ((flat_scan, [torch.zeros(4, dtype=torch.int64)] * 2, 2048),
                                (half_cumsum, [torch.zeros(4, dtype=torch.bfloat16), torch.zeros(4)], 512)):
        spec = kernel.specialize([*args, 4], dict(BLOCK=block))
        for cc in CCS:
            out = compiler.compile_ptx(kernel.build_ir(spec), cc=cc, num_warps=8)
            assembler.check_ptx_assembles(out.ptx, cc)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_row_scans_match_torch_on_gpu(shape, reverse):
    rows, cols, xblock, rblock, num_warps = shape
    _run_rows("cuda", rows, cols, xblock, rblock, reverse, num_warps)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("num_warps", [1, 4, 16])
def test_flat_and_half_scans_on_gpu(num_warps):
    x = torch.randint(-1000, 1000, (2000,), dtype=torch.int64, device="cuda")
    out = torch.zeros_like(x)
    flat_scan[(1,)](x, out, 2000, BLOCK=2048, num_warps=num_warps)
    assert torch.equal(out, x.cumsum(0))
    h = torch.rand(300, dtype=torch.bfloat16, device="cuda") + 0.5
    hout = torch.empty(300, device="cuda")
    half_cumsum[(1,)](h, hout, 300, BLOCK=512, num_warps=num_warps)
    torch.testing.assert_close(hout.double(), h.double().cumsum(0), rtol=1e-5, atol=1e-4)
