"""CUDA graphs for mode="reduce-overhead": the capture policy on CPU, the real thing on a GPU."""

import subprocess
import sys
import types

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import inductor_lite
from inductor_lite.config import config
from inductor_lite.runtime import cudagraphs
from inductor_lite.runtime.cudagraphs import (
    CUDAGraphRunner,
    graph_skip_reason,
    mutated_input_indices,
    static_input_indices,
    uses_cudagraphs,
)

counters = inductor_lite.counters


@pytest.fixture(autouse=True)
def fresh_state():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture
def logged(monkeypatch):
    """The ``cudagraphs`` artifact's messages."""
    messages = []
    monkeypatch.setattr(cudagraphs, "log_artifact", lambda name, text: messages.append((name, text)))
    return messages


def _on_device(gm, devices=None):
    """``gm`` with every fake value moved to CUDA (``devices``: node name -> another device).
    CPU builds of torch make fake CUDA tensors, so the policy is testable without a GPU."""
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            with value.fake_mode:
                node.meta["val"] = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                                       device=(devices or {}).get(node.name, "cuda"))
    return gm


def _cuda_graph(fn, *args, devices=None):
    return _on_device(make_fx(fn, tracing_mode="symbolic")(*args), devices)


def test_modes_that_use_cudagraphs():
    assert uses_cudagraphs("reduce-overhead") and uses_cudagraphs("max-autotune")
    assert not uses_cudagraphs("default") and not uses_cudagraphs("max-autotune-no-cudagraphs")


def test_skip_reasons_name_the_problem():
    a, b, mask = torch.randn(8), torch.randn(8), torch.rand(8) > 0.5
    assert graph_skip_reason(_cuda_graph(lambda x, y: (x + y).relu(), a, b)) is None
    assert "CPU tensors" in graph_skip_reason(make_fx(lambda x, y: x + y, tracing_mode="fake")(a, b))
    assert "2 devices" in graph_skip_reason(_cuda_graph(lambda x, y: x + y, a, b, devices={"y_1": "cuda:1"}))
    assert "data-dependent output shape" in graph_skip_reason(_cuda_graph(lambda x: x.nonzero(), a))
    assert "data-dependent output shape" in graph_skip_reason(_cuda_graph(lambda x, m: x[m], a, mask))
    # index.Tensor is tagged dynamic_output_shape, but integer indices fix the output's shape
    assert graph_skip_reason(_cuda_graph(lambda x, i: x[i] * 2, a, torch.tensor([3, 1, 4]))) is None
    # a boolean index still calls nonzero when its size was resolved (a torch._check)
    resolved = _cuda_graph(lambda x, m: x[m], a, mask)
    (index,) = resolved.graph.find_nodes(op="call_function", target=torch.ops.aten.index.Tensor)
    with index.meta["val"].fake_mode:
        index.meta["val"] = torch.empty(4, device="cuda")
    assert "data-dependent output shape" in graph_skip_reason(resolved)
    assert "reads device values on the host" in graph_skip_reason(_cuda_graph(lambda x: x * x.sum().item(), a))
    index_put = _cuda_graph(lambda x, m, v: torch.ops.aten.index_put(x, [m], v), a, mask, torch.tensor(1.0))
    assert "boolean indices" in graph_skip_reason(index_put)


def test_input_mutation_is_found_through_views_and_skips():
    def fn(x, y):
        x[1:].mul_(2)
        return x + y

    gm = _cuda_graph(fn, torch.randn(8), torch.randn(8))
    assert mutated_input_indices(gm) == [0]
    assert graph_skip_reason(gm) == "the graph writes to input(s) [0]"
    assert mutated_input_indices(_cuda_graph(lambda x, y: x.mul(2) + y, torch.randn(8), torch.randn(8))) == []


def test_static_inputs_of_a_backward_graph_are_the_non_tangents():
    def bw(primals_1, relu, tangents_1, n):
        return tangents_1 * relu * primals_1 * n

    gm = make_fx(bw, tracing_mode="fake")(torch.randn(4), torch.randn(4), torch.randn(4), 3)
    for node, name in zip(gm.graph.find_nodes(op="placeholder"), ("primals_1", "relu", "tangents_1", "n")):
        node.name = name
    assert static_input_indices(gm, "bw") == (0, 1)
    assert static_input_indices(gm, "fw") == ()  # outside an AOTAutograd compile: nothing is known static


def _cpu_gradients_match_eager(model, compiled):
    """One step of ``compiled`` (``model`` compiled) on fresh inputs gives eager's gradients."""
    x = torch.randn(8, 16)
    model.zero_grad()
    compiled(x).square().sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().sum().backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad)


def test_cpu_graphs_fall_back_counted_and_logged_in_training(logged):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    compiled = torch.compile(model, backend="inductor_lite", mode="reduce-overhead")
    for _ in range(2):
        _cpu_gradients_match_eager(model, compiled)
    assert counters["cudagraph_skips"] == 2 and counters["cudagraph_recordings"] == 0  # forward and backward
    assert [name for name, _ in logged] == ["cudagraphs"] * 2
    assert all("plain launches: CPU tensors" in text for _, text in logged)


def test_cpu_graphs_load_from_the_aot_cache_with_their_plan(logged):
    """A graph compiled in a CUDA-graph mode goes into AOTAutograd's cache with its
    plan: after ``torch._dynamo.reset()`` forward and backward load from it, skip CUDA
    graphs again for the same reason (counted and logged), and train as eager."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    for _ in range(2):
        torch._dynamo.reset()
        _cpu_gradients_match_eager(model, torch.compile(model, backend="inductor_lite", mode="reduce-overhead"))
    assert counters["aot_cache_hits"] == 2 and counters["cudagraph_skips"] == 4
    assert all("plain launches: CPU tensors" in text for _, text in logged)


def test_a_cached_graph_checks_the_allocator_of_the_loading_process(logged, monkeypatch):
    """The caching allocator's state belongs to the process, not to the cache entry: a
    graph compiled while it is off and loaded while it is on skips CUDA graphs for its
    own reason only (here its CPU tensors), not for the allocator."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    monkeypatch.setattr(cudagraphs, "_caching_allocator_enabled", lambda: False)
    _cpu_gradients_match_eager(model, torch.compile(model, backend="inductor_lite", mode="reduce-overhead"))
    assert all("allocator is disabled" in text for _, text in logged) and len(logged) == 2
    monkeypatch.setattr(cudagraphs, "_caching_allocator_enabled", lambda: True)
    torch._dynamo.reset()
    logged.clear()
    _cpu_gradients_match_eager(model, torch.compile(model, backend="inductor_lite", mode="reduce-overhead"))
    assert counters["aot_cache_hits"] == 2
    assert all("plain launches: CPU tensors" in text for _, text in logged) and len(logged) == 2


def test_cudagraphs_log_artifact_is_accepted():
    with config.patch(logs="cudagraphs"):
        assert "cudagraphs" in inductor_lite.logs.enabled_artifacts()


def test_output_plan_hands_out_outputs_and_tracks_who_holds_them():
    param, x = torch.randn(6), torch.randn(2, 3)
    pool_out = torch.randn(4, 3)
    outputs = (pool_out, pool_out[1:], param, x.t(), None, 7, pool_out)
    plan = cudagraphs._OutputPlan(outputs, [param, x])
    plan.measure_baseline()
    assert not plan.busy()
    new_x = torch.randn(5, 2, 3)[2]  # another input of the same layout, at a storage offset
    out, view, p, xt, none, seven, again = plan.outputs([param, new_x])
    assert out.data_ptr() == pool_out.data_ptr() and out is not pool_out and again is out
    assert view.data_ptr() == pool_out[1:].data_ptr() and view.shape == (3, 3)
    assert p is param and none is None and seven == 7
    assert torch.equal(xt, new_x.t())  # rebuilt on the caller's input
    assert plan.busy()
    del out, again
    assert plan.busy()  # the view still holds the memory
    kept = view[0]
    del view
    assert plan.busy()  # and so does a view of it
    del kept
    assert not plan.busy()


def test_output_plan_rebuilds_views_of_inputs_in_their_own_dtype():
    x = torch.randn(2, 4)
    outputs = (x.view(torch.int32)[1], x.view(torch.float16)[1, 2:], x[1, 1:3])
    plan = cudagraphs._OutputPlan(outputs, [x])
    new_x = torch.randn(3, 2, 4)[1]  # at a storage offset
    as_int, as_half, part = plan.outputs([new_x])
    assert as_int.dtype == torch.int32 and torch.equal(as_int, new_x.view(torch.int32)[1])
    assert as_half.dtype == torch.float16  # compared as bits: random fp32 bits may be NaN halves
    assert torch.equal(as_half.view(torch.int16), new_x.view(torch.int16)[1, 2:])
    assert torch.equal(part, new_x[1, 1:3]) and part.data_ptr() == new_x[1, 1:3].data_ptr()


def _fake_record(runner, args, signature, instances):
    """A stand-in for a capture on CPU: a 'replay' writes x * w into one output buffer."""
    inputs = list(args)
    args.clear()
    buffer = torch.empty_like(inputs[0])
    plan = cudagraphs._OutputPlan((buffer,), inputs)
    plan.measure_baseline()

    def replay(call_args):
        x, w = call_args
        call_args.clear()
        torch.mul(x, w, out=buffer)
        return plan.outputs([x, w])

    instances.append(types.SimpleNamespace(busy=plan.busy, replay=replay))
    runner.recordings += 1
    counters["cudagraph_recordings"] += 1
    return replay(inputs)


def test_runner_never_overwrites_held_outputs(monkeypatch, logged):
    monkeypatch.setattr(CUDAGraphRunner, "_record", _fake_record)

    def plain(args):
        x, w = args
        args.clear()
        return (x * w,)

    w = torch.randn(3)
    runner = CUDAGraphRunner(plain, static_inputs=(1,), name="g", device=torch.device("cuda"))
    xs = [torch.randn(3) for _ in range(4)]
    held = [runner([x, w])[0] for x in xs]  # every result kept: two recordings, then plain calls
    for x, out in zip(xs, held):
        torch.testing.assert_close(out, x * w)
    assert counters["cudagraph_recordings"] == 2 and counters["cudagraph_busy"] == 2
    del held
    for _ in range(3):  # `out = runner(...)` keeps the previous result during the call
        x = torch.randn(3)
        out = runner([x, w])[0]
        torch.testing.assert_close(out, x * w)
    assert counters["cudagraph_replays"] == 3 and counters["cudagraph_recordings"] == 2
    runner([torch.randn(5), torch.randn(5)])  # a new signature: a new recording
    assert counters["cudagraph_recordings"] == 3


def test_runner_copies_in_static_inputs_that_keep_moving(monkeypatch, logged):
    monkeypatch.setattr(CUDAGraphRunner, "_record", _fake_record)
    runner = CUDAGraphRunner(lambda args: None, static_inputs=(1,), name="g", device=torch.device("cuda"))
    x = torch.randn(3)
    for _ in range(cudagraphs.MAX_ADDRESSES + 1):
        w = torch.randn(3)
        torch.testing.assert_close(runner([x, w])[0], x * w)
    (signature,) = runner.signatures.values()
    assert signature.static == ()
    assert any("changed address" in text for _, text in logged)
    w = torch.randn(3)
    torch.testing.assert_close(runner([x, w])[0], x * w)
    assert counters["cudagraph_replays"] == 1  # one recording serves every address now


def test_runner_stops_recording_at_the_limit(monkeypatch, logged):
    monkeypatch.setattr(CUDAGraphRunner, "_record", _fake_record)
    monkeypatch.setattr(cudagraphs, "MAX_RECORDINGS", 2)

    def plain(args):
        x, w = args
        args.clear()
        return (x * w,)

    runner = CUDAGraphRunner(plain, static_inputs=(), name="g", device=torch.device("cuda"))
    for n in (2, 3, 4, 5):
        x, w = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(runner([x, w])[0], x * w)
    assert counters["cudagraph_recordings"] == 2 and counters["cudagraph_skips"] == 1


# ---------------------------------------------------------------- GPU

def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                               torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()


@pytest.mark.gpu
def test_gpu_inference_replays_and_matches_eager():
    model = _mlp()
    compiled = torch.compile(model, backend="inductor_lite", mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(8, 64, device="cuda")
            out = compiled(x)
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    # `out = compiled(x)` holds the last result during the next call: two recordings alternate
    assert counters["cudagraph_recordings"] == 2 and counters["cudagraph_replays"] == 3
    assert counters["cudagraph_skips"] == 0


@pytest.mark.gpu
def test_gpu_held_outputs_are_not_overwritten():
    model = _mlp()
    compiled = torch.compile(model, backend="inductor_lite", mode="reduce-overhead")
    with torch.no_grad():
        xs = [torch.randn(8, 64, device="cuda") for _ in range(5)]
        outs = [compiled(x) for x in xs]
        for x, out in zip(xs, outs):
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert counters["cudagraph_busy"] == 3


@pytest.mark.gpu
def test_gpu_new_shape_records_again():
    compiled = torch.compile(lambda x, y: (x * y[:, None]).exp() + x[:, -1:], backend="inductor_lite",
                             mode="reduce-overhead", dynamic=True)
    for n in (8, 16, 8, 16):
        x, y = torch.randn(n, 32, device="cuda"), torch.randn(n, device="cuda")
        torch.testing.assert_close(compiled(x, y), (x * y[:, None]).exp() + x[:, -1:])
    assert counters["graphs_compiled"] == 1
    assert counters["cudagraph_recordings"] == 2 and counters["cudagraph_replays"] == 2


@pytest.mark.gpu
def test_gpu_integer_indexing_is_captured():
    """``x[i]`` with integer indices (an embedding's rotary table, say) has a fixed shape."""
    compiled = torch.compile(lambda x, i: x[i] * 2, backend="inductor_lite", mode="reduce-overhead")
    x = torch.randn(64, 32, device="cuda")
    for _ in range(3):
        i = torch.randint(0, 64, (16,), device="cuda")
        torch.testing.assert_close(compiled(x, i), x[i] * 2)
    assert counters["cudagraph_skips"] == 0 and counters["cudagraph_replays"] >= 1


@pytest.mark.gpu
def test_gpu_training_matches_eager():
    model, reference = _mlp(), _mlp()
    compiled = torch.compile(model, backend="inductor_lite", mode="reduce-overhead")
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
    for _ in range(5):
        x = torch.randn(8, 64, device="cuda")
        for m, f, opt in ((model, compiled, optimizers[0]), (reference, reference, optimizers[1])):
            opt.zero_grad()
            loss = f(x).square().mean()
            loss.backward()
            opt.step()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-4)
    assert counters["cudagraph_skips"] == 0
    assert counters["cudagraph_recordings"] >= 2 and counters["cudagraph_replays"] >= 4  # forward and backward


@pytest.mark.gpu
def test_gpu_training_loaded_from_the_aot_cache_replays_and_matches_eager():
    """After ``torch._dynamo.reset()`` the forward and backward load from AOTAutograd's
    cache and run under CUDA graphs again: recorded, replayed, and training as eager."""
    model, reference = _mlp(), _mlp()
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
    for compile_round in range(2):
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="inductor_lite", mode="reduce-overhead")
        for _ in range(4):
            x = torch.randn(8, 64, device="cuda")
            for m, f, opt in ((model, compiled, optimizers[0]), (reference, reference, optimizers[1])):
                opt.zero_grad()
                f(x).square().mean().backward()
                opt.step()
            for p, q in zip(model.parameters(), reference.parameters()):
                torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-4)
        if compile_round == 0:
            assert counters["aot_cache_hits"] == 0
            recordings, replays = counters["cudagraph_recordings"], counters["cudagraph_replays"]
    assert counters["aot_cache_hits"] == 2 and counters["cudagraph_skips"] == 0
    assert counters["cudagraph_recordings"] > recordings and counters["cudagraph_replays"] > replays


@pytest.mark.gpu
def test_gpu_a_replayed_call_is_one_graph_launch():
    model = _mlp()

    def launches(fn, x):
        fn(x)
        fn(x)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn(x)
            torch.cuda.synchronize()
        names = [e.name for e in prof.events()]
        return sum("LaunchKernel" in n for n in names), sum("GraphLaunch" in n for n in names)

    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        kernels, graphs = launches(torch.compile(model, backend="inductor_lite"), x)
        assert kernels > 0 and graphs == 0
        torch._dynamo.reset()
        kernels, graphs = launches(torch.compile(model, backend="inductor_lite", mode="reduce-overhead"), x)
        assert kernels == 0 and graphs == 1


@pytest.mark.gpu
def test_gpu_modes_and_input_mutation():
    def fn(x, y):
        x.add_(1)
        return x * y

    for mode, records in (("max-autotune", True), ("max-autotune-no-cudagraphs", False)):
        counters.clear()
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="inductor_lite", mode=mode)
        x = torch.randn(32, device="cuda")
        x_ref = x.clone()
        for _ in range(3):
            y = torch.randn(32, device="cuda")
            torch.testing.assert_close(compiled(x, y), fn(x_ref, y))
            torch.testing.assert_close(x, x_ref)
        assert (counters["cudagraph_recordings"] > 0) == records and counters["cudagraph_skips"] == 0


CLEARED_WORKSPACES_SCRIPT = """
import torch
import inductor_lite

# K >> M, N: cuBLAS picks split-K GEMMs, which use its workspace
model = torch.nn.Sequential(torch.nn.Linear(16384, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16384),
                            torch.nn.ReLU(), torch.nn.Linear(16384, 64)).cuda()
compiled = torch.compile(model, backend="inductor_lite", mode="reduce-overhead")
x = torch.randn(64, 16384, device="cuda")
with torch.no_grad():
    for _ in range(3):
        compiled(x)
    # what Inductor's cudagraph trees do around each of their recordings
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    held = [torch.full((1 << 22,), 7.0, device="cuda") for _ in range(16)]  # takes any freed block
    for _ in range(3):
        out = compiled(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert all(bool((h == 7).all()) for h in held), "a replay wrote into another tensor's memory"
torch.cuda.synchronize()
counters = inductor_lite.counters
assert counters["cudagraph_replays"] >= 4 and counters["cudagraph_skips"] == 0, dict(counters)
"""


@pytest.mark.gpu
def test_gpu_replays_survive_cleared_cublas_workspaces():
    """A recording's GEMMs must not use a cuBLAS workspace that someone else can free
    (Inductor's cudagraph trees clear the workspaces; the next replay then faulted).
    In a child process: a fault is sticky and would fail every later CUDA test here."""
    child = subprocess.run([sys.executable, "-c", CLEARED_WORKSPACES_SCRIPT], capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]


@torch.library.custom_op("inductor_lite_test::scale_by_max", mutates_args=())
def _scale_by_max(x: torch.Tensor) -> torch.Tensor:
    return x / x.abs().max().item()  # a host sync no graph check can see


@_scale_by_max.register_fake
def _(x):
    return torch.empty_like(x)


@pytest.mark.gpu
def test_gpu_capture_error_falls_back(logged):
    fn = lambda x: _scale_by_max(x * 2) + 1  # noqa: E731
    compiled = torch.compile(fn, backend="inductor_lite", mode="reduce-overhead")
    for _ in range(3):
        x = torch.randn(32, device="cuda")
        torch.testing.assert_close(compiled(x), fn(x))
    assert counters["cudagraph_skips"] == 1 and counters["cudagraph_recordings"] == 0
    assert any("capture failed" in text for _, text in logged)
