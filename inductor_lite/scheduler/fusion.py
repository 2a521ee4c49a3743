"""Fusion of Pointwise and Reduction nodes into kernel groups.

A `KernelGroup` is the set of scheduler nodes one generated kernel computes. It has a
group ``(numel, rnumel)``: a pointwise kernel ``(N, 1)``, a reduction kernel ``(N, R)``
(TorchInductor's node groups, ``codegen/simd.py``). Each node has a `Placement` in the
kernel (`dependencies.kernel_vars`): a reduction, a full-domain pointwise node over
``N * R`` elements, or an x-only pointwise node over ``N``.

Two groups may fuse when (`fusion_blocker` returns None):

- their groups agree: equal pointwise domains; a reduction group and a pointwise group
  whose nodes fit it (``N * R`` or ``N`` elements); or equal reduction groups;
- every read one makes of a buffer the other writes is at the *kernel index* of that
  write (the same ``(xindex, rindex)``), so the value is computed by the same program
  (no other program's store is needed): a reduction's result read by a full-domain
  node must be read at its row, independently of ``rindex``;
- fusing creates no cycle: no path from one to the other through a third group or
  extern in the dependency graph;
- neither holds a scatter (`ir.nodes.ScatterBuffer`): it runs alone, after the
  kernel writing its target's initial values and before any reader of the result;
- an input's update (`ir.nodes.MutationBuffer`) joins only a pointwise kernel whose
  reads of the input are at the element it writes (it comes last in the kernel:
  every lane reads its elements, then overwrites them); every other reader of the
  input's old value runs before it.

*Mix-order fusion* (TorchInductor's ``MixOrderReduction``): a group of first stages
of split sums in pieces of rows (`mix_order`: a column sum such as LayerNorm's weight
gradient) joins a row-reduction group ``(N, R)`` over the same rows as *column*
reductions (`SchedulerNode.column`, group ``(N, R)`` too). The kernel then makes one
pass over the rows for both: each program reduces its rows persistently (``R``
static, at most `mix_order.MIX_ORDER_MAX_COLS`, every read contiguous along the row)
and sums its `KernelGroup.rows_per_program` rows for the column partials.

Candidates are producer/consumer pairs and siblings reading a buffer at the same
kernel index; the score is the memory traffic saved (`fusion_score`). `fuse_groups`
fuses greedily, best score first, until nothing changes (TorchInductor's scheme), then
gives a group of pieces of rows that joined no row kernel its column form too; the
``fusion`` log artifact says why each candidate pair fused or did not.
"""

from __future__ import annotations

import itertools
from typing import Callable, Iterable, Optional, Sequence

import networkx as nx
import sympy

from ..ir.indexing import Expr, known_equal
from ..ir.nodes import MutationBuffer, ScatterBuffer
from .dependencies import Placement
from .mix_order import MIX_ORDER_MAX_COLS, first_read_across_rows

MAX_SIBLING_READERS = 32
"""Buffers read by more groups than this are not used to pair siblings (quadratic)."""

Group = tuple[Expr, Expr]


class KernelGroup:
    """Scheduler nodes fused into one kernel, in execution order.

    Attributes:
        nodes: the `SchedulerNode`s (graph order, which is a topological order).
        numel, rnumel: the group: x domain and reduction sizes (sympy; rnumel 1 for a
            pointwise kernel).
        order: the smallest original position (for a stable schedule).
        rows_per_program: for a mix-order group (with column reductions), the rows
            each program reduces (a column partial's piece); else None.
    """

    def __init__(self, nodes: list, group: Optional[Group] = None, rows_per_program: Optional[int] = None):
        self.nodes = sorted(nodes, key=lambda n: n.order)
        self.numel, self.rnumel = group if group is not None else self.nodes[0].group
        self.order = self.nodes[0].order
        self.rows_per_program = rows_per_program

    @property
    def group(self) -> Group:
        return self.numel, self.rnumel

    @property
    def is_reduction(self) -> bool:
        return self.rnumel != 1

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def writes(self) -> set[str]:
        return {n.name for n in self.nodes}

    def reads(self) -> set[str]:
        """Names of buffers read from memory (not written inside the group)."""
        written = self.writes()
        return {d.name for n in self.nodes for d in n.read_writes.reads} - written

    def placements(self, group: Group) -> Optional[dict[str, Placement]]:
        """Each node's placement in a kernel of ``group``; None if one does not fit."""
        out = {}
        for n in self.nodes:
            placement = n.read_writes.placement(*group)
            if placement is None:
                return None
            out[n.name] = placement
        return out

    def kernel_reads(self, name: str, group: Group, placements: dict[str, Placement]) -> set[Expr]:
        return {d.kernel_index(placements[n.name], *group)
                for n in self.nodes for d in n.read_writes.reads if d.name == name}

    def kernel_write(self, name: str, group: Group, placements: dict[str, Placement]) -> Optional[Expr]:
        for n in self.nodes:
            if n.name == name:
                return n.read_writes.writes[0].kernel_index(placements[name], *group)
        return None

    def has_scatter(self) -> bool:
        """Whether a node writes through computed indices (`ir.nodes.ScatterBuffer`)."""
        return any(isinstance(n.node, ScatterBuffer) for n in self.nodes)

    def has_input_update(self) -> bool:
        """Whether a node stores into a graph input (`ir.nodes.MutationBuffer`)."""
        return any(isinstance(n.node, MutationBuffer) for n in self.nodes)

    def origins(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for n in self.nodes:
            out.update(n.node.origins)
        return out

    def __repr__(self) -> str:
        return f"KernelGroup({', '.join(self.names)})"


def _itemsize(node) -> int:
    return node.node.layout.dtype.itemsize


def merged_group(a: KernelGroup, b: KernelGroup) -> Optional[Group]:
    """The group of a kernel computing both, or None when their groups disagree."""
    if a.is_reduction and b.is_reduction:
        same = known_equal(a.numel, b.numel) and known_equal(a.rnumel, b.rnumel)
        return a.group if same else None
    if a.is_reduction or b.is_reduction:
        return a.group if a.is_reduction else b.group
    return a.group if known_equal(a.numel, b.numel) else None


def _column_form(g: KernelGroup, row: KernelGroup) -> Optional[KernelGroup]:
    """``g``'s nodes as column reductions in a kernel of ``row``'s group (mix-order),
    or None when ``g`` is not all first stages of sums split into pieces of rows
    (`SchedulerNode.column`) of ``row``'s rows, or ``row`` is not a row kernel (a
    reduction group with a node of its own, not a group of such pieces too)."""
    if (g.rows_per_program is not None or not row.is_reduction or any(n.column is None for n in g.nodes)
            or all(n.column is not None for n in row.nodes)):
        return None
    chunks = {n.node.data.split_origin.chunk for n in g.nodes}
    if len(chunks) != 1 or row.rows_per_program not in (None, *chunks):
        return None
    if not all(known_equal(n.column.group[0], row.numel) and known_equal(n.column.group[1], row.rnumel)
               for n in g.nodes):
        return None
    return KernelGroup([n.column for n in g.nodes], row.group, chunks.pop())


def _as_fused(a: KernelGroup, b: KernelGroup) -> tuple[KernelGroup, KernelGroup, Optional[Group]]:
    """``a`` and ``b`` as one kernel would compute them, and that kernel's group (None
    when the groups disagree). A group of pieces of rows beside a row kernel over those
    rows takes its column form (mix-order), even where its own group happens to equal
    the row kernel's (rows of 32)."""
    column = _column_form(b, a)
    if column is not None:
        return a, column, a.group
    column = _column_form(a, b)
    if column is not None:
        return column, b, b.group
    return a, b, merged_group(a, b)


def _mix_order_blocker(groups: Sequence[KernelGroup], group: Group) -> Optional[str]:
    """Why a mix-order kernel of ``group`` cannot compute ``groups`` (every node placed
    in it), or None."""
    rnumel = sympy.sympify(group[1])
    if not (rnumel.is_number and int(rnumel) <= MIX_ORDER_MAX_COLS):
        return f"mix-order: rows of {rnumel} elements are not kept in registers"
    written = set().union(*(g.writes() for g in groups))
    for g in groups:
        for n in g.nodes:
            name = first_read_across_rows(n.read_writes, group, written)
            if name is not None:
                return f"mix-order: {name} is not read along its rows"
    return None


def _lines_up(producer: KernelGroup, consumer: KernelGroup, group: Group, placements: dict) -> bool:
    for name in producer.writes() & consumer.reads():
        write = producer.kernel_write(name, group, placements)
        if any(read != write for read in consumer.kernel_reads(name, group, placements)):
            return False
    return True


def _creates_cycle(graph: nx.DiGraph, a, b) -> bool:
    """True when fusing ``a`` and ``b`` would close a cycle through another node."""
    for src, dst in ((a, b), (b, a)):
        for succ in graph.successors(src):
            if succ is not dst and nx.has_path(graph, succ, dst):
                return True
    return False


def _describe(g: KernelGroup) -> str:
    mix = f", mix-order: {g.rows_per_program} rows a program" if g.rows_per_program is not None else ""
    return f"({g.numel}, {g.rnumel}{mix})"


def fusion_blocker(graph: nx.DiGraph, a: KernelGroup, b: KernelGroup) -> Optional[str]:
    """Why one kernel cannot compute both groups, or None when it can (see the module docstring)."""
    blocker = _group_blocker(a, b)
    if blocker is None and _creates_cycle(graph, a, b):
        return "fusing would create a cycle through another node"
    return blocker


def _group_blocker(a: KernelGroup, b: KernelGroup) -> Optional[str]:
    """`fusion_blocker` without the cycle check."""
    if a.has_scatter() or b.has_scatter():
        # its stores land anywhere in its target: they must follow every write of the
        # target's initial values and precede every read of the result, grid-wide
        return "a scatter runs in a kernel of its own"
    update = a.has_input_update() or b.has_input_update()
    if update and (a.is_reduction or b.is_reduction):
        return "an input's update fuses only with pointwise kernels"
    a, b, group = _as_fused(a, b)
    if group is None:
        return f"groups differ: {_describe(a)} vs {_describe(b)}"
    placements = {}
    for g in (a, b):
        placed = g.placements(group)
        if placed is None:
            return f"{g.names} do not fit a kernel of group ({group[0]}, {group[1]})"
        placements.update(placed)
    if a.rows_per_program is not None or b.rows_per_program is not None:
        blocker = _mix_order_blocker((a, b), group)
        if blocker is not None:
            return blocker
    if not (_lines_up(a, b, group, placements) and _lines_up(b, a, group, placements)):
        return "a read does not line up with the write it depends on (another row, or another rindex)"
    if update and not _reads_updated_inputs_in_place(a, b, group, placements):
        return "a read of an updated input is not at the element its update writes"
    return None


def _reads_updated_inputs_in_place(a: KernelGroup, b: KernelGroup, group: Group,
                                   placements: dict[str, Placement]) -> bool:
    """Whether every read, in one kernel computing ``a`` and ``b``, of an input that
    one of them updates (`ir.nodes.MutationBuffer`; under any alias name) is at the
    element the update writes: each lane then reads its elements before it overwrites
    them, and no other lane's elements (the update comes last in the kernel)."""
    nodes = list(itertools.chain(a.nodes, b.nodes))
    for u in nodes:
        if not isinstance(u.node, MutationBuffer):
            continue
        write = u.read_writes.writes[0].kernel_index(placements[u.name], *group)
        for n in nodes:
            for d in n.read_writes.reads:
                if d.name in u.update_aliases and (
                        d.name != u.node.target.name or d.kernel_index(placements[n.name], *group) != write):
                    return False
    return True


def fusion_score(a: KernelGroup, b: KernelGroup, sizes: Callable[[str], Expr]) -> int:
    """Bytes of memory traffic saved by fusing (a static estimate; 0: no benefit).

    A buffer one group writes and the other reads saves its read (and its write if
    nobody else needs it, which is not known here); a buffer both read at the same
    kernel index saves one read. ``sizes(name)`` gives a buffer's element count.
    """
    a, b, group = _as_fused(a, b)
    if group is None:
        return 0
    placements = {}
    for g in (a, b):
        placed = g.placements(group)
        if placed is None:
            return 0
        placements.update(placed)
    total = 0
    by_name = {n.name: n for n in itertools.chain(a.nodes, b.nodes)}
    for producer, consumer in ((a, b), (b, a)):
        for name in producer.writes() & consumer.reads():
            total += 2 * _static(sizes(name)) * _itemsize(by_name[name])
    for name in a.reads() & b.reads():
        if a.kernel_reads(name, group, placements) & b.kernel_reads(name, group, placements):
            total += _static(sizes(name))
    return total


def _static(n: Expr) -> int:
    """A number for scoring: symbolic sizes count as large."""
    n = sympy.sympify(n)
    return int(n) if n.is_number else 1 << 20


def _candidate_pairs(graph: nx.DiGraph, groups: list[KernelGroup]) -> Iterable[tuple[KernelGroup, KernelGroup]]:
    kernel_groups = set(groups)
    seen = set()
    for a in groups:
        for b in graph.successors(a):
            if b in kernel_groups and (a, b) not in seen:
                seen.add((a, b))
                yield a, b
    readers: dict[str, list[KernelGroup]] = {}
    for g in groups:
        for name in g.reads():
            readers.setdefault(name, []).append(g)
    for name, users in readers.items():
        if len(users) > MAX_SIBLING_READERS:
            continue
        for a, b in itertools.combinations(users, 2):
            key = (a, b) if a.order < b.order else (b, a)
            if key not in seen and (b, a) not in seen:
                seen.add(key)
                yield key


def _merge(graph: nx.DiGraph, a: KernelGroup, b: KernelGroup) -> KernelGroup:
    fused_a, fused_b, group = _as_fused(a, b)
    fused = KernelGroup(fused_a.nodes + fused_b.nodes, group,
                        fused_a.rows_per_program or fused_b.rows_per_program)
    preds = (set(graph.predecessors(a)) | set(graph.predecessors(b))) - {a, b}
    succs = (set(graph.successors(a)) | set(graph.successors(b))) - {a, b}
    graph.remove_nodes_from([a, b])
    graph.add_node(fused)
    graph.add_edges_from((p, fused) for p in preds)
    graph.add_edges_from((fused, s) for s in succs)
    return fused


def fuse_groups(graph: nx.DiGraph, sizes: Callable[[str], Expr], log: Callable[[str], None],
                max_rounds: int = 10) -> None:
    """Greedily fuse the `KernelGroup` nodes of ``graph`` in place.

    ``graph`` is the dependency DAG over kernel groups and extern nodes (an edge
    ``u -> v``: ``v`` reads a buffer ``u`` writes). Each accepted or rejected
    candidate is reported through ``log``; then `_use_column_forms`.
    """
    for _ in range(max_rounds):
        groups = sorted((n for n in graph.nodes if isinstance(n, KernelGroup)), key=lambda g: g.order)
        scored = []
        for a, b in _candidate_pairs(graph, groups):
            score = fusion_score(a, b, sizes)
            if score > 0:
                scored.append((score, a, b))
            else:
                log(f"not fused: {a.names} {_describe(a)} + {b.names} {_describe(b)}: "
                    f"{_group_blocker(a, b) or 'no memory traffic saved'}")
        scored.sort(key=lambda t: (-t[0], t[1].order, t[2].order))
        touched: set[KernelGroup] = set()
        fused_any = False
        for score, a, b in scored:
            if a in touched or b in touched:
                continue
            blocker = fusion_blocker(graph, a, b)
            if blocker is not None:
                log(f"not fused: {a.names} {_describe(a)} + {b.names} {_describe(b)} (score {score}): {blocker}")
                continue
            fused = _merge(graph, a, b)
            touched.update((a, b, fused))
            fused_any = True
            log(f"fused {a.names} + {b.names} into group {_describe(fused)} (saves ~{score} bytes)")
        if not fused_any:
            break
    _use_column_forms(graph, log)


def _use_column_forms(graph: nx.DiGraph, log: Callable[[str], None]) -> None:
    """Give each group of split sums in pieces of rows (`mix_order`) that fused with no
    row kernel its column form too: a program sums its piece's rows, read whole and
    contiguous, where their own group ``(pieces * outputs, rows a piece)`` would read
    tiles of few rows (32 rows of 64 outputs: 4 KB a program in bf16)."""
    for g in [n for n in graph.nodes if isinstance(n, KernelGroup)]:
        if g.rows_per_program is not None or any(n.column is None for n in g.nodes):
            continue
        groups = {n.column.group for n in g.nodes}
        chunks = {n.node.data.split_origin.chunk for n in g.nodes}
        if len(groups) != 1 or len(chunks) != 1:
            continue
        column = KernelGroup([n.column for n in g.nodes], groups.pop(), chunks.pop())
        blocker = _mix_order_blocker((column,), column.group)
        if blocker is not None:
            log(f"{g.names} keep their split form: {blocker}")
            continue
        graph.add_node(column)
        graph.add_edges_from((p, column) for p in graph.predecessors(g))
        graph.add_edges_from((column, s) for s in graph.successors(g))
        graph.remove_node(g)
        log(f"{g.names} run in column form, group {_describe(column)}")
