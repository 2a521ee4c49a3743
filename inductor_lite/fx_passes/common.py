"""Helpers the graph passes share: node metadata, shape facts that never add guards,
and inserting new aten nodes with their fake ``meta['val']``.

The lowering reads every node's ``meta['val']`` (a fake tensor), so a pass that adds a
node computes it by running the op under the graph's own `FakeTensorMode` (the one
AOTAutograd traced with, found on the placeholders' values); symbolic sizes stay
symbolic. Shape comparisons use `statically_known_true`: a pass runs after tracing,
where a new guard would never be checked, so a fact that is not provable for every
size means "no match".
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx
from torch._guards import detect_fake_mode
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree

aten = torch.ops.aten
prims = torch.ops.prims

VIEW_OPS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.expand.default,
    aten.alias.default, aten.clone.default,
})
"""Ops that keep a tensor's values and only change its shape or storage (``clone`` and
``expand`` included: the passes check element counts where broadcasting would matter)."""

def updated_placeholders(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The placeholders ``graph`` updates in place: ``copy_(placeholder, value)``, the
    form AOTAutograd keeps an input mutation in (``keep_inference_input_mutations``)."""
    return {n.args[0] for n in graph.find_nodes(op="call_function", target=aten.copy_.default)
            if isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "placeholder"}


GRAPH_KIND = "inductor_lite_graph_kind"
"""``gm.meta`` key: ``fw``, ``bw`` or ``inference``, set by the backend before the passes."""

USER_OUTPUTS = "inductor_lite_user_outputs"
"""``gm.meta`` key: the positions (in the flattened outputs) of the outputs the user sees,
set by the backend for forward and inference graphs (a forward's other outputs are saved
for the backward); None: no output may change its layout; absent: every output is seen."""


def val(node: Any) -> Any:
    """``node.meta['val']`` for an FX node (None when absent); ``node`` itself otherwise."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else node


def tensor_val(node: Any) -> Optional[torch.Tensor]:
    """The fake tensor of ``node``, or None when ``node`` is no tensor-valued FX node."""
    v = val(node) if isinstance(node, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def is_call(node: Any, *targets: Any) -> bool:
    """True when ``node`` is a ``call_function`` node of one of ``targets``."""
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in targets


def python_number(x: Any) -> Optional[float]:
    """``x`` as a float when it is a plain Python number (not a bool, not symbolic)."""
    if isinstance(x, numbers.Number) and not isinstance(x, bool) and not isinstance(x, complex):
        return float(x)
    return None


def same(a: Any, b: Any) -> bool:
    """``a == b`` for sizes (ints or SymInts), true only when provable for every size."""
    return bool(statically_known_true(a == b))


def same_sizes(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def is_concrete(t: torch.Tensor) -> bool:
    """True when every size and stride of ``t`` is a plain int."""
    return all(isinstance(s, int) for s in (*t.shape, *t.stride()))


def last_dim(dims: Any, ndim: int) -> bool:
    """True when ``dims`` (an int or a one-element list) names the last of ``ndim`` dims."""
    if isinstance(dims, (list, tuple)):
        if len(dims) != 1:
            return False
        dims = dims[0]
    return isinstance(dims, int) and dims in (-1, ndim - 1)


def only_used_by(node: torch.fx.Node, allowed: set) -> bool:
    return all(user in allowed for user in node.users)


class GraphBuilder:
    """Inserts aten nodes before ``anchor``, each with ``meta['val']`` from a fake run.

    Raises:
        RuntimeError: the graph's values carry no fake mode (no ``meta['val']`` on the
            placeholders), so new nodes could not get one.
    """

    def __init__(self, gm: torch.fx.GraphModule, anchor: torch.fx.Node):
        self.graph = gm.graph
        self.anchor = anchor
        self.fake_mode = fake_mode_of(gm)

    def call(self, target: Callable, *args: Any, **kwargs: Any) -> torch.fx.Node:
        def fake(a: Any) -> Any:
            return val(a) if isinstance(a, torch.fx.Node) else a

        with self.fake_mode:
            result = target(*pytree.tree_map(fake, args), **pytree.tree_map(fake, kwargs))
        with self.graph.inserting_before(self.anchor):
            node = self.graph.call_function(target, tuple(args), kwargs)
        node.meta["val"] = result
        node.meta.update({k: v for k, v in self.anchor.meta.items() if k in ("stack_trace", "seq_nr")})
        return node


def fake_mode_of(gm: torch.fx.GraphModule):
    """The `FakeTensorMode` the graph was traced with.

    Raises:
        RuntimeError: no placeholder carries a fake tensor.
    """
    values = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode(values)
    if mode is None:
        raise RuntimeError("graph pass: the graph's placeholders carry no fake meta['val'] "
                           "(trace it with AOTAutograd or make_fx(tracing_mode='fake'))")
    return mode


def replace_node(gm: torch.fx.GraphModule, old: torch.fx.Node, new: torch.fx.Node) -> None:
    """Point every user of ``old`` at ``new`` (``old`` is left for dead-code elimination),
    then refresh the ``meta['val']`` of the nodes downstream.

    ``new`` computes the same values but may lay them out differently (a fused attention
    output, a padded GEMM's slice); the lowering lays views and copies out from their
    nodes' fake values, so stale strides there would make kernels index the wrong memory.
    """
    old.replace_all_uses_with(new)
    refresh_downstream(gm, new)


def refresh_downstream(gm: torch.fx.GraphModule, start: torch.fx.Node) -> None:
    """Re-run, under the fake mode, each node after ``start`` that reads a node whose
    fake value changed; stops where a value comes out as before (`value_changed`)."""
    fake_mode = fake_mode_of(gm)
    changed = {start}
    node = start.next
    while node.op != "root":
        if node.op == "call_function" and any(i in changed for i in node.all_input_nodes):
            result = _fake_run(fake_mode, node)
            if value_changed(result, node.meta.get("val"), [i.meta.get("val") for i in node.all_input_nodes
                                                              if i in changed]):
                node.meta["val"] = result
                changed.add(node)
        node = node.next


def value_changed(new: Any, old: Any, changed_inputs: Sequence[Any]) -> bool:
    """Whether a node's re-run fake value ``new`` must replace ``old``: its metadata
    differs (`same_meta`), or it shares storage with one of ``changed_inputs`` (the new
    values of the inputs that changed). A view of a replaced node, or an op that returns
    its input (``dequantize`` of a float tensor), keeps its metadata, but its old value
    names the old input's storage, by which the lowering tells what an extern output
    aliases (`fx_lowering.extern_layouts.may_alias_inputs`)."""
    return not same_meta(new, old) or not storages(new).isdisjoint(storages(changed_inputs))


def storages(value: Any) -> set:
    """The storages (``StorageWeakRef``) of the strided tensors in ``value``, a fake or real
    tensor or a pytree of them; sparse and nested tensors have none."""
    return {StorageWeakRef(t.untyped_storage()) for t in pytree.tree_leaves(value)
            if isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_nested}


def _fake_run(fake_mode, node: torch.fx.Node) -> Any:
    """``node``'s op on its inputs' fake values. A ``view`` that the new strides no longer
    allow reads a contiguous copy instead (as AOTAutograd writes a ``reshape``)."""
    args, kwargs = pytree.tree_map(val, (node.args, node.kwargs))
    with fake_mode:
        try:
            return node.target(*args, **kwargs)
        except (RuntimeError, ValueError):
            if node.target not in (aten.view.default, aten._unsafe_view.default):
                raise
    copy = GraphBuilder(node.graph.owning_module, node).call(
        aten.clone.default, node.args[0], memory_format=torch.contiguous_format)
    node.replace_input_with(node.args[0], copy)
    args, kwargs = pytree.tree_map(val, (node.args, node.kwargs))
    with fake_mode:
        return node.target(*args, **kwargs)


def same_meta(a: Any, b: Any) -> bool:
    """Whether two fake values (tensors, or lists of them) agree in dtype, device, sizes,
    strides and offset, provably for every size."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return (a.dtype == b.dtype and a.device == b.device and same_sizes(a.shape, b.shape)
                and same_sizes(a.stride(), b.stride()) and same(a.storage_offset(), b.storage_offset()))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same_meta(x, y) for x, y in zip(a, b))
    return not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor)
