"""Reordering the schedule for a lower peak memory (TorchInductor's
``memory.reorder_for_peak_memory``).

Graph order is a valid schedule but not always a frugal one. AOTAutograd's partitioner
puts the nodes that make saved tensors smaller (a float32 activation saved as its
bfloat16 cast) at the end of the forward graph, so in graph order every float32 source
stays live until the forward ends: a ViT-Base training forward holds about 0.4 GiB more
at its peak than it needs to.

`reorder_for_peak_memory` estimates the peak of the graph order and of a greedy order,
and keeps the graph order unless the greedy one is lower:

- *Estimate* (`estimate_peak`): a step allocates the buffers it writes to memory while
  everything it reads is still live, then frees each buffer it was the last reader
  of. Graph outputs are never freed; a backward's donated inputs count from the start
  and are freed after their last reader; other graph inputs belong to the caller and
  do not count. A multi-output extern's tensors are allocated by the extern's step.
- *Greedy order* (LPMF, "least peak memory first", after Inductor's
  ``topological_sort_lpmf``, from Kuo et al., "Buffer memory optimization for video
  codec application modeled in Simulink", DAC 2006): among the steps whose
  predecessors have run, take one whose allocation keeps within the peak reached so
  far and that leaves the fewest bytes live after it; if none fits, the one that
  allocates least. Ties keep graph order.

Dependencies are the scheduler's DAG (a step runs after the steps that write what it
reads) plus one ordering edge between consecutive externs whose order is observable:
random ops (the ``nondeterministic_seeded`` tag: they draw from the global generator in
turn), side-effecting ops (``ExternKernel.has_side_effects``) and collectives (the
functional c10d ops: every rank must issue them in one order, whatever size hints its
estimate saw). Everything else is functional, so any topological order computes the
same values.
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import Hashable, Iterable, Sequence

import networkx as nx
import torch

from ..ir.nodes import ExternKernel, MultiOutput


@dataclasses.dataclass
class StepMemory:
    """What one schedule step does to memory, in bytes at the size hints.

    Attributes:
        allocates: ``{buffer name: bytes}`` the step brings into memory.
        reads: names of the buffers it reads (graph inputs included).
    """

    allocates: dict[str, int]
    reads: set[str]


@dataclasses.dataclass(frozen=True)
class PeakMemory:
    """The estimated peaks of the graph order and of the order chosen, in bytes."""

    graph_order: int
    chosen: int
    method: str


COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d_functional")
"""Op namespaces of collectives, which keep their graph order."""


def keeps_graph_order(node) -> bool:
    """Whether an extern must run in graph order relative to the other such externs:
    it draws random numbers, has side effects or is a collective."""
    if isinstance(node, MultiOutput) or not isinstance(node, ExternKernel):
        return False
    op = node.op
    if not isinstance(op, torch._ops.OpOverload):
        return node.has_side_effects
    seeded = torch.Tag.nondeterministic_seeded in op.tags
    return seeded or node.has_side_effects or op.namespace in COLLECTIVE_NAMESPACES


def estimate_peak(order: Sequence[Hashable], memory: dict, outputs: set[str], donated: dict[str, int]) -> int:
    """The peak bytes of running ``order`` (see the module docstring).

    Args:
        order: the steps, a topological order of the dependencies.
        memory: ``{step: StepMemory}``.
        outputs: buffer names the graph returns (never freed).
        donated: ``{graph input name: bytes}`` that the graph may free (a backward's
            donated saved tensors).
    """
    remaining = _reader_counts(order, memory)
    live = sum(nbytes for name, nbytes in donated.items() if remaining.get(name))
    size = dict(donated)
    peak = live
    for step in order:
        mem = memory[step]
        size.update(mem.allocates)
        live += sum(mem.allocates.values())
        peak = max(peak, live)
        for name in mem.reads:
            remaining[name] -= 1
        for name in set(mem.reads) | set(mem.allocates):
            if not remaining.get(name) and name not in outputs:
                live -= size.pop(name, 0)
    return peak


def _reader_counts(steps: Iterable[Hashable], memory: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for step in steps:
        for name in memory[step].reads:
            counts[name] = counts.get(name, 0) + 1
    return counts


def lpmf_order(order: Sequence[Hashable], dag: nx.DiGraph, memory: dict, outputs: set[str],
               donated: dict[str, int]) -> list:
    """The greedy "least peak memory first" topological order of ``dag``'s steps (see
    the module docstring); ``order`` (the graph order) breaks ties.

    Each step's bytes freed by running it next are kept up to date as buffers lose
    readers, and ready steps sit in two heaps (by bytes left live after them, and by
    bytes allocated) with stale entries skipped, so a choice costs a logarithmic number
    of heap operations rather than a pass over every ready step.
    """
    position = {step: i for i, step in enumerate(order)}
    waiting = {step: dag.in_degree(step) for step in order}
    readers: dict[str, list] = {}
    for step in order:
        for name in memory[step].reads:
            readers.setdefault(name, []).append(step)
    remaining = {name: len(steps) for name, steps in readers.items()}
    size = dict(donated)
    for step in order:
        size.update(memory[step].allocates)
    allocated = {step: sum(memory[step].allocates.values()) for step in order}
    # bytes freed right after a step runs: buffers it reads last, and its own outputs nothing reads
    frees = {step: sum(size[n] for n in memory[step].allocates if not remaining.get(n) and n not in outputs)
             for step in order}
    for name, steps in readers.items():
        if len(steps) == 1 and name not in outputs:
            frees[steps[0]] += size.get(name, 0)

    by_net: list = []  # (allocated - frees, position, version, step)
    by_size: list = []  # (allocated, allocated - frees, position, version, step)
    version = dict.fromkeys(order, 0)
    done: set = set()

    def push(step) -> None:
        version[step] += 1
        net = allocated[step] - frees[step]
        heapq.heappush(by_net, (net, position[step], version[step], step))
        heapq.heappush(by_size, (allocated[step], net, position[step], version[step], step))

    def valid(entry) -> bool:
        return entry[-1] not in done and entry[-2] == version[entry[-1]]

    for step in order:
        if waiting[step] == 0:
            push(step)
    live = sum(nbytes for name, nbytes in donated.items() if remaining.get(name))
    peak = max(live, sum(size.get(n, 0) for n in outputs))
    schedule = []
    while by_net:
        # a step whose allocation fits under the peak so far, leaving the fewest bytes live
        gap, step, skipped = peak - live, None, []
        while by_net:
            entry = heapq.heappop(by_net)
            if not valid(entry):
                continue
            if allocated[entry[-1]] <= gap:
                step = entry[-1]
                break
            skipped.append(entry)
        for entry in skipped:
            heapq.heappush(by_net, entry)
        if step is None:  # none fits: the one allocating least
            while not valid(by_size[0]):
                heapq.heappop(by_size)
            step = by_size[0][-1]
        done.add(step)
        schedule.append(step)
        live += allocated[step]
        peak = max(peak, live)
        live -= frees[step]
        for name in memory[step].reads:
            remaining[name] -= 1
            if remaining[name] == 1 and name not in outputs:
                (last,) = (r for r in readers[name] if r not in done)
                frees[last] += size.get(name, 0)
                if waiting[last] == 0:
                    push(last)
        for succ in dag.successors(step):
            waiting[succ] -= 1
            if waiting[succ] == 0:
                push(succ)
        while by_net and not valid(by_net[0]):
            heapq.heappop(by_net)
    if len(schedule) != len(order):
        raise RuntimeError(f"LPMF scheduled {len(schedule)} of {len(order)} steps: the dependency graph has a cycle")
    return schedule


def reorder_for_peak_memory(order: Sequence[Hashable], dag: nx.DiGraph, memory: dict, outputs: set[str],
                            donated: dict[str, int]) -> tuple[list, PeakMemory]:
    """``order`` or a topological order of ``dag`` with a lower estimated peak.

    Args:
        order: the graph-order schedule (a topological order of ``dag``).
        dag: the steps' dependencies, ordering edges included; not modified.
        memory: ``{step: StepMemory}`` for every step.
        outputs, donated: as for `estimate_peak`.

    Returns:
        ``(schedule, PeakMemory)``.

    Raises:
        RuntimeError: ``dag`` has a cycle (a scheduler bug).
    """
    baseline = estimate_peak(order, memory, outputs, donated)
    greedy = lpmf_order(order, dag, memory, outputs, donated)
    greedy_peak = estimate_peak(greedy, memory, outputs, donated)
    if greedy_peak < baseline:
        return greedy, PeakMemory(baseline, greedy_peak, "lpmf")
    return list(order), PeakMemory(baseline, baseline, "graph order")

