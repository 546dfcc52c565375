"""bench/gpu_check.sh's plumbing, with a stand-in for python: what it writes and how it bounds time.

The GPU session that runs it gets one try, and the device tool brings back at most 8 files.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
STEPS = ["tests_gpu", "bench_checks", "demo", "bench", "render", "launch", "sweep", "tests_rest"]
# Prints its arguments and a pytest-like last line, writes the files the real steps would
# (the benchmark json, the rendered section), refuses the optional plugins' imports.
FAKE_PYTHON = """#!/usr/bin/env bash
case "$*" in *"import xdist"*|*"import pytest_timeout"*) exit 1;; esac
echo "fake python $*"
previous=
for arg in "$@"; do
    case "$arg" in --benchmark-json=*) echo "{}" >"${arg#*=}";; esac
    case "$previous" in --section-out|--markdown) echo "section" >"$arg";; esac
    previous=$arg
done
echo "=== 1 passed (fake) ==="
echo
"""

pytestmark = pytest.mark.skipif(
    not (shutil.which("bash") and shutil.which("timeout")), reason="needs bash and timeout"
)


def run_check(tmp_path: Path, **env: str) -> tuple[Path, str]:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": str(fake), **env}
    script = ROOT / "bench" / "gpu_check.sh"
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return out, (out / "summary.txt").read_text()


def test_every_step_runs_and_at_most_8_files_come_back(tmp_path):
    out, summary = run_check(tmp_path)
    files = sorted(path.name for path in out.iterdir())
    assert len(files) <= 8, files
    assert {"summary.txt", "tests.log", "bench.log", "bench_cuda.json"} <= set(files)
    assert "benchmarks_cuda.md" in files
    for name in STEPS:
        assert f"step {name}: exit 0 after" in summary
    # Each step's last non-empty line follows its status: pytest's count, on the GPU.
    assert summary.count("    last line: === 1 passed (fake) ===") == len(STEPS)


def test_no_step_starts_past_the_deadline(tmp_path):
    _, summary = run_check(tmp_path, GPU_CHECK_SECONDS="0")
    for name in STEPS:
        assert f"step {name}: skipped, no time left" in summary


def test_a_limit_is_cut_to_the_time_left(tmp_path):
    # 100 s in all, less 10 of grace: the 210 s test step gets what is left, the others fit.
    _, summary = run_check(tmp_path, GPU_CHECK_SECONDS="100")
    limit = int(summary.split("step tests_gpu: exit 0 after ")[1].split("(limit ")[1].split()[0])
    assert 5 <= limit <= 90
    assert re.search(r"step bench_checks: exit 0 after \d+ s \(limit 15 s\)", summary)
