"""Lowerings of view ops: index remappings of their input, strided views
(`ReinterpretView`) over realized buffers."""

from __future__ import annotations

from typing import Callable

import sympy
import torch
from torch.utils._sympy.functions import Max as SymMax

from ..ir.indexing import Expr, as_expr, flat_to_vars, vars_to_flat
from ..ir.nodes import (
    Buffer, ComputedBuffer, GenericView, IRNode, Layout, ReinterpretView, StridedInfo, as_strided_view,
    realized_layout, underlying_buffer, unwrap,
)
from .lowerings import LoweringContext, broadcast_index, lazy_origins, normalize_dim, normalize_slice, register_lowering

aten = torch.ops.aten


def make_view(ctx: LoweringContext, x: IRNode, reindex: Callable[[list[Expr]], list[Expr]],
              out_val=None, in_val=None, shares_storage: bool = True) -> IRNode:
    """A view of ``x`` with the node's output size: strided when ``x`` is realized with
    the strides its metadata says (and ``shares_storage``: the output's metadata
    describes the input's memory), an index remapping otherwise."""
    out_val = ctx.val if out_val is None else out_val
    in_val = ctx.arg_val(0) if in_val is None else in_val
    info = None
    if shares_storage and isinstance(out_val, torch.Tensor) and isinstance(in_val, torch.Tensor):
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


def _reshape_is_view(ctx) -> bool:
    """Whether an ``aten.reshape`` returns a view of its input (else its output is a
    fresh contiguous copy, whose strides say nothing about the input's memory)."""
    in_val, out_val = ctx.arg_val(0), ctx.val
    if not (isinstance(in_val, torch.Tensor) and isinstance(out_val, torch.Tensor)):
        return False
    try:
        view = in_val.view(out_val.size())
    except (RuntimeError, ValueError):  # not expressible as a view of the input's strides
        return False
    return view.stride() == out_val.stride() and view.storage_offset() == out_val.storage_offset()


@register_lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _lower_view(ctx, x, size):
    old_size, new_size = x.get_size(), ctx.out_size
    shares_storage = ctx.node.target is not aten.reshape.default or _reshape_is_view(ctx)
    if [s for s in old_size if s != 1] == [s for s in new_size if s != 1]:
        return make_view(ctx, x, _unit_dims_reindex(old_size, new_size), shares_storage=shares_storage)

    return make_view(ctx, x, _reshape_reindex(old_size, new_size), shares_storage=shares_storage)


def _reshape_reindex(old_size, new_size):
    """Reindex of a row-major reshape, group by group: the dimensions split where the
    running products of both sizes meet, and each group maps through its own flat
    index (as TorchInductor's ``View.dynamic_reshape_indexer``). A dimension kept as it
    is maps to itself, so ``[8, 1024, 50257] -> [8192, 50257]`` never divides a column
    by 50257, which the simplifier could not undo where the column's range is wider
    (a padded kernel). Sizes that are not all static integers map through one flat
    index."""
    sizes = [as_expr(s) for s in (*old_size, *new_size)]
    if not all(s.is_Integer and s > 0 for s in sizes):
        return lambda index: flat_to_vars(vars_to_flat(index, new_size), old_size)
    old, new = [int(s) for s in old_size], [int(s) for s in new_size]
    groups = []  # (old dims, new dims) of equal product
    i = j = start_i = start_j = 0
    old_product = new_product = 1
    while i < len(old) or j < len(new):
        if j == len(new) or (i < len(old) and old_product <= new_product):
            old_product *= old[i]
            i += 1
        else:
            new_product *= new[j]
            j += 1
        if old_product == new_product and (i == len(old) or old[i] != 1) and (j == len(new) or new[j] != 1):
            groups.append((range(start_i, i), range(start_j, j)))
            start_i, start_j = i, j

    def reindex(index):
        out = []
        for old_dims, new_dims in groups:
            flat = vars_to_flat([index[d] for d in new_dims], [new[d] for d in new_dims])
            out += flat_to_vars(flat, [old[d] for d in old_dims])
        return out

    return reindex


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
    dim = normalize_dim(dim, len(x.get_size()) + 1)
    return make_view(ctx, x, lambda index: index[:dim] + index[dim + 1:])


@register_lowering(aten.permute.default)
def _lower_permute(ctx, x, dims):
    rank = len(x.get_size())
    dims = [normalize_dim(d, rank) for d in dims]
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
    d0, d1 = normalize_dim(dim0, rank), normalize_dim(dim1, rank)
    if rank == 0 or d0 == d1:  # a 0-d tensor's dims 0 and -1 are its one implicit dim
        return x

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
    dim = normalize_dim(dim, len(x.get_size()))
    start, _, step = normalize_slice(x.get_size()[dim], start, end, step)
    return make_view(ctx, x, _slice_reindex(dim, start, step))


def _select_reindex(dim, index_value):
    return lambda index: list(index[:dim]) + [index_value] + list(index[dim:])


@register_lowering(aten.select.int)
def _lower_select(ctx, x, dim, index):
    dim = normalize_dim(dim, len(x.get_size()))
    index = as_expr(index)
    if index.is_number and index < 0:
        index = x.get_size()[dim] + index
    return make_view(ctx, x, _select_reindex(dim, index))


@register_lowering(aten.split.Tensor, aten.split_with_sizes.default)
def _lower_split(ctx, x, split, dim=0):
    dim = normalize_dim(dim, len(x.get_size()))
    in_val = ctx.arg_val(0)
    views, start = [], sympy.Integer(0)
    for piece in ctx.val:
        views.append(make_view(ctx, x, _slice_reindex(dim, start, 1), out_val=piece, in_val=in_val))
        start = start + as_expr(piece.size(dim))
    return views


@register_lowering(aten.unbind.int)
def _lower_unbind(ctx, x, dim=0):
    dim = normalize_dim(dim, len(x.get_size()))
    in_val = ctx.arg_val(0)
    return [make_view(ctx, x, _select_reindex(dim, sympy.Integer(k)), out_val=piece, in_val=in_val)
            for k, piece in enumerate(ctx.val)]


def _drop_empty_guard(expr: Expr) -> Expr:
    """``expr`` with each ``Max(1, e)`` replaced by ``e``: torch takes contiguous strides
    over ``max(1, size)`` so that an empty tensor still has positive strides; when no
    size is 0 the two agree, and when one is, no element is addressed."""
    def is_guard(e):
        return getattr(e, "func", None) in (sympy.Max, SymMax) and len(e.args) == 2 and sympy.S.One in e.args

    return as_expr(expr).replace(is_guard, lambda e: e.args[0] if e.args[1] == 1 else e.args[1])


def _same_storage_layout(info: StridedInfo, layout) -> bool:
    """Whether every element of ``info`` (eager's value) and ``layout`` (ours) sits at the
    same storage offset: equal sizes, and equal strides except along size-1 dims (only
    index 0 exists there) and up to `_drop_empty_guard`."""
    if list(info.size) != list(layout.size):
        return False
    return all(size == 1 or sympy.expand(_drop_empty_guard(a) - _drop_empty_guard(b)) == 0
               for size, a, b in zip(info.size, info.stride, layout.stride))


@register_lowering(aten.as_strided.default)
def _lower_as_strided(ctx, x, size, stride, storage_offset=None):
    """Only over memory laid out as in eager: graph inputs, extern outputs, or a buffer
    that is its whole storage (as_strided addresses the storage, not the view)."""
    in_val = ctx.arg_val(0)
    x = ctx.realize(x)
    buffer = underlying_buffer(x)
    layout = realized_layout(x)
    if not _same_storage_layout(StridedInfo.of(in_val), layout):
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
