"""``addmm`` split: ``addmm(bias, x, w)`` read only by pointwise ops becomes
``add(mm(x, w), bias)``.

The bias add then fuses into the kernel of the pointwise consumer (GELU after a linear
layer, a residual add), and the GEMM writes its result once instead of cuBLAS reading
the bias and the consumer's kernel reading the GEMM's output again. The fact is
TorchInductor's (``fx_passes/post_grad.py``, ``unfuse_bias_add_to_pointwise`` with
``should_prefer_unfused_addmm``): split when every use of the output, looking through
views, is a pointwise op.

Fires when ``beta`` and ``alpha`` are 1, and every use of the output is an op tagged
``torch.Tag.pointwise`` (through views, slices and ``getitem``). A graph output or any
other use keeps the ``addmm``: there the bias add would be a kernel of its own. So does
an fp16/bf16 ``addmm``, as in Inductor (``keep_addmm_fused_for_half_dtypes``): split,
the GEMM's result would be rounded to 8 or 11 bits before the bias is added.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from .common import VIEW_OPS, GraphBuilder, aten, is_call, replace_node, tensor_val

_VIEWS = VIEW_OPS | {aten.slice.Tensor, aten.select.int, aten.permute.default, aten.transpose.int,
                     aten.t.default, aten.squeeze.dim, aten.unsqueeze.default, operator.getitem}


def split_addmm(gm: torch.fx.GraphModule) -> int:
    """Split each ``addmm`` whose uses are all pointwise; returns how many were split."""
    count = 0
    for node in list(gm.graph.nodes):
        if not is_call(node, aten.addmm.default) or not node.users:
            continue
        if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1 or len(node.args) != 3:
            continue
        bias, x, w = node.args
        if any(tensor_val(t) is None for t in (node, bias, x, w)):
            continue
        if tensor_val(node).dtype in (torch.float16, torch.bfloat16):
            continue
        if not all(_pointwise_use(user) for user in node.users):
            continue
        build = GraphBuilder(gm, node)
        product = build.call(aten.mm.default, x, w)
        replace_node(gm, node, build.call(aten.add.Tensor, product, bias))
        count += 1
    return count


def _pointwise_use(node: torch.fx.Node) -> bool:
    """True when ``node`` is a pointwise op, or a view whose uses all are."""
    if node.op != "call_function":
        return False
    if node.target in _VIEWS:
        return bool(node.users) and all(_pointwise_use(user) for user in node.users)
    return isinstance(node.target, torch._ops.OpOverload) and torch.Tag.pointwise in node.target.tags
