"""Reordering the schedule for peak memory (`scheduler.memory_order`): the estimate, the
greedy order, the order constraints of random and side-effecting ops, and compiled
graphs whose reordered schedule computes eager's values at a lower planned peak."""

import networkx as nx
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import inductor_lite
from inductor_lite.codegen.wrapper import generate_wrapper, load_module
from inductor_lite.config import config
from inductor_lite.fx_lowering.decompositions import decomposition_table
from inductor_lite.fx_lowering.graph import GraphLowering
from inductor_lite.ir.nodes import ExternKernel, Layout, MultiOutput
from inductor_lite.scheduler import memory_order
from inductor_lite.scheduler.memory_order import StepMemory, estimate_peak, lpmf_order, reorder_for_peak_memory
from inductor_lite.scheduler.scheduler import Scheduler


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    with config.patch(fallback_on_error=False):
        yield
    torch._dynamo.reset()


@pytest.fixture
def peaks(monkeypatch) -> list:
    """The `memory_order.PeakMemory` of each graph the backend compiles, in order."""
    recorded = []
    build = inductor_lite.backend.generate_wrapper

    def recording(graph, scheduler, title):
        recorded.append(scheduler.peak_memory)
        return build(graph, scheduler, title)

    monkeypatch.setattr(inductor_lite.backend, "generate_wrapper", recording)
    return recorded


def _chain(*edges) -> nx.DiGraph:
    dag = nx.DiGraph()
    dag.add_edges_from(edges)
    return dag


def test_estimate_frees_after_the_last_reader_and_never_frees_outputs():
    memory = {
        "a": StepMemory({"A": 100}, {"in"}),
        "b": StepMemory({"B": 10}, {"A"}),
        "c": StepMemory({"C": 1}, {"A", "B"}),
    }
    # "in" is donated: live from the start, freed after a; A freed after c; B and C are outputs
    assert estimate_peak(["a", "b", "c"], memory, {"B", "C"}, {"in": 1000}) == 1100
    assert estimate_peak(["a", "b", "c"], memory, {"B", "C"}, {}) == 111
    # an output nothing reads stays; a buffer nothing reads and nobody returns goes at once
    memory["d"] = StepMemory({"D": 50}, set())
    assert estimate_peak(["d", "a", "b", "c"], memory, {"B", "C"}, {}) == 111
    assert estimate_peak(["d", "a", "b", "c"], memory, {"B", "C", "D"}, {}) == 161


def test_lpmf_runs_each_shrinking_step_as_soon_as_it_is_ready():
    # two float32 producers and their half-size casts, the casts last in graph order
    memory = {"p1": StepMemory({"P1": 8}, set()), "p2": StepMemory({"P2": 8}, set()),
              "c1": StepMemory({"C1": 4}, {"P1"}), "c2": StepMemory({"C2": 4}, {"P2"})}
    order = ["p1", "p2", "c1", "c2"]
    dag = _chain(("p1", "c1"), ("p2", "c2"))
    outputs = {"C1", "C2"}
    assert estimate_peak(order, memory, outputs, {}) == 20
    assert lpmf_order(order, dag, memory, outputs, {}) == ["p1", "c1", "p2", "c2"]
    schedule, peak = reorder_for_peak_memory(order, dag, memory, outputs, {})
    assert schedule == ["p1", "c1", "p2", "c2"] and (peak.graph_order, peak.chosen, peak.method) == (20, 16, "lpmf")


def test_a_cycle_is_reported():
    memory = {"a": StepMemory({}, set()), "b": StepMemory({}, set())}
    with pytest.raises(RuntimeError, match="cycle"):
        lpmf_order(["a", "b"], _chain(("a", "b"), ("b", "a")), memory, set(), {})


def test_random_side_effecting_and_collective_externs_keep_their_order():
    layout = Layout(torch.device("cpu"), torch.float32, [4], [1])
    aten = torch.ops.aten
    rand = ExternKernel("r", layout, aten.rand.default, [[4]], {}, {})
    mm = ExternKernel("m", layout, aten.mm.default, [], {}, {})
    effect = ExternKernel("e", layout, aten._linalg_check_errors.default, [], {}, {})
    effect.has_side_effects = True
    assert memory_order.keeps_graph_order(rand) and memory_order.keeps_graph_order(effect)
    assert not memory_order.keeps_graph_order(mm)
    if torch.distributed.is_available():  # every rank issues collectives in one order
        reduce = ExternKernel("c", layout, torch.ops._c10d_functional.all_reduce.default, [], {}, {})
        assert memory_order.keeps_graph_order(reduce)
    assert not memory_order.keeps_graph_order(MultiOutput("o", layout, rand, 0))


def _build(fn, *inputs):
    gm = make_fx(fn, decomposition_table=decomposition_table())(*inputs)
    graph = GraphLowering(gm)
    graph.run()
    scheduler = Scheduler(graph)
    return generate_wrapper(graph, scheduler, "test"), scheduler


def _casts_after_matmuls(x, w1, w2, w3, w4):
    """Four float32 GEMMs, then their bfloat16 casts: graph order holds all four GEMM
    outputs at once, as a partitioned forward holds the sources of its saved casts."""
    products = [x @ w for w in (w1, w2, w3, w4)]
    return tuple(p.to(torch.bfloat16) for p in products)


@pytest.mark.parametrize("reorder", [True, False])
def test_casts_run_as_soon_as_their_source_is_ready(reorder):
    inputs = [torch.randn(64, 64) for _ in range(5)]
    fp32 = 64 * 64 * 4
    with config.patch(reorder_for_peak_memory=reorder):
        code, scheduler = _build(_casts_after_matmuls, *inputs)
    peak = scheduler.peak_memory
    assert peak.graph_order == 4 * fp32 + fp32 // 2  # four GEMM outputs and the first cast
    if reorder:
        # one GEMM output at a time beside the casts made so far
        assert peak.chosen == fp32 + 4 * fp32 // 2 and peak.method == "lpmf"
    else:
        assert peak.chosen == peak.graph_order
    assert code.memory_plan.peak_bytes == peak.chosen
    call, _ = load_module(code)
    fresh = [torch.randn_like(x) for x in inputs]
    torch.testing.assert_close(call(list(fresh)), _casts_after_matmuls(*fresh))


def test_random_ops_draw_in_eager_order():
    def fn(x):
        # without the ordering edge the small draw and its sum would run first (that
        # lowers the peak) and take the generator's first numbers
        big, small = torch.rand(4096), torch.rand(16)
        return (big * x).sum(), (small * 2).sum()

    x = torch.randn(4096)
    torch.manual_seed(7)
    expected = fn(x)
    compiled = torch.compile(fn, backend="inductor_lite")
    torch.manual_seed(7)
    compiled(x)  # the first call compiles; compare a call of the compiled graph alone
    torch.manual_seed(7)
    got = compiled(x)
    assert inductor_lite.counters["graphs_fallback"] == 0
    torch.testing.assert_close(got, expected)


def test_training_with_a_reordered_forward_matches_eager(peaks):
    """Three GEMM outputs made first and reduced last in graph order: the forward runs
    each reduction right after its GEMM, and the loss and gradients match eager's."""

    def fn(x, w1, w2, w3):
        a, b, c = x @ w1, x @ w2, x @ w3  # different widths: three reduction kernels
        return a.sum() * b.sum() * c.sum()

    inputs = [torch.randn(64, 64), torch.randn(64, 64), torch.randn(64, 48), torch.randn(64, 32)]
    leaves = [t.clone().requires_grad_() for t in inputs]
    fn(*leaves).backward()
    compiled_leaves = [t.clone().requires_grad_() for t in inputs]
    loss = torch.compile(fn, backend="inductor_lite")(*compiled_leaves)
    loss.backward()
    assert inductor_lite.counters["graphs_fallback"] == 0 and len(peaks) == 2
    forward = peaks[0]
    assert forward.method == "lpmf" and forward.chosen < forward.graph_order
    torch.testing.assert_close(loss, fn(*inputs))
    for got, want in zip(compiled_leaves, leaves):
        torch.testing.assert_close(got.grad, want.grad)


def test_a_graph_with_data_dependent_sizes_keeps_graph_order(peaks, monkeypatch):
    """Steps using a size that ``x[x > 0]`` defines depend on it through no buffer, so
    the graph keeps its order (the GEMM beside it would otherwise move)."""
    monkeypatch.setattr(torch._dynamo.config, "capture_dynamic_output_shape_ops", True)

    def fn(x, y, w):
        product = y @ w  # live across the masked read in graph order: reordering would pay
        selected = x[x > 0]
        return product.sum(), selected * 2

    x, y, w = torch.randn(512, 512), torch.randn(512, 512), torch.randn(512, 512)
    got = torch.compile(fn, backend="inductor_lite", fullgraph=True)(x, y, w)
    assert inductor_lite.counters["graphs_fallback"] == 0
    assert [p.method for p in peaks] == ["graph order"]
    for g, e in zip(got, fn(x, y, w)):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-3)
