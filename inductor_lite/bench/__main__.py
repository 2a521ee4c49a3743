"""``python -m inductor_lite.bench``: compare torch.compile backends on a model suite.

Examples::

    python -m inductor_lite.bench                                  # every model, GPU
    python -m inductor_lite.bench --models hf --mode training --dtype amp --output hf.csv
    python -m inductor_lite.bench --device cpu --tiny --models builtin \\
        --backends eager,inductor_lite --repeat 3 --output out.json --plot out.png
    python -m inductor_lite.bench --models hf --dtype bf16 --compile-mode reduce-overhead
    python -m inductor_lite.bench --models gpt2,resnet50 --dtype bf16 --profile
    python -m inductor_lite.bench --dtype bf16 --jobs 4 --model-timeout 900   # 4 GPUs, a model each

Prints a table (one row per model and backend) and the geomean speedups; see
`inductor_lite.bench.measure` for how each number is measured. With ``--profile`` it
prints the profile view instead (`inductor_lite.bench.profile`): per model and backend
the wall, host and GPU busy time per call, GPU time by kernel category, kernels per
call and the top kernels.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import os
import platform
import sys
from typing import Any, Callable

import torch

from .measure import COMPILE_MODES, DTYPES, MODES, Result, Settings, measure_model
from .models import MODELS, SUITES, ModelSpec, resolve_models
from .parallel import run_parallel, visible_gpus
from .profile import ProfileRow, profile_model
from .report import output_format, plot_speedups, print_profiles, print_summary, require, write_results

DEFAULT_BACKENDS = "eager,inductor,inductor_lite"


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface (``--help`` lists every option)."""
    parser = argparse.ArgumentParser(
        prog="python -m inductor_lite.bench",
        description="Benchmark torch.compile backends (speedup, accuracy, compile time, memory) on a model suite.",
    )
    parser.add_argument(
        "--models", default="all",
        help=f"comma-separated models or suites (all, {', '.join(SUITES)}); models: {', '.join(MODELS)} "
        "(default: all)",
    )
    parser.add_argument("--mode", choices=MODES, default="inference", help="default: inference")
    parser.add_argument(
        "--dtype", choices=DTYPES, default="fp32",
        help="fp32, bf16 (cast weights and inputs) or amp (autocast to bf16); default: fp32",
    )
    parser.add_argument("--batch-size", type=int, help="override every model's default batch size")
    parser.add_argument(
        "--backends", default=DEFAULT_BACKENDS,
        help=f"comma-separated torch.compile backends (default: {DEFAULT_BACKENDS}); "
        "'eager' is TorchDynamo capture without a compiler; the speedup baseline is always plain eager",
    )
    parser.add_argument(
        "--compile-mode", choices=COMPILE_MODES, default="default",
        help="torch.compile's mode for every compiled backend, e.g. reduce-overhead (CUDA graphs); default: default",
    )
    parser.add_argument(
        "--repeat", type=int, default=30,
        help="timed rounds per backend, each one sample of every contender, a sample being "
        "iterations queued back to back for 20 ms or more (default: 30)",
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed iterations before timing (default: 5)")
    parser.add_argument(
        "--fresh-process", action="store_true",
        help="also time a warm compile in a new process from the filled disk caches (what a second run of a "
        "script pays): the third compile column, the median of three new processes a backend, the backends "
        "taking turns",
    )
    parser.add_argument(
        "--profile", action="store_true",
        help="instead of the speedup table, profile each model and backend with torch.profiler: wall, host "
        "and GPU busy time per call, GPU time of generated, GEMM, convolution, attention and other kernels, "
        "kernels per call and the top kernels",
    )
    parser.add_argument("--profile-calls", type=int, default=10, help="calls profiled per backend (default: 10)")
    parser.add_argument("--top", type=int, default=5, help="top kernels listed per row with --profile (default: 5)")
    parser.add_argument("--output", help="write the results to this .csv or .json file")
    parser.add_argument("--plot", help="write a bar chart of the speedups to this .png file")
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu",
        help="default: cuda when available, else cpu",
    )
    parser.add_argument(
        "--jobs", type=int, default=1,
        help="measure up to this many models at once, each in a child process; on CUDA each job has one GPU "
        "of its own, so at most the visible GPUs (default: 1, in this process)",
    )
    parser.add_argument(
        "--model-timeout", type=float,
        help="with --jobs: seconds a model's child may run before its rows are marked failed (default: none)",
    )
    parser.add_argument("--tiny", action="store_true", help="tiny model configs (CPU smoke tests)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and inputs (default: 0)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each failure's traceback to stderr")
    return parser


def _parse_backends(text: str) -> list[str]:
    """The backend list, checked against TorchDynamo's registry (``inductor_lite`` is registered on import).

    Raises:
        ValueError: an empty list or an unknown backend.
    """
    backends = list(dict.fromkeys(b.strip() for b in text.split(",") if b.strip()))
    if not backends:
        raise ValueError("no backends selected")
    known = set(torch._dynamo.list_backends(exclude_tags=())) | {"eager", "inductor_lite"}
    unknown = [b for b in backends if b not in known]
    if unknown:
        raise ValueError(f"unknown backend(s) {unknown}; known: {', '.join(sorted(known))}")
    return backends


def _register_inductor_lite() -> None:
    """Import inductor_lite so its backend is registered; a failure is reported, not raised.

    The rows of inductor_lite then fail with the import error in their note.
    """
    try:
        import inductor_lite  # noqa: F401
    except Exception as error:  # noqa: BLE001 - a broken backend must not stop the other backends
        print(f"warning: import inductor_lite failed: {type(error).__name__}: {error}", file=sys.stderr)


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[ModelSpec], list[str], Settings]:
    """Parse and check the command line.

    Returns:
        ``(args, model_specs, backends, settings)``.

    Raises:
        SystemExit: bad arguments (argparse prints the problem and exits with status 2).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        specs = resolve_models(args.models)
        if "inductor_lite" in args.backends:
            _register_inductor_lite()
        backends = _parse_backends(args.backends)
        settings = Settings(
            mode=args.mode, dtype=args.dtype, device=args.device, batch_size=args.batch_size,
            repeat=args.repeat, warmup=args.warmup, tiny=args.tiny, seed=args.seed, compile_mode=args.compile_mode,
            fresh_process=args.fresh_process,
        )
        if args.profile_calls < 1 or args.top < 0:
            raise ValueError(f"need --profile-calls >= 1 and --top >= 0, got {args.profile_calls} and {args.top}")
        if args.profile and (args.output or args.plot):
            raise ValueError("--output and --plot write the speedup table, which --profile does not measure")
        if args.jobs < 1 or args.profile and args.jobs > 1:
            raise ValueError(f"--jobs {args.jobs}: need >= 1, and 1 with --profile")
        if args.model_timeout is not None and (args.jobs == 1 or args.model_timeout <= 0):
            raise ValueError("--model-timeout needs --jobs > 1 and a positive number of seconds")
        if args.output:
            output_format(args.output)
        if args.plot and os.path.splitext(args.plot)[1].lower() != ".png":
            raise ValueError(f"--plot {args.plot!r}: the extension must be .png")
        # Missing optional packages are found now, not after an hour of benchmarking.
        require("rich.progress")
        if args.plot:
            require("matplotlib.figure")
    except (ValueError, ImportError) as error:
        parser.error(str(error))
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available (use --device cpu)")
    if args.device == "cuda" and args.jobs > 1 and args.jobs > len(gpus := visible_gpus()):
        parser.error(f"--jobs {args.jobs}: each CUDA job needs a GPU of its own, {len(gpus)} visible")
    return args, specs, backends, settings


def _metadata(backends: list[str], settings: Settings) -> dict[str, Any]:
    """Where and how the results were measured (the JSON's ``meta``)."""
    device_name = torch.cuda.get_device_name() if settings.device == "cuda" else platform.processor() or "cpu"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": sys.argv[1:],
        "settings": dataclasses.asdict(settings),
        "backends": backends,
        "device_name": device_name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "python": platform.python_version(),
    }


def _progress() -> Any:
    """A rich progress bar on stderr, gone once done."""
    progress_mod = require("rich.progress")
    console_mod = require("rich.console")
    return progress_mod.Progress(
        progress_mod.TextColumn("{task.description}"), progress_mod.BarColumn(),
        progress_mod.MofNCompleteColumn(), progress_mod.TimeElapsedColumn(),
        console=console_mod.Console(stderr=True), transient=True,
    )


def _row_line(row: Result) -> str:
    """One plain progress line for a measured row."""
    speedup = "-" if row.speedup is None else f"{row.speedup:.2f}x"
    return f"{row.model} / {row.backend}: {row.status}, accuracy {row.accuracy or '-'}, speedup {speedup}"


def run(specs: list[ModelSpec], backends: list[str], settings: Settings,
        on_row: Callable[[list[Result]], None] | None = None) -> list[Result]:
    """Measure every model on every backend, with a progress bar on stderr; ``on_row``
    gets the rows so far after each one (the CLI rewrites ``--output`` with them)."""
    rows: list[Result] = []
    progress = _progress()
    with progress:
        task = progress.add_task("benchmarking", total=len(specs) * len(backends))
        for spec in specs:
            results = measure_model(spec, backends, settings)
            for backend in backends:
                # The generator runs lazily: this backend is measured inside next().
                progress.update(task, description=f"{spec.name} / {backend}")
                row = next(results)
                rows.append(row)
                progress.advance(task)
                # One plain line per row, so a run cut short still leaves its results.
                print(_row_line(row), flush=True)
                if on_row is not None:
                    on_row(rows)
    return rows


def run_profiles(specs: list[ModelSpec], backends: list[str], settings: Settings, calls: int,
                 top: int) -> list[ProfileRow]:
    """The profile view of every model on every backend, with a progress bar on stderr."""
    rows: list[ProfileRow] = []
    progress = _progress()
    with progress:
        task = progress.add_task("profiling", total=len(specs))
        for spec in specs:
            progress.update(task, description=f"{spec.name} / {', '.join(backends)}")
            for row in profile_model(spec, backends, settings, calls, top):
                rows.append(row)
                wall = "-" if row.wall_ms is None else f"{row.wall_ms:.3f} ms"
                busy = "-" if row.device is None else f"{row.device.busy_ms:.3f} ms"
                print(f"{row.model} / {row.backend}: {row.status}, wall {wall}, GPU busy {busy}", flush=True)
            progress.advance(task)
    return rows


def _run_jobs(specs: list[ModelSpec], backends: list[str], settings: Settings, args: argparse.Namespace,
              on_row: Callable[[list[Result]], None] | None) -> list[Result]:
    """`parallel.run_parallel`, printing each model's rows as it finishes and passing
    ``on_row`` the finished models' rows (in suite order) each time."""
    finished: list[Result] = []
    order = {spec.name: i for i, spec in enumerate(specs)}

    def on_model(rows: list[Result]) -> None:
        for row in rows:
            print(_row_line(row), flush=True)
        finished.extend(rows)
        finished.sort(key=lambda row: order[row.model])  # stable: backends keep their order
        if on_row is not None:
            on_row(finished)

    return run_parallel(specs, backends, settings, args.jobs, args.model_timeout, args.verbose, on_model)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 once the run finished, whatever the rows say)."""
    args, specs, backends, settings = parse_args(argv)
    if args.verbose:
        logger = logging.getLogger("inductor_lite.bench")
        logger.addHandler(logging.StreamHandler(sys.stderr))
        logger.setLevel(logging.DEBUG)
    if settings.device == "cuda":
        # As PyTorch's compiler benchmarks do: fp32 matmuls and convolutions on TF32.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if args.profile:
        print_profiles(run_profiles(specs, backends, settings, args.profile_calls, args.top))
        return 0
    meta = _metadata(backends, settings)
    # The output file is rewritten after every row, so a run cut short keeps what it measured.
    on_row = (lambda rows: write_results(rows, args.output, meta)) if args.output else None
    if args.jobs > 1:
        rows = _run_jobs(specs, backends, settings, args, on_row)
    else:
        rows = run(specs, backends, settings, on_row)
    print_summary(rows)
    if args.output:
        print(f"results written to {args.output}")
    if args.plot:
        mode = "" if settings.compile_mode == "default" else f", {settings.compile_mode}"
        title = f"speedup over eager ({settings.mode}, {settings.dtype}, {settings.device}{mode})"
        plot_speedups(rows, args.plot, title=title)
        print(f"chart written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
