"""Reordering the schedule for peak memory (`scheduler.memory_order`): the estimate, the
greedy order, the order constraints of random and side-effecting ops, and compiled
graphs whose reordered schedule computes eager's values at a lower planned peak."""

import networkx as nx
import pytest
import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

import inductor_lite
from inductor_lite.codegen.wrapper import generate_wrapper, load_module
from inductor_lite.config import config
from inductor_lite.fx_lowering.decompositions import decomposition_table
from inductor_lite.fx_lowering.graph import GraphLowering
from inductor_lite.ir.nodes import ExternKernel, Layout, MultiOutput
from inductor_lite.scheduler import memory_order
from inductor_lite.scheduler.memory_order import StepMemory, estimate_peak, lpmf_order, reorder_for_peak_memory
from inductor_lite.scheduler.scheduler import ExternSchedulerNode, Scheduler


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    with config.patch(fallback_on_error=False):
        yield
    torch._dynamo.reset()


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


def test_random_and_side_effecting_externs_keep_their_order():
    layout = Layout(torch.device("cpu"), torch.float32, [4], [1])
    aten = torch.ops.aten
    rand = ExternKernel("r", layout, aten.rand.default, [[4]], {}, {})
    mm = ExternKernel("m", layout, aten.mm.default, [], {}, {})
    effect = ExternKernel("e", layout, aten._linalg_check_errors.default, [], {}, {})
    effect.has_side_effects = True
    assert memory_order.keeps_graph_order(rand) and memory_order.keeps_graph_order(effect)
    assert not memory_order.keeps_graph_order(mm)
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


def test_training_with_saved_casts_matches_eager(monkeypatch):
    """An autocast forward saves bfloat16 casts of float32 activations; with the
    reordered schedule, loss and gradients still match eager's."""
    peaks = []
    build = inductor_lite.backend.generate_wrapper

    def recording(graph, scheduler, title):
        peaks.append(scheduler.peak_memory)
        return build(graph, scheduler, title)

    monkeypatch.setattr(inductor_lite.backend, "generate_wrapper", recording)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.LayerNorm(32), nn.GELU()) for _ in range(3)])
    x = torch.randn(64, 32)

    def step(module):
        module.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = module(x).float().square().mean()
        loss.backward()
        return loss, [p.grad for p in module.parameters()]

    expected_loss, expected_grads = step(model)
    loss, grads = step(torch.compile(model, backend="inductor_lite"))
    assert inductor_lite.counters["graphs_fallback"] == 0 and len(peaks) == 2
    assert all(p.chosen <= p.graph_order for p in peaks)
    torch.testing.assert_close(loss, expected_loss, atol=2e-2, rtol=2e-2)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
