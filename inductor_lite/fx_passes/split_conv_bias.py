"""Convolution bias split: on CUDA, ``convolution(x, w, b)`` becomes
``convolution(x, w, None) + b.view(C, 1, ..)``.

cuDNN adds a bias in a kernel of its own for many convolutions, and for channels-last
outputs (depthwise convolutions especially) that is a slow broadcast add (timm's
ConvNeXt-tiny: docs/performance.md, sixth session). Split, the add is a pointwise node,
which fuses into the kernel that reads the convolution's output (ConvNeXt's LayerNorm, a
ReLU). The fact is TorchInductor's
(``kernel/conv.py``: "peel off the bias, cudnn is slower with it", for every device
but the CPU).

Fires on every ``aten.convolution`` with a bias and at least one output channel, on
CUDA tensors (``force=True`` lifts that for tests). The sum is rounded once more for
fp16/bf16 outputs (the convolution's result, then the sum), as in Inductor.
"""

from __future__ import annotations

import torch
import torch.fx

from .common import GraphBuilder, aten, is_call, replace_node, tensor_val


def split_conv_bias(gm: torch.fx.GraphModule, force: bool = False) -> int:
    """Split the bias off each CUDA convolution of ``gm`` (in place); returns how many.

    Args:
        gm: an aten graph with fake ``meta['val']``.
        force: split on any device (tests on CPU).
    """
    count = 0
    for node in list(gm.graph.nodes):
        if not is_call(node, aten.convolution.default) or len(node.args) != 9 or node.args[2] is None:
            continue
        out = tensor_val(node)
        if out is None or (out.device.type != "cuda" and not force) or out.shape[1] == 0:
            continue
        x, w, bias, *rest = node.args
        build = GraphBuilder(gm, node)
        conv = build.call(aten.convolution.default, x, w, None, *rest)
        shape = [-1] + [1] * (out.dim() - 2)  # -1, not a channel count that may be a SymInt
        replace_node(gm, node, build.call(aten.add.Tensor, conv, build.call(aten.view.default, bias, shape)))
        count += 1
    return count
