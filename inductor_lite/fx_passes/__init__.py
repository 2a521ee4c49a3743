"""Graph passes over the aten graph, run by the backend before lowering.

`run_passes` runs `PASSES` in order on each forward, backward or inference graph that
AOTAutograd hands the backend. Each pass is a function ``(gm) -> int`` that rewrites the
graph in place, keeping its values (within the dtype's tolerance), and returns the
number of rewrites. A pass changes the graph only after a whole match is found, so an
error leaves the graph as it was. For each pass that rewrote something, the driver

- adds the number to ``counters["pass.<name>"]`` (e.g. ``pass.fuse_attention``),
- logs one line under the ``passes`` artifact (``INDUCTOR_LITE_LOGS=passes``),

removes the nodes the rewrite left dead (so the next pass does not match them), and at
the end recompiles the module, so ``gm.forward`` (the eager fallback) runs the
rewritten graph too.

The passes, in order:

1. `fuse_attention.fuse_attention`: SDPA's math decomposition back into one fused
   attention call.
2. `pad_mm.pad_mm`: GEMMs with a dimension off the tensor-core alignment padded (CUDA).
3. `split_addmm.split_addmm`: an fp32 ``addmm`` followed only by pointwise ops becomes
   ``mm`` plus a bias add that fuses into the consumer's kernel.
4. `split_conv_bias.split_conv_bias`: a CUDA convolution's bias becomes a pointwise
   add, which fuses into the consumer's kernel.
5. `layout_optimization.layout_optimization`: a conv net's convolutions and the
   activations between them run channels-last (CUDA).

Padding runs before the split so that a padded ``addmm`` is split like any other; the
layout pass runs last, so the split bias add is laid out with its convolution.

`run_joint_passes` runs `JOINT_PASSES` on a training step's joint forward-backward graph
before AOTAutograd partitions it, the same way (counters ``pass.<name>``, the
``passes`` log), for rewrites that change what the partitioner saves:

1. `sink_gather.sink_gather`: cross-entropy's gather reads the logits, not the
   log-probabilities, so the backward recomputes those instead of the forward saving
   them in fp32.
2. `alias_detach.alias_detach`: ``detach`` becomes ``alias`` (a view), so results that
   autograd saves through a ``detach`` (tanh's, sigmoid's) may be recomputed.
"""

from __future__ import annotations

from typing import Callable

import torch.fx

from ..counters import counters
from ..logs import log_artifact
from .alias_detach import alias_detach
from .fuse_attention import fuse_attention
from .layout_optimization import layout_optimization
from .pad_mm import pad_mm
from .sink_gather import sink_gather
from .split_addmm import split_addmm
from .split_conv_bias import split_conv_bias

PASSES: list[tuple[str, Callable[[torch.fx.GraphModule], int]]] = [
    ("fuse_attention", fuse_attention),
    ("pad_mm", pad_mm),
    ("split_addmm", split_addmm),
    ("split_conv_bias", split_conv_bias),
    ("layout_optimization", layout_optimization),
]
"""``(name, pass)`` in the order `run_passes` applies them."""

JOINT_PASSES: list[tuple[str, Callable[[torch.fx.GraphModule], int]]] = [
    ("sink_gather", sink_gather),
    ("alias_detach", alias_detach),
]
"""``(name, pass)`` in the order `run_joint_passes` applies them."""


def run_passes(gm: torch.fx.GraphModule, graph_name: str) -> dict[str, int]:
    """Run `PASSES` over ``gm`` in place; returns ``{pass name: rewrites}`` for the
    passes that fired.

    Args:
        gm: an aten graph whose nodes carry fake ``meta['val']`` (as AOTAutograd makes).
        graph_name: the compiled graph's name, for the log.
    """
    return _run(PASSES, gm, graph_name)


def run_joint_passes(gm: torch.fx.GraphModule, graph_name: str = "joint") -> dict[str, int]:
    """Run `JOINT_PASSES` over a joint forward-backward graph in place, before it is
    partitioned; returns ``{pass name: rewrites}`` as `run_passes` does."""
    return _run(JOINT_PASSES, gm, graph_name)


def _run(passes, gm: torch.fx.GraphModule, graph_name: str) -> dict[str, int]:
    fired = {}
    for name, graph_pass in passes:
        n = graph_pass(gm)
        if n:
            fired[name] = n
            counters[f"pass.{name}"] += n
            log_artifact("passes", f"{graph_name}: {name} rewrote {n} pattern(s)")
            gm.graph.eliminate_dead_code()
    if fired:
        gm.graph.lint()
        gm.recompile()
    return fired
