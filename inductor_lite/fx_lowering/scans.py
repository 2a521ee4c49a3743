"""Lowerings of the aten scans to `Scan` nodes.

====================  =========================================================  ==================
aten op               combine of states ``a`` (lower positions), ``b``            computed in
====================  =========================================================  ==================
``cumsum``            ``a + b``                                                  fp32 (half), else
                                                                                 the result dtype
                                                                                 (int64 for ints)
``cumprod``           ``a * b``                                                  as ``cumsum``
``logcumsumexp``      ``hi + log1p(exp(lo - hi))``, ``a`` where both are one     fp32 (half), else
                      infinity                                                   the input dtype
``cummax cummin``     ``(value, index)``: ``b`` where it is at least (at most)   the input dtype
                      ``a``'s value or NaN, so ties and NaNs keep the later      (fp32 for half,
                      index (as eager)                                           int32 for bool)
====================  =========================================================  ==================

The codegen runs a scan as a persistent kernel, the whole scanned dimension in one
``[XBLOCK, RBLOCK]`` tile, so a scan along a dimension that is not static or longer
than `MAX_SCAN_LENGTH` stays an aten extern call, as does a tensor with no elements.
A scan along a dimension of one element (or of a 0-d tensor) is a pointwise copy.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import sympy
import torch

from ..ir.nodes import Scan, ScanCombine, StorageBox
from ..ir.ops import ops
from .lowerings import NoLowering, cast, const, lazy_origins, normalize_dim, register_lowering

aten = torch.ops.aten

MAX_SCAN_LENGTH = 16384
"""Longest scanned dimension lowered to a `Scan` (one tile per row: registers bound it)."""


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a scan of ``dtype`` values computes in: fp32 for halves, int32 for bool."""
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return torch.int32 if dtype == torch.bool else dtype


def _scan(ctx, x, dim: int, value_fns: Sequence[Callable], dtypes: Sequence[torch.dtype],
          combine_fn: ScanCombine, out_dtypes: Sequence[torch.dtype], hints: Sequence) -> list[StorageBox]:
    """Realized `Scan` results of ``x`` along ``dim`` (one per ``out_dtypes`` entry):
    ``value_fns[k](index)`` gives value ``k`` at an input ``index``, in ``dtypes[k]``.

    Raises:
        NoLowering: a dynamic or too long scanned dimension, or an empty tensor.
    """
    size = list(x.get_size())
    n = sympy.sympify(size[dim])
    if not n.is_number:
        raise NoLowering(f"scan along a dimension of dynamic size {n}")
    if int(n) > MAX_SCAN_LENGTH:
        raise NoLowering(f"scan along a dimension of {n} elements (more than {MAX_SCAN_LENGTH})")
    if any(sympy.sympify(s) == 0 for s in size):
        raise NoLowering("scan of a tensor with no elements")

    def inner_fn(index, rindex):
        full = list(index[:dim]) + list(rindex) + list(index[dim:])
        return tuple(fn(full) for fn in value_fns)

    origins = lazy_origins(x)
    origins[ctx.node.name] = ctx.op_name()
    base = Scan(ranges=size[:dim] + size[dim + 1:], inner_fn=inner_fn, dtype=out_dtypes[0], device=ctx.device,
                origins=origins, scan_ranges=[n], axis=dim, combine_fn=combine_fn, dtypes=tuple(dtypes))
    outputs = []
    for k, (out_dtype, hint) in enumerate(zip(out_dtypes, hints)):
        box = StorageBox(dataclasses.replace(base, output_index=k, dtype=out_dtype))
        box.meta_val = hint
        ctx.graph.realize(box)
        outputs.append(box)
    return outputs


def _single_position(x, dim: int) -> bool:
    size = x.get_size()
    return len(size) == 0 or sympy.sympify(size[dim]) == 1


def _accumulate(ctx, x, dim: int, combine: Callable) -> StorageBox:
    """cumsum/cumprod/logcumsumexp: one value, ``combine(a, b)``, in the result dtype
    (fp32 for halves)."""
    rank = len(x.get_size())
    dim = normalize_dim(dim, rank)
    in_dtype, out_dtype = x.get_dtype(), ctx.out_dtype
    load = x.make_loader()
    if _single_position(x, dim):
        return ctx.pointwise(lambda index: cast(load(index), in_dtype, out_dtype), [x])
    compute = _compute_dtype(out_dtype)
    (result,) = _scan(ctx, x, dim, [lambda index: cast(load(index), in_dtype, compute)], [compute],
                      lambda a, b: (combine(a[0], b[0]),), [out_dtype], [ctx.val])
    return result


@register_lowering(aten.cumsum.default)
def _lower_cumsum(ctx, x, dim, dtype=None):
    return _accumulate(ctx, x, dim, lambda a, b: ops.add(a, b))


@register_lowering(aten.cumprod.default)
def _lower_cumprod(ctx, x, dim, dtype=None):
    return _accumulate(ctx, x, dim, lambda a, b: ops.mul(a, b))


def _log_add_exp(a, b):
    """log(exp(a) + exp(b)) without overflow; where both are the same infinity (their
    difference is NaN), that infinity. NaN propagates."""
    hi, lo = ops.maximum(a, b), ops.minimum(a, b)
    both_infinite = ops.logical_and(ops.eq(lo, hi), ops.isinf(lo))
    return ops.where(both_infinite, a, ops.add(hi, ops.log1p(ops.exp(ops.sub(lo, hi)))))


@register_lowering(aten.logcumsumexp.default)
def _lower_logcumsumexp(ctx, x, dim):
    if not ctx.out_dtype.is_floating_point:
        raise NoLowering(f"logcumsumexp of {ctx.out_dtype}")
    return _accumulate(ctx, x, dim, _log_add_exp)


def _extreme_combine(take: Callable) -> ScanCombine:
    """The combine of cummax/cummin over ``(value, index)``: ``b`` where ``take(b, a)``
    holds or ``b`` is NaN."""

    def combine(a, b):
        (va, ia), (vb, ib) = a, b
        take_b = ops.logical_or(take(vb, va), ops.isnan(vb))
        return ops.where(take_b, vb, va), ops.where(take_b, ib, ia)

    return combine


def _lower_cumulative_extreme(ctx, x, dim, take: Callable):
    values_val, indices_val = ctx.val
    rank = len(x.get_size())
    dim = normalize_dim(dim, rank)
    in_dtype = x.get_dtype()
    load = x.make_loader()
    if _single_position(x, dim):
        values = ctx.pointwise(lambda index: load(index), [x], size=list(x.get_size()), dtype=in_dtype)
        indices = ctx.pointwise(lambda index: const(0, torch.int64), [], size=list(x.get_size()), dtype=torch.int64)
        return [values, indices]
    compute = _compute_dtype(in_dtype)
    return _scan(ctx, x, dim,
                 [lambda index: cast(load(index), in_dtype, compute),
                  lambda index: ops.index_expr(index[dim], torch.int64)],
                 [compute, torch.int64], _extreme_combine(take), [in_dtype, torch.int64], [values_val, indices_val])


@register_lowering(aten.cummax.default)
def _lower_cummax(ctx, x, dim):
    return _lower_cumulative_extreme(ctx, x, dim, lambda a, b: ops.ge(a, b))


@register_lowering(aten.cummin.default)
def _lower_cummin(ctx, x, dim):
    return _lower_cumulative_extreme(ctx, x, dim, lambda a, b: ops.le(a, b))
