"""bench/launch_overhead.py runs end to end, here under Triton's interpreter on the CPU."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")
ROOT = Path(__file__).parents[1]


def run_python(args, interpret="1"):
    """``python *args`` with bench/ and src/ importable and TRITON_INTERPRET set."""
    env = {**os.environ, "TRITON_INTERPRET": interpret}
    env["PYTHONPATH"] = f"{ROOT / 'src'}:{ROOT / 'bench'}"
    run = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


def table_rows(stdout):
    """The printed table's rows, its header apart."""
    return [line for line in stdout.splitlines() if line.startswith("| ") and "µs" not in line]


def test_the_interpreter_gets_few_calls_and_a_gpu_many():
    import launch_overhead  # the kernels' import: the interpreter is on in this process

    assert launch_overhead.default_calls(torch.device("cpu")) == 2
    assert launch_overhead.default_calls(torch.device("cuda")) == 2000


def test_every_stage_gets_a_row():
    script = [str(ROOT / "bench" / "launch_overhead.py"), "--calls", "1", "--device", "cpu"]
    rows = table_rows(run_python(script))
    stages = [row.split(" | ")[0].removeprefix("| ") for row in rows]
    assert stages == [
        "organize_tree",
        "build_verify_tree QLEN",
        "verify_greedy",
        "select_top_k step 0",
        "select_top_k step 1",
    ]
    # The interpreter has no compiled kernel to call directly; the other figures are numbers
    # (checked for format only: a fast call may well print 0.0).
    assert all("n/a" in row.split(" | ")[8] for row in rows)
    columns = (2, 3, 4, 5, 6, 7, 9)
    figures = [float(row.strip("| ").split(" | ")[i]) for row in rows for i in columns]
    assert all(math.isfinite(x) and x >= 0 for x in figures), figures


BROKEN_FIRST = (
    "import sys\n"
    "import launch_overhead\n"
    "found = launch_overhead.stages\n"
    "launch_overhead.stages = lambda device: {'broken': lambda: 1 / 0, **found(device)}\n"
    "sys.argv = ['launch_overhead.py', '--calls', '1', '--device', 'cpu']\n"
    "launch_overhead.main()\n"
)


def test_a_failing_stage_gets_its_error_and_the_others_their_rows():
    rows = table_rows(run_python(["-c", BROKEN_FIRST]))
    assert rows[0] == "| broken | failed: ZeroDivisionError: division by zero |"
    assert len(rows) == 6
    assert all(row.count(" | ") == 9 for row in rows[1:])  # every figure of the other stages


def test_the_python_figure_times_the_stage_with_nothing_launched(monkeypatch):
    import launch_overhead

    found = launch_overhead.launchers(launch_overhead.MODULES)
    real = {(module, name): launch for module, name, launch in found}

    def figure(fn, device, calls):
        """0.0 where every launcher is replaced (by nothing, or by Triton's launch on every
        call), 1.0 where the real ones are in place."""
        in_place = [getattr(module, name) is launch for (module, name), launch in real.items()]
        assert len(set(in_place)) == 1, in_place
        return 1.0 if in_place[0] else 0.0

    monkeypatch.setattr(launch_overhead, "per_call_us", figure)
    stage = launch_overhead.stages(torch.device("cpu"))["verify_greedy"]
    line = launch_overhead.row("verify_greedy", stage, torch.device("cpu"), 1)
    cells = line.strip("| ").split(" | ")
    # public, uncached, python, jit, bind, key
    assert cells[2:8] == ["1.0", "0.0", "0.0", "1.0", "1.0", "1.0"]
    assert launch_overhead.launchers(launch_overhead.MODULES) == found  # restored


def test_unlaunched_stages_reach_no_kernel():
    import launch_overhead

    launched = []

    def counting(launch):
        return lambda programs, *args, **options: launched.append(launch.kernel)

    stages = launch_overhead.stages(torch.device("cpu"))
    with launch_overhead.launchers_replaced(counting):
        for stage in stages.values():
            stage()
    assert len(launched) == len(stages)  # one launch a stage, each through a launcher
    with launch_overhead.launchers_replaced(launch_overhead.unlaunched):
        verdict = stages["verify_greedy"]()
    # Unlaunched, the call still checks and allocates: python's figure includes both.
    shapes = [tuple(t.shape) for t in verdict]
    assert shapes == [(32, 5), (32,), (32 * 16,)]  # TREE_TARGET: bs 32, S 4, N 16


LAUNCHERS = (
    "from launch_overhead import MODULES, launchers\n"
    "print(sorted(f'{m.__name__}.{n}' for m, n, _ in launchers(MODULES)))"
)


@pytest.mark.parametrize("interpret", ["1", "0"], ids=["interpreted", "compiled"])
def test_only_the_launchers_are_recorded(interpret):
    # Compiled (as on a GPU), every triton.jit function has a kernel attribute too; recording
    # one in place of a kernel's helper made Triton refuse the kernel that calls it.
    stdout = run_python(["-c", LAUNCHERS], interpret)
    kernels = "eagle_fn.kernels."
    assert stdout.split("\n")[0] == str(
        [
            f"{kernels}greedy.launch",
            f"{kernels}organize.launch",
            f"{kernels}selection.launch_first",
            f"{kernels}selection.launch_next",
            f"{kernels}verify.launch",
        ]
    )


def test_the_uncached_figure_launches_through_triton_itself():
    import launch_overhead

    stage = launch_overhead.stages(torch.device("cpu"))["verify_greedy"]
    want = stage()
    with launch_overhead.launchers_replaced(launch_overhead.uncached):
        got = stage()
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
