"""Checks of bench/conftest.py's hooks, each through a pytest run of the bench suite in a
subprocess: what it collects, what a saved run records, and a device it cannot use."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
FLOOR = "bench/bench_chain.py::test_floor[bs1-S1-k1-N2]"


def installed_triton():
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def run_pytest(*args):
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_bench_modules_are_collected_once_named_or_not():
    # bench_*.py matches no python_files pattern: the hook collects them, except a file named
    # on the command line, which pytest collects itself.
    done = run_pytest("bench/bench_chain.py", "bench", "--collect-only", "-q")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert len(ids) == len(set(ids))
    assert FLOOR in ids
    assert any(i.startswith("bench/bench_tree.py::") for i in ids)  # found by the hook


def test_a_saved_run_records_the_machine_and_no_round_times(tmp_path):
    out = tmp_path / "run.json"
    done = run_pytest(
        FLOOR,
        f"--benchmark-json={out}",
        "--benchmark-min-rounds=3",
        "--benchmark-max-time=0.0001",
        "--benchmark-warmup=off",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    machine = data["machine_info"]
    assert machine["torch_version"] == torch.__version__
    assert machine["triton_version"] == installed_triton()
    assert (machine["device"], machine["torch_threads"], machine["disable_gc"]) == ("cpu", 1, True)
    assert machine["cpu_count"] == os.cpu_count()
    assert machine["cpu_model"]
    [bench] = data["benchmarks"]
    assert bench["stats"]["rounds"] >= 3
    assert "data" not in bench["stats"]  # every round's time, dropped


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_device_cuda_without_cuda_is_a_usage_error():
    done = run_pytest("bench", "--device", "cuda", "--collect-only", "-q")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--device cuda: torch sees no CUDA device" in done.stderr
