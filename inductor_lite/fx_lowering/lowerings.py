"""The lowering registry and what every lowering family shares.

A lowering turns one aten op into loop-level IR and is registered in `LOWERINGS`
with `register_lowering`. It is called as ``fn(ctx, *args, **kwargs)``: ``ctx`` is
the `LoweringContext` of the FX node (its fake-tensor metadata, the graph being
built); the arguments are the node's arguments with tensors replaced by IR nodes and
symbolic ints by sympy expressions. It returns an IR node (or a list of them for
multi-output view ops such as ``split``).

Pointwise ops build a `Pointwise` whose dtypes follow torch's type promotion
(``torch._prims_common.elementwise_dtypes``): operands are converted to the
*computation* dtype (fp32 for fp16/bf16 inputs), the op is computed, and the result
converted to the output dtype of the node's ``meta['val']``. View ops build
`ReinterpretView`/`GenericView` index remappings. Ops with no entry here become
`ExternKernel` calls (see `graph.py`); a lowering that cannot handle particular
arguments raises `NoLowering` to get the same treatment.

The lowerings themselves live in one module per op family (`pointwise`,
`constructors`, `views`, `data_movement`, `indexing_ops`, `reductions`); the package's
``__init__`` imports them all, so `LOWERINGS` is complete whichever module is
imported first.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import sympy
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as Kind
from torch._prims_common import elementwise_dtypes

from torch.utils._sympy.functions import FloatTrueDiv, IntTrueDiv, ToFloat

from ..ir.indexing import Expr, as_expr, known_equal, shape_env_size_hint
from ..ir.nodes import GenericView, IRNode, Pointwise, StorageBox
from ..ir.ops import ops

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


def wrap_int(value: int, dtype: torch.dtype) -> int:
    """``value`` cast to the integer ``dtype`` as C and eager cast it: modulo
    ``2**bits``, two's complement for signed types (``-3`` as uint8 is 253, ``200`` as
    int8 is -56). Eager casts a Python int operand to the op's integer dtype this way
    (TensorIterator's common dtype), so ``u8 < -1`` compares with 255."""
    bits = dtype.itemsize * 8
    value &= (1 << bits) - 1
    return value - (1 << bits) if dtype.is_signed and value >= 1 << (bits - 1) else value


def const(value, dtype: torch.dtype):
    """``ops.constant`` with ``value`` converted to ``dtype``'s Python type (an int
    wrapped into an integer dtype's range, `wrap_int`)."""
    if dtype == torch.bool:
        return ops.constant(bool(value), dtype)
    if dtype.is_floating_point:
        return ops.constant(float(value), dtype)
    return ops.constant(wrap_int(int(value), dtype), dtype)


def cast(value, src: torch.dtype, dst: torch.dtype):
    return value if src == dst else ops.to_dtype(value, dst)


def is_broadcast(in_size: Expr, out_size: Expr) -> bool:
    """Whether a dimension of ``in_size`` read over a domain of ``out_size`` is broadcast
    (read at index 0): it is 1 and the domain is not. A symbolic size that is 1 without
    being the literal 1 (``Min(1, s0 - 1)``, ``(-s0)//2 + 3``) is told from one equal to
    the domain by the shape environment's example sizes, on which torch's broadcast
    check guarded the graph. (A larger input, such as a scatter's source read over its
    index's shape, is not broadcast.)"""
    if in_size == 1:
        return True
    # the common cases (equal sizes, a static size) without sympy algebra: broadcast_index
    # runs at every evaluation of a loader's index
    if in_size == out_size or sympy.sympify(in_size).is_number or known_equal(in_size, out_size):
        return False
    hint = shape_env_size_hint()
    return hint(in_size) == 1 and hint(out_size) != 1


def broadcast_index(index: Sequence[Expr], in_size: Sequence[Expr], out_size: Sequence[Expr]) -> list[Expr]:
    """Index into an input of ``in_size`` broadcast (numpy rules) to ``out_size``."""
    offset = len(out_size) - len(in_size)
    if offset < 0:
        raise ValueError(f"cannot broadcast size {list(in_size)} to {list(out_size)}")
    return [sympy.Integer(0) if is_broadcast(in_size[d], out_size[offset + d]) else index[offset + d]
            for d in range(len(in_size))]


def loader(x: Any, out_size: Sequence[Expr], dtype: torch.dtype) -> Callable[[Sequence[Expr]], Any]:
    """``index -> value`` of operand ``x`` broadcast to ``out_size``, converted to ``dtype``."""
    if isinstance(x, IRNode):
        inner, in_size, src = x.make_loader(), x.get_size(), x.get_dtype()
        return lambda index: cast(inner(broadcast_index(index, in_size, out_size)), src, dtype)
    if isinstance(x, sympy.Expr) and x.has(*_FLOAT_FUNCTIONS):
        if not _has_float_form(x):
            raise NoLowering(f"symbolic float {x}")
        return lambda index: cast(symbolic_float(x), torch.float64, dtype)
    if isinstance(x, sympy.Expr) and not x.is_number:
        return lambda index: cast(ops.index_expr(x, torch.int64), torch.int64, dtype)
    if isinstance(x, sympy.Expr):
        x = int(x) if x.is_integer else float(x)
    return lambda index: const(x, dtype)


_FLOAT_FUNCTIONS = (IntTrueDiv, FloatTrueDiv, ToFloat)
"""The sympy functions that make a SymFloat of size symbols."""


def _has_float_form(expr: Expr) -> bool:
    """Whether `symbolic_float` can compute ``expr``."""
    if expr.is_integer or expr.is_number:
        return True
    return isinstance(expr, _FLOAT_FUNCTIONS + (sympy.Add, sympy.Mul)) and all(_has_float_form(a) for a in expr.args)


def symbolic_float(expr: Expr):
    """fp64 value of a SymFloat expression over size symbols (e.g. the ``in / out`` scale
    of an upsample under dynamic shapes: ``IntTrueDiv(s0, s1)``), built from ops because
    index expressions are integer. ``expr`` is numbers and integer expressions combined
    by ``+``, ``*``, true division and ``ToFloat`` (`_has_float_form`).
    """
    if expr.is_integer:
        return ops.to_dtype(int_value(expr), torch.float64)
    if expr.is_number:
        return ops.constant(float(expr), torch.float64)
    if isinstance(expr, (IntTrueDiv, FloatTrueDiv)):
        return ops.truediv(symbolic_float(expr.args[0]), symbolic_float(expr.args[1]))
    if isinstance(expr, ToFloat):
        return symbolic_float(expr.args[0])
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        combine = ops.add if isinstance(expr, sympy.Add) else ops.mul
        values = [symbolic_float(a) for a in expr.args]
        result = values[0]
        for v in values[1:]:
            result = combine(result, v)
        return result
    raise ValueError(f"symbolic float {expr}: {type(expr).__name__} has no ops form")


LOW_PRECISION_FLOATS = (torch.float16, torch.bfloat16)


def _rounded_operand(x: Any, size: Sequence[Expr], common: torch.dtype,
                     compute: torch.dtype) -> Callable[[Sequence[Expr]], Any]:
    """The loader (in ``compute``) of operand ``x`` of an op whose operands eager first
    casts to their ``common`` dtype (fp16 or bf16): a number is rounded here, a tensor
    per element (a 0-dim tensor of a wider dtype, an int16 tensor; and a computed
    fp16/bf16 value, which a kernel keeps unrounded in fp32: a max's backward compares
    ``x * c`` with the stored, rounded maximum)."""
    if isinstance(x, (float, int, sympy.Number)) and not isinstance(x, bool):
        return loader(float(torch.tensor(float(x), dtype=common)), size, compute)
    load = loader(x, size, compute)
    if isinstance(x, IRNode) and x.get_dtype() != torch.bool and x.get_dtype().itemsize >= common.itemsize:
        return lambda index: ops.round_to_dtype(load(index), common)
    return load


def make_pointwise(ctx: LoweringContext, operands: Sequence[Any], fn: Callable[..., Any],
                   kind: Kind = Kind.DEFAULT, round_operands: bool = False) -> StorageBox:
    """Elementwise ``fn(dtype, *values)`` over broadcast ``operands``.

    ``fn`` receives the operands converted to the computation dtype and returns a
    value of that dtype (bool for ``ALWAYS_BOOL`` ops); the result is converted to
    the node's output dtype. Kernels keep fp16/bf16 values in fp32 (the stored result
    alone is rounded), so a Python float or 0-dim fp32 operand of an fp16/bf16 op keeps
    its fp32 value, as eager's add, mul and div (which read it in fp32) do;
    ``round_operands=True`` rounds such operands, and computed fp16/bf16 values, to the
    operands' common dtype first, as eager's comparisons, ``fmod`` and ``remainder`` do
    on CPU and CUDA (``x == 0.1`` is True for the bf16 value of 0.1).
    """
    compute, _ = promote(kind, *operands)
    out_dtype, size = ctx.out_dtype, ctx.out_size
    common = promote(Kind.DEFAULT, *operands)[1] if round_operands else None
    if common in LOW_PRECISION_FLOATS:
        loaders = [_rounded_operand(x, size, common, compute) for x in operands]
    else:
        loaders = [loader(x, size, compute) for x in operands]
    fn_dtype = torch.bool if kind == Kind.ALWAYS_BOOL else compute

    def inner_fn(index):
        return cast(fn(compute, *[load(index) for load in loaders]), fn_dtype, out_dtype)

    return ctx.pointwise(inner_fn, operands)


def register_pointwise(targets, fn: Callable[..., Any], kind: Kind = Kind.DEFAULT, nargs: Optional[int] = None,
                       round_operands: bool = False):
    """Register ``fn(dtype, *values)`` as the lowering of elementwise ``targets``.

    The first ``nargs`` positional arguments (all when None) are the operands;
    ``round_operands`` as in `make_pointwise`.
    """

    def lowering(ctx, *args, **kwargs):
        if kwargs:
            raise NoLowering(f"unexpected keyword arguments {sorted(kwargs)}")
        operands = args if nargs is None else args[:nargs]
        return make_pointwise(ctx, operands, fn, kind, round_operands)

    register_lowering(*targets)(lowering)
    return lowering


# ----------------------------------------------------------------------------
# Index helpers shared by the view and data-movement lowerings


def in_range(index: Expr, lo: Expr, hi: Expr):
    """bool value ``lo <= index < hi``, skipping bounds that hold trivially."""
    i = ops.index_expr(index, torch.int64)
    conds = []
    if lo != 0:
        conds.append(ops.ge(i, int_value(lo)))
    conds.append(ops.lt(i, int_value(hi)))
    result = conds[0]
    for c in conds[1:]:
        result = ops.logical_and(result, c)
    return result


def int_value(expr):
    """int64 value of the index expression ``expr`` (a constant when it is a number)."""
    expr = as_expr(expr)
    return ops.constant(int(expr), torch.int64) if expr.is_number else ops.index_expr(expr, torch.int64)


def normalize_dim(dim: int, rank: int) -> int:
    """``dim`` in ``[0, rank)`` (a scalar counts as rank 1); IndexError when out of range."""
    if not -max(rank, 1) <= dim < max(rank, 1):
        raise IndexError(f"dimension {dim} out of range for rank {rank}")
    return dim % max(rank, 1)


def counts_from_end(index: Expr) -> bool:
    """Whether a position (a slice bound, a ``select`` index) is negative, so that it
    counts from the end of its dimension: decided by sympy (``-s0`` for a size symbol
    ``s0``), or else at the shape environment's example sizes, on which torch's own
    check of the sign guarded the graph (``x[:, -b:]`` under ``dynamic=True``)."""
    index = as_expr(index)
    if index.is_negative is not None:
        return bool(index.is_negative)
    return shape_env_size_hint()(index) < 0


def normalize_slice(size: Expr, start, end, step) -> tuple[Expr, Expr, Expr]:
    """Clamp ``start``/``end`` of a slice of a dimension of ``size`` to ``[0, size]`` as
    torch does. A symbolic bound is clamped where the shape environment's example sizes
    put it outside (``x[:, b:]`` with ``b = -8`` on 5 columns starts at 0): torch's slice
    took the same branch there, and its guards hold it for every size the graph runs with."""
    size = as_expr(size)
    hint = shape_env_size_hint()

    def norm(v, default):
        if v is None:
            return default
        v = as_expr(v)
        if counts_from_end(v):
            v = size + v
        if v.is_number and size.is_number:
            v = sympy.Integer(min(max(int(v), 0), int(size)))
        elif v.is_number and int(v) >= 2 ** 62:
            v = size
        elif v.is_negative or hint(v) < 0:
            v = sympy.Integer(0)
        elif hint(v - size) > 0:
            v = size
        return v

    start_e, end_e = norm(start, sympy.Integer(0)), norm(end, size)
    return start_e, end_e, as_expr(step)
