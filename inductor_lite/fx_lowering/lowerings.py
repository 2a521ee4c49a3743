"""Lowerings: aten op -> loop-level IR, registered in `LOWERINGS`.

A lowering is called as ``fn(ctx, *args, **kwargs)``: ``ctx`` is the
`LoweringContext` of the FX node (its fake-tensor metadata, the graph being built);
the arguments are the node's arguments with tensors replaced by IR nodes and symbolic
ints by sympy expressions. It returns an IR node (or a list of them for multi-output
view ops such as ``split``).

Pointwise ops build a `Pointwise` whose dtypes follow torch's type promotion
(``torch._prims_common.elementwise_dtypes``): operands are converted to the
*computation* dtype (fp32 for fp16/bf16 inputs), the op is computed, and the result
converted to the output dtype of the node's ``meta['val']``. View ops build
`ReinterpretView`/`GenericView` index remappings. Ops with no entry here become
`ExternKernel` calls (see `graph.py`); a lowering that cannot handle particular
arguments raises `NoLowering` to get the same treatment.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import sympy
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as Kind
from torch._prims_common import elementwise_dtypes
from torch.utils._sympy.functions import FloorDiv

from ..ir.indexing import Expr, as_expr, flat_to_vars, known_equal, vars_to_flat
from ..ir.nodes import (
    Buffer, ComputedBuffer, GenericView, IRNode, Layout, Pointwise, ReinterpretView, StorageBox,
    StridedInfo, as_strided_view, realized_layout, underlying_buffer, unwrap,
)
from ..ir.ops import ops

aten = torch.ops.aten
prims = torch.ops.prims

LOWERINGS: dict[Any, Callable[..., Any]] = {}


class NoLowering(Exception):
    """Raised by a lowering that cannot handle these arguments: the op becomes an extern call."""


def _overloads(target) -> list:
    if isinstance(target, torch._ops.OpOverloadPacket):
        result = []
        for name in target.overloads():
            overload = getattr(target, name)
            if "out" in name or overload._schema.is_mutable:
                continue
            result.append(overload)
        return result
    return [target]


def register_lowering(*targets):
    """Decorator: ``fn`` lowers every listed op (a packet means all its functional overloads)."""

    def decorate(fn):
        for target in targets:
            for overload in _overloads(target):
                LOWERINGS[overload] = fn
        return fn

    return decorate


class LoweringContext:
    """What a lowering may know about the FX node it lowers.

    Attributes:
        node: the ``torch.fx.Node``.
        val: its ``meta['val']`` (a fake tensor, a list of them, or a SymInt).
        graph: the `GraphLowering` building the IR (for `realize`).
    """

    def __init__(self, node: torch.fx.Node, graph):
        self.node = node
        self.graph = graph
        self.val = node.meta.get("val")

    @property
    def out_size(self) -> list[Expr]:
        return [as_expr(s) for s in self.val.size()]

    @property
    def out_dtype(self) -> torch.dtype:
        return self.val.dtype

    @property
    def device(self) -> torch.device:
        val = self.val[0] if isinstance(self.val, (list, tuple)) else self.val
        return val.device

    def arg_val(self, i: int):
        """The fake value of positional argument ``i`` of the node."""
        arg = self.node.args[i]
        return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg

    def op_name(self) -> str:
        return op_short_name(self.node.target)

    def pointwise(self, inner_fn, inputs: Sequence[Any], size=None, dtype=None) -> StorageBox:
        """A lazy `Pointwise` for this node, inlining the lazy ``inputs``' origins."""
        origins: dict[str, str] = {}
        for x in inputs:
            origins.update(lazy_origins(x))
        origins[self.node.name] = self.op_name()
        return StorageBox(Pointwise(
            ranges=list(size if size is not None else self.out_size),
            inner_fn=inner_fn,
            dtype=dtype or self.out_dtype,
            device=self.device,
            origins=origins,
        ))

    def realize(self, x: IRNode) -> IRNode:
        return self.graph.realize_input(x)


def op_short_name(target) -> str:
    """``aten.gelu.default`` -> ``gelu``; ``aten._to_copy.default`` -> ``to_copy``."""
    name = getattr(target, "__name__", str(target))
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        name = packet.__name__
    return name.split(".")[0].strip("_") or "op"


def lazy_origins(x: Any) -> dict[str, str]:
    """Origins of the computation a consumer would inline when loading ``x``."""
    if isinstance(x, StorageBox):
        return {} if x.is_realized() else dict(x.data.origins)
    if isinstance(x, GenericView):
        return dict(x.origins)
    return {}


# ----------------------------------------------------------------------------
# Loading operands


def _stand_in(x: Any):
    """A value with ``x``'s promotion category for ``elementwise_dtypes``."""
    if isinstance(x, IRNode):
        shape = [1] * len(x.get_size())
        return torch.empty(shape, dtype=x.get_dtype(), device="meta")
    if isinstance(x, sympy.Expr):
        return 1 if x.is_integer else 1.0
    if isinstance(x, (bool, int, float)):
        return x
    raise NoLowering(f"unsupported pointwise operand of type {type(x).__name__}")


def promote(kind: Kind, *operands) -> tuple[torch.dtype, torch.dtype]:
    """(computation dtype, result dtype) of an elementwise op on ``operands``."""
    return elementwise_dtypes(*[_stand_in(x) for x in operands], type_promotion_kind=kind)


def const(value, dtype: torch.dtype):
    """``ops.constant`` with ``value`` converted to ``dtype``'s Python type."""
    if dtype == torch.bool:
        return ops.constant(bool(value), dtype)
    if dtype.is_floating_point:
        return ops.constant(float(value), dtype)
    return ops.constant(int(value), dtype)


def cast(value, src: torch.dtype, dst: torch.dtype):
    return value if src == dst else ops.to_dtype(value, dst)


def broadcast_index(index: Sequence[Expr], in_size: Sequence[Expr], out_size: Sequence[Expr]) -> list[Expr]:
    """Index into an input of ``in_size`` broadcast (numpy rules) to ``out_size``."""
    offset = len(out_size) - len(in_size)
    if offset < 0:
        raise ValueError(f"cannot broadcast size {list(in_size)} to {list(out_size)}")
    return [sympy.Integer(0) if in_size[d] == 1 else index[offset + d] for d in range(len(in_size))]


def loader(x: Any, out_size: Sequence[Expr], dtype: torch.dtype) -> Callable[[Sequence[Expr]], Any]:
    """``index -> value`` of operand ``x`` broadcast to ``out_size``, converted to ``dtype``."""
    if isinstance(x, IRNode):
        inner, in_size, src = x.make_loader(), x.get_size(), x.get_dtype()
        return lambda index: cast(inner(broadcast_index(index, in_size, out_size)), src, dtype)
    if isinstance(x, sympy.Expr) and not x.is_number:
        return lambda index: cast(ops.index_expr(x, torch.int64), torch.int64, dtype)
    if isinstance(x, sympy.Expr):
        x = int(x) if x.is_integer else float(x)
    return lambda index: const(x, dtype)


def make_pointwise(ctx: LoweringContext, operands: Sequence[Any], fn: Callable[..., Any],
                   kind: Kind = Kind.DEFAULT) -> StorageBox:
    """Elementwise ``fn(dtype, *values)`` over broadcast ``operands``.

    ``fn`` receives the operands converted to the computation dtype and returns a
    value of that dtype (bool for ``ALWAYS_BOOL`` ops); the result is converted to
    the node's output dtype.
    """
    compute, _ = promote(kind, *operands)
    out_dtype, size = ctx.out_dtype, ctx.out_size
    loaders = [loader(x, size, compute) for x in operands]
    fn_dtype = torch.bool if kind == Kind.ALWAYS_BOOL else compute

    def inner_fn(index):
        return cast(fn(compute, *[load(index) for load in loaders]), fn_dtype, out_dtype)

    return ctx.pointwise(inner_fn, operands)


def register_pointwise(targets, fn: Callable[..., Any], kind: Kind = Kind.DEFAULT, nargs: Optional[int] = None):
    """Register ``fn(dtype, *values)`` as the lowering of elementwise ``targets``.

    The first ``nargs`` positional arguments (all when None) are the operands.
    """

    def lowering(ctx, *args, **kwargs):
        if kwargs:
            raise NoLowering(f"unexpected keyword arguments {sorted(kwargs)}")
        operands = args if nargs is None else args[:nargs]
        return make_pointwise(ctx, operands, fn, kind)

    register_lowering(*targets)(lowering)
    return lowering


# ----------------------------------------------------------------------------
# Pointwise math


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


@register_lowering(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode)
def _lower_div(ctx, a, b, rounding_mode=None):
    if rounding_mode is None:
        return make_pointwise(ctx, [a, b], lambda dt, x, y: ops.truediv(x, y), Kind.INT_TO_FLOAT)
    if rounding_mode == "trunc":
        return make_pointwise(ctx, [a, b], lambda dt, x, y: ops.truncdiv(x, y))
    if rounding_mode == "floor":
        return make_pointwise(ctx, [a, b], lambda dt, x, y: ops.floordiv(x, y))
    raise ValueError(f"div: unknown rounding_mode {rounding_mode!r}; expected None, 'trunc' or 'floor'")


register_pointwise([aten.floor_divide.default, aten.floor_divide.Scalar], lambda dt, x, y: ops.floordiv(x, y))
register_pointwise([aten.remainder.Tensor, aten.remainder.Scalar], lambda dt, x, y: ops.remainder(x, y))
register_pointwise([aten.fmod.Tensor, aten.fmod.Scalar], lambda dt, x, y: ops.fmod(x, y))
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
    if _is_bool(dt):
        return x
    zero = const(0, dt)
    pos = ops.to_dtype(ops.gt(x, zero), dt)
    neg = ops.to_dtype(ops.lt(x, zero), dt)
    result = ops.sub(pos, neg)
    return ops.where(ops.isnan(x), x, result) if dt.is_floating_point else result


register_pointwise([aten.sign], _sign)


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
                       (lambda op: lambda dt, x, y: getattr(ops, op)(x, y))(_name), Kind.ALWAYS_BOOL)


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


# ----------------------------------------------------------------------------
# Copies, casts and constants


def _identity_cast(ctx, x):
    size, dtype = ctx.out_size, ctx.out_dtype
    load = loader(x, size, dtype)
    return ctx.pointwise(load, [x])


@register_lowering(aten._to_copy.default)
def _lower_to_copy(ctx, x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
                   memory_format=None):
    if device is not None and torch.device(device) != x.get_device():
        raise NoLowering("device transfer")
    if layout not in (None, torch.strided):
        raise NoLowering(f"layout {layout}")
    return _identity_cast(ctx, x)


@register_lowering(prims.convert_element_type.default)
def _lower_convert_element_type(ctx, x, dtype):
    return _identity_cast(ctx, x)


@register_lowering(aten.clone.default)
def _lower_clone(ctx, x, memory_format=None):
    return _identity_cast(ctx, x)


@register_lowering(aten.lift_fresh_copy.default)
def _lower_lift_fresh_copy(ctx, x):
    return _identity_cast(ctx, x)


@register_lowering(aten.copy.default)
def _lower_copy(ctx, dst, src, non_blocking=False):
    return _identity_cast(ctx, src)


def _fill(ctx, value):
    size, dtype = ctx.out_size, ctx.out_dtype
    load = loader(value, size, dtype)
    return ctx.pointwise(load, [value] if isinstance(value, IRNode) else [])


def _check_fill_value(value):
    if isinstance(value, sympy.Expr) and not value.is_integer:
        raise NoLowering("symbolic float fill value")
    return value


@register_lowering(aten.full.default, aten.full_like.default, aten.new_full.default)
def _lower_full(ctx, *args, **kwargs):
    value = args[1] if ctx.node.target is not aten.new_full.default else args[2]
    return _fill(ctx, _check_fill_value(value))


@register_lowering(aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default)
def _lower_zeros(ctx, *args, **kwargs):
    return _fill(ctx, 0)


@register_lowering(aten.ones.default, aten.ones_like.default, aten.new_ones.default)
def _lower_ones(ctx, *args, **kwargs):
    return _fill(ctx, 1)


@register_lowering(aten.scalar_tensor.default)
def _lower_scalar_tensor(ctx, value, **kwargs):
    return _fill(ctx, _check_fill_value(value))


@register_lowering(aten.fill.Scalar, aten.fill.Tensor)
def _lower_fill(ctx, x, value):
    return _fill(ctx, _check_fill_value(value))


@register_lowering(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _lower_arange(ctx, *args, **kwargs):
    numbers = [a for a in args]
    start, step = (0, 1) if len(numbers) == 1 else (numbers[0], numbers[2] if len(numbers) > 2 else 1)
    if any(isinstance(v, sympy.Expr) and not v.is_integer for v in (start, step)):
        raise NoLowering("symbolic float arange")
    dtype = ctx.out_dtype

    def inner_fn(index):
        if not dtype.is_floating_point:
            return cast(ops.index_expr(as_expr(start) + index[0] * as_expr(step), torch.int64), torch.int64, dtype)
        compute = torch.float64 if dtype == torch.float64 else torch.float32
        i = cast(ops.index_expr(index[0], torch.int64), torch.int64, compute)
        value = ops.add(loader(start, [], compute)(index), ops.mul(i, loader(step, [], compute)(index)))
        return cast(value, compute, dtype)

    return ctx.pointwise(inner_fn, [])


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


# ----------------------------------------------------------------------------
# Scatter-like pointwise ops (slice/select backward, cat, pad): masked loads


def _in_range(index: Expr, lo: Expr, hi: Expr):
    """bool value ``lo <= index < hi``, skipping bounds that hold trivially."""
    i = ops.index_expr(index, torch.int64)
    conds = []
    if lo != 0:
        conds.append(ops.ge(i, _int_value(lo)))
    conds.append(ops.lt(i, _int_value(hi)))
    result = conds[0]
    for c in conds[1:]:
        result = ops.logical_and(result, c)
    return result


def _int_value(expr):
    expr = as_expr(expr)
    return ops.constant(int(expr), torch.int64) if expr.is_number else ops.index_expr(expr, torch.int64)


def _normalize_dim(dim: int, rank: int) -> int:
    if not -max(rank, 1) <= dim < max(rank, 1):
        raise IndexError(f"dimension {dim} out of range for rank {rank}")
    return dim % max(rank, 1)


def _normalize_slice(size: Expr, start, end, step) -> tuple[Expr, Expr, Expr]:
    """Clamp ``start``/``end`` of a slice of a dimension of ``size`` as torch does."""
    size = as_expr(size)

    def norm(v, default):
        if v is None:
            return default
        v = as_expr(v)
        if v.is_number and v < 0:
            v = size + v
        if v.is_number and size.is_number:
            v = sympy.Integer(min(max(int(v), 0), int(size)))
        elif v.is_number and int(v) >= 2 ** 62:
            v = size
        return v

    start_e, end_e = norm(start, sympy.Integer(0)), norm(end, size)
    return start_e, end_e, as_expr(step)


def _embed(ctx, base, src, dim: int, start: Expr, end: Expr, step: Expr):
    """``base`` (or zeros) with ``src`` written at positions ``start:end:step`` of ``dim``."""
    size, dtype = ctx.out_size, ctx.out_dtype
    load_src = loader(src, src.get_size(), dtype)
    load_base = loader(base, size, dtype) if base is not None else None

    if start == 0 and step == 1 and known_equal(end, size[dim]):
        return ctx.pointwise(load_src, [src])

    def inner_fn(index):
        i = index[dim]
        cond = _in_range(i, start, end)
        if step != 1:
            aligned = ops.eq(ops.index_expr(sympy.Mod(i - start, step), torch.int64), const(0, torch.int64))
            cond = ops.logical_and(cond, aligned)
        src_index = list(index)
        src_index[dim] = FloorDiv(i - start, step) if step != 1 else i - start
        value = ops.masked(cond, lambda: load_src(src_index), 0)
        return value if base is None else ops.where(cond, value, load_base(index))

    return ctx.pointwise(inner_fn, [src] + ([base] if base is not None else []))


@register_lowering(aten.slice_backward.default)
def _lower_slice_backward(ctx, grad, input_sizes, dim, start, end, step):
    dim = _normalize_dim(dim, len(input_sizes))
    start, end, step = _normalize_slice(ctx.out_size[dim], start, end, step)
    return _embed(ctx, None, grad, dim, start, end, step)


@register_lowering(aten.slice_scatter.default)
def _lower_slice_scatter(ctx, x, src, dim=0, start=None, end=None, step=1):
    dim = _normalize_dim(dim, len(ctx.out_size))
    start, end, step = _normalize_slice(ctx.out_size[dim], start, end, step)
    return _embed(ctx, x, src, dim, start, end, step)


def _select_embed(ctx, base, src, dim, index):
    size, dtype = ctx.out_size, ctx.out_dtype
    dim = _normalize_dim(dim, len(size))
    index = as_expr(index)
    if index.is_number and index < 0:
        index = size[dim] + index
    load_src = loader(src, src.get_size(), dtype)
    load_base = loader(base, size, dtype) if base is not None else (lambda idx: const(0, dtype))

    def inner_fn(idx):
        cond = ops.eq(ops.index_expr(idx[dim], torch.int64), _int_value(index))
        src_index = list(idx[:dim]) + list(idx[dim + 1:])
        return ops.where(cond, load_src(src_index), load_base(idx))

    return ctx.pointwise(inner_fn, [src] + ([base] if base is not None else []))


@register_lowering(aten.select_backward.default)
def _lower_select_backward(ctx, grad, input_sizes, dim, index):
    return _select_embed(ctx, None, grad, dim, index)


@register_lowering(aten.select_scatter.default)
def _lower_select_scatter(ctx, x, src, dim, index):
    return _select_embed(ctx, x, src, dim, index)


@register_lowering(aten.cat.default)
def _lower_cat(ctx, tensors, dim=0):
    size, dtype = ctx.out_size, ctx.out_dtype
    dim = _normalize_dim(dim, len(size))
    # torch skips legacy 1-D empty inputs whatever their rank
    inputs = [t for t in tensors if not (len(t.get_size()) == 1 and t.get_size()[0] == 0)]
    inputs = [t for t in inputs if t.get_size()[dim] != 0]
    if not inputs:
        return _fill(ctx, 0)
    offsets = [sympy.Integer(0)]
    for t in inputs:
        offsets.append(offsets[-1] + t.get_size()[dim])
    loaders = [loader(t, t.get_size(), dtype) for t in inputs]

    def inner_fn(index):
        i = index[dim]

        def piece(k):
            shifted = list(index)
            shifted[dim] = i - offsets[k]
            return loaders[k](shifted)

        result = None
        for k in reversed(range(len(inputs))):
            if result is None:
                cond = _in_range(i, offsets[k], offsets[k + 1])
                result = ops.masked(cond, (lambda k: lambda: piece(k))(k), 0)
                continue
            cond = _in_range(i, offsets[k], offsets[k + 1])
            value = ops.masked(cond, (lambda k: lambda: piece(k))(k), 0)
            result = ops.where(cond, value, result)
        return result

    return ctx.pointwise(inner_fn, inputs)


@register_lowering(aten.constant_pad_nd.default)
def _lower_constant_pad_nd(ctx, x, pad, value=0):
    size, dtype = ctx.out_size, ctx.out_dtype
    in_size = x.get_size()
    if len(pad) % 2 or len(pad) // 2 > len(size):
        raise ValueError(f"constant_pad_nd: pad {list(pad)} must have an even length <= 2 * rank")
    load = loader(x, in_size, dtype)
    lefts = {len(size) - 1 - k: as_expr(pad[2 * k]) for k in range(len(pad) // 2)}

    def inner_fn(index):
        src_index = list(index)
        cond = None
        for d, left in lefts.items():
            src_index[d] = index[d] - left
            c = _in_range(index[d], left, left + in_size[d])
            cond = c if cond is None else ops.logical_and(cond, c)
        if cond is None:
            return load(src_index)
        return ops.where(cond, ops.masked(cond, lambda: load(src_index), 0), loader(value, [], dtype)(index))

    return ctx.pointwise(inner_fn, [x])


# ----------------------------------------------------------------------------
# Views: index remappings, strided over realized buffers


def make_view(ctx: LoweringContext, x: IRNode, reindex: Callable[[list[Expr]], list[Expr]],
              out_val=None, in_val=None) -> IRNode:
    """A view of ``x`` with the node's output size: strided when ``x`` is realized with
    the strides its metadata says, an index remapping otherwise."""
    out_val = ctx.val if out_val is None else out_val
    in_val = ctx.arg_val(0) if in_val is None else in_val
    info = None
    if isinstance(out_val, torch.Tensor) and isinstance(in_val, torch.Tensor):
        info = (StridedInfo.of(in_val), StridedInfo.of(out_val))
    size = [as_expr(s) for s in out_val.size()]
    view = GenericView(x, size, reindex, info)
    view.origins = {**lazy_origins(x), ctx.node.name: ctx.op_name()}
    if isinstance(unwrap(x), (Buffer, ReinterpretView)):
        layout = as_strided_view(view)
        if layout is not None:
            return ReinterpretView(underlying_buffer(x), layout)
    return view


@register_lowering(aten._assert_tensor_metadata.default)
def _lower_assert_tensor_metadata(ctx, x, *args, **kwargs):
    """Checked at trace time: fake tensors carry exactly this metadata."""
    return None


@register_lowering(aten.alias.default, aten.detach.default, aten.lift_fresh.default)
def _lower_alias(ctx, x):
    return x


@register_lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _lower_view(ctx, x, size):
    old_size, new_size = x.get_size(), ctx.out_size
    if [s for s in old_size if s != 1] == [s for s in new_size if s != 1]:
        return make_view(ctx, x, _unit_dims_reindex(old_size, new_size))

    def reindex(index):
        return flat_to_vars(vars_to_flat(index, new_size), old_size)

    return make_view(ctx, x, reindex)


def _unit_dims_reindex(old_size, new_size):
    """Reindex for a view that only adds or removes size-1 dimensions."""
    new_keep = [d for d, s in enumerate(new_size) if s != 1]
    old_keep = [d for d, s in enumerate(old_size) if s != 1]

    def reindex(index):
        out = [sympy.Integer(0)] * len(old_size)
        for od, nd in zip(old_keep, new_keep):
            out[od] = index[nd]
        return out

    return reindex


@register_lowering(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)
def _lower_squeeze(ctx, x, dim=None):
    return make_view(ctx, x, _unit_dims_reindex(x.get_size(), ctx.out_size))


@register_lowering(aten.unsqueeze.default)
def _lower_unsqueeze(ctx, x, dim):
    dim = _normalize_dim(dim, len(x.get_size()) + 1)
    return make_view(ctx, x, lambda index: index[:dim] + index[dim + 1:])


@register_lowering(aten.permute.default)
def _lower_permute(ctx, x, dims):
    rank = len(x.get_size())
    dims = [_normalize_dim(d, rank) for d in dims]
    if sorted(dims) != list(range(rank)):
        raise ValueError(f"permute: {dims} is not a permutation of {rank} dims")

    def reindex(index):
        old = [sympy.Integer(0)] * rank
        for new_d, old_d in enumerate(dims):
            old[old_d] = index[new_d]
        return old

    return make_view(ctx, x, reindex)


@register_lowering(aten.transpose.int)
def _lower_transpose(ctx, x, dim0, dim1):
    rank = len(x.get_size())
    d0, d1 = _normalize_dim(dim0, rank), _normalize_dim(dim1, rank)

    def reindex(index):
        old = list(index)
        old[d0], old[d1] = index[d1], index[d0]
        return old

    return make_view(ctx, x, reindex)


@register_lowering(aten.t.default)
def _lower_t(ctx, x):
    if len(x.get_size()) < 2:
        return x
    return make_view(ctx, x, lambda index: [index[1], index[0]])


@register_lowering(aten.expand.default)
def _lower_expand(ctx, x, size, implicit=False):
    in_size, out_size = x.get_size(), ctx.out_size
    return make_view(ctx, x, lambda index: broadcast_index(index, in_size, out_size))


def _slice_reindex(dim, start, step):
    def reindex(index):
        old = list(index)
        old[dim] = start + index[dim] * step
        return old

    return reindex


@register_lowering(aten.slice.Tensor)
def _lower_slice(ctx, x, dim=0, start=None, end=None, step=1):
    dim = _normalize_dim(dim, len(x.get_size()))
    start, _, step = _normalize_slice(x.get_size()[dim], start, end, step)
    return make_view(ctx, x, _slice_reindex(dim, start, step))


def _select_reindex(dim, index_value):
    return lambda index: list(index[:dim]) + [index_value] + list(index[dim:])


@register_lowering(aten.select.int)
def _lower_select(ctx, x, dim, index):
    dim = _normalize_dim(dim, len(x.get_size()))
    index = as_expr(index)
    if index.is_number and index < 0:
        index = x.get_size()[dim] + index
    return make_view(ctx, x, _select_reindex(dim, index))


@register_lowering(aten.split.Tensor, aten.split_with_sizes.default)
def _lower_split(ctx, x, split, dim=0):
    dim = _normalize_dim(dim, len(x.get_size()))
    in_val = ctx.arg_val(0)
    views, start = [], sympy.Integer(0)
    for piece in ctx.val:
        views.append(make_view(ctx, x, _slice_reindex(dim, start, 1), out_val=piece, in_val=in_val))
        start = start + as_expr(piece.size(dim))
    return views


@register_lowering(aten.unbind.int)
def _lower_unbind(ctx, x, dim=0):
    dim = _normalize_dim(dim, len(x.get_size()))
    in_val = ctx.arg_val(0)
    return [make_view(ctx, x, _select_reindex(dim, sympy.Integer(k)), out_val=piece, in_val=in_val)
            for k, piece in enumerate(ctx.val)]


@register_lowering(aten.as_strided.default)
def _lower_as_strided(ctx, x, size, stride, storage_offset=None):
    """Only over memory laid out as in eager: graph inputs, extern outputs, or a buffer
    that is its whole storage (as_strided addresses the storage, not the view)."""
    in_val = ctx.arg_val(0)
    x = ctx.realize(x)
    buffer = underlying_buffer(x)
    layout = realized_layout(x)
    if not StridedInfo.of(in_val).matches(layout):
        raise NotImplementedError("as_strided of a tensor laid out differently from eager")
    if isinstance(buffer, ComputedBuffer):
        whole = in_val.untyped_storage().nbytes() == in_val.numel() * in_val.element_size()
        if not (whole and layout.offset == 0 and in_val.storage_offset() == 0):
            raise NotImplementedError("as_strided of a computed view that does not cover its storage")
        base_offset = sympy.Integer(0)
    else:
        base_offset = getattr(buffer, "storage_offset", sympy.Integer(0))
    offset = as_expr(in_val.storage_offset() if storage_offset is None else storage_offset)
    out = ctx.val
    return ReinterpretView(buffer, Layout(out.device, out.dtype, [as_expr(s) for s in out.size()],
                                          [as_expr(s) for s in out.stride()], offset - base_offset))
