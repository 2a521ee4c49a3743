"""Scheduler: MemoryDep extraction, index canonicalisation, fusion legality, buffer removal, frees."""

import networkx as nx
import pytest
import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from inductor_lite.fx_lowering.decompositions import decomposition_table
from inductor_lite.fx_lowering import graph as graph_lowering
from inductor_lite.fx_lowering.graph import GraphLowering
from inductor_lite.ir.indexing import abs_bound, index_var, simplify_index, upper_bound
from inductor_lite.ir.nodes import ComputedBuffer
from inductor_lite.scheduler.dependencies import FLAT, MemoryDep, extract_read_writes
from inductor_lite.scheduler.fusion import KernelGroup, fusion_blocker, fusion_score
from inductor_lite.scheduler.scheduler import ExternSchedulerNode, Scheduler, SchedulerNode


@pytest.fixture(autouse=True)
def realize_reused(monkeypatch):
    """These tests are about buffers read by several kernels: realize every value with
    several users instead of recomputing cheap ones in each user."""
    monkeypatch.setattr(graph_lowering, "REALIZE_REUSED_OPS", -1)


i0, i1, i2 = (index_var(f"i{d}") for d in range(3))


def lower(fn, *inputs, mode="fake"):
    gm = make_fx(fn, tracing_mode=mode, decomposition_table=decomposition_table())(*inputs)
    graph = GraphLowering(gm)
    graph.run()
    return graph


def schedule(fn, *inputs):
    return Scheduler(lower(fn, *inputs))


def kernel_groups(scheduler):
    return [s for s in scheduler.steps if isinstance(s, KernelGroup)]


def unfused(graph):
    """Single-node groups and the dependency DAG, before any fusion."""
    nodes, step_of = [], {}
    dag = nx.DiGraph()
    for order, buf in enumerate(graph.buffers):
        node = SchedulerNode(buf, order) if isinstance(buf, ComputedBuffer) else ExternSchedulerNode(buf, order)
        step = KernelGroup([node]) if isinstance(node, SchedulerNode) else node
        nodes.append(node)
        step_of[buf.name] = step
        dag.add_node(step)
    for node in nodes:
        for name in node.read_names():
            if name in step_of:
                dag.add_edge(step_of[name], step_of[node.name])
    return dag, step_of


# ---------------------------------------------------------------------------- dependencies


def test_memory_deps_of_a_pointwise_node():
    graph = lower(lambda x, y: x + y.t(), torch.randn(4, 6), torch.randn(6, 4))
    (buf,) = graph.buffers
    rw = extract_read_writes(buf)
    reads = {d.name: d for d in rw.reads}
    assert reads["x_1"].index == 6 * i0 + i1
    assert reads["y_1"].index == i0 + 4 * i1
    assert reads["x_1"].size == (4, 6)
    (write,) = rw.writes
    assert write.name == buf.name and write.index == 6 * i0 + i1
    assert reads["x_1"].flat_index() == FLAT == write.flat_index()
    assert reads["y_1"].flat_index() != FLAT


def test_flat_index_is_canonical_across_loop_shapes():
    as_2d = MemoryDep("b", 4 * i0 + i1, (i0, i1), (6, 4))
    as_1d = MemoryDep("b", i0, (i0,), (24,))
    as_3d = MemoryDep("b", 12 * i0 + 4 * i1 + i2, (i0, i1, i2), (2, 3, 4))
    assert as_2d.flat_index() == as_1d.flat_index() == as_3d.flat_index() == FLAT
    transposed = MemoryDep("b", i0 + 6 * i1, (i0, i1), (6, 4))
    assert transposed.flat_index() != FLAT


def test_flat_index_with_symbolic_sizes():
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    dep = MemoryDep("b", s0 * i0 + i1, (i0, i1), (3, s0))
    assert dep.flat_index() == FLAT
    broadcast = MemoryDep("b", i1, (i0, i1), (3, s0))
    assert broadcast.flat_index() == ModularIndexing(FLAT, 1, s0)


# ---------------------------------------------------------------------------- indexing


def test_simplify_index_joins_split_dimensions():
    x = FLAT
    assert simplify_index(4 * FloorDiv(x, 4) + ModularIndexing(x, 1, 4), {x: 24}) == x
    assert simplify_index(ModularIndexing(x, 1, 4) + 4 * ModularIndexing(x, 4, 3), {x: 24}) == ModularIndexing(x, 1, 12)
    assert simplify_index(ModularIndexing(x, 1, 32), {x: 24}) == x
    assert simplify_index(FloorDiv(x, 32), {x: 24}) == 0
    assert simplify_index(ModularIndexing(8 * x + 3, 1, 4), {x: 24}) == 3


def test_simplify_index_drops_digits_below_a_dividing_coefficient():
    """``(a + k*b) // (k*m)`` is ``b // m`` for ``0 <= a < k`` (a tile row of length k):
    a 3x3 weight's tiled copy to channels-last divides ``yindex`` alone."""
    x, y = FLAT, i0
    assert simplify_index(FloorDiv(x + 9 * y, 4608), {x: 9, y: 10**5}) == FloorDiv(y, 512)
    assert simplify_index(ModularIndexing(x + 9 * y, 9, 512), {x: 9, y: 10**5}) == ModularIndexing(y, 1, 512)
    assert simplify_index(ModularIndexing(x + 3136 * y, 3136, 64), {x: 3136, y: 100}) == ModularIndexing(y, 1, 64)
    s0, s1 = (sympy.Symbol(n, integer=True, positive=True) for n in ("s0", "s1"))
    assert simplify_index(FloorDiv(s1 * y + x, s0 * s1), {x: s1, y: 100}) == FloorDiv(y, s0)
    # a may reach k, or be negative: kept
    assert simplify_index(FloorDiv(x + 9 * y, 4608), {x: 10, y: 10**5}) == FloorDiv(x + 9 * y, 4608)
    assert simplify_index(FloorDiv(8 - x + 9 * y, 4608), {x: 9, y: 10**5}).has(x)
    for a, b in [(0, 0), (8, 511), (8, 512), (3, 4607), (5, 99999)]:
        assert simplify_index(FloorDiv(x + 9 * y, 4608), {x: 9, y: 10**5}).subs({x: a, y: b}) == (a + 9 * b) // 4608


def test_simplify_index_resolves_min_and_max_over_the_ranges():
    """A Min/Max that one argument always wins over the variables' ranges is that
    argument: a 3x3 average pool's window end ``Min(o + 2, 57)`` is ``o + 2`` for ``o <
    56``, so its window size is the number 9 (and no int64 index math is needed)."""
    o, p = i0, i1
    window = (sympy.Min(o + 2, 57) - (o - 1)) * (sympy.Min(p + 2, 57) - (p - 1))
    assert simplify_index(window, {o: 56, p: 56}) == 9
    assert simplify_index(sympy.Max(o - 1, 0), {o: 56}) == sympy.Max(o - 1, 0)  # o = 0 picks 0
    assert simplify_index(sympy.Max(o + 1, 0), {o: 56}) == o + 1
    # one more output row reaches past the padded input: kept
    assert simplify_index(sympy.Min(o + 2, 57), {o: 57}) == sympy.Min(o + 2, 57)
    assert abs_bound(sympy.Min(o + 2, 57) * 3, {o: 1000}) == 3 * 1001
    # an index and its own modulo that never wraps: the index
    assert simplify_index(sympy.Min(o, ModularIndexing(o, 1, 64)) + 1, {o: 56}) == o + 1


def test_upper_bound():
    assert upper_bound(6 * i0 + i1, {i0: 4, i1: 6}) == 24
    assert upper_bound(i0 - 1, {i0: 4}) is None
    assert upper_bound(FloorDiv(i0, 4) + ModularIndexing(i0, 1, 4), {i0: 24}) == 9


# ---------------------------------------------------------------------------- fusion legality


def test_producer_consumer_on_the_same_domain_can_fuse():
    graph = lower(lambda x: (lambda a: (a + 1, a * 2))(x.exp()), torch.randn(4, 6))
    dag, step_of = unfused(graph)
    exp, add, mul = (step_of[b.name] for b in graph.buffers)
    assert fusion_blocker(dag, exp, add) is None
    assert fusion_score(exp, add, lambda n: 24) > 0


def test_transposed_read_blocks_fusion():
    graph = lower(lambda x: (lambda a: (a + 1, a.t() * 2))(x.exp()), torch.randn(4, 6))
    dag, step_of = unfused(graph)
    exp, add, mul_t = (step_of[b.name] for b in graph.buffers)
    assert fusion_blocker(dag, exp, add) is None
    assert "line up" in fusion_blocker(dag, exp, mul_t)


def test_different_domains_block_fusion():
    graph = lower(lambda x: (lambda a: (a + 1, a[:, 0] * 2))(x.exp()), torch.randn(4, 6))
    dag, step_of = unfused(graph)
    exp, _, sliced = (step_of[b.name] for b in graph.buffers)
    assert "groups differ" in fusion_blocker(dag, exp, sliced)


def test_path_through_an_extern_blocks_fusion():
    graph = lower(lambda x: (lambda a: a + torch.mm(a, a))(x * 2), torch.randn(6, 6))
    dag, step_of = unfused(graph)
    producer, extern, consumer = (step_of[b.name] for b in graph.buffers)
    assert isinstance(extern, ExternSchedulerNode)
    assert "cycle" in fusion_blocker(dag, producer, consumer)


# ---------------------------------------------------------------------------- whole schedules


def test_pointwise_chain_is_one_kernel_without_intermediates():
    sched = schedule(lambda x: (lambda a: (a + 1, a * 2))(x.exp()), torch.randn(4, 6))
    (group,) = kernel_groups(sched)
    exp_buf = next(b.name for b in sched.graph.buffers if "exp" in b.origins)
    assert exp_buf in group.names and exp_buf in sched.removed_buffers
    assert len(group.names) == 3


def test_materialized_when_read_transposed():
    sched = schedule(lambda x: (lambda a: (a + 1, a.t() * 2))(x.exp()), torch.randn(4, 6))
    groups = kernel_groups(sched)
    assert len(groups) == 2
    assert not sched.removed_buffers


def test_siblings_reading_the_same_input_fuse():
    sched = schedule(lambda x: (x.exp(), x.sin()), torch.randn(4, 6))
    assert len(kernel_groups(sched)) == 1
    sched = schedule(lambda x, y: (x.exp(), y.sin()), torch.randn(4, 6), torch.randn(4, 6))
    assert len(kernel_groups(sched)) == 2


def test_schedule_respects_dependencies_and_plans_frees():
    sched = schedule(lambda x, w: torch.relu((x * 2) @ w) + 1, torch.randn(4, 5), torch.randn(5, 3))
    names = [s.names for s in sched.steps]
    position = {n: i for i, ns in enumerate(names) for n in ns}
    for step in sched.steps:
        reads = step.reads() if isinstance(step, KernelGroup) else step.read_names()
        for r in reads:
            if r in position:
                assert position[r] < position[step.names[0]]
    freed = [n for ns in sched.frees.values() for n in ns]
    assert len(freed) == len(set(freed))
    assert "x_1" in freed and "w_1" in freed
    assert not set(freed) & sched.output_names
    assert "extern" in sched.describe() and "kernel" in sched.describe()


def test_pre_and_post_fusion_text():
    sched = schedule(lambda x: (lambda a: (a + 1, a * 2))(x.exp()), torch.randn(4, 6))
    assert "ComputedBuffer" in sched.pre_fusion_text()
    post = sched.post_fusion_text()
    assert "[removed]" in post and "kernel group" in post


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
def test_symbolic_domains_fuse(mode):
    graph = lower(lambda x, y: (lambda a: (a + y, a * 2))(x.exp()), torch.randn(4, 6), torch.randn(6), mode=mode)
    sched = Scheduler(graph)
    assert len(kernel_groups(sched)) == 1
