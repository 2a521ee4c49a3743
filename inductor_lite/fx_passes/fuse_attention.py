"""Attention re-fusion: SDPA's math decomposition back into one fused attention call.

Under torch.compile, attention can reach the aten graph as its math form (SDPA's
``_scaled_dot_product_attention_math``, or a model's own matmul/softmax/matmul)::

    scores = bmm(view(expand(q * s_q)), view(expand(transpose(k, -2, -1) * s_k)))
    probs  = softmax(view(scores) * s [+ mask], dim=-1)        # _safe_softmax or _softmax,
                                                              # or their decomposition
    out    = view(bmm(view(expand(probs)), view(expand(v))))

with, for fp16/bf16, q, k and v upcast to fp32 first and the result cast back (SDPA's
math path does that).
On an H100 the two fp32 GEMMs of BERT-base take 2.3 ms a call where the fused kernel
takes 0.23 ms (issue 20). This pass matches that form on the aten graph and replaces it
with ``out = attention(q, k, v, attn_mask=mask, scale=s_q * s_k * s)`` on the original
(not upcast) q, k, v:

- CPU: ``aten._scaled_dot_product_flash_attention_for_cpu`` (fp32, fp16, bf16, with a
  mask);
- CUDA: ``aten.scaled_dot_product_attention``, kept whole as an extern call, so that
  torch's own selector picks flash, memory-efficient or cuDNN attention for the real
  tensors at run time (with its mask padding and alignment rules) and the math kernels
  only where none applies. Its fake output is given the layout those kernels return,
  ``(B, L, H, E)`` memory transposed to ``(B, H, L, E)``. Where torch would pick its
  math kernels for these tensors (T5's decoder attention in the model suite), the
  pattern is left to be compiled: the math kernels run as a dozen eager kernels
  (`fused_sdp_choice`).

Where it fires. The pattern is matched structurally over aten nodes (the facts are those
of TorchInductor's ``fx_passes/fuse_attention.py`` patterns; the matcher is ours):
views, expands and clones are looked through; scalar multiplies and divides on q, on
k or on the scores are folded into ``scale``; the softmax is over the last dim; the
mask is added to the 4-D scores, broadcasts to them, and is not scaled. Every
intermediate node must be used only inside the pattern: in a training forward graph
AOTAutograd saves the probabilities for the backward, so the pass leaves it alone (it
fires on inference graphs). Dropout between softmax and the second GEMM (p > 0) stops
a match: fused dropout draws other random numbers. Symbolic sizes are fine wherever the
shape facts are provable.

Why the aten graph, and not training. HF BERT (transformers 5) calls
``F.scaled_dot_product_attention`` itself; Dynamo keeps that as one call, and
AOTAutograd decomposes it by torch's trace-time kernel choice (``_fused_sdp_choice``):
``_scaled_dot_product_flash_attention_for_cpu`` on CPU, a fused CUDA kernel where one
is eligible, each with its fused backward. Only the math choice gives the pattern, and
then the joint graph already holds the math backward (bmm, softmax backward), which a
rewrite of the partitioned forward cannot change. So the pass serves inference graphs;
training would need the rewrite on the joint graph before partitioning. (A
decomposition-table entry for ``aten._scaled_dot_product_attention_math`` is never
consulted: SDPA reaches it inside C++, below the Python dispatcher; checked on torch
2.13.)

Fully masked rows: ``_safe_softmax`` gives zeros there, and so do the fused kernels.
A plain ``_softmax`` gives NaN there; the fused kernels give zeros, so a match on
``_softmax`` changes only rows that eager fills with NaN.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from typing import Optional

import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.nn.attention import SDPBackend

from .common import (
    VIEW_OPS, GraphBuilder, aten, is_call, is_concrete, last_dim, only_used_by, prims, python_number,
    replace_node, same, same_sizes, tensor_val,
)

_MUL = (aten.mul.Tensor, aten.mul.Scalar)
_DIV = (aten.div.Tensor, aten.div.Scalar)
_SOFTMAX = (aten._safe_softmax.default, aten._softmax.default, aten.softmax.int)
_LOW_PRECISION = (torch.float16, torch.bfloat16)
_CPU_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclasses.dataclass
class _Match:
    q: torch.fx.Node
    k: torch.fx.Node
    v: torch.fx.Node
    mask: Optional[torch.fx.Node]
    scale: float
    output: torch.fx.Node  # the node whose users get the fused result
    interior: set


def fuse_attention(gm: torch.fx.GraphModule) -> int:
    """Replace each matched attention math pattern in ``gm`` by one fused call.

    Returns the number of patterns replaced. The caller removes dead nodes and
    recompiles ``gm``.
    """
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.bmm.default or not node.users:
            continue
        match = _match(node)
        if match is None:
            continue
        fused = _emit(gm, match)
        if fused is None:
            continue
        replace_node(gm, match.output, fused)
        count += 1
    return count


# ---------------------------------------------------------------- matching

def _cast_source(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The input of a dtype-only cast node, else None."""
    if is_call(node, aten._to_copy.default):
        source, result = tensor_val(node.args[0]), tensor_val(node)
        if (len(node.args) != 1 or set(node.kwargs) - {"dtype", "layout", "device"} or source is None
                or result is None or result.device != source.device or result.layout != source.layout):
            return None
        return node.args[0]
    if is_call(node, prims.convert_element_type.default):
        return node.args[0]
    return None


def _scalar_factor(node: torch.fx.Node) -> Optional[tuple[torch.fx.Node, float]]:
    """``(tensor input, factor)`` when ``node`` multiplies or divides by a Python number."""
    if is_call(node, *_MUL) and len(node.args) == 2 and not node.kwargs:
        a, b = node.args
        if python_number(b) is not None and isinstance(a, torch.fx.Node):
            return a, python_number(b)
        if python_number(a) is not None and isinstance(b, torch.fx.Node):
            return b, python_number(a)
    if is_call(node, *_DIV) and len(node.args) == 2 and not node.kwargs:
        a, b = node.args
        d = python_number(b)
        if d not in (None, 0.0) and isinstance(a, torch.fx.Node):
            return a, 1.0 / d
    return None


def _peel(node: torch.fx.Node, interior: set, allow_scale: bool, stop_at_4d: bool = False):
    """Walk up through views (and scalar factors when ``allow_scale``), collecting the
    walked nodes in ``interior``; returns the first other node and the product of the
    factors. With ``stop_at_4d`` the walk also stops at a 4-D node made by a view of a
    tensor of another rank: that node is the ``[B, H, L, E]`` operand."""
    scale = 1.0
    while True:
        if is_call(node, *VIEW_OPS) and not _is_layout_clone(node):
            source = node.args[0]
            if stop_at_4d and _rank(node) == 4 and _rank(source) != 4:
                return node, scale
            interior.add(node)
            node = source
            continue
        factor = _scalar_factor(node) if allow_scale else None
        if factor is not None:
            interior.add(node)
            node, f = factor
            scale *= f
            continue
        return node, scale


def _rank(node) -> int:
    t = tensor_val(node)
    return -1 if t is None else t.dim()


def _is_layout_clone(node: torch.fx.Node) -> bool:
    """A clone to a memory format other than contiguous (kept: it is a layout choice)."""
    return is_call(node, aten.clone.default) and node.kwargs.get("memory_format") not in (None, torch.contiguous_format)


def _operand(bmm_arg: torch.fx.Node, interior: set, allow_scale: bool, transposed: bool):
    """The 4-D tensor ``x`` that a bmm operand ``[N, a, b]`` flattens, with ``x``'s last
    two dims swapped first when ``transposed``; returns ``(x, scale)`` or None."""
    node, scale = _peel(bmm_arg, interior, allow_scale, stop_at_4d=not transposed)
    if transposed:
        if not _is_last_two_transpose(node):
            return None
        interior.add(node)
        node, more = _peel(node.args[0], interior, allow_scale, stop_at_4d=True)
        scale *= more
    x, arg = tensor_val(node), tensor_val(bmm_arg)
    if x is None or arg is None or x.dim() != 4 or arg.dim() != 3:
        return None
    rows, cols = (x.shape[3], x.shape[2]) if transposed else (x.shape[2], x.shape[3])
    # no broadcasting on the way: the element counts agree
    if not (same(x.shape[0] * x.shape[1], arg.shape[0]) and same(rows, arg.shape[1]) and same(cols, arg.shape[2])):
        return None
    return node, scale


def _is_last_two_transpose(node: torch.fx.Node) -> bool:
    t = tensor_val(node)
    if t is None:
        return False
    n = t.dim()
    if is_call(node, aten.transpose.int):
        dims = {d % n for d in node.args[1:3]}
        return dims == {n - 2, n - 1}
    if is_call(node, aten.permute.default):
        perm = [d % n for d in node.args[1]]
        return perm == [*range(n - 2), n - 1, n - 2]
    return False


def _match_softmax(node: torch.fx.Node, interior: set) -> Optional[torch.fx.Node]:
    """The input ``x`` when ``node`` computes ``softmax(x, -1)`` (an op, or the
    decomposition of ``_softmax``/``_safe_softmax``); collects the nodes in ``interior``."""
    t = tensor_val(node)
    if t is None:
        return None
    if is_call(node, *_SOFTMAX):
        x = node.args[0]
        if not last_dim(node.args[1], t.dim()):
            return None
        if is_call(node, aten._softmax.default) and node.args[2]:
            return None  # half_to_float changes the dtype
        if is_call(node, aten.softmax.int, aten._safe_softmax.default) and _softmax_dtype(node) not in (None, t.dtype):
            return None
        interior.add(node)
        return x
    if is_call(node, aten.where.self):
        return _match_safe_where(node, interior)
    return _match_decomposed(node, interior)


def _softmax_dtype(node: torch.fx.Node):
    return node.kwargs.get("dtype", node.args[2] if len(node.args) > 2 else None)


def _match_safe_where(node: torch.fx.Node, interior: set) -> Optional[torch.fx.Node]:
    """``where(all(x == -inf, -1, keepdim), zeros_like(p), p)`` with ``p = softmax(x)``."""
    cond, zeros, probs = node.args
    if not is_call(zeros, aten.zeros_like.default, aten.full_like.default) or zeros.args[0] is not probs:
        return None
    if is_call(zeros, aten.full_like.default) and python_number(zeros.args[1]) != 0.0:
        return None
    if not (is_call(cond, aten.all.dim) and len(cond.args) >= 2 and last_dim(cond.args[1], tensor_val(cond).dim())
            and (cond.args[2] if len(cond.args) > 2 else cond.kwargs.get("keepdim", False))):
        return None
    eq = cond.args[0]
    if not (is_call(eq, aten.eq.Scalar) and eq.args[1] == -math.inf):
        return None
    inner: set = set()
    x = _match_softmax(probs, inner)
    if x is None or eq.args[0] is not x:
        return None
    interior |= inner | {node, zeros, cond, eq}
    return x


def _match_decomposed(node: torch.fx.Node, interior: set) -> Optional[torch.fx.Node]:
    """``[cast](exp(x' - amax(x', -1)) / sum(exp(..), -1))`` with ``x' = [cast](clone?(x))``."""
    seen: set = set()
    div = node
    src = _cast_source(node)
    if src is not None:
        seen.add(node)
        div = src
    if not (is_call(div, aten.div.Tensor) and len(div.args) == 2):
        return None
    exp, total = div.args
    if not (is_call(exp, aten.exp.default) and is_call(total, aten.sum.dim_IntList) and total.args[0] is exp):
        return None
    ndim = tensor_val(exp).dim()
    if not (last_dim(total.args[1], ndim) and (total.args[2] if len(total.args) > 2 else total.kwargs.get("keepdim"))):
        return None
    sub = exp.args[0]
    if not (is_call(sub, aten.sub.Tensor) and len(sub.args) == 2 and not sub.kwargs):
        return None
    x, amax = sub.args
    if not (is_call(amax, aten.amax.default) and amax.args[0] is x and last_dim(amax.args[1], ndim)
            and (amax.args[2] if len(amax.args) > 2 else amax.kwargs.get("keepdim"))):
        return None
    seen |= {div, exp, total, sub, amax}
    for _ in range(2):  # the decomposition's upcast and its contiguous() copy
        src = _cast_source(x)
        if src is None and is_call(x, aten.clone.default):
            src = x.args[0]
        if src is None:
            break
        seen.add(x)
        x = src
    interior |= seen
    return x


def _match(bmm2: torch.fx.Node) -> Optional[_Match]:
    """Match ``bmm2`` as the second GEMM of attention (probabilities @ v)."""
    interior: set = {bmm2}
    probs, _ = _peel(bmm2.args[0], interior, allow_scale=False)
    v_side = _operand(bmm2.args[1], interior, allow_scale=False, transposed=False)
    if v_side is None:
        return None
    v, _ = v_side
    # softmax(x.float()).to(x.dtype), as T5 writes it: the fused kernels' softmax is fp32
    probs = _peel_float_cast(probs, interior, upcast=False)
    x = _match_softmax(probs, interior)
    if x is None:
        return None
    x = _peel_float_cast(x, interior, upcast=True)
    # softmax input: [views, scale] [+ mask] [views, scale] <- bmm1
    scores, outer_scale = _peel(x, interior, allow_scale=True)
    mask = None
    if is_call(scores, aten.add.Tensor) and len(scores.args) == 2 and not scores.kwargs:
        if outer_scale != 1.0:
            return None  # the mask would be scaled too
        added = scores
        lhs, rhs = added.args
        bmm1_side = lhs if _leads_to_bmm(lhs) else rhs if _leads_to_bmm(rhs) else None
        if bmm1_side is None:
            return None
        mask = rhs if bmm1_side is lhs else lhs
        interior.add(added)
        scores, outer_scale = _peel(bmm1_side, interior, allow_scale=True)
        if not _mask_fits(mask, added):
            return None
    if not is_call(scores, aten.bmm.default):
        return None
    bmm1 = scores
    interior.add(bmm1)
    q_side = _operand(bmm1.args[0], interior, allow_scale=True, transposed=False)
    k_side = _operand(bmm1.args[1], interior, allow_scale=True, transposed=True)
    if q_side is None or k_side is None:
        return None
    (q, q_scale), (k, k_scale) = q_side, k_side
    qv, kv, vv = tensor_val(q), tensor_val(k), tensor_val(v)
    if not (same_sizes(qv.shape[:2], kv.shape[:2]) and same_sizes(qv.shape[:2], vv.shape[:2])
            and same(kv.shape[2], vv.shape[2])):
        return None
    if mask is not None and tensor_val(added).dim() != 4:
        return None
    output = _output_node(bmm2, qv, vv, interior)
    match = _Match(q, k, v, mask, q_scale * k_scale * outer_scale, output, interior)
    _use_low_precision(match)
    dtypes = {tensor_val(n).dtype for n in (match.q, match.k, match.v, match.output)}
    if len(dtypes) != 1:
        return None
    roots = {match.q, match.k, match.v, mask}
    if any(n in roots for n in interior):
        return None
    allowed = interior | {match.output}
    if not all(only_used_by(n, allowed) for n in interior if n is not match.output):
        return None
    return match


def _peel_float_cast(node: torch.fx.Node, interior: set, upcast: bool) -> torch.fx.Node:
    """Look through a cast between fp16/bf16 and fp32 (``upcast``: to fp32, else from
    fp32), collecting it in ``interior``."""
    source = _cast_source(node)
    if source is None:
        return node
    low, high = (tensor_val(source), tensor_val(node)) if upcast else (tensor_val(node), tensor_val(source))
    if low is None or high is None or low.dtype not in _LOW_PRECISION or high.dtype != torch.float32:
        return node
    interior.add(node)
    return source


def _leads_to_bmm(node) -> bool:
    if not isinstance(node, torch.fx.Node):
        return False
    node, _ = _peel(node, set(), allow_scale=True)
    return is_call(node, aten.bmm.default)


def _mask_fits(mask, added: torch.fx.Node) -> bool:
    """The mask is a floating tensor that broadcasts to the scores without growing them."""
    m, out = tensor_val(mask), tensor_val(added)
    if m is None or out is None or not m.is_floating_point() or m.dim() > out.dim():
        return False
    scores = tensor_val(added.args[0] if added.args[1] is mask else added.args[1])
    if scores is None or not same_sizes(scores.shape, out.shape):
        return False
    return all(same(a, 1) or same(a, b) for a, b in zip(reversed(m.shape), reversed(out.shape)))


def _output_node(bmm2: torch.fx.Node, q: torch.Tensor, v: torch.Tensor, interior: set) -> torch.fx.Node:
    """The 4-D ``[B, H, L, Ev]`` view of ``bmm2`` when it is its only user, else ``bmm2``."""
    users = list(bmm2.users)
    if len(users) == 1 and is_call(users[0], aten.view.default, aten._unsafe_view.default, aten.reshape.default):
        out = tensor_val(users[0])
        if out is not None and same_sizes(out.shape, (*q.shape[:3], v.shape[3])):
            interior.add(users[0])
            return users[0]
    return bmm2


def _use_low_precision(match: _Match) -> None:
    """Undo SDPA math's fp32 upcast: when q, k and v are all upcasts of one fp16/bf16
    dtype and the result is cast back to it, the fused op runs on the originals."""
    sources = [_cast_source(n) for n in (match.q, match.k, match.v)]
    if any(s is None for s in sources):
        return
    low = {tensor_val(s).dtype for s in sources}
    if len(low) != 1 or low.pop() not in _LOW_PRECISION or tensor_val(match.q).dtype != torch.float32:
        return
    users = list(match.output.users)
    if len(users) != 1 or _cast_source(users[0]) is not match.output:
        return
    if tensor_val(users[0]).dtype != tensor_val(sources[0]).dtype:
        return
    # the casts become interior only when nothing else reads them
    casts = [match.q, match.k, match.v]
    if not all(only_used_by(c, match.interior) for c in casts):
        return
    match.interior |= {*casts, match.output}
    match.q, match.k, match.v = sources
    match.output = users[0]


# ---------------------------------------------------------------- rewriting

def _emit(gm: torch.fx.GraphModule, match: _Match) -> Optional[torch.fx.Node]:
    """The fused call's output, shaped like ``match.output``; None (graph untouched)
    when no fused op applies."""
    q = tensor_val(match.q)
    out = tensor_val(match.output)
    if q.device.type not in FUSED_CALLS or (q.device.type == "cpu" and q.dtype not in _CPU_DTYPES):
        return None
    reshape = not same_sizes(out.shape, (*q.shape[:3], tensor_val(match.v).shape[3]))
    if reshape and not is_concrete(out):
        return None  # a reshape to symbolic sizes would need their SymInt nodes
    build = GraphBuilder(gm, match.output)
    mask = match.mask
    built = []  # the mask's nodes, erased again if no fused call is emitted
    if mask is not None:
        source = _cast_source(mask)
        if source is not None and tensor_val(source).dtype == q.dtype:
            mask = source  # an upcast of a mask already in q's dtype: exact
        elif tensor_val(mask).dtype != q.dtype:
            if _wider(tensor_val(mask).dtype, q.dtype):
                # rounding the mask down changes it: an fp32 padding mask of -1e9 is -inf
                # in fp16, and a fully masked row then gives zeros, not eager's mean
                return None
            mask = build.call(aten._to_copy.default, mask, dtype=q.dtype)
            built.append(mask)
        # the fused ops take 2-D or 4-D masks that broadcast to [B, H, L, S]
        while tensor_val(mask).dim() not in (2, 4):
            mask = build.call(aten.unsqueeze.default, mask, 0)
            built.append(mask)
    result = FUSED_CALLS[q.device.type](build, match, mask)
    if result is None:
        for node in reversed(built):
            gm.graph.erase_node(node)
        return None
    if reshape:  # the fused output may not be viewable as [B * H, L, Ev]
        result = build.call(aten.clone.default, result, memory_format=torch.contiguous_format)
        result = build.call(aten.view.default, result, list(out.shape))
    return result


def _wider(a: torch.dtype, b: torch.dtype) -> bool:
    """Whether values of dtype ``a`` may not survive a cast to ``b``."""
    if not a.is_floating_point:
        return False  # bool and integer masks: small values, exact in any float dtype
    fa, fb = torch.finfo(a), torch.finfo(b)
    return fa.max > fb.max or fa.eps < fb.eps


def _cpu_call(build: GraphBuilder, match: _Match, mask: Optional[torch.fx.Node]) -> torch.fx.Node:
    fused = build.call(aten._scaled_dot_product_flash_attention_for_cpu.default, match.q, match.k, match.v,
                       0.0, False, attn_mask=mask, scale=match.scale)
    return build.call(operator.getitem, fused, 0)


def fused_sdp_choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
                     scale: float) -> Optional[int]:
    """torch's attention kernel pick (a `torch.nn.attention.SDPBackend` value) for CUDA
    tensors with the sizes, strides and dtypes of the (fake) tensors given, as
    ``scaled_dot_product_attention`` makes it at run time under the current backend
    flags; ``SDPBackend.ERROR`` where the pick raises (no backend fits: the call would
    fail too) or the tensors cannot be allocated. None where it cannot be asked: no GPU,
    or symbolic sizes. The pick is asked of real, uninitialised tensors, once per layout
    and flags: on fake ones ``_fused_sdp_choice`` answers math whatever the tensors
    (checked on an H100, torch 2.11)."""
    tensors = [t for t in (q, k, v, mask) if t is not None]
    if not torch.cuda.is_available() or not all(is_concrete(t) for t in tensors):
        return None
    layouts = tuple(None if t is None else (tuple(t.shape), tuple(t.stride()), t.dtype, t.device)
                    for t in (q, k, v, mask))
    flags = (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled(),
             torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.math_sdp_enabled())
    return _pick(layouts, scale, flags)


@functools.lru_cache(maxsize=256)
def _pick(layouts: tuple, scale: float, flags: tuple) -> int:
    """`fused_sdp_choice` for one set of layouts and backend flags (``flags`` is part of
    the cache key only)."""
    try:
        with unset_fake_temporarily():
            real = [None if layout is None else torch.empty_strided(layout[0], layout[1], dtype=layout[2],
                                                                    device=layout[3])
                    for layout in layouts]
            return int(torch.ops.aten._fused_sdp_choice.default(*real, 0.0, False, scale=scale))
    except RuntimeError:
        return int(SDPBackend.ERROR)


def _cuda_call(build: GraphBuilder, match: _Match, mask: Optional[torch.fx.Node]) -> Optional[torch.fx.Node]:
    """The composite op, and a fake output with the fused kernels' layout: ``(B, L, H, E)``
    memory seen as ``(B, H, L, E)`` (the wrapper copies where the run-time pick differs).
    None where torch would pick its math kernels for these tensors (T5's decoder
    attention in the model suite), which run as a dozen eager kernels where the pattern
    left alone compiles into fused ones, or where no kernel fits (the call would fail)."""
    choice = fused_sdp_choice(*(tensor_val(n) for n in (match.q, match.k, match.v)),
                              None if mask is None else tensor_val(mask), match.scale)
    if choice in (int(SDPBackend.MATH), int(SDPBackend.ERROR)):
        return None
    node = build.call(aten.scaled_dot_product_attention.default, match.q, match.k, match.v,
                      attn_mask=mask, dropout_p=0.0, is_causal=False, scale=match.scale)
    fake = node.meta["val"]
    b, h, l, e = fake.shape
    with build.fake_mode:
        node.meta["val"] = torch.empty_strided((b, h, l, e), (l * h * e, e, h * e, 1), dtype=fake.dtype,
                                               device=fake.device)
    return node


FUSED_CALLS = {"cpu": _cpu_call, "cuda": _cuda_call}
"""Per device type, how the matched attention is emitted: ``(builder, match, mask) ->
output node``."""
