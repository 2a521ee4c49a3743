"""Pooling and resampling through the backend, against eager.

max/avg/adaptive-average pooling and their backwards are our own kernels (no extern
call of the op); nearest and bilinear upsampling reach us decomposed into
``_unsafe_index`` gathers, and their backwards into accumulating ``_unsafe_index_put``
scatters, also our own kernels. Inputs are fresh random tensors
(fp32 and bf16, odd sizes, padding, ``ceil_mode``, strides unlike the kernel,
channels-last and transposed inputs), into poisoned output buffers. Every test runs
on CPU (the DSL interpreter) and, marked `gpu`, on CUDA.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._sympy.functions import Mod, PythonMod

import inductor_lite
from inductor_lite.codegen import runtime_helpers
from inductor_lite.config import config
from conftest import assemble_launches

TOLERANCES = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}


@pytest.fixture(autouse=True, params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    with torch.device(request.param):
        yield request.param


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Counters reset, no eager fallback, and every buffer the generated code allocates
    starts as NaN (floats) or -77, so an element no kernel writes shows."""
    for name in ("empty_strided_cpu", "empty_strided_cuda"):
        allocate = getattr(runtime_helpers, name)
        monkeypatch.setattr(runtime_helpers, name, lambda *a, _allocate=allocate, **k: _poison(_allocate(*a, **k)))
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    with config.patch(fallback_on_error=False):
        yield
    torch._dynamo.reset()


def _poison(t: torch.Tensor) -> torch.Tensor:
    return t.fill_(float("nan") if t.dtype.is_floating_point else True if t.dtype == torch.bool else -77)


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _externs(allowed=()) -> list[str]:
    return sorted(k for k in inductor_lite.counters if k.startswith("extern.") and k not in allowed)


def _assert_grad_close(fn, got: torch.Tensor, x_ref: torch.Tensor, grad: torch.Tensor) -> None:
    """``got`` is ``x_ref``'s eager gradient within the dtype's tolerance, or, in bf16,
    at least as close to the fp64 gradient as eager's is (within the tolerance): a
    gradient summed over overlapping windows is rounded once by our kernels, after
    every addition by eager's."""
    tol = TOLERANCES[got.dtype]
    if got.dtype == torch.float32:
        torch.testing.assert_close(got, x_ref.grad, **tol)
        return
    x64 = x_ref.detach().double().requires_grad_()
    _tuple(fn(x64))[0].backward(grad.double())
    exact = x64.grad
    bound = (x_ref.grad.double() - exact).abs() + tol["atol"] + tol["rtol"] * exact.abs()
    error = (got.double() - exact).abs()
    assert (error <= bound).all(), f"gradient off by {(error - bound).max().item():.3g} beyond eager's error"


def check(fn, x, *, backward=True, externs=(), exact=False, reference_input=None):
    """``fn(x)`` compiled matches eager (and, with ``backward``, so does the gradient of
    its first output for a random output gradient); one kernel or more ran, and no
    extern call but ``externs``. Eager runs on ``reference_input`` when given: ``x``'s
    values in another layout, where eager's kernel for ``x``'s layout is wrong."""
    x_got = x.detach().clone().requires_grad_(backward)
    x_ref = (x if reference_input is None else reference_input).detach().clone().requires_grad_(backward)
    got = _tuple(torch.compile(fn, backend="inductor_lite")(x_got))
    expected = _tuple(fn(x_ref))
    tol = dict(rtol=0, atol=0) if exact else TOLERANCES[x.dtype]
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert not g.is_floating_point() or not g.isnan().any()
        torch.testing.assert_close(g, e, **(tol if g.is_floating_point() else dict(rtol=0, atol=0)))
    if backward:
        grad = torch.randn_like(got[0])  # in the layout the compiled backward was traced for
        got[0].backward(grad)
        expected[0].backward(grad)
        _assert_grad_close(fn, x_got.grad, x_ref, grad)
    counters = inductor_lite.counters
    assert not _externs(externs), _externs(externs)
    assert counters["kernels_generated"] >= 1 and counters["graphs_fallback"] == 0


def randn(*size, dtype=torch.float32, layout="contiguous"):
    """A random tensor of ``size`` laid out contiguous, channels-last or transposed
    (the last two dimensions swapped in memory)."""
    if layout == "transposed":
        return torch.randn(*size[:-2], size[-1], size[-2]).to(dtype).transpose(-1, -2)
    x = torch.randn(size).to(dtype)
    return x.to(memory_format=torch.channels_last) if layout == "channels_last" else x


# ---------------------------------------------------------------------------- max pooling

MAX_POOL_CASES = [
    # kernel, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),
    (3, 2, 1, 1, False),
    (3, 2, 1, 1, True),
    ((2, 3), (3, 1), (1, 0), 1, True),  # stride > kernel leaves rows no window covers
    (3, 1, 1, 1, False),
    ((3, 2), 2, (1, 1), (2, 1), False),  # dilation: forward only
]


def fp32_and_some_bf16(cases, bf16_cases):
    """``(case, dtype)`` pairs: every case in fp32, the cases numbered ``bf16_cases`` in bf16 too."""
    return [(c, torch.float32) for c in cases] + [(cases[i], torch.bfloat16) for i in bf16_cases]


@pytest.mark.parametrize("case, dtype", fp32_and_some_bf16(MAX_POOL_CASES, [2, 3]))
def test_max_pool2d_with_indices(case, dtype):
    kernel, stride, padding, dilation, ceil_mode = case
    x = randn(2, 3, 11, 10, dtype=dtype)
    check(lambda x: F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode, return_indices=True), x,
          exact=True, externs=["extern.aten.max_pool2d_with_indices_backward.default"] if dilation != 1 else [])


@pytest.mark.parametrize("layout", ["channels_last", "transposed"])
def test_max_pool2d_layouts_and_unbatched(layout):
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), randn(2, 4, 9, 7, layout=layout), exact=True)
    check(lambda x: F.max_pool2d(x, 2, ceil_mode=True, return_indices=True), randn(3, 7, 5), exact=True)


def test_max_pool2d_nan_and_inf_like_eager():
    """NaN wins (the last one's index); a window whose values are all -inf reports its
    first position inside the input, never a padding position."""
    x = torch.randn(1, 2, 7, 7)
    x[0, 0, 0:2, 0:3] = float("-inf")
    x[0, 1, 2, 2] = x[0, 1, 4, 4] = x[0, 1, 3, 4] = float("nan")
    got = torch.compile(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), backend="inductor_lite")(x)
    expected = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    torch.testing.assert_close(got[0], expected[0], rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(got[1], expected[1], rtol=0, atol=0)


def test_max_pool2d_int64(device):
    if device == "cuda":
        pytest.skip("eager's CUDA max_pool2d has float kernels only (DilatedMaxPool2d.cu)")
    x = torch.randint(-1000, 1000, (2, 3, 8, 9))
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), x, backward=False, exact=True)


def test_max_pool2d_fuses_with_its_neighbours():
    """relu -> max_pool -> add is one kernel (the pooling window inlines the relu)."""
    check(lambda x: F.max_pool2d(x.relu(), 3, 2, 1) + 1, randn(2, 3, 8, 8), backward=False)
    assert inductor_lite.counters["kernels_generated"] == 1


def test_max_pool2d_large_window_is_extern():
    """Windows of more than 25 elements stay aten calls (TorchInductor's rule)."""
    check(lambda x: F.max_pool2d(x, 6, 2), randn(1, 2, 12, 12),
          externs=["extern.aten.max_pool2d_with_indices.default",
                   "extern.aten.max_pool2d_with_indices_backward.default"])
    assert inductor_lite.counters["extern.aten.max_pool2d_with_indices.default"] == 1


# ---------------------------------------------------------------------------- average pooling

AVG_POOL_CASES = [
    # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    (2, None, 0, False, True, None),
    (3, 2, 1, False, True, None),
    (3, 2, 1, True, False, None),
    (3, 2, 1, True, True, None),
    ((2, 3), (3, 1), (1, 0), True, True, 5),
    ((5, 4), (5, 4), 0, True, True, None),  # 20-element windows, the last ones clipped
]


@pytest.mark.parametrize("case, dtype", fp32_and_some_bf16(AVG_POOL_CASES, [2, 4]))
def test_avg_pool2d(case, dtype):
    kernel, stride, padding, ceil_mode, count_include_pad, divisor_override = case
    check(lambda x: F.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override),
          randn(2, 3, 11, 10, dtype=dtype))


# Eager's CUDA channels_last avg_pool2d backward ignores the padding (the NHWC kernel
# of aten/src/ATen/native/cuda/AveragePool2d.cu maps input positions to windows without
# the padding offset): a silently wrong gradient, pytorch/pytorch#188344, fixed by
# pytorch/pytorch#188345 (July 2026; torch 2.11 has the bug). Padded channels_last
# cases compare against eager on a contiguous copy (the NCHW kernel is right).


@pytest.mark.parametrize("layout", ["channels_last", "transposed"])
def test_avg_pool2d_layouts_and_unbatched(layout):
    x = randn(2, 4, 9, 7, layout=layout)
    check(lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), x, reference_input=x.contiguous())
    check(lambda x: F.avg_pool2d(x, 2, ceil_mode=True), randn(3, 7, 5))


@pytest.mark.parametrize("case", [AVG_POOL_CASES[i] for i in (1, 2, 4)])
def test_avg_pool2d_backward_channels_last_with_padding(case):
    """The gradient of a padded pooling of a channels_last input (its output, incoming
    gradient and input gradient channels_last too) matches eager's NCHW kernel, the
    eager kernel that is right on CUDA (see above)."""
    kernel, stride, padding, ceil_mode, count_include_pad, divisor_override = case
    x = randn(2, 5, 11, 10, layout="channels_last")
    check(lambda x: F.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override),
          x, reference_input=x.contiguous())


def test_avg_pool2d_large_window_is_a_reduction():
    """Non-overlapping windows of more than 25 elements reduce in our own kernel;
    overlapping ones stay extern."""
    check(lambda x: F.avg_pool2d(x, (6, 5), padding=(2, 1), ceil_mode=True, count_include_pad=False),
          randn(2, 3, 13, 11))
    x = randn(1, 2, 12, 12)
    torch.testing.assert_close(torch.compile(lambda x: F.avg_pool2d(x, 6, 2), backend="inductor_lite")(x),
                               F.avg_pool2d(x, 6, 2))
    assert inductor_lite.counters["extern.aten.avg_pool2d.default"] == 1


# ---------------------------------------------------------------------------- adaptive average pooling


@pytest.mark.parametrize("out_size, dtype", fp32_and_some_bf16([(3, 5), (4, 3), (7, 11), (2, 1)], [0]))
def test_adaptive_avg_pool2d(out_size, dtype):
    """Uneven windows (3, 5), even ones (4, 3), more outputs than inputs along W
    (7, 11), and even windows of 4x9 elements (2, 1)."""
    check(lambda x: F.adaptive_avg_pool2d(x, out_size), randn(2, 3, 8, 9, dtype=dtype))


def test_adaptive_avg_pool2d_channels_last():
    check(lambda x: F.adaptive_avg_pool2d(x, (3, 4)), randn(2, 5, 7, 9, layout="channels_last"))


# ---------------------------------------------------------------------------- upsampling

@pytest.mark.parametrize("kwargs, dtype", fp32_and_some_bf16([
    dict(scale_factor=2),
    dict(size=(5, 13)),
    dict(scale_factor=(1.7, 0.6)),
    dict(scale_factor=(1.7, 0.6), recompute_scale_factor=False),
    dict(size=(5, 13), mode="nearest-exact"),
], [2]))
def test_upsample_nearest2d(kwargs, dtype):
    check(lambda x: F.interpolate(x, **{"mode": "nearest", **kwargs}), randn(2, 3, 7, 9, dtype=dtype))


@pytest.mark.parametrize("kwargs, dtype", fp32_and_some_bf16([
    dict(scale_factor=2),
    dict(size=(5, 13), align_corners=True),
    dict(size=(5, 13), align_corners=False),
    dict(scale_factor=(1.5, 0.7), recompute_scale_factor=False),
    dict(scale_factor=(1.5, 0.7), align_corners=True),
], [1, 3]))
def test_upsample_bilinear2d(kwargs, dtype):
    check(lambda x: F.interpolate(x, mode="bilinear", **kwargs), randn(2, 3, 7, 9, dtype=dtype))


def test_upsample_channels_last():
    x = randn(2, 4, 6, 5, layout="channels_last")
    check(lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), x)
    check(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), x)


# ---------------------------------------------------------------------------- dynamic shapes


def _torch_guards_pooling_remainder() -> bool:
    """Whether torch's shape function for pooling guards on the remainder of the output
    size's division by the stride, making Dynamo compile once per remainder.

    Up to torch 2.1x, ``div_rtn`` in ``torch/_meta_registrations.py`` tested
    ``r != 0`` in a Python ``if`` (a sign fix-up Python's ``//`` does not need);
    with symbolic sizes that is a guard on ``(H + 2*pad - dilation*(k - 1) - 1
    [+ stride - 1 with ceil_mode]) % stride``, on any device. Later versions divide
    with ``//`` alone and add no such guard."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    shape_env = ShapeEnv()
    mode = torch._subclasses.FakeTensorMode(shape_env=shape_env)
    x = mode.from_tensor(torch.empty(2, 3, 9, 8, device="cpu"),
                         symbolic_context=StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 4))
    with mode:
        torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [], [0, 0], [1, 1], True)
    return any(g.expr.has(Mod, PythonMod) for g in shape_env.guards)


@pytest.mark.parametrize("fn, remainder_guarded", [
    (lambda x: F.max_pool2d(x, 2, ceil_mode=True), True),
    (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), False),
], ids=["max_pool2d", "upsample_nearest2d"])
def test_dynamic_shapes(fn, remainder_guarded):
    """One compile with symbolic sizes serves inputs of odd and even sizes (no size is
    1, which dynamo would specialise); where torch's pooling shape function guards on
    the sizes' parity (`_torch_guards_pooling_remainder`: torch 2.11), one compile per
    (H, W) parity, the fewest torch allows. Our lowering adds no guard either way (a
    lowering that did would bypass the graph cache)."""
    sizes = [(2, 3, 9, 8), (3, 2, 6, 11), (2, 2, 7, 7)]
    compiled = torch.compile(fn, backend="inductor_lite", dynamic=True)
    for size in sizes:
        x = torch.randn(size)
        for g, e in zip(_tuple(compiled(x)), _tuple(fn(x))):
            torch.testing.assert_close(g, e, rtol=0, atol=0)
    expected = 1
    if remainder_guarded and _torch_guards_pooling_remainder():
        expected = len({(h % 2, w % 2) for *_, h, w in sizes})
    counters = inductor_lite.counters
    assert not _externs() and counters["graphs_fallback"] == 0 and counters["graphs_compiled"] == expected
    assert counters["graph_cache_bypasses"] == 0


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_dynamic_upsample_to_another_tensors_size(mode):
    """A U-Net's ``interpolate(x, size=skip.shape[-2:])``: under dynamic shapes the
    scale is the SymFloat ``in / out`` of two size symbols, computed in the kernel."""
    fn = lambda x, skip: F.interpolate(x, size=skip.shape[-2:], mode=mode) + skip  # noqa: E731
    compiled = torch.compile(fn, backend="inductor_lite", dynamic=True)
    for (h, w), (big_h, big_w) in [((4, 5), (9, 11)), ((6, 3), (13, 7))]:
        x, skip = torch.randn(2, 3, h, w), torch.randn(2, 3, big_h, big_w)
        torch.testing.assert_close(compiled(x, skip), fn(x, skip))
    counters = inductor_lite.counters
    assert not _externs() and counters["graphs_fallback"] == 0 and counters["graphs_compiled"] == 1


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_dynamic_upsample_by_a_fractional_scale(mode):
    """``scale_factor=1.7`` under dynamic shapes: output sizes are
    ``TruncToInt(1.7*ToFloat(s))``, computed by the wrapper and passed to the kernels."""
    fn = lambda x: F.interpolate(x, scale_factor=1.7, mode=mode)  # noqa: E731
    compiled = torch.compile(fn, backend="inductor_lite", dynamic=True)
    for size in [(2, 3, 5, 7), (3, 2, 9, 6)]:
        x = torch.randn(size)
        torch.testing.assert_close(compiled(x), fn(x))
    counters = inductor_lite.counters
    assert not _externs() and counters["graphs_fallback"] == 0 and counters["graphs_compiled"] == 1


def test_training_step_of_a_small_cnn():
    """conv -> max_pool -> conv -> avg_pool -> adaptive pool: the gradients of every
    parameter match eager and no pooling op is an extern call."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1),
        torch.nn.Conv2d(4, 4, 3), torch.nn.AvgPool2d(2, ceil_mode=True), torch.nn.AdaptiveAvgPool2d((2, 3)),
    )
    x = torch.randn(2, 3, 15, 14)
    torch.compile(model, backend="inductor_lite")(x).square().sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().sum().backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)
    assert not [k for k in _externs() if "pool" in k]


def test_pooling_kernels_compile_to_ptx(device, kernel_launches):
    """Every kernel of a forward and backward through each pooling op (int64 max
    pooling's -2**63 padding value, masked windows, the gather backwards) goes through
    the NVPTX compiler and assembles for sm_80 and sm_90."""
    from inductor_lite.dsl import assembler

    if device != "cpu" or not assembler.can_assemble():
        pytest.skip("compiles the kernels the CPU run launched; needs nvJitLink or ptxas")
    launches = kernel_launches
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), torch.randint(-9, 9, (1, 2, 7, 6)),
          backward=False, exact=True)
    check(lambda x: (F.max_pool2d(x, 3, 2, 1) + F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
                     + F.adaptive_avg_pool2d(x, (4, 4))), randn(1, 2, 7, 7, dtype=torch.bfloat16))
    assert len(launches) >= 3
    assemble_launches(launches)


def test_pool_backward_with_a_constant_index():
    """A ceil-mode pool whose windows make an index expression constant in the backward
    kernel (it emitted ``(0).to(dl.int64)``)."""
    check(lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), randn(1, 2, 2, 5))
    check(lambda x: F.avg_pool2d(x, (4, 1), ceil_mode=True, count_include_pad=False),
          randn(2, 3, 2, 9, layout="channels_last"))
