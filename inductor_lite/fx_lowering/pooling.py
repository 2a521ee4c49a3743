"""Lowerings of 2-D pooling over the last two dimensions of ``[N, C, H, W]`` or
``[C, H, W]`` tensors: ``max_pool2d_with_indices`` and its backward, ``avg_pool2d``
and its backward, ``_adaptive_avg_pool2d`` and its backward.

Each is one `Pointwise` per output whose ``inner_fn`` unrolls the pooling window as
loads at index expressions (no indirect indexing): a forward reads the window of
input elements under one output element; a backward is written as a gather, reading
at each input element the few output elements whose windows cover it (so no atomics,
and results are deterministic). Loads that can fall outside the input (padding,
``ceil_mode``, adaptive windows shorter than the unrolled bound) are masked: -inf for
max, 0 for sums. fp16/bf16 compute in fp32; indices are int64 positions ``h * W + w``
within a plane, as in eager. The backwards follow eager's CPU and NCHW kernels, also
where eager's CUDA channels_last ``avg_pool2d`` backward differs: before
pytorch/pytorch#188345 that kernel ignores the padding (a wrong gradient, #188344).

Fallback rule (TorchInductor's, ``torch/_inductor/lowering.py``): a window of more than
`MAX_UNROLLED_WINDOW` elements, counted as what one output element unrolls (for a
backward, the output elements that can cover one input element), stays an aten
extern call. So do dilated max-pool backward, non-float average pooling, adaptive
pooling over symbolic spatial sizes, and anything but 2 spatial dimensions.

Resampling needs no lowering here: ``upsample_nearest2d`` and ``upsample_bilinear2d``
(and their ``.vec`` overloads) decompose inside AOTAutograd (torch's
CompositeImplicitAutograd decompositions, ``torch/_decomp/decompositions.py``) into
``aten._unsafe_index`` gathers at computed positions and pointwise interpolation, which
`indexing_ops` lowers and the scheduler fuses into one kernel; their backward is an
accumulating ``_unsafe_index_put``, which `indexed_writes` lowers with atomic adds.
"""

from __future__ import annotations

import itertools
from typing import Callable, Optional, Sequence

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv

from ..ir.indexing import Expr, as_expr
from ..ir.nodes import Reduction, StorageBox
from ..ir.ops import ops
from .lowerings import NoLowering, cast, const, lazy_origins, loader, register_lowering

aten = torch.ops.aten

MAX_UNROLLED_WINDOW = 25
"""Largest window (elements one output element reads) unrolled into a kernel; larger
ones are extern calls, as in TorchInductor."""


def _pair(value, name: str, default: Optional[Sequence[int]] = None) -> list[int]:
    """A pooling parameter as ``[h, w]`` ints (one int means both).

    Raises:
        NoLowering: a symbolic value.
        ValueError: a list of a length other than 1 or 2.
    """
    if default is not None and (value is None or (isinstance(value, (list, tuple)) and len(value) == 0)):
        value = default
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(values) == 1:
        values = values * 2
    if len(values) != 2:
        raise ValueError(f"pooling: {name} {list(values)} must have 1 or 2 entries")
    out = []
    for v in values:
        v = as_expr(v)
        if not v.is_number:
            raise NoLowering(f"pooling with a symbolic {name}")
        out.append(int(v))
    return out


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _check_input(x, op: str) -> None:
    if len(x.get_size()) not in (3, 4):
        raise NoLowering(f"{op} of a {len(x.get_size())}-d tensor")


def _inside(i: Expr, n: Expr):
    """bool value ``0 <= i < n``."""
    value = ops.index_expr(i, torch.int64)
    return ops.logical_and(ops.ge(value, const(0, torch.int64)), ops.lt(value, ops.index_expr(as_expr(n), torch.int64)))


def _all(conds: list):
    result = conds[0]
    for c in conds[1:]:
        result = ops.logical_and(result, c)
    return result


def _window_loader(x, dtype: torch.dtype, other, checks: Sequence[bool]) -> Callable:
    """``(prefix, h, w) -> x[*prefix, h, w]`` as ``dtype``, or ``other`` where a position
    is outside the input along a dimension whose flag in ``checks`` is set."""
    load = loader(x, x.get_size(), dtype)
    sizes = x.get_size()[-2:]

    def load_at(prefix, h, w):
        conds = [_inside(i, n) for i, n, check in zip((h, w), sizes, checks) if check]
        if not conds:
            return load([*prefix, h, w])
        return ops.masked(_all(conds), lambda: load([*prefix, h, w]), other)

    return load_at


def _covering_outputs(kernel: int, stride: int) -> int:
    """Most output positions along one dimension whose windows (``kernel`` wide,
    ``stride`` apart) cover one input position."""
    return -(-kernel // stride)


def _first_covering(i: Expr, kernel: int, stride: int, padding: int) -> Expr:
    """First output position whose window covers input position ``i``:
    ``max(ceil((i + padding - kernel + 1) / stride), 0)``, written with a non-negative
    numerator (the kernels' ``//`` truncates)."""
    shift = -(-max(kernel - 1 - padding, 0) // stride)  # brings the numerator to >= 0
    return sympy.Max(FloorDiv(i + padding - kernel + stride * (shift + 1), stride) - shift, 0)


def _end_covering(i: Expr, stride: int, padding: int, out: Expr) -> Expr:
    """One past the last output position whose window covers input position ``i``."""
    return sympy.Min(FloorDiv(i + padding, stride) + 1, out)


def _lt(a: Expr, b: Expr):
    return ops.lt(ops.index_expr(a, torch.int64), ops.index_expr(as_expr(b), torch.int64))


# ---------------------------------------------------------------------------- max pooling


@register_lowering(aten.max_pool2d_with_indices.default)
def _lower_max_pool2d_with_indices(ctx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """Values and int64 indices of the max over each window, NaN winning and the first
    maximum kept on ties, as eager. Positions outside the input read -inf and are never
    chosen: the index starts at the window's first position inside the input."""
    _check_input(x, "max_pool2d")
    kernel = _pair(kernel_size, "kernel_size")
    strides = _pair(stride, "stride", default=kernel)
    pads = _pair(padding, "padding")
    dilations = _pair(dilation, "dilation")
    if kernel[0] * kernel[1] > MAX_UNROLLED_WINDOW:
        raise NoLowering(f"max_pool2d window {kernel} has more than {MAX_UNROLLED_WINDOW} elements")
    dtype = x.get_dtype()
    if dtype == torch.bool:
        raise NoLowering("max_pool2d of bool")
    compute = _compute_dtype(dtype)
    lowest = float("-inf") if compute.is_floating_point else torch.iinfo(compute).min
    checks = [p > 0 or ceil_mode for p in pads]
    load_at = _window_loader(x, compute, lowest, checks)
    width = x.get_size()[-1]
    out_size = [as_expr(s) for s in ctx.val[0].size()]

    def first_inside(start: Expr, d: int) -> Expr:
        if not checks[d]:
            return start
        if dilations[d] == 1:
            return sympy.Max(start, 0)
        step = dilations[d]
        return start + step * FloorDiv(sympy.Max(-start, 0) + step - 1, step)

    def window_max(index):
        *prefix, oh, ow = index
        h0, w0 = oh * strides[0] - pads[0], ow * strides[1] - pads[1]
        positions = [(h0 + i * dilations[0], w0 + j * dilations[1])
                     for i, j in itertools.product(range(kernel[0]), range(kernel[1]))]
        if any(checks):
            best = const(lowest, compute)
            best_index = ops.index_expr(first_inside(h0, 0) * width + first_inside(w0, 1), torch.int64)
        else:  # the window's first element is inside the input: start from it
            (h, w), positions = positions[0], positions[1:]
            best, best_index = load_at(prefix, h, w), ops.index_expr(h * width + w, torch.int64)
        for h, w in positions:
            value = load_at(prefix, h, w)
            take = ops.gt(value, best)
            if compute.is_floating_point:
                take = ops.logical_or(take, ops.isnan(value))
            best = ops.where(take, value, best)
            best_index = ops.where(take, ops.index_expr(h * width + w, torch.int64), best_index)
        return best, best_index

    values = ctx.pointwise(lambda index: cast(window_max(index)[0], compute, dtype), [x], size=out_size, dtype=dtype)
    indices = ctx.pointwise(lambda index: window_max(index)[1], [x], size=out_size, dtype=torch.int64)
    return [values, indices]


@register_lowering(aten.max_pool2d_with_indices_backward.default)
def _lower_max_pool2d_with_indices_backward(ctx, grad, x, kernel_size, stride, padding, dilation, ceil_mode,
                                            indices):
    """``grad_input[h, w]``: the sum of ``grad[oh, ow]`` over the output positions whose
    window covers ``(h, w)`` and whose index names it."""
    _check_input(x, "max_pool2d_backward")
    kernel = _pair(kernel_size, "kernel_size")
    strides = _pair(stride, "stride", default=kernel)
    pads = _pair(padding, "padding")
    if _pair(dilation, "dilation") != [1, 1]:
        raise NoLowering("max_pool2d backward with dilation")
    return _pool_backward(ctx, grad, x, kernel, strides, pads, "max_pool2d_backward",
                          _max_contribution(grad, indices, x.get_size()[-1]))


def _max_contribution(grad, indices, width: Expr):
    load_grad, load_indices = grad.make_loader(), indices.make_loader()
    grad_dtype = grad.get_dtype()
    compute = _compute_dtype(grad_dtype)

    def contribution(prefix, h, w, oh, ow):
        chosen = ops.eq(load_indices([*prefix, oh, ow]), ops.index_expr(h * width + w, torch.int64))
        return ops.where(chosen, cast(load_grad([*prefix, oh, ow]), grad_dtype, compute), const(0, compute))

    return contribution


def _pool_backward(ctx, grad, x, kernel: list[int], strides: list[int], pads: list[int], op: str,
                   contribution: Callable):
    """The gather form of a pooling backward: ``grad_input[h, w]`` sums
    ``contribution(prefix, h, w, oh, ow)`` over the output positions ``(oh, ow)`` whose
    window covers ``(h, w)``.

    Raises:
        NoLowering: more than `MAX_UNROLLED_WINDOW` output positions can cover one input.
    """
    covering = [_covering_outputs(k, s) for k, s in zip(kernel, strides)]
    out_sizes = grad.get_size()[-2:]

    def bounds(d: int, i: Expr) -> tuple[Expr, Expr]:
        return (_first_covering(i, kernel[d], strides[d], pads[d]),
                _end_covering(i, strides[d], pads[d], out_sizes[d]))

    # even the first candidate may cover nothing (stride > kernel, or the last rows a
    # floor-mode pooling drops), so every load is masked
    return _gather(ctx, [grad, x], op, covering, [0, 0], bounds, contribution)


def _gather(ctx, inputs, op: str, covering: list[int], always: list[int],
            bounds: Callable[[int, Expr], tuple[Expr, Expr]], contribution: Callable):
    """``out[*prefix, h, w]``: the sum of ``contribution(prefix, h, w, oh, ow)`` over
    ``oh`` in ``[start, end)`` of ``bounds(0, h)`` and ``ow`` likewise of
    ``bounds(1, w)``, unrolled over ``covering[d]`` candidates a dimension (the first
    ``always[d]`` of them known to be in range, so unmasked)."""
    if covering[0] * covering[1] > MAX_UNROLLED_WINDOW:
        raise NoLowering(f"{op}: {covering[0] * covering[1]} output positions can cover an input position "
                         f"(more than {MAX_UNROLLED_WINDOW})")
    dtype = ctx.out_dtype
    compute = _compute_dtype(dtype)

    def inner_fn(index):
        *prefix, h, w = index
        (h_start, h_end), (w_start, w_end) = bounds(0, h), bounds(1, w)
        total = None
        for a, b in itertools.product(range(covering[0]), range(covering[1])):
            oh, ow = h_start + a, w_start + b
            conds = ([_lt(oh, h_end)] if a >= always[0] else []) + ([_lt(ow, w_end)] if b >= always[1] else [])
            if conds:
                part = ops.masked(_all(conds), lambda oh=oh, ow=ow: contribution(prefix, h, w, oh, ow), 0.0)
            else:
                part = contribution(prefix, h, w, oh, ow)
            total = part if total is None else ops.add(total, part)
        return cast(total, compute, dtype)

    return ctx.pointwise(inner_fn, inputs)


# ---------------------------------------------------------------------------- average pooling


def _check_float(x, op: str) -> None:
    if not x.get_dtype().is_floating_point:
        raise NoLowering(f"{op} of {x.get_dtype()}")


def _avg_divisor(out_index: Sequence[Expr], kernel, strides, pads, sizes, ceil_mode: bool,
                 count_include_pad: bool, divisor_override) -> Expr:
    """What eager's ``avg_pool2d`` divides the window sum at output ``out_index`` by:
    the window clipped to the padded input (``count_include_pad``) or to the input."""
    if divisor_override:
        return as_expr(int(divisor_override))
    if not any(pads) and not ceil_mode:  # every window lies inside the input
        return as_expr(kernel[0] * kernel[1])
    factor = sympy.Integer(1)
    for o, k, s, p, n in zip(out_index, kernel, strides, pads, sizes):
        start = o * s - p
        end = sympy.Min(start + k, n + p)
        if not count_include_pad:
            start, end = sympy.Max(start, 0), sympy.Min(end, n)
        factor = factor * (end - start)
    return factor


def _divide(value, divisor: Expr, dtype: torch.dtype):
    """``value / divisor`` (an index expression) in ``dtype``."""
    if divisor.is_number:
        return ops.truediv(value, const(float(divisor), dtype))
    return ops.truediv(value, ops.to_dtype(ops.index_expr(divisor, torch.int64), dtype))


def _avg_params(x, kernel_size, stride, padding, op: str):
    _check_input(x, op)
    _check_float(x, op)
    kernel = _pair(kernel_size, "kernel_size")
    return kernel, _pair(stride, "stride", default=kernel), _pair(padding, "padding")


@register_lowering(aten.avg_pool2d.default)
def _lower_avg_pool2d(ctx, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                      divisor_override=None):
    kernel, strides, pads = _avg_params(x, kernel_size, stride, padding, "avg_pool2d")
    return _avg_pool(ctx, x, kernel, strides, pads, ceil_mode, count_include_pad, divisor_override)


def _avg_pool(ctx, x, kernel: list[int], strides: list[int], pads: list[int], ceil_mode: bool,
              count_include_pad: bool, divisor_override):
    """The window sum (positions outside the input read 0) over `_avg_divisor`.

    Windows of up to `MAX_UNROLLED_WINDOW` elements are unrolled in a `Pointwise`;
    larger windows that do not overlap (``stride == kernel``, e.g. a global pooling)
    are a `Reduction` over the window followed by the division (fused into its
    kernel); larger overlapping windows stay extern, as in TorchInductor.
    """
    dtype = x.get_dtype()
    compute = _compute_dtype(dtype)
    sizes = x.get_size()[-2:]
    load_at = _window_loader(x, compute, 0.0, [p > 0 or ceil_mode for p in pads])

    def window_start(index):
        *prefix, oh, ow = index
        return prefix, oh * strides[0] - pads[0], ow * strides[1] - pads[1]

    def divide(total, index):
        divisor = _avg_divisor(index[-2:], kernel, strides, pads, sizes, ceil_mode, count_include_pad,
                               divisor_override)
        return cast(_divide(total, divisor, compute), compute, dtype)

    if kernel[0] * kernel[1] <= MAX_UNROLLED_WINDOW:
        def inner_fn(index):
            prefix, h0, w0 = window_start(index)
            total = None
            for i, j in itertools.product(range(kernel[0]), range(kernel[1])):
                value = load_at(prefix, h0 + i, w0 + j)
                total = value if total is None else ops.add(total, value)
            return divide(total, index)

        return ctx.pointwise(inner_fn, [x])
    if kernel != strides:
        raise NoLowering(f"avg_pool2d: overlapping windows {kernel} (stride {strides}) of more than "
                         f"{MAX_UNROLLED_WINDOW} elements")

    def window_value(index, rindex):
        prefix, h0, w0 = window_start(index)
        return load_at(prefix, h0 + rindex[0], w0 + rindex[1])

    origins = lazy_origins(x)
    origins[ctx.node.name] = ctx.op_name()
    total = StorageBox(Reduction(ranges=ctx.out_size, inner_fn=window_value, dtype=compute, device=ctx.device,
                                 origins=origins, reduction_ranges=[as_expr(k) for k in kernel],
                                 reduction_type="sum", src_dtype=compute))
    ctx.graph.realize(total)
    load_total = total.make_loader()
    return ctx.pointwise(lambda index: divide(load_total(index), index), [total])


@register_lowering(aten.avg_pool2d_backward.default)
def _lower_avg_pool2d_backward(ctx, grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                               divisor_override=None):
    """``grad_input[h, w]``: the sum of ``grad[oh, ow] / divisor(oh, ow)`` over the
    windows covering ``(h, w)``."""
    kernel, strides, pads = _avg_params(x, kernel_size, stride, padding, "avg_pool2d_backward")
    sizes = x.get_size()[-2:]
    load_grad, grad_dtype = grad.make_loader(), grad.get_dtype()
    compute = _compute_dtype(grad_dtype)

    def contribution(prefix, h, w, oh, ow):
        divisor = _avg_divisor((oh, ow), kernel, strides, pads, sizes, ceil_mode, count_include_pad,
                               divisor_override)
        return _divide(cast(load_grad([*prefix, oh, ow]), grad_dtype, compute), divisor, compute)

    return _pool_backward(ctx, grad, x, kernel, strides, pads, "avg_pool2d_backward", contribution)


# ---------------------------------------------------------------------------- adaptive average pooling


def _static_sizes(sizes: Sequence[Expr], op: str) -> list[int]:
    if not all(as_expr(n).is_number for n in sizes):
        raise NoLowering(f"{op} over symbolic spatial sizes")
    return [int(n) for n in sizes]


def _adaptive_start(o: Expr, in_size: int, out_size: int) -> Expr:
    """First input position of adaptive window ``o``: ``floor(o * in / out)``."""
    return FloorDiv(o * in_size, out_size)


def _adaptive_end(o: Expr, in_size: int, out_size: int) -> Expr:
    """One past the last input position of adaptive window ``o``: ``ceil((o + 1) * in / out)``."""
    return FloorDiv((o + 1) * in_size + out_size - 1, out_size)


def _span_range(starts: Sequence[int], ends: Sequence[int]) -> tuple[int, int]:
    """(shortest, longest) of the spans ``[start, end)``."""
    lengths = [e - s for s, e in zip(starts, ends)]
    return min(lengths), max(lengths)


def _adaptive_window_lengths(in_size: int, out_size: int) -> tuple[int, int]:
    """(shortest, longest) adaptive window along one dimension."""
    return _span_range([(o * in_size) // out_size for o in range(out_size)],
                       [-(-(o + 1) * in_size // out_size) for o in range(out_size)])


def _adaptive_divisor(oh: Expr, ow: Expr, in_sizes, out_sizes) -> Expr:
    return ((_adaptive_end(oh, in_sizes[0], out_sizes[0]) - _adaptive_start(oh, in_sizes[0], out_sizes[0]))
            * (_adaptive_end(ow, in_sizes[1], out_sizes[1]) - _adaptive_start(ow, in_sizes[1], out_sizes[1])))


@register_lowering(aten._adaptive_avg_pool2d.default)
def _lower_adaptive_avg_pool2d(ctx, x, output_size):
    """The mean over each adaptive window ``[floor(o * in / out), ceil((o + 1) * in / out))``
    (per dimension), unrolled over the longest window with the shorter ones masked;
    where ``out`` divides ``in``, an `_avg_pool` with ``kernel = stride = in / out``."""
    _check_input(x, "adaptive_avg_pool2d")
    _check_float(x, "adaptive_avg_pool2d")
    in_sizes = _static_sizes(x.get_size()[-2:], "adaptive_avg_pool2d")
    out_sizes = _pair(output_size, "output_size")
    if all(i % o == 0 for i, o in zip(in_sizes, out_sizes)):  # equal windows that tile the input
        kernel = [i // o for i, o in zip(in_sizes, out_sizes)]
        return _avg_pool(ctx, x, kernel, kernel, [0, 0], False, True, None)
    lengths = [_adaptive_window_lengths(i, o) for i, o in zip(in_sizes, out_sizes)]
    longest = [hi for _, hi in lengths]
    if longest[0] * longest[1] > MAX_UNROLLED_WINDOW:
        raise NoLowering(f"adaptive_avg_pool2d windows of up to {longest} elements (more than {MAX_UNROLLED_WINDOW})")
    dtype = x.get_dtype()
    compute = _compute_dtype(dtype)
    load = loader(x, x.get_size(), compute)

    def inner_fn(index):
        *prefix, oh, ow = index
        h0, w0 = _adaptive_start(oh, in_sizes[0], out_sizes[0]), _adaptive_start(ow, in_sizes[1], out_sizes[1])
        h_end, w_end = _adaptive_end(oh, in_sizes[0], out_sizes[0]), _adaptive_end(ow, in_sizes[1], out_sizes[1])
        total = None
        for i, j in itertools.product(range(longest[0]), range(longest[1])):
            h, w = h0 + i, w0 + j
            # the first `shortest` positions of every window are inside it
            conds = ([_lt(h, h_end)] if i >= lengths[0][0] else []) + ([_lt(w, w_end)] if j >= lengths[1][0] else [])
            value = ops.masked(_all(conds), lambda h=h, w=w: load([*prefix, h, w]), 0.0) if conds else \
                load([*prefix, h, w])
            total = value if total is None else ops.add(total, value)
        return cast(_divide(total, _adaptive_divisor(oh, ow, in_sizes, out_sizes), compute), compute, dtype)

    return ctx.pointwise(inner_fn, [x])


@register_lowering(aten._adaptive_avg_pool2d_backward.default)
def _lower_adaptive_avg_pool2d_backward(ctx, grad, x):
    """``grad_input[h, w]``: the sum of ``grad[oh, ow] / window size`` over the adaptive
    windows covering ``(h, w)``: ``oh`` in ``[floor(h * out / in), ceil((h + 1) * out / in))``."""
    _check_input(x, "adaptive_avg_pool2d_backward")
    _check_float(x, "adaptive_avg_pool2d_backward")
    in_sizes = _static_sizes(x.get_size()[-2:], "adaptive_avg_pool2d_backward")
    out_sizes = _static_sizes(grad.get_size()[-2:], "adaptive_avg_pool2d_backward")
    # windows covering input i: the same formulas with the roles of in and out swapped
    spans = [_span_range([(i * o) // n for i in range(n)], [-(-(i + 1) * o // n) for i in range(n)])
             for n, o in zip(in_sizes, out_sizes)]
    load_grad, grad_dtype = grad.make_loader(), grad.get_dtype()
    compute = _compute_dtype(grad_dtype)

    def bounds(d: int, i: Expr) -> tuple[Expr, Expr]:
        return _adaptive_start(i, out_sizes[d], in_sizes[d]), _adaptive_end(i, out_sizes[d], in_sizes[d])

    def contribution(prefix, h, w, oh, ow):
        value = cast(load_grad([*prefix, oh, ow]), grad_dtype, compute)
        return _divide(value, _adaptive_divisor(oh, ow, in_sizes, out_sizes), compute)

    return _gather(ctx, [grad, x], "adaptive_avg_pool2d_backward", [hi for _, hi in spans],
                   [lo for lo, _ in spans], bounds, contribution)
