"""End to end: torch.compile(backend="inductor_lite") against eager.

Every test runs twice: on CPU (kernels in the DSL interpreter) and, marked `gpu`, on
CUDA (kernels compiled through NVPTX and launched by the runtime); the default device
is switched for the test, so tensors and modules it creates land there.
"""

import copy
import glob
import io
import logging
import math
import os
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import inductor_lite
import inductor_lite.runtime.launcher
from inductor_lite import backend as backend_module
from inductor_lite.backend import check_options, inductor_lite_backend
from inductor_lite.codegen import runtime_helpers
from inductor_lite.config import config
from inductor_lite.fx_lowering import lowerings

aten = torch.ops.aten


@pytest.fixture(autouse=True, params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    with torch.device(request.param):
        yield request.param


@pytest.fixture(autouse=True)
def fresh(monkeypatch, device):
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    monkeypatch.setattr(backend_module, "_warned", False)
    with config.patch(fallback_on_error=False):
        yield
    torch._dynamo.reset()


def _poison(t):
    if t.dtype.is_floating_point:
        return t.fill_(float("nan"))
    return t.fill_(True if t.dtype == torch.bool else -77)


@pytest.fixture
def poison_empty(monkeypatch):
    """Allocations start as NaN / a sentinel, so elements a kernel fails to write show up.

    Generated wrappers allocate through `runtime_helpers` (bound when a module loads,
    which is after this patch) or, on a second CUDA device, `torch.empty_strided`.
    """
    for module, name in [(torch, "empty_strided"), (runtime_helpers, "empty_strided_cpu"),
                         (runtime_helpers, "empty_strided_cuda")]:
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _original=original, **k: _poison(_original(*a, **k)))


def tol(dtype):
    return {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float64: 1e-9}.get(dtype, 1e-5)


def assert_same(got, expected):
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e)
        return
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.stride() == expected.stride() or got.numel() <= 1
    if expected.dtype.is_floating_point:
        t = tol(expected.dtype)
        torch.testing.assert_close(got, expected, rtol=t, atol=t)
    else:
        assert torch.equal(got, expected)


def compiled_sources(tmp_path):
    return [open(p).read() for p in sorted(glob.glob(str(tmp_path / "graph_*" / "output_code.py")))]


def test_backend_is_registered():
    assert "inductor_lite" in torch._dynamo.list_backends()
    inductor_lite._register()  # a second registration is a no-op, not an error


def test_pointwise_chain_is_one_kernel_without_intermediate_buffers(poison_empty, tmp_path):
    def fn(x, y):
        a = torch.relu(x + y)
        b = a * 2 + 1
        return F.gelu(b) - x.sin()

    x, y = torch.randn(33, 65), torch.randn(65)
    with config.patch(debug_dir=str(tmp_path)):
        out = torch.compile(fn, backend="inductor_lite")(x, y)
    assert_same(out, fn(x, y))
    assert inductor_lite.counters["kernels_generated"] == 1
    assert inductor_lite.counters["graphs_compiled"] == 1
    (source,) = compiled_sources(tmp_path)
    assert len(re.findall(r"empty_strided(_cpu|_cuda)?\(", source)) == 1
    assert "def poi_fused_add_gelu_mul_relu_sin_sub_0(" in source


def test_two_independent_chains_are_two_kernels(poison_empty):
    def fn(x, y, w):
        a = (x * 2).exp()
        return a @ w, (y + 1).relu()

    x, y, w = torch.randn(4, 5), torch.randn(7), torch.randn(5, 3)
    out = torch.compile(fn, backend="inductor_lite")(x, y, w)
    assert_same(out, fn(x, y, w))
    assert inductor_lite.counters["kernels_generated"] == 2
    assert inductor_lite.counters["extern.aten.mm.default"] == 1


def test_repeated_layers_define_each_kernel_once(poison_empty):
    layers = nn.Sequential(*(nn.Sequential(nn.Linear(32, 32), nn.LayerNorm(32), nn.GELU()) for _ in range(3)))
    x = torch.randn(6, 32)
    with torch.no_grad():
        out = torch.compile(layers, backend="inductor_lite")(x)
        assert_same(out, layers(x))
    # every layer launches the same fused LayerNorm + GELU kernel after its GEMM
    assert inductor_lite.counters["kernels_generated"] == 3
    assert inductor_lite.counters["kernels_defined"] == 1


def test_broadcasting(poison_empty):
    fn = lambda x, y, z: (x + y) * z - 1  # noqa: E731
    args = torch.randn(4, 1, 8), torch.randn(3, 1), torch.randn(())
    assert_same(torch.compile(fn, backend="inductor_lite")(*args), fn(*args))


def test_views_permutes_slices(poison_empty):
    def fn(x, y):
        a = x.permute(1, 0, 2)[:, 1:3] * 2
        b = y.t().unsqueeze(0).expand(3, 5, 4)
        c = x[..., ::2].reshape(3, 10)
        return a + b[:, :2], c.exp(), x.transpose(0, 2).contiguous() + 1

    x, y = torch.randn(5, 3, 4), torch.randn(4, 5)
    assert_same(torch.compile(fn, backend="inductor_lite")(x, y), fn(x, y))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int32])
def test_dtypes(dtype, poison_empty):
    def fn(x, y, f):
        z = x * y + x
        if z.dtype.is_floating_point:
            z = F.gelu(z) + torch.where(x > 0, x, y)
        return z, z.to(torch.float32) * f, (x > y) & (y >= 0)

    make = (lambda *s: torch.randint(-9, 9, s).to(dtype)) if not dtype.is_floating_point else \
        (lambda *s: torch.randn(*s).to(dtype))
    args = make(6, 10), make(10), torch.randn(6, 10)
    got, want = torch.compile(fn, backend="inductor_lite")(*args), fn(*args)
    assert_same((got[0], got[2]), (want[0], want[2]))
    # The fp32 output is computed from z: one rounding of z (an ulp of `dtype`) may differ.
    assert got[1].dtype == want[1].dtype == torch.float32
    torch.testing.assert_close(got[1], want[1], rtol=tol(dtype), atol=tol(dtype))


def test_zero_dim_cpu_tensors_mix_with_device_tensors(device, poison_empty):
    """Eager reads a 0-d CPU tensor next to CUDA tensors as a scalar: a graph input and a
    constant made inside the function (lifted by dynamo) both reach the kernel."""
    def fn(x, s):
        y = torch.where(x > 0, x * s, torch.tensor(-1.5, device="cpu")) + s
        return torch.index_put(y, (torch.arange(3),), torch.tensor(7.0, device="cpu"))

    x, s = torch.randn(1000), torch.tensor(2.5, device="cpu")
    got = torch.compile(fn, backend="inductor_lite")(x, s)
    torch.testing.assert_close(got, fn(x, s), rtol=0, atol=0)
    assert inductor_lite.counters["extern_calls"] == 0


def test_externs_are_counted(poison_empty):
    def fn(x, w, g, b):
        h = F.layer_norm(x, (8,), g, b)
        s = torch.softmax(h @ w, dim=-1)
        return torch.topk(s, 2, -1).values, torch.sort(s, -1).values, torch.kthvalue(s, 2, -1).values * s.sum(-1)

    args = (torch.randn(4, 8), torch.randn(8, 6), torch.randn(8), torch.randn(8))
    assert_same(torch.compile(fn, backend="inductor_lite")(*args), fn(*args))
    c = inductor_lite.counters
    externs = ("aten.mm.default", "aten.topk.default", "aten.sort.default", "aten.kthvalue.default")
    for op in externs:
        assert c[f"extern.{op}"] == 1, op
    assert c["extern_calls"] == 4
    # layer_norm, softmax and the sum are lowered to kernels, not counted as externs
    assert sorted(k for k in c if k.startswith("extern.")) == sorted(f"extern.{op}" for op in externs)


def test_mlp_gelu_training_step_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.Linear(32, 12), nn.LayerNorm(12))
    reference = copy.deepcopy(model)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference))
    compiled = torch.compile(model, backend="inductor_lite")
    for step in range(2):
        x, target = torch.randn(16, 12), torch.randn(16, 12)
        loss = F.mse_loss(compiled(x), target)
        ref_loss = F.mse_loss(reference(x), target)
        loss.backward()
        ref_loss.backward()
        torch.testing.assert_close(loss, ref_loss)
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
        opt.step(), ref_opt.step()
        opt.zero_grad(), ref_opt.zero_grad()
    assert inductor_lite.counters["graphs_compiled"] == 2  # forward + backward
    assert inductor_lite.counters["graphs_fallback"] == 0


def test_dynamic_shapes(poison_empty):
    def fn(x, y):
        return (x * y[:, None]).exp() + x[:, -1:], x.shape[0] * x

    compiled = torch.compile(fn, backend="inductor_lite", dynamic=True)
    for n, m in ((5, 7), (9, 3), (2, 11)):
        x, y = torch.randn(n, m), torch.randn(n)
        assert_same(compiled(x, y), fn(x, y))
    assert inductor_lite.counters["graphs_compiled"] == 1


def test_dynamic_floats_computed_from_sizes(poison_empty):
    # a float from a size reaches an extern call (full's fill value, a 0-d tensor)
    def fn(x):
        n = x.shape[0]
        return torch.full((2,), n * 1.5), x + torch.tensor(n * 0.25), torch.full((1,), n / 3 + math.sqrt(n))

    compiled = torch.compile(fn, backend="inductor_lite", dynamic=True)
    for n in (3, 8):
        x = torch.randn(n)
        assert_same(compiled(x), fn(x))


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
def test_modes_are_accepted(mode):
    fn = lambda x: x.cos() + 1  # noqa: E731
    x = torch.randn(10)
    assert_same(torch.compile(fn, backend="inductor_lite", mode=mode)(x), fn(x))


def test_options_map_onto_config(tmp_path):
    fn = lambda x: x.cos() + 1  # noqa: E731
    x = torch.randn(1000)
    out = torch.compile(fn, backend="inductor_lite", options={"xblock": 64, "debug_dir": str(tmp_path)})(x)
    assert_same(out, fn(x))
    (source,) = compiled_sources(tmp_path)
    assert "XBLOCK=64" in source
    assert config.xblock != 64 and config.debug_dir == ""


def test_runtime_options_hold_during_calls_and_are_patched_only_when_config_differs(monkeypatch):
    seen, patches = [], []
    original_patch = config.patch

    def counting_patch(**changes):
        patches.append(changes)
        return original_patch(**changes)

    def call(args):
        args.clear()
        seen.append((config.interpret, config.xblock))
        return ()

    monkeypatch.setattr(config, "patch", counting_patch)
    graph = backend_module.CompiledGraph(call, lambda: (), "", "g", "default", {"interpret": True, "xblock": 64})
    with original_patch(interpret=False):
        graph([1])
        assert config.interpret is False
    with original_patch(interpret=True):
        graph([1])
    # xblock only matters while compiling; interpret is patched once, for the call that needed it
    assert seen == [(True, config.xblock), (True, config.xblock)] and config.xblock != 64
    assert patches == [{"interpret": True}]

def test_bad_mode_and_options_are_rejected():
    with pytest.raises(ValueError, match="unknown mode 'fastest'.*max-autotune"):
        check_options("fastest", None)
    with pytest.raises(KeyError, match=r"unknown option\(s\) \['triton.cudagraphs'\].*xblock"):
        check_options(None, {"triton.cudagraphs": True})
    with pytest.raises(TypeError, match="'num_warps' must be a int"):
        check_options(None, {"num_warps": "4"})
    with pytest.raises(TypeError, match="unexpected backend argument"):
        inductor_lite_backend(None, [], fullgraph=True)
    compiled = torch.compile(lambda x: x + 1, backend="inductor_lite", options={"bogus_knob": 1})
    with pytest.raises(Exception, match="bogus_knob"):
        compiled(torch.randn(3))


def test_lowering_failure_falls_back_to_eager(monkeypatch, caplog):
    def broken(ctx, *args, **kwargs):
        raise RuntimeError("injected lowering failure")

    monkeypatch.setitem(lowerings.LOWERINGS, aten.sin.default, broken)
    fn = lambda x: x.sin() * 2  # noqa: E731
    x = torch.randn(8)
    with config.patch(fallback_on_error=True), caplog.at_level(logging.WARNING, logger="inductor_lite"):
        out = torch.compile(fn, backend="inductor_lite")(x)
    assert_same(out, fn(x))
    assert inductor_lite.counters["graphs_fallback"] == 1
    assert inductor_lite.counters["graphs_compiled"] == 0
    assert "injected lowering failure" in caplog.text
    torch._dynamo.reset()
    with pytest.raises(Exception, match="injected lowering failure"):
        torch.compile(fn, backend="inductor_lite")(x)


def test_first_run_failure_falls_back_to_eager(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("injected launch failure")

    # The first launch of a kernel goes through the interpreter (CPU) or builds and
    # loads the binary (CUDA, bound launchers included).
    monkeypatch.setattr(inductor_lite.dsl.interpreter, "run", broken)
    monkeypatch.setattr(inductor_lite.runtime.launcher, "precompile", broken)
    fn = lambda x: x.exp() - 1  # noqa: E731
    x = torch.randn(8)
    with config.patch(fallback_on_error=True):
        compiled = torch.compile(fn, backend="inductor_lite")
        assert_same(compiled(x), fn(x))
        assert_same(compiled(x * 2), fn(x * 2))
    assert inductor_lite.counters["graphs_fallback"] == 1


def test_output_code_log():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("inductor_lite.output_code")
    logger.addHandler(handler)
    try:
        with config.patch(logs="output_code"):
            torch.compile(lambda x: x.tanh() * 3, backend="inductor_lite")(torch.randn(5))
        torch._dynamo.reset()
        torch.compile(lambda x: x.tanh() * 2, backend="inductor_lite")(torch.randn(5))
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert "@dl.kernel" in text and "def call(args):" in text and "poi_fused_mul_tanh_0" in text
    assert text.count("def call(args):") == 1  # nothing logged once the artifact is off


def test_debug_dir_contents(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU())
    x = torch.randn(3, 4, requires_grad=True)
    with config.patch(debug_dir=str(tmp_path)):
        torch.compile(model, backend="inductor_lite")(x).sum().backward()
    folders = sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / "graph_*")))
    assert sorted(f.rsplit("_", 1)[1] for f in folders) == ["bw", "fw"]
    for folder in folders:
        files = set(os.listdir(tmp_path / folder))
        assert files == {"fx_graph.txt", "ir_pre_fusion.txt", "ir_post_fusion.txt", "memory_plan.txt", "output_code.py", "kernels"}
        assert "def call(args):" in (tmp_path / folder / "output_code.py").read_text()
        assert "aten" in (tmp_path / folder / "fx_graph.txt").read_text()
