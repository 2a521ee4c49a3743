"""Lowerings that write at positions held in an index tensor: ``index_put`` (and
``_unsafe_index_put``), ``scatter`` (src and value forms, ``reduce="add"``),
``scatter_add``, ``scatter_reduce`` with ``"sum"``, ``index_add`` and
``embedding_dense_backward``. The backwards of ``gather`` (``scatter_add``),
``index_select`` (``index_add``), advanced indexing (``index_put`` with
``accumulate=True``) and ``embedding`` reach these.

As in TorchInductor (``lowering.py``: ``index_put_impl_``, ``scatter_reduce_``), each is
two kernels: the output starts as a copy of ``self`` (a pointwise `ComputedBuffer`, the
*target*), then a `Scatter` over the *source*'s index space writes into it in place
(`ScatterBuffer`): a store, or an atomic add where indices may repeat and every value
counts (``accumulate=True``, ``scatter_add``, ``index_add``, embedding backward).

Atomic adds exist for int32, int64, float32 and float64; fp16/bf16 accumulate in an
fp32 target that a third kernel rounds to the output dtype (the decomposition of
``embedding_dense_backward`` computes in fp32 too); other dtypes stay extern, and so
does every atomic under ``torch.use_deterministic_algorithms`` (atomic order varies),
as in TorchInductor. ``scatter_reduce`` other than ``"sum"``, ``reduce="multiply"``,
bool masks in ``index_put`` (but for one mask and one value: ``x[mask] = v`` is a
pointwise ``where``) and ``scale_grad_by_freq`` stay extern too.

A ``scatter`` of one value a row into a constant tensor (nll_loss's backward builds
its one-hot gradient so) is instead one pointwise ``where`` that fuses into its
consumer (`_one_hot_scatter`).

Bounds: an index outside its dimension stops the scatter kernel (``dl.device_assert``:
an ``AssertionError`` on CPU, a trap on the GPU, where eager raises a device-side
assert) and is never written. Negative indices count from the end for ``index_put``,
as in eager; ``scatter``, ``index_add`` and embeddings reject them, as eager does.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import sympy
import torch

from ..ir.indexing import Expr, known_equal, product
from ..ir.nodes import ComputedBuffer, InputBuffer, IRNode, Pointwise, Scatter, ScatterBuffer, StorageBox, unwrap
from ..ir.ops import ops
from .graph import count_ops
from .indexing_ops import _broadcast_sizes
from .lowerings import (
    NoLowering, broadcast_index, cast, const, lazy_origins, loader, normalize_dim, register_lowering,
)

aten = torch.ops.aten

ATOMIC_ADD_DTYPES = (torch.int32, torch.int64, torch.float32, torch.float64)
"""Dtypes the DSL's block ``dl.atomic_add`` updates."""

_HALF_TYPES = (torch.float16, torch.bfloat16)


def _check_index(op: str, index: IRNode) -> None:
    if index.get_dtype() not in (torch.int64, torch.int32):
        raise NoLowering(f"{op} with {index.get_dtype()} indices")


def _accumulation_dtype(op: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype an atomic-add scatter of a ``dtype`` output accumulates in.

    Raises:
        NoLowering: no atomic add for ``dtype``, or deterministic algorithms are on.
    """
    if torch.are_deterministic_algorithms_enabled():
        raise NoLowering(f"{op}: atomic adds are not deterministic (torch.use_deterministic_algorithms)")
    if dtype in _HALF_TYPES:
        return torch.float32
    if dtype not in ATOMIC_ADD_DTYPES:
        raise NoLowering(f"{op}: no atomic add for {dtype}")
    return dtype


def _initial_copy(ctx, x: IRNode, dtype: torch.dtype) -> Union[ComputedBuffer, InputBuffer]:
    """``x`` converted to ``dtype``, realized: the buffer a scatter updates. Laid out
    as the node's output when the dtype is the output's. A graph input that the graph
    overwrites with the result and that nothing else reads is updated in place
    instead (`_updated_in_place`): no copy."""
    if _updated_in_place(ctx, x, dtype):
        return x
    load_x, src = x.make_loader(), x.get_dtype()
    box = ctx.pointwise(lambda idx: cast(load_x(idx), src, dtype), [x], size=x.get_size(), dtype=dtype)
    if dtype == ctx.out_dtype:
        box.meta_val = ctx.val
    return ctx.graph.realize(box)


def _updated_in_place(ctx, x: IRNode, dtype: torch.dtype) -> bool:
    """Whether the node's ``self``, ``x``, is a graph input that the graph ends by
    overwriting with this node's result (``copy_(x, node)``, an inference graph's
    ``x.index_put_(...)`` or ``cache.index_copy_(...)``) and that no other node reads,
    laid out as the result and of its dtype: then the scatter can write into the
    input itself, as TorchInductor's re-inplacing pass makes it do."""
    node, self_node = ctx.node, ctx.node.args[0]
    if not isinstance(x, InputBuffer) or x.is_constant or dtype != x.get_dtype() \
            or not isinstance(self_node, torch.fx.Node) or self_node.op != "placeholder":
        return False
    others = [user for user in self_node.users if user is not node]
    if len(others) != 1 or others[0].target is not aten.copy_.default or others[0].args[:2] != (self_node, node):
        return False
    return tuple(ctx.val.stride()) == tuple(self_node.meta["val"].stride())


def _scatter(ctx, target: Union[ComputedBuffer, InputBuffer], ranges: Sequence[Expr], inner_fn: Callable,
             output_indexer: Callable, mode: Optional[str], inputs: Sequence) -> ScatterBuffer:
    """Register a `Scatter` of ``inner_fn`` over ``ranges`` into ``target`` (in place)."""
    origins: dict[str, str] = {}
    for x in inputs:
        origins.update(lazy_origins(x))
    origins[ctx.node.name] = ctx.op_name()
    scatter = Scatter(ranges=list(ranges), inner_fn=inner_fn, dtype=target.get_dtype(), device=target.get_device(),
                      origins=origins, output_indexer=output_indexer, mode=mode)
    return ctx.graph.register_buffer(ScatterBuffer(ctx.graph.new_name(), target, scatter))


def _result(ctx, buffer: ScatterBuffer) -> StorageBox:
    """The node's value: ``buffer``, rounded to the output dtype where it accumulated in fp32."""
    box = StorageBox(buffer)
    if buffer.get_dtype() == ctx.out_dtype:
        return box
    load, src, dst = buffer.make_loader(), buffer.get_dtype(), ctx.out_dtype
    return ctx.pointwise(lambda idx: cast(load(idx), src, dst), [box])


def _dim_scatter(ctx, x: IRNode, dim: int, index: IRNode, src, mode: Optional[str],
                 include_self: bool = True) -> StorageBox:
    """``out = x.clone(); out[..., index[i], ...] (=|+=) src[i]`` along ``dim`` for each
    position ``i`` of ``index`` (``scatter``/``scatter_add``/``scatter_reduce``)."""
    op = ctx.op_name()
    _check_index(op, index)
    rank = len(x.get_size())
    if rank == 0 or len(index.get_size()) != rank:
        raise NoLowering(f"{op} of a 0-d tensor, or with an index of another rank")
    dim = normalize_dim(dim, rank)
    dtype = _accumulation_dtype(op, ctx.out_dtype) if mode == "atomic_add" else ctx.out_dtype
    ranges, size, load_index = index.get_size(), x.get_size()[dim], index.make_loader()

    def output_indexer(idx):
        out = list(idx)
        out[dim] = ops.indirect_indexing(load_index(idx), size, wrap_neg=False)
        return out

    target = _initial_copy(ctx, x, dtype)
    if not include_self:  # the positions written start from 0, not from x
        target = _scatter(ctx, target, ranges, lambda idx: const(0, dtype), output_indexer, None, [index])
    value = loader(src, ranges, dtype)
    return _result(ctx, _scatter(ctx, target, ranges, value, output_indexer, mode, [index, src]))


@register_lowering(aten.scatter.src, aten.scatter.value)
def _lower_scatter(ctx, x, dim, index, src):
    one_hot = _one_hot_scatter(ctx, x, dim, index, src)
    return one_hot if one_hot is not None else _dim_scatter(ctx, x, dim, index, src, None)


def _one_hot_scatter(ctx, x, dim, index, src) -> Optional[StorageBox]:
    """``scatter`` of one value a row into a constant tensor (``zeros(...).scatter(1,
    target[:, None], -1)``: nll_loss's backward) as a pointwise ``where(position ==
    index[row], value, constant)``, which fuses into its consumer, or None where the
    pattern does not hold (TorchInductor's ``scatter_upon_const_tensor`` does the same).
    The dense one-hot is never written: for GPT-2's 50257 classes a training step
    wrote and read back 1.6 GB of it. An index outside the dimension stops the kernel,
    as the scatter kernel does."""
    # x: an unrealized pointwise value that reads no buffer (a fill)
    if not isinstance(x, IRNode) or not isinstance(unwrap(x), Pointwise) or count_ops(unwrap(x))[1]:
        return None
    rank = len(x.get_size())
    if (rank == 0 or not isinstance(index, IRNode) or index.get_dtype() not in (torch.int64, torch.int32)
            or len(index.get_size()) != rank):
        return None
    dim = normalize_dim(dim, rank)
    x_size, i_size = x.get_size(), index.get_size()
    if not known_equal(i_size[dim], 1) or not all(
            known_equal(a, b) for d, (a, b) in enumerate(zip(x_size, i_size)) if d != dim):
        return None
    if isinstance(src, IRNode) and (len(src.get_size()) != rank or not all(
            known_equal(a, b) for a, b in zip(src.get_size(), i_size))):
        return None
    out_dtype, size = ctx.out_dtype, x_size[dim]
    load_x, x_dtype, load_index = x.make_loader(), x.get_dtype(), index.make_loader()
    value = loader(src, i_size, out_dtype)

    def inner_fn(idx):
        row = list(idx)
        row[dim] = sympy.Integer(0)
        target = ops.indirect_indexing(load_index(row), size, wrap_neg=False)
        ops.check_bounds(target)
        hit = ops.eq(ops.index_expr(idx[dim], torch.int64), ops.index_expr(target, torch.int64))
        return ops.where(hit, value(row), cast(load_x(idx), x_dtype, out_dtype))

    inputs = [x, index] + ([src] if isinstance(src, IRNode) else [])
    return ctx.pointwise(inner_fn, inputs)


@register_lowering(aten.scatter.reduce, aten.scatter.value_reduce)
def _lower_scatter_reduce_arg(ctx, x, dim, index, src, *, reduce):
    if reduce != "add":
        raise NoLowering(f"scatter with reduce={reduce!r}")
    return _dim_scatter(ctx, x, dim, index, src, "atomic_add")


@register_lowering(aten.scatter_add.default)
def _lower_scatter_add(ctx, x, dim, index, src):
    return _dim_scatter(ctx, x, dim, index, src, "atomic_add")


@register_lowering(aten.scatter_reduce.two)
def _lower_scatter_reduce(ctx, x, dim, index, src, reduce, *, include_self=True):
    if reduce != "sum":
        raise NoLowering(f"scatter_reduce with {reduce!r} (only 'sum' has an atomic)")
    return _dim_scatter(ctx, x, dim, index, src, "atomic_add", include_self)


@register_lowering(aten.index_add.default)
def _lower_index_add(ctx, x, dim, index, source, *, alpha=1):
    """``out = x.clone(); out.select(dim, index[i]) += alpha * source.select(dim, i)``."""
    _check_index("index_add", index)
    rank = len(x.get_size())
    if rank == 0 or len(source.get_size()) != rank or len(index.get_size()) > 1:
        raise NoLowering("index_add of a 0-d tensor, or with a source of another rank")
    dim = normalize_dim(dim, rank)
    dtype = _accumulation_dtype("index_add", ctx.out_dtype)
    ranges, size, load_index = source.get_size(), x.get_size()[dim], index.make_loader()
    one_d = len(index.get_size()) == 1
    load_source = loader(source, ranges, dtype)

    def output_indexer(idx):
        out = list(idx)
        out[dim] = ops.indirect_indexing(load_index([idx[dim]] if one_d else []), size, wrap_neg=False)
        return out

    def value(idx):
        v = load_source(idx)
        return v if alpha == 1 else ops.mul(v, const(alpha, dtype))

    target = _initial_copy(ctx, x, dtype)
    return _result(ctx, _scatter(ctx, target, ranges, value, output_indexer, "atomic_add", [index, source]))


@register_lowering(aten.index_put.default, aten._unsafe_index_put.default)
def _lower_index_put(ctx, x, indices: Sequence[Optional[IRNode]], values, accumulate=False):
    """``out = x.clone(); out[indices] = values`` (``+=`` with ``accumulate``): advanced
    indexing as `indexing_ops` reads it (index tensors broadcast to one shape ``B``,
    which replaces the indexed dimensions where they are adjacent and comes first
    otherwise); ``values`` broadcast to the shape of ``x[indices]``. One bool mask
    with one value (``x[mask] = v``) is a `_masked_fill`."""
    x_size = x.get_size()
    if _is_mask_fill(indices, values):
        return _masked_fill(ctx, x, indices[0], values, accumulate)
    dims = [d for d, t in enumerate(indices) if t is not None]
    if not x_size or not dims or len(indices) > len(x_size):
        raise NoLowering("index_put of a 0-d tensor, without index tensors, or with more of them than dimensions")
    for d in dims:
        _check_index("index_put", indices[d])  # bool masks: data-dependent positions
    dtype = _accumulation_dtype("index_put", ctx.out_dtype) if accumulate else ctx.out_dtype
    index_shape = _broadcast_sizes([indices[d].get_size() for d in dims])
    start = dims[0] if dims == list(range(dims[0], dims[-1] + 1)) else 0
    kept = [x_size[d] for d in range(len(x_size)) if d not in dims]
    ranges = kept[:start] + index_shape + kept[start:]
    loaders = {d: (indices[d].make_loader(), indices[d].get_size()) for d in dims}

    def output_indexer(idx):
        position = list(idx[start:start + len(index_shape)])
        rest = iter(list(idx[:start]) + list(idx[start + len(index_shape):]))
        out = []
        for d in range(len(x_size)):
            if d in loaders:
                load, size = loaders[d]
                out.append(ops.indirect_indexing(load(broadcast_index(position, size, index_shape)), x_size[d]))
            else:
                out.append(next(rest))
        return out

    target = _initial_copy(ctx, x, dtype)
    value = loader(values, ranges, dtype)
    mode = "atomic_add" if accumulate else None
    return _result(ctx, _scatter(ctx, target, ranges, value, output_indexer, mode,
                                 [values] + [indices[d] for d in dims]))


def _is_mask_fill(indices: Sequence[Optional[IRNode]], values) -> bool:
    return (len(indices) == 1 and indices[0] is not None and indices[0].get_dtype() == torch.bool
            and isinstance(values, IRNode) and product(values.get_size()) == 1)


def _masked_fill(ctx, x: IRNode, mask: IRNode, value: IRNode, accumulate: bool) -> StorageBox:
    """``x[mask] = value`` (``+=`` with ``accumulate``) for a bool ``mask`` over the
    leading dimensions of ``x`` and a one-element ``value``: a pointwise
    ``where``, no data-dependent positions (TorchInductor's ``index_put_as_masked_fill``)."""
    rank, dtype = len(mask.get_size()), ctx.out_dtype
    load_x, load_mask = x.make_loader(), mask.make_loader()
    load_value, value_rank = value.make_loader(), len(value.get_size())

    def inner_fn(idx):
        base = cast(load_x(idx), x.get_dtype(), dtype)
        new = cast(load_value([0] * value_rank), value.get_dtype(), dtype)
        if accumulate:
            new = ops.logical_or(base, new) if dtype == torch.bool else ops.add(base, new)
        return ops.where(load_mask(idx[:rank]), new, base)

    return ctx.pointwise(inner_fn, [x, mask, value])


@register_lowering(aten.embedding_dense_backward.default)
def _lower_embedding_dense_backward(ctx, grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    """The ``[num_weights, *grad_output.shape[indices.dim():]]`` gradient of an embedding
    table: each row of ``grad_output`` added to row ``indices[...]``, except where the
    index is ``padding_idx`` (torch._decomp's ``embedding_dense_backward``)."""
    if scale_grad_by_freq:
        raise NoLowering("embedding_dense_backward with scale_grad_by_freq")
    _check_index("embedding_dense_backward", indices)
    dtype = _accumulation_dtype("embedding_dense_backward", ctx.out_dtype)
    ranges, k = grad_output.get_size(), len(indices.get_size())
    load_indices, load_grad = indices.make_loader(), loader(grad_output, grad_output.get_size(), dtype)
    zeros = ctx.graph.realize(ctx.pointwise(lambda idx: const(0, dtype), [], dtype=dtype))

    def output_indexer(idx):
        return [ops.indirect_indexing(load_indices(idx[:k]), num_weights, wrap_neg=False), *idx[k:]]

    def value(idx):
        grad = load_grad(idx)
        if padding_idx < 0:  # eager counts padding_idx=-1 as none (F.embedding normalises others)
            return grad
        padding = ops.eq(ops.to_dtype(load_indices(idx[:k]), torch.int64), const(padding_idx, torch.int64))
        return ops.where(padding, const(0, dtype), grad)

    return _result(ctx, _scatter(ctx, zeros, ranges, value, output_indexer, "atomic_add", [grad_output, indices]))
