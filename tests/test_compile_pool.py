"""Kernel binaries built in worker processes (`runtime.compile_pool`) are the binaries
this process builds, reach the launcher once, and a dead worker only costs the speed-up."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from inductor_lite.config import Config, ConfigError, check_option, config
from inductor_lite.dsl import assembler
from inductor_lite.codegen.wrapper import load_module
from inductor_lite.runtime import build, compile_pool, driver, launcher
from dsl_corpus import axpy_kernel
from test_runtime_launch import cuda_like, cuda_wrapper, stub  # noqa: F401  (stub is a fixture)
from test_runtime_cache import fake_driver  # noqa: F401  (a fixture stub uses)

pytestmark = pytest.mark.skipif(not compile_pool.can_build_in_workers(),
                                reason="needs nvJitLink, or ptxas without a current CUDA context")

CC = (9, 0)


def builds(blocks=(32, 64, 128), num_warps=4):
    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "alpha": "fp32"}
    return [(axpy_kernel, (axpy_kernel.specialize_signature(signature, {"XBLOCK": b}, [0, 1, 2]), num_warps, 1, None))
            for b in blocks]


@pytest.fixture(autouse=True)
def fresh_pool(tmp_path):
    compile_pool.shutdown()
    with config.patch(compile_workers=2, cache_dir=str(tmp_path)):
        yield
    compile_pool.shutdown()


def test_workers_build_what_this_process_builds_and_hand_each_out_once():
    jobs = builds()
    assert compile_pool.prebuild(jobs, CC) == 3
    assert compile_pool.prebuild(jobs, CC) == 0  # already waiting: not built twice
    for _, (spec, num_warps, num_stages, maxnreg) in jobs:
        key = launcher.binary_key(axpy_kernel, spec, num_warps, CC, num_stages, maxnreg)
        got = compile_pool.take(key)
        want = build.build_binary(axpy_kernel.build_ir(spec), CC, num_warps, num_stages, maxnreg)
        assert got is not None and compile_pool.take(key) is None
        assert (got.ptx, got.param_types, got.num_warps, got.shared_bytes) == \
            (want.ptx, want.param_types, want.num_warps, want.shared_bytes)
        assembler.check_ptx_assembles(got.ptx, CC)


def test_one_build_or_no_workers_builds_nothing_here():
    assert compile_pool.prebuild(builds(blocks=(32,)), CC) == 0
    with config.patch(compile_workers=1):
        assert compile_pool.prebuild(builds(), CC) == 0


def test_a_failing_build_is_left_to_the_launcher():
    # 64 warps is beyond CUDA's 1024 threads: the worker's build fails, the others land
    jobs = builds(blocks=(32, 64)) + builds(blocks=(128,), num_warps=64)
    assert compile_pool.prebuild(jobs, CC) == 2


def test_a_candidate_that_does_not_build_is_left_to_the_launcher():
    # a block past the DSL's size limit fails in the frontend, here: the others still build
    jobs = builds(blocks=(32, 64, 1 << 22))
    assert compile_pool.prebuild(jobs, CC) == 2


def test_a_hung_worker_is_killed_and_the_pool_stopped(monkeypatch):
    logged = []
    monkeypatch.setattr(compile_pool, "log_artifact", lambda artifact, text: logged.append(text))
    monkeypatch.setattr(compile_pool, "JOB_TIMEOUT_S", 0.5)
    real_start = compile_pool._start_worker
    hung = []

    def start_hung():
        hung.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE))
        with compile_pool._lock:
            compile_pool._workers.append(hung[-1])
        return hung[-1]

    monkeypatch.setattr(compile_pool, "_start_worker", start_hung)
    assert compile_pool.prebuild(builds(), CC) == 0
    assert len(logged) == 1 and "TimeoutError" in logged[0]
    assert hung and all(w.poll() is not None for w in hung)  # killed, not left running
    monkeypatch.setattr(compile_pool, "_start_worker", real_start)


def test_workers_import_this_copy_of_inductor_lite(tmp_path, monkeypatch):
    # another (broken) inductor_lite in the working directory must not be the workers'
    (tmp_path / "inductor_lite").mkdir()
    (tmp_path / "inductor_lite" / "__init__.py").write_text("raise ImportError('the wrong inductor_lite')\n")
    monkeypatch.chdir(tmp_path)
    assert compile_pool.prebuild(builds(), CC) == 3


def test_a_dead_worker_stops_the_pool_and_is_logged(monkeypatch):
    logged = []
    monkeypatch.setattr(compile_pool, "log_artifact", lambda artifact, text: logged.append((artifact, text)))
    real_start = compile_pool._start_worker
    monkeypatch.setattr(compile_pool, "_start_worker", lambda: subprocess.Popen(
        [sys.executable, "-c", "raise SystemExit(3)"], stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    assert compile_pool.prebuild(builds(), CC) == 0
    assert logged and logged[0][0] == "cache" and "building in this process" in logged[0][1]
    monkeypatch.setattr(compile_pool, "_start_worker", real_start)
    assert compile_pool.prebuild(builds(), CC) == 0  # stopped for good...
    compile_pool.shutdown()
    assert compile_pool.prebuild(builds(), CC) == 3  # ...until shut down and restarted


def test_compile_workers_must_not_be_negative():
    with pytest.raises(ConfigError, match="compile_workers=-1: must be 0 or more"):
        check_option("compile_workers", -1)
    bad = Config.from_env({"INDUCTOR_LITE_COMPILE_WORKERS": "-2"})
    with pytest.raises(ConfigError, match="INDUCTOR_LITE_COMPILE_WORKERS=-2: must be 0 or more"):
        bad.validate()


@pytest.mark.gpu
def test_a_generated_kernels_candidates_are_built_by_workers_on_its_first_call(monkeypatch):
    import inductor_lite
    from inductor_lite.runtime import autotune

    handed_out = []
    take = compile_pool.take
    monkeypatch.setattr(compile_pool, "take", lambda key: handed_out.append(take(key)) or handed_out[-1])
    autotune.clear_memory()
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    x = torch.randn(1 << 20, device="cuda")
    fn = lambda t: (t * 2).relu() + 1  # noqa: E731
    with config.patch(autotune=True):
        got = torch.compile(fn, backend="inductor_lite")(x)
    torch.testing.assert_close(got, fn(x))
    built_by_workers = sum(b is not None for b in handed_out)
    assert inductor_lite.counters["autotune_runs"] == 1
    assert built_by_workers >= 2 and built_by_workers == inductor_lite.counters["kernels_compiled"]

    # untuned: one binary a kernel, built across the graph's kernels when its module loads
    handed_out.clear()
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    y = torch.randn(512, 1024, device="cuda")
    fn2 = lambda t: (t.softmax(-1) * 3, t.sum(0) + 1)  # noqa: E731
    with config.patch(autotune=False):
        got = torch.compile(fn2, backend="inductor_lite")(y)
    # fp64 reference: a 512-term fp32 column sum is off eager's by its rounding, ~1e-5
    for g, e in zip(got, fn2(y.double())):
        torch.testing.assert_close(g, e.float(), atol=1e-4, rtol=1e-5)
    assert inductor_lite.counters["kernels_generated"] >= 2
    assert sum(b is not None for b in handed_out) == inductor_lite.counters["kernels_compiled"] >= 2
    torch._dynamo.reset()


def test_a_loaded_cuda_module_prebuilds_the_binaries_its_first_call_asks_for(stub):
    """On CPU, over the fake driver: the plan a CUDA wrapper records at codegen reaches
    the workers when the module loads, and the keys built are those its launches ask
    for (real, aligned arguments of the planned dtypes and sizes)."""
    code = cuda_wrapper(lambda x, y: ((x * 3).relu(), y.exp()), (4, 300), (7,))
    assert len(code.kernels) == 2 and len(code.prebuild) == 2
    _, namespace = load_module(code)
    with config.patch(autotune=False):
        assert compile_pool.prebuild_graph(namespace, code.prebuild) == 2
        for name, arg_types in code.prebuild:
            launch = namespace[name]
            args = tuple(cuda_like(torch.empty(64, dtype=a)) if isinstance(a, torch.dtype) else a for a in arg_types)
            (build,) = launch.planned_builds(args)
            key = launcher.binary_key(launch.kernel, build[0], build[1], driver.compute_capability(0), *build[2:])
            assert compile_pool.take(key) is not None
    assert stub.built == []  # nothing was built in this process


_EXIT_MID_BUILD = """
import subprocess, sys, threading, time
sys.path[:0] = {paths!r}
from inductor_lite.config import config
from inductor_lite.runtime import compile_pool
from test_compile_pool import builds, CC

def start_hung():  # a worker that never answers: a build that would take a minute
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    with compile_pool._lock:
        compile_pool._workers.append(worker)
    return worker

compile_pool._start_worker = start_hung
config.compile_workers = 2
# the compile runs off the main thread (as a backward's does, in autograd's thread)
threading.Thread(target=compile_pool.prebuild, args=(builds(blocks=(32, 64, 128, 256, 512)), CC), daemon=True).start()
while len(compile_pool._workers) < 2:
    time.sleep(0.05)
"""


def test_exit_mid_compile_kills_the_workers_instead_of_waiting_for_the_queue(tmp_path):
    # Ctrl-C during a compile: the interpreter's exit must not wait for queued builds
    import os
    paths = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(os.path.abspath(__file__))]
    script = _EXIT_MID_BUILD.format(paths=paths)
    env = dict(os.environ, INDUCTOR_LITE_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], env=env, timeout=45, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_worker_imports_the_compiler_without_torch():
    """A worker starts without importing torch (a build needs only the DSL compiler):
    its start costs a fraction of a torch import, in time and in memory."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(compile_pool.__file__)))
    code = compile_pool._BOOTSTRAP.format(root=os.path.dirname(root)) + (
        "import inductor_lite.runtime.build\n"
        "print('torch' in sys.modules, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], input=b"", capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr.decode().split()[-1] == "False"
