"""Block-size autotuning: time each candidate launch config on the real arguments, keep
the fastest, remember it in memory and on disk.

The method: a candidate's time is the median per-call time over replays of a CUDA
graph of back-to-back calls (`timing.Timer` with ``graphs=True``), the candidates
taking turns replay by replay, each replay after a lead-in call of its own candidate
(so the L2 the previous candidate left does not count), the method the kernel
benchmark times with by default; candidates within `FINALIST_MARGIN` of the fastest
are then timed again with `FINAL_CALLS` calls each, and that round decides. Per-call CUDA events instead (an
event between calls) misranked close configs on an H200: for bias+GELU over 128 MB
of fp32 they picked configs that ran 0.4-1.1% slower in back-to-back calls than the
best, enough to lose to inductor there. ``run`` should take
its inputs in turn from `timing.rotation_sets` (`bench.dsl_kernels.choose_config`
does), so that calls read their inputs from HBM while the previous call's outputs
are still being written back, as in a model (inputs of under about 1 MB stay in the
L2 however many copies are taken). Single calls after an L2 flush were tried on an
H200 and misranked configs: over ten shapes, the configs picked after a read flush ran
7.4 percentage points of copy bandwidth (summed) below the best in the benchmark's
loop, after a write flush 2.9; a read flush leaves the kernel's own writes in L2,
untimed, and a write flush makes it pay for the flush's.

A candidate that fails to compile or launch is skipped (and logged); the first
candidate is the default, used without timing when tuning is off
(``INDUCTOR_LITE_AUTOTUNE=0``), on a non-CUDA device, or when it is the only one.

Decisions are stored under ``<cache_dir>/autotune/<sha256>.json``, named by a hash of
the timing method, the tuning key, the candidate list, the device name and the toolchain
(`toolchain_versions`, which covers the DSL compiler's own source), so a second process
skips the timing. As in `cache`, entries are written atomically and a file that cannot
be read or does not name one of the candidates is ignored.

``counters["autotune_runs"]`` counts the keys tuned by timing in this process; the
``autotune`` log artifact prints every candidate's time and the choice.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import statistics
import tempfile
from typing import Callable, Hashable, Sequence, TypeVar

import torch

from ..config import config
from ..counters import counters
from ..dsl.compiler import toolchain_versions
from ..logs import log_artifact
from .timing import Timer

C = TypeVar("C")

TIME_BUDGET_S = 0.02
"""Device time spent timing a typical candidate (after a first, untimed call): enough
calls for a stable median, from `MIN_CALLS` to `MAX_CALLS`."""
MIN_CALLS = 10
MAX_CALLS = 100
FINALIST_MARGIN = 0.03
"""Candidates timed within this fraction of the fastest are timed again, longer."""
MAX_FINALISTS = 4
FINAL_CALLS = 400
"""Calls per finalist in the second round: on an H200 the first round's 100 calls left
close configs (within 1-3%) ordered differently from run to run, and the benchmark
then ran the slower one."""

TIMING_METHOD = ("median over CUDA graph replays of back-to-back calls, each after a lead-in call (timing.Timer), "
                 f"candidates interleaved, {MIN_CALLS}-{MAX_CALLS} calls; finalists within {FINALIST_MARGIN} timed "
                 f"again with {FINAL_CALLS}")
"""Part of the disk key: decisions timed another way are not reused."""

_decisions: dict[tuple, int] = {}
_timers: dict[torch.device, Timer] = {}


def autotune(name: str, key: Hashable, candidates: Sequence[C], run: Callable[[C], None],
             device: torch.device, prepare: Callable[[], None] | None = None) -> C:
    """The fastest of ``candidates`` for ``key``, timing them on first use.

    Args:
        name: what is tuned, e.g. the kernel's name (part of the cache key).
        key: what the best config depends on besides ``name``, e.g. ``(rows, cols,
            dtype)``; hashable, and its ``repr`` must be stable across processes.
        candidates: hashable launch configs, the default first; ``str(c)`` must tell
            them apart, since it names the decision on disk (`heuristics.Config`'s
            names its block sizes, ``num_warps``, ``num_stages`` and ``maxnreg``).
        run: launches the kernel with one config on the real arguments. It is called
            several times per candidate, so it must not read what it writes, and
            captured into CUDA graphs, so it must not synchronize with the host.
        device: where ``run`` launches; tuning happens on CUDA devices only.
        prepare: called once before the candidates are timed, and not when the
            decision is known (in memory or on disk): e.g. to build every candidate's
            binary in parallel first (`compile_pool`).

    Returns:
        The chosen candidate (``candidates[0]`` without tuning).

    Raises:
        ValueError: ``candidates`` is empty.
        RuntimeError: a candidate's calls cannot be captured into a CUDA graph.
        Exception: whatever the default candidate raised, when every candidate failed.
    """
    if not candidates:
        raise ValueError(f"autotune {name}: no candidate configs")
    if not _tunes(candidates, device):
        return candidates[0]
    # The per-launch path: one dict lookup, no device query and no str() of configs.
    memory_key = (name, key, tuple(candidates), device)
    index = _decisions.get(memory_key)
    if index is None:
        labels, path = _labels_and_path(name, key, candidates, device)
        index = _read_decision(path, labels)
        if index is None:
            if prepare is not None:
                prepare()
            index = _tune(name, key, candidates, labels, run, device)
            _write_decision(path, labels[index])
        _decisions[memory_key] = index
    return candidates[index]


def known_decision(name: str, key: Hashable, candidates: Sequence[C], device: torch.device) -> C | None:
    """What `autotune` would return without timing anything: the default where it would
    not tune, the decision in memory or on disk, else None (it would tune).

    Raises:
        ValueError: as `autotune`.
    """
    if not candidates:
        raise ValueError(f"autotune {name}: no candidate configs")
    if not _tunes(candidates, device):
        return candidates[0]
    index = _decisions.get((name, key, tuple(candidates), device))
    if index is None:
        labels, path = _labels_and_path(name, key, candidates, device)
        index = _read_decision(path, labels)
    return None if index is None else candidates[index]


def _tunes(candidates: Sequence, device: torch.device) -> bool:
    """Whether `autotune` times ``candidates`` at all (else the default is the choice)."""
    return len(candidates) > 1 and device.type == "cuda" and config.autotune and not config.interpret


def _labels_and_path(name: str, key: Hashable, candidates: Sequence[C], device: torch.device) -> tuple[list[str], str]:
    labels = [str(c) for c in candidates]
    if len(set(labels)) != len(labels):
        raise ValueError(f"autotune {name}: candidates must have distinct str(): {labels}")
    return labels, _decision_path(name, key, labels, torch.cuda.get_device_name(device))


def clear_memory() -> None:
    """Forget the decisions made in this process (the disk entries stay)."""
    _decisions.clear()


def _tune(name: str, key: Hashable, candidates: Sequence[C], labels: list[str], run: Callable[[C], None],
          device: torch.device) -> int:
    outcomes = _time([functools.partial(run, c) for c in candidates], device)
    times = {i: t for i, t in enumerate(outcomes) if not isinstance(t, BaseException)}
    errors = {i: e for i, e in enumerate(outcomes) if isinstance(e, BaseException)}
    if not times:
        raise errors[0]
    best = min(times, key=times.get)
    finalists = sorted((i for i in times if times[i] <= times[best] * (1 + FINALIST_MARGIN)), key=times.get)
    if len(finalists) > 1:  # too close to call from the first round: a longer second one
        finalists = finalists[:MAX_FINALISTS]
        again = _time([functools.partial(run, candidates[i]) for i in finalists], device, calls=FINAL_CALLS)
        times.update((i, t) for i, t in zip(finalists, again) if not isinstance(t, BaseException))
        best = min(finalists, key=times.get)
    counters["autotune_runs"] += 1
    lines = [f"{name} {key!r}: {labels[best]}"]
    lines += [f"  {labels[i]:>20}: {times[i] * 1e6:9.2f} us" for i in sorted(times)]
    lines += [f"  {labels[i]:>20}: failed: {type(e).__name__}: {e}" for i, e in errors.items()]
    log_artifact("autotune", "\n".join(lines))
    return best


def _time(fns: Sequence[Callable[[], None]], device: torch.device,
          calls: int | None = None) -> list[float | BaseException]:
    """Median seconds per call of each of ``fns`` on ``device`` (see the module
    docstring): one untimed call each builds and loads the kernel (a function that
    raises there gets its exception instead of a time), then calls back to back, the
    functions taking turns batch by batch so that clock changes hit all alike.
    ``calls`` timed calls each, or as many as `TIME_BUDGET_S` allows (`MIN_CALLS` to
    `MAX_CALLS`)."""
    with torch.cuda.device(device):
        outcomes: list[float | BaseException | None] = []
        for fn in fns:
            try:
                fn()
                outcomes.append(None)
            except Exception as error:  # noqa: BLE001 - a config that does not build is not a candidate
                outcomes.append(error)
        ready = [[fn] for fn, o in zip(fns, outcomes) if o is None]
        if ready:
            timer = _timers.get(device)
            if timer is None:  # one per device: it measures the clock once
                timer = _timers[device] = Timer(device, warmup=1, repeat=MIN_CALLS, graphs=True)
            if calls is None:
                timer.repeat = MIN_CALLS
                probe = statistics.median(timer.median_seconds(ready))
                calls = max(MIN_CALLS, min(MAX_CALLS, int(TIME_BUDGET_S / max(probe, 1e-7))))
            timer.repeat = calls
            seconds = iter(timer.median_seconds(ready))
            outcomes = [next(seconds) if o is None else o for o in outcomes]
        return outcomes


def _decision_path(name: str, key: Hashable, labels: list[str], device_name: str) -> str:
    blob = json.dumps([TIMING_METHOD, name, repr(key), labels, device_name, torch.version.cuda, toolchain_versions()])
    return os.path.join(config.cache_dir, "autotune", hashlib.sha256(blob.encode()).hexdigest() + ".json")


def _read_decision(path: str, labels: list[str]) -> int | None:
    if config.disable_cache:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            best = json.load(f)["best"]
        return labels.index(best)
    except (OSError, ValueError, KeyError, TypeError):  # missing, unreadable or stale: tune again
        return None


def _write_decision(path: str, best: str) -> None:
    if config.disable_cache:
        return
    tmp = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"best": best}, f)
        os.replace(tmp, path)
    except OSError as error:  # a read-only cache only costs a re-tune next time
        log_artifact("autotune", f"could not store the decision in {path}: {error}")
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
