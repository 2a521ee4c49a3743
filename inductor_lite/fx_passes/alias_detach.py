"""``detach`` nodes of a joint graph become ``alias``, so the partitioner may recompute
the results autograd saves.

Autograd saves the result of an op whose derivative reads it (``tanh``, ``sigmoid``,
``exp``) through an ``aten.detach``. AOTAutograd's min-cut partitioner lets a node be
recomputed in the backward only if every backward user is a view or a pointwise op in
its lists; ``detach`` is neither, so the result counts as materialized in the backward
and is saved. GPT-2's tanh GELU then saved each layer's ``tanh`` output besides the
GEMM output it is recomputed from (288 MB at batch 8 x 512). ``alias`` is a view, and
both lower to the same view (`fx_lowering.views`), so the values do not change.
TorchInductor gets the same effect from its decomposition table (``detach`` to
``alias``); done as a table entry here it also rewrote ``detach`` calls on tensor
constants during tracing, where they are real tensors that fake mode refuses, so it is
a pass on the traced joint graph.
"""

from __future__ import annotations

import torch.fx

from .common import aten


def alias_detach(gm: torch.fx.GraphModule) -> int:
    """Retarget, in place, every ``aten.detach.default`` of ``gm`` to ``aten.alias.default``;
    returns how many."""
    nodes = gm.graph.find_nodes(op="call_function", target=aten.detach.default)
    for node in nodes:
        node.target = aten.alias.default
    return len(nodes)
