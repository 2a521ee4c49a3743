"""Wall time per call of whole models or graphs, host overhead included.

The kernel benchmark and the autotuner time device work alone (`runtime.timing`); a
model's time per call also holds what the host spends launching it, so here each
sample is the wall time of several calls queued back to back:

- warm-up: ``warmup`` calls of each contender, then one call each, synchronized, to
  size the samples: a sample holds enough calls to last `MIN_SAMPLE_S` (at most
  `MAX_CALLS_PER_SAMPLE`), so host jitter and the synchronization that ends a sample
  are spread over many calls;
- then one untimed round, and ``repeat`` timed rounds in which every contender takes
  one sample; the order of the contenders flips every round, so none always runs
  right after the same neighbour;
- a sample starts on an idle device (synchronize), records a CUDA event, queues its
  calls, records another event and waits for it: seconds per call = the events'
  elapsed time / calls; host seconds per call = host clock until the last call
  returned / calls. On CPU both are the host clock;
- Python's automatic garbage collection is off during the rounds (as ``timeit``
  does), so a collection triggered by one contender's allocations is not charged to
  another; the youngest generation is collected between samples, untimed, so
  reference cycles made by the calls (and the tensors they hold) do not pile up.

Each contender's times are the median and quartiles of its samples; a ratio of two
contenders is taken round by round (`CallTimes.ratio_to`), so slow drifts of clock
or load cancel.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
from typing import Any, Callable, Sequence

import torch

MIN_SAMPLE_S = 0.02
"""A sample lasts at least this long (seconds), unless one call is longer."""
MAX_CALLS_PER_SAMPLE = 1000


@dataclasses.dataclass(frozen=True)
class CallTimes:
    """One contender's per-call times over the timed rounds.

    Attributes:
        wall_s: per round, wall seconds per call (device work and host overhead).
        host_s: per round, host seconds per call until the calls returned (``<= wall``
            up to clock noise; equal to it on CPU).
        calls_per_sample: calls queued in each sample.
    """

    wall_s: tuple[float, ...]
    host_s: tuple[float, ...]
    calls_per_sample: int

    @property
    def median_s(self) -> float:
        return statistics.median(self.wall_s)

    @property
    def quartiles_s(self) -> tuple[float, float]:
        """First and third quartiles of the wall time per call."""
        return _quartiles(self.wall_s)

    @property
    def iqr_s(self) -> float:
        q1, q3 = self.quartiles_s
        return q3 - q1

    @property
    def host_median_s(self) -> float:
        return statistics.median(self.host_s)

    def ratio_to(self, other: "CallTimes") -> tuple[float, float, float]:
        """``(median, q1, q3)`` of ``self / other`` taken round by round (a speedup of
        ``other`` over ``self`` when ``self`` is the baseline).

        Raises:
            ValueError: the two were not timed in the same rounds.
        """
        if len(self.wall_s) != len(other.wall_s):
            raise ValueError(f"rounds differ: {len(self.wall_s)} against {len(other.wall_s)}")
        ratios = [a / b for a, b in zip(self.wall_s, other.wall_s)]
        return (statistics.median(ratios), *_quartiles(ratios))


def _quartiles(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sample(fn: Callable[[], Any], calls: int, device: torch.device) -> tuple[float, float]:
    """``(wall, host)`` seconds per call over ``calls`` calls queued back to back."""
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        wall = (time.perf_counter() - start) / calls
        return wall, wall
    torch.cuda.synchronize(device)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) / calls
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3 / calls, host


def time_contenders(
    fns: Sequence[Callable[[], Any]], device: torch.device, warmup: int, repeat: int,
    min_sample_s: float = MIN_SAMPLE_S,
) -> list[CallTimes]:
    """Wall time per call of each function (the module docstring gives the method).

    Args:
        fns: the contenders; each call runs one iteration (its result is dropped).
        device: where they run (``cuda`` or ``cpu``).
        warmup: untimed calls of each before sizing the samples.
        repeat: timed rounds (samples per contender).
        min_sample_s: the least duration of a sample, in seconds.

    Raises:
        ValueError: no functions, ``repeat < 1`` or ``warmup < 0``.
    """
    if not fns:
        raise ValueError("no functions to time")
    if repeat < 1 or warmup < 0:
        raise ValueError(f"need repeat >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
    calls: list[int] = []
    for fn in fns:
        for _ in range(warmup):
            fn()
        _synchronize(device)
        one_call_s = max(_sample(fn, 1, device)[0], 1e-7)
        calls.append(max(1, min(MAX_CALLS_PER_SAMPLE, math.ceil(min_sample_s / one_call_s))))
    wall: list[list[float]] = [[] for _ in fns]
    host: list[list[float]] = [[] for _ in fns]
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i, fn in enumerate(fns):  # the untimed round
            _sample(fn, calls[i], device)
        for r in range(repeat):
            order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
            for i in order:
                w, h = _sample(fns[i], calls[i], device)
                wall[i].append(w)
                host[i].append(h)
                gc.collect(0)
    finally:
        if was_enabled:
            gc.enable()
    return [CallTimes(tuple(w), tuple(h), n) for w, h, n in zip(wall, host, calls)]
