"""Reporting benchmark results: summary table, geomean speedups, CSV/JSON, bar chart,
and the profile view (`print_profiles`).

The table needs ``rich`` and the chart ``matplotlib``, both from the ``bench`` extra
(``pip install inductor_lite[bench]``); they are imported only when used.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib
import json
import math
import os
from typing import Any

from .measure import ACCURACY_PASS, STATUS_OK, Result
from .profile import CATEGORIES, ProfileRow

COLUMNS = tuple(f.name for f in dataclasses.fields(Result))
"""CSV columns, in order: the fields of `Result`."""

OUTPUT_FORMATS = {".csv": "csv", ".json": "json"}


def require(module: str) -> Any:
    """Import an optional dependency of the ``bench`` extra.

    Raises:
        ImportError: the module is missing; the message names the extra to install.
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"python -m inductor_lite.bench needs {module.split('.')[0]}: pip install inductor_lite[bench]"
        ) from error


def output_format(path: str) -> str:
    """``"csv"`` or ``"json"``, from the file extension.

    Raises:
        ValueError: any other extension.
    """
    ext = os.path.splitext(path)[1].lower()
    if ext not in OUTPUT_FORMATS:
        raise ValueError(f"--output {path!r}: the extension must be .csv or .json")
    return OUTPUT_FORMATS[ext]


def geomean(values: list[float]) -> float | None:
    """Geometric mean of positive finite numbers; ``None`` for an empty list.

    Raises:
        ValueError: a value that is not positive and finite.
    """
    if not values:
        return None
    bad = [v for v in values if not (v > 0 and math.isfinite(v))]
    if bad:
        raise ValueError(f"the geometric mean needs positive finite values, got {bad}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _counted(row: Result) -> bool:
    """Rows that enter a geomean: every measurement ran and accuracy passed."""
    return row.status == STATUS_OK and row.accuracy == ACCURACY_PASS and row.speedup is not None


def geomean_speedups(rows: list[Result]) -> dict[str, dict[str, Any]]:
    """Per backend: geomean speedup over eager and over inductor, and how many models entered each.

    Only rows with status ``ok`` and accuracy ``pass`` count (a wrong answer fast is no
    speedup). The speedup over inductor uses the models where both the backend and
    ``inductor`` count; it is ``None`` when there are none (inductor not run).

    Returns:
        ``{backend: {"vs_eager": float | None, "vs_inductor": float | None,
        "models": int, "models_vs_inductor": int}}``, backends in first-seen order.
    """
    inductor = {r.model: r.speedup for r in rows if r.backend == "inductor" and _counted(r)}
    summary: dict[str, dict[str, Any]] = {}
    for backend in dict.fromkeys(r.backend for r in rows):
        counted = [r for r in rows if r.backend == backend and _counted(r)]
        ratios = [r.speedup / inductor[r.model] for r in counted if r.model in inductor]
        summary[backend] = {
            "vs_eager": geomean([r.speedup for r in counted]),
            "vs_inductor": geomean(ratios),
            "models": len(counted),
            "models_vs_inductor": len(ratios),
        }
    return summary


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def write_csv(rows: list[Result], path: str) -> None:
    """One line per row, columns `COLUMNS`; missing numbers are empty cells."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow([_csv_value(getattr(row, c)) for c in COLUMNS])


def write_json(rows: list[Result], path: str, meta: dict[str, Any]) -> None:
    """``{"meta": meta, "rows": [...], "geomean": geomean_speedups(rows)}``; missing numbers are null."""
    payload = {
        "meta": meta,
        "rows": [dataclasses.asdict(r) for r in rows],
        "geomean": geomean_speedups(rows),
    }
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
        f.write("\n")


def write_results(rows: list[Result], path: str, meta: dict[str, Any]) -> None:
    """Write CSV or JSON, chosen by ``path``'s extension.

    Raises:
        ValueError: an extension other than .csv or .json.
    """
    if output_format(path) == "csv":
        write_csv(rows, path)
    else:
        write_json(rows, path, meta)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


_STATUS_STYLE = {"ok": "green", "skipped": "dim", "eager_failed": "yellow", "failed": "red", "oom": "red"}


def _pair(a: float | None, b: float | None, spec: str) -> str:
    return "-" if a is None and b is None else f"{_fmt(a, spec)} / {_fmt(b, spec)}"


def _compile_times(r: Result) -> str:
    """``cold / warm``, and ``/ fresh`` (warm start in a new process) when measured."""
    pair = _pair(r.compile_cold_s, r.compile_warm_s, ".2f")
    return pair if r.compile_fresh_s is None else f"{pair} / {r.compile_fresh_s:.2f}"


def _with_iqr(median: float | None, iqr: float | None, spec: str) -> str:
    """``median (IQR)``."""
    return "-" if median is None else f"{median:{spec}} ({_fmt(iqr, spec)})"


def _with_quartiles(median: float | None, q1: float | None, q3: float | None, spec: str) -> str:
    """``median [q1, q3]``."""
    return "-" if median is None else f"{median:{spec}} [{_fmt(q1, spec)}, {_fmt(q3, spec)}]"


def _console(console: Any) -> Any:
    """``console``, or a rich console on stdout: 200 columns wide without a terminal (a
    pipe or a file) instead of rich's default 80, so that no column is cut."""
    if console is not None:
        return console
    rich_console = require("rich.console")
    console = rich_console.Console()
    return console if console.is_terminal else rich_console.Console(width=200)


def _title(base: str, compile_modes: set[str]) -> str:
    modes = sorted(compile_modes - {"default"})
    return f"{base} (compile mode {', '.join(modes)})" if modes else base


def print_summary(rows: list[Result], console: Any = None) -> None:
    """Print the results table and the geomean speedups with rich (to stdout by default).

    Each time shows its spread: the speedup with the quartiles of its per-round ratios,
    the iteration times with their interquartile range.
    """
    rich_table = require("rich.table")
    escape = require("rich.markup").escape
    console = _console(console)
    table = rich_table.Table(title=_title("inductor_lite.bench", {r.compile_mode for r in rows}))
    headers = (
        "model", "backend", "status", "accuracy", "speedup [q1, q3]", "eager ms (IQR)", "compiled ms (IQR)",
        "compile s cold / warm" + (" / fresh" if any(r.compile_fresh_s is not None for r in rows) else ""),
        "mem ratio", "kernels / externs", "note",
    )
    text_columns = ("model", "backend", "status", "accuracy", "note")
    for header in headers:
        table.add_column(header, justify="left" if header in text_columns else "right", overflow="fold")
    for r in rows:
        status_style = _STATUS_STYLE.get(r.status, "")
        accuracy_style = "green" if r.accuracy == ACCURACY_PASS else "red"
        table.add_row(
            r.model, r.backend, f"[{status_style}]{r.status}[/]" if status_style else r.status,
            f"[{accuracy_style}]{r.accuracy}[/]" if r.accuracy else "-",
            _with_quartiles(r.speedup, r.speedup_q1, r.speedup_q3, ".2f"),
            _with_iqr(r.eager_ms, r.eager_iqr_ms, ".3f"), _with_iqr(r.compiled_ms, r.compiled_iqr_ms, ".3f"),
            _compile_times(r), _fmt(r.memory_ratio, ".2f"),
            _pair(r.kernels, r.fallbacks, "d"), escape(r.note),
        )
    console.print(table)

    summary = rich_table.Table(title="geomean speedup (rows: ok, accuracy pass)")
    for header in ("backend", "vs eager", "vs inductor", "models"):
        summary.add_column(header, justify="left" if header == "backend" else "right")
    for backend, g in geomean_speedups(rows).items():
        summary.add_row(backend, _fmt(g["vs_eager"], ".2f"), _fmt(g["vs_inductor"], ".2f"), str(g["models"]))
    console.print(summary)


def plot_speedups(rows: list[Result], path: str, title: str = "speedup over eager") -> None:
    """Save a PNG bar chart: one group of bars per model, one bar per backend, a line at 1x.

    Rows without a speedup are left out (their bar is missing); rows that failed
    accuracy are hatched. Uses matplotlib's Agg canvas, so no display is needed.
    """
    figure_mod = require("matplotlib.figure")
    models = list(dict.fromkeys(r.model for r in rows if r.speedup is not None))
    backends = list(dict.fromkeys(r.backend for r in rows))
    fig = figure_mod.Figure(figsize=(max(6.0, 1.2 * len(models) * max(1, len(backends)) / 2), 4.5), dpi=120)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(backends))
    for i, backend in enumerate(backends):
        by_model = {r.model: r for r in rows if r.backend == backend and r.speedup is not None}
        xs = [m for m in range(len(models)) if models[m] in by_model]
        if not xs:
            continue
        bars = ax.bar(
            [x + (i - (len(backends) - 1) / 2) * width for x in xs],
            [by_model[models[x]].speedup for x in xs], width, label=backend,
        )
        for x, bar in zip(xs, bars):
            if by_model[models[x]].accuracy != ACCURACY_PASS:
                bar.set_hatch("//")
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(models)), models, rotation=30, ha="right")
    ax.set_ylabel("speedup over eager (x)")
    ax.set_title(title)
    if models:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no speedups measured", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, format="png")


def short_kernel_name(name: str, width: int = 80) -> str:
    """A kernel name for a table: without a leading ``void``, cut to ``width`` characters."""
    name = name.removeprefix("void ")
    return name if len(name) <= width else name[: width - 3] + "..."


def print_profiles(rows: list[ProfileRow], console: Any = None) -> None:
    """Print the profile view with rich (to stdout by default): one line per model and
    backend (wall, host and GPU busy ms per call, GPU time by kernel category, kernels
    per call, ``wall - busy``), then each row's top kernels by time."""
    rich_table = require("rich.table")
    escape = require("rich.markup").escape
    console = _console(console)
    table = rich_table.Table(title=_title("inductor_lite.bench --profile (ms per call)", {r.compile_mode for r in rows}))
    headers = ("model", "backend", "status", "wall (IQR)", "host", "GPU busy", *CATEGORIES, "kernels",
               "wall - busy", "note")
    for header in headers:
        table.add_column(header, justify="left" if header in ("model", "backend", "status", "note") else "right",
                         overflow="fold")
    for r in rows:
        d = r.device
        categories = [_fmt(d.category_ms[c], ".3f") if d else "-" for c in CATEGORIES]
        table.add_row(
            r.model, r.backend, r.status, _with_iqr(r.wall_ms, r.wall_iqr_ms, ".3f"), _fmt(r.host_ms, ".3f"),
            _fmt(d.busy_ms if d else None, ".3f"), *categories, _fmt(d.kernels_per_call if d else None, ".0f"),
            _fmt(r.exposed_host_ms, ".3f"), escape(r.note),
        )
    console.print(table)

    top = rich_table.Table(title="top kernels by GPU time (ms per call)")
    for header in ("model", "backend", "kernel", "category", "ms", "% busy", "launches"):
        top.add_column(header, justify="right" if header in ("ms", "% busy", "launches") else "left",
                       overflow="fold")
    for r in rows:
        if not r.device:
            continue
        for k in r.device.top:
            share = 100 * k.ms_per_call / r.device.busy_ms if r.device.busy_ms else None
            top.add_row(r.model, r.backend, escape(short_kernel_name(k.name)), k.category,
                        f"{k.ms_per_call:.3f}", _fmt(share, ".1f"), f"{k.launches_per_call:g}")
    if top.row_count:
        console.print(top)
