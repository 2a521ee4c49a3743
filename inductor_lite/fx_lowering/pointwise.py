"""Lowerings of elementwise ops: arithmetic, math, activations and their backwards,
comparisons, logical and bitwise ops, ``where``/``masked_fill``, ``tril``/``triu``."""

from __future__ import annotations

import math

import sympy
import torch
import torch._inductor.inductor_prims  # noqa: F401  (registers prims.fma)
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as Kind

from ..ir.ops import ops
from .lowerings import (
    NoLowering, cast, const, loader, make_pointwise, promote, register_lowering, register_pointwise,
)

aten = torch.ops.aten


def _is_bool(dtype):
    return dtype == torch.bool


def _add(dtype, a, b):
    return ops.logical_or(a, b) if _is_bool(dtype) else ops.add(a, b)


def _mul(dtype, a, b):
    return ops.logical_and(a, b) if _is_bool(dtype) else ops.mul(a, b)


def _scaled(dtype, b, alpha):
    return b if alpha == 1 else _mul(dtype, b, const(alpha, dtype))


@register_lowering(aten.add.Tensor, aten.add.Scalar)
def _lower_add(ctx, a, b, alpha=1):
    return make_pointwise(ctx, [a, b], lambda dt, x, y: _add(dt, x, _scaled(dt, y, alpha)))


@register_lowering(aten.sub.Tensor, aten.sub.Scalar)
def _lower_sub(ctx, a, b, alpha=1):
    return make_pointwise(ctx, [a, b], lambda dt, x, y: ops.sub(x, _scaled(dt, y, alpha)))


@register_lowering(aten.rsub.Tensor, aten.rsub.Scalar)
def _lower_rsub(ctx, a, b, alpha=1):
    return make_pointwise(ctx, [a, b], lambda dt, x, y: ops.sub(y, _scaled(dt, x, alpha)))


register_pointwise([aten.mul.Tensor, aten.mul.Scalar], _mul)

# TorchInductor's fused multiply-add prim: Dynamo writes ``x.addcmul_(a, b, value=v)``,
# ``x.addcdiv_(...)`` and ``x.add_(y, alpha=tensor)`` with it (optimizer steps are made
# of them). ``a * b + c`` is one ``fma.rn`` on the GPU (the NVPTX code contracts a
# multiply feeding an add, `dsl.nvptx_ops`), as eager's CUDA addcmul computes it; the
# interpreter rounds twice, as the prim's eager implementation ``(a * b) + c`` does.
register_pointwise([torch.ops.prims.fma.default], lambda dt, a, b, c: ops.add(ops.mul(a, b), c))


def _signs_differ(dt, mod, y):
    """``mod != 0`` and its sign differs from the divisor's: floor semantics need a fix-up."""
    zero = const(0, dt)
    return ops.logical_and(ops.ne(mod, zero), ops.ne(ops.lt(mod, zero), ops.lt(y, zero)))


def _floordiv(dt, x, y):
    """``x // y`` as torch computes it. Floats follow ``c10::div_floor_floating``
    (c10/util/generic_math.h, after CPython's float floor division): ``(x - fmod(x, y)) / y``,
    one less where the remainder's sign differs from ``y``'s, then rounded to the
    nearest integer. ``floor(x / y)`` differs: ``1.0 // 0.1`` is 9, not 10, and
    ``inf // 1`` is NaN, not inf."""
    if not dt.is_floating_point:
        return ops.floordiv(x, y)
    zero, one = const(0, dt), const(1, dt)
    mod = ops.fmod(x, y)
    div = ops.truediv(ops.sub(x, mod), y)
    div = ops.where(_signs_differ(dt, mod, y), ops.sub(div, one), div)
    floor = ops.floor(div)
    rounded = ops.where(ops.gt(ops.sub(div, floor), const(0.5, dt)), ops.add(floor, one), floor)
    quotient = ops.truediv(x, y)
    # a zero quotient takes the sign of x / y, finite there: 0 * (x / y) is copysign(0, x / y)
    result = ops.where(ops.ne(div, zero), rounded, ops.mul(zero, quotient))
    return ops.where(ops.eq(y, zero), quotient, result)


def _truncdiv(out_dtype: torch.dtype):
    """``div(rounding_mode="trunc")`` with a ``out_dtype`` result. torch rounds a fp16/bf16
    quotient to that dtype before truncating (``c10::Half``'s ``/`` returns a Half), so
    ``1.1 / 0.1`` in fp16 is 11, not 10; it is computed here in fp32, then rounded so too."""

    def fn(dt, x, y):
        if dt == out_dtype or not dt.is_floating_point:
            return ops.truncdiv(x, y)
        return ops.trunc(ops.round_to_dtype(ops.truediv(x, y), out_dtype))

    return fn


def _cuda_scalar_reciprocal(ctx, a, b):
    """For ``a / b`` on CUDA with a Python number ``b`` and a floating result, the
    reciprocal that eager multiplies by instead of dividing: ``1 / b`` computed in the
    op's math dtype (fp32 for fp16/bf16/fp32, fp64 for fp64) from ``b`` rounded to it
    (ATen's ``div_true_kernel_cuda``; its hardswish and hardsigmoid kernels multiply by
    ``1.0f / 6.0f`` too, and TorchInductor does the same on GPUs). Else None: eager on
    CPU divides."""
    if ctx.device.type != "cuda" or isinstance(b, bool) or not isinstance(b, (int, float)):
        return None
    compute, _ = promote(Kind.INT_TO_FLOAT, a, b)
    if not compute.is_floating_point:
        return None
    math_dtype = torch.float64 if compute == torch.float64 else torch.float32
    try:
        value = float(b)
    except OverflowError:  # an int past fp64's range: eager rejects it too
        return None
    if math.isfinite(value) and abs(value) > torch.finfo(math_dtype).max:
        return None  # not a value of the math dtype (eager's conversion of it fails)
    return float(torch.tensor(1.0, dtype=math_dtype) / torch.tensor(value, dtype=math_dtype))


# true_divide (div's alias) appears where a symbolic size is divided as a tensor, e.g. the
# upsample decompositions' scales under dynamic shapes
@register_lowering(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode,
                   aten.true_divide.Tensor, aten.true_divide.Scalar)
def _lower_div(ctx, a, b, rounding_mode=None):
    if rounding_mode is None:
        reciprocal = _cuda_scalar_reciprocal(ctx, a, b)
        if reciprocal is not None:
            return make_pointwise(ctx, [a, reciprocal], lambda dt, x, y: ops.mul(x, y), Kind.INT_TO_FLOAT)
        return make_pointwise(ctx, [a, b], lambda dt, x, y: ops.truediv(x, y), Kind.INT_TO_FLOAT)
    if rounding_mode == "trunc":
        return make_pointwise(ctx, [a, b], _truncdiv(ctx.out_dtype))
    if rounding_mode == "floor":
        return make_pointwise(ctx, [a, b], _floordiv)
    raise ValueError(f"div: unknown rounding_mode {rounding_mode!r}; expected None, 'trunc' or 'floor'")


register_pointwise([aten.floor_divide.default, aten.floor_divide.Scalar], _floordiv)
register_pointwise([aten.remainder.Tensor, aten.remainder.Scalar], lambda dt, x, y: ops.remainder(x, y),
                   round_operands=True)
register_pointwise([aten.fmod.Tensor, aten.fmod.Scalar], lambda dt, x, y: ops.fmod(x, y), round_operands=True)
register_pointwise([aten.atan2], lambda dt, x, y: ops.atan2(x, y), Kind.INT_TO_FLOAT)


def _maximum(dt, x, y):
    return ops.logical_or(x, y) if _is_bool(dt) else ops.maximum(x, y)


def _minimum(dt, x, y):
    return ops.logical_and(x, y) if _is_bool(dt) else ops.minimum(x, y)


register_pointwise([aten.maximum], _maximum)
register_pointwise([aten.minimum], _minimum)
register_pointwise([aten.neg], lambda dt, x: ops.neg(x))


def _abs(dt, x):
    return x if _is_bool(dt) else ops.abs(x)


register_pointwise([aten.abs], _abs)
register_pointwise([aten.reciprocal], lambda dt, x: ops.truediv(const(1, dt), x), Kind.INT_TO_FLOAT)

for _name in ("exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "sigmoid", "tanh",
              "erf", "sin", "cos", "tan"):
    register_pointwise([getattr(aten, _name)], (lambda op: lambda dt, x: getattr(ops, op)(x))(_name),
                       Kind.INT_TO_FLOAT)

register_pointwise([aten.log10], lambda dt, x: ops.mul(ops.log(x), const(1.0 / math.log(10.0), dt)),
                   Kind.INT_TO_FLOAT)


def _float_only(op: str):
    """Rounding ops are the identity on integers."""
    return lambda dt, x: getattr(ops, op)(x) if dt.is_floating_point else x


for _name in ("floor", "ceil", "trunc", "round"):
    register_pointwise([getattr(aten, _name).default], _float_only(_name))


def _sign(dt, x):
    """``(x > 0) - (x < 0)``, as torch's CPU and CUDA kernels compute it: NaN gives 0."""
    if _is_bool(dt):
        return x
    zero = const(0, dt)
    pos = ops.to_dtype(ops.gt(x, zero), dt)
    neg = ops.to_dtype(ops.lt(x, zero), dt)
    return ops.sub(pos, neg)


# sgn is sign on real dtypes; complex ones never reach lowerings (graph.py makes them externs)
register_pointwise([aten.sign, aten.sgn], _sign)


def _relu(dt, x):
    return ops.maximum(x, const(0, dt))


register_pointwise([aten.relu], _relu)


def _silu(dt, x):
    return ops.mul(x, ops.sigmoid(x))


register_pointwise([aten.silu], _silu)


@register_lowering(aten.silu_backward.default)
def _lower_silu_backward(ctx, grad, x):
    def fn(dt, g, v):
        s = ops.sigmoid(v)
        one = const(1.0, dt)
        return ops.mul(ops.mul(g, s), ops.add(one, ops.mul(v, ops.sub(one, s))))

    return make_pointwise(ctx, [grad, x], fn)


_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_KAPPA = 0.044715


def _gelu(approximate: str):
    """GELU; the formulas are torch's (aten/src/ATen/native/cpu/Activation.cpp)."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: unknown approximate={approximate!r}; expected 'none' or 'tanh'")

    def fn(dt, x):
        half, one = const(0.5, dt), const(1.0, dt)
        if approximate == "none":
            return ops.mul(ops.mul(half, x), ops.add(one, ops.erf(ops.mul(x, const(_SQRT1_2, dt)))))
        cube = ops.mul(ops.mul(x, x), x)
        inner = ops.mul(const(_SQRT_2_OVER_PI, dt), ops.add(x, ops.mul(const(_GELU_KAPPA, dt), cube)))
        return ops.mul(ops.mul(half, x), ops.add(one, ops.tanh(inner)))

    return fn


def _gelu_backward(approximate: str):
    """d gelu(x)/dx * grad, as in torch's GeluBackwardKernel."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu_backward: unknown approximate={approximate!r}; expected 'none' or 'tanh'")

    def fn(dt, g, x):
        half, one = const(0.5, dt), const(1.0, dt)
        if approximate == "none":
            cdf = ops.mul(half, ops.add(one, ops.erf(ops.mul(x, const(_SQRT1_2, dt)))))
            pdf = ops.mul(ops.exp(ops.mul(const(-0.5, dt), ops.mul(x, x))), const(_INV_SQRT_2PI, dt))
            return ops.mul(g, ops.add(cdf, ops.mul(x, pdf)))
        beta = const(_SQRT_2_OVER_PI, dt)
        x_sq = ops.mul(x, x)
        inner = ops.mul(beta, ops.add(x, ops.mul(const(_GELU_KAPPA, dt), ops.mul(x_sq, x))))
        tanh_inner = ops.tanh(inner)
        left = ops.mul(half, x)
        right = ops.add(one, tanh_inner)
        left_derivative = ops.mul(half, right)
        dtanh = ops.sub(one, ops.mul(tanh_inner, tanh_inner))
        inner_derivative = ops.mul(beta, ops.add(one, ops.mul(const(3.0 * _GELU_KAPPA, dt), x_sq)))
        right_derivative = ops.mul(ops.mul(left, dtanh), inner_derivative)
        return ops.mul(g, ops.add(left_derivative, right_derivative))

    return fn


@register_lowering(aten.gelu.default)
def _lower_gelu(ctx, x, approximate="none"):
    return make_pointwise(ctx, [x], _gelu(approximate))


@register_lowering(aten.gelu_backward.default)
def _lower_gelu_backward(ctx, grad, x, approximate="none"):
    return make_pointwise(ctx, [grad, x], _gelu_backward(approximate))


@register_lowering(aten.sigmoid_backward.default)
def _lower_sigmoid_backward(ctx, grad, y):
    return make_pointwise(ctx, [grad, y], lambda dt, g, v: ops.mul(ops.mul(g, ops.sub(const(1.0, dt), v)), v))


@register_lowering(aten.tanh_backward.default)
def _lower_tanh_backward(ctx, grad, y):
    return make_pointwise(ctx, [grad, y], lambda dt, g, v: ops.mul(g, ops.sub(const(1.0, dt), ops.mul(v, v))))


@register_lowering(aten.threshold_backward.default)
def _lower_threshold_backward(ctx, grad, x, threshold):
    return make_pointwise(
        ctx, [grad, x, threshold],
        lambda dt, g, v, t: ops.where(ops.le(v, t), const(0, dt), g),
    )


@register_lowering(aten.native_dropout_backward.default)
def _lower_dropout_backward(ctx, grad, mask, scale):
    return make_pointwise(ctx, [grad, mask, scale], lambda dt, g, m, s: ops.mul(ops.mul(g, m), s))


def _integer_pow(dt, x, exponent: int):
    """``x ** exponent`` for an integer ``exponent >= 0`` by repeated squaring."""
    result, base = None, x
    while exponent:
        if exponent & 1:
            result = base if result is None else _mul(dt, result, base)
        exponent >>= 1
        if exponent:
            base = _mul(dt, base, base)
    return const(1, dt) if result is None else result


@register_lowering(aten.pow.Tensor_Scalar)
def _lower_pow_scalar(ctx, x, exponent):
    if isinstance(exponent, sympy.Expr):
        raise NoLowering("symbolic exponent")

    def fn(dt, v, e):
        if float(exponent).is_integer() and abs(exponent) <= 64:
            n = int(exponent)
            if n >= 0:
                return _integer_pow(dt, v, n)
            if dt.is_floating_point:
                return ops.truediv(const(1.0, dt), _integer_pow(dt, v, -n))
        if exponent == 0.5 and dt.is_floating_point:
            return ops.sqrt(v)
        if not dt.is_floating_point:
            raise NoLowering("integer pow with a negative or huge exponent")
        return ops.pow(v, e)

    return make_pointwise(ctx, [x, exponent], fn)


@register_lowering(aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _lower_pow(ctx, base, exponent):
    if not promote(Kind.DEFAULT, base, exponent)[0].is_floating_point:
        raise NoLowering("integer pow of tensors")
    return make_pointwise(ctx, [base, exponent], lambda dt, b, e: ops.pow(b, e))


@register_lowering(aten.clamp.default, aten.clamp.Tensor)
def _lower_clamp(ctx, x, min=None, max=None):
    operands = [x] + [v for v in (min, max) if v is not None]

    def fn(dt, v, *bounds):
        bounds = list(bounds)
        if min is not None:
            v = _maximum(dt, v, bounds.pop(0))
        if max is not None:
            v = _minimum(dt, v, bounds.pop(0))
        return v

    return make_pointwise(ctx, operands, fn)


register_pointwise([aten.clamp_min.default, aten.clamp_min.Tensor], _maximum)
register_pointwise([aten.clamp_max.default, aten.clamp_max.Tensor], _minimum)


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    register_pointwise([getattr(aten, _name).Tensor, getattr(aten, _name).Scalar],
                       (lambda op: lambda dt, x, y: getattr(ops, op)(x, y))(_name), Kind.ALWAYS_BOOL,
                       round_operands=True)


def _as_bool(dt, x):
    return x if _is_bool(dt) else ops.to_dtype(x, torch.bool)


register_pointwise([aten.logical_not], lambda dt, x: ops.logical_not(_as_bool(dt, x)), Kind.ALWAYS_BOOL)
for _name in ("logical_and", "logical_or", "logical_xor"):
    register_pointwise([getattr(aten, _name)],
                       (lambda op: lambda dt, x, y: getattr(ops, op)(_as_bool(dt, x), _as_bool(dt, y)))(_name),
                       Kind.ALWAYS_BOOL)


def _bitwise(op_name):
    def fn(dt, x, y):
        if dt.is_floating_point:
            raise NoLowering(f"{op_name} on floating point")
        return getattr(ops, op_name)(x, y)

    return fn


for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    register_pointwise([getattr(aten, _name).Tensor, getattr(aten, _name).Scalar], _bitwise(_name))


@register_lowering(aten.bitwise_not.default)
def _lower_bitwise_not(ctx, x):
    if x.get_dtype().is_floating_point:
        raise NoLowering("bitwise_not on floating point")
    return make_pointwise(ctx, [x], lambda dt, v: ops.logical_not(v) if _is_bool(dt) else ops.bitwise_not(v))


register_pointwise([aten.isnan], lambda dt, x: ops.isnan(x) if dt.is_floating_point else const(False, torch.bool),
                   Kind.ALWAYS_BOOL)
register_pointwise([aten.isinf], lambda dt, x: ops.isinf(x) if dt.is_floating_point else const(False, torch.bool),
                   Kind.ALWAYS_BOOL)


@register_lowering(aten.where.self)
def _lower_where(ctx, cond, a, b):
    compute, _ = promote(Kind.NO_OPMATH, a, b)
    out_dtype, size = ctx.out_dtype, ctx.out_size
    load_c = loader(cond, size, torch.bool)
    load_a, load_b = loader(a, size, compute), loader(b, size, compute)

    def inner_fn(index):
        return cast(ops.where(load_c(index), load_a(index), load_b(index)), compute, out_dtype)

    return ctx.pointwise(inner_fn, [cond, a, b])


@register_lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _lower_masked_fill(ctx, x, mask, value):
    out_dtype, size = ctx.out_dtype, ctx.out_size
    load_x, load_m, load_v = loader(x, size, out_dtype), loader(mask, size, torch.bool), loader(value, size, out_dtype)
    return ctx.pointwise(lambda index: ops.where(load_m(index), load_v(index), load_x(index)), [x, mask, value])


@register_lowering(aten.tril.default, aten.triu.default)
def _lower_tril_triu(ctx, x, diagonal=0):
    lower = ctx.node.target is aten.tril.default
    size, dtype = ctx.out_size, ctx.out_dtype
    load = loader(x, size, dtype)

    def inner_fn(index):
        offset = ops.index_expr(index[-1] - index[-2], torch.int64)
        diag = const(diagonal, torch.int64) if not isinstance(diagonal, sympy.Expr) else \
            ops.index_expr(diagonal, torch.int64)
        keep = ops.le(offset, diag) if lower else ops.ge(offset, diag)
        return ops.where(keep, load(index), const(0, dtype))

    return ctx.pointwise(inner_fn, [x])
