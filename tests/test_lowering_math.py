"""Pointwise math and the pointwise losses through the backend, against eager.

Each op runs on fresh random inputs over its domain plus edge values (+-0, +-inf,
NaN, domain edges such as ``acosh(1)``, ``atanh(+-1)``, the poles of ``lgamma`` and
``digamma``) with outputs poisoned (NaN) before the run. fp32 results must be as
close to an fp64 reference as eager's fp32 results are (twice eager's error, plus
fp32's default tolerance), with NaN and inf exactly where eager has them; bf16
results match eager's within bf16's tolerance. No op may run as an aten extern call
(``extern.<op>`` counters), and a few run backward. The DSL kernels that call the
new libdevice functions compile to PTX that ptxas assembles for sm_80 and sm_90.
Every value test runs on CPU (the DSL interpreter) and, marked `gpu`, on CUDA, where
libdevice computes the math.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import inductor_lite
from inductor_lite.codegen import runtime_helpers
from inductor_lite.config import config
from inductor_lite.dsl import interpreter
from test_runtime_launch import stub  # noqa: F401  (a fixture: the fake CUDA driver)
from test_runtime_cache import fake_driver  # noqa: F401  (a fixture stub uses)
from conftest import assemble_launches

INF, NAN = math.inf, math.nan
EDGES = [0.0, -0.0, INF, -INF, NAN]


@pytest.fixture(autouse=True, params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    with torch.device(request.param):
        yield request.param


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    torch._dynamo.reset()
    inductor_lite.reset_counters()

    def poison(t):
        return t.fill_(NAN) if t.dtype.is_floating_point else t.fill_(True if t.dtype == torch.bool else -77)

    for module, name in [(torch, "empty_strided"), (runtime_helpers, "empty_strided_cpu"),
                         (runtime_helpers, "empty_strided_cuda")]:
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _original=original, **k: poison(_original(*a, **k)))
    with config.patch(fallback_on_error=False):
        yield
    torch._dynamo.reset()


def sample(lo, hi, extra=(), n=97, dtype=torch.float32):
    """``n`` uniform values in ``[lo, hi]``, then `EDGES` and ``extra``."""
    x = torch.rand(n, dtype=torch.float64) * (hi - lo) + lo
    return torch.cat([x, torch.tensor(EDGES + list(extra), dtype=torch.float64)]).to(dtype)


def pairs(x, y):
    """Every value of ``x`` against every value of ``y`` (flattened cross product)."""
    return x.repeat_interleave(len(y)), y.repeat(len(x))


def compile_and_run(fn, *args, externs=()):
    """``fn`` through the backend: its result, with no extern call but ``externs`` and,
    unless there are some, a generated kernel."""
    got = torch.compile(fn, backend="inductor_lite")(*args)
    counters = inductor_lite.counters
    called = sorted(k for k in counters if k.startswith("extern.") and k not in externs)
    assert not called, called
    assert counters["graphs_fallback"] == 0
    assert externs or counters["kernels_generated"] >= 1
    return got


def assert_identical(got, want):
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def assert_close_to_reference(got, eager, reference):
    """``got`` (fp32) is no further from the fp64 ``reference`` than twice eager's
    fp32 error plus fp32's default tolerance; NaN and +-inf exactly where eager has them."""
    assert got.dtype == eager.dtype and got.shape == eager.shape
    got, eager, reference = got.double(), eager.double(), reference.double()
    assert torch.equal(got.isnan(), eager.isnan()), (got, eager)
    infinite = eager.isinf()
    assert torch.equal(got[infinite], eager[infinite]), (got[infinite], eager[infinite])
    finite = ~infinite & ~eager.isnan()
    got, eager, reference = got[finite], eager[finite], reference[finite]
    # eager may round a huge fp64 value to fp32's inf, where ours stays finite: compare as fp32 would
    reference = reference.clamp(-torch.finfo(torch.float32).max, torch.finfo(torch.float32).max)
    allowed = 2 * (eager - reference).abs() + 1e-5 + 1.3e-6 * reference.abs()
    bad = (got - reference).abs() > allowed
    assert not bad.any(), (got[bad], eager[bad], reference[bad])


def check_fp32(fn, *args, externs=()):
    got = compile_and_run(fn, *args, externs=externs)
    eager = fn(*args)
    reference = fn(*[a.double() if a.dtype == torch.float32 else a for a in args])
    if eager.dtype == torch.bool:
        assert torch.equal(got, eager)
    else:
        assert_close_to_reference(got, eager, reference)


# op: (function, domain of the random values, extra edge values)
UNARY = {
    "acos": (torch.acos, (-1, 1), [1.0, -1.0, 1.5, -2.0]),
    "asin": (torch.asin, (-1, 1), [1.0, -1.0, 1.5]),
    "atan": (torch.atan, (-20, 20), [1e30, -1e30]),
    "sinh": (torch.sinh, (-10, 10), [88.0, -100.0]),
    "cosh": (torch.cosh, (-10, 10), [-88.0, 100.0]),
    "asinh": (torch.asinh, (-100, 100), [1e30, -1e-30]),
    "acosh": (torch.acosh, (1, 100), [1.0, 0.5, 1e30]),
    "atanh": (torch.atanh, (-1, 1), [1.0, -1.0, 2.0]),
    "erfc": (torch.erfc, (-5, 12), [30.0, -30.0]),
    "erfinv": (torch.erfinv, (-1, 1), [1.0, -1.0, 1.5, 1e-30]),
    "lgamma": (torch.lgamma, (-10, 10), [1.0, 2.0, -1.0, -2.0, -2.5, 1e30, 1e-30]),
    "digamma": (torch.digamma, (-10, 30), [1.0, 10.0, -1.0, -2.0, -2.5, 1e-30, 1e20, -1e-30, 1.4616321]),
    "polygamma_0": (lambda x: torch.polygamma(0, x), (-10, 30), [1.0, -1.0, -2.5, 1e-30]),
    "polygamma_1": (lambda x: torch.polygamma(1, x), (-10, 30), [1.0, 0.5, -1.0, -2.5, 1e-30, 1e20, 0.4999]),
    "i0": (torch.i0, (-20, 20), [90.0, 100.0]),
    "special_i1": (torch.special.i1, (-20, 20), [-90.0, 100.0]),
    "modified_bessel_i0": (torch.special.modified_bessel_i0, (-20, 20), [90.0]),
    "modified_bessel_i1": (torch.special.modified_bessel_i1, (-20, 20), [-90.0]),
    "bessel_j0": (torch.special.bessel_j0, (-30, 30), [1e-30, 2.404825]),
    "bessel_j1": (torch.special.bessel_j1, (-30, 30), [1e-30, 3.831706]),
    "bessel_y0": (torch.special.bessel_y0, (-1, 30), [1e-30, 0.893577]),
    "bessel_y1": (torch.special.bessel_y1, (-1, 30), [1e-30, 2.197141]),
    "special_erfcx": (torch.special.erfcx, (-5, 30), [1e10, -10.0, -30.0]),
    "special_i0e": (torch.special.i0e, (-50, 50), [699.0, 701.0, -1e4, 1e30]),
    "special_i1e": (torch.special.i1e, (-50, 50), [699.0, -701.0, -1e4, 1e30]),
    "special_ndtri": (torch.special.ndtri, (0, 1), [1.0, 1e-30, 1e-7, 0.9999999, 1.5, -0.5]),
    "sinc": (torch.sinc, (-5, 5), [1.0, 2.0, -3.0, 1e-30]),
    "signbit": (torch.signbit, (-5, 5), [NAN * -1.0]),
    "rad2deg": (torch.rad2deg, (-10, 10), []),
    "isposinf": (torch.isposinf, (-5, 5), []),
    "isneginf": (torch.isneginf, (-5, 5), []),
    "special_entr": (torch.special.entr, (-1, 5), [1.0]),
    "special_ndtr": (torch.special.ndtr, (-10, 10), [-40.0]),
    "special_log_ndtr": (torch.special.log_ndtr, (-20, 10), [-40.0, 40.0]),
    "logsigmoid": (F.logsigmoid, (-30, 30), [-100.0, 100.0]),
    "round_decimals_2": (lambda x: torch.round(x, decimals=2), (-100, 100), [0.125, -0.375, 1e30]),
    "round_decimals_-1": (lambda x: torch.round(x, decimals=-1), (-1000, 1000), [25.0, 35.0, -45.0]),
    "round_decimals_309": (lambda x: torch.round(x, decimals=309), (-10, 10), []),  # 10**309: inf, NaN out
    "mvlgamma": (lambda x: torch.mvlgamma(x, 3), (1.01, 20), []),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_fp32(name):
    fn, (lo, hi), extra = UNARY[name]
    x = sample(lo, hi, extra)
    if name == "mvlgamma":  # its domain check rejects x <= (p - 1) / 2 in eager too
        x = x[x > 1.0]
    check_fp32(fn, x)


# eager has no bf16 CPU kernels for these
NO_BF16 = {"special_erfcx", "special_ndtri", "special_log_ndtr", "modified_bessel_i0", "modified_bessel_i1",
           "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1"}


def test_unary_bf16():
    """Every op of `UNARY` that eager has in bf16, in one graph (one compile)."""
    names = sorted(set(UNARY) - NO_BF16)
    inputs = []
    for name in names:
        _, (lo, hi), extra = UNARY[name]
        x = sample(lo, hi, extra, n=64, dtype=torch.bfloat16)
        inputs.append(x[x > 1.0] if name == "mvlgamma" else x)

    def fn(*xs):
        return tuple(UNARY[name][0](x) for name, x in zip(names, xs))

    for name, got, want in zip(names, compile_and_run(fn, *inputs), fn(*inputs)):
        assert got.dtype == want.dtype, name
        torch.testing.assert_close(got, want, equal_nan=True, atol=1e-2, rtol=1.6e-2, msg=name)


@pytest.mark.parametrize("name", ["acos", "erfinv", "lgamma", "i0", "digamma", "sinc"])
def test_unary_of_integers_promotes_to_float(name):
    fn = UNARY[name][0]
    x = torch.randint(-3, 4, (50,))
    got = compile_and_run(fn, x)
    eager = fn(x)
    assert got.dtype == eager.dtype == torch.float32
    torch.testing.assert_close(got, eager, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.uint8, torch.bool])
def test_signbit_of_integers(dtype):
    x = torch.randint(-100 if dtype.is_signed else 0, 100 if dtype != torch.bool else 2, (50,)).to(dtype)
    assert torch.equal(compile_and_run(torch.signbit, x), torch.signbit(x))


BINARY = {
    "hypot": (torch.hypot, (-1e3, 1e3), [1e30, 3e-39]),
    "copysign": (torch.copysign, (-5, 5), [NAN * -1.0]),
    "nextafter": (torch.nextafter, (-2, 2), [1.0, 3e-45, -3e-45]),
    "fmax": (torch.fmax, (-5, 5), [1.0]),
    "fmin": (torch.fmin, (-5, 5), [1.0]),
    "logaddexp": (torch.logaddexp, (-50, 50), [-1e30]),
    "logaddexp2": (torch.logaddexp2, (-50, 50), [1e30]),
    "heaviside": (torch.heaviside, (-5, 5), [1.0]),
    "xlog1py": (torch.special.xlog1py, (-0.9, 5), [-1.0]),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_fp32(name):
    fn, (lo, hi), extra = BINARY[name]
    x, y = sample(lo, hi, extra, n=13), sample(lo, hi, extra, n=13)
    a, b = pairs(x, y)
    check_fp32(fn, a, b)


def test_binary_bf16():
    """Every op of `BINARY` but nextafter (an extern in bf16) in one graph."""
    names = sorted(set(BINARY) - {"nextafter"})
    inputs = []
    for name in names:
        _, (lo, hi), extra = BINARY[name]
        x, y = (sample(lo, hi, extra, n=9, dtype=torch.bfloat16) for _ in range(2))
        inputs += pairs(x, y)

    def fn(*xs):
        return tuple(BINARY[name][0](xs[2 * i], xs[2 * i + 1]) for i, name in enumerate(names))

    for name, got, want in zip(names, compile_and_run(fn, *inputs), fn(*inputs)):
        assert got.dtype == want.dtype, name
        torch.testing.assert_close(got, want, equal_nan=True, atol=1e-2, rtol=1.6e-2, msg=name)


BESSEL_I = {"i0": torch.i0, "special_i1": torch.special.i1, "modified_bessel_i0": torch.special.modified_bessel_i0,
            "modified_bessel_i1": torch.special.modified_bessel_i1}


def _as_libdevice(fn):
    """``fn`` as libdevice's cyl_bessel_i0/i1 compute it: the true value (from fp64),
    finite up to |x| = 91.9, and +-inf at +-inf (eager: inf from |x| = 88.72, NaN at +-inf)."""
    def emulated(x):
        at_inf = fn(torch.tensor([1.0, -1.0], dtype=torch.float64)).sign() * math.inf
        r = torch.where(x == math.inf, at_inf[0], torch.where(x == -math.inf, at_inf[1], fn(x.double())))
        return r.to(x.dtype)

    return emulated


@pytest.mark.parametrize("name", sorted(BESSEL_I))
def test_bessel_i_overflow_and_infinities_match_eager(name, device, monkeypatch):
    """Eager computes exp(|x|) * series / sqrt(|x|): +-inf once exp(|x|) overflows
    (fp32's last finite exp is at 88.7228317), NaN at +-inf, +0.0 at -0.0. On CPU the
    interpreter's i0/i1 are replaced by libdevice's semantics (finite up to 91.9, inf
    at inf), so the lowering must produce eager's values from those; on CUDA libdevice
    computes them."""
    if device == "cpu":
        monkeypatch.setitem(interpreter._UNARY, "cyl_bessel_i0", _as_libdevice(torch.i0))
        monkeypatch.setitem(interpreter._UNARY, "cyl_bessel_i1", _as_libdevice(torch.special.i1))
    edges = [88.0, 88.72283172607422, 88.72283935546875, 89.0, 90.0, 91.5, 95.0, 1e30, INF, NAN, 0.0, 8.0, 7.5]
    x = torch.tensor(edges + [-v for v in edges])
    fn = BESSEL_I[name]
    got = compile_and_run(fn, x)
    eager = fn(x)
    assert_close_to_reference(got, eager, fn(x.double()))
    number = ~eager.isnan()
    assert torch.equal(got[number].signbit(), eager[number].signbit()), (got, eager)
    # fp64 overflows from exp(709.79); bf16 computes in fp32 (eager has no bf16 modified_bessel_*)
    for dtype in (torch.float64,) if name.startswith("modified") else (torch.float64, torch.bfloat16):
        torch._dynamo.reset()
        x = torch.tensor(edges + [709.0, 710.0] + [-v for v in edges], dtype=dtype)
        torch.testing.assert_close(compile_and_run(fn, x), fn(x), equal_nan=True, msg=str(dtype))


def test_scaled_bessel_in_fp64_stays_an_extern():
    x = torch.randn(30, dtype=torch.float64) * 10
    got = compile_and_run(torch.special.i0e, x, externs=("extern.aten.special_i0e.default",))
    assert_identical(got, torch.special.i0e(x))


def test_polygamma_of_higher_order_stays_an_extern():
    x = torch.rand(30) * 5 + 0.1
    got = compile_and_run(lambda v: torch.polygamma(2, v), x, externs=("extern.aten.polygamma.default",))
    torch.testing.assert_close(got, torch.polygamma(2, x))


def test_nextafter_in_bf16_stays_an_extern():
    # One step of a bf16 ulp: the DSL computes bf16 in fp32, so the op is left to aten.
    x, y = torch.randn(40).bfloat16(), torch.randn(40).bfloat16()
    got = compile_and_run(torch.nextafter, x, y, externs=("extern.aten.nextafter.default",))
    assert_identical(got, torch.nextafter(x, y))
    assert inductor_lite.counters["extern.aten.nextafter.default"] == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ldexp_rounds_once(dtype):
    """x * 2**e rounded once, as eager: no overflow of 2**e alone, subnormal results
    rounded from the exact product; float exponents (an fp32 result) within fp32's
    tolerance (2**f itself is rounded)."""
    x = sample(-10, 10, [1.5, 3.0, 1e-30], dtype=dtype)
    e = torch.randint(-160, 160, x.shape, dtype=torch.int32)
    e[-3:] = torch.tensor([-149, -150, 140], dtype=torch.int32)
    assert_identical(compile_and_run(torch.ldexp, x, e), torch.ldexp(x, e))
    torch._dynamo.reset()
    f = torch.randn(x.shape) * 20
    torch.testing.assert_close(compile_and_run(torch.ldexp, x, f), torch.ldexp(x, f), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_frexp(dtype):
    """Exact: powers of two, the values just below them, subnormals, zeros, inf, NaN."""
    below = [math.nextafter(2.0 ** k, 0) for k in (-120, -3, 1, 20, 100)]
    x = sample(-1e6, 1e6, [2.0 ** -149, -(2.0 ** -130), 2.0 ** 127, 0.5, -1.0, 3.4e38] + below, dtype=dtype)
    got = compile_and_run(torch.frexp, x)
    want = torch.frexp(x)
    assert_identical(got[0], want[0])
    assert_identical(got[1], want[1])


def test_ldexp_in_fp64_stays_an_extern():
    x, e = torch.randn(20, dtype=torch.float64), torch.randint(-1100, 1100, (20,))
    got = compile_and_run(torch.ldexp, x, e, externs=("extern.aten.ldexp.Tensor",))
    assert_identical(got, torch.ldexp(x, e))


def test_copysign_of_integers_and_scalars():
    x, y = torch.randint(-5, 5, (30,)), sample(-3, 3, n=25)

    def fn(a, b):
        return torch.copysign(a, b), torch.copysign(b, -0.0), torch.copysign(a, 2)

    for g, w in zip(compile_and_run(fn, x, y), fn(x, y)):
        assert w.dtype == torch.float32
        assert_identical(g, w)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8])
def test_shifts(dtype):
    lo, hi = (0, 255) if dtype == torch.uint8 else (-100, 100)
    x = torch.randint(lo, hi, (60,)).to(dtype)
    shift = torch.randint(0, torch.iinfo(dtype).bits + 3, (60,)).to(dtype)
    got = compile_and_run(lambda a, s: (a << s, a >> s, torch.bitwise_left_shift(a, 3), a >> 2), x, shift)
    want = (x << shift, x >> shift, torch.bitwise_left_shift(x, 3), x >> 2)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g, w)


def test_fmax_fmin_of_integers():
    a, b = torch.randint(-9, 9, (40,)), torch.randint(-9, 9, (40,))
    got = compile_and_run(lambda x, y: (torch.fmax(x, y), torch.fmin(x, y)), a, b)
    assert torch.equal(got[0], torch.fmax(a, b)) and torch.equal(got[1], torch.fmin(a, b))


def test_signed_zeros_and_nan_signs():
    """-0.0 and NaN's sign bit go through exactly: signbit, copysign, fmax of +-0."""
    x = torch.tensor([0.0, -0.0, NAN, -NAN, 1.0, -1.0, INF, -INF])
    got = compile_and_run(lambda v: (torch.signbit(v), torch.copysign(torch.ones_like(v), v),
                                     torch.sinc(v), torch.digamma(v)), x)
    assert torch.equal(got[0], torch.signbit(x))
    assert torch.equal(got[1], torch.copysign(torch.ones_like(x), x))
    torch.testing.assert_close(got[2], torch.sinc(x), equal_nan=True)
    torch.testing.assert_close(got[3], torch.digamma(x), equal_nan=True)


# ---------------------------------------------------------------------------- losses

LOSSES = {
    "mse": (F.mse_loss, "normal"),
    "l1": (F.l1_loss, "normal"),
    "smooth_l1": (lambda a, b, reduction: F.smooth_l1_loss(a, b, reduction=reduction, beta=0.5), "normal"),
    "huber": (lambda a, b, reduction: F.huber_loss(a, b, reduction=reduction, delta=0.7), "normal"),
    "bce": (F.binary_cross_entropy, "probability"),
    "bce_weight": (lambda a, b, reduction: F.binary_cross_entropy(a, b, weight=b.flip(0), reduction=reduction),
                   "probability"),
    "bce_with_logits": (F.binary_cross_entropy_with_logits, "logits"),
    "bce_with_logits_pos_weight": (lambda a, b, reduction: F.binary_cross_entropy_with_logits(
        a, b, pos_weight=b[0] + 0.5, reduction=reduction), "logits"),
    "soft_margin": (F.soft_margin_loss, "sign"),
}


def _loss_inputs(kind, dtype):
    x = torch.randn(6, 33)
    if kind == "probability":
        x = torch.rand(6, 33) * 0.98 + 0.01
    target = {"normal": torch.randn(6, 33), "probability": torch.rand(6, 33), "logits": torch.rand(6, 33),
              "sign": torch.randint(0, 2, (6, 33)).float() * 2 - 1}[kind]
    return x.to(dtype).requires_grad_(), target.to(dtype)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_forward_and_backward(name):
    """Reductions none, mean and sum in one graph, and the gradient of all three."""
    fn, kind = LOSSES[name]
    x, target = _loss_inputs(kind, torch.float32)
    x_eager = x.detach().clone().requires_grad_()

    def losses(a, b):
        return tuple(fn(a, b, reduction=reduction) for reduction in ("none", "mean", "sum"))

    got = compile_and_run(losses, x, target)
    (got[0].sum() + got[1] * 3 + got[2]).backward()
    want = losses(x_eager, target)
    (want[0].sum() + want[1] * 3 + want[2]).backward()
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, x_eager.grad, rtol=1e-5, atol=1e-6)
    assert not [k for k in inductor_lite.counters if k.startswith("extern.")]


@pytest.mark.parametrize("name", ["mse", "bce", "bce_with_logits", "soft_margin"])
def test_loss_bf16(name):
    fn, kind = LOSSES[name]
    x, target = _loss_inputs(kind, torch.bfloat16)
    x = x.detach()
    got = compile_and_run(lambda a, b: fn(a, b, reduction="mean"), x, target)
    torch.testing.assert_close(got, fn(x, target, reduction="mean"), rtol=1.6e-2, atol=1e-2)


# ---------------------------------------------------------------------------- backward

GRADIENTS = {
    "acos": (torch.acos, (-0.95, 0.95)),
    "atanh": (torch.atanh, (-0.95, 0.95)),
    "erfinv": (torch.erfinv, (-0.95, 0.95)),
    "lgamma": (torch.lgamma, (0.1, 10)),
    "digamma": (torch.digamma, (-3, 10)),
    # sinc's derivative cancels near 0 (both terms ~2/x), where fp32 eager and ours each
    # err by ~1e-7/|x| in their own way: a fixed tolerance cannot tell them apart there
    "sinc": (torch.sinc, (0.1, 3)),
    "i0": (torch.i0, (-5, 5)),
    "logsigmoid": (F.logsigmoid, (-10, 10)),
}


@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_backward(name):
    fn, (lo, hi) = GRADIENTS[name]
    x = (torch.rand(70) * (hi - lo) + lo).requires_grad_()
    x_eager = x.detach().clone().requires_grad_()
    x_fp64 = x.detach().double().requires_grad_()
    grad = torch.randn(70)
    compile_and_run(fn, x).backward(grad)
    fn(x_eager).backward(grad)
    fn(x_fp64).backward(grad.double())
    # Formulas that cancel leave fp32 eager off by more than 1e-5 too: ours may not be
    # further from fp64 than twice eager's error.
    want = x_fp64.grad
    allowed = 2 * (x_eager.grad.double() - want).abs() + 1e-5 + 1e-5 * want.abs()
    error = (x.grad.double() - want).abs()
    assert (error <= allowed).all(), f"max excess {(error - allowed).max().item():.3g}"


def test_binary_backward():
    a, b = torch.randn(50, requires_grad=True), torch.randn(50, requires_grad=True)
    a_eager, b_eager = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()

    def fn(x, y):
        return torch.hypot(x, y) + torch.logaddexp(x, y) * torch.copysign(x, y)

    compile_and_run(fn, a, b).sum().backward()
    fn(a_eager, b_eager).sum().backward()
    torch.testing.assert_close(a.grad, a_eager.grad)
    torch.testing.assert_close(b.grad, b_eager.grad)


# ---------------------------------------------------------------------------- PTX


def _all_math(x, y):
    return (torch.acos(x), torch.asin(x), torch.atan(x), torch.sinh(x), torch.cosh(x), torch.asinh(x),
            torch.acosh(x), torch.atanh(x), torch.erfc(x), torch.erfinv(x), torch.lgamma(x), torch.digamma(x),
            torch.i0(x), torch.special.i1(x), torch.special.erfcx(x), torch.signbit(x), torch.hypot(x, y),
            torch.copysign(x, y), torch.fmax(x, y), torch.special.bessel_j0(x), torch.special.bessel_j1(x),
            torch.special.bessel_y0(x), torch.special.bessel_y1(x), torch.special.ndtri(x), torch.special.i0e(x),
            torch.special.i1e(x))


def _fp64_math(x, y):
    return torch.nextafter(x, y), torch.signbit(x), torch.erfinv(x), torch.ldexp(x.float(), y.int())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_generated_math_kernels_assemble(dtype, device, kernel_launches):
    """The kernels the backend generates for the new ops (every new libdevice call in
    fp32 and from bf16; the fp64 versions of a few, the fp64 math of ldexp, frexp and
    i0e, and nextafter) compile to PTX that assembles for sm_80 and sm_90."""
    from inductor_lite.dsl import assembler

    if device != "cpu":
        pytest.skip("compiles for every target on the CPU run")
    if not assembler.can_assemble():
        pytest.skip("neither nvJitLink nor ptxas is available")
    launches = kernel_launches
    x, y = torch.rand(64).to(dtype) * 0.9, torch.randn(64).to(dtype)
    fns = {torch.float32: [_all_math, torch.nextafter, lambda a, b: (a.int() << b.int(), *torch.frexp(a))],
           torch.bfloat16: [_all_math], torch.float64: [_fp64_math]}[dtype]
    for fn in fns:
        compile_and_run(fn, x, y)
    assert launches
    assemble_launches(launches)


@pytest.mark.parametrize("decimals", [-1, 2])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_round_decimals_of_16_bit_types_on_cuda_rounds_as_eager_cuda(decimals, dtype, device, stub):
    """Eager's CUDA kernel rounds ``10**|decimals|`` and the first product or quotient
    of a 16-bit tensor to its dtype (the CPU kernel computes in float: -506 rounds to
    -510 there and to -500 on CUDA in bf16). The lowering for a CUDA graph, built on
    fake CUDA tensors and run here in the interpreter, does the same."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from inductor_lite.codegen.wrapper import generate_wrapper, load_module
    from inductor_lite.fx_lowering.decompositions import decomposition_table
    from inductor_lite.fx_lowering.graph import GraphLowering
    from inductor_lite.scheduler.scheduler import Scheduler

    if device == "cuda":
        pytest.skip("runs the CUDA graph's kernel in the interpreter: the cpu case does it")
    span = 60000.0 if dtype == torch.float16 and decimals < 0 else 1000.0
    x = torch.arange(-span, span, span / 4000 if decimals < 0 else 0.01).to(dtype).unique()
    fn = lambda t: torch.round(t, decimals=decimals)  # noqa: E731
    with FakeTensorMode():
        fake = torch.empty(x.shape, dtype=dtype, device="cuda")
    gm = make_fx(fn, tracing_mode="fake", decomposition_table=decomposition_table())(fake)
    graph = GraphLowering(gm)
    graph.run()
    code = generate_wrapper(graph, Scheduler(graph), "test")
    (kernel,) = code.kernels
    _, namespace = load_module(code)
    out = torch.full_like(x, float("nan"))
    block = kernel.config.kwargs["XBLOCK"]
    namespace[kernel.name][(-(-x.numel() // block),)](x, out, x.numel(), XBLOCK=block)
    p = torch.tensor(10.0 ** abs(decimals)).to(dtype).float()
    first = (x.float() / p if decimals < 0 else x.float() * p).to(dtype).float()
    expected = (torch.round(first) * p if decimals < 0 else torch.round(first) / p).to(dtype)
    assert not torch.equal(expected, torch.round(x, decimals=decimals))  # the inputs tell the two apart
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


_U8 = [0, 1, 2, 127, 128, 200, 253, 255]
INT_SCALAR_CASES = {
    # eager casts a Python int operand to the op's integer dtype, wrapping it: -3 as uint8 is 253
    "u8 // -3": (lambda t: t // -3, torch.uint8),
    "u8 % -3": (lambda t: t % -3, torch.uint8),
    "fmod(u8, -3)": (lambda t: torch.fmod(t, -3), torch.uint8),
    "div(u8, -3, trunc)": (lambda t: torch.div(t, -3, rounding_mode="trunc"), torch.uint8),
    "u8 < -1": (lambda t: t < -1, torch.uint8),
    "clamp(u8, min=-1)": (lambda t: torch.clamp(t, min=-1), torch.uint8),
    "i8 < 200": (lambda t: t < 200, torch.int8),
    "i8 + 300": (lambda t: t + 300, torch.int8),
    "i32 < 2**33 + 5": (lambda t: t < 2**33 + 5, torch.int32),
}


@pytest.mark.parametrize("name", sorted(INT_SCALAR_CASES))
def test_int_scalars_wrap_to_the_tensor_dtype(name):
    fn, dtype = INT_SCALAR_CASES[name]
    t = torch.tensor(_U8, dtype=torch.uint8).to(dtype)
    assert_identical(compile_and_run(fn, t), fn(t))


LOW_PRECISION_SCALAR_CASES = {
    # comparisons, fmod and remainder round a float scalar (or a 0-dim fp32 tensor) to the
    # tensor's dtype first, in eager on CPU and CUDA: x == 0.1 holds for the bf16 value of 0.1
    "x == 0.1": lambda x: x == 0.1,
    "x != 0.1": lambda x: x != 0.1,
    "x <= 0.1": lambda x: x <= 0.1,
    "x > 0.3": lambda x: x > 0.3,
    "x == tensor(0.1)": lambda x: x == torch.tensor(0.1),
    "x < tensor(0.3)": lambda x: x < torch.tensor(0.3),
    "fmod(x, 0.3)": lambda x: torch.fmod(x, 0.3),
    "remainder(x, 0.3)": lambda x: torch.remainder(x, 0.3),
    "remainder(x, tensor(0.3))": lambda x: torch.remainder(x, torch.tensor(0.3)),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", sorted(LOW_PRECISION_SCALAR_CASES))
def test_low_precision_scalars_round_as_eager(name, dtype):
    fn = LOW_PRECISION_SCALAR_CASES[name]
    x = torch.cat([torch.tensor([0.1, 0.3, -0.3, 0.6, 7.53125, 2.1]), torch.randn(64) * 3]).to(dtype)
    assert_identical(compile_and_run(fn, x), fn(x))
