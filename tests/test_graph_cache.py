"""The graph cache (`runtime.graph_cache`): a warm start loads compiled graphs from disk.

Each test runs with an empty cache directory (conftest). In-process tests call
``torch._dynamo.reset()`` between compiles, so Dynamo and AOTAutograd run again and the
backend sees the same aten graph; the fresh-process test runs two Python processes on
one cache directory, the second unable to lower anything.
"""

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import inductor_lite
from inductor_lite import backend as backend_module
from inductor_lite.codegen import runtime_helpers
from inductor_lite.config import config
from inductor_lite.counters import counters
from inductor_lite.runtime import graph_cache
from inductor_lite.runtime.graph_cache import CachedGraph, UncacheableGraph, default_graph_cache, encode_entry

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    # allocations of generated code start poisoned (NaN), so an element a loaded graph fails to write shows
    empty = runtime_helpers.empty_strided_cpu
    monkeypatch.setattr(runtime_helpers, "empty_strided_cpu", lambda *a: poison(empty(*a)))
    # AOTAutograd's cache (`aot_cache`) would answer before the graph cache: off, except where a test turns it on
    with config.patch(fallback_on_error=False, disable_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        yield
    torch._dynamo.reset()


def poison(t):
    return t.fill_(float("nan") if t.dtype.is_floating_point else True if t.dtype == torch.bool else -77)


def scaled_softmax(x, w):
    scale = torch.tensor([0.5, 2.0, -1.0, 3.0], dtype=x.dtype)  # a tensor constant of the aten graph
    y = torch.relu(x @ w) * scale
    return y.softmax(-1) + y.sum(0)


def compile_and_check(fn, *args, **compile_kwargs):
    """Compile ``fn`` afresh (new Dynamo and AOTAutograd run), check it against eager."""
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(fn, backend="inductor_lite", **compile_kwargs)(*args), fn(*args))


def entries():
    directory = default_graph_cache().directory
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def outcome():
    return {k: counters[k] for k in ("graph_cache_hits", "graph_cache_misses", "graph_cache_corrupt")}


def inputs(rows=8, dtype=torch.float32):
    return torch.randn(rows, 16, dtype=dtype), torch.randn(16, 4, dtype=dtype)


WARM_START_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    import inductor_lite
    from inductor_lite import backend
    from inductor_lite.runtime import graph_cache

    # both processes key on the toolchain the test read: others may edit the source between them
    versions = json.loads(sys.argv[4])
    graph_cache.toolchain = lambda: versions
    if sys.argv[1] == "warm":
        class NoLowering:
            def __init__(self, *args, **kwargs):
                raise AssertionError("a graph was lowered on a warm start")
        backend.GraphLowering = NoLowering

    def f(x, w):
        # a tensor constant; the device is explicit because Dynamo (torch 2.11) ignores
        # torch.set_default_device for torch.tensor (pytorch/pytorch#175953): cuda * cpu
        scale = torch.tensor([0.5, 2.0, -1.0, 3.0], dtype=x.dtype, device=x.device)
        y = torch.relu(x @ w) * scale
        return y.softmax(-1) + y.sum(0)

    def g(x):
        return (x * 2).sin().sum(-1)

    torch.set_default_device(sys.argv[5])
    torch.manual_seed(int(sys.argv[2]))  # fresh inputs in each process
    x = torch.randn(8, 16, dtype=torch.float64)
    w = torch.randn(16, 4, dtype=torch.float64, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    out = torch.compile(f, backend="inductor_lite")(x, w)
    out.sum().backward()
    ref = f(x, w_ref)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(w.grad, w_ref.grad)
    xd = torch.randn(int(sys.argv[3]), 5)
    torch.testing.assert_close(torch.compile(g, backend="inductor_lite", dynamic=True)(xd), g(xd))
    print(json.dumps(dict(inductor_lite.counters)))
""")


def run_process(script, cache_dir, *args, aot_cache=False):
    env = dict(os.environ, INDUCTOR_LITE_CACHE_DIR=str(cache_dir), INDUCTOR_LITE_FALLBACK_ON_ERROR="0",
               PYTHONPATH=REPO, TORCHINDUCTOR_AUTOGRAD_CACHE="1" if aot_cache else "0")
    env.pop("INDUCTOR_LITE_DISABLE_CACHE", None)
    env.pop("INDUCTOR_LITE_DEBUG_DIR", None)
    proc = subprocess.run([sys.executable, str(script), *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_fresh_process_loads_every_graph_without_lowering(tmp_path, device):
    """Forward, backward (with a tensor constant) and a dynamic-shape graph: compiled in
    one process, loaded in the next, which cannot lower and runs another size. On a
    GPU the warm process builds no kernel binary either (the binary cache has them)."""
    script = tmp_path / "warm_start.py"
    script.write_text(WARM_START_SCRIPT)
    versions = json.dumps(graph_cache.toolchain())
    cold = run_process(script, tmp_path / "cache", "cold", 0, 6, versions, device)
    warm = run_process(script, tmp_path / "cache", "warm", 1, 11, versions, device)
    assert cold.get("graph_cache_misses") == 3 and "graph_cache_hits" not in cold
    assert warm.get("graph_cache_hits") == 3 and "graph_cache_misses" not in warm
    # counters describe the compiled graphs the same way warm or cold
    for name in ("graphs_compiled", "kernels_generated", "extern_calls"):
        assert warm[name] == cold[name] > 0
    if device == "cuda":
        assert cold["kernels_compiled"] > 0 and "kernels_compiled" not in warm


def test_a_fresh_process_skips_aot_autograd_too(tmp_path):
    """With AOTAutograd's cache on (`aot_cache`), the warm process finds all three
    graphs there: no joint-graph trace, no partition, no graph-cache lookup; values,
    gradients and counters as cold."""
    script = tmp_path / "warm_start.py"
    script.write_text(WARM_START_SCRIPT)
    versions = json.dumps(graph_cache.toolchain())
    cold = run_process(script, tmp_path / "cache", "cold", 0, 6, versions, "cpu", aot_cache=True)
    warm = run_process(script, tmp_path / "cache", "warm", 1, 11, versions, "cpu", aot_cache=True)
    assert "aot_cache_hits" not in cold and warm.get("aot_cache_hits") == 3
    assert not any(k.startswith("graph_cache") for k in warm)
    for name in ("graphs_compiled", "kernels_generated", "extern_calls"):
        assert warm[name] == cold[name] > 0
    assert os.listdir(tmp_path / "cache" / "aotautograd")


def test_aot_cache_hits_in_process_and_misses_on_a_config_change():
    """After ``torch._dynamo.reset()`` a training graph loads from AOTAutograd's cache
    (gradients right on fresh inputs); an option that changes code misses; a graph that
    falls back to eager is never stored."""
    x, w = inputs()

    def train(fn, **compile_kwargs):
        torch._dynamo.reset()
        ww, ref = w.clone().requires_grad_(), w.clone().requires_grad_()
        torch.compile(fn, backend="inductor_lite", **compile_kwargs)(x, ww).sum().backward()
        fn(x, ref).sum().backward()
        torch.testing.assert_close(ww.grad, ref.grad)

    with torch._functorch.config.patch(enable_autograd_cache=True):
        train(scaled_softmax)
        assert counters["aot_cache_hits"] == 0 and counters["graph_cache_misses"] == 2
        train(scaled_softmax)
        assert counters["aot_cache_hits"] == 2 and counters["graph_cache_misses"] == 2
        train(scaled_softmax, options={"xblock": 256})
        assert counters["aot_cache_hits"] == 2 and counters["graph_cache_misses"] == 4
        with config.patch(disable_cache=True):
            train(scaled_softmax)
        assert counters["aot_cache_hits"] == 2


def test_a_loaded_graph_whose_first_run_fails_runs_its_stored_aten_graph(monkeypatch):
    """An entry keeps the aten graph for the eager fallback (unpickled only when needed)."""
    x, w = inputs()
    with torch._functorch.config.patch(enable_autograd_cache=True):
        compile_and_check(scaled_softmax, x, w)
        assert counters["graphs_fallback"] == 0

        def broken(*args, **kwargs):
            raise RuntimeError("injected launch failure")

        monkeypatch.setattr(inductor_lite.dsl.interpreter, "run", broken)
        with config.patch(fallback_on_error=True):
            compile_and_check(scaled_softmax, x, w)
    assert counters["aot_cache_hits"] == 1 and counters["graphs_fallback"] == 1


def test_same_graph_hits_and_other_shapes_or_dtypes_miss():
    x, w = inputs()
    compile_and_check(scaled_softmax, x, w)
    assert outcome() == {"graph_cache_hits": 0, "graph_cache_misses": 1, "graph_cache_corrupt": 0}
    assert len(entries()) == 1
    compile_and_check(scaled_softmax, *inputs())
    assert counters["graph_cache_hits"] == 1
    compile_and_check(scaled_softmax, *inputs(rows=5))
    compile_and_check(scaled_softmax, *inputs(dtype=torch.float64))
    assert outcome() == {"graph_cache_hits": 1, "graph_cache_misses": 3, "graph_cache_corrupt": 0}
    assert len(entries()) == 3


def test_dynamic_shapes_hit_for_another_size():
    compile_and_check(scaled_softmax, *inputs(rows=6), dynamic=True)
    compile_and_check(scaled_softmax, *inputs(rows=13), dynamic=True)
    assert outcome() == {"graph_cache_hits": 1, "graph_cache_misses": 1, "graph_cache_corrupt": 0}


def test_a_compile_that_adds_a_shape_guard_is_not_stored(monkeypatch):
    lower = backend_module._lower

    def lower_with_a_guard(gm, *args):
        size = next(n.meta["val"] for n in gm.graph.nodes if isinstance(n.meta.get("val"), torch.SymInt))
        assert size > 2  # a SymInt comparison: the shape environment records a guard
        return lower(gm, *args)

    monkeypatch.setattr(backend_module, "_lower", lower_with_a_guard)
    compile_and_check(scaled_softmax, *inputs(rows=6), dynamic=True)
    assert counters["graph_cache_bypasses"] == 1 and entries() == []


def test_a_config_change_invalidates_and_logging_does_not():
    x, w = inputs()
    compile_and_check(scaled_softmax, x, w)
    compile_and_check(scaled_softmax, x, w, options={"xblock": 256})
    with config.patch(num_warps=8):
        compile_and_check(scaled_softmax, x, w)
    assert outcome() == {"graph_cache_hits": 0, "graph_cache_misses": 3, "graph_cache_corrupt": 0}
    compile_and_check(scaled_softmax, x, w, options={"logs": "cache"})
    assert counters["graph_cache_hits"] == 1


def test_hits_and_misses_are_logged_under_cache():
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("inductor_lite.cache")
    logger.addHandler(handler)
    try:
        with config.patch(logs="cache"):
            compile_and_check(scaled_softmax, *inputs())
            compile_and_check(scaled_softmax, *inputs())
    finally:
        logger.removeHandler(handler)
    messages = [r.getMessage() for r in records]
    assert len(messages) == 2 and "graph cache miss" in messages[0] and "graph cache hit" in messages[1], messages


def test_a_toolchain_change_invalidates(monkeypatch):
    x, w = inputs()
    compile_and_check(scaled_softmax, x, w)
    versions = graph_cache.toolchain()
    monkeypatch.setattr(graph_cache, "toolchain", lambda: {**versions, "torch": "another version"})
    compile_and_check(scaled_softmax, x, w)
    assert outcome() == {"graph_cache_hits": 0, "graph_cache_misses": 2, "graph_cache_corrupt": 0}


@pytest.mark.parametrize("damage", ["truncated", "garbage", "source_fails_to_load"])
def test_a_corrupt_entry_is_counted_and_rebuilt(damage):
    x, w = inputs()
    compile_and_check(scaled_softmax, x, w)
    (name,) = entries()
    path = os.path.join(default_graph_cache().directory, name)
    data = open(path, "rb").read()
    key = name.removesuffix(".ilgraph")
    damaged = {
        "truncated": data[: len(data) // 2],
        "garbage": os.urandom(len(data)),
        # a whole, checksummed entry whose source cannot run
        "source_fails_to_load": encode_entry(key, CachedGraph("def call(args:\n", (), {})),
    }[damage]
    with open(path, "wb") as f:
        f.write(damaged)
    compile_and_check(scaled_softmax, *inputs())
    assert counters["graph_cache_corrupt"] == 1 and counters["graph_cache_hits"] == 0
    assert graph_cache.decode_entry(open(path, "rb").read(), key).source != "def call(args:\n"  # rebuilt
    compile_and_check(scaled_softmax, *inputs())
    assert counters["graph_cache_hits"] == 1


def test_disabled_cache_reads_and_writes_nothing():
    x, w = inputs()
    with config.patch(disable_cache=True):
        compile_and_check(scaled_softmax, x, w)
        compile_and_check(scaled_softmax, x, w)
    assert entries() == []
    assert outcome() == {"graph_cache_hits": 0, "graph_cache_misses": 0, "graph_cache_corrupt": 0}


def test_a_debug_dump_lowers_a_cached_graph(tmp_path):
    x, w = inputs()
    compile_and_check(scaled_softmax, x, w)
    with config.patch(debug_dir=str(tmp_path / "dump")):
        compile_and_check(scaled_softmax, x, w)
    assert counters["graph_cache_hits"] == 0
    dumped = [files for _, _, files in os.walk(tmp_path / "dump")]
    assert any("ir_post_fusion.txt" in files for files in dumped), dumped


def test_an_unwritable_cache_dir_warns_and_compiles(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    x, w = inputs()
    with config.patch(cache_dir=str(blocker)), pytest.warns(RuntimeWarning, match="graph cache turned off"):
        compile_and_check(scaled_softmax, x, w)


def _graph_with_constant(value):
    gm = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    gm.register_buffer("c", value)
    x = gm.graph.placeholder("x")
    c = gm.graph.get_attr("c")
    gm.graph.output(gm.graph.call_function(torch.ops.aten.add.Tensor, (x, c)))
    gm.recompile()
    return gm


def test_the_key_covers_constant_values():
    key = graph_cache.graph_key(_graph_with_constant(torch.arange(4.0)))
    assert graph_cache.graph_key(_graph_with_constant(torch.arange(4.0))) == key
    assert graph_cache.graph_key(_graph_with_constant(torch.arange(4.0) + 1)) != key
    assert graph_cache.graph_key(_graph_with_constant(torch.arange(4.0).double())) != key
    # a view: only its own elements count
    assert graph_cache.graph_key(_graph_with_constant(torch.arange(8.0)[2:6] - 2)) == key


def test_a_graph_without_a_stable_key_bypasses_the_cache():
    gm = _graph_with_constant(torch.arange(4.0))
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    node.target = lambda a, b: a + b
    with pytest.raises(UncacheableGraph, match="no stable name"):
        graph_cache.graph_key(gm)
    assert default_graph_cache().key(gm, "graph_0_inference") is None
    assert counters["graph_cache_bypasses"] == 1


def test_a_graph_that_runs_eagerly_is_not_stored_in_the_aot_cache(monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("lowering failed")

    monkeypatch.setattr(backend_module, "_lower", fail)
    with torch._functorch.config.patch(enable_autograd_cache=True), config.patch(fallback_on_error=True):
        compile_and_check(scaled_softmax, *inputs())
        compile_and_check(scaled_softmax, *inputs())
    assert counters["aot_cache_hits"] == 0 and counters["graphs_fallback"] == 2


def test_a_graph_specialised_to_a_float_argument_is_not_stored_in_the_aot_cache():
    """A float argument becomes symbolic after its second value; torch.full needs a
    number, so AOTAutograd specialises the graph to it (a guard on its value), which
    AOTAutograd's cache key does not hold: loaded, the code of one value would run for
    every later one (a fuzzing helper's find; stock Inductor hits it too)."""
    fn = torch.compile(lambda x, a: (torch.full((3,), a), x * -a), backend="inductor_lite")
    x = torch.randn(4)
    with torch._functorch.config.patch(enable_autograd_cache=True):
        for a in (0.5, 1.5, 2.0, 7.25):
            full, scaled = fn(x, a)
            assert full.tolist() == [a] * 3
            torch.testing.assert_close(scaled, x * -a)
