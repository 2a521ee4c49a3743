"""Scans end to end: cumsum, cumprod, cummax, cummin and logcumsumexp through
torch.compile(backend="inductor_lite") against eager and an fp64 reference.

Each case compiles with ``fallback_on_error=False``, runs on fresh random inputs with
every allocation of the generated code poisoned (NaN / -77), and checks floating
outputs against fp64 (``TOL[dtype]`` plus twice eager's own error), integer outputs
(cummax/cummin indices, integer sums) equal to eager, no extern call for the scans,
and the number of kernels. The generated scan kernels compile to PTX that assembles
for sm_80 and sm_90. A too long or dynamic scanned dimension stays an extern call.
Every test runs on CPU and, marked `gpu`, on CUDA (skipped without a GPU).
"""

import pytest
import torch
import torch.utils._pytree as pytree

import inductor_lite
from inductor_lite.codegen import runtime_helpers
from inductor_lite.config import config
from inductor_lite.fx_lowering.scans import MAX_SCAN_LENGTH

counters = inductor_lite.counters
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float64: 1e-9}


@pytest.fixture(autouse=True, params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    with torch.device(request.param):
        yield request.param


@pytest.fixture(autouse=True)
def fresh(monkeypatch, device):
    torch._dynamo.reset()
    inductor_lite.reset_counters()

    def poison(t):
        return t.fill_(float("nan") if t.dtype.is_floating_point else (True if t.dtype == torch.bool else -77))

    for module, name in [(torch, "empty_strided"), (runtime_helpers, "empty_strided_cpu"),
                         (runtime_helpers, "empty_strided_cuda")]:
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _original=original, **k: poison(_original(*a, **k)))
    with config.patch(fallback_on_error=False):
        yield
    torch._dynamo.reset()


def _fp64(x):
    return x.detach().double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def assert_close(got, eager, ref64, what):
    assert got.dtype == eager.dtype and got.shape == eager.shape, f"{what}: {got.dtype}{list(got.shape)}"
    got, eager = got.detach().cpu(), eager.detach().cpu()
    if not eager.dtype.is_floating_point:
        assert torch.equal(got, eager), f"{what}: {got} != eager {eager}"
        return
    ref = ref64.detach().cpu().double()
    assert torch.equal(torch.isnan(got), torch.isnan(eager)), f"{what}: NaNs differ"
    finite = torch.isfinite(eager)
    assert torch.equal(got[~finite].nan_to_num(), eager[~finite].nan_to_num()), f"{what}: infinities differ"
    tol = TOL[eager.dtype]
    slack = 2 * float((eager[finite].double() - ref[finite]).abs().max()) if finite.any() else 0.0
    torch.testing.assert_close(got[finite].double(), ref[finite], rtol=tol, atol=tol + slack,
                               msg=lambda m: f"{what}: {m}")


def externs():
    return {k[len("extern."):]: v for k, v in counters.items() if k.startswith("extern.")}


def run_compiled(fn, *args, dynamic=None):
    """``fn`` compiled and run on ``args``, checked against eager and fp64; returns the outputs."""
    got = torch.compile(fn, backend="inductor_lite", dynamic=dynamic)(*args)
    eager, ref = fn(*args), fn(*[_fp64(a) for a in args])
    for i, (g, e, r) in enumerate(zip(*(pytree.tree_leaves(t) for t in (got, eager, ref)))):
        assert_close(g, e, r, f"output {i}")
    assert counters["graphs_fallback"] == 0
    return got


SCANS = {
    "cumsum": lambda x, d: torch.cumsum(x, d),
    "cumprod": lambda x, d: torch.cumprod(x, d),
    "cummax": lambda x, d: torch.cummax(x, d),
    "cummin": lambda x, d: torch.cummin(x, d),
    "logcumsumexp": lambda x, d: torch.logcumsumexp(x, d),
}


def _input(name, shape, dtype):
    x = torch.randn(shape)
    if name == "cumprod":  # products of values near +-1 stay in range
        x = torch.sign(x) * (1 + 0.05 * x)
    return x.to(dtype)


@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("name", sorted(SCANS))
def test_scan_is_one_kernel_and_no_extern(name, dim):
    x = _input(name, (6, 50), torch.float32)
    run_compiled(lambda x: SCANS[name](x, dim), x)
    assert not externs()
    assert counters["kernels_generated"] == 1  # cummax/cummin: values and indices from one scan


@pytest.mark.parametrize("name", sorted(SCANS))
def test_bf16_scans_accumulate_in_fp32(name):
    run_compiled(lambda x: SCANS[name](x, 1), _input(name, (4, 300), torch.bfloat16))
    assert not externs()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_scans_are_exact(dtype):
    x = torch.randint(-50, 50, (5, 40)).to(dtype)

    def fn(x):
        return torch.cumsum(x, 1), torch.cummax(x, 0), torch.cummin(x, 1)

    got = run_compiled(fn, x)
    assert got[0].dtype == torch.int64  # torch promotes integer and bool sums
    assert not externs()


def test_ties_and_nans_keep_the_later_index():
    x = torch.tensor([[1.0, 3.0, 3.0, float("nan"), 2.0, float("nan"), 5.0],
                      [2.0, 2.0, 1.0, 2.0, float("-inf"), float("-inf"), 0.0]])
    run_compiled(lambda x: (torch.cummax(x, 1), torch.cummin(x, 1)), x)


def test_logcumsumexp_of_infinities():
    inf = float("inf")
    x = torch.tensor([[-inf, -inf, 0.0, inf, 1.0], [inf, -inf, 2.0, 3.0, -inf]])
    run_compiled(lambda x: torch.logcumsumexp(x, 1), x)


def test_non_contiguous_inputs():
    x = torch.randn(40, 24)

    def fn(x):
        return torch.cumsum(x.t(), 1), torch.cummax(x[::2, 3:], 1), torch.logcumsumexp(x.t()[:, ::3], 0)

    run_compiled(fn, x)
    assert not externs()


def test_pointwise_producer_and_consumer_fuse_into_the_scan():
    x, y = torch.randn(8, 100), torch.randn(100)
    run_compiled(lambda x, y: torch.exp(torch.cumsum(x * 2 + y, -1) * 0.01), x, y)
    assert counters["kernels_generated"] == 1 and not externs()


def test_cumsum_backward_is_a_flipped_cumsum():
    x = torch.randn(6, 70)
    grad_out = torch.randn(6, 70)

    def fn(x):
        return torch.cumsum(x * x, 1)

    leaf = x.clone().requires_grad_()
    torch.compile(fn, backend="inductor_lite")(leaf).backward(grad_out)
    ref = x.double().requires_grad_()
    fn(ref).backward(grad_out.double())
    eager = x.clone().requires_grad_()
    fn(eager).backward(grad_out)
    assert_close(leaf.grad, eager.grad, ref.grad, "grad")
    assert counters["graphs_compiled"] == 2 and counters["graphs_fallback"] == 0
    assert not externs()  # flip is an index remapping, cumsum a scan


def test_long_or_dynamic_scans_stay_externs():
    run_compiled(lambda x: torch.cumsum(x, 0), torch.randn(MAX_SCAN_LENGTH + 1))
    assert externs() == {"aten.cumsum.default": 1}
    inductor_lite.reset_counters()
    torch._dynamo.reset()
    run_compiled(lambda x: torch.cummax(x, 1), torch.randn(3, 20), dynamic=True)
    assert set(externs()) == {"aten.cummax.default"}


def test_scan_kernels_compile_to_ptx(monkeypatch, device):
    """The generated scan kernels (a fused cumsum/cummax/cumprod over rows and a
    strided logcumsumexp down columns) go through the NVPTX compiler and assemble."""
    from inductor_lite.dsl import assembler, compiler
    from inductor_lite.dsl.kernel import Kernel

    if device != "cpu":
        pytest.skip("the CPU run records the launches")
    if not assembler.can_assemble():
        pytest.skip("neither nvJitLink nor ptxas is available")
    launches = []
    original = Kernel.run

    def record(self, grid, args, constexprs, num_warps=None, num_stages=1, maxnreg=None):
        launches.append((self, tuple(args), dict(constexprs), num_warps))
        return original(self, grid, args, constexprs, num_warps, num_stages)

    monkeypatch.setattr(Kernel, "run", record)

    def fn(x, y):
        return torch.cumsum(x, -1) + 1, torch.cummax(x, 1), torch.cumprod(x, 1), torch.logcumsumexp(y, 0)

    torch.compile(fn, backend="inductor_lite")(torch.randn(8, 100), torch.randn(40, 16).bfloat16())
    assert len(launches) == 2
    for kernel, args, constexprs, num_warps in launches:
        ir_fn = kernel.build_ir(kernel.specialize(args, constexprs))
        for cc in ((8, 0), (9, 0)):
            assembler.check_ptx_assembles(compiler.compile_ptx(ir_fn, cc=cc, num_warps=num_warps).ptx, cc)
