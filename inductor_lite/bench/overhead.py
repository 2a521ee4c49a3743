"""``python -m inductor_lite.bench.overhead``: what one call of a small graph costs the host.

Examples::

    python -m inductor_lite.bench.overhead                          # GPU, fp32
    python -m inductor_lite.bench.overhead --dtype bf16 --compile-mode reduce-overhead
    python -m inductor_lite.bench.overhead --device cpu --backends inductor_lite --repeat 3   # smoke test

Three graphs whose device work is tiny, so the wrapper, the launches and the guards
decide their time (`GRAPHS`): one pointwise op, a chain of ten pointwise ops, and a
3-layer MLP (Linear, ReLU, Linear, ReLU, Linear) at batch 8, inference. Each runs
uncompiled (``uncompiled``) and compiled by each backend (``dynamic=False``; ``eager``
is TorchDynamo capture without a compiler, so its row shows what Dynamo alone adds).
Per graph and contender, in microseconds per call:

- wall: median (and IQR) of the wall time per call, contenders interleaved, each
  sample many calls queued back to back between CUDA events (`walltime`);
- host: median host time per call until the calls returned;
- GPU busy: union of the kernels' intervals per call, from torch.profiler over
  ``--profile-calls`` calls (`profile`);
- wall - busy: the time per call the GPU waits on the host; the smaller, the leaner
  the host path;
- kernels launched per call.

On CPU the graphs are tiny and the compiled ones run in the DSL interpreter: the run
checks that everything works and says nothing about speed (no GPU columns).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any, Callable, Optional

import torch
import torch.nn as nn

from .measure import COMPILE_MODES, STATUS_FAILED, STATUS_OK, compile_module, describe_error, uses_cudagraphs
from .profile import ProfileRow, fill_times, profile_device
from .report import require
from .walltime import time_contenders

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
UNCOMPILED = "uncompiled"


def _pointwise(x: torch.Tensor) -> torch.Tensor:
    return x + 1.0


def _chain10(x: torch.Tensor) -> torch.Tensor:
    # Ten pointwise ops: ten kernels uncompiled, one fused kernel compiled.
    y = x * 0.5
    y = y + 1.0
    y = torch.sin(y)
    y = y * y
    y = y - 0.25
    y = torch.relu(y)
    y = torch.exp(-y)
    y = y * 2.0
    y = torch.tanh(y)
    return y + x


def _mlp3(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width),
    )


@dataclasses.dataclass(frozen=True)
class Graph:
    """One benchmarked graph: ``make(tiny)`` gives ``(fn, input shape)``; ``fn`` is a
    function or an ``nn.Module`` (built on the CPU in fp32)."""

    name: str
    make: Callable[[bool], tuple[Callable[[torch.Tensor], torch.Tensor], tuple[int, ...]]]


GRAPHS = (
    Graph("1 op", lambda tiny: (_pointwise, (8, 32) if tiny else (8, 1024))),
    Graph("10-op chain", lambda tiny: (_chain10, (8, 32) if tiny else (8, 1024))),
    Graph("3-layer MLP, batch 8", lambda tiny: (_mlp3(32 if tiny else 1024), (8, 32) if tiny else (8, 1024))),
)
"""The graphs, sizes small enough that a call's device work takes microseconds."""


def _compiled_call(compiled: Callable, x: torch.Tensor, mark_step: bool) -> Callable[[], Any]:
    """One call of a compiled graph; under CUDA graphs it first marks a new step (the
    previous call's output is dropped)."""
    if not mark_step:
        return lambda: compiled(x)

    def call() -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(x)

    return call


def measure_graph(graph: Graph, backends: list[str], device: torch.device, dtype: torch.dtype,
                  compile_mode: str, warmup: int, repeat: int, calls: int, tiny: bool) -> list[ProfileRow]:
    """Time and profile ``graph`` uncompiled and compiled by each backend.

    Returns one `ProfileRow` per contender (``model`` is the graph's name), uncompiled
    first; a backend that raises gives a ``failed`` row with the error in its note.
    """
    fn, shape = graph.make(tiny)
    if isinstance(fn, nn.Module):
        fn = fn.to(device=device, dtype=dtype).eval()
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(device=device, dtype=dtype)
    rows = [ProfileRow(graph.name, UNCOMPILED, "default", STATUS_OK)]
    contenders: list[Callable[[], Any]] = [lambda: fn(x)]
    for backend in backends:
        row = ProfileRow(graph.name, backend, compile_mode, STATUS_FAILED)
        rows.append(row)
        try:
            compiled = compile_module(fn, backend, compile_mode)
            with torch.no_grad():
                compiled(x)  # compiles
            contenders.append(_compiled_call(compiled, x, uses_cudagraphs(compile_mode)))
            row.status = STATUS_OK
        except Exception as error:  # noqa: BLE001 - one backend's failure must not stop the others
            row.note = describe_error(error)
    timed = [r for r in rows if r.status == STATUS_OK]
    with torch.no_grad():
        for row, times in zip(timed, time_contenders(contenders, device, warmup, repeat)):
            fill_times(row, times)
        for row, call in zip(timed, contenders):
            row.device = profile_device(call, device, calls, top=0)
    return rows


def print_table(rows: list[ProfileRow], title: str, console: Any = None) -> None:
    """Print the rows with rich, times in microseconds per call."""
    rich_console = require("rich.console")
    rich_table = require("rich.table")
    escape = require("rich.markup").escape
    if console is None:
        console = rich_console.Console()
        if not console.is_terminal:
            console = rich_console.Console(width=160)
    table = rich_table.Table(title=title)
    for header in ("graph", "contender", "wall us (IQR)", "host us", "GPU busy us", "wall - busy us", "kernels",
                   "note"):
        table.add_column(header, justify="left" if header in ("graph", "contender", "note") else "right",
                         overflow="fold")

    def us(ms: Optional[float]) -> str:
        return "-" if ms is None else f"{1e3 * ms:.1f}"

    for r in rows:
        busy = None if r.device is None else r.device.busy_ms
        kernels = "-" if r.device is None else f"{r.device.kernels_per_call:g}"
        wall = "-" if r.wall_ms is None else f"{us(r.wall_ms)} ({us(r.wall_iqr_ms)})"
        table.add_row(r.model, r.backend, wall, us(r.host_ms), us(busy), us(r.exposed_host_ms), kernels,
                      escape(r.note))
    console.print(table)


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface (``--help`` lists every option)."""
    parser = argparse.ArgumentParser(
        prog="python -m inductor_lite.bench.overhead",
        description="Host overhead per call of small graphs: uncompiled against torch.compile backends.",
    )
    parser.add_argument(
        "--backends", default="eager,inductor,inductor_lite",
        help="comma-separated torch.compile backends (default: eager,inductor,inductor_lite)",
    )
    parser.add_argument("--compile-mode", choices=COMPILE_MODES, default="default", help="default: default")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="fp32", help="default: fp32")
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu",
        help="default: cuda when available, else cpu (tiny sizes)",
    )
    parser.add_argument("--repeat", type=int, default=30, help="timed rounds (default: 30)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls of each before timing (default: 20)")
    parser.add_argument("--profile-calls", type=int, default=20, help="calls profiled per contender (default: 20)")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    """Run the CLI; returns the exit status (1 when a contender failed)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    backends = list(dict.fromkeys(b.strip() for b in args.backends.split(",") if b.strip()))
    if "inductor_lite" in backends:
        import inductor_lite  # noqa: F401 - registers the backend

    known = set(torch._dynamo.list_backends(exclude_tags=())) | {"eager"}
    unknown = [b for b in backends if b not in known]
    if unknown:
        parser.error(f"unknown backend(s) {unknown}; known: {', '.join(sorted(known))}")
    if args.repeat < 1 or args.warmup < 1 or args.profile_calls < 1:
        parser.error("--repeat, --warmup and --profile-calls must be >= 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available (use --device cpu)")
    require("rich.table")
    device = torch.device(args.device)
    rows: list[ProfileRow] = []
    for graph in GRAPHS:
        rows += measure_graph(graph, backends, device, DTYPES[args.dtype], args.compile_mode, args.warmup,
                              args.repeat, args.profile_calls, tiny=device.type == "cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print_table(rows, f"host overhead per call ({name}, {args.dtype}, compile mode {args.compile_mode})")
    return 1 if any(r.status != STATUS_OK for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
