"""Kernel binaries built in parallel, in worker processes.

One binary build (`build.build_binary`: our NVPTX lowering, LLVM's O3 and code
generation, then the PTX assembler) keeps one CPU core busy for a few hundred
milliseconds, and the first CUDA call of a tuned kernel builds one binary per candidate
config. Built one after another, that is most of a cold compile (docs/performance.md
has a profile). `prebuild` hands a
kernel's builds to worker processes instead, as TorchInductor's ``async_compile``
hands Triton kernels to its pool, and waits for them; `take` then gives each binary to
the launcher that asks for it, which counts, logs and caches it as if it had built it.
A freshly compiled graph prebuilds, when its module loads, every binary its first call
will need (`prebuild_graph`: each kernel's candidates, or the decided config's), so
builds run in parallel across kernels; a tuned launcher's first launch prebuilds what
is still missing for its real arguments.

What travels to a worker is the kernel's block IR (``Kernel.build_ir``, plain picklable
data), not its Python source: the frontend runs here, where the kernel's module is. A
worker imports the DSL compiler and nothing of torch (`build`).

Each worker is a Python process running `compile_worker.main` from this copy of
inductor_lite, fed pickled jobs on its stdin, with ``CUDA_VISIBLE_DEVICES`` empty. Not ``multiprocessing``: its spawned
children re-run the user's main script, and a forked child of a process that has
initialised CUDA must not touch CUDA. A worker assembles with nvJitLink or ptxas, never the CUDA driver (it has no
CUDA context), so the workers are used only where this process would pick the same
assembler (`can_build_in_workers`). One thread here per worker writes a job and
waits for its answer. ``config.compile_workers`` sets how many; 0 or 1 builds
everything in this process. A worker that dies, or a build that takes longer than
`JOB_TIMEOUT_S`, stops the pool for good (logged under ``cache``); the builds go on
here. A job carries this process's toolchain versions, and a worker whose own differ
(another copy of inductor_lite) refuses it.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import concurrent.futures.thread  # noqa: F401 - its exit hook must be registered before ours
import os
import pickle
import struct
import subprocess
import sys
import threading
from typing import Any, Optional, Sequence

from ..config import config
from ..dsl import compiler
from ..logs import log_artifact

_HEADER = struct.Struct("<Q")  # every message: its byte length, then a pickle

JOB_TIMEOUT_S = 600.0
"""How long `prebuild` waits for one binary before it stops the workers (a build that
hangs a worker must not hang the compile; the launcher then builds in this process)."""

_executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
_executor_size = 0
_workers: list[subprocess.Popen] = []
_local = threading.local()  # each executor thread's own worker process
_lock = threading.Lock()
_broken = False
_ready: dict[str, Any] = {}  # binary key -> CompiledBinary a worker built, until taken


class WorkerDied(RuntimeError):
    """A compile worker exited or stopped answering mid-job."""


def can_build_in_workers() -> bool:
    """Whether a worker would assemble PTX as this process does: nvJitLink loads, or
    no CUDA context is current here (so this process uses ptxas too)."""
    from ..dsl import assembler

    if assembler.nvjitlink_version() is not None:
        return True
    return assembler.ptxas_path() is not None and not assembler._driver_has_context()


def prebuild(builds: Sequence[tuple[Any, tuple[Any, int, int, Optional[int]]]], cc: tuple[int, int]) -> int:
    """Build binaries in the workers and keep them for `take`.

    Args:
        builds: ``(kernel, (specialisation, num_warps, num_stages, maxnreg))`` per
            binary, as the launcher will ask for it; ``kernel`` is a DSL kernel
            (``inductor_lite.dsl.kernel.Kernel``).
        cc: the target's compute capability, e.g. ``(9, 0)``.

    Returns:
        How many binaries the workers built. Builds in the disk cache or already
        waiting are skipped; with fewer than two left, or no workers, none is built
        (the launcher builds on demand, as without workers). A build that fails is
        dropped: the launcher's own build raises its error with full context.
    """
    from .cache import default_cache
    from .launcher import binary_key

    cache = default_cache()
    todo = {}
    for kernel, (spec, num_warps, num_stages, maxnreg) in builds:
        key = binary_key(kernel, spec, num_warps, cc, num_stages, maxnreg)
        if key not in todo and key not in _ready and not (cache.enabled and os.path.exists(cache.path(key))):
            todo[key] = (kernel, spec, num_warps, num_stages, maxnreg)
    executor = _get_executor() if len(todo) > 1 else None
    if executor is None:
        return 0
    toolchain = compiler.toolchain_versions()
    futures = {}
    for key, (kernel, spec, num_warps, num_stages, maxnreg) in todo.items():
        try:
            fn = kernel.build_ir(spec)
        except Exception:  # noqa: BLE001 - a candidate that does not build: the launcher reports it
            continue
        futures[key] = executor.submit(_run, (toolchain, (fn, cc, num_warps, num_stages, maxnreg)))
    built = 0
    for key, future in futures.items():
        try:
            ok, result = future.result(timeout=JOB_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - build errors come back as answers: this is the worker itself
            if not _broken:
                _stop(f"compile worker failed ({type(error).__name__}: {error}): building in this process from now on")
            break
        if ok:
            _ready[key] = result
            built += 1
    return built


def prebuild_graph(namespace: dict, plan: Sequence[tuple[str, tuple]]) -> int:
    """Build, all at once, the binaries the first call of a loaded wrapper module will
    ask for (`prebuild`), so that they build in parallel across kernels too.

    Args:
        namespace: the module's globals (`codegen.wrapper.load_module`).
        plan: ``(launcher name, arguments)`` per kernel whose integer arguments are
            known (`codegen.wrapper.WrapperCode.prebuild`), each tensor argument given
            as its dtype. Stand-ins with 16-byte aligned pointers take their place:
            a real argument that is not aligned needs another binary, which its
            launch builds then.

    Returns:
        How many binaries the workers built.
    """
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from . import driver

    by_cc: dict[tuple[int, int], list] = {}
    with unset_fake_temporarily():  # modules load inside the compiler's fake mode
        for launcher_name, arg_types in plan:
            launch = namespace[launcher_name]
            args = tuple(torch.empty(0, dtype=a, device="meta") if isinstance(a, torch.dtype) else a
                         for a in arg_types)
            builds = by_cc.setdefault(driver.compute_capability(launch.device_index), [])
            builds += [(launch.kernel, b) for b in launch.planned_builds(args)]
    return sum(prebuild(builds, cc) for cc, builds in by_cc.items())


def take(key: str) -> Optional[Any]:
    """The binary a worker built for ``key`` (`launcher.binary_key`), once; None if none."""
    return _ready.pop(key, None) if _ready else None


def forget_built() -> None:
    """Drop the binaries built and not taken (`launcher.clear_memory_cache` calls this:
    a bench's warm compile must build, or find on disk, what it needs)."""
    _ready.clear()


def shutdown() -> None:
    """Stop the workers (a later `prebuild` starts new ones) and drop unused binaries."""
    global _broken
    _stop(None)
    _broken = False
    _ready.clear()


def _run(job: tuple) -> tuple[bool, Any]:
    """Run one job in this executor thread's worker: ``(True, binary)`` or ``(False, error text)``."""
    if _broken:
        raise WorkerDied("the compile workers were stopped")
    worker = getattr(_local, "worker", None)
    if worker is None or worker.poll() is not None:
        worker = _local.worker = _start_worker()
    data = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        worker.stdin.write(_HEADER.pack(len(data)) + data)
        worker.stdin.flush()
        header = worker.stdout.read(_HEADER.size)
        if len(header) < _HEADER.size:
            raise WorkerDied(f"worker {worker.pid} exited with code {worker.wait()}")
        (size,) = _HEADER.unpack(header)
        return pickle.loads(worker.stdout.read(size))
    except (BrokenPipeError, ValueError):  # its pipe broke, or `_stop` closed it
        raise WorkerDied(f"worker {worker.pid} exited with code {worker.wait()}") from None


# The worker's bootstrap: keep the real stdout for answers and send anything printed
# (during the imports too) to stderr, then import this very copy of inductor_lite
# (``python -m`` would put the working directory, maybe another checkout, first). The
# packages on the way are bare modules: their ``__init__`` would import torch (the
# backend, the DSL's kernel objects), which a build does not need (`build`).
_BOOTSTRAP = """import os, sys, types
answers = os.dup(1)
os.dup2(2, 1)
for name in ("inductor_lite", "inductor_lite.dsl", "inductor_lite.runtime"):
    package = types.ModuleType(name)
    package.__path__ = [os.path.join({root!r}, *name.split("."))]
    sys.modules[name] = package
from inductor_lite.runtime.compile_worker import main
main(answers)
"""


def _start_worker() -> subprocess.Popen:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", INDUCTOR_LITE_COMPILE_WORKERS="0")
    worker = subprocess.Popen([sys.executable, "-c", _BOOTSTRAP.format(root=root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    with _lock:
        _workers.append(worker)
    return worker


def _get_executor() -> Optional[concurrent.futures.ThreadPoolExecutor]:
    global _executor, _executor_size
    size = config.compile_workers
    if size < 2 or _broken or not can_build_in_workers():
        return None
    with _lock:
        stale = _executor is not None and _executor_size != size
    if stale:
        _stop(None)
    with _lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(size, thread_name_prefix="inductor_lite_compile")
            _executor_size = size
        return _executor


def _stop(reason: Optional[str]) -> None:
    """Shut the executor down and kill the workers (a thread waiting on one then reads
    end of file and ends); with a ``reason``, for good, and logged."""
    global _executor, _broken, _local
    if reason is not None:
        _broken = True
        log_artifact("cache", reason)
    with _lock:
        executor, _executor = _executor, None
        workers = list(_workers)
        _workers.clear()
    for worker in workers:
        worker.kill()
    if executor is not None:
        executor.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.wait()
    _local = threading.local()


# At exit, kill the workers and cancel queued builds before the interpreter joins the
# executor's threads: its exit hook lets them finish every queued build first, which
# after a Ctrl-C in the middle of a compile meant minutes of waiting. Hooks registered
# with `threading._register_atexit` run in reverse order, so this one precedes the
# executor's (registered when concurrent.futures.thread was imported, above).
getattr(threading, "_register_atexit", atexit.register)(_stop, None)
