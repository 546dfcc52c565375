"""bench/launch_overhead.py runs end to end, here under Triton's interpreter on the CPU."""

import math
import os
import subprocess
import sys
from functools import partial
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


def table_rows(stdout, table=0):
    """The rows of the ``table``-th printed table (0: the main one, 1: after profiling), its
    header apart."""
    tables = stdout.split("\n\n")
    lines = [line for line in tables[table].splitlines() if line.startswith("| ")]
    return [line for line in lines if "µs" not in line]


def test_the_interpreter_gets_few_calls_and_a_gpu_many():
    import launch_overhead  # the kernels' import: the interpreter is on in this process

    assert launch_overhead.default_calls(torch.device("cpu")) == 2
    assert launch_overhead.default_calls(torch.device("cuda")) == 2000


def test_every_stage_gets_a_row():
    script = [str(ROOT / "bench" / "launch_overhead.py"), "--calls", "1", "--device", "cpu"]
    stdout = run_python(script)
    rows = table_rows(stdout)
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
    assert all("n/a" in row.split(" | ")[8] and "n/a" in row.split(" | ")[9] for row in rows)
    columns = (2, 3, 4, 5, 6, 7, 10)
    figures = [float(row.strip("| ").split(" | ")[i]) for row in rows for i in columns]
    assert all(math.isfinite(x) and x >= 0 for x in figures), figures
    # The second table: each stage's fresh outputs, as many as its op body allocates, and the
    # time to allocate them one each and one block a dtype.
    fresh = [row.strip("| ").split(" | ") for row in table_rows(stdout, 1)]
    assert [(cells[0], int(cells[1])) for cells in fresh] == list(
        zip(stages, [3, 6, 3, 2, 5], strict=True)
    )
    assert all(math.isfinite(float(x)) and float(x) >= 0 for cells in fresh for x in cells[2:])
    # The last: each stage's public figure again, as the first table printed it, then after
    # the profiler.
    again = [row.strip("| ").split(" | ") for row in table_rows(stdout, 2)]
    assert [cells[0] for cells in again] == stages
    assert [cells[1] for cells in again] == [row.strip("| ").split(" | ")[2] for row in rows]
    assert all(math.isfinite(float(cells[2])) for cells in again)


BROKEN_FIRST = (
    "import sys\n"
    "import launch_overhead\n"
    "found = launch_overhead.stages\n"
    "launch_overhead.stages = lambda device: {'broken': lambda: 1 / 0, **found(device)}\n"
    "sys.argv = ['launch_overhead.py', '--calls', '1', '--device', 'cpu']\n"
    "launch_overhead.main()\n"
)


def test_fresh_outputs_leave_out_memory_the_arguments_hold_and_repeated_blocks():
    import launch_overhead

    x, y = torch.zeros(4), torch.zeros(2, 3, dtype=torch.int64)

    def stage(a, b):
        made = torch.ones(5)
        return (a.view(2, 2), [made, made[1:]], b[0].new_empty(3), {"ignored": made})

    fresh = launch_overhead.fresh_outputs(partial(stage, x, (y,)))
    assert [(tuple(t.shape), t.dtype) for t in fresh] == [
        ((5,), torch.float32),
        ((3,), torch.int64),
    ]
    one_each, one_a_dtype = launch_overhead.allocators([*fresh, torch.zeros(2, 2)])
    for made in (one_each(), one_a_dtype()):
        # The grouped call returns its float32 tensors first: one block a dtype.
        got = sorted((tuple(t.shape), str(t.dtype)) for t in made)
        assert got == [((2, 2), "torch.float32"), ((3,), "torch.int64"), ((5,), "torch.float32")]
    float32 = [t for t in one_a_dtype() if t.dtype == torch.float32]
    assert float32[0].untyped_storage().data_ptr() == float32[1].untyped_storage().data_ptr()


def test_a_failing_stage_gets_its_error_and_the_others_their_rows():
    stdout = run_python(["-c", BROKEN_FIRST])
    rows = table_rows(stdout)
    assert rows[0] == "| broken | failed: ZeroDivisionError: division by zero |"
    assert len(rows) == 6
    fresh = table_rows(stdout, 1)
    assert fresh[0] == "| broken | failed: ZeroDivisionError: division by zero |"
    assert len(fresh) == 6
    assert all(row.count(" | ") == 10 for row in rows[1:])  # every figure of the other stages
    assert len(table_rows(stdout, 2)) == 5  # profiled again: the stages that ran


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
    line, public = launch_overhead.row("verify_greedy", stage, torch.device("cpu"), 1)
    assert public == 1.0
    cells = line.strip("| ").split(" | ")
    # public, uncached, python, jit, bind, key
    assert cells[2:8] == ["1.0", "0.0", "0.0", "1.0", "1.0", "1.0"]
    assert launch_overhead.launchers(launch_overhead.MODULES) == found  # restored


def test_after_profiling_times_each_stage_after_one_profiler_session(monkeypatch):
    import launch_overhead

    def profiling():
        return torch.autograd.profiler._is_profiler_enabled

    events = []

    def timed(fn, device, calls):
        events.append(("timed", profiling()))
        return 7.0

    monkeypatch.setattr(launch_overhead, "per_call_us", timed)
    stages = {
        "a": lambda: events.append(("a", profiling())),
        "b": lambda: events.append(("b", profiling())),
    }
    table = launch_overhead.after_profiling(stages, {"a": 1.0, "b": 2.0}, torch.device("cpu"), 1)
    # Each stage runs once under the profiler, then each is timed with it closed.
    assert events == [("a", True), ("b", True), ("timed", False), ("timed", False)]
    assert table.splitlines()[2:] == ["| a | 1.0 | 7.0 |", "| b | 2.0 | 7.0 |"]


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


def test_a_failing_profiler_leaves_the_tables_before_it(monkeypatch, capsys):
    import launch_overhead

    def broken(*args):
        raise RuntimeError("no kineto")

    monkeypatch.setattr(launch_overhead, "after_profiling", broken)
    monkeypatch.setattr(launch_overhead, "stages", lambda device: {"a": lambda: None})
    monkeypatch.setattr(launch_overhead, "row", lambda name, stage, device, calls: ("| a |", 1.0))
    monkeypatch.setattr("sys.argv", ["launch_overhead.py", "--device", "cpu"])
    launch_overhead.main()
    out = capsys.readouterr().out
    first, fresh, after = out.split("\n\n")
    assert first.endswith("| a |")
    assert fresh.endswith("| a | 0 | – | – |")
    assert after == "after profiling: failed: RuntimeError: no kineto\n"


def test_the_addresses_column_passes_each_tensor_as_its_address():
    import launch_overhead

    seen = []

    class Compiled:  # a compiled kernel: [grid] gives its runner
        def __getitem__(self, grid):
            return lambda *args: seen.append((grid, args))

    class Kernel:  # a JITFunction: [grid](*args, **options) compiles
        arg_names = ("x", "n", "BLOCK")

        def __getitem__(self, grid):
            return lambda *args, **options: Compiled()

    x = torch.zeros(4)
    for addresses in (False, True):
        options = {"BLOCK": 16, "num_warps": 1}
        launch_overhead.compiled_runner(Kernel(), 3, (x, 5), options, addresses)()
    assert seen == [((3, 1, 1), (x, 5, 16)), ((3, 1, 1), (x.data_ptr(), 5, 16))]
