"""Measuring several models at once: one child process per model, ``jobs`` at a time.

Each child is ``python -m inductor_lite.bench`` for one model with the parent's
settings, so a model is measured exactly as in a sequential run (its contenders
interleaved in one process, eager its baseline); only models run side by side. On CUDA
each job slot owns one GPU (``CUDA_VISIBLE_DEVICES``), so timings of two models never
share a device; the host's CPUs are shared, which the compile columns feel more than
the timings, so each child's compile workers (inductor_lite's and inductor's) default to
its share of them. A child that crashes or runs past ``timeout_s`` costs only its own model:
its rows come back ``failed`` with the reason in the note.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
from typing import Callable, Sequence

from .measure import STATUS_FAILED, Result, Settings, unmeasured_result
from .models import ModelSpec


def child_argv(settings: Settings, backends: Sequence[str], verbose: bool = False) -> list[str]:
    """The ``python -m inductor_lite.bench`` options that reproduce ``settings`` and
    ``backends`` (every option but ``--models``, ``--output`` and ``--jobs``)."""
    argv = ["--mode", settings.mode, "--dtype", settings.dtype, "--device", settings.device,
            "--backends", ",".join(backends), "--repeat", str(settings.repeat), "--warmup", str(settings.warmup),
            "--seed", str(settings.seed), "--compile-mode", settings.compile_mode]
    if settings.batch_size is not None:
        argv += ["--batch-size", str(settings.batch_size)]
    argv += ["--tiny"] * settings.tiny + ["--fresh-process"] * settings.fresh_process + ["-v"] * verbose
    return argv


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as ``CUDA_VISIBLE_DEVICES`` entries."""
    import torch

    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


def run_parallel(specs: Sequence[ModelSpec], backends: Sequence[str], settings: Settings, jobs: int,
                 timeout_s: float | None = None, verbose: bool = False,
                 on_model: Callable[[list[Result]], None] | None = None) -> list[Result]:
    """Measure each of ``specs`` in a child process, at most ``jobs`` at once.

    Args:
        jobs: job slots; on CUDA at most the visible GPUs, slot i using the i-th.
        timeout_s: wall seconds a child may take (None: no limit).
        on_model: called with a finished model's rows (from the job's thread, one call
            at a time).

    Returns:
        The rows of every model, in the order of ``specs`` and of ``backends``.

    Raises:
        ValueError: ``jobs`` < 1, or more CUDA jobs than visible GPUs.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    gpus = visible_gpus() if settings.device == "cuda" else []
    if settings.device == "cuda" and jobs > len(gpus):
        raise ValueError(f"{jobs} jobs need {jobs} GPUs, {len(gpus)} visible")
    pending, rows, lock = list(specs), {}, threading.Lock()
    base = child_argv(settings, backends, verbose)

    share = str(max(1, len(os.sched_getaffinity(0)) // jobs))
    workers = {"INDUCTOR_LITE_COMPILE_WORKERS": share, "TORCHINDUCTOR_COMPILE_THREADS": share}

    def slot(index: int) -> None:
        env = {**workers, **os.environ}  # what the user set wins
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[index]
        while True:
            with lock:
                if not pending:
                    return
                spec = pending.pop(0)
            measured = _measure_in_child(spec, backends, settings, base, env, timeout_s)
            with lock:
                rows[spec.name] = measured
                if on_model is not None:
                    on_model(measured)

    threads = [threading.Thread(target=slot, args=(i,), daemon=True) for i in range(min(jobs, len(specs)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [row for spec in specs for row in rows[spec.name]]


def _measure_in_child(spec: ModelSpec, backends: Sequence[str], settings: Settings, base: list[str],
                      env: dict, timeout_s: float | None) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="bench_job_") as directory:
        output = os.path.join(directory, "rows.json")
        command = [sys.executable, "-m", "inductor_lite.bench", *base, "--models", spec.name, "--output", output]
        try:
            child = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
            failure = None if child.returncode == 0 else \
                f"child exited with {child.returncode}: " + " | ".join(child.stderr.strip().splitlines()[-3:])
        except subprocess.TimeoutExpired:
            failure = f"child ran past {timeout_s:.0f} s"
        measured = []
        if os.path.exists(output):  # a child rewrites its output after every row
            with open(output) as f:
                fields = {field.name for field in dataclasses.fields(Result)}
                measured = [Result(**{k: v for k, v in row.items() if k in fields}) for row in json.load(f)["rows"]]
    done = {row.backend for row in measured}
    measured += [unmeasured_result(spec, settings, backend, STATUS_FAILED, failure or "child wrote no row")
                 for backend in backends if backend not in done]
    order = {backend: i for i, backend in enumerate(backends)}
    return sorted(measured, key=lambda row: order.get(row.backend, len(order)))
