"""Lowerings of the aten reductions to `Reduction` nodes.

Each reduction becomes one realized `Reduction` (plus pointwise epilogues such as
``mean``'s division, which the scheduler fuses back into the reduction's kernel):

==========================================  ===============================================
aten op                                     IR
==========================================  ===============================================
``sum prod``                                ``sum``/``prod`` in fp32 (half inputs), int64 (ints)
``mean``                                    ``sum``, then ``* (1 / n)``
``amax amin max min`` (no dim)              ``max``/``min`` (``any``/``all`` for bool)
``max.dim min.dim``                         ``max``/``min`` and ``argmax``/``argmin``
``argmax argmin``                           ``argmax``/``argmin`` (int64 result)
``var std var_mean std_mean`` (correction)  ``welford_reduce`` (mean, M2), then
                                            ``M2 / max(n - correction, 0)``
``any all``                                 ``any``/``all`` over bool
==========================================  ===============================================

``logsumexp``, vector norms, softmax, the norms and the losses reach these through
the decompositions (`decompositions.py`).

*Split reductions*: a reduction with few outputs and long rows (a full ``x.sum()``)
would run on a handful of programs. `split_factor` then splits each row into ``S``
pieces of ``ceil(rnumel / S)`` (``S`` or, where that leaves the last one empty, fewer):
a first reduction over ``numel`` rows a piece, a second over the pieces' partials (TorchInductor's split reductions, ``ir.py``, do the same).
The partial records the reduction it splits (`ir.nodes.SplitOrigin`): the scheduler
may split a column sum again, into pieces of rows that a row kernel over the same rows
computes in its pass (`scheduler.mix_order`). A Welford reduction (``var_mean``, batch
norm's statistics) splits into pieces of equal count (`ReductionBuilder.welford`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import sympy
import torch

from ..ir.indexing import Expr, as_expr, product
from ..ir.nodes import Pointwise, Reduction, SplitOrigin, StorageBox, reduction_identity
from ..ir.ops import ops
from .lowerings import NoLowering, cast, const, lazy_origins, register_lowering

aten = torch.ops.aten

SPLIT_MAX_NUMEL = 64
"""Row reductions with fewer outputs than this may be split (`split_factor`)..."""
SPLIT_MIN_RNUMEL = 16384
"""...when their rows have at least this many elements. One program reducing 32768
elements that each gather from another tensor (cross-entropy's mean of per-row losses)
took 35 us on an H200, and TorchInductor splits rows above 8192 elements on Hopper
(``choices.reduction_split_factor``)."""
SPLIT_TARGET_ROWS = 1024
"""A split row reduction aims at about this many partial rows: enough programs for any GPU."""
SPLIT_MIN_CHUNK = 2048
"""Each partial row keeps at least this many elements (the partial write stays small)."""
OUTER_SPLIT_TARGET = 65536
"""A split outer reduction aims at about this many partial outputs (about 1024 tiles of 64)."""
OUTER_SPLIT_MIN_CHUNK = 128
"""Each partial of an outer reduction keeps at least this many reduced elements."""

def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for fp16/bf16, int64 for integer and bool sums, else ``dtype``."""
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    if not dtype.is_floating_point:
        return torch.int64
    return dtype


def _reduced_dims(rank: int, dims) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    out = sorted({d % max(rank, 1) for d in dims})
    return [d for d in out if d < rank]


def split_factor(numel: Expr, rnumel: Expr, outer: bool) -> int:
    """How many pieces to split each row of a reduction into (1: no split).

    Only static sizes split. A row reduction (``outer`` False) with few outputs (<
    `SPLIT_MAX_NUMEL`) over long rows (>= `SPLIT_MIN_RNUMEL`) gets a power of two
    ``S`` with ``numel * S`` near `SPLIT_TARGET_ROWS` and pieces of at least
    `SPLIT_MIN_CHUNK`. An outer reduction (the reduced dimensions are not the
    contiguous one, e.g. a column sum) programs tiles of contiguous outputs, so it
    splits until about `OUTER_SPLIT_TARGET` partial outputs, pieces of at least
    `OUTER_SPLIT_MIN_CHUNK`.
    """
    numel, rnumel = sympy.sympify(numel), sympy.sympify(rnumel)
    if not (numel.is_number and rnumel.is_number):
        return 1
    n, r = int(numel), int(rnumel)
    if outer:
        target, min_chunk = OUTER_SPLIT_TARGET, OUTER_SPLIT_MIN_CHUNK
    elif n < SPLIT_MAX_NUMEL and r >= SPLIT_MIN_RNUMEL:
        target, min_chunk = SPLIT_TARGET_ROWS, SPLIT_MIN_CHUNK
    else:
        return 1
    split = 1
    while n * split * 2 <= target and r // (split * 2) >= min_chunk:
        split *= 2
    return split


class ReductionBuilder:
    """Builds `Reduction` nodes reducing ``x`` over ``dims`` for one FX node.

    ``out_size`` is the kept size (with size-1 dims where ``keepdim``); the values
    are ``x`` converted to ``src_dtype`` (optionally mapped by ``prologue(value)``).
    """

    def __init__(self, ctx, x, dims, keepdim: bool, src_dtype: torch.dtype, prologue=None):
        self.ctx = ctx
        self.x = x
        size = list(x.get_size())
        self.in_size = size
        self.dims = _reduced_dims(len(size), dims)
        self.keepdim = keepdim
        self.src_dtype = src_dtype
        self.out_size = [as_expr(1) if d in self.dims else s for d, s in enumerate(size) if keepdim or d not in self.dims]
        self.reduction_ranges = [size[d] for d in self.dims]
        self.outer = _is_outer(ctx.arg_val(0), self.dims)
        self.rnumel = product(self.reduction_ranges)
        load, in_dtype = x.make_loader(), x.get_dtype()
        self._value = lambda idx: (prologue or (lambda v: v))(cast(load(idx), in_dtype, src_dtype))

    def input_index(self, index: Sequence[Expr], rindex: Sequence[Expr]) -> list[Expr]:
        """The input element at output ``index`` and reduction position ``rindex``."""
        out, kept = [], iter(index)
        rvars = iter(rindex)
        for d in range(len(self.in_size)):
            if d in self.dims:
                out.append(next(rvars))
                if self.keepdim:
                    next(kept)
            else:
                out.append(next(kept))
        return out

    def value(self, index, rindex):
        return self._value(self.input_index(index, rindex))

    def _realize(self, loops, hint) -> StorageBox:
        box = StorageBox(loops)
        if hint is not None:
            box.meta_val = hint
        self.ctx.graph.realize(box)
        return box

    def _origins(self) -> dict:
        origins = lazy_origins(self.x)
        origins[self.ctx.node.name] = self.ctx.op_name()
        return origins

    def reduce(self, reduction_type: str, out_dtype: torch.dtype, hint=None) -> StorageBox:
        """A realized reduction of every input value (split when `split_factor` says)."""
        numel = product(self.out_size)
        split = split_factor(numel, self.rnumel, self.outer) if reduction_type in ("sum", "prod", "max", "min", "any",
                                                                        "all") else 1
        device = self.ctx.device
        if split == 1:
            loops = Reduction(ranges=list(self.out_size), inner_fn=self.value, dtype=out_dtype, device=device,
                              origins=self._origins(), reduction_ranges=list(self.reduction_ranges),
                              reduction_type=reduction_type, src_dtype=self.src_dtype)
            return self._realize(loops, hint)
        origin = SplitOrigin(self.value, tuple(self.out_size), tuple(self.reduction_ranges),
                             math.ceil(int(self.rnumel) / split), reduction_identity(reduction_type, self.src_dtype))
        # the split dimension goes first, so an outer reduction's partials stay contiguous
        pieces = sympy.Integer(origin.pieces)  # at most split: ceil(9 / ceil(9 / 4)) is 3
        partial = Reduction(ranges=[pieces] + list(self.out_size), inner_fn=origin.partial_fn(),
                            dtype=self.src_dtype, device=device, origins=self._origins(),
                            reduction_ranges=[sympy.Integer(origin.chunk)], reduction_type=reduction_type,
                            src_dtype=self.src_dtype, split_origin=origin)
        partial_box = self._realize(partial, None)
        load = partial_box.make_loader()
        final = Reduction(ranges=list(self.out_size), inner_fn=lambda index, rindex: load([rindex[0]] + list(index)),
                          dtype=out_dtype, device=device, origins=self._origins(),
                          reduction_ranges=[pieces], reduction_type=reduction_type, src_dtype=self.src_dtype)
        return self._realize(final, hint)

    def welford(self) -> tuple[StorageBox, StorageBox]:
        """(mean, M2) of the values: one realized ``welford_reduce`` (fp32/fp64), or, over
        a single element, that element and 0 (pointwise: a kernel has no reduction
        over one element)."""
        if self.rnumel == 1:
            rindex = [sympy.Integer(0)] * len(self.dims)
            mean = Pointwise(ranges=list(self.out_size), inner_fn=lambda idx: self.value(idx, rindex),
                             dtype=self.src_dtype, device=self.ctx.device, origins=self._origins())
            m2 = Pointwise(ranges=list(self.out_size), inner_fn=lambda idx: const(0.0, self.src_dtype),
                           dtype=self.src_dtype, device=self.ctx.device, origins=self._origins())
            return StorageBox(mean), StorageBox(m2)
        split = self._welford_split()
        if split > 1:
            return self._split_welford(split)
        base = Reduction(ranges=list(self.out_size), inner_fn=self.value, dtype=self.src_dtype,
                         device=self.ctx.device, origins=self._origins(),
                         reduction_ranges=list(self.reduction_ranges), reduction_type="welford_reduce",
                         src_dtype=self.src_dtype)
        mean = self._realize(base, None)
        m2 = self._realize(_replace_output(base, 1), None)
        return mean, m2

    def _welford_split(self) -> int:
        """`split_factor`'s pieces, halved until they divide the reduced elements: every
        piece then holds the same count, which `_split_welford` merges with sums."""
        split = split_factor(product(self.out_size), self.rnumel, self.outer)
        while split > 1 and int(self.rnumel) % split:
            split //= 2
        return split

    def _split_welford(self, split: int) -> tuple[StorageBox, StorageBox]:
        """(mean, M2) in two stages: ``welford_reduce`` over ``split`` pieces of ``c``
        elements each (a first reduction with ``split`` times the outputs, enough
        programs for the GPU), then the pieces merged by Chan, Golub and LeVeque's
        formula for equal counts: ``mean = sum(mean_p) / split`` and ``M2 = sum(M2_p) +
        c * sum((mean_p - mean)**2)``, two small sum reductions. As TorchInductor splits
        its Welford reductions; a batch norm over a channels-last activation (few
        channels, the reduced rows strided) would otherwise run on a handful of
        programs."""
        chunk = int(self.rnumel) // split
        out_size, device, dtype = list(self.out_size), self.ctx.device, self.src_dtype
        # the pieces divide the elements, so no position past the end needs an identity;
        # no split_origin on the node: the scheduler re-splits only sums (`scheduler.mix_order`)
        pieces = SplitOrigin(self.value, tuple(out_size), tuple(self.reduction_ranges), chunk, identity=None)
        # the piece dimension goes first, so an outer reduction's partials stay contiguous
        base = Reduction(ranges=[sympy.Integer(split)] + out_size, inner_fn=pieces.partial_fn(), dtype=dtype,
                         device=device, origins=self._origins(), reduction_ranges=[sympy.Integer(chunk)],
                         reduction_type="welford_reduce", src_dtype=dtype)
        mean_p = self._realize(base, None).make_loader()
        m2_p = self._realize(_replace_output(base, 1), None).make_loader()

        def sum_over_pieces(fn) -> StorageBox:
            return self._realize(Reduction(ranges=out_size, inner_fn=fn, dtype=dtype, device=device,
                                           origins=self._origins(), reduction_ranges=[sympy.Integer(split)],
                                           reduction_type="sum", src_dtype=dtype), None)

        total = sum_over_pieces(lambda index, rindex: mean_p([rindex[0]] + list(index))).make_loader()
        mean = self._realize(Pointwise(ranges=out_size, dtype=dtype, device=device, origins=self._origins(),
                                       inner_fn=lambda index: ops.truediv(total(index), const(split, dtype))), None)
        mean_load = mean.make_loader()

        def m2_fn(index, rindex):
            piece = [rindex[0]] + list(index)
            delta = ops.sub(mean_p(piece), mean_load(index))
            return ops.add(m2_p(piece), ops.mul(const(chunk, dtype), ops.mul(delta, delta)))

        return mean, sum_over_pieces(m2_fn)

    def pointwise(self, fn, inputs: Sequence[StorageBox], out_dtype: torch.dtype) -> StorageBox:
        """An epilogue ``fn(*values)`` over the reduction outputs ``inputs`` (same size)."""
        loaders = [b.make_loader() for b in inputs]
        origins = {}
        for b in inputs:
            origins.update(b.origins)
        return StorageBox(Pointwise(ranges=list(self.out_size), inner_fn=lambda idx: fn(*[ld(idx) for ld in loaders]),
                                    dtype=out_dtype, device=self.ctx.device, origins=origins))


def _is_outer(val, dims: list[int]) -> bool:
    """Whether the reduced dims leave out the input's contiguous (stride-1) dimension."""
    if not isinstance(val, torch.Tensor) or val.dim() == 0:
        return False
    inner = [d for d in range(val.dim()) if val.size(d) != 1 and val.stride(d) == 1]
    return bool(inner) and inner[-1] not in dims


def _replace_output(node: Reduction, output_index: int) -> Reduction:
    return dataclasses.replace(node, output_index=output_index)


def _check_sizes(x, dims):
    size = x.get_size()
    for d in _reduced_dims(len(size), dims):
        if size[d] == 0:
            raise NoLowering("reduction over an empty dimension")
    if any(s == 0 for s in size):
        raise NoLowering("reduction of an empty tensor")


def _single_element(builder: ReductionBuilder) -> bool:
    return builder.rnumel == 1


def _keep_value(ctx, builder: ReductionBuilder, fn=None):
    """A reduction over one element: the element itself (through ``fn``), pointwise."""
    out_dtype = ctx.out_dtype

    def inner_fn(index):
        v = builder.value(index, [sympy.Integer(0)] * len(builder.dims))
        v = fn(v) if fn is not None else v
        return cast(v, builder.src_dtype if fn is None else out_dtype, out_dtype)

    return ctx.pointwise(inner_fn, [builder.x])


def _sum_like(ctx, x, dims, keepdim, reduction_type: str):
    _check_sizes(x, dims)
    out_dtype = ctx.out_dtype
    builder = ReductionBuilder(ctx, x, dims, keepdim, accumulation_dtype(out_dtype))
    if _single_element(builder):
        return _keep_value(ctx, builder)
    return builder.reduce(reduction_type, out_dtype, ctx.val)


@register_lowering(aten.sum.default, aten.sum.dim_IntList)
def _lower_sum(ctx, x, dim=None, keepdim=False, dtype=None):
    return _sum_like(ctx, x, dim, keepdim, "sum")


@register_lowering(aten.prod.default, aten.prod.dim_int)
def _lower_prod(ctx, x, dim=None, keepdim=False, dtype=None):
    return _sum_like(ctx, x, dim, keepdim, "prod")


@register_lowering(aten.mean.default, aten.mean.dim)
def _lower_mean(ctx, x, dim=None, keepdim=False, dtype=None):
    _check_sizes(x, dim)
    out_dtype = ctx.out_dtype
    acc = accumulation_dtype(out_dtype)
    builder = ReductionBuilder(ctx, x, dim, keepdim, acc)
    if _single_element(builder):
        return _keep_value(ctx, builder)
    total = builder.reduce("sum", acc)
    n = builder.rnumel

    def fn(s):
        scale = 1.0 / int(n) if n.is_number else None
        if scale is not None:
            return cast(ops.mul(s, const(scale, acc)), acc, out_dtype)
        return cast(ops.truediv(s, cast(ops.index_expr(n, torch.int64), torch.int64, acc)), acc, out_dtype)

    return _with_node_origin(ctx, builder.pointwise(fn, [total], out_dtype))


def _with_node_origin(ctx, box: StorageBox) -> StorageBox:
    box.data.origins[ctx.node.name] = ctx.op_name()
    return box


def _extreme(ctx, x, dims, keepdim, kind: str):
    """amax/amin (``kind`` max/min): bool inputs reduce with any/all."""
    _check_sizes(x, dims)
    dtype = x.get_dtype()
    if dtype == torch.bool:
        builder = ReductionBuilder(ctx, x, dims, keepdim, torch.bool)
        if _single_element(builder):
            return _keep_value(ctx, builder)
        return builder.reduce("any" if kind == "max" else "all", torch.bool, ctx.val)
    src = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    builder = ReductionBuilder(ctx, x, dims, keepdim, src)
    if _single_element(builder):
        return _keep_value(ctx, builder)
    return builder.reduce(kind, ctx.out_dtype, ctx.val)


@register_lowering(aten.amax.default)
def _lower_amax(ctx, x, dim=(), keepdim=False):
    return _extreme(ctx, x, dim, keepdim, "max")


@register_lowering(aten.amin.default)
def _lower_amin(ctx, x, dim=(), keepdim=False):
    return _extreme(ctx, x, dim, keepdim, "min")


@register_lowering(aten.max.default)
def _lower_max(ctx, x):
    return _extreme(ctx, x, None, False, "max")


@register_lowering(aten.min.default)
def _lower_min(ctx, x):
    return _extreme(ctx, x, None, False, "min")


def _arg_extreme(ctx, x, dim, keepdim, kind: str, hint) -> StorageBox:
    _check_sizes(x, dim)
    dtype = x.get_dtype()
    if dtype == torch.bool:
        raise NoLowering(f"arg{kind} of bool")
    src = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    builder = ReductionBuilder(ctx, x, dim, keepdim, src)
    if _single_element(builder):
        return ctx.pointwise(lambda index: const(0, torch.int64), [])
    return builder.reduce(f"arg{kind}", torch.int64, hint)


@register_lowering(aten.argmax.default)
def _lower_argmax(ctx, x, dim=None, keepdim=False):
    return _arg_extreme(ctx, x, dim, keepdim, "max", ctx.val)


@register_lowering(aten.argmin.default)
def _lower_argmin(ctx, x, dim=None, keepdim=False):
    return _arg_extreme(ctx, x, dim, keepdim, "min", ctx.val)


@register_lowering(aten.max.dim, aten.min.dim)
def _lower_max_min_dim(ctx, x, dim, keepdim=False):
    kind = "max" if ctx.node.target is aten.max.dim else "min"
    values_val, indices_val = ctx.val
    _check_sizes(x, dim)
    if x.get_dtype() == torch.bool:
        raise NoLowering(f"{kind}.dim of bool")
    src = torch.float32 if x.get_dtype() in (torch.float16, torch.bfloat16) else x.get_dtype()
    builder = ReductionBuilder(ctx, x, dim, keepdim, src)
    if _single_element(builder):
        raise NoLowering(f"{kind}.dim over a dimension of size 1")
    values = builder.reduce(kind, values_val.dtype, values_val)
    indices = builder.reduce(f"arg{kind}", torch.int64, indices_val)
    return [values, indices]


def _correction(correction, unbiased) -> float:
    if correction is not None:
        return float(correction)
    return 1.0 if unbiased in (None, True) else 0.0


def _var_parts(ctx, x, dim, correction, keepdim, unbiased=None):
    """(builder, mean box, var box in the accumulation dtype)."""
    _check_sizes(x, dim)
    dtype = x.get_dtype()
    if not dtype.is_floating_point:
        raise NoLowering("var of a non-float tensor")
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    builder = ReductionBuilder(ctx, x, dim, keepdim, acc)
    n = builder.rnumel
    c = _correction(correction, unbiased)
    mean, m2 = builder.welford()

    def var_fn(m2_value):
        if n.is_number:
            denom = max(int(n) - c, 0.0)
            return ops.truediv(m2_value, const(denom, acc))
        count = cast(ops.index_expr(n, torch.int64), torch.int64, acc)
        denom = ops.maximum(ops.sub(count, const(c, acc)), const(0.0, acc))
        return ops.truediv(m2_value, denom)

    var = builder.pointwise(var_fn, [m2], acc)
    return builder, mean, var


@register_lowering(aten.var.correction, aten.var.dim, aten.var.default)
def _lower_var(ctx, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):  # var.default(x, unbiased)
        dim, unbiased = None, dim
    builder, _, var = _var_parts(ctx, x, dim, correction, keepdim, unbiased)
    acc = var.get_dtype()
    return _with_node_origin(ctx, builder.pointwise(lambda v: cast(v, acc, ctx.out_dtype), [var], ctx.out_dtype))


@register_lowering(aten.std.correction, aten.std.dim, aten.std.default)
def _lower_std(ctx, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    builder, _, var = _var_parts(ctx, x, dim, correction, keepdim, unbiased)
    acc = var.get_dtype()
    return _with_node_origin(
        ctx, builder.pointwise(lambda v: cast(ops.sqrt(v), acc, ctx.out_dtype), [var], ctx.out_dtype))


def _moments(ctx, x, dim, correction, keepdim, unbiased, sqrt: bool):
    builder, mean, var = _var_parts(ctx, x, dim, correction, keepdim, unbiased)
    acc = var.get_dtype()
    out_dtype = ctx.val[0].dtype
    first = builder.pointwise(lambda v: cast(ops.sqrt(v) if sqrt else v, acc, out_dtype), [var], out_dtype)
    second = builder.pointwise(lambda m: cast(m, acc, out_dtype), [mean], out_dtype)
    return [_with_node_origin(ctx, first), _with_node_origin(ctx, second)]


@register_lowering(aten.var_mean.correction, aten.var_mean.dim, aten.var_mean.default)
def _lower_var_mean(ctx, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return _moments(ctx, x, dim, correction, keepdim, unbiased, sqrt=False)


@register_lowering(aten.std_mean.correction, aten.std_mean.dim, aten.std_mean.default)
def _lower_std_mean(ctx, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return _moments(ctx, x, dim, correction, keepdim, unbiased, sqrt=True)


def _any_all(ctx, x, dim, keepdim, kind: str):
    """Reduced in bool; eager's result is uint8 (0 or 1) for a uint8 input."""
    _check_sizes(x, dim)
    builder = ReductionBuilder(ctx, x, dim, keepdim, torch.bool)
    if _single_element(builder):
        return _keep_value(ctx, builder)
    out_dtype = ctx.out_dtype
    if out_dtype == torch.bool:
        return builder.reduce(kind, torch.bool, ctx.val)
    reduced = builder.reduce(kind, torch.bool)
    return _with_node_origin(ctx, builder.pointwise(lambda v: cast(v, torch.bool, out_dtype), [reduced], out_dtype))


@register_lowering(aten.any.default, aten.any.dim, aten.any.dims)
def _lower_any(ctx, x, dim=None, keepdim=False):
    return _any_all(ctx, x, dim, keepdim, "any")


@register_lowering(aten.all.default, aten.all.dim, aten.all.dims)
def _lower_all(ctx, x, dim=None, keepdim=False):
    return _any_all(ctx, x, dim, keepdim, "all")

