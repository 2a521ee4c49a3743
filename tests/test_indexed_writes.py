"""Indexed writes: the DSL's block ``dl.atomic_add`` and ``dl.device_assert``, and the
generated scatter kernels of ``index_put``, ``scatter``, ``scatter_add``,
``scatter_reduce``, ``index_add`` and the backwards that produce them.

Values are compared with eager on fresh random inputs; sums of repeated indices are
compared at fp32 tolerance (atomic order varies on the GPU). CPU runs go through the
interpreter; the same tests marked `gpu` run the compiled PTX.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import inductor_lite
import inductor_lite.dsl as dl
from inductor_lite.codegen.wrapper import generate_wrapper
from inductor_lite.config import config
from inductor_lite.dsl import assembler, compiler
from inductor_lite.fx_lowering.decompositions import decomposition_table
from inductor_lite.fx_lowering.graph import GraphLowering
from inductor_lite.scheduler.fusion import KernelGroup
from inductor_lite.scheduler.scheduler import Scheduler
from conftest import assemble_launches


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


# ----------------------------------------------------------------------------- through the backend


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    with config.patch(fallback_on_error=False):
        yield
    torch._dynamo.reset()


def rand(*size, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.randn(size).to(dtype)
    return torch.randint(-1000, 1000, size, dtype=dtype)


def externs() -> list[str]:
    return sorted(k for k in inductor_lite.counters if k.startswith("extern."))


def check(fn, *args, kernels=None, dynamic=False, exact=False, tol=None):
    """``fn`` compiled matches eager with no extern call (and ``kernels`` kernels if
    given). Float results that sum repeated indices are compared with an fp64 eager
    run at the dtype's tolerance, or ``tol`` (the order of atomic adds varies);
    ``exact`` results (stores only) and integers exactly."""
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    got = torch.compile(fn, backend="inductor_lite", dynamic=dynamic)(*args)
    expected = fn(*args)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if got.dtype.is_floating_point and not exact:
        wide = fn(*[a.double() if a.is_floating_point() else a for a in args])
        tol = tol or {torch.float64: 1e-12, torch.float32: 1e-5}.get(got.dtype, 1e-2)
        torch.testing.assert_close(got.double(), wide, rtol=tol, atol=tol)
    else:
        assert torch.equal(got, expected)
    assert not externs(), externs()
    if kernels is not None:
        assert inductor_lite.counters["kernels_generated"] == kernels


DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32]


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_put_accumulates_repeated_and_negative_indices(device, dtype):
    x, values = rand(6, 5, dtype=dtype), rand(40, dtype=dtype)
    rows, cols = torch.randint(-6, 6, (40,)), torch.randint(0, 5, (40,))  # 40 writes into 30 elements
    check(lambda x, i, j, v: torch.index_put(x, (i, j), v, accumulate=True), x, rows, cols, values, kernels=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bool])
def test_index_put_stores_distinct_indices(device, dtype):
    x, values = rand(7, 4, dtype=torch.float32).to(dtype), rand(3, 4).to(dtype)
    check(lambda x, i, v: torch.index_put(x, (i,), v), x, torch.randperm(7)[:3], values, exact=True)
    check(lambda x, i: torch.index_put(x, (i,), torch.tensor(1).to(dtype)), x, torch.randperm(7)[:5] - 7, exact=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_of_one_value_under_a_mask_is_a_where(device, dtype, accumulate):
    # x[mask] = v (+= v): one pointwise kernel, no data-dependent positions
    x, mask = rand(4, 5, 3, dtype=torch.float32).to(dtype), torch.rand(4, 5) > 0.5
    fn = lambda x, m, v: torch.index_put(x, (m,), v, accumulate=accumulate)  # noqa: E731
    check(fn, x, mask, torch.tensor(7).to(dtype), kernels=1, exact=True)
    check(fn, x, mask[:, 0], torch.tensor([2]).to(dtype), exact=True)  # a mask over dimension 0 only


def test_index_put_with_a_dimension_taken_whole_and_apart_indices(device):
    x = rand(4, 5, 6)
    # x[:, i] += v: the index shape replaces dimension 1
    check(lambda x, i, v: torch.ops.aten.index_put(x, [None, i], v, True), x, torch.randint(0, 5, (2, 3)),
          rand(4, 2, 3, 6))
    # x[i, :, j] += v: apart, the index shape comes first; v broadcasts along dimension 1
    check(lambda x, i, j, v: torch.ops.aten.index_put(x, [i, None, j], v, True), x, torch.randint(0, 4, (7,)),
          torch.randint(0, 6, (7,)), rand(7, 1))


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_src_value_and_add(device, dtype):
    x = rand(5, 8, dtype=dtype)
    distinct = torch.stack([torch.randperm(8)[:6] for _ in range(4)])  # no repeats along dim 1: defined result
    check(lambda x, i, s: torch.scatter(x, 1, i, s), x, distinct, rand(4, 7, dtype=dtype), kernels=2, exact=True)
    check(lambda x, i: torch.scatter(x, 1, i, 3), x, distinct, exact=True)
    index = torch.randint(0, 5, (9, 8))  # repeats along dim 0
    check(lambda x, i, s: torch.scatter_add(x, 0, i, s), x, index, rand(9, 8, dtype=dtype), kernels=2)
    check(lambda x, i, s: torch.scatter(x, 0, i, s, reduce="add"), x, index, rand(9, 8, dtype=dtype))


@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_sum(device, include_self):
    x, index, src = rand(6, 4), torch.randint(0, 6, (10, 3)), rand(10, 4)
    check(lambda x, i, s: x.scatter_reduce(0, i, s, "sum", include_self=include_self), x, index, src,
          kernels=2 if include_self else 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_index_add(device, dtype):
    x, index, source = rand(5, 6, dtype=dtype), torch.randint(0, 6, (9,)), rand(5, 9, dtype=dtype)
    check(lambda x, i, s: x.index_add(1, i, s, alpha=2), x, index, source)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_index_copy_and_index_fill_are_kernels(device, dtype):
    # decomposed as in Inductor: index_copy into index_put (a copy, then a scatter kernel)
    x = rand(4, 6, 5, dtype=dtype)
    check(lambda x, i, s: torch.index_copy(x, 1, i, s) * 2, x, torch.randperm(6)[:3], rand(4, 3, 5, dtype=dtype),
          kernels=3, exact=True)
    check(lambda x, i, s: x.index_copy(-1, i, s), x, torch.randperm(5)[:2], rand(4, 6, 2, dtype=dtype), exact=True)
    check(lambda x, i: x.index_fill(0, i, -2), x, torch.tensor([3, 1]), exact=True)
    check(lambda x, i, v: x.index_fill(2, i, v), x, torch.tensor([4, 0]), torch.tensor(7).to(dtype), exact=True)


def test_scatter_add_through_a_constant_index(device):
    # the index is a constant (zeros made in the graph, as in the margin losses'
    # backwards): the destination is one address while the value and mask are blocks
    check(lambda x, s: torch.scatter_add(x, 0, torch.zeros(6, dtype=torch.long), s), rand(4), rand(6))


def test_scatter_after_scatter_keeps_their_order(device):
    # the second store overwrites the first where their indices meet; x stays intact
    def fn(x, i, j):
        y = torch.index_put(x, (i,), torch.tensor(1.0))
        return torch.index_put(y, (j,), torch.tensor(2.0)) + x

    check(fn, rand(10), torch.randperm(10)[:6], torch.randperm(10)[:6], exact=True)


def test_dynamic_shapes(device):
    fn = lambda x, i, s: torch.scatter_add(x, 0, i, s) * 2  # noqa: E731
    for n in (6, 9):
        check(fn, rand(n, 3), torch.randint(0, n, (2 * n, 3)), rand(2 * n, 3), dynamic=True)


def test_out_of_range_index_raises_and_writes_nothing_outside():
    x = torch.zeros(4, 3)
    fn = torch.compile(lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True), backend="inductor_lite")
    with pytest.raises(AssertionError, match="index out of bounds"):
        fn(x, torch.tensor([0, 4]), torch.ones(2, 3))
    with pytest.raises(AssertionError, match="index out of bounds"):
        fn(x, torch.tensor([-5, 1]), torch.ones(2, 3))
    with pytest.raises(IndexError):
        torch.index_put(x, (torch.tensor([0, 4]),), torch.ones(2, 3), accumulate=True)


@pytest.mark.parametrize("fn, args", [
    (lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True),
     (torch.zeros(4, dtype=torch.int16), torch.tensor([1, 1]), torch.ones(2, dtype=torch.int16))),
    (lambda x, m, v: torch.index_put(x, (m,), v), (torch.zeros(4), torch.tensor([True, False] * 2), torch.ones(2))),
    (lambda x, i, s: x.scatter_reduce(0, i, s, "amax"), (torch.zeros(4), torch.tensor([1, 1, 0]), torch.ones(3))),
])
def test_what_has_no_kernel_stays_extern(fn, args):
    got = torch.compile(fn, backend="inductor_lite")(*args)
    assert torch.equal(got, fn(*args))
    assert len(externs()) == 1


def test_deterministic_mode_keeps_atomics_extern():
    x, i, v = rand(5), torch.randint(0, 5, (8,)), rand(8)
    fn = lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True)  # noqa: E731
    torch.compile(fn, backend="inductor_lite")(x, i, v)  # cached with atomics: not for the deterministic run
    torch._dynamo.reset()
    torch.use_deterministic_algorithms(True)
    try:
        got = torch.compile(fn, backend="inductor_lite")(x, i, v)
    finally:
        torch.use_deterministic_algorithms(False)
    torch.testing.assert_close(got, fn(x, i, v))
    assert externs() == ["extern.aten.index_put.default"]


def generated(fn, *args):
    """The scheduler and wrapper code of ``fn`` on fake ``args``."""
    graph = GraphLowering(make_fx(fn, tracing_mode="fake", decomposition_table=decomposition_table())(*args))
    graph.run()
    scheduler = Scheduler(graph)
    return scheduler, generate_wrapper(graph, scheduler, "test")


def test_scatter_runs_alone_between_its_target_and_its_readers():
    # producer of the values, copy of x and the consumer could all fuse with it by domain
    scheduler, code = generated(lambda x, i, s: torch.scatter_add(x.exp(), 0, i, s.sin()).cos(), rand(16),
                                torch.randint(0, 16, (16,)), rand(16))
    groups = [[n.name for n in step.nodes] for step in scheduler.steps if isinstance(step, KernelGroup)]
    assert len(groups) == 3 and all(len(g) == 1 for g in groups)
    copy, scatter, _ = (scheduler.buffers[g[0]] for g in groups)
    assert scatter.target is copy
    assert copy.name not in scheduler.removed_buffers


def test_atomic_kernels_are_not_autotuned():
    # timing runs a kernel many times on the real arguments: each run would add again
    x, i = rand(1 << 16), torch.randint(0, 1 << 16, (1 << 16,))
    _, adds = generated(lambda x, i, s: torch.index_put(x, (i,), s, accumulate=True), x, i, rand(1 << 16))
    _, stores = generated(lambda x, i, s: torch.index_put(x, (i,), s), x, i, rand(1 << 16))
    assert [len(k.configs) for k in adds.kernels][1] == 1
    assert all(len(k.configs) > 1 for k in stores.kernels)


def test_generated_scatter_kernels_compile_to_ptx(kernel_launches):
    """The kernels a CPU run launches (stores, fp32/fp64/int32/int64 atomic adds, the
    fp32-accumulating bf16 index_add, a masked fill) go through the NVPTX compiler and
    assemble for sm_80 and sm_90."""
    if not assembler.can_assemble():
        pytest.skip("needs nvJitLink or ptxas")
    launches = kernel_launches
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
        check(lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True), rand(6, 5, dtype=dtype),
              torch.randint(-6, 6, (9,)), rand(9, 5, dtype=dtype))
    check(lambda x, i, s: torch.scatter(x, 1, i, s), rand(3, 8), torch.randperm(8)[:4].expand(3, 4), rand(3, 4),
          exact=True)
    check(lambda x, i, s: x.index_add(0, i, s), rand(5, 6, dtype=torch.bfloat16), torch.randint(0, 5, (9,)),
          rand(9, 6, dtype=torch.bfloat16))
    check(lambda x, m: torch.index_put(x, (m,), torch.tensor(1.0)), rand(4, 3), torch.rand(4) > 0.5, exact=True)
    assert len(launches) >= 14
    assemble_launches(launches)


@pytest.mark.gpu
def test_large_accumulate_on_the_gpu_with_autotuning_on():
    # big enough for several launch configs: the atomic kernel must still add once
    with torch.device("cuda"), config.patch(autotune=True):
        x, i, v = rand(1 << 16), torch.randint(0, 1 << 12, (1 << 18,)), rand(1 << 18)
        # 64 fp32 terms an index: rounding may reach 64 * 2**-24 * |sum|
        check(lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True), x, i, v, tol=1e-4)
        check(lambda x, i, v: x.index_add(0, i, v), x, i, v, tol=1e-4)


# ----------------------------------------------------------------------------- training


def check_grads(fn, x, *rest):
    x1, x2 = x.clone().requires_grad_(), x.clone().double().requires_grad_()
    grad = torch.randn(fn(x, *rest).shape, dtype=x.dtype)
    torch.compile(fn, backend="inductor_lite")(x1, *rest).backward(grad)
    fn(x2, *rest).backward(grad.double())
    torch.testing.assert_close(x1.grad.double(), x2.grad, rtol=1e-5, atol=1e-5)
    assert not externs(), externs()


@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_backward(device, padding_idx):
    check_grads(lambda w, i: F.embedding(i, w, padding_idx=padding_idx) * 2, rand(10, 16),
                torch.randint(0, 10, (4, 12)))


def test_gather_index_select_and_index_backward(device):
    x = rand(6, 7)
    check_grads(lambda x, i: x.index_copy(1, i, x[:, :3].sin()), x, torch.randperm(7)[:3])
    check_grads(lambda x, i: torch.gather(x, 1, i).sin(), x, torch.randint(0, 7, (6, 9)))
    check_grads(lambda x, i: torch.index_select(x, 1, i), x, torch.randint(0, 7, (11,)))
    check_grads(lambda x, i, j: x[i, j], x, torch.randint(-6, 6, (13,)), torch.randint(0, 7, (13,)))


def test_cross_entropy_training_step_has_no_extern(device):
    check_grads(lambda x, t: F.cross_entropy(x, t), rand(8, 10), torch.randint(0, 10, (8,)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_one_value_a_row_scattered_into_a_constant_is_pointwise(device, dtype):
    """nll_loss's backward: zeros(...).scatter(1, target[:, None], -1) becomes a
    ``where`` that fuses into its consumer (one kernel, no one-hot written)."""
    target = torch.randint(0, 50, (16, 1))
    check(lambda i, y: torch.zeros(16, 50, dtype=dtype).scatter(1, i, -1) * y, target, rand(16, 50, dtype=dtype),
          kernels=1, exact=True)
    src = rand(16, 1, dtype=dtype)  # the src form, and along dim 0 of a 3-D tensor
    check(lambda i, s: torch.full((16, 50), 2, dtype=dtype).scatter(1, i, s) + 1, target, src, kernels=1, exact=True)
    check(lambda i: torch.zeros(7, 3, 5, dtype=dtype).scatter(0, i, 4), torch.randint(0, 7, (1, 3, 5)),
          kernels=1, exact=True)


def test_one_hot_scatter_out_of_range_raises():
    fn = torch.compile(lambda i: torch.zeros(4, 6).scatter(1, i, 1.0) * 3, backend="inductor_lite")
    with pytest.raises(AssertionError, match="index out of bounds"):
        fn(torch.tensor([[0], [6], [1], [2]]))
    with pytest.raises(AssertionError, match="index out of bounds"):
        fn(torch.tensor([[0], [-1], [1], [2]]))
