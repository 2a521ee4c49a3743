"""The runtime's block-size autotuner: choice, memory and disk caching, failures.

CPU tests stand in a fake timer for CUDA events (``autotune._time``, which also makes
the untimed first calls) and a fake device name; the GPU test tunes a real DSL kernel.
"""

import json
import os

import pytest
import torch

from inductor_lite import config
from inductor_lite.bench import dsl_kernels as K
from inductor_lite.codegen import heuristics
from inductor_lite.counters import counters
from inductor_lite.runtime import autotune

CUDA = torch.device("cuda")


@pytest.fixture
def fake_cuda(monkeypatch, tmp_path):
    """Time candidates by a table instead of CUDA events; returns the list of timed labels."""
    timed = []
    seconds = {"a": 3e-6, "b": 1e-6, "c": 2e-6}

    def fake_time(fns, device, calls=None):
        fake_time.calls.append(calls)
        out = []
        for fn in fns:
            try:
                fn()
            except RuntimeError as error:
                out.append(error)
                continue
            timed.append(fake_time.last)
            out.append(seconds[fake_time.last])
        return out

    fake_time.calls = []
    fake_time.seconds = seconds
    monkeypatch.setattr(autotune, "_time", fake_time)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "fake GPU")
    autotune.clear_memory()
    counters.clear()
    with config.patch(cache_dir=str(tmp_path), disable_cache=False, autotune=True, interpret=False):
        yield timed, fake_time
    autotune.clear_memory()


def _run(fake_time, fail=()):
    def run(candidate):
        fake_time.last = candidate
        if candidate in fail:
            raise RuntimeError(f"config {candidate} does not build")
    return run


def test_picks_the_fastest_then_remembers_in_memory_and_on_disk(fake_cuda, tmp_path):
    timed, fake_time = fake_cuda
    assert autotune.autotune("k", (8, 16), ["a", "b", "c"], _run(fake_time), CUDA) == "b"
    assert timed == ["a", "b", "c"] and counters["autotune_runs"] == 1
    assert autotune.autotune("k", (8, 16), ["a", "b", "c"], _run(fake_time), CUDA) == "b"
    assert len(timed) == 3  # from memory
    autotune.clear_memory()
    assert autotune.autotune("k", (8, 16), ["a", "b", "c"], _run(fake_time), CUDA) == "b"
    assert len(timed) == 3 and counters["autotune_runs"] == 1  # from disk
    (entry,) = (tmp_path / "autotune").iterdir()
    assert json.loads(entry.read_text()) == {"best": "b"}


def test_a_new_key_or_candidate_list_is_tuned_again(fake_cuda):
    timed, fake_time = fake_cuda
    autotune.autotune("k", (8, 16), ["a", "b", "c"], _run(fake_time), CUDA)
    assert autotune.autotune("k", (8, 32), ["a", "b", "c"], _run(fake_time), CUDA) == "b"
    assert autotune.autotune("k", (8, 16), ["a", "c"], _run(fake_time), CUDA) == "c"
    assert counters["autotune_runs"] == 3


def test_configs_differing_only_in_maxnreg_are_separate_decisions(fake_cuda, tmp_path):
    """A `heuristics.Config`'s maxnreg is part of the decision key, in memory and on
    disk: a candidate list that differs from a tuned one only in a maxnreg is tuned
    again, and each keeps its own choice."""
    timed, fake_time = fake_cuda

    def run(candidate):  # the capped config (b) is the faster
        fake_time.last = "a" if candidate.maxnreg is None else "b"

    plain = heuristics.Config.of(4, XBLOCK=1024)
    capped = [plain, heuristics.Config.of(4, maxnreg=64, XBLOCK=1024)]
    capped_more = [plain, heuristics.Config.of(4, maxnreg=96, XBLOCK=1024)]
    assert autotune.autotune("k", (8,), capped, run, CUDA) == capped[1]
    assert autotune.autotune("k", (8,), capped_more, run, CUDA) == capped_more[1]
    assert counters["autotune_runs"] == 2 and len(list((tmp_path / "autotune").iterdir())) == 2
    autotune.clear_memory()
    assert autotune.autotune("k", (8,), capped, run, CUDA) == capped[1]  # from disk
    assert counters["autotune_runs"] == 2


def test_failing_candidates_are_skipped_and_all_failing_raises(fake_cuda):
    timed, fake_time = fake_cuda
    assert autotune.autotune("k", 1, ["a", "b", "c"], _run(fake_time, fail={"b"}), CUDA) == "c"
    with pytest.raises(RuntimeError, match="config a does not build"):
        autotune.autotune("k", 2, ["a", "b"], _run(fake_time, fail={"a", "b"}), CUDA)


def test_a_corrupt_or_stale_disk_entry_is_tuned_again(fake_cuda, tmp_path):
    timed, fake_time = fake_cuda
    autotune.autotune("k", 1, ["a", "b", "c"], _run(fake_time), CUDA)
    (entry,) = (tmp_path / "autotune").iterdir()
    for text in ("{not json", json.dumps({"best": "zzz"})):
        entry.write_text(text)
        autotune.clear_memory()
        assert autotune.autotune("k", 1, ["a", "b", "c"], _run(fake_time), CUDA) == "b"
    assert counters["autotune_runs"] == 3
    assert json.loads(entry.read_text()) == {"best": "b"}


def test_no_tuning_off_cuda_when_disabled_or_for_one_candidate(fake_cuda):
    timed, fake_time = fake_cuda
    assert autotune.autotune("k", 1, ["a", "b"], _run(fake_time), torch.device("cpu")) == "a"
    assert autotune.autotune("k", 1, ["c"], _run(fake_time), CUDA) == "c"
    with config.patch(autotune=False):
        assert autotune.autotune("k", 1, ["a", "b"], _run(fake_time), CUDA) == "a"
    assert timed == []


def test_disable_cache_keeps_decisions_off_disk(fake_cuda, tmp_path):
    timed, fake_time = fake_cuda
    with config.patch(disable_cache=True):
        assert autotune.autotune("k", 1, ["a", "b"], _run(fake_time), CUDA) == "b"
    assert not os.path.exists(tmp_path / "autotune")


def test_bad_candidate_lists_raise(fake_cuda):
    timed, fake_time = fake_cuda
    with pytest.raises(ValueError, match="no candidate"):
        autotune.autotune("k", 1, [], _run(fake_time), CUDA)
    with pytest.raises(ValueError, match="distinct"):
        autotune.autotune("k", 1, ["a", "a"], _run(fake_time), CUDA)


def test_bench_launchers_use_the_default_config_on_cpu():
    x = torch.randn(3, 40)
    assert K.choose_config("softmax", x) == heuristics.row_default(40, 4)
    assert K.choose_config("add", x, x) == heuristics.flat_pointwise_default(120, 4)
    with pytest.raises(KeyError):
        K.choose_config("matmul", x)


@pytest.mark.gpu
def test_tunes_a_dsl_kernel_on_gpu(tmp_path):
    x = torch.randn(512, 4096, device="cuda")
    autotune.clear_memory()
    counters.clear()
    with config.patch(cache_dir=str(tmp_path), autotune=True):
        out = K.softmax(x)
        chosen = K.choose_config("softmax", x)
    assert chosen in K.candidates("softmax", x)
    assert counters["autotune_runs"] == 1
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    # The chosen config gives the same answer into a poisoned output.
    poisoned = torch.full_like(x, float("nan"))
    K.softmax(x, out=poisoned, config=chosen)
    torch.testing.assert_close(poisoned, out, rtol=0, atol=0)


def test_an_unwritable_cache_dir_still_tunes(fake_cuda, tmp_path):
    timed, fake_time = fake_cuda
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with config.patch(cache_dir=str(blocker)):
        assert autotune.autotune("k", 1, ["a", "b"], _run(fake_time), CUDA) == "b"


def test_close_candidates_are_timed_again_longer(fake_cuda):
    """Candidates within FINALIST_MARGIN of the fastest get a second, longer round,
    whose times decide; the others are not timed again."""
    timed, fake_time = fake_cuda
    first = {"a": 1.01e-6, "b": 1.0e-6, "c": 2e-6}
    second = {"a": 0.9e-6, "b": 1.0e-6}

    def run(candidate):
        fake_time.last = candidate
        fake_time.seconds[candidate] = (second if len(fake_time.calls) > 1 else first)[candidate]
    assert autotune.autotune("k", (1,), ["a", "b", "c"], run, CUDA) == "a"
    assert fake_time.calls == [None, autotune.FINAL_CALLS]
    assert timed == ["a", "b", "c", "b", "a"]
