"""Lowerings that read at positions held in an index tensor: ``gather``,
``index_select``, ``embedding`` and advanced indexing (``index.Tensor``).

Each is a `Pointwise` whose ``inner_fn`` loads the index value, turns it into an
index symbol with ``ops.indirect_indexing`` and loads the source there. The index is
bounds-checked: an out-of-range index stops the kernel (``ops.check_bounds``:
``dl.device_assert``, an ``AssertionError`` on CPU and a trap on the GPU, as eager
raises or asserts on the device) and never reads outside the source. As in torch, only advanced indexing counts negative indices
from the end; ``gather``, ``index_select`` and ``embedding`` reject them.
``take_along_dim`` reaches ``gather`` through its decomposition, and cross-entropy's
``nll_loss`` decomposition gathers the target class the same way.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..ir.indexing import Expr
from ..ir.nodes import IRNode
from ..ir.ops import ops
from .lowerings import NoLowering, broadcast_index, normalize_dim, register_lowering

aten = torch.ops.aten


def _check_index_dtype(op: str, index: IRNode) -> None:
    if index.get_dtype() not in (torch.int64, torch.int32):
        raise NoLowering(f"{op} with {index.get_dtype()} indices")


@register_lowering(aten.gather.default)
def _lower_gather(ctx, x, dim, index, sparse_grad=False):
    _check_index_dtype("gather", index)
    x_size = x.get_size()
    if not x_size:
        raise NoLowering("gather of a 0-d tensor")
    dim = normalize_dim(dim, len(x_size))
    load_x, load_index = x.make_loader(), index.make_loader()

    def inner_fn(idx):
        src = list(idx)
        src[dim] = ops.indirect_indexing(load_index(idx), x_size[dim], wrap_neg=False)
        ops.check_bounds(src[dim])
        return load_x(src)

    return ctx.pointwise(inner_fn, [x, index])


@register_lowering(aten.index_select.default)
def _lower_index_select(ctx, x, dim, index):
    _check_index_dtype("index_select", index)
    x_size = x.get_size()
    if not x_size:
        raise NoLowering("index_select of a 0-d tensor")
    dim = normalize_dim(dim, len(x_size))
    load_x, load_index = x.make_loader(), index.make_loader()
    index_rank = len(index.get_size())

    def inner_fn(idx):
        src = list(idx)
        src[dim] = ops.indirect_indexing(load_index([idx[dim]] if index_rank else []), x_size[dim], wrap_neg=False)
        ops.check_bounds(src[dim])
        return load_x(src)

    return ctx.pointwise(inner_fn, [x, index])


@register_lowering(aten.embedding.default)
def _lower_embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """``weight[indices]``: one row of the ``[num_embeddings, dim]`` table per index
    (``padding_idx`` and the gradient flags only matter to the backward)."""
    _check_index_dtype("embedding", indices)
    if len(weight.get_size()) != 2:
        raise NoLowering("embedding with a table that is not 2-D")
    num_embeddings = weight.get_size()[0]
    load_weight, load_indices = weight.make_loader(), indices.make_loader()

    def inner_fn(idx):
        row = ops.indirect_indexing(load_indices(idx[:-1]), num_embeddings, wrap_neg=False)
        ops.check_bounds(row)
        return load_weight([row, idx[-1]])

    return ctx.pointwise(inner_fn, [weight, indices])


def _broadcast_sizes(sizes: Sequence[Sequence[Expr]]) -> list[Expr]:
    """numpy broadcasting of ``sizes`` (size-1 dimensions stretch)."""
    rank = max(len(s) for s in sizes)
    out = []
    for d in range(rank):
        dims = [s[d - rank + len(s)] for s in sizes if d - rank + len(s) >= 0]
        out.append(next((n for n in dims if n != 1), dims[0]))
    return out


@register_lowering(aten.index.Tensor, aten._unsafe_index.Tensor)
def _lower_index(ctx, x, indices: Sequence[Optional[IRNode]]):
    """Advanced indexing ``x[i0, :, i2, ...]`` with integer index tensors (``None`` for
    a dimension taken whole). The index tensors broadcast to one shape ``B``; as in
    numpy, ``B`` replaces the indexed dimensions where they are adjacent, and comes
    first otherwise. Bool masks (data-dependent sizes) stay extern.

    ``_unsafe_index`` (what the nearest and bilinear upsample decompositions gather
    with, at positions they computed in range) skips the bounds check, as in
    TorchInductor."""
    check = ctx.node.target is not aten._unsafe_index.Tensor
    x_size = x.get_size()
    dims = [d for d, t in enumerate(indices) if t is not None]
    if not dims or len(indices) > len(x_size):
        raise NoLowering("index without index tensors, or more of them than dimensions")
    for d in dims:
        _check_index_dtype("index", indices[d])
    index_shape = _broadcast_sizes([indices[d].get_size() for d in dims])
    start = dims[0] if dims == list(range(dims[0], dims[-1] + 1)) else 0
    out_size = ctx.out_size
    if len(out_size) != len(x_size) - len(dims) + len(index_shape):
        raise NoLowering("index: unexpected output rank")
    loaders = {d: (indices[d].make_loader(), indices[d].get_size()) for d in dims}
    load_x = x.make_loader()

    def inner_fn(idx):
        position = list(idx[start:start + len(index_shape)])
        kept = iter(list(idx[:start]) + list(idx[start + len(index_shape):]))
        src = []
        for d in range(len(x_size)):
            if d in loaders:
                load, size = loaders[d]
                src.append(ops.indirect_indexing(load(broadcast_index(position, size, index_shape)), x_size[d],
                                                  check=check))
                if check:
                    ops.check_bounds(src[-1])
            else:
                src.append(next(kept))
        return load_x(src)

    return ctx.pointwise(inner_fn, [x] + [indices[d] for d in dims])
