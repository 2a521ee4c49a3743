"""The DSL interpreter (CPU) and compiled PTX (GPU) agree on generated pointwise kernels.

Each group of ops is compiled through ``backend="inductor_lite"`` twice, on CPU tensors
(kernels run in the interpreter, the DSL's reference semantics) and on CUDA tensors
(kernels run as PTX), over the same inputs, special values included (signed zeros,
infinities, NaN, subnormals, the extremes of each integer type). Then:

- exactly rounded ops (``+ - * /``, ``floor``/``ceil``/``round``/``trunc``,
  ``maximum``/``minimum``, casts, comparisons, integer arithmetic and bitwise ops)
  agree bit for bit: same NaN positions, every other value with the same bits;
- ``sqrt`` is IEEE on the GPU (``sqrt.rn``, as eager CUDA's ``sqrtf``): bit for bit the
  fp64 square root rounded to fp32 (correctly rounded: 53 >= 2 * 24 + 2 bits) and eager
  CUDA's. The interpreter is torch's CPU ``sqrt``, which on MKL builds is MKL VML's
  ``vsSqrt`` in high-accuracy mode (ATen's ``vml.h``): within 1 ulp, not correctly
  rounded, so there the two sides may differ by 1 ulp;
- ``a * b + c``: PTX contracts it to one ``fma.rn``, as nvcc does, so the GPU gives the
  product and sum rounded once (computed in fp64 here); the interpreter rounds twice,
  as eager on CPU does. That is the only difference: each matches its rule bit for bit
  (with cancellation, the two results can be many ulp apart);
- libdevice math (``exp log sin tanh erf pow atan2 ...``) is within CUDA's documented
  maximum ulp error of each function of the correctly rounded result (`LIBDEVICE_MATH`).

On CPU: the interpreter matches eager bit for bit on the exact groups and ``sqrt``, and
the PTX of the exact groups' generated kernels uses only IEEE-rounded instructions.
"""

from __future__ import annotations

import re

import pytest
import torch

import inductor_lite
from inductor_lite.config import config
from inductor_lite.dsl import compiler, interpreter

N = 4096


def _floats(seed: int, low: float = -1e4, high: float = 1e4) -> torch.Tensor:
    """fp32 [N]: log-uniform magnitudes in [|low|, high]-ish with random signs, led by the
    special values (±0, ±inf, NaN, subnormals, the largest finite, 0.5-ties)."""
    gen = torch.Generator().manual_seed(seed)
    finfo = torch.finfo(torch.float32)
    special = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), finfo.tiny / 4, -finfo.tiny / 3,
                            finfo.max, -finfo.max, 0.5, 1.5, 2.5, -0.5, -2.5, 1.0, -1.0, 3.0, 7.0])
    magnitude = torch.exp(torch.empty(N - len(special)).uniform_(-20.0, float(torch.log(torch.tensor(high))),
                                                                  generator=gen))
    sign = torch.where(torch.rand(N - len(special), generator=gen) < 0.5, -1.0, 1.0)
    return torch.cat([special, (magnitude * sign).clamp(low, high)]).float()


def _ints(seed: int, dtype: torch.dtype) -> torch.Tensor:
    """[N] of ``dtype``: its extremes, small values and uniformly random bits."""
    gen = torch.Generator().manual_seed(seed)
    info = torch.iinfo(dtype)
    special = torch.tensor([0, 1, -1, 2, -2, 7, -7, info.min, info.max, info.min + 1], dtype=dtype)
    small = torch.randint(-100, 100, (N // 2,), generator=gen, dtype=dtype)
    wide = torch.randint(info.min, info.max, (N - N // 2 - len(special),), generator=gen, dtype=dtype)
    return torch.cat([special, small, wide])


def _nonzero(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x == 0, torch.ones_like(x), x)


def exact_float_ops(a, b):
    return (a + b, a - b, a * b, a / b, -a, torch.abs(a), torch.floor(a), torch.ceil(a),
            torch.trunc(a), torch.round(a), torch.maximum(a, b), torch.minimum(a, b), torch.where(a > b, a, b),
            a < b, a <= b, a == b, a != b, torch.isnan(a), torch.isinf(b))


def exact_casts(a, i):
    # float->int casts of NaN and of values out of range are undefined in C and PTX
    small = torch.where(a.isnan(), 0.0, a).clamp(-2e9, 2e9)
    return (a.to(torch.bfloat16), a.to(torch.float16), small.to(torch.int32), small.to(torch.int64),
            a.to(torch.bool), i.to(torch.float32), i.to(torch.bfloat16), a.to(torch.bfloat16).to(torch.float32) + 1,
            a.to(torch.float64) * 3)


def exact_bf16_ops(a, b):
    a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
    return a + b, a * b, a / b, torch.sqrt(a), torch.maximum(a, b)


def exact_int_ops(i, j):
    shift = j.abs() % 31  # shifts by at least the width are undefined
    k = _nonzero(j)
    return (i + j, i - j, i * j, torch.div(i, k, rounding_mode="floor"), torch.div(i, k, rounding_mode="trunc"),
            torch.remainder(i, k), torch.fmod(i, k), i & j, i | j, i ^ j, ~i, i << shift, i >> shift,
            torch.abs(i), torch.maximum(i, j), i < j, i == j, torch.where(i > j, i, j))


def fused_multiply_add(a, b, c):
    return a * b + c


def sqrt_ops(a):
    return torch.sqrt(a), torch.sqrt(a.double())


# name, function of the `LIBDEVICE_INPUTS` (a dict by name), maximum ulp error of
# CUDA's fp32 function against the correctly rounded result (CUDA C++ Programming
# Guide, "Mathematical Functions": the table of single-precision standard functions).
# sigmoid is ours, 1 / (1 + expf(-x)) as eager CUDA's: expf's 2 ulp, shrunk by
# e / (1 + e), plus the add's and the division's half ulp each.
LIBDEVICE_MATH = (
    ("exp", lambda v: torch.exp(v["moderate"]), 2),
    ("expm1", lambda v: torch.expm1(v["moderate"]), 1),
    ("exp2", lambda v: torch.exp2(v["moderate"]), 2),
    ("log", lambda v: torch.log(v["positive"]), 1),
    ("log2", lambda v: torch.log2(v["positive"]), 1),
    ("log1p", lambda v: torch.log1p(v["positive"]), 1),
    ("sin", lambda v: torch.sin(v["moderate"]), 2),
    ("cos", lambda v: torch.cos(v["moderate"]), 2),
    ("tan", lambda v: torch.tan(v["moderate"]), 4),
    ("tanh", lambda v: torch.tanh(v["moderate"]), 2),
    ("sinh", lambda v: torch.sinh(v["moderate"]), 3),
    ("erf", lambda v: torch.erf(v["moderate"]), 2),
    ("erfc", lambda v: torch.erfc(v["moderate"]), 4),
    ("asin", lambda v: torch.asin(v["unit"]), 2),
    ("atan", lambda v: torch.atan(v["x"]), 2),
    ("atanh", lambda v: torch.atanh(v["unit"]), 3),
    ("erfinv", lambda v: torch.erfinv(v["unit"]), 2),
    ("rsqrt", lambda v: torch.rsqrt(v["positive"]), 2),
    ("pow", lambda v: torch.pow(v["positive"], v["exponent"]), 4),
    ("atan2", lambda v: torch.atan2(v["x"], v["y"]), 3),
    ("sigmoid", lambda v: torch.sigmoid(v["moderate"]), 3),
)


LIBDEVICE_INPUTS = ("x", "y", "moderate", "unit", "positive", "exponent")


def libdevice_math(*inputs):
    v = dict(zip(LIBDEVICE_INPUTS, inputs))
    return tuple(fn(v) for _, fn, _ in LIBDEVICE_MATH)


def _libdevice_inputs() -> tuple:
    """The `LIBDEVICE_INPUTS`, fp32 [N] each: x and y over +-1e4 with the special values;
    ``moderate`` (x / 1000: exp/sinh/tan stay inside fp32's range), ``unit`` (in [-1, 1],
    where asin/atanh/erfinv are defined), ``positive`` (|x|) and ``exponent`` (3 * unit)
    for pow. Every kernel input is already rounded to fp32, so the fp64 reference sees
    the same values."""
    x, y = _floats(11, -1e4, 1e4), _floats(12, -1e4, 1e4)
    unit = torch.tanh(x * 1e-4)
    return x, y, x * 1e-3, unit, x.abs(), unit * 3


def _inputs(group: str) -> tuple:
    if group == "exact_float_ops":
        return _floats(1), _floats(2)
    if group == "exact_casts":
        return _floats(3, -3e9, 3e9), _ints(4, torch.int64) >> 30
    if group == "exact_bf16_ops":
        return _floats(5), _floats(6)
    if group == "exact_int32_ops":
        return _ints(7, torch.int32), _ints(8, torch.int32)
    if group == "exact_int64_ops":
        return _ints(9, torch.int64), _ints(10, torch.int64)
    if group == "fused_multiply_add":
        return torch.randn(N), torch.randn(N), torch.randn(N)
    if group == "sqrt":
        return (_floats(1),)
    raise KeyError(group)


GROUPS = {
    "exact_float_ops": exact_float_ops, "exact_casts": exact_casts, "exact_bf16_ops": exact_bf16_ops,
    "exact_int32_ops": exact_int_ops, "exact_int64_ops": exact_int_ops,
}
"""Groups that agree bit for bit."""


def _run(fn, inputs: tuple, device: str) -> tuple:
    """``fn`` compiled on ``device`` (fallback off), its outputs on CPU; asserts that
    generated kernels computed them (no extern ran). Each fp16/bf16 result is rounded
    as eager rounds it (``emulate_precision_casts``): the groups compare op by op."""
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    with config.patch(fallback_on_error=False, emulate_precision_casts=True):
        out = torch.compile(fn, backend="inductor_lite")(*(x.to(device) for x in inputs))
    torch._dynamo.reset()
    assert inductor_lite.counters["kernels_generated"] > 0
    assert inductor_lite.counters["extern_calls"] == 0
    return tuple(o.cpu() for o in (out if isinstance(out, tuple) else (out,)))


def _bits(x: torch.Tensor) -> torch.Tensor:
    """Integer view of a float tensor's bits (NaN excluded by the callers)."""
    return x.view({torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
                   torch.bfloat16: torch.int16}[x.dtype])


def assert_bitwise(got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Equal dtype and shape, NaN in the same places, all other elements the same bits
    (so -0.0 != 0.0); NaN payloads may differ (PTX writes the canonical NaN)."""
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape), what
    if not expected.is_floating_point():
        bad = got != expected
    else:
        nan = expected.isnan()
        bad = (got.isnan() != nan) | (~nan & (_bits(got) != _bits(expected)))
    assert not bad.any(), (f"{what}: {int(bad.sum())} elements differ, e.g. {got[bad][:4].tolist()} "
                           f"vs {expected[bad][:4].tolist()}")


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32 elements apart (int64 [N]), counting across zero (+0 and -0 are 0 apart).

    Maps each float's bits to an integer that orders like the float: non-negative
    floats keep their bits, negative ones become the negated magnitude bits.
    """
    def ordered(x):
        bits = x.float().view(torch.int32).to(torch.int64)
        return torch.where(bits < 0, -(bits & 0x7FFFFFFF), bits)

    return (ordered(a) - ordered(b)).abs()


def assert_within_ulp(got: torch.Tensor, expected: torch.Tensor, ulps: int, what: str) -> None:
    """Same NaN and infinity positions, every finite element within ``ulps`` fp32 ulp."""
    assert got.dtype == expected.dtype == torch.float32, what
    nan = expected.isnan()
    assert torch.equal(got.isnan(), nan), f"{what}: NaN positions differ"
    distance = ulp_distance(got[~nan], expected[~nan])
    worst = int(distance.max()) if distance.numel() else 0
    assert worst <= ulps, (f"{what}: {worst} ulp apart at {got[~nan][distance.argmax()].item()!r} "
                           f"vs {expected[~nan][distance.argmax()].item()!r}")


@pytest.mark.gpu
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_exact_ops_bit_for_bit(group):
    inputs = _inputs(group)
    for i, (gpu, interpreted) in enumerate(zip(_run(GROUPS[group], inputs, "cuda"),
                                                _run(GROUPS[group], inputs, "cpu"))):
        assert_bitwise(gpu, interpreted, f"{group} output {i}")


@pytest.mark.gpu
def test_fma_contraction():
    a, b, c = _inputs("fused_multiply_add")
    (gpu,), (interpreted,) = _run(fused_multiply_add, (a, b, c), "cuda"), _run(fused_multiply_add, (a, b, c), "cpu")
    fused = (a.double() * b.double() + c.double()).float()  # a * b is exact in fp64: one rounding to fp32
    assert_bitwise(gpu, fused, "a * b + c on the GPU against one rounding")
    assert_bitwise(interpreted, a * b + c, "a * b + c in the interpreter against two roundings")


@pytest.mark.gpu
def test_sqrt_is_correctly_rounded():
    """sqrt.rn: fp32 bit for bit the rounded fp64 root and eager CUDA's; fp64 eager CUDA's.
    The interpreter (torch's CPU sqrt) is within 1 ulp."""
    (a,) = _inputs("sqrt")
    gpu32, gpu64 = _run(sqrt_ops, (a,), "cuda")
    assert_bitwise(gpu32, torch.sqrt(a.double()).float(), "fp32 sqrt against the rounded fp64 root")
    for got, eager in zip((gpu32, gpu64), sqrt_ops(a.cuda())):
        assert_bitwise(got, eager.cpu(), f"{got.dtype} sqrt against eager CUDA")
    interpreted, _ = _run(sqrt_ops, (a,), "cpu")
    assert_within_ulp(gpu32, interpreted, 1, "fp32 sqrt against the interpreter")


@pytest.mark.gpu
def test_libdevice_math_within_cuda_error_bounds():
    """Each libdevice function within CUDA's documented maximum error of the correctly
    rounded result (the fp64 function rounded to fp32), NaN where it is NaN."""
    inputs = _libdevice_inputs()
    reference = libdevice_math(*(x.double() for x in inputs))
    for (name, _, ulps), gpu, want in zip(LIBDEVICE_MATH, _run(libdevice_math, inputs, "cuda"), reference):
        assert_within_ulp(gpu, want.float(), ulps, name)


def scalar_divisions(a, i):
    return (a / 6.0, a / 3, a / -0.1, a / 0.0, a / float("inf"), a.to(torch.bfloat16) / 10.0, i / 7,
            a.double() / 3.0, torch.nn.functional.hardswish(a), torch.nn.functional.hardsigmoid(a),
            torch.nn.functional.hardswish(a.to(torch.bfloat16)))


@pytest.mark.gpu
def test_division_by_a_python_number_matches_eager_cuda():
    """On CUDA, ``x / number`` multiplies by the number's reciprocal rounded in the op's
    math dtype, as eager CUDA does (so do its hardswish and hardsigmoid, by 1/6): bit
    for bit eager CUDA's values, special values included."""
    a, i = _floats(13), _ints(14, torch.int32)
    for k, (got, want) in enumerate(zip(_run(scalar_divisions, (a, i), "cuda"), scalar_divisions(a.cuda(), i.cuda()))):
        assert_bitwise(got, want.cpu(), f"scalar division {k}")


CPU_EXACT = dict(GROUPS, sqrt=sqrt_ops)
"""Groups the interpreter computes bit for bit as eager on CPU does."""


@pytest.mark.parametrize("group", sorted(CPU_EXACT))
def test_interpreter_matches_eager_bit_for_bit(group):
    """The interpreter side of the GPU comparison is itself exact: equal to eager on CPU."""
    inputs = _inputs(group)
    for i, (interpreted, eager) in enumerate(zip(_run(CPU_EXACT[group], inputs, "cpu"), CPU_EXACT[group](*inputs))):
        assert_bitwise(interpreted, eager, f"{group} output {i}")


@pytest.mark.parametrize("group", sorted(CPU_EXACT))
def test_exact_groups_compile_to_ieee_rounded_ptx(group, monkeypatch):
    """The generated kernels of the exact groups, compiled for sm_90, divide and take
    square roots with IEEE round-to-nearest (``div.rn``, ``sqrt.rn``), never an
    approximate or flush-to-zero instruction (``.approx``, ``.full``, ``.ftz``)."""
    launched, run_in_interpreter = [], interpreter.run

    def record(kernel, grid, args, constexprs):
        launched.append(kernel.build_ir(kernel.specialize(args, constexprs)))
        return run_in_interpreter(kernel, grid, args, constexprs)

    monkeypatch.setattr(interpreter, "run", record)
    _run(CPU_EXACT[group], _inputs(group), "cpu")
    ptx = "\n".join(compiler.compile_ptx(fn, cc=(9, 0), num_warps=4).ptx for fn in launched)
    assert not re.findall(r"\.(?:approx|full|ftz)\b", ptx)
    if group in ("exact_float_ops", "exact_bf16_ops"):
        assert "div.rn.f32" in ptx
    if group in ("sqrt", "exact_bf16_ops"):
        assert "sqrt.rn.f32" in ptx
    if group == "sqrt":
        assert "sqrt.rn.f64" in ptx
