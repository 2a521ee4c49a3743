"""The scheduler: realized IR buffers -> an ordered list of kernel groups and extern calls.

Steps:

1. one scheduler node per realized buffer: `SchedulerNode` for a Pointwise or
   Reduction `ComputedBuffer` (reads/writes as `MemoryDep`s over its x and r
   variables, a group ``(numel, rnumel)``), `ExternSchedulerNode` for an
   `ExternKernel` or `MultiOutput` (whole-buffer `StarDep` reads);
2. dead nodes (pure, unread, not outputs) are dropped; split column sums that a row
   reduction over the same rows can compute are split into pieces of rows
   (`mix_order`);
3. a networkx DAG (edge ``u -> v``: ``v`` reads what ``u`` writes, or ``v`` updates an
   input that ``u`` reads) over kernel groups and externs; `fusion.fuse_groups` fuses
   groups;
4. buffers written and read only inside one kernel are *removed* (never stored,
   never allocated);
5. the schedule is the topological order that keeps the graph's order where free,
   unless `memory_order` finds one with a lower estimated peak memory; every buffer
   not removed is freed after its last reader.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Callable, Optional, Union

import networkx as nx
import sympy

from ..ir.indexing import Expr, product
from ..ir.nodes import (
    Buffer, ComputedBuffer, ExternKernel, MultiOutput, MutationBuffer, Reduction, Scan, format_node, input_aliases,
    iter_ir_leaves, resplit_reduction, underlying_buffer, updated_input,
)
from ..logs import artifact_enabled, log_artifact
from ..config import config
from ..ir.indexing import shape_env_size_hint
from .dependencies import ReadWrites, StarDep, column_read_writes, extract_read_writes
from . import memory_order, mix_order
from .fusion import KernelGroup, fuse_groups


class SchedulerNode:
    """A Pointwise, Reduction or Scan `ComputedBuffer` with its dependencies.

    ``order`` is its position in the lowered graph; ``group`` is ``(numel, rnumel)``:
    its x domain size and its reduction (or scan) size (1 for a Pointwise). ``column``:
    for the first stage of a split sum in pieces of rows (`mix_order`), the same node
    seen as the unsplit sum (`dependencies.column_read_writes`; group ``(rows,
    outputs)``), which a row kernel over those rows can compute; else None.
    """

    def __init__(self, buffer: ComputedBuffer, order: int):
        self.node = buffer
        self.name = buffer.name
        self.order = order
        self.read_writes: ReadWrites = extract_read_writes(buffer)
        data = buffer.data
        rnumel = data.get_reduction_numel() if isinstance(data, (Reduction, Scan)) else sympy.Integer(1)
        self.group: tuple[Expr, Expr] = (product(data.ranges), rnumel)
        self.column: Optional[SchedulerNode] = None
        # for an update of a graph input: the input's names (it and extern aliases), set by the scheduler
        self.update_aliases: set[str] = set()
        origin = data.split_origin if isinstance(data, Reduction) else None
        if origin is not None and origin.mix_order:
            column = column_read_writes(buffer)
            self.column = copy.copy(self)
            self.column.read_writes = column
            self.column.group = (product(column.reduction_ranges), product(column.ranges))

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.node.data, Reduction)

    def read_names(self) -> set[str]:
        return self.read_writes.read_names()

    def __repr__(self) -> str:
        return f"SchedulerNode({self.name})"


class ExternSchedulerNode:
    """An `ExternKernel` call or a `MultiOutput` extraction; reads whole buffers."""

    def __init__(self, buffer: Union[ExternKernel, MultiOutput], order: int):
        self.node = buffer
        self.name = buffer.name
        self.order = order
        if isinstance(buffer, MultiOutput):
            self.reads = [StarDep(buffer.parent.name)]
        else:
            names = dict.fromkeys(underlying_buffer(x).name for x in buffer.inputs())
            self.reads = [StarDep(n) for n in names]

    def read_names(self) -> set[str]:
        return {d.name for d in self.reads}

    @property
    def names(self) -> list[str]:
        return [self.name]

    def __repr__(self) -> str:
        return f"ExternSchedulerNode({self.name})"


Step = Union[KernelGroup, ExternSchedulerNode]


def _extractions_after_their_extern(steps: list[Step]) -> list[Step]:
    """``steps`` with each `MultiOutput` step moved right after its multi-output extern:
    the wrapper's tuple holds every element until the last is extracted, so extracting
    late would keep them all live. (Moving a step up to its only producer keeps the
    order topological.)"""
    extractions: dict[str, list[Step]] = {}
    for step in steps:
        if isinstance(step, ExternSchedulerNode) and isinstance(step.node, MultiOutput):
            extractions.setdefault(step.node.parent.name, []).append(step)
    out = []
    for step in steps:
        if isinstance(step, ExternSchedulerNode) and isinstance(step.node, MultiOutput):
            continue
        out.append(step)
        if isinstance(step, ExternSchedulerNode):
            out.extend(extractions.get(step.name, ()))
    return out


class Scheduler:
    """Schedules the buffers of a lowered graph.

    Attributes (after construction):
        steps: kernel groups and extern nodes in execution order.
        removed_buffers: names of intermediate buffers that are never materialised.
        frees: ``frees[i]`` lists the names the wrapper may drop after step ``i``;
            ``frees[-1]`` (key -1) the graph inputs that are never read.
        output_names: buffers (underlying) that the graph returns.
        peak_memory: the estimated peaks of the graph order and of ``steps``
            (`memory_order.PeakMemory`).
    """

    def __init__(self, graph):
        self.graph = graph
        self.output_names = {
            underlying_buffer(x).name for x in iter_ir_leaves(graph.graph_outputs)
        }
        self.buffers: dict[str, Buffer] = {b.name: b for b in graph.buffers}
        nodes = []
        for order, buffer in enumerate(graph.buffers):
            if isinstance(buffer, MutationBuffer):
                # last, as AOTAutograd's copy_ is: after the readers of the old value even
                # in a kernel it shares with them (a reader realized at the graph's output
                # is registered after it)
                nodes.append(SchedulerNode(buffer, order + len(graph.buffers)))
            elif isinstance(buffer, ComputedBuffer):
                nodes.append(SchedulerNode(buffer, order))
            elif isinstance(buffer, (ExternKernel, MultiOutput)):
                nodes.append(ExternSchedulerNode(buffer, order))
            else:
                raise TypeError(f"cannot schedule {type(buffer).__name__} {buffer.name}")
        self.nodes = self._split_for_mix_order(self._dead_code_elimination(nodes))
        self.dag = self._build_graph()
        fuse_groups(self.dag, self._numel_of, lambda msg: log_artifact("fusion", msg))
        self.steps: list[Step] = list(nx.lexicographical_topological_sort(self.dag, key=lambda s: s.order))
        self.removed_buffers = self._removable_buffers()
        self.steps, self.peak_memory = self._order_for_memory()
        self.frees = self._plan_frees()
        if artifact_enabled("schedule"):
            log_artifact("schedule", self.describe())

    def _numel_of(self, name: str) -> Expr:
        buffer = self.buffers.get(name) or self.graph.graph_inputs[name]
        return buffer.layout.numel()

    def _dead_code_elimination(self, nodes: list) -> list:
        """Drop pure nodes (Pointwise, MultiOutput) that nothing reads and the graph does
        not return (an update of an input is not pure)."""
        while True:
            read = set(self.output_names)
            for n in nodes:
                read |= n.read_names()
            alive = [n for n in nodes if n.name in read or isinstance(n.node, ExternKernel) or updated_input(n.node)]
            if len(alive) == len(nodes):
                return nodes
            nodes = alive

    def _split_for_mix_order(self, nodes: list) -> list:
        """``nodes`` with each split sum `mix_order.plan` picks split again into pieces
        of `mix_order.MIX_ORDER_ROWS` rows (both stages' nodes rebuilt)."""
        pairs = mix_order.plan(nodes)
        for partial, final in pairs:
            resplit_reduction(partial.node, final.node, mix_order.MIX_ORDER_ROWS, mix_order=True)
        rebuilt = {n.name for pair in pairs for n in pair}
        return [SchedulerNode(n.node, n.order) if n.name in rebuilt else n for n in nodes]

    def _build_graph(self) -> nx.DiGraph:
        dag = nx.DiGraph()
        step_of: dict[str, object] = {}
        for n in self.nodes:
            step = KernelGroup([n]) if isinstance(n, SchedulerNode) else n
            dag.add_node(step)
            step_of[n.name] = step
        for n in self.nodes:
            consumer = step_of[n.name]
            for name in n.read_names():
                producer = step_of.get(name)
                if producer is not None and producer is not consumer:
                    dag.add_edge(producer, consumer)
        # an input's update runs after every other reader of the input's old value,
        # under its own name or an extern's alias of it
        readers: dict[str, list] = {}
        for n in self.nodes:
            for name in n.read_names():
                readers.setdefault(name, []).append(n)
        for n in self.nodes:
            target = updated_input(n.node)
            if target is None:
                continue
            n.update_aliases = input_aliases(self.buffers.values(), {target.name})
            for reader in {r for name in n.update_aliases for r in readers.get(name, ())} - {n}:
                dag.add_edge(step_of[reader.name], step_of[n.name])
        return dag

    def _order_for_memory(self) -> tuple[list[Step], memory_order.PeakMemory]:
        """The graph-order ``steps``, or `memory_order`'s reordering of them when that
        lowers the estimated peak (``config.reorder_for_peak_memory``).

        A graph with data-dependent sizes (a symbol read from a buffer the graph
        computes, e.g. after ``nonzero``) keeps graph order: the steps that use such a
        symbol depend on the step defining it through no buffer.
        """
        hint = shape_env_size_hint()
        multi_outputs: dict[str, list[MultiOutput]] = {}
        for n in self.nodes:
            if isinstance(n.node, MultiOutput):
                multi_outputs.setdefault(n.node.parent.name, []).append(n.node)
        memory = {step: self._step_memory(step, multi_outputs, hint) for step in self.steps}
        donated = {name: hint(self.graph.graph_inputs[name].layout.storage_nbytes())
                   for name in self.graph.donated_inputs}
        data_dependent = any(source[0] in self.buffers for source in self.graph.symbol_sources.values())
        if not config.reorder_for_peak_memory or data_dependent:
            peak = memory_order.estimate_peak(self.steps, memory, self.output_names, donated)
            return self.steps, memory_order.PeakMemory(peak, peak, "graph order")
        dag = self.dag.copy()
        ordered = [s for s in self.steps
                   if isinstance(s, ExternSchedulerNode) and memory_order.keeps_graph_order(s.node)]
        dag.add_edges_from(zip(ordered, ordered[1:]))
        steps, peak = memory_order.reorder_for_peak_memory(self.steps, dag, memory, self.output_names, donated)
        if peak.method == "graph order":
            return steps, peak
        steps = _extractions_after_their_extern(steps)
        return steps, dataclasses.replace(
            peak, chosen=memory_order.estimate_peak(steps, memory, self.output_names, donated))

    def _step_memory(self, step: Step, multi_outputs: dict[str, list[MultiOutput]],
                     hint: Callable[[Expr], int]) -> memory_order.StepMemory:
        """The buffers ``step`` brings into memory and reads: a kernel's stored outputs;
        an extern's output, or for a multi-output extern the tensors it returns (its
        `MultiOutput` steps allocate nothing)."""
        if isinstance(step, KernelGroup):
            written = [n.node for n in step.nodes if n.name not in self.removed_buffers]
            reads = step.reads()
        else:
            node = step.node
            if isinstance(node, MultiOutput):
                written = []
            elif node.layout is None:
                written = multi_outputs.get(node.name, [])
            else:
                written = [node]
            reads = step.read_names()
        return memory_order.StepMemory({b.name: hint(b.layout.storage_nbytes()) for b in written}, reads)

    def _readers(self) -> dict[str, set]:
        readers: dict[str, set] = {}
        for step in self.steps:
            nodes = step.nodes if isinstance(step, KernelGroup) else [step]
            for n in nodes:
                for name in n.read_names():
                    readers.setdefault(name, set()).add(step)
        return readers

    def _removable_buffers(self) -> set[str]:
        readers = self._readers()
        removed = set()
        for step in self.steps:
            if not isinstance(step, KernelGroup):
                continue
            for name in step.writes():
                if name not in self.output_names and not updated_input(self.buffers[name]) \
                        and readers.get(name, set()) <= {step}:
                    removed.add(name)
        return removed

    def _plan_frees(self) -> dict[int, list[str]]:
        last_use: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            reads = step.reads() if isinstance(step, KernelGroup) else step.read_names()
            for name in reads:
                last_use[name] = i
            for name in step.names:
                last_use.setdefault(name, i)
                target = updated_input(self.buffers[name])
                if target is not None:  # the wrapper binds it to the input there
                    last_use[target.name] = i
        frees: dict[int, list[str]] = {}
        freeable = {
            name for name, buf in {**self.graph.graph_inputs, **self.buffers}.items()
            if not getattr(buf, "is_constant", False)
        }
        for name in self.graph.graph_inputs:
            if name in freeable and name not in last_use:
                last_use[name] = -1
        for name, i in last_use.items():
            if name in freeable and name not in self.output_names and name not in self.removed_buffers:
                frees.setdefault(i, []).append(name)
        return frees

    def describe(self) -> str:
        """The schedule, one line per step after the estimated peaks (the ``schedule``
        log artifact)."""
        peak = self.peak_memory
        lines = [f"estimated peak memory: {peak.graph_order} bytes in graph order, "
                 f"{peak.chosen} bytes in the order below ({peak.method})"]
        for i, step in enumerate(self.steps):
            if isinstance(step, KernelGroup):
                names = [f"{n}{' (removed)' if n in self.removed_buffers else ''}" for n in step.names]
                lines.append(f"{i}: kernel of group ({step.numel}, {step.rnumel}): {', '.join(names)}")
            else:
                node = step.node
                what = node.op_name if isinstance(node, ExternKernel) else f"{node.parent.name}[{node.index}]"
                lines.append(f"{i}: extern {step.name} = {what}")
            if self.frees.get(i):
                lines.append(f"   free {', '.join(self.frees[i])}")
        return "\n".join(lines)

    def pre_fusion_text(self) -> str:
        """IR before fusion, one node after another (the ``ir_pre_fusion.txt`` dump;
        fusion groups the nodes and leaves their IR as it was)."""
        return "\n\n".join(format_node(n.node) for n in self.nodes)

    def post_fusion_text(self) -> str:
        """IR after fusion, grouped by step (the ``ir_post_fusion.txt`` dump)."""
        parts = []
        for i, step in enumerate(self.steps):
            if isinstance(step, KernelGroup):
                header = f"# step {i}: kernel group ({', '.join(step.names)}), group ({step.numel}, {step.rnumel})"
                body = "\n\n".join(
                    format_node(n.node) + (" [removed]" if n.name in self.removed_buffers else "")
                    for n in step.nodes
                )
            else:
                header = f"# step {i}: extern"
                body = format_node(step.node)
            parts.append(header + "\n" + body)
        return "\n\n".join(parts)

