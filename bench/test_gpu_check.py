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
STEPS = [
    *("tests_gpu", "bench_checks", "demo", "bench", "render", "targets", "launch", "sweep"),
    "tests_rest",
]
# Prints its arguments and a pytest-like last line, writes the files the real steps would
# (the benchmark json, the rendered section), refuses the optional plugins' imports.
FAKE_PYTHON = """#!/usr/bin/env bash
case "$*" in *"import xdist"*|*"import pytest_timeout"*) exit 1;; esac
echo "fake python $*"
echo "cache dir: ${TRITON_CACHE_DIR:-none}"
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


# A clock that stands still at 1000 s: the limits the script works out from the deadline
# are then exact, however long the steps take.
FAKE_DATE = """#!/usr/bin/env bash
case "$*" in +%s) echo 1000;; *) echo "2026-01-01 00:00:00";; esac
"""


def fake(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def run_check(
    tmp_path: Path, root: Path = ROOT, python_text: str = FAKE_PYTHON, **env: str
) -> tuple[Path, str]:
    python = fake(tmp_path, "python", python_text)
    clock = tmp_path / "bin"
    clock.mkdir()
    fake(clock, "date", FAKE_DATE)
    out = tmp_path / "out"
    path = f"{clock}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "OUT": str(out), "PYTHON": str(python), "PATH": path, **env}
    script = root / "bench" / "gpu_check.sh"
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


def limits(summary: str) -> dict[str, str]:
    return dict(re.findall(r"step (\w+): (skipped|exit 0 after 0 s \(limit \d+ s\))", summary))


def test_a_limit_is_cut_to_the_time_left(tmp_path):
    # 100 s in all, less 10 of grace: the steps of more than 90 s get 90, the others theirs.
    _, summary = run_check(tmp_path, GPU_CHECK_SECONDS="100")
    given = dict(zip(STEPS, (90, 15, 35, 90, 15, 10, 30, 90, 90), strict=True))
    assert limits(summary) == {name: f"exit 0 after 0 s (limit {s} s)" for name, s in given.items()}


@pytest.mark.parametrize(
    ("seconds", "want"),
    [("0", "skipped"), ("14", "skipped"), ("15", "exit 0 after 0 s (limit 5 s)")],
)
def test_a_step_needs_5_seconds_after_the_grace(tmp_path, seconds, want):
    # Past the deadline, or with under 5 s left after the grace, no step starts.
    _, summary = run_check(tmp_path, GPU_CHECK_SECONDS=seconds)
    assert limits(summary) == dict.fromkeys(STEPS, want)


def test_the_default_limits_sum_to_760_seconds(tmp_path):
    # The fake steps take no time, so even the last one gets its whole limit here.
    _, summary = run_check(tmp_path)
    given = dict(zip(STEPS, (210, 15, 35, 120, 15, 10, 30, 130, 195), strict=True))
    assert limits(summary) == {name: f"exit 0 after 0 s (limit {s} s)" for name, s in given.items()}
    assert sum(given.values()) == 760


def test_each_step_runs_its_command_on_cuda(tmp_path):
    # What the one GPU run must ask for: the GPU tests, the compact benchmark run on CUDA and
    # its CUDA rendering, the demo on CUDA; the fake python echoes each command line.
    out, _ = run_check(tmp_path)
    calls = [
        line.removeprefix("fake python ")
        for log in ("tests.log", "demo.log", "bench.log", "launch.log")
        for line in (out / log).read_text().splitlines()
        if line.startswith(("fake python -", "fake python bench/"))
    ]
    wanted = [
        ("-m pytest tests", "-m gpu"),
        ("-m pytest bench/test_gpu.py",),
        ("-m pytest tests", "-m not gpu"),
        ("-m eagle_fn --device cuda",),
        ("-m pytest bench/bench_tree.py", "-m report", "--device=cuda", "--benchmark-json="),
        ("bench/report.py --device cuda --from-json",),
        ("bench/targets.py --from-json", "/bench_cuda.json"),
        ("bench/sweep_sampling.py",),
        ("bench/launch_overhead.py",),
    ]
    for parts in wanted:
        assert any(all(part in call for part in parts) for call in calls), (parts, calls)


def test_a_carried_cache_is_the_one_every_step_uses(tmp_path):
    # The device call carries .triton-cache beside the script: the steps must load from it.
    repo = tmp_path / "repo"
    for part in ("bench/gpu_check.sh", "docs/benchmarks.md"):
        (repo / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / part, repo / part)
    (repo / ".triton-cache" / "a0").mkdir(parents=True)
    (repo / ".triton-cache" / "key.txt").write_text("triton 3.6.0\n")
    out, summary = run_check(tmp_path, root=repo)
    cache = repo / ".triton-cache"
    assert f"triton cache {cache}: 1 entries at the start" in summary
    assert "cache: triton 3.6.0" in summary  # the key it was compiled under, shown
    used = re.findall(r"cache dir: (.*)", (out / "tests.log").read_text())
    assert used
    assert set(used) == {str(cache)}


def test_a_step_past_its_limit_gets_sigint_so_that_it_can_write_its_reports(tmp_path):
    # The demo step hangs until a SIGINT, which it reports (and ends its sleep: a background
    # job of a script ignores SIGINT); a TERM would end it unreported. With 15 s in all,
    # every step's limit is 5 s (the clock stands still); timeout then exits 124.
    stuck = 'case "$*" in *"-m eagle_fn"*)\n'
    stuck += "    trap 'kill $!; echo \"stopped by SIGINT\"; exit 2' INT; sleep 60 & wait $!;;\n"
    stuck += "esac\n"
    python_text = FAKE_PYTHON.replace('echo "fake python $*"\n', 'echo "fake python $*"\n' + stuck)
    _, summary = run_check(tmp_path, python_text=python_text, GPU_CHECK_SECONDS="15")
    assert "step demo: exit 124 after 0 s (limit 5 s)" in summary
    assert "    last line: stopped by SIGINT" in summary
    assert "step bench: exit 0" in summary  # the steps after it still run
