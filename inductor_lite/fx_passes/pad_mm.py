"""GEMM padding: ``mm``, ``bmm`` and ``addmm`` with a dimension off the tensor-core
alignment run on zero-padded operands, and the result is sliced back.

cuBLAS picks ``align1`` kernels when a leading dimension is not a multiple of 16 bytes:
GPT-2's LM head (N = 50257, bf16) takes 3.3 ms per call on an H100 that way, and
0.44 ms padded to 50264 (issue 20). Padding K with zeros adds zero terms, so the
padded GEMM computes the same sums; padded M rows and N columns are sliced off. A
result with padded rows is returned as it is, with the padded row stride (as
TorchInductor returns it), and copied to eager's contiguous layout for consumers that
depend on the layout (views, ``as_strided``).

The rule, as Inductor's (``fx_passes/pad_mm.py``, whose facts these are):

- only CUDA tensors (``force=True`` lifts this for tests), with every size of the
  operands concrete and non-zero;
- alignment in elements, as Inductor's ``get_alignment_size``: 8 for fp16/bf16, 4 for
  fp32; other dtypes are left alone;
- only compute-bound GEMMs, as Inductor's ``is_mm_compute_bound``: the arithmetic
  intensity ``M*N*K / (M*K + K*N + M*N)`` (multiply-adds per element moved) above half
  the machine balance. With an H100 SXM's dense peaks (989 TFLOPS bf16/fp16, 495 TFLOPS
  TF32) and 3350 GB/s, as Inductor computes it (``1000 * TFLOPS / GB/s / 2``), that is
  `MIN_INTENSITY`: 148 for fp16/bf16, 74 for fp32 (TF32). Below it the padding copies
  cost more than the slow kernel loses;
- and only where it is faster on this GPU: the pass times, once per shape, the
  unpadded GEMM against the padded one with its pads and, where the result is copied
  back to eager's layout, that copy (`padding_pays`). Whether cuBLAS has a fast
  kernel for a misaligned shape depends on the GPU and the library version: on an
  H200 with torch 2.11, GPT-2's LM head ran as fast unpadded, and padding it cost a
  copy of its 800 MB of logits.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.fx

from .common import GraphBuilder, aten, is_call, is_concrete, refresh_downstream, replace_node, tensor_val

ALIGNMENT = {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4}
"""Elements a GEMM dimension should be a multiple of, per dtype (Inductor's
``get_alignment_size``)."""

MIN_INTENSITY = {torch.float16: 148.0, torch.bfloat16: 148.0, torch.float32: 74.0}
"""Arithmetic intensity above which a GEMM is compute-bound (see the module docstring)."""

MIN_SPEEDUP = 1.1
"""Padding must make the GEMM this much faster, copies included (Inductor's
``is_padded_faster`` asks the same margin)."""

_decisions: dict[tuple, bool] = {}  # `padding_pays` per GEMM signature, for this process


def pad_mm(gm: torch.fx.GraphModule, force: bool = False) -> int:
    """Pad each misaligned, compute-bound ``mm``/``bmm``/``addmm`` in ``gm``.

    Args:
        force: pad every misaligned GEMM of a supported dtype, on any device and at any
            arithmetic intensity (for testing the rewrite on CPU).

    Returns the number of GEMMs padded.
    """
    count = 0
    pads: dict[tuple, torch.fx.Node] = {}
    for node in list(gm.graph.nodes):
        if not is_call(node, aten.mm.default, aten.bmm.default, aten.addmm.default) or not node.users:
            continue
        if is_call(node, aten.addmm.default) and (len(node.args) != 3 or set(node.kwargs) - {"beta", "alpha"}):
            continue
        a, b = node.args[-2:]
        bias = node.args[0] if is_call(node, aten.addmm.default) else None
        plan = _plan(a, b, bias, force)
        if plan is None:
            continue
        pad_m, pad_k, pad_n = plan
        shared = frozenset(i for i, (x, widths) in enumerate(zip((a, b), _operand_widths(*plan)))
                           if any(widths) and _pad_key(x, widths) in pads)
        if not (force or padding_pays(node, *plan, shared=shared)):
            continue
        out = _emit(gm, node, a, b, bias, *plan, pads)
        replace_node(gm, node, out)
        if is_call(out, aten.clone.default):
            _return_padded_rows(gm, out)
        count += 1
    return count


def _plan(a, b, bias, force: bool) -> Optional[tuple[int, int, int]]:
    """``(pad_m, pad_k, pad_n)`` in elements, or None when the GEMM is left alone."""
    av, bv = tensor_val(a), tensor_val(b)
    tensors = [t for t in (av, bv, tensor_val(bias)) if t is not None]
    if av is None or bv is None or (bias is not None and len(tensors) != 3):
        return None
    if not all(is_concrete(t) for t in tensors) or av.dtype != bv.dtype or av.dtype not in ALIGNMENT:
        return None
    if not force and not all(t.device.type == "cuda" for t in tensors):
        return None
    m, k = av.shape[-2:]
    n = bv.shape[-1]
    if 0 in (m, k, n):
        return None
    align = ALIGNMENT[av.dtype]
    pads = tuple(-size % align for size in (m, k, n))
    if not any(pads):
        return None
    if not force and m * n * k / (m * k + k * n + m * n) <= MIN_INTENSITY[av.dtype]:
        return None
    return pads


def _transposed_source(x: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The node ``x`` transposes the last two dimensions of (``t``, ``transpose``,
    ``permute``), or None."""
    if not isinstance(x, torch.fx.Node):
        return None
    value = tensor_val(x)
    rank = value.dim() if value is not None else 0
    if rank < 2:
        return None
    swap = list(range(rank - 2)) + [rank - 1, rank - 2]
    if is_call(x, aten.t.default):
        return x.args[0]
    if is_call(x, aten.permute.default) and [d % rank for d in x.args[1]] == swap:
        return x.args[0]
    if is_call(x, aten.transpose.int) and sorted(d % rank for d in x.args[1:3]) == [rank - 2, rank - 1]:
        return x.args[0]
    return None


def _pad_key(x: torch.fx.Node, widths: list[int]) -> tuple:
    """What a pad of operand ``x`` by ``widths`` (last dim first, two dims) pads, in a
    canonical form: a transposed operand pads its source with the widths swapped, so
    that ``dY`` padded for ``dY @ W`` and ``dY.t()`` padded for ``dY.t() @ X`` (a linear
    layer's two backward GEMMs) are one pad of ``dY``."""
    source = _transposed_source(x)
    if source is not None:
        return (source, (widths[2], widths[3], widths[0], widths[1]))
    return (x, tuple(widths))


def _padded(build: GraphBuilder, x: torch.fx.Node, widths: list[int], pads: dict) -> torch.fx.Node:
    """``x`` zero-padded by ``widths``: one `constant_pad_nd` per canonical pad
    (`_pad_key`), made before the first GEMM that needs it and reused by later ones."""
    source, source_widths = key = _pad_key(x, widths)
    if key not in pads:
        pads[key] = build.call(aten.constant_pad_nd.default, source, list(source_widths), 0.0)
    if source is x:
        return pads[key]
    rank = tensor_val(x).dim()
    return build.call(aten.transpose.int, pads[key], rank - 2, rank - 1)


def _emit(gm, node, a, b, bias, pad_m: int, pad_k: int, pad_n: int, pads: dict) -> torch.fx.Node:
    """The padded GEMM, sliced back to ``node``'s shape; operand pads go through
    ``pads`` (`_padded`)."""
    build = GraphBuilder(gm, node)
    a_widths, b_widths = _operand_widths(pad_m, pad_k, pad_n)
    if any(a_widths):
        a = _padded(build, a, a_widths, pads)
    if any(b_widths):
        b = _padded(build, b, b_widths, pads)
    if bias is None:
        out = build.call(node.target, a, b)
    else:
        bias = _pad_bias(build, bias, pad_m, pad_n)
        out = build.call(aten.addmm.default, bias, a, b, **node.kwargs)
    rank = tensor_val(out).dim()
    m, n = tensor_val(node).shape[-2:]
    if pad_m:
        out = build.call(aten.slice.Tensor, out, rank - 2, 0, m)
    if pad_n:
        out = build.call(aten.slice.Tensor, out, rank - 1, 0, n)
        # the slice's rows keep the padded stride; consumers that depend on the layout
        # (as_strided, views) get the contiguous result eager has. A pointwise consumer
        # inlines the copy, so it costs nothing there.
        out = build.call(aten.clone.default, out, memory_format=torch.contiguous_format)
    return out


_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _returned(user: torch.fx.Node) -> bool:
    """Whether ``user`` is the graph's output, or a view only the output reads."""
    return user.op == "output" or (is_call(user, *_VIEWS) and all(u.op == "output" for u in user.users))


def _return_padded_rows(gm: torch.fx.GraphModule, copy: torch.fx.Node) -> None:
    """Graph outputs (directly or through a view) read the padded GEMM's slice
    itself, not ``copy`` of it: the user gets the result with its padded row stride, as
    from TorchInductor (whose padding runs on the joint graph, so its output strides are
    the padded ones too), instead of a copy (GPT-2's 800 MB of logits). A view the
    padded strides do not allow reads a copy after all (`refresh_downstream`)."""
    sliced = copy.args[0]
    for user in list(copy.users):
        if _returned(user):
            user.replace_input_with(copy, sliced)
    if not copy.users:
        gm.graph.erase_node(copy)
    refresh_downstream(gm, sliced)


def _copies_result(node: torch.fx.Node) -> bool:
    """Whether `_emit`'s copy of ``node``'s padded result runs as a kernel of its own:
    some user is neither the graph's output (`_return_padded_rows`) nor a pointwise op,
    into whose kernel the copy would fuse."""
    return any(not _returned(user) and (user.op != "call_function" or not isinstance(user.target, torch._ops.OpOverload)
                                        or torch.Tag.pointwise not in user.target.tags) for user in node.users)


def padding_pays(node: torch.fx.Node, pad_m: int, pad_k: int, pad_n: int, shared: frozenset = frozenset()) -> bool:
    """Whether the padded GEMM, with its pads and copy, runs `MIN_SPEEDUP` times faster
    than ``node`` as it is, timed on random tensors of the same sizes, strides and
    dtype on ``node``'s device (once per signature and process, `_decisions`). A GEMM
    whose timing fails (out of memory, say) is left alone.

    ``shared``: the operands (0: ``a``, 1: ``b``) whose padded copy an earlier GEMM
    already made: their pads cost nothing here. When every pad is shared, the padded
    GEMM need only be as fast: it then also spares the producer writing the unpadded
    operand, where the pads were its only other readers."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from ..runtime.timing import Timer

    vals = [tensor_val(arg) if isinstance(arg, torch.fx.Node) else arg for arg in node.args]
    copies = bool(pad_n) and _copies_result(node)
    key = (node.target, tuple((tuple(v.shape), v.stride(), v.dtype) if isinstance(v, torch.Tensor) else v
                              for v in vals), tuple(sorted(node.kwargs.items())), pad_m, pad_k, pad_n, copies,
           str(tensor_val(node).device), shared)
    if key in _decisions:
        return _decisions[key]
    *bias, a, b = range(len(vals))
    all_widths = _operand_widths(pad_m, pad_k, pad_n)
    device = tensor_val(node).device
    m, n = tensor_val(node).shape[-2:]
    try:
        with unset_fake_temporarily():
            args = [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=device).normal_()
                    if isinstance(v, torch.Tensor) else v for v in vals]

            def unpadded():
                node.target(*args, **node.kwargs)

            # (argument position, pad widths, padded ahead of timing) of each operand
            operands = [(i, widths, j in shared) for j, (i, widths) in enumerate(zip((a, b), all_widths))]
            ready = {i: torch.constant_pad_nd(args[i], widths) for i, widths, pre in operands if pre}

            def padded():
                x = list(args)
                for i, widths, pre in operands:
                    if pre:
                        x[i] = ready[i]
                    elif any(widths):
                        x[i] = torch.constant_pad_nd(args[i], widths)
                if bias and any(bias_widths := _bias_widths(args[0].shape, pad_m, pad_n)):
                    x[0] = torch.constant_pad_nd(args[0], bias_widths)
                out = node.target(*x, **node.kwargs)[..., :m, :n]
                if copies:
                    out.contiguous()

            unpadded_s, padded_s = Timer(device, warmup=2, repeat=10).median_seconds([[unpadded], [padded]])
            del args, ready
    except RuntimeError:  # out of memory, say: timing is best effort
        _decisions[key] = False
    else:
        all_shared = all(j in shared for j, widths in enumerate(all_widths) if any(widths))
        _decisions[key] = padded_s * (1.0 if all_shared else MIN_SPEEDUP) <= unpadded_s
    return _decisions[key]


def _operand_widths(pad_m: int, pad_k: int, pad_n: int) -> tuple[list[int], list[int]]:
    """``constant_pad_nd`` widths (last dim first) of a GEMM's ``a`` ``[M, K]`` and ``b``
    ``[K, N]`` for these pads."""
    return [0, pad_k, 0, pad_m], [0, pad_n, 0, pad_k]


def _pad_bias(build: GraphBuilder, bias: torch.fx.Node, pad_m: int, pad_n: int) -> torch.fx.Node:
    """``addmm``'s ``input`` (broadcast to ``[M, N]``) padded where it has the full size."""
    widths = _bias_widths(tensor_val(bias).shape, pad_m, pad_n)
    if not any(widths):
        return bias
    return build.call(aten.constant_pad_nd.default, bias, widths, 0.0)


def _bias_widths(shape: Sequence[int], pad_m: int, pad_n: int) -> list[int]:
    """``constant_pad_nd``'s widths (last dim first) for a bias of ``shape`` broadcast
    to ``[M, N]``: only the dimensions it has at full size grow."""
    widths = []
    for pad, dim in ((pad_n, -1), (pad_m, -2)):
        widths += [0, pad if len(shape) >= -dim and shape[dim] != 1 else 0]
    return widths[:2 * len(shape)]
