"""Measuring one model on several ``torch.compile`` backends.

The method follows PyTorch's own compiler benchmarks (``benchmarks/dynamo/common.py``
in pytorch/pytorch), reimplemented here:

- accuracy: one iteration of the model in fp64 is the reference; eager in the chosen
  dtype must be matched by the compiled run either by ``allclose`` or, failing that, by
  an RMSE against fp64 no worse than a small multiple of eager's own RMSE (the rule of
  ``torch._dynamo.utils.same(..., fp64_ref=...)``). Inference compares the output;
  training compares the loss and every parameter gradient after one forward/backward.
- speedup: wall time per iteration, eager and every compiled backend interleaved round
  by round in one timing after warm-up (so all rows of a model share one eager
  baseline), each sample several iterations queued back to back between CUDA events
  (`walltime.time_contenders`); the speedup is the median of the per-round ratios
  eager / compiled, with their quartiles, and each time its median and interquartile
  range.
- ``compile_mode``: ``torch.compile``'s ``mode`` for every compiled backend (the
  baseline stays plain eager); under the CUDA-graph modes each compiled iteration
  starts with ``torch.compiler.cudagraph_mark_step_begin()``, as the dynamo
  benchmarks do.
- peak memory: ``torch.cuda.max_memory_allocated`` over one iteration after
  ``reset_peak_memory_stats``; the ratio is eager peak / compiled peak.
- compile latency: time of the first call minus eager's median iteration time. Cold:
  an empty on-disk cache; warm: the same cache directory after ``torch._dynamo.reset()``
  with the backend's in-memory caches cleared; with ``Settings.fresh_process``, also a
  warm start in a new process from the same cache directory (`fresh_start`), which is
  what a user's second run pays. One cold and one warm compile each, so no spread; the
  fresh start is the median of `FRESH_ROUNDS`, taken in rounds across the backends.

A training iteration is ``zero_grad``, forward, mean cross-entropy loss, backward; the
optimizer step is left out because it runs outside the compiled module.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import dataclasses
import functools
import gc
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from .models import ModelSpec
from .walltime import time_contenders

log = logging.getLogger("inductor_lite.bench")

MODES = ("inference", "training")
DTYPES = ("fp32", "bf16", "amp")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""``torch.compile`` modes; ``reduce-overhead`` and ``max-autotune`` use CUDA graphs."""


def uses_cudagraphs(compile_mode: str) -> bool:
    """Whether ``torch.compile`` runs a mode's compiled code under CUDA graphs."""
    return compile_mode in ("reduce-overhead", "max-autotune")

# allclose tolerance: TorchDynamo's HuggingFace and timm suites use 1e-3 for inference
# and 1e-2 for training (get_tolerance_and_cosine_flag in benchmarks/dynamo/).
TOLERANCE = {"inference": 1e-3, "training": 1e-2}

STATUS_OK = "ok"
STATUS_SKIPPED = "skipped"
STATUS_EAGER_FAILED = "eager_failed"
STATUS_FAILED = "failed"
STATUS_OOM = "oom"
ACCURACY_PASS = "pass"
ACCURACY_FAIL = "fail_accuracy"

_MIB = 2**20


@dataclasses.dataclass(frozen=True)
class Settings:
    """What to measure and how.

    Attributes:
        mode: ``"inference"`` (eval mode, no grad) or ``"training"`` (train mode, loss and backward).
        dtype: ``"fp32"``, ``"bf16"`` (weights and float inputs cast to bfloat16) or
            ``"amp"`` (fp32 weights under ``torch.autocast`` to bfloat16; bfloat16 needs no
            gradient scaler, unlike the float16 autocast of the dynamo benchmarks).
        device: ``"cuda"`` or ``"cpu"``.
        batch_size: overrides each model's default batch size when set.
        repeat: timed rounds per backend; each round takes one sample of eager and of
            the compiled module, of several iterations each (`walltime`).
        warmup: untimed iterations of each before timing.
        tiny: tiny model configs (CPU smoke tests).
        seed: seeds weights and inputs.
        compile_mode: ``torch.compile``'s ``mode`` (one of `COMPILE_MODES`) for every
            compiled backend.
        fresh_process: also time a warm compile in a fresh process (`fresh_start`).

    Raises:
        ValueError: an unknown mode, dtype, device or compile mode, or a count out of range.
    """

    mode: str = "inference"
    dtype: str = "fp32"
    device: str = "cpu"
    batch_size: int | None = None
    repeat: int = 30
    warmup: int = 5
    tiny: bool = False
    seed: int = 0
    compile_mode: str = "default"
    fresh_process: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.device not in ("cuda", "cpu"):
            raise ValueError(f"device must be 'cuda' or 'cpu', got {self.device!r}")
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f"compile mode must be one of {COMPILE_MODES}, got {self.compile_mode!r}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.batch_size}")
        if self.repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {self.repeat}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")

    @property
    def training(self) -> bool:
        return self.mode == "training"


@dataclasses.dataclass
class Result:
    """One row of the report: one model on one backend.

    ``status`` is ``ok`` (every measurement ran), ``skipped`` (the model's package is
    missing), ``eager_failed`` (the model does not run eagerly, so nothing was compared),
    ``failed`` (the backend raised; ``note`` has the error) or ``oom``. ``accuracy`` is
    ``pass`` or ``fail_accuracy`` once checked, else empty. ``speedup`` is the median of
    the per-round ratios eager / compiled, ``speedup_q1``/``speedup_q3`` their
    quartiles. Times: ``eager_ms`` and ``compiled_ms`` are median wall times per
    iteration in milliseconds, ``*_iqr_ms`` their interquartile ranges;
    ``compile_*_s`` seconds (one compile each; ``compile_fresh_s`` the warm compile in
    a fresh process, when measured); memory in MiB (CUDA only). ``kernels``,
    ``fallbacks`` (aten extern calls) and ``graph_fallbacks`` (graphs run eagerly) come
    from ``inductor_lite.counters`` during the cold compile and are empty for other
    backends.
    """

    model: str
    suite: str
    backend: str
    mode: str
    dtype: str
    device: str
    batch_size: int
    status: str
    accuracy: str = ""
    speedup: float | None = None
    speedup_q1: float | None = None
    speedup_q3: float | None = None
    eager_ms: float | None = None
    eager_iqr_ms: float | None = None
    compiled_ms: float | None = None
    compiled_iqr_ms: float | None = None
    compile_cold_s: float | None = None
    compile_warm_s: float | None = None
    compile_fresh_s: float | None = None
    eager_peak_mib: float | None = None
    compiled_peak_mib: float | None = None
    memory_ratio: float | None = None
    kernels: int | None = None
    fallbacks: int | None = None
    graph_fallbacks: int | None = None
    compile_mode: str = "default"
    note: str = ""


# ---------------------------------------------------------------- accuracy


def rmse(fp64_ref: torch.Tensor, x: torch.Tensor) -> float:
    """Root mean squared error of ``x`` against ``fp64_ref``, computed in fp64."""
    return (fp64_ref.double() - x.double()).square().mean().sqrt().item()


def check_accuracy(ref: Any, res: Any, fp64_ref: Any, tol: float, path: str = "output") -> str | None:
    """Compare a compiled result with eager's, the way ``torch._dynamo.utils.same`` does.

    ``ref`` (eager, benchmark dtype), ``res`` (compiled) and ``fp64_ref`` (eager in fp64)
    are matching trees of tensors in dicts, lists and tuples. A float tensor passes when
    ``allclose(ref, res, rtol=tol, atol=tol)`` holds, or else when
    ``rmse(fp64_ref, res) <= m * rmse(fp64_ref, ref) + tol / 10`` with ``m = 3`` for
    half-precision results or fewer than 1000 elements (noise dominates) and ``m = 2``
    otherwise. NaN never passes. Other tensors must be equal.

    Returns:
        ``None`` when everything passes, else a sentence naming the first failing leaf.
    """
    if isinstance(ref, dict):
        if not isinstance(res, dict) or set(ref) != set(res):
            return f"{path}: keys differ"
        for key in ref:
            failure = check_accuracy(ref[key], res[key], fp64_ref[key], tol, f"{path}[{key!r}]")
            if failure:
                return failure
        return None
    if isinstance(ref, (list, tuple)):
        if not isinstance(res, (list, tuple)) or len(ref) != len(res):
            return f"{path}: lengths differ"
        for i, (a, b, c) in enumerate(zip(ref, res, fp64_ref)):
            failure = check_accuracy(a, b, c, tol, f"{path}[{i}]")
            if failure:
                return failure
        return None
    if not isinstance(ref, torch.Tensor):
        return None if ref == res else f"{path}: {res!r} != {ref!r}"
    if not isinstance(res, torch.Tensor):
        return f"{path}: got {type(res).__name__}, expected a tensor"
    if res.shape != ref.shape or res.dtype != ref.dtype:
        return f"{path}: got {res.dtype}{list(res.shape)}, expected {ref.dtype}{list(ref.shape)}"
    if not ref.is_floating_point():
        return None if torch.equal(ref, res) else f"{path}: values differ"
    if torch.allclose(ref, res, rtol=tol, atol=tol):
        return None
    ref_error, res_error = rmse(fp64_ref, ref), rmse(fp64_ref, res)
    multiplier = 3.0 if res.dtype in (torch.float16, torch.bfloat16) or res.numel() < 1000 else 2.0
    # A NaN error fails this comparison, so NaN never passes.
    if res_error <= multiplier * ref_error + tol / 10:
        return None
    return (
        f"{path}: RMSE vs fp64 {res_error:.3g} > {multiplier:g} x eager's {ref_error:.3g} + {tol / 10:g}"
    )


# ---------------------------------------------------------------- timing and memory


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_first_call(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float]:
    """Run ``fn`` once; return its result and the wall time in seconds, device work included."""
    _synchronize(device)
    start = time.perf_counter()
    out = fn()
    _synchronize(device)
    return out, time.perf_counter() - start


def peak_memory_bytes(fn: Callable[[], Any], device: torch.device) -> int | None:
    """Peak bytes allocated by torch's CUDA allocator during one call of ``fn`` (``None`` off CUDA).

    Counts everything live (weights, inputs) plus what the call allocates, as
    ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` does.
    """
    if device.type != "cuda":
        return None
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device)


# ---------------------------------------------------------------- compile caches


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables, restoring (or removing) them on exit."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


@contextlib.contextmanager
def fresh_disk_cache(backend: str) -> Iterator[str]:
    """An empty temporary on-disk compile cache for ``backend``, deleted on exit.

    inductor_lite: ``INDUCTOR_LITE_CACHE_DIR`` and ``config.cache_dir`` (cache forced on);
    inductor: ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR``; other backends keep
    nothing on disk. Yields the directory.
    """
    with tempfile.TemporaryDirectory(prefix=f"bench_{backend}_cache_") as directory:
        if backend == "inductor_lite":
            from inductor_lite.config import config

            with _environ({"INDUCTOR_LITE_CACHE_DIR": directory}), config.patch(
                cache_dir=directory, disable_cache=False
            ):
                yield directory
        elif backend == "inductor":
            triton_dir = os.path.join(directory, "triton")
            with _environ({"TORCHINDUCTOR_CACHE_DIR": directory, "TRITON_CACHE_DIR": triton_dir}):
                yield directory
        else:
            yield directory


def reset_compiler(backend: str) -> None:
    """Forget compiled code: ``torch._dynamo.reset()`` and the backend's in-memory caches."""
    torch._dynamo.reset()
    if backend == "inductor":
        from torch._inductor.utils import clear_caches

        clear_caches()
    elif backend == "inductor_lite":
        from inductor_lite.runtime import clear_memory_cache

        clear_memory_cache()


# ---------------------------------------------------------------- one model


class _WithLoss(nn.Module):
    """The training objective: ``forward(*args, target)`` is the mean cross entropy of ``model(*args)``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        *args, target = inputs
        logits = self.model(*args)
        # Loss in at least fp32 (fp64 for the reference), as HF models compute theirs.
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


_TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "amp": torch.float32}


def _cast_floats(tensors: tuple[torch.Tensor, ...], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(dtype) if t.is_floating_point() else t for t in tensors)


def _detached_cpu(tree: Any) -> Any:
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, dict):
        return {k: _detached_cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_detached_cpu(v) for v in tree)
    return tree


class Workload:
    """A model prepared for one `Settings`: the eager module, its inputs and the references.

    Building it runs one eager iteration, so a model that fails eagerly raises here.

    Attributes:
        eager: the uncompiled module (dtype-cast, on the device; wrapped with the loss in training).
        inputs: positional inputs of ``eager`` (the target last in training).
        fp64_ref, eager_ref: results of one iteration in fp64 and in the benchmark dtype,
            on the CPU; ``None`` with ``references=False`` (timing alone needs none).
    """

    def __init__(self, spec: ModelSpec, settings: Settings, references: bool = True):
        self.spec, self.settings = spec, settings
        self.device = torch.device(settings.device)
        self.autocast_dtype = torch.bfloat16 if settings.dtype == "amp" else None
        model = spec.build(settings.tiny, settings.seed)
        batch = spec.make_inputs(settings.batch_size, settings.tiny, self.device, settings.seed)
        self.batch_size = batch.target.shape[0]
        inputs = batch.args + ((batch.target,) if settings.training else ())

        self.fp64_ref = self.eager_ref = None
        if references:
            reference = self._prepare(copy.deepcopy(model), torch.float64)
            self.fp64_ref = self.results(
                reference, self._iterate(reference, _cast_floats(inputs, torch.float64), None)
            )
            del reference

        dtype = _TORCH_DTYPES[settings.dtype]
        self.eager = self._prepare(model, dtype)
        self.inputs = _cast_floats(inputs, dtype)
        out = self.run(self.eager)
        if references:
            self.eager_ref = self.results(self.eager, out)
        del out
        self.drop_grads(self.eager)

    def _prepare(self, model: nn.Module, dtype: torch.dtype) -> nn.Module:
        module = _WithLoss(model) if self.settings.training else model
        return module.train(self.settings.training).to(device=self.device, dtype=dtype)

    def _iterate(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], autocast_dtype) -> Any:
        """One iteration: the output (inference) or the loss after backward (training)."""
        autocast = (
            torch.autocast(self.device.type, dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()
        )
        if not self.settings.training:
            with torch.no_grad(), autocast:
                return module(*inputs)
        module.zero_grad(set_to_none=True)
        with autocast:
            loss = module(*inputs)
        loss.backward()
        return loss

    def run(self, module: nn.Module) -> Any:
        """One iteration of ``module`` (eager or compiled) on the benchmark inputs."""
        return self._iterate(module, self.inputs, self.autocast_dtype)

    def iteration(self, compiled: nn.Module, compile_mode: str) -> Callable[[], None]:
        """A timed iteration of a module compiled with ``compile_mode``, result dropped.

        Under the CUDA-graph modes it first marks a new step, so the compiler knows the
        previous iteration's outputs are no longer used.
        """
        mark_step = uses_cudagraphs(compile_mode)

        def iterate() -> None:
            if mark_step:
                torch.compiler.cudagraph_mark_step_begin()
            self.run(compiled)

        return iterate

    def results(self, module: nn.Module, out: Any) -> Any:
        """What accuracy compares, on the CPU: the output, or the loss and every gradient.

        ``module`` is the uncompiled module whose parameters the iteration used.
        """
        if not self.settings.training:
            return _detached_cpu(out)
        grads = {
            name: p.grad if p.grad is not None else torch.zeros_like(p) for name, p in module.named_parameters()
        }
        return _detached_cpu({"loss": out, "grads": grads})

    def drop_grads(self, *modules: nn.Module) -> None:
        """Free gradients so they do not count towards the next memory peak."""
        for module in modules:
            module.zero_grad(set_to_none=True)


def describe_error(error: BaseException) -> str:
    """``Type: first paragraph of the message`` on one line, at most 300 characters.

    The first paragraph keeps the cause that TorchDynamo's wrappers put on their second
    line (``backend='x' raised:`` / ``RuntimeError: ...``) and drops their advice.
    """
    paragraph = str(error).strip().split("\n\n")[0]
    message = " ".join(line.strip() for line in paragraph.splitlines())
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _mib(n_bytes: int | None) -> float | None:
    return None if n_bytes is None else n_bytes / _MIB


def compile_module(module: nn.Module, backend: str, compile_mode: str = "default") -> nn.Module:
    """``torch.compile(module, backend=backend, mode=compile_mode)``; the default mode
    passes no ``mode``, so backends that take none are compiled as they always were."""
    return torch.compile(module, backend=backend, mode=None if compile_mode == "default" else compile_mode)


def compile_and_run(work: Workload, backend: str) -> tuple[nn.Module, nn.Module, Any, float]:
    """Compile a fresh copy of the eager module and run its first iteration.

    Returns:
        ``(module, compiled, output, seconds)``: the uncompiled copy (its parameters hold
        the gradients), the compiled module, the iteration's output and its wall time
        including compilation.
    """
    module = copy.deepcopy(work.eager)
    compiled = compile_module(module, backend, work.settings.compile_mode)
    out, seconds = time_first_call(lambda: work.run(compiled), work.device)
    return module, compiled, out, seconds


FRESH_ROUNDS = 3
"""Fresh-process warm starts taken per backend: one new process's first call varies from
the next by more than two compilers' warm starts differ, so the column is a median."""


@functools.cache
def _bytecode_cache() -> str:
    """A directory for the children's compiled bytecode (``PYTHONPYCACHEPREFIX``), kept
    while this process runs: where site-packages is read-only, as in some container
    images, each child would otherwise compile every module it imports (seconds before
    its clock starts, times nine children a model). Imports are not timed, so this
    changes the suite's length, not its numbers."""
    directory = tempfile.mkdtemp(prefix="bench_pycache_")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


def fresh_process_first_call(work: Workload, backend: str, timeout_s: float = 1800) -> tuple[float, dict]:
    """Wall seconds of ``backend``'s first call of ``work``'s model in a new Python process
    (`fresh_start`), and the child's counters (``fresh_start``'s reply: ``counters``,
    ``inductor_counters``).

    The child gets what decides a cache hit from this process: the environment (the
    disk caches `fresh_disk_cache` points at, inductor_lite's cache switched on) and the
    TF32 flags, which inductor's cache keys include.

    Raises:
        RuntimeError: the child failed (its last stderr lines in the message), ran past
            ``timeout_s`` or wrote no result.
    """
    with tempfile.TemporaryDirectory(prefix="bench_fresh_") as directory:
        result = os.path.join(directory, "result.json")
        request = json.dumps({
            "model": work.spec.name, "backend": backend, "settings": dataclasses.asdict(work.settings),
            "result": result, "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_tf32": torch.backends.cudnn.allow_tf32,
        })
        command = [sys.executable, "-m", "inductor_lite.bench.fresh_start", request]
        env = {"PYTHONPYCACHEPREFIX": _bytecode_cache(), **os.environ, "INDUCTOR_LITE_DISABLE_CACHE": "0"}
        try:
            child = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired as error:
            raise RuntimeError(f"fresh-process warm start ran past {timeout_s:.0f} s") from error
        if child.returncode != 0 or not os.path.exists(result):
            tail = " | ".join(child.stderr.strip().splitlines()[-3:])
            raise RuntimeError(f"fresh-process warm start exited with {child.returncode}: {tail}")
        with open(result) as f:
            reply = json.load(f)
    return reply["first_call_s"], reply


def _record_lite_counters(row: Result) -> None:
    from inductor_lite.counters import counters

    row.kernels, row.fallbacks = counters["kernels_generated"], counters["extern_calls"]
    row.graph_fallbacks = counters["graphs_fallback"]
    if row.graph_fallbacks:
        row.note = f"{row.graph_fallbacks} graph(s) ran eagerly"


def _measure_backend(work: Workload, backend: str, row: Result) -> tuple[float, float]:
    """Fill ``row``'s accuracy and peak memory for ``backend`` (its speed is timed later,
    with every contender: `_time_together`); returns the wall seconds of its cold and
    warm first calls. Raises whatever the backend raises. The caller holds
    ``backend``'s `fresh_disk_cache` open."""
    settings, device = work.settings, work.device
    # Cold: an empty disk cache and nothing compiled in memory.
    reset_compiler(backend)
    if backend == "inductor_lite":
        from inductor_lite.counters import reset

        reset()
    cold_first_s = compile_and_run(work, backend)[-1]
    if backend == "inductor_lite":
        _record_lite_counters(row)

    # Warm: the disk cache the cold compile filled, in-memory state dropped again.
    reset_compiler(backend)
    gc.collect()
    module, compiled, out, warm_first_s = compile_and_run(work, backend)
    failure = check_accuracy(work.eager_ref, work.results(module, out), work.fp64_ref, TOLERANCE[settings.mode])
    del out
    row.accuracy = ACCURACY_PASS if not failure else ACCURACY_FAIL
    if failure:
        row.note = "; ".join(filter(None, [row.note, failure]))

    def eager_iteration() -> None:
        work.run(work.eager)

    compiled_iteration = work.iteration(compiled, settings.compile_mode)
    work.drop_grads(work.eager, module)
    eager_peak = peak_memory_bytes(eager_iteration, device)
    work.drop_grads(work.eager, module)
    compiled_peak = peak_memory_bytes(compiled_iteration, device)
    if eager_peak is not None and compiled_peak:
        row.eager_peak_mib, row.compiled_peak_mib = _mib(eager_peak), _mib(compiled_peak)
        row.memory_ratio = eager_peak / compiled_peak

    row.status = STATUS_OK
    return cold_first_s, warm_first_s


def _fresh_starts(work: Workload, rows: list[Result]) -> dict[str, float]:
    """Median wall seconds of `FRESH_ROUNDS` fresh-process first calls of each row's
    backend, taken in rounds (each backend once a round) so that whatever else the
    machine runs meanwhile falls on all of them alike. A backend whose child fails gets
    no number, and the error in its row's note. The caller holds every backend's
    `fresh_disk_cache` open."""
    samples: dict[str, list[float]] = {row.backend: [] for row in rows}
    for _ in range(FRESH_ROUNDS):
        for row in rows:
            if row.backend not in samples:
                continue
            gc.collect()
            if work.device.type == "cuda":
                torch.cuda.empty_cache()  # the child's model must fit beside this process's
            try:
                samples[row.backend].append(fresh_process_first_call(work, row.backend)[0])
            except RuntimeError as error:  # an optional column: the row keeps its other numbers
                row.note = "; ".join(filter(None, [row.note, str(error)[:300]]))
                del samples[row.backend]
    return {backend: statistics.median(seconds) for backend, seconds in samples.items()}


def _time_together(work: Workload, rows: list[Result]) -> float:
    """Time eager and every measured backend in the same interleaved rounds, and fill
    each row's times and speedup from them (one eager baseline for all rows). Returns
    eager's median seconds per iteration (one eager call's time when no backend could
    be timed).

    Timed in rounds of its own, each backend's speedup carried the drift between its
    rounds and the others' (clocks, other processes) into the comparison of two
    backends (docs/performance.md has a case). Each backend is compiled once more
    here, from the disk cache its measurement filled, with nothing reset in between
    (Dynamo keeps one cache entry per backend). A backend that fails here gets its row
    marked failed. When every backend at once does not fit in the device's memory
    (each holds its own copy of the model), each is timed beside eager alone instead,
    and its note says so.
    """
    if len(rows) < 2:
        return _time_in_rounds(work, rows, oom_raises=False)
    try:
        return _time_in_rounds(work, rows, oom_raises=True)
    except torch.cuda.OutOfMemoryError:
        log.debug("%s: every backend at once ran out of memory; timing each beside eager", rows[0].model,
                  exc_info=True)
    eager_s = None
    for row in rows:
        cleanup(work.device)
        row_eager_s = _time_in_rounds(work, [row], oom_raises=False)
        eager_s = row_eager_s if eager_s is None else eager_s
        row.note = "; ".join(filter(None, [row.note, "timed beside eager alone (all backends at once ran out of memory)"]))
    return eager_s


def _time_in_rounds(work: Workload, rows: list[Result], oom_raises: bool) -> float:
    """`_time_together`'s one attempt: ``rows``' backends and eager in the same rounds.
    With ``oom_raises``, running out of memory anywhere raises instead of failing a row."""
    settings, device = work.settings, work.device
    torch._dynamo.reset()
    contenders, timed = [lambda: work.run(work.eager)], []
    for row in rows:
        try:
            module, compiled, out, _ = compile_and_run(work, row.backend)
            del out
            work.drop_grads(module)
            contenders.append(work.iteration(compiled, settings.compile_mode))
            timed.append((row, module))
        except Exception as error:  # noqa: BLE001 - one backend's failure must not stop the others
            if oom_raises and isinstance(error, torch.cuda.OutOfMemoryError):
                raise
            log.debug("%s on %s failed when timed", row.model, row.backend, exc_info=True)
            row.status = STATUS_OOM if isinstance(error, torch.cuda.OutOfMemoryError) else STATUS_FAILED
            row.note = "; ".join(filter(None, [row.note, describe_error(error)]))
    if not timed:
        return time_first_call(contenders[0], device)[1]
    eager, *compiled_times = time_contenders(contenders, device, settings.warmup, settings.repeat)
    for (row, _), times in zip(timed, compiled_times):
        row.eager_ms, row.eager_iqr_ms = eager.median_s * 1e3, eager.iqr_s * 1e3
        row.compiled_ms, row.compiled_iqr_ms = times.median_s * 1e3, times.iqr_s * 1e3
        row.speedup, row.speedup_q1, row.speedup_q3 = eager.ratio_to(times)
    return eager.median_s


def cleanup(device: torch.device) -> None:
    """Drop compiled code and free what the last model left (between models and backends)."""
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def unmeasured_result(spec: ModelSpec, settings: Settings, backend: str, status: str, note: str = "",
                      batch_size: int | None = None) -> Result:
    """A row of ``spec`` on ``backend`` with no numbers yet (or none to come: ``status``
    and ``note`` say why); ``batch_size`` defaults to the one ``settings`` give the model."""
    if batch_size is None:
        batch_size = settings.batch_size or (spec.tiny_batch_size if settings.tiny else spec.batch_size)
    return Result(
        model=spec.name, suite=spec.suite, backend=backend, mode=settings.mode, dtype=settings.dtype,
        device=settings.device, batch_size=batch_size, status=status, compile_mode=settings.compile_mode, note=note,
    )


def measure_model(spec: ModelSpec, backends: list[str], settings: Settings) -> Iterator[Result]:
    """Measure ``spec`` on each backend in order; yields one `Result` per backend.

    ``backends`` are ``torch.compile`` backend names (``eager`` means TorchDynamo
    capture with the eager backend; the baseline of every speedup is the uncompiled
    module). Errors never propagate: a missing package, an eager failure or a backend
    error becomes the row's ``status`` and ``note`` (traceback on the
    ``inductor_lite.bench`` logger at DEBUG).
    """
    device = torch.device(settings.device)

    def row(backend: str, status: str, note: str = "", batch_size: int | None = None) -> Result:
        return unmeasured_result(spec, settings, backend, status, note, batch_size)

    reason = spec.unavailable_reason()
    if reason:
        for backend in backends:
            yield row(backend, STATUS_SKIPPED, reason)
        return
    try:
        work = Workload(spec, settings)
    except Exception as error:  # noqa: BLE001 - any eager failure is reported, not raised
        log.debug("%s: eager run failed", spec.name, exc_info=True)
        status = STATUS_OOM if isinstance(error, torch.cuda.OutOfMemoryError) else STATUS_EAGER_FAILED
        cleanup(device)
        for backend in backends:
            yield row(backend, status, describe_error(error))
        return
    results, first_calls = [], {}
    with contextlib.ExitStack() as caches:  # each backend's disk cache lives until the timing
        for backend in backends:
            result = row(backend, STATUS_FAILED, batch_size=work.batch_size)
            results.append(result)
            try:
                caches.enter_context(fresh_disk_cache(backend))
                first_calls[backend] = _measure_backend(work, backend, result)
            except Exception as error:  # noqa: BLE001 - one backend's failure must not stop the run
                log.debug("%s on %s failed", spec.name, backend, exc_info=True)
                result.status = STATUS_OOM if isinstance(error, torch.cuda.OutOfMemoryError) else STATUS_FAILED
                result.note = "; ".join(filter(None, [result.note, describe_error(error)]))
            finally:
                cleanup(device)
        measured = [r for r in results if r.status == STATUS_OK]
        fresh = _fresh_starts(work, measured) if settings.fresh_process else {}
        try:
            eager_s = _time_together(work, measured)
        except Exception as error:  # noqa: BLE001 - reported in every row it cost its timing
            log.debug("%s: timing failed", spec.name, exc_info=True)
            eager_s = None
            for result in measured:
                result.status = STATUS_OOM if isinstance(error, torch.cuda.OutOfMemoryError) else STATUS_FAILED
                result.note = "; ".join(filter(None, [result.note, describe_error(error)]))
        finally:
            cleanup(device)
    for result in results:
        if result.backend in first_calls and eager_s is not None:
            # As the dynamo benchmarks do: the first call's time less one eager iteration.
            cold_s, warm_s = first_calls[result.backend]
            result.compile_cold_s, result.compile_warm_s = cold_s - eager_s, warm_s - eager_s
            if result.backend in fresh:
                result.compile_fresh_s = fresh[result.backend] - eager_s
    yield from results
    del work
    cleanup(device)

