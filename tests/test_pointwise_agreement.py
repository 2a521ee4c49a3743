"""The DSL interpreter (CPU) and compiled PTX (GPU) agree on generated pointwise kernels.

Each group of ops is compiled through ``backend="inductor_lite"`` twice, on CPU tensors
(kernels run in the interpreter, the DSL's reference semantics) and on CUDA tensors
(kernels run as PTX), over the same inputs, special values included (signed zeros,
infinities, NaN, subnormals, the extremes of each integer type). Then:

- exactly rounded ops (``+ - * /``, ``sqrt``, ``floor``/``ceil``/``round``/``trunc``,
  ``maximum``/``minimum``, casts, comparisons, integer arithmetic and bitwise ops)
  agree bit for bit: same NaN positions, every other value with the same bits;
- ``a * b + c``: PTX contracts it to one ``fma.rn``, as nvcc does, so the GPU gives the
  product and sum rounded once (computed in fp64 here); the interpreter rounds twice,
  as eager on CPU does. That is the only difference: each matches its rule bit for bit
  (with cancellation, the two results can be many ulp apart);
- libdevice math (``exp log sin tanh erf pow atan2 ...``) is within 2 ulp.

The CPU-only test checks the same exact groups of the interpreter against eager.
"""

from __future__ import annotations

import pytest
import torch

import inductor_lite
from inductor_lite.config import config

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
    return (a + b, a - b, a * b, a / b, torch.sqrt(a), -a, torch.abs(a), torch.floor(a), torch.ceil(a),
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


def libdevice_math(x, y):
    unit = torch.tanh(x * 1e-4)  # in (-1, 1), where asin/atanh/erfinv are finite
    moderate = x * 1e-3          # |x| <= 10: exp/sinh/tan stay well inside fp32's range
    return (torch.exp(moderate), torch.expm1(moderate), torch.exp2(moderate), torch.log(x.abs()),
            torch.log2(x.abs()), torch.log1p(x.abs()), torch.sin(moderate), torch.cos(moderate),
            torch.tan(moderate), torch.tanh(moderate), torch.sinh(moderate), torch.erf(moderate),
            torch.erfc(moderate), torch.asin(unit), torch.atan(x), torch.atanh(unit), torch.erfinv(unit),
            torch.rsqrt(x.abs()), torch.pow(x.abs(), unit * 3), torch.atan2(x, y), torch.sigmoid(moderate))


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
    if group == "libdevice_math":
        return _floats(11, -1e4, 1e4), _floats(12, -1e4, 1e4)
    raise KeyError(group)


GROUPS = {
    "exact_float_ops": exact_float_ops, "exact_casts": exact_casts, "exact_bf16_ops": exact_bf16_ops,
    "exact_int32_ops": exact_int_ops, "exact_int64_ops": exact_int_ops,
}
"""Groups that agree bit for bit."""


def _run(fn, inputs: tuple, device: str) -> tuple:
    """``fn`` compiled on ``device`` (fallback off), its outputs on CPU; asserts that
    generated kernels computed them (no extern ran)."""
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    with config.patch(fallback_on_error=False):
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
def test_libdevice_math_within_2_ulp():
    inputs = _inputs("libdevice_math")
    for i, (gpu, interpreted) in enumerate(zip(_run(libdevice_math, inputs, "cuda"),
                                                _run(libdevice_math, inputs, "cpu"))):
        assert_within_ulp(gpu, interpreted, 2, f"libdevice_math output {i}")


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_interpreter_matches_eager_bit_for_bit(group):
    """The interpreter side of the GPU comparison is itself exact: equal to eager on CPU."""
    inputs = _inputs(group)
    for i, (interpreted, eager) in enumerate(zip(_run(GROUPS[group], inputs, "cpu"), GROUPS[group](*inputs))):
        assert_bitwise(interpreted, eager, f"{group} output {i}")
