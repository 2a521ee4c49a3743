"""Lowerings of the pointwise math functions beyond arithmetic and the basic
transcendentals (those live in `pointwise`): inverse trigonometric and hyperbolic
functions, error, gamma and Bessel functions (``i0``, ``i1``, ``bessel_j0/j1/y0/y1``),
``digamma`` and ``polygamma`` of orders 0 and 1, ``hypot``/``copysign``/
``nextafter``/``fmax``/``fmin``/``ldexp``/``frexp``, ``signbit``, ``round(decimals=)``
and bitwise shifts.

Where libdevice has the function it is one ``ops`` call (one DSL math call, one
``__nv_*`` call on the GPU, torch's own function in the interpreter); ``i0``/``i1``
add eager's overflow and infinities around libdevice's value (`_bessel_i`). ``digamma``
and ``trigamma``, which libdevice lacks, are composed from ``ops`` after ATen's; the
rest follows the formulas ATen's CPU kernels use, so edge values (NaN, +-inf,
-0.0, poles) match eager.
"""

from __future__ import annotations

import math

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as Kind

from ..ir.ops import ops
from .lowerings import NoLowering, const, loader, make_pointwise, register_lowering, register_pointwise

aten = torch.ops.aten


def _unary(op: str):
    return lambda dt, x: getattr(ops, op)(x)


# ops.<name> for aten.<name>; integers compute in the default float dtype, as torch.
for _name in ("acos", "asin", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erfc", "erfinv", "lgamma"):
    register_pointwise([getattr(aten, _name).default], _unary(_name), Kind.INT_TO_FLOAT)


def _bessel_i(op: str):
    """``i0`` or ``i1`` with eager's special values. ATen (``calc_i0``/``calc_i1`` and
    ``modified_bessel_i0/i1_forward``, CPU and CUDA alike) evaluates Cephes' series,
    beyond ``|x| = 8`` as ``exp(|x|) * series / sqrt(|x|)`` in the compute dtype: so
    +-inf once ``exp(|x|)`` overflows (``|x| > 88.72`` in fp32, though I0 itself is
    finite up to 91.9) and NaN at +-inf (inf / inf), where libdevice's
    ``cyl_bessel_i0/i1`` give the finite value and +-inf. Here libdevice's value on
    ``|x|``, replaced by ``exp(|x|) / sqrt(|x|)`` where ``exp(|x|)`` is inf; the odd
    ``i1`` takes the sign of ``x < 0`` (+0.0 at -0.0, as ATen)."""

    def fn(dt, x):
        a = ops.abs(x)
        e = ops.exp(a)
        result = ops.where(ops.isinf(e), ops.truediv(e, ops.sqrt(a)), getattr(ops, op)(a))
        if op == "i1":
            result = ops.where(ops.lt(x, const(0.0, dt)), ops.neg(result), result)
        return result

    return fn


register_pointwise([aten.i0.default, aten.special_modified_bessel_i0.default], _bessel_i("i0"), Kind.INT_TO_FLOAT)
register_pointwise([aten.special_i1.default, aten.special_modified_bessel_i1.default], _bessel_i("i1"),
                   Kind.INT_TO_FLOAT)
register_pointwise([aten.special_erfcx.default], _unary("erfcx"), Kind.INT_TO_FLOAT)
register_pointwise([aten.special_ndtri.default], _unary("ndtri"), Kind.INT_TO_FLOAT)


# The asymptotic expansion e**-x I_v(x) ~ (1 + sum_k (-1)**k a_k(v) / x**k) / sqrt(2 pi x)
# (Abramowitz & Stegun 9.7.1), a_1..a_3 for v = 0 and v = 1: beyond x = 700 the next
# term is under 1e-12.
_I0E_ASYMPTOTIC = (1 / 8, 9 / 128, 75 / 1024)
_I1E_ASYMPTOTIC = (-3 / 8, -15 / 128, -105 / 1024)


def _scaled_bessel(op: str, asymptotic: tuple[float, ...]):
    """``exp(-|x|) * op(|x|)`` with ``op`` i0 or i1 (torch.special.i0e/i1e), the sign of
    ``x`` for the odd i1 (+0.0 at -0.0, as Cephes). Computed in fp64, where neither
    factor over- or underflows up to ``|x| = 700``; beyond, the asymptotic expansion."""

    def fn(dt, x):
        f64 = torch.float64
        a = ops.abs(ops.to_dtype(x, f64))
        direct = ops.mul(ops.exp(ops.neg(a)), getattr(ops, op)(a))
        inv = ops.truediv(const(1.0, f64), a)
        series = const(asymptotic[-1], f64)
        for c in reversed(asymptotic[:-1]):
            series = ops.add(ops.mul(series, inv), const(c, f64))
        series = ops.add(ops.mul(series, inv), const(1.0, f64))
        far = ops.mul(series, ops.rsqrt(ops.mul(a, const(2 * math.pi, f64))))
        result = ops.where(ops.gt(a, const(700.0, f64)), far, direct)
        if op == "i1":
            result = ops.where(ops.lt(x, const(0.0, dt)), ops.neg(result), result)
        return ops.to_dtype(result, dt)

    return fn


@register_lowering(aten.special_i0e.default, aten.special_i1e.default)
def _lower_scaled_bessel(ctx, x):
    if ctx.out_dtype == torch.float64:
        raise NoLowering("i0e/i1e in fp64 (computed in fp64 for narrower dtypes)")
    if ctx.node.target is aten.special_i0e.default:
        return make_pointwise(ctx, [x], _scaled_bessel("i0", _I0E_ASYMPTOTIC), Kind.INT_TO_FLOAT)
    return make_pointwise(ctx, [x], _scaled_bessel("i1", _I1E_ASYMPTOTIC), Kind.INT_TO_FLOAT)


def _bessel(op: str):
    """torch's Bessel functions (Cephes' asymptotic forms) give NaN at +-inf, where
    libdevice's give 0."""
    return lambda dt, x: ops.where(ops.isinf(x), const(math.nan, dt), getattr(ops, op)(x))


for _name in ("bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1"):
    register_pointwise([getattr(aten, f"special_{_name}").default], _bessel(_name), Kind.INT_TO_FLOAT)


def _signbit(dt, x):
    """The sign bit: set for -0.0 and negative NaNs; ``x < 0`` for signed integers."""
    if dt.is_floating_point:
        return ops.signbit(x)
    if dt == torch.bool or not dt.is_signed:
        return const(False, torch.bool)
    return ops.lt(x, const(0, dt))


register_pointwise([aten.signbit.default], _signbit, Kind.ALWAYS_BOOL)
register_pointwise([aten.copysign.Tensor, aten.copysign.Scalar], lambda dt, x, y: ops.copysign(x, y),
                   Kind.INT_TO_FLOAT)
register_pointwise([aten.hypot.default], lambda dt, x, y: ops.hypot(x, y))


@register_lowering(aten.nextafter.default)
def _lower_nextafter(ctx, x, y):
    # The step is one unit in the last place of the result's type; the DSL computes
    # fp16/bf16 in fp32, where the step would vanish when rounded back.
    if ctx.out_dtype not in (torch.float32, torch.float64):
        raise NoLowering(f"nextafter in {ctx.out_dtype}")
    return make_pointwise(ctx, [x, y], lambda dt, a, b: ops.nextafter(a, b))


def _fmax_fmin(is_max: bool):
    """torch.fmax/fmin: a NaN operand loses to a number. Inductor's formula
    (torch/_inductor/decomposition.py): ``where(isnan(y) | (y < x), x, y)`` for fmax,
    ``>`` for fmin."""

    def fn(dt, x, y):
        if dt == torch.bool:
            return ops.logical_or(x, y) if is_max else ops.logical_and(x, y)
        if not dt.is_floating_point:
            return ops.maximum(x, y) if is_max else ops.minimum(x, y)
        y_loses = ops.lt(y, x) if is_max else ops.gt(y, x)
        return ops.where(ops.logical_or(ops.isnan(y), y_loses), x, y)

    return fn


register_pointwise([aten.fmax.default], _fmax_fmin(True))
register_pointwise([aten.fmin.default], _fmax_fmin(False))


@register_lowering(aten.round.decimals)
def _lower_round_decimals(ctx, x, decimals=0):
    """ATen's ``round_decimals_kernel``: with ``p = 10**|decimals|``,
    ``round(x * p) / p``, or ``round(x / p) * p`` for negative ``decimals`` (half to
    even), in the compute dtype. The CUDA kernel computes a 16-bit tensor in its own
    type where the CPU kernel uses float: there ``p`` and the first product or
    quotient are rounded to the tensor's dtype (each a ``c10::Half``/``BFloat16``
    operation), the rest is float."""
    dtype = x.get_dtype()
    if not dtype.is_floating_point:
        raise NoLowering("round(decimals=) of an integer tensor")
    half_steps = ctx.device.type == "cuda" and dtype in (torch.float16, torch.bfloat16)
    p = 10.0 ** abs(decimals) if abs(decimals) <= 308 else math.inf  # ATen's double pow overflows to inf
    if half_steps:
        p = torch.tensor(p).to(dtype).item()

    def fn(dt, v):
        if decimals == 0:
            return ops.round(v)
        scale = const(p, dt)
        first = ops.mul(v, scale) if decimals > 0 else ops.truediv(v, scale)
        if half_steps:
            first = ops.round_to_dtype(first, dtype)
        rounded = ops.round(first)
        return ops.truediv(rounded, scale) if decimals > 0 else ops.mul(rounded, scale)

    return make_pointwise(ctx, [x], fn)


@register_lowering(aten.ldexp.Tensor)
def _lower_ldexp(ctx, x, exponent):
    """``x * 2**exponent`` rounded once, as eager computes it (no overflow of ``2**e``
    on its own: ``ldexp(0.03, 130)`` is finite in fp32). Computed in fp64: there
    ``2**e`` with ``e`` clamped to [-400, 400] is exact, and so is its product with an
    fp32, fp16 or bf16 value; beyond that range every such product over- or underflows
    anyway. An fp64 result has no wider type to use, so it stays an extern."""
    out_dtype = ctx.out_dtype
    if out_dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise NoLowering(f"ldexp to {out_dtype}")
    f64 = torch.float64
    load_x, load_e = loader(x, ctx.out_size, f64), loader(exponent, ctx.out_size, f64)

    def inner_fn(index):
        e = ops.minimum(ops.maximum(load_e(index), const(-400, f64)), const(400, f64))
        return ops.to_dtype(ops.mul(load_x(index), ops.exp2(e)), out_dtype)

    return ctx.pointwise(inner_fn, [x, exponent])


@register_lowering(aten.frexp.Tensor)
def _lower_frexp(ctx, x):
    """``(mantissa, exponent)`` with ``x = mantissa * 2**exponent``, ``0.5 <= |mantissa|
    < 1`` (int32 exponent); ``(x, 0)`` for zeros, infinities and NaN, as C's frexp.
    Computed in fp64, where ``floor(log2|x|) + 1`` of an fp32 value is exact or one off
    (then fixed up) and scaling by ``2**-e`` is exact, so the mantissa rounds back
    unchanged; fp64 inputs stay externs."""
    dtype = x.get_dtype()
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise NoLowering(f"frexp of {dtype}")
    f64, size = torch.float64, x.get_size()
    load = loader(x, size, f64)

    def parts(index):
        v = load(index)
        a = ops.abs(v)
        one, half = const(1.0, f64), const(0.5, f64)
        e = ops.add(ops.floor(ops.log2(a)), one)
        m = ops.mul(v, ops.exp2(ops.neg(e)))
        over = ops.ge(ops.abs(m), one)
        m, e = ops.where(over, ops.mul(m, half), m), ops.where(over, ops.add(e, one), e)
        under = ops.lt(ops.abs(m), half)
        m, e = ops.where(under, ops.add(m, m), m), ops.where(under, ops.sub(e, one), e)
        regular = ops.logical_and(ops.ne(a, const(0.0, f64)), ops.lt(a, const(math.inf, f64)))
        return ops.where(regular, m, v), ops.where(regular, e, const(0.0, f64))

    mantissa = ctx.pointwise(lambda index: ops.to_dtype(parts(index)[0], dtype), [x], size=size, dtype=dtype)
    exponent = ctx.pointwise(lambda index: ops.to_dtype(parts(index)[1], torch.int32), [x], size=size,
                             dtype=torch.int32)
    return [mantissa, exponent]


def _shift(op: str):
    def fn(dt, x, y):
        if dt.is_floating_point or dt == torch.bool:
            raise NoLowering(f"{op} on {dt}")
        return getattr(ops, op)(x, y)

    return fn


register_pointwise([aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
                    aten.bitwise_left_shift.Scalar_Tensor, aten.__lshift__.Tensor, aten.__lshift__.Scalar],
                   _shift("bitwise_left_shift"))
register_pointwise([aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
                    aten.bitwise_right_shift.Scalar_Tensor, aten.__rshift__.Tensor, aten.__rshift__.Scalar],
                   _shift("bitwise_right_shift"))


# ATen's calc_digamma (aten/src/ATen/native/Math.h): the asymptotic series' coefficients
# (Cephes' psi), and digamma(10).
_DIGAMMA_A = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
              -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
              8.33333333333333333333E-2)
_PSI_10 = 2.25175258906672110764


def _digamma_from_one(dt, x):
    """digamma(x) for x > 0 (or NaN, +inf) as calc_digamma computes it: recurrence
    ``psi(x) = psi(x + 1) - 1 / x`` up to x >= 10 (at most 10 steps for x > 0,
    unrolled), then digamma(10) exactly or the asymptotic series."""
    ten = const(10.0, dt)
    result = const(0.0, dt)
    for _ in range(10):
        below = ops.lt(x, ten)
        result = ops.where(below, ops.sub(result, ops.truediv(const(1.0, dt), x)), result)
        x = ops.where(below, ops.add(x, const(1.0, dt)), x)
    z = ops.truediv(const(1.0, dt), ops.mul(x, x))
    poly = const(_DIGAMMA_A[0], dt)
    for a in _DIGAMMA_A[1:]:
        poly = ops.add(ops.mul(poly, z), const(a, dt))
    y = ops.where(ops.lt(x, const(1.0e17, dt)), ops.mul(z, poly), const(0.0, dt))
    series = ops.sub(ops.sub(ops.add(result, ops.log(x)), ops.truediv(const(0.5, dt), x)), y)
    return ops.where(ops.eq(x, ten), ops.add(result, const(_PSI_10, dt)), series)


def _digamma(dt, x):
    """ATen's calc_digamma: -inf at +0 and +inf at -0, NaN at negative integers and
    -inf; below 0 the reflection ``psi(1 - x) - pi / tan(pi * r)`` with ``r`` the
    fractional part of ``x`` (more accurate than ``tan(pi * x)``). ATen evaluates
    that tangent in fp64 for fp32 inputs; here it stays in the compute dtype, with
    ``r`` in (-1, -0.5) moved up by the period 1 (exactly) so that ``pi * r`` stays
    small and its rounding cannot dominate ``tan`` near the poles."""
    zero = const(0.0, dt)
    negative = ops.lt(x, zero)
    reflected = ops.where(negative, ops.sub(const(1.0, dt), x), x)
    psi = _digamma_from_one(dt, reflected)
    frac = ops.sub(x, ops.trunc(x))
    frac = ops.where(ops.lt(frac, const(-0.5, dt)), ops.add(frac, const(1.0, dt)), frac)
    pi_over_tan = ops.truediv(const(math.pi, dt), ops.tan(ops.mul(const(math.pi, dt), frac)))
    result = ops.where(negative, ops.sub(psi, pi_over_tan), psi)
    # -inf at +0.0, +inf at -0.0: copysign(inf, -x)
    at_zero = ops.copysign(const(math.inf, dt), ops.neg(x))
    result = ops.where(ops.eq(x, zero), at_zero, result)
    pole = ops.logical_and(negative, ops.eq(x, ops.trunc(x)))
    return ops.where(pole, const(math.nan, dt), result)


register_pointwise([aten.digamma.default], _digamma, Kind.INT_TO_FLOAT)


def _trigamma(dt, x):
    """ATen's trigamma (aten/src/ATen/native/Math.h): below 0.5 the reflection
    ``pi**2 / sin(pi * x)**2 - psi1(1 - x)``; 6 steps of ``psi1(x) = psi1(x + 1) +
    1 / x**2``, then the asymptotic series."""
    one = const(1.0, dt)
    reflect = ops.lt(x, const(0.5, dt))
    sin_pi_x = ops.sin(ops.mul(const(math.pi, dt), x))
    result = ops.where(reflect, ops.neg(ops.truediv(const(math.pi * math.pi, dt), ops.mul(sin_pi_x, sin_pi_x))),
                       const(0.0, dt))
    x = ops.where(reflect, ops.sub(one, x), x)
    for _ in range(6):
        result = ops.add(result, ops.truediv(one, ops.mul(x, x)))
        x = ops.add(x, one)
    ixx = ops.truediv(one, ops.mul(x, x))
    series = ops.mul(ixx, ops.sub(const(1 / 30, dt), ops.mul(ixx, const(1 / 42, dt))))
    series = ops.mul(ixx, ops.sub(const(1 / 6, dt), series))
    series = ops.add(ops.add(one, ops.truediv(one, ops.mul(const(2.0, dt), x))), series)
    result = ops.add(result, ops.truediv(series, x))
    return ops.where(reflect, ops.neg(result), result)


@register_lowering(aten.polygamma.default)
def _lower_polygamma(ctx, n, x):
    """``polygamma(0, x)`` is digamma and ``polygamma(1, x)`` trigamma (so digamma's
    backward is a kernel); higher orders need the Hurwitz zeta function and stay externs."""
    if n not in (0, 1):
        raise NoLowering(f"polygamma of order {n}")
    return make_pointwise(ctx, [x], _digamma if n == 0 else _trigamma, Kind.INT_TO_FLOAT)
