"""Lowerings that move data by index arithmetic with masked loads: slice/select
backward and scatter, ``cat``, ``constant_pad_nd``."""

from __future__ import annotations

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv

from ..ir.indexing import Expr, as_expr, known_equal
from ..ir.ops import ops
from .constructors import fill
from .lowerings import const, in_range, int_value, loader, normalize_dim, normalize_slice, register_lowering

aten = torch.ops.aten


def _embed(ctx, base, src, dim: int, start: Expr, end: Expr, step: Expr):
    """``base`` (or zeros) with ``src`` written at positions ``start:end:step`` of ``dim``."""
    size, dtype = ctx.out_size, ctx.out_dtype
    load_src = loader(src, src.get_size(), dtype)
    load_base = loader(base, size, dtype) if base is not None else None

    if start == 0 and step == 1 and known_equal(end, size[dim]):
        return ctx.pointwise(load_src, [src])

    def inner_fn(index):
        i = index[dim]
        cond = in_range(i, start, end)
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
    dim = normalize_dim(dim, len(input_sizes))
    start, end, step = normalize_slice(ctx.out_size[dim], start, end, step)
    return _embed(ctx, None, grad, dim, start, end, step)


@register_lowering(aten.slice_scatter.default)
def _lower_slice_scatter(ctx, x, src, dim=0, start=None, end=None, step=1):
    dim = normalize_dim(dim, len(ctx.out_size))
    start, end, step = normalize_slice(ctx.out_size[dim], start, end, step)
    return _embed(ctx, x, src, dim, start, end, step)


def _select_embed(ctx, base, src, dim, index):
    size, dtype = ctx.out_size, ctx.out_dtype
    dim = normalize_dim(dim, len(size))
    index = as_expr(index)
    if index.is_number and index < 0:
        index = size[dim] + index
    load_src = loader(src, src.get_size(), dtype)
    load_base = loader(base, size, dtype) if base is not None else (lambda idx: const(0, dtype))

    def inner_fn(idx):
        cond = ops.eq(ops.index_expr(idx[dim], torch.int64), int_value(index))
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
    dim = normalize_dim(dim, len(size))
    # torch skips legacy 1-D empty inputs whatever their rank
    inputs = [t for t in tensors if not (len(t.get_size()) == 1 and t.get_size()[0] == 0)]
    inputs = [t for t in inputs if t.get_size()[dim] != 0]
    if not inputs:
        return fill(ctx, 0)
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
                cond = in_range(i, offsets[k], offsets[k + 1])
                result = ops.masked(cond, (lambda k: lambda: piece(k))(k), 0)
                continue
            cond = in_range(i, offsets[k], offsets[k + 1])
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
            c = in_range(index[d], left, left + in_size[d])
            cond = c if cond is None else ops.logical_and(cond, c)
        if cond is None:
            return load(src_index)
        return ops.where(cond, ops.masked(cond, lambda: load(src_index), 0), loader(value, [], dtype)(index))

    return ctx.pointwise(inner_fn, [x])
