"""The model benchmark CLI, ``python -m inductor_lite.bench``, on CPU with tiny configs.

One subprocess runs the builtin models on eager and inductor_lite and writes a CSV and
a PNG; the other tests check the accuracy rule, error handling and the outputs in-process.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.machinery
import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree

from inductor_lite.bench import MODELS, ModelSpec, Result, Settings, check_accuracy, measure, measure_model
from inductor_lite.bench.__main__ import main
from inductor_lite.bench.report import COLUMNS, geomean, geomean_speedups, write_results

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("eager", "inductor_lite")
BUILTIN = ("mlp", "gpt")
NUMBER_COLUMNS = (
    "speedup", "speedup_q1", "speedup_q3", "eager_ms", "eager_iqr_ms", "compiled_ms", "compiled_iqr_ms",
    "compile_cold_s", "compile_warm_s",
)


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """Run the CLI once; returns (CSV rows, PNG path, completed process)."""
    out = tmp_path_factory.mktemp("bench")
    csv_path, png_path = out / "results.csv", out / "speedup.png"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [
            sys.executable, "-m", "inductor_lite.bench", "--device", "cpu", "--tiny", "--models", "builtin",
            "--backends", ",".join(BACKENDS), "--repeat", "3", "--warmup", "1",
            "--output", str(csv_path), "--plot", str(png_path),
        ],
        cwd=out, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(csv_path, newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == COLUMNS
        rows = list(reader)
    return rows, png_path, proc


def _row(rows, model, backend):
    matches = [r for r in rows if r["model"] == model and r["backend"] == backend]
    assert len(matches) == 1, f"expected one row for {model}/{backend}, got {len(matches)}"
    return matches[0]


def test_cli_writes_one_row_per_model_and_backend(cli_run):
    rows, _, proc = cli_run
    assert sorted((r["model"], r["backend"]) for r in rows) == sorted((m, b) for m in BUILTIN for b in BACKENDS)
    for r in rows:
        assert (r["mode"], r["dtype"], r["device"]) == ("inference", "fp32", "cpu")
        assert int(r["batch_size"]) == MODELS[r["model"]].tiny_batch_size
    # The summary table and the geomean table reach stdout.
    assert "geomean" in proc.stdout and "inductor_lite" in proc.stdout


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", BUILTIN)
def test_cli_rows_pass_accuracy_with_numbers(cli_run, model, backend):
    row = _row(cli_run[0], model, backend)
    assert row["status"] == "ok", row["note"]
    assert row["accuracy"] == "pass", row["note"]
    for column in NUMBER_COLUMNS:
        value = float(row[column])
        assert math.isfinite(value), (column, row[column])
    assert float(row["speedup"]) > 0 and float(row["eager_ms"]) > 0 and float(row["compiled_ms"]) > 0
    # Every time comes with its spread: the speedup's quartiles bracket it, IQRs are >= 0.
    assert float(row["speedup_q1"]) <= float(row["speedup"]) <= float(row["speedup_q3"])
    assert float(row["eager_iqr_ms"]) >= 0 and float(row["compiled_iqr_ms"]) >= 0
    assert row["compile_mode"] == "default"
    # A CPU run has no CUDA allocator to read peaks from.
    assert row["memory_ratio"] == "" and row["eager_peak_mib"] == ""


def test_cli_counts_inductor_lite_kernels_only(cli_run):
    rows = cli_run[0]
    for model in BUILTIN:
        lite = _row(rows, model, "inductor_lite")
        assert int(lite["kernels"]) >= 1
        assert int(lite["fallbacks"]) >= 0 and int(lite["graph_fallbacks"]) == 0
        eager = _row(rows, model, "eager")
        assert eager["kernels"] == eager["fallbacks"] == ""


def test_cli_writes_png(cli_run):
    png = cli_run[1]
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 2000


# ---------------------------------------------------------------- accuracy rule


def _noisy(x: torch.Tensor, scale: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return x + scale * torch.randn(x.shape, generator=g, dtype=x.dtype)


def test_check_accuracy_rmse_rule_against_fp64():
    fp64 = torch.randn(4096, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    eager = _noisy(fp64, 1e-2, 1).float()  # eager's own error: RMSE ~1e-2, beyond allclose at 1e-3
    close = _noisy(fp64, 1.5e-2, 2).float()  # within 2x eager's RMSE
    far = _noisy(fp64, 5e-2, 3).float()  # 5x eager's RMSE
    assert not torch.allclose(eager, close, rtol=1e-3, atol=1e-3)
    assert check_accuracy(eager, close, fp64, tol=1e-3) is None
    failure = check_accuracy(eager, far, fp64, tol=1e-3)
    assert failure is not None and "RMSE" in failure


def test_check_accuracy_allclose_passes_and_nan_fails():
    fp64 = torch.randn(64, 8, dtype=torch.float64)
    eager = fp64.float()
    assert check_accuracy(eager, eager * (1 + 1e-5), fp64, tol=1e-3) is None
    poisoned = eager.clone()
    poisoned[3, 5] = float("nan")
    assert check_accuracy(eager, poisoned, fp64, tol=1e-3) is not None


def test_check_accuracy_names_the_failing_leaf():
    fp64 = {"loss": torch.tensor(2.0, dtype=torch.float64), "grads": {"w": torch.ones(3, dtype=torch.float64)}}
    eager = {"loss": torch.tensor(2.0), "grads": {"w": torch.ones(3)}}
    wrong = {"loss": torch.tensor(2.0), "grads": {"w": torch.tensor([1.0, 1.5, 1.0])}}
    assert check_accuracy(eager, eager, fp64, tol=1e-2) is None
    assert "['w']" in check_accuracy(eager, wrong, fp64, tol=1e-2)
    assert "bfloat16" in check_accuracy(eager, {**eager, "loss": torch.tensor(2.0, dtype=torch.bfloat16)}, fp64, 1e-2)
    ids = torch.tensor([1, 2, 3])
    assert check_accuracy(ids, torch.tensor([1, 2, 4]), ids, 1e-2) is not None


# ---------------------------------------------------------------- measure_model


def _scaling_backend(gm, example_inputs):
    """A wrong compiler: every float output (and so every gradient) scaled by 1.1."""

    def run(*args):
        return pytree.tree_map(lambda t: t * 1.1 if torch.is_tensor(t) and t.is_floating_point() else t, gm(*args))

    return run


def _raising_backend(gm, example_inputs):
    raise RuntimeError("bench test: backend exploded")


torch._dynamo.register_backend(_scaling_backend, name="bench_test_scaling")
torch._dynamo.register_backend(_raising_backend, name="bench_test_raising")

_TINY = Settings(device="cpu", tiny=True, repeat=1, warmup=0)


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_measure_model_flags_wrong_results_and_survives_errors(mode):
    settings = Settings(mode=mode, device="cpu", tiny=True, repeat=1, warmup=0)
    rows = list(measure_model(MODELS["mlp"], ["bench_test_scaling", "bench_test_raising", "eager"], settings))
    scaling, raising, eager = rows
    assert scaling.status == "ok" and scaling.accuracy == "fail_accuracy"
    # The first failing leaf is named: the loss before the gradients in training.
    assert scaling.note.startswith("output['loss']" if mode == "training" else "output:"), scaling.note
    assert raising.status == "failed" and "backend exploded" in raising.note and raising.speedup is None
    assert eager.status == "ok" and eager.accuracy == "pass" and eager.speedup > 0
    # every contender was timed in the same rounds: one eager baseline for the model's rows
    assert scaling.eager_ms == eager.eager_ms and scaling.compile_cold_s is not None


def test_measure_model_times_every_backend_in_the_same_rounds(monkeypatch):
    timings = []
    real = measure.time_contenders
    monkeypatch.setattr(measure, "time_contenders", lambda fns, *a, **k: timings.append(len(fns)) or real(fns, *a, **k))
    rows = list(measure_model(MODELS["mlp"], ["eager", "bench_test_scaling"], _TINY))
    assert timings == [3]  # eager, then both backends, in one timing
    assert [r.status for r in rows] == ["ok", "ok"] and rows[0].eager_ms == rows[1].eager_ms


def test_measure_model_skips_models_with_missing_packages():
    spec = ModelSpec(
        name="needs_pkg", suite="hf", requires="inductor_lite_no_such_package", batch_size=4, tiny_batch_size=2,
        build_fn=MODELS["mlp"].build_fn, inputs_fn=MODELS["mlp"].inputs_fn,
    )
    rows = list(measure_model(spec, ["eager", "inductor_lite"], _TINY))
    assert [(r.backend, r.status) for r in rows] == [("eager", "skipped"), ("inductor_lite", "skipped")]
    assert all("inductor_lite_no_such_package is not installed" in r.note for r in rows)


def test_measure_model_reports_eager_failures():
    def broken_inputs(batch, tiny, gen):  # features do not match the MLP's first layer
        return MODELS["mlp"].inputs_fn(batch, False, gen)

    spec = ModelSpec("broken", "builtin", None, 4, 2, MODELS["mlp"].build_fn, broken_inputs)
    rows = list(measure_model(spec, ["eager"], _TINY))
    assert rows[0].status == "eager_failed" and "RuntimeError" in rows[0].note


def test_timm_models_are_built_offline_with_random_weights(monkeypatch):
    """timm is not installed here: a stand-in checks the names and arguments the suite passes."""
    calls = []

    def create_model(name, **kwargs):
        calls.append((name, kwargs))
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
            torch.nn.Linear(8, kwargs.get("num_classes", 1000)),
        )

    fake = types.ModuleType("timm")
    fake.__spec__ = importlib.machinery.ModuleSpec("timm", None)
    fake.create_model = create_model
    monkeypatch.setitem(sys.modules, "timm", fake)

    rows = [row for name in ("resnet50", "mobilenetv3_large_100", "convnext_tiny", "vit_small")
            for row in measure_model(MODELS[name], ["eager"], _TINY)]
    assert [(r.status, r.accuracy) for r in rows] == [("ok", "pass")] * 4, [r.note for r in rows]
    names = [name for name, _ in calls]
    assert sorted(set(names)) == ["convnext_tiny", "mobilenetv3_large_100", "resnet50", "vit_small_patch16_224"]
    for name, kwargs in calls:
        assert kwargs["pretrained"] is False and kwargs["num_classes"] == 10
        assert kwargs["drop_rate"] == kwargs["drop_path_rate"] == 0.0
        assert ("img_size" in kwargs) == (name == "vit_small_patch16_224")


# ---------------------------------------------------------------- report and arguments


def _result(model, backend, speedup, accuracy="pass", status="ok"):
    return Result(model, "builtin", backend, "inference", "fp32", "cpu", 2, status, accuracy, speedup)


def test_geomean_speedups_vs_eager_and_inductor():
    rows = [
        _result("a", "inductor", 2.0), _result("b", "inductor", 8.0),
        _result("a", "inductor_lite", 4.0), _result("b", "inductor_lite", 4.0),
        _result("c", "inductor_lite", 100.0, accuracy="fail_accuracy"),
    ]
    summary = geomean_speedups(rows)
    assert summary["inductor"]["vs_eager"] == pytest.approx(4.0)
    assert summary["inductor_lite"]["vs_eager"] == pytest.approx(4.0)
    assert summary["inductor_lite"]["vs_inductor"] == pytest.approx(1.0)  # sqrt(2 * 0.5)
    assert summary["inductor_lite"]["models"] == 2
    assert geomean([]) is None
    with pytest.raises(ValueError, match="positive"):
        geomean([1.0, 0.0])


def test_write_results_json_and_bad_extension(tmp_path):
    rows = [_result("a", "inductor", 2.0), _result("a", "inductor_lite", 3.0)]
    path = tmp_path / "r.json"
    write_results(rows, str(path), {"device_name": "test"})
    data = json.loads(path.read_text())
    assert [r["backend"] for r in data["rows"]] == ["inductor", "inductor_lite"]
    assert data["rows"][0]["memory_ratio"] is None
    assert data["geomean"]["inductor_lite"]["vs_inductor"] == pytest.approx(1.5)
    with pytest.raises(ValueError, match=r"\.csv or \.json"):
        write_results(rows, str(tmp_path / "r.txt"), {})


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--models", "no_such_model"], "unknown model or suite 'no_such_model'"),
        (["--backends", "eager,no_such_backend"], "unknown backend(s) ['no_such_backend']"),
        (["--output", "results.txt"], "must be .csv or .json"),
        (["--plot", "chart.svg"], "must be .png"),
        (["--repeat", "0"], "repeat must be >= 1"),
        (["--batch-size", "0"], "batch size must be >= 1"),
        (["--jobs", "0"], "--jobs 0: need >= 1"),
        (["--jobs", "2", "--profile"], "and 1 with --profile"),
        (["--model-timeout", "60"], "--model-timeout needs --jobs > 1"),
    ],
)
def test_bad_arguments_exit_2_naming_the_problem(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cpu", "--backends", "eager"] + argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_measure_model_times_each_backend_beside_eager_when_all_at_once_run_out_of_memory(monkeypatch):
    timings = []
    real = measure.time_contenders

    def time_contenders(fns, *args, **kwargs):
        timings.append(len(fns))
        if len(fns) > 2:  # eager and two backends do not fit
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(fns, *args, **kwargs)

    monkeypatch.setattr(measure, "time_contenders", time_contenders)
    rows = list(measure_model(MODELS["mlp"], ["eager", "bench_test_scaling"], _TINY))
    assert timings == [3, 2, 2]  # together, then each beside eager
    assert [r.status for r in rows] == ["ok", "ok"] and all(r.speedup > 0 for r in rows)
    assert all("timed beside eager alone" in r.note for r in rows)


def test_fresh_process_warm_start_loads_the_cold_compile_from_disk():
    from inductor_lite.bench.measure import Workload, fresh_disk_cache, fresh_process_first_call

    with fresh_disk_cache("inductor_lite"):
        rows = list(measure_model(MODELS["mlp"], ["inductor_lite"], dataclasses.replace(_TINY, fresh_process=True)))
        assert rows[0].status == "ok" and rows[0].compile_fresh_s is not None
        work = Workload(MODELS["mlp"], _TINY, references=False)
        cold_s, cold = fresh_process_first_call(work, "inductor_lite")
        warm_s, warm = fresh_process_first_call(work, "inductor_lite")
    cold, warm = cold["counters"], warm["counters"]
    # A new process with an empty cache compiles; one with the cache filled loads (through
    # AOTAutograd's cache, which holds our compiled graph, or our own graph cache).
    assert cold["graph_cache_misses"] >= 1 and not cold.get("aot_cache_hits")
    assert warm.get("aot_cache_hits", 0) + warm.get("graph_cache_hits", 0) >= 1
    assert not warm.get("graph_cache_misses")
    assert cold_s > 0 and warm_s > 0


def test_jobs_measure_models_in_child_processes_in_suite_order(tmp_path):
    out = tmp_path / "rows.json"
    assert main(["--models", "mlp,gpt", "--tiny", "--device", "cpu", "--backends", "eager,inductor_lite",
                 "--repeat", "1", "--warmup", "0", "--jobs", "2", "--output", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["backend"]) for r in rows] == [
        ("mlp", "eager"), ("mlp", "inductor_lite"), ("gpt", "eager"), ("gpt", "inductor_lite")]
    assert all(r["status"] == "ok" and r["accuracy"] == "pass" for r in rows)
    assert rows[1]["kernels"] and rows[0]["eager_ms"] == rows[1]["eager_ms"]  # one baseline a model


def test_a_job_past_its_timeout_fails_only_its_own_rows():
    from inductor_lite.bench.parallel import run_parallel

    settings = dataclasses.replace(_TINY, device="cpu")
    rows = run_parallel([MODELS["mlp"]], ["eager", "inductor_lite"], settings, jobs=2, timeout_s=0.01)
    assert [(r.backend, r.status) for r in rows] == [("eager", "failed"), ("inductor_lite", "failed")]
    assert all("ran past" in r.note for r in rows)


def _fake_fresh_starts(monkeypatch, seconds: dict) -> list[str]:
    """Replace the fresh-process child with ``seconds[backend]``'s next value (an
    exception is raised); returns the list of backends in the order they were called."""
    calls, samples = [], {backend: iter(values) for backend, values in seconds.items()}

    def fresh_process_first_call(work, backend, timeout_s=1800):
        calls.append(backend)
        value = next(samples[backend])
        if isinstance(value, Exception):
            raise value
        return value, {}

    monkeypatch.setattr(measure, "fresh_process_first_call", fresh_process_first_call)
    return calls


def test_fresh_starts_take_turns_and_report_the_median(monkeypatch):
    assert measure.FRESH_ROUNDS == 3
    calls = _fake_fresh_starts(monkeypatch, {"eager": [5.0, 1.0, 3.0], "inductor_lite": [2.0, 9.0, 4.0]})
    settings = dataclasses.replace(_TINY, fresh_process=True)
    eager, lite = measure_model(MODELS["mlp"], ["eager", "inductor_lite"], settings)
    assert calls == ["eager", "inductor_lite"] * 3
    # both less the same eager iteration: the medians are 3 and 4
    assert lite.compile_fresh_s - eager.compile_fresh_s == pytest.approx(1.0)


def test_a_failed_fresh_start_costs_only_its_backend_the_column(monkeypatch):
    error = RuntimeError("fresh-process warm start exited with 1: boom")
    calls = _fake_fresh_starts(monkeypatch, {"eager": [1.0, 1.0, 1.0], "inductor_lite": [2.0, error]})
    settings = dataclasses.replace(_TINY, fresh_process=True)
    eager, lite = measure_model(MODELS["mlp"], ["eager", "inductor_lite"], settings)
    assert calls == ["eager", "inductor_lite", "eager", "inductor_lite", "eager"]
    assert eager.compile_fresh_s is not None and lite.compile_fresh_s is None
    assert lite.status == "ok" and "boom" in lite.note and lite.speedup > 0


def test_child_argv_reproduces_the_settings():
    from inductor_lite.bench.__main__ import parse_args
    from inductor_lite.bench.parallel import child_argv

    settings = Settings(mode="training", dtype="amp", device="cpu", batch_size=3, repeat=7, warmup=2, tiny=True,
                        seed=5, compile_mode="reduce-overhead", fresh_process=True)
    _, specs, backends, parsed = parse_args(child_argv(settings, ["eager", "inductor_lite"]) + ["--models", "mlp"])
    assert parsed == settings and backends == ["eager", "inductor_lite"] and [s.name for s in specs] == ["mlp"]


def test_fresh_process_warm_start_of_inductor_hits_its_caches(monkeypatch):
    # The child must compile under the parent's TF32 flags: inductor's cache keys hold them.
    from inductor_lite.bench.measure import Workload, compile_and_run, fresh_disk_cache, fresh_process_first_call

    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    work = Workload(MODELS["mlp"], _TINY, references=False)
    with fresh_disk_cache("inductor"):
        compile_and_run(work, "inductor")  # the cold compile, in this process
        _, warm = fresh_process_first_call(work, "inductor")
    torch._dynamo.reset()
    assert warm["inductor_counters"].get("fxgraph_cache_hit", 0) >= 1
    assert not warm["inductor_counters"].get("fxgraph_cache_miss")
