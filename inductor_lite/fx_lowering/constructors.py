"""Lowerings of copies, casts and constants: ``_to_copy``, ``clone``, ``copy``,
``full``/``zeros``/``ones`` and their ``_like``/``new_`` forms, ``fill``, ``arange``;
and ``copy_`` into a graph input, the in-place update of an input that AOTAutograd
keeps in an inference graph (`ir.nodes.MutationBuffer`)."""

from __future__ import annotations

import sympy
import torch

from ..fx_passes.common import updated_placeholders
from ..ir.indexing import as_expr
from ..ir.nodes import InputBuffer, IRNode, MutationBuffer, ScatterBuffer, StorageBox, input_aliases
from ..ir.ops import ops
from .lowerings import NoLowering, cast, loader, register_lowering

aten = torch.ops.aten
prims = torch.ops.prims


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


@register_lowering(aten.copy_.default)
def _lower_copy_into_input(ctx, dst, src, non_blocking=False):
    """``dst.copy_(src)`` for a graph input ``dst``: a `MutationBuffer` storing ``src``
    (cast and broadcast to ``dst``) into the input's memory. Nothing is written when
    ``src`` already lives there (a scatter into the input, `indexed_writes`). The
    kernel may read ``dst`` only at the element it writes, and no other input the graph
    updates; a ``src`` that does (``x.copy_(x.flip(0))``, Adam's ``exp_avg`` and its
    parameter, each updated from the other) is computed into a buffer first.

    Raises:
        NoLowering: ``dst`` is not a graph input (a view of one, a constant).
    """
    if not isinstance(dst, InputBuffer) or dst.is_constant:
        raise NoLowering("copy_ into something other than a graph input")
    written = src.data if isinstance(src, StorageBox) and src.is_realized() else None
    while isinstance(written, ScatterBuffer):
        if written.target is dst:
            return dst  # scattered into the input in place: already there
        written = written.target
    value = _identity_cast(ctx, src)
    mutation = MutationBuffer(ctx.graph.new_name(), dst, value.data)
    if not _safe_in_place(mutation, {p.name for p in updated_placeholders(ctx.node.graph)}, ctx.graph.buffers):
        mutation = MutationBuffer(mutation.name, dst, _identity_cast(ctx, ctx.graph.realize(value)).data)
    ctx.graph.register_buffer(mutation)
    return dst


def _safe_in_place(mutation: MutationBuffer, updated: set[str], buffers) -> bool:
    """Whether ``mutation``'s kernel may compute its value as it stores it: it reads its
    input only at the element it stores, under the input's own name (one pass in place
    is safe whatever the programs' order; an extern's alias of the input,
    ``x.view(torch.int32)``, could be read anywhere), and no other input the graph
    updates (each update runs after the readers of its input's old value: two updates
    reading each other's input could not both run last). ``buffers``: the graph's
    buffers so far, the extern results among them that may alias inputs."""
    from ..scheduler.dependencies import extract_read_writes  # the scheduler's access analysis

    accesses = extract_read_writes(mutation)
    (write,) = accesses.writes
    target = mutation.target.name
    unsafe = input_aliases(buffers, updated | {target}) - {target}
    return all(d.index == write.index if d.name == target else d.name not in unsafe for d in accesses.reads)


def fill(ctx, value):
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
    return fill(ctx, _check_fill_value(value))


@register_lowering(aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default)
def _lower_zeros(ctx, *args, **kwargs):
    return fill(ctx, 0)


@register_lowering(aten.empty.memory_format, aten.empty_like.default, aten.new_empty.default)
def _lower_empty(ctx, *args, **kwargs):
    # contents are undefined: zeros, which fuse away where a fill or a kernel overwrites them
    return fill(ctx, 0)


@register_lowering(aten.ones.default, aten.ones_like.default, aten.new_ones.default)
def _lower_ones(ctx, *args, **kwargs):
    return fill(ctx, 1)


@register_lowering(aten.scalar_tensor.default)
def _lower_scalar_tensor(ctx, value, **kwargs):
    return fill(ctx, _check_fill_value(value))


@register_lowering(aten.fill.Scalar, aten.fill.Tensor)
def _lower_fill(ctx, x, value):
    return fill(ctx, _check_fill_value(value))


@register_lowering(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _lower_arange(ctx, *args, **kwargs):
    # the length comes from the node's meta['val']; only start and step matter here
    start, step = (0, 1) if len(args) == 1 else (args[0], args[2] if len(args) > 2 else 1)
    if any(isinstance(v, sympy.Expr) and not v.is_integer for v in (start, step)):
        raise NoLowering("symbolic float arange")
    dtype = ctx.out_dtype
    if dtype == torch.bool:
        raise NoLowering("arange of bool (eager has no kernel for it and raises)")
    # eager takes bools as ints, and converts start and step to an integer dtype first
    # (truncating: arange(0.5, 7.5, 1.5, dtype=int64) is 0, 1, ..., 6)
    start, step = (int(v) if isinstance(v, bool) or (isinstance(v, float) and not dtype.is_floating_point)
                   else v for v in (start, step))

    def inner_fn(index):
        if not dtype.is_floating_point:
            return cast(ops.index_expr(as_expr(start) + index[0] * as_expr(step), torch.int64), torch.int64, dtype)
        compute = torch.float64 if dtype == torch.float64 else torch.float32
        i = cast(ops.index_expr(index[0], torch.int64), torch.int64, compute)
        value = ops.add(loader(start, [], compute)(index), ops.mul(i, loader(step, [], compute)(index)))
        return cast(value, compute, dtype)

    return ctx.pointwise(inner_fn, [])
