"""Indexed writes: the DSL's block ``dl.atomic_add`` and ``dl.device_assert``, and the
generated scatter kernels of ``index_put``, ``scatter``, ``scatter_add``,
``scatter_reduce``, ``index_add`` and the backwards that produce them.

Values are compared with eager on fresh random inputs; sums of repeated indices are
compared at fp32 tolerance (atomic order varies on the GPU). CPU runs go through the
interpreter; the same tests marked `gpu` run the compiled PTX.
"""

import pytest
import torch

import inductor_lite.dsl as dl
from inductor_lite.dsl import assembler, compiler


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    with torch.device(request.param):
        yield request.param


# ----------------------------------------------------------------------------- the DSL


@dl.kernel
def _scatter_add_kernel(index_ptr, src_ptr, out_ptr, n, size, XBLOCK: dl.constexpr):
    offs = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)
    mask = offs < n
    i = dl.load(index_ptr + offs, mask=mask)
    dl.device_assert(((i >= 0) & (i < size)) | ~mask, "index out of bounds")
    dl.atomic_add(out_ptr + i, dl.load(src_ptr + offs, mask=mask), mask=mask, sem="relaxed")


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float64])
def test_block_atomic_add_adds_every_repeated_address(device, dtype):
    index = torch.randint(0, 7, (300,))
    src = (torch.randn(300) * 100).to(dtype)
    out = torch.full((7,), 3, dtype=dtype)
    _scatter_add_kernel[(3,)](index, src, out, 300, 7, XBLOCK=128)
    want = torch.full((7,), 3, dtype=torch.float64).index_add_(0, index, src.double())
    if dtype.is_floating_point:
        torch.testing.assert_close(out.double(), want, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-3)
    else:
        assert out.tolist() == want.long().tolist()


def test_device_assert_raises_in_the_interpreter():
    index = torch.tensor([0, 1, 9, 2])
    with pytest.raises(AssertionError, match="_scatter_add_kernel: index out of bounds"):
        _scatter_add_kernel[(1,)](index, torch.ones(4), torch.zeros(7), 4, 7, XBLOCK=4)


@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
@pytest.mark.parametrize("pointee", ["*fp32", "*fp64", "*i32", "*i64"])
def test_block_atomic_add_ptx_assembles(cc, pointee):
    spec = _scatter_add_kernel.specialize_signature(
        {"index_ptr": "*i64", "src_ptr": pointee, "out_ptr": pointee, "n": "i32", "size": "i32"}, {"XBLOCK": 256})
    ptx = compiler.compile_ptx(_scatter_add_kernel.build_ir(spec), cc=cc, num_warps=4).ptx
    if assembler.can_assemble():
        assembler.check_ptx_assembles(ptx, cc)
