"""The quickstart must pass as users run it: a fresh process, exit code 0, PASS printed."""

import os
import re
import subprocess
import sys

import pytest

QUICKSTART = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "quickstart.py")


def run_quickstart(env_changes, cache_dir):
    env = dict(os.environ, INDUCTOR_LITE_CACHE_DIR=str(cache_dir), **env_changes)
    return subprocess.run([sys.executable, QUICKSTART], env=env, capture_output=True, text=True, timeout=600)


def counter(stdout, label):
    """The number after ``label:`` in the quickstart's report."""
    match = re.search(rf"{label}:\s+(\d+)", stdout)
    assert match, f"no '{label}' in:\n{stdout}"
    return int(match.group(1))


def test_quickstart_on_cpu(tmp_path):
    proc = run_quickstart({"CUDA_VISIBLE_DEVICES": ""}, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS" in proc.stdout and "device:            cpu" in proc.stdout
    assert counter(proc.stdout, "kernels generated") > 0


@pytest.mark.gpu
def test_quickstart_on_gpu_then_from_the_disk_cache(tmp_path):
    first = run_quickstart({}, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    # the autotuner builds one binary per candidate config of a kernel
    compiled = counter(first.stdout, "kernels compiled")
    assert compiled >= counter(first.stdout, "distinct") > 0
    second = run_quickstart({}, tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    # warm: nothing is built, and the tuning decisions on disk load only the chosen configs
    # (each distinct kernel's, once however many launches share it)
    assert counter(second.stdout, "kernels compiled") == 0
    assert counter(second.stdout, "distinct") <= counter(second.stdout, "cache hits") <= compiled
