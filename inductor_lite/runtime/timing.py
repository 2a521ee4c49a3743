"""Timing device work per call: CUDA events around calls queued back to back, and
input rotation past the L2 cache. Used by the kernel benchmark and the autotuner, so
both measure the same way.

The method (CUDA): after a warm-up, calls go in batches; ``torch.cuda._sleep`` holds
the stream while the host queues a batch, so the calls then run back to back and the
CUDA event recorded after each call times device work only, not launch overhead.
Contenders take turns batch by batch, so clock and load changes hit all alike; each
gets the median of its per-call times. Callers that want every call to read its
inputs from HBM (as in a model, where a kernel's inputs were written long before)
pass calls that take turns over `rotation_sets`. On CPU each call is timed by the
host clock.

With ``graphs=True`` (CUDA) each contender's calls are captured once into a CUDA graph
of at least `GRAPH_CALLS` calls, and a sample is one replay's event-timed duration
over its calls, as in Triton's ``do_bench_cudagraph``: no event record and no host
launch sits between two calls, only the graph's own spacing of kernels (about 1 us a
kernel on an H200, against 3.5 us with an event after each call). That is the
kernel's throughput when it runs among other kernels, as under
``mode="reduce-overhead"``; per-call events charge every call the event's cost too,
which at 64 MB moves a ``copy_`` from 98% of the 512 MiB copy's bandwidth to 91%
(H200). Each timed replay follows an untimed *lead-in* call of its own contender (its last
call, which precedes the graph's first in the rotation), so its first call starts from the
L2 its own calls leave (dirty output lines to write back), not from what the
previous contender left: without it, on an H100, adding 128 MB of fp32 timed 0.3%
slower right after eager's ``a + b`` than right after inductor's kernel, so the
order of the contenders decided a tie.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable, Optional, Sequence

import torch

ROTATE_L2_MULTIPLE = 3
"""`rotation_sets` makes one pass over the sets move this many L2 sizes."""
DEFAULT_L2_BYTES = 50 * 2**20
"""H100's L2; used when torch does not report the L2 size."""


GRAPH_CALLS = 10
"""Calls captured in one CUDA graph when timing with ``graphs=True``, at least (rounded
up to whole rounds of a contender's input sets)."""
GRAPH_LAUNCH_S = 100e-6
"""How long ``torch.cuda._sleep`` holds the stream before a timed replay: longer than
the host takes to launch a graph."""


class Timer:
    """Median seconds per call on one device (see the module docstring): per-call CUDA
    events, or with ``graphs=True`` replays of a CUDA graph of `GRAPH_CALLS` calls
    (``repeat`` calls in all, rounded up to whole replays, 3 replays at least).

    Raises:
        ValueError: ``repeat < 1`` or ``warmup < 0``, or ``warmup < 1`` with ``graphs``
            (first calls may compile or tune, which no capture allows).
    """

    BATCH = 25
    MAX_SLEEP_S = 0.2

    def __init__(self, device: torch.device, warmup: int, repeat: int, graphs: bool = False):
        if repeat < 1 or warmup < 0:
            raise ValueError(f"need repeat >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
        if graphs and warmup < 1:
            raise ValueError("timing with CUDA graphs needs warmup >= 1: a first call may compile or tune, "
                             "which cannot be captured")
        self.device, self.warmup, self.repeat, self.graphs = device, warmup, repeat, graphs
        self._cycles_per_s: Optional[float] = None

    def median_seconds(self, contenders: Sequence[Sequence[Callable[[], Any]]]) -> list[float]:
        """Median seconds per call of each contender, in order.

        A contender is a list of calls used in rotation (call ``i`` runs
        ``calls[i % len(calls)]``). After the warm-up the contenders take turns, a
        batch or a graph replay (CUDA; each replay after an untimed lead-in call) or a
        call (CPU) each, so clock and load changes hit all alike.

        Raises:
            RuntimeError: with ``graphs=True``, a contender's calls cannot be captured
                into a CUDA graph (they synchronize with the host, say); the failed
                capture may leave the process's CUDA context unusable.
        """
        for calls in contenders:
            for i in range(self.warmup):
                calls[i % len(calls)]()
        samples: list[list[float]] = [[] for _ in contenders]
        if self.device.type != "cuda":
            for i in range(self.repeat):
                for calls, out in zip(contenders, samples):
                    start = time.perf_counter()
                    calls[i % len(calls)]()
                    out.append(time.perf_counter() - start)
        elif self.graphs:
            graphs = [self._capture(calls, k) for k, calls in enumerate(contenders)]
            replays = [max(3, math.ceil(self.repeat / n)) for _, n in graphs]
            for r in range(max(replays)):
                for (graph, n), calls, count, out in zip(graphs, contenders, replays, samples):
                    if r < count:
                        calls[-1]()  # the lead-in: the graph holds whole rounds of the calls
                        out.append(self._replay_seconds(graph) / n)
            del graphs
        else:
            host_s = [self._host_seconds(calls) for calls in contenders]
            for first in range(0, self.repeat, self.BATCH):
                n = min(self.BATCH, self.repeat - first)
                for k, calls in enumerate(contenders):
                    times, host_s[k] = self._cuda_batch(calls, first, n, host_s[k])
                    samples[k] += times
        return [statistics.median(out) for out in samples]

    def _capture(self, calls: Sequence[Callable[[], Any]], index: int) -> tuple["torch.cuda.CUDAGraph", int]:
        """A CUDA graph of whole rounds of the calls, at least `GRAPH_CALLS` calls (so
        each replay takes every input set equally often, in order), replayed once
        untimed, and its number of calls."""
        n = len(calls) * math.ceil(GRAPH_CALLS / len(calls))
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                for i in range(n):
                    calls[i % len(calls)]()
        except Exception as error:
            raise RuntimeError(f"contender {index} cannot be captured into a CUDA graph: {error}") from error
        graph.replay()
        return graph, n

    def _replay_seconds(self, graph: "torch.cuda.CUDAGraph") -> float:
        """One replay's device seconds; a ``torch.cuda._sleep`` holds the stream while
        the host launches the graph, so the graph's launch latency is not timed."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(GRAPH_LAUNCH_S * self._cycles_per_second()))
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def _host_seconds(self, calls: Sequence[Callable[[], Any]]) -> float:
        """The longest of a few calls' host time (the device idle): what queueing costs."""
        torch.cuda.synchronize(self.device)
        worst = 0.0
        for i in range(3):
            start = time.perf_counter()
            calls[i % len(calls)]()
            worst = max(worst, time.perf_counter() - start)
        torch.cuda.synchronize(self.device)
        return worst

    def _cuda_batch(self, calls: Sequence[Callable[[], Any]], first: int, n: int,
                    host_s: float) -> tuple[list[float], float]:
        """Device seconds of calls ``first .. first + n - 1`` and the updated host cost per call.

        ``torch.cuda._sleep`` holds the stream for twice the expected queueing time, so
        the calls run back to back and each event pair brackets device work only.
        """
        events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        sleep_s = min(self.MAX_SLEEP_S, 2 * host_s * n + 50e-6)
        torch.cuda._sleep(int(sleep_s * self._cycles_per_second()))
        start = time.perf_counter()
        events[0].record()
        for j in range(n):
            calls[(first + j) % len(calls)]()
            events[j + 1].record()
        host_s = max(host_s, (time.perf_counter() - start) / n)
        events[-1].synchronize()
        return [events[j].elapsed_time(events[j + 1]) / 1e3 for j in range(n)], host_s

    def _cycles_per_second(self) -> float:
        """The device clock as ``torch.cuda._sleep`` counts it, measured once."""
        if self._cycles_per_s is None:
            cycles = 10_000_000
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(cycles // 10)  # wake the clocks up
            begin.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            self._cycles_per_s = cycles / (begin.elapsed_time(end) / 1e3)
        return self._cycles_per_s


def l2_bytes(device: torch.device) -> int:
    """The device's L2 cache size in bytes (0 on CPU: nothing is rotated there)."""
    if device.type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or DEFAULT_L2_BYTES)


def rotation_sets(inputs: tuple, bytes_per_call: int, l2: int, max_sets: int = 256) -> list[tuple]:
    """``inputs`` plus copies (of its tensors; other items are shared), enough that one
    pass over all of them moves at least `ROTATE_L2_MULTIPLE` x ``l2`` bytes (just
    ``[inputs]`` when one set already does), so calls that take the sets in turn read
    their inputs from HBM."""
    count = min(max_sets, max(1, math.ceil(ROTATE_L2_MULTIPLE * l2 / max(1, bytes_per_call))))
    copies = [tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in inputs) for _ in range(count - 1)]
    return [inputs] + copies
