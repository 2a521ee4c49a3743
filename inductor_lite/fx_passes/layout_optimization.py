"""Layout optimization: a conv net's 2-D convolutions, and the activations between them,
run channels-last (NHWC) on CUDA.

cuDNN's fastest convolution kernels for fp16, bf16 and fp32 (TF32) read and write NHWC;
given NCHW tensors it either converts them around every call or runs slower kernels.
TorchInductor therefore lays a whole conv net out channels-last
(``GraphLowering.decide_layout_opt``, ``kernel/conv.py``); this pass does the same on
the aten graph, before lowering:

1. Each convolution's input and weight that is not dense channels-last is copied to
   channels-last (``aten.clone(memory_format=torch.channels_last)``; one copy per
   tensor, shared by the convolutions that read it). The weights are copied on every
   call, as in Inductor without freezing; cuDNN would otherwise copy them itself.
2. The fake values downstream are recomputed: a convolution with a channels-last input
   returns channels-last, and pointwise ops, batch norm and pooling keep their input's
   memory format (eager's rules, which the fake tensors follow), so the activations
   between convolutions stay NHWC and the lowering lays its kernels' outputs out that way
   (`fx_lowering.graph` follows each node's ``meta['val']``). A ``view`` the new strides
   no longer allow reads a contiguous copy.
3. An output the user sees keeps the layout it had before (a copy back, as Inductor's
   ``keep_output_stride``) when that layout was contiguous or channels-last; the other
   outputs (a training step's saved activations) stay NHWC, and `backend` reports their
   strides to AOTAutograd, which compiles the backward graph for them.

Whether a graph is converted follows Inductor's heuristic (``decide_layout_opt``, whose
facts these are):

- CUDA 2-D convolutions (4-D inputs) in fp16, bf16 or fp32 are converted (cuDNN runs
  fp64 NCHW whatever its input); no convolution of the graph may have a symbolic size
  (Inductor saw slowdowns with dynamic shapes, pytorch/pytorch#102670), and the graph
  has fewer than 300 nodes per convolution;
- the convolutions' flops, weighted by Inductor's measured channels-last time ratios
  per kind of convolution (`FLOP_MULTIPLIERS`), must not exceed the unweighted sum.

Only inference graphs are converted. In a training step the batch norms' statistics and
their gradients become column reductions over ``N*H*W`` rows of ``C`` channels, each a
two-kernel split reduction where NCHW has one row reduction, and every weight and weight
gradient needs a copy: the step launches more kernels and compiles longer, and the
convnets' training steps of the benchmark suite, host-bound, ran slower channels-last
than NCHW (docs/performance.md). ``force=True`` converts forward graphs too, which the
tests use to check that a training step stays correct.

The graph is left as traced when the new layouts cannot be kept from the user: an
``as_strided`` reads a converted tensor (it addresses the storage as eager lays it
out), an op fails on the new layout, or an output the user sees would change from a
layout that is neither dense contiguous nor dense channels-last.

The backward graph is not converted: its convolutions are ``convolution_backward`` calls
that follow the layout of the saved activations the forward hands them.

Switched off by ``INDUCTOR_LITE_LAYOUT_OPTIMIZATION=0``; ``force=True`` converts any
graph with a 2-D convolution, on any device (tests on CPU).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.fx
from torch.utils import _pytree as pytree
from torch.utils.flop_counter import conv_flop_count

from ..config import config
from ..logs import log_artifact
from .common import (
    GRAPH_KIND, USER_OUTPUTS, GraphBuilder, aten, fake_mode_of, is_call, is_concrete, same_meta, value_changed,
    tensor_val, val,
)

CHANNELS_LAST_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
"""Dtypes whose CUDA convolutions run channels-last (cuDNN runs fp64 NCHW whatever the input)."""

FLOP_MULTIPLIERS = {"grouped": 1.358, "small": 0.783, "in_out": 0.725, "default": 0.823}
"""Channels-last time over NCHW time of each kind of convolution, averaged over
TorchInductor's benchmark convolutions (``decide_layout_opt``; below 1 is a speed-up)."""

MAX_NODES_PER_CONV = 300
"""Graphs with this many nodes or more per convolution are left alone (Inductor's bound:
a few convolutions in a large graph do not pay for the conversions)."""


def layout_optimization(gm: torch.fx.GraphModule, force: bool = False) -> int:
    """Lay ``gm``'s 2-D convolutions and their neighbours out channels-last, when the
    heuristic (module docstring) says it pays; returns the number of copies inserted.

    Args:
        gm: an aten graph with fake ``meta['val']``; ``gm.meta[GRAPH_KIND]`` (``fw``,
            ``bw`` or ``inference``, default ``inference``) and ``gm.meta[USER_OUTPUTS]``
            (the output positions the user sees, default all) steer it.
        force: convert every graph with a 2-D convolution (forward graphs included), on
            any device.
    """
    kind = gm.meta.get(GRAPH_KIND, "inference")
    if not config.layout_optimization or gm.meta.get(USER_OUTPUTS, ()) is None:
        return 0
    if not force and kind != "inference":
        return 0
    convs = [n for n in gm.graph.nodes if _is_2d_conv(n, force)]
    if not convs or not (force or _pays(gm, convs)):
        return 0
    plan = _plan(gm, set(convs))
    if plan is None:
        return 0
    return _apply(gm, plan)


def _is_2d_conv(node: torch.fx.Node, force: bool) -> bool:
    if not is_call(node, aten.convolution.default) or len(node.args) != 9:
        return False
    x, w = tensor_val(node.args[0]), tensor_val(node.args[1])
    return (x is not None and w is not None and x.dim() == 4 and x.dtype in CHANNELS_LAST_DTYPES
            and (force or x.device.type == "cuda") and is_concrete(x) and is_concrete(w))


def _kind(conv: torch.fx.Node) -> str:
    """Inductor's classes of convolution, by the weight's ``(C_out, C_in / groups, kH, kW)``."""
    w = val(conv.args[1])
    if conv.args[8] > 1 and w.shape[1] > 1:
        return "grouped"
    if w.shape[0] <= 64 and w.shape[1] <= 64:
        return "small"
    if w.shape[0] * 2 <= w.shape[1] and w.shape[2] > 1:
        return "in_out"
    return "default"


def _pays(gm: torch.fx.GraphModule, convs: list[torch.fx.Node]) -> bool:
    every_conv = [n for n in gm.graph.nodes if is_call(n, aten.convolution.default)]
    if len(gm.graph.nodes) >= MAX_NODES_PER_CONV * len(every_conv):
        return False
    if not all(is_concrete(t) for n in every_conv for t in (tensor_val(n.args[0]), tensor_val(n.args[1]))
               if t is not None):
        return False
    total = weighted = 0.0
    for conv in convs:
        flops = conv_flop_count(list(val(conv.args[0]).shape), list(val(conv.args[1]).shape),
                                list(val(conv).shape), transposed=bool(conv.args[6]))
        total += flops
        weighted += flops * FLOP_MULTIPLIERS[_kind(conv)]
    return weighted <= total


class _Plan:
    """What `_apply` inserts: each is a copy of a node's value, keyed ``(source node,
    memory format)``, with the nodes whose argument it replaces and its fake value; and the
    fake values of the nodes downstream that change."""

    def __init__(self, fake_mode) -> None:
        self.fake_mode = fake_mode
        self.copies: dict[tuple[torch.fx.Node, torch.memory_format], tuple[Any, list[torch.fx.Node]]] = {}
        self.values: dict[torch.fx.Node, Any] = {}

    def value(self, node: Any) -> Any:
        if isinstance(node, torch.fx.Node):
            return self.values.get(node, node.meta.get("val"))
        return node

    def copy(self, source: torch.fx.Node, fmt: torch.memory_format, reader: torch.fx.Node) -> Any:
        """Plan ``source`` copied to ``fmt`` for ``reader``; returns the copy's fake value."""
        key = (source, fmt)
        if key not in self.copies:
            with self.fake_mode:
                self.copies[key] = (aten.clone.default(self.value(source), memory_format=fmt), [])
        self.copies[key][1].append(reader)
        return self.copies[key][0]


def _plan(gm: torch.fx.GraphModule, convs: set) -> Optional[_Plan]:
    """Walk ``gm`` once in order, planning the copies and recomputing fake values; None
    (the graph is left as it was) when some node's op fails on the new layouts."""
    plan = _Plan(fake_mode_of(gm))
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        inputs = {}  # argument node -> the fake value this node reads instead
        if node in convs:
            for arg in node.args[:2]:
                if not plan.value(arg).is_contiguous(memory_format=torch.channels_last):
                    inputs[arg] = plan.copy(arg, torch.channels_last, node)
        if not inputs and not any(i in plan.values for i in node.all_input_nodes):
            continue
        if is_call(node, *_STORAGE_OPS):
            return _give_up(node, "addresses the storage as eager lays it out")
        try:
            result = _run(node, plan, inputs)
        except Exception as error:  # noqa: BLE001 - any op failing on the new layout: leave the graph
            if not is_call(node, aten.view.default, aten._unsafe_view.default):
                return _give_up(node, f"fails on the new layout ({type(error).__name__}: {error})")
            source = node.args[0]
            inputs[source] = plan.copy(source, torch.contiguous_format, node)
            try:
                result = _run(node, plan, inputs)
            except Exception as error:  # noqa: BLE001 - as above
                return _give_up(node, f"fails on a contiguous copy ({type(error).__name__}: {error})")
        if value_changed(result, node.meta.get("val"), [plan.values[i] for i in node.all_input_nodes
                                                        if i in plan.values]):
            plan.values[node] = result
    return plan if _restore_user_outputs(gm, plan) else None


_STORAGE_OPS = (aten.as_strided.default, aten.as_strided_scatter.default, aten.as_strided_copy.default)
"""Ops that address their input's storage with strides of their own: their result on a
converted tensor would not be eager's."""


def _give_up(node: torch.fx.Node, why: str) -> None:
    log_artifact("passes", f"layout_optimization: {node.format_node()} {why}; the graph stays as traced")
    return None


def _run(node: torch.fx.Node, plan: _Plan, inputs: dict) -> Any:
    def value(a: Any) -> Any:
        return inputs[a] if a in inputs else plan.value(a)

    args, kwargs = pytree.tree_map_only(torch.fx.Node, value, (node.args, node.kwargs))
    with plan.fake_mode:
        return node.target(*args, **kwargs)


def _restore_user_outputs(gm: torch.fx.GraphModule, plan: _Plan) -> bool:
    """Plan copies back to the old layout for the outputs the user sees; False when one
    had a layout a copy cannot give (neither dense contiguous nor dense channels-last)."""
    (output,) = gm.graph.find_nodes(op="output")
    leaves = pytree.tree_leaves(output.args[0])
    visible = gm.meta.get(USER_OUTPUTS, range(len(leaves)))
    for i in visible:
        node = leaves[i] if i < len(leaves) else None
        if not isinstance(node, torch.fx.Node) or node not in plan.values:
            continue
        old, new = node.meta.get("val"), plan.values[node]
        if not isinstance(old, torch.Tensor) or same_meta(old, new):
            continue
        formats = [torch.contiguous_format] + ([torch.channels_last] if old.dim() == 4 else [])
        fmt = next((f for f in formats if old.is_contiguous(memory_format=f)), None)
        if fmt is None:
            _give_up(node, "is an output the user sees, laid out neither contiguous nor channels-last")
            return False
        if not new.is_contiguous(memory_format=fmt):  # (N, C, 1, 1) is both: no copy
            plan.copy(node, fmt, output)
    return True


def _apply(gm: torch.fx.GraphModule, plan: _Plan) -> int:
    for node, value in plan.values.items():
        node.meta["val"] = value
    for (source, fmt), (_, readers) in plan.copies.items():
        # before its first reader (readers are in graph order): the copy lives no longer than needed
        copy = GraphBuilder(gm, readers[0]).call(aten.clone.default, source, memory_format=fmt)
        for reader in readers:
            reader.replace_input_with(source, copy)
    return len(plan.copies)
