"""Lowerings that move data by index arithmetic: slice/select backward and scatter,
``cat`` and ``stack``, constant, reflection and replication padding, ``flip``,
``roll``, ``repeat`` (``tile`` decomposes to it), and the ``*_copy`` variants of the
view ops. Each is a `Pointwise` loading its input at a remapped index (masked where
only some outputs read a given input)."""

from __future__ import annotations

from typing import Callable, Sequence

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from ..ir.indexing import Expr, as_expr, flat_to_vars, known_equal, product, vars_to_flat
from ..ir.ops import ops
from .constructors import fill
from .lowerings import (
    LOWERINGS, NoLowering, const, counts_from_end, in_range, int_value, loader, normalize_dim, normalize_slice,
    register_lowering,
)

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
    _check_sign_known("slice_scatter", start, end)
    dim = normalize_dim(dim, len(ctx.out_size))
    start, end, step = normalize_slice(ctx.out_size[dim], start, end, step)
    return _embed(ctx, x, src, dim, start, end, step)


def _check_sign_known(op: str, *positions) -> None:
    """Positions given as symbols whose sign sympy cannot tell (an int argument under
    ``dynamic=True``, ``x.select_scatter(src, 0, a)``) keep the op an extern call: unlike
    a slice or select view, whose meta function guards the sign, nothing fixes it for
    every call the graph serves, so the example value's sign cannot decide whether the
    position counts from the end.

    Raises:
        NoLowering: such a position.
    """
    for v in positions:
        if v is not None and not as_expr(v).is_number and as_expr(v).is_nonnegative is not True:
            raise NoLowering(f"{op} at a symbolic position of unknown sign ({v})")


def _select_embed(ctx, base, src, dim, index):
    _check_sign_known(ctx.op_name(), index)
    size, dtype = ctx.out_size, ctx.out_dtype
    dim = normalize_dim(dim, len(size))
    index = as_expr(index)
    if counts_from_end(index):
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


@register_lowering(aten.stack.default)
def _lower_stack(ctx, tensors, dim=0):
    size, dtype = ctx.out_size, ctx.out_dtype
    dim = normalize_dim(dim, len(size))
    loaders = [loader(t, t.get_size(), dtype) for t in tensors]

    def inner_fn(index):
        rest = list(index[:dim]) + list(index[dim + 1:])
        k_value = ops.index_expr(index[dim], torch.int64)
        result = None
        for k in reversed(range(len(loaders))):
            cond = ops.eq(k_value, const(k, torch.int64))
            value = ops.masked(cond, (lambda k: lambda: loaders[k](rest))(k), 0)
            result = value if result is None else ops.where(cond, value, result)
        return result

    return ctx.pointwise(inner_fn, list(tensors))


def _remap(ctx, x, reindex: Callable[[list[Expr]], list[Expr]]):
    """``out[index] = x[reindex(index)]``, a copy."""
    load = x.make_loader()
    return ctx.pointwise(lambda index: load(reindex(list(index))), [x])


def _reflect(j: Expr, n: Expr) -> Expr:
    """Position ``j`` (``-n < j < 2n - 1``) reflected into ``[0, n)`` without repeating
    the edge, as ``reflection_pad`` does: ``(n-1) - |(n-1) - |j||``."""
    a = sympy.Max(j, -j)
    return (n - 1) - sympy.Max((n - 1) - a, a - (n - 1))


def _replicate(j: Expr, n: Expr) -> Expr:
    """Position ``j`` clamped into ``[0, n)``, as ``replication_pad`` does."""
    return sympy.Min(sympy.Max(j, 0), n - 1)


def _pad_lowering(rank: int, edge: Callable[[Expr, Expr], Expr]):
    """``reflection/replication_pad{rank}d``: ``padding`` is (left, right) per padded
    dimension, the last dimension first, as in ``F.pad``."""

    def lowering(ctx, x, padding):
        if len(padding) != 2 * rank:
            raise ValueError(f"{ctx.op_name()}: padding {list(padding)} must have {2 * rank} entries")
        in_size = x.get_size()
        lefts = {len(in_size) - 1 - k: as_expr(padding[2 * k]) for k in range(rank)}

        def reindex(index):
            return [edge(i - lefts[d], in_size[d]) if d in lefts else i for d, i in enumerate(index)]

        return _remap(ctx, x, reindex)

    return lowering


for _rank in (1, 2, 3):
    register_lowering(getattr(aten, f"reflection_pad{_rank}d").default)(_pad_lowering(_rank, _reflect))
    register_lowering(getattr(aten, f"replication_pad{_rank}d").default)(_pad_lowering(_rank, _replicate))


@register_lowering(aten.flip.default)
def _lower_flip(ctx, x, dims):
    size = x.get_size()
    flipped = {normalize_dim(d, len(size)) for d in dims}
    return _remap(ctx, x, lambda index: [size[d] - 1 - i if d in flipped else i for d, i in enumerate(index)])


def _rolled(i: Expr, shift, n: Expr) -> Expr:
    """The source position of output position ``i`` of a dimension of ``n`` rolled by ``shift``."""
    n = as_expr(n)
    if n.is_number:
        return ModularIndexing(i + (int(n) - int(shift) % int(n)), 1, n)
    # A symbolic n: index simplification would drop the ``+ n`` of ``(i + n - s) mod n``
    # (a multiple of n) and leave a negative dividend, so wrap once with values instead.
    source = ops.index_expr(i + n - sympy.Mod(int(shift), n), torch.int64)
    size = ops.index_expr(n, torch.int64)
    source = ops.where(ops.ge(source, size), ops.sub(source, size), source)
    return ops.indirect_indexing(source, n, check=False, wrap_neg=False)


@register_lowering(aten.roll.default)
def _lower_roll(ctx, x, shifts, dims=()):
    # checked here, not in the index function: that runs later, inside a kernel's body
    if any(isinstance(s, sympy.Expr) and not s.is_number for s in shifts):
        raise NoLowering("roll by a symbolic shift")
    size = x.get_size()
    if not dims:  # roll the flattened tensor
        if len(shifts) != 1:
            raise ValueError(f"roll: {len(shifts)} shifts need as many dims")
        numel = product(size)
        return _remap(ctx, x, lambda index: flat_to_vars(_rolled(vars_to_flat(index, size), shifts[0], numel), size))
    if len(shifts) != len(dims):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    by_dim = {normalize_dim(d, len(size)): s for d, s in zip(dims, shifts)}
    return _remap(ctx, x, lambda index: [_rolled(i, by_dim[d], size[d]) if d in by_dim else i
                                          for d, i in enumerate(index)])


@register_lowering(aten.repeat.default)
def _lower_repeat(ctx, x, repeats: Sequence):
    in_size = x.get_size()
    offset = len(repeats) - len(in_size)
    if offset < 0:
        raise ValueError(f"repeat: {len(repeats)} repeats for a {len(in_size)}-d tensor")

    def reindex(index):
        src = []
        for d, n in enumerate(in_size):
            i = index[offset + d]
            src.append(sympy.Integer(0) if n == 1 else i if repeats[offset + d] == 1 else ModularIndexing(i, 1, n))
        return src

    return _remap(ctx, x, reindex)


class _CopyContext:
    """A ``*_copy`` node's context as its view op's lowering sees it: without the
    input's metadata, so the view stays an index remapping (the node's own value is a
    contiguous copy, whose strides say nothing about the view's)."""

    def __init__(self, ctx):
        self._ctx = ctx

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def arg_val(self, i: int):
        return None


_VIEW_OF_COPY = {
    aten.alias_copy.default: aten.alias.default,
    aten.detach_copy.default: aten.detach.default,
    aten.expand_copy.default: aten.expand.default,
    aten.permute_copy.default: aten.permute.default,
    aten.select_copy.int: aten.select.int,
    aten.slice_copy.Tensor: aten.slice.Tensor,
    aten.split_copy.Tensor: aten.split.Tensor,
    aten.split_with_sizes_copy.default: aten.split_with_sizes.default,
    aten.squeeze_copy.default: aten.squeeze.default,
    aten.squeeze_copy.dim: aten.squeeze.dim,
    aten.squeeze_copy.dims: aten.squeeze.dims,
    aten.t_copy.default: aten.t.default,
    aten.transpose_copy.int: aten.transpose.int,
    aten.unbind_copy.int: aten.unbind.int,
    aten.unsqueeze_copy.default: aten.unsqueeze.default,
    aten.view_copy.default: aten.view.default,
    aten._reshape_copy.default: aten.reshape.default,
}


def _copy_of(ctx, view):
    return ctx.pointwise(view.make_loader(), [view], size=view.get_size(), dtype=view.get_dtype())


@register_lowering(*_VIEW_OF_COPY)
def _lower_view_copy(ctx, *args, **kwargs):
    """The view op's lowering, then a copy of the view (one per output of split/unbind)."""
    view = LOWERINGS[_VIEW_OF_COPY[ctx.node.target]](_CopyContext(ctx), *args, **kwargs)
    if isinstance(view, (list, tuple)):
        return [_copy_of(ctx, v) for v in view]
    return _copy_of(ctx, view)


@register_lowering(aten.narrow_copy.default)
def _lower_narrow_copy(ctx, x, dim, start, length):
    view = LOWERINGS[aten.slice.Tensor](_CopyContext(ctx), x, dim, start, as_expr(start) + as_expr(length))
    return _copy_of(ctx, view)
