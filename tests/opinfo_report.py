"""Coverage of the OpInfo test: which (op, mode) ran one of our generated kernels.

Runs the cases of `tests.test_opinfo` (the same harness, inputs and expectations) outside
pytest and prints, per op, one letter per mode, then per mode the pass rate and the
share of cases where a project kernel ran::

    python -m tests.opinfo_report                      # every mode, CPU, 2 processes
    python -m tests.opinfo_report --modes f32,bf16 -k norm --jobs 4 --json cov.json

Letters: ``K`` passed and a generated kernel ran; ``E`` passed with aten externs only
(those externs are listed with ``--externs``); ``x`` failed as `opinfo_expected.XFAIL`
or ``XFAIL_ON`` says; ``F`` failed unexpectedly; ``P`` passed although listed in XFAIL; ``s`` skipped;
``.`` the mode does not apply. The whole table takes about as long as the test
(~10 minutes on 2 cores; ``--jobs`` divides it).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import multiprocessing
import sys
import time

from tests import opinfo_expected as expected
from tests import opinfo_harness as harness
from tests.test_opinfo import cases


def _run(index: int, mode_name: str, device: str) -> dict:
    """One case in a worker: its status, kernel count, externs and first error line."""
    op = harness.OP_DB[index]
    name = harness.full_name(op)
    start = time.perf_counter()
    record = {"op": name, "mode": mode_name, "device": device, "kernels": 0, "externs": [], "error": None}
    xfail = expected.xfail_reason(name, mode_name, device) is not None
    try:
        outcome = harness.run_case(op, mode_name, device, compare=name not in expected.UNDEFINED_VALUES,
                                   undefined_outputs=expected.UNDEFINED_OUTPUTS.get(name, frozenset()))
    except Exception as e:  # noqa: BLE001 - any failure is a result to report
        record["status"] = "x" if xfail else "F"
        record["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
    else:
        record["status"] = "P" if xfail else ("K" if outcome.kernels else "E")
        record["kernels"] = outcome.kernels
        record["externs"] = sorted(outcome.externs)
    record["seconds"] = round(time.perf_counter() - start, 2)
    return record


def summarize(records: list[dict], modes: list[str]) -> str:
    """The per-mode table: cases run (skips excluded), pass %, and % where a kernel ran."""
    lines = [f"{'mode':10} {'cases':>6} {'pass %':>7} {'kernel %':>9} {'xfail':>6} {'failed':>7} {'seconds':>8}"]
    for mode in modes:
        rows = [r for r in records if r["mode"] == mode and r["status"] != "s"]
        if not rows:
            continue
        count = collections.Counter(r["status"] for r in rows)
        passed = count["K"] + count["E"] + count["P"]
        lines.append(f"{mode:10} {len(rows):6} {100 * passed / len(rows):7.1f} {100 * count['K'] / len(rows):9.1f} "
                     f"{count['x']:6} {count['F'] + count['P']:7} {sum(r['seconds'] for r in rows):8.0f}")
    return "\n".join(lines)


def table(records: list[dict], modes: list[str], externs: bool) -> str:
    """One row per op: a status letter per mode, then (``externs``) the aten ops left as externs."""
    by_op: dict[str, dict[str, dict]] = collections.defaultdict(dict)
    for r in records:
        by_op[r["op"]][r["mode"]] = r
    width = max(len(op) for op in by_op)
    lines = [f"{'op':{width}} " + " ".join(f"{m[:4]:>4}" for m in modes)]
    for op in sorted(by_op):
        row = by_op[op]
        line = f"{op:{width}} " + " ".join(f"{row[m]['status'] if m in row else '.':>4}" for m in modes)
        if externs:
            line += "  " + " ".join(sorted({e for r in row.values() for e in r["externs"]}))
        lines.append(line)
    return "\n".join(lines)


def main(argv=None) -> int:
    """Run the selected cases and print the table; returns 1 when a case failed unexpectedly."""
    parser = argparse.ArgumentParser(prog="python -m tests.opinfo_report", description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(harness.MODES),
                        help=f"comma-separated modes (default: all of {', '.join(harness.MODES)})")
    parser.add_argument("-k", dest="pattern", default="", help="only ops whose name contains this")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--externs", action="store_true", help="list each op's extern aten ops")
    parser.add_argument("--failures", action="store_true", help="print each failure's first error line")
    parser.add_argument("--json", help="also write every case's record to this file")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    unknown = set(modes) - set(harness.MODES)
    if unknown:
        parser.error(f"unknown mode(s) {sorted(unknown)}; choose from {sorted(harness.MODES)}")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")

    index = {id(op): i for i, op in enumerate(harness.OP_DB)}
    todo, records = [], []
    for param in cases((args.device,)):
        op, mode_name, device = param.values
        name = harness.full_name(op)
        if mode_name not in modes or args.pattern not in name:
            continue
        if any(mark.name == "skip" for mark in param.marks):
            records.append({"op": name, "mode": mode_name, "device": device, "status": "s", "kernels": 0,
                            "externs": [], "error": expected.skip_reason(name, device), "seconds": 0.0})
        else:
            todo.append((index[id(op)], mode_name, device))
    # spawn: a forked worker would inherit torch's threads and Dynamo's state mid-way
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        futures = [pool.submit(_run, *case) for case in todo]
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            records.append(future.result())
            print(f"\r{done}/{len(todo)} cases", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)

    print(table(records, modes, args.externs))
    print()
    print(summarize(records, modes))
    bad = [r for r in records if r["status"] in "FP"]
    if args.failures:
        for r in sorted(records, key=lambda r: (r["mode"], r["op"])):
            if r["status"] in "FxP":
                print(f"{r['status']} {r['op']}-{r['mode']}: {r['error'] or 'passed, but listed in XFAIL'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
