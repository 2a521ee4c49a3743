"""Gathers moved ahead of the subtractions of values constant along their dimension.

Cross-entropy reaches the joint graph as ``gather(log_softmax(x), 1, target)``, and the
log-softmax decomposes into ``(x - amax) - log(sum)``, where ``amax`` and ``log(sum)``
have size 1 along the class dimension. A gather picks elements along that dimension
only, so it reads the same ``amax`` and ``log(sum)`` whichever class it picks:
``gather(a - b, d, i) == gather(a, d, i) - b`` for a ``b`` of size 1 along ``d`` (and
the same shape otherwise, so its broadcast matches the index's).

The rewrite matters for the partitioner: with the gather reading the fp32
log-probabilities, AOTAutograd's min-cut partitioner counts them as materialized in the
forward and saves them for the backward (4 bytes a logit: 500 MB a step for BERT-base's
MLM head at batch 8 x 512). With the gather reading ``x``, it saves the bf16 logits and
the two per-row statistics instead, and the backward recomputes the log-probabilities
in the kernel that needs them, as TorchInductor's generated backward does. The pass
runs on the joint graph, before partitioning (`backend`).
"""

from __future__ import annotations

import torch.fx

from .common import GraphBuilder, aten, is_call, tensor_val


def sink_gather(gm: torch.fx.GraphModule) -> int:
    """Rewrite, in place, each ``gather(a - b, dim, index)`` with ``b`` of size 1 at
    ``dim`` (and ``a``'s rank) into ``gather(a, dim, index) - b``, through chains of such
    subtractions. Returns the number of subtractions moved."""
    count = 0
    for node in list(gm.graph.nodes):
        if not is_call(node, aten.gather.default) or node.kwargs or len(node.args) != 3:
            continue
        src, dim, index = node.args
        while is_call(src, aten.sub.Tensor) and not src.kwargs and len(src.args) == 2:
            a, b = src.args
            av, bv, iv = tensor_val(a), tensor_val(b), tensor_val(index)
            if (av is None or bv is None or iv is None or bv.dim() != av.dim() or bv.shape[dim] != 1
                    or tuple(av.shape) != tuple(tensor_val(src).shape)
                    or any(bv.shape[d] != iv.shape[d] for d in range(bv.dim()) if d != dim % bv.dim())):
                break
            build = GraphBuilder(gm, node)
            gathered = build.call(aten.gather.default, a, dim, index)
            moved = build.call(aten.sub.Tensor, gathered, b)
            node.replace_all_uses_with(moved)
            gm.graph.erase_node(node)
            node, src = gathered, a
            count += 1
    if count:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return count
