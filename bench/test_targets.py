"""Checks of bench/targets.py on hand-made CUDA runs: each target's figures, its bounds, and
what a run that lacks a row says."""

import pytest

import targets
from cases import TREE_LARGE, TREE_TARGET
from report import load_run
from test_report import bench, write_run

SMALL_SELECT, LARGE_SELECT = targets.SELECT_TARGET, targets.SELECT_LARGE


def row(path, case, graph_us, *, backend="triton", kernels=1, host_us=40.0, **extra):
    """An eager row on CUDA of ``path`` at ``case``; ``extra`` figures added."""
    shape = {"bs": case.bs, "num_steps": case.num_steps, "topk": case.topk}
    shape["num_draft_tokens"] = case.num_draft_tokens
    figures = {"graph_us": graph_us, "host_us": host_us, "kernels": kernels, **extra}
    return bench(path, 60.0, device="cuda", backend=backend, **shape, **figures)


def meeting_rows():
    """A run that meets every target but sampling at V 32000 (1.9 µs: under any replay)."""
    rows = [
        row("organize_tree", TREE_TARGET, 5.0),
        row("organize_tree", TREE_LARGE, 9.0),
        row("verify_tree_qlen", TREE_TARGET, 5.0),
        row("verify_tree_qlen", TREE_LARGE, 6.0),
        row("verify_tree_bitpacked", TREE_TARGET, 5.0),
        row("verify_greedy", TREE_TARGET, 5.0),
        row("verify_greedy", TREE_LARGE, 10.0),  # exactly 2x
        row("verify_sampling_v32000", TREE_TARGET, 3.5, graph_flushed_us=4.0),
        row("verify_sampling_v128256", TREE_TARGET, 5.5, graph_flushed_us=7.5),
    ]
    for step in (0, 1):
        rows.append(row(f"select_top_k_step{step}", SMALL_SELECT, 4.0, host_us=50.0))
        rows.append(row(f"select_top_k_step{step}", LARGE_SELECT, 5.0))
    rows.append(row("organize_tree", TREE_TARGET, 50.0, backend="torch", kernels=9))  # not read
    return rows


def statuses(tmp_path, rows, gpu_name="NVIDIA H200", rate=None):
    run = load_run(write_run(tmp_path, rows, gpu_name=gpu_name), "cuda")
    lines = targets.target_lines(run, rate)
    table = [line[2:-2].split(" | ") for line in lines[2:-2]]  # "| a | b | c |"
    return {target: (measured, status) for target, measured, status in table}, lines


def entry(found, start):
    """The one target of ``found`` whose text begins with ``start``."""
    [key] = [key for key in found if key.startswith(start)]
    return found[key]


def test_a_run_meeting_the_targets(tmp_path):
    found, lines = statuses(tmp_path, meeting_rows())
    assert entry(found, "tree cycle (organize + Q") == (
        "1 + 1 launches, 5.00 + 5.00 = 10.00 µs",
        "met",
    )
    assert entry(found, "`verify_greedy`, bs 32, k") == ("1 launch, 5.00 µs", "met")
    scaling = "organize_tree 9.00 µs (1.80x), verify_tree_qlen 6.00 µs (1.20x), "
    scaling += "verify_greedy 10.00 µs (2.00x), select_top_k_step0 5.00 µs (1.25x), "
    scaling += "select_top_k_step1 5.00 µs (1.25x)"
    assert entry(found, "each stage at bs 256, k 8") == (scaling, "met")
    host = "organize_tree 40.0, verify_tree_qlen 40.0, verify_tree_bitpacked 40.0, "
    host += "verify_greedy 40.0, select_top_k_step0 50.0, select_top_k_step1 50.0 µs"
    assert entry(found, "each stage ≤ 50 µs host t") == (host, "met")
    assert entry(found, "`verify_sampling`, V 3200") == (
        "1 launch, 4.00 µs, L2 flushed first (3.50 µs without)",
        "**not met**",
    )
    assert entry(found, "`verify_sampling`, V 1282") == (
        "1 launch, 7.50 µs, L2 flushed first (5.50 µs without)",
        "met",
    )
    assert lines[-1] == "targets: 5 met, 1 not met, 0 not measured"


def test_the_host_row_shows_each_fastest_loop_the_run_has(tmp_path):
    # The bound is on the median loops; a stage's fastest loop (host_min_us, recorded since
    # 2026-12-04) shows how much the rest of the machine added.
    rows = meeting_rows()
    rows[0] = row("organize_tree", TREE_TARGET, 5.0, host_us=70.0, host_min_us=41.5)
    found, _ = statuses(tmp_path, rows)
    host = "organize_tree 70.0 (fastest loop 41.5), verify_tree_qlen 40.0, "
    host += "verify_tree_bitpacked 40.0, verify_greedy 40.0, select_top_k_step0 50.0, "
    host += "select_top_k_step1 50.0 µs"
    assert entry(found, "each stage ≤ 50 µs host t") == (host, "**not met**")


def test_the_sampling_bound_is_twice_reading_the_rows():
    # bs 32 x 128256 float32 = 16.4 MB, read twice at 4.3 TB/s: issue 11's 7.6 µs.
    assert targets.read_us(128256, 4.3e12) == pytest.approx(7.636, abs=1e-3)
    assert targets.read_us(32000, 4.3e12) == pytest.approx(1.905, abs=1e-3)
    assert targets.read_us(128256, 3.0e12) == pytest.approx(10.945, abs=1e-3)


@pytest.mark.parametrize(
    ("name", "rate"),
    [
        ("NVIDIA H200", 4.3e12),
        ("NVIDIA H200 NVL", 4.3e12),
        ("NVIDIA H100 80GB HBM3", 3.0e12),
        ("NVIDIA H100 NVL", 3.5e12),
        ("NVIDIA H100 PCIe", 1.8e12),
        ("NVIDIA A100-SXM4-80GB", None),
        ("NVIDIA GH200 480GB", None),  # HBM3 or HBM3e: 4.0 or 4.9 TB/s
        ("NVIDIA H1000", None),
        (None, None),
    ],
)
def test_the_dram_rate_is_the_named_gpus(name, rate):
    assert targets.dram_rate(name) == rate


def test_the_sampling_bound_follows_the_gpu_that_ran(tmp_path):
    # On an H100 (3.0 TB/s) V 128256's bound is 10.94 µs: 9 µs flushed is within it, not
    # within the H200's 7.64.
    rows = meeting_rows()
    [v128256] = [r for r in rows if r["extra_info"]["path"] == "verify_sampling_v128256"]
    v128256["extra_info"]["graph_flushed_us"] = 9.0
    found, lines = statuses(tmp_path, rows, gpu_name="NVIDIA H100 80GB HBM3")
    [key] = [key for key in found if key.startswith("`verify_sampling`, V 1282")]
    assert key.endswith("1 launch, ≤ 10.94 µs replay (2x reading bs x V x 4 bytes at 3.0 TB/s)")
    assert found[key] == ("1 launch, 9.00 µs, L2 flushed first (5.50 µs without)", "met")
    assert lines[-1] == "targets: 5 met, 1 not met, 0 not measured"
    found, lines = statuses(tmp_path, rows)  # the same rows on an H200
    assert entry(found, "`verify_sampling`, V 1282")[1] == "**not met**"
    found, lines = statuses(tmp_path, rows, gpu_name="NVIDIA H100 80GB HBM3", rate=4.3e12)
    assert entry(found, "`verify_sampling`, V 1282")[1] == "**not met**"


def test_a_gpu_without_a_known_rate_leaves_the_sampling_bound_not_measured(tmp_path):
    found, lines = statuses(tmp_path, meeting_rows(), gpu_name="NVIDIA A100-SXM4-80GB")
    unknown = "no DRAM rate known for GPU NVIDIA A100-SXM4-80GB (--bandwidth gives one)"
    for vocab in (32000, 128256):
        assert entry(found, f"`verify_sampling`, V {vocab}") == (unknown, "**not measured**")
    assert lines[-1] == "targets: 4 met, 0 not met, 2 not measured"
    [key] = [key for key in found if key.startswith("`verify_sampling`, V 1282")]
    assert key.endswith(": 1 launch, ≤ 2x reading bs x V x 4 bytes from DRAM")


# A figure changed in one Triton row of the meeting run, and the target it must fail.
PAST = {
    "copy": ("verify_greedy", TREE_TARGET, {"copies": 1}, "`verify_greedy`, bs 32, k"),
    "greedy": ("verify_greedy", TREE_TARGET, {"graph_us": 6.01}, "`verify_greedy`, bs 32, k"),
    "cycle": ("organize_tree", TREE_TARGET, {"graph_us": 7.01}, "tree cycle (organize + Q"),
    "cycle_launches": ("verify_tree_qlen", TREE_TARGET, {"kernels": 2}, "tree cycle (organize + Q"),
    "scaling": ("verify_tree_qlen", TREE_LARGE, {"graph_us": 10.01}, "each stage at bs 256, k 8"),
    "host": ("select_top_k_step1", SMALL_SELECT, {"host_us": 50.1}, "each stage ≤ 50 µs host t"),
    "sampling": (
        "verify_sampling_v128256",
        TREE_TARGET,
        {"kernels": 2},
        "`verify_sampling`, V 1282",
    ),
    # Within the bound from L2, over it from DRAM: the DRAM figure decides.
    "sampling_flushed": (
        "verify_sampling_v128256",
        TREE_TARGET,
        {"graph_us": 7.0, "graph_flushed_us": 7.64},
        "`verify_sampling`, V 1282",
    ),
}


@pytest.mark.parametrize("name", list(PAST))
def test_a_figure_past_its_bound_is_not_met(tmp_path, name):
    path, case, figures, target = PAST[name]
    rows = meeting_rows()
    shape = {"bs": case.bs, "num_steps": case.num_steps, "topk": case.topk}
    changed = [
        r["extra_info"]
        for r in rows
        if r["extra_info"]["path"] == path
        and r["extra_info"]["backend"] == "triton"
        and all(r["extra_info"][key] == value for key, value in shape.items())
    ]
    assert len(changed) == 1
    changed[0].update(figures)
    found, lines = statuses(tmp_path, rows)
    assert entry(found, target)[1] == "**not met**"
    assert lines[-1] == "targets: 4 met, 2 not met, 0 not measured"
    if name == "sampling":
        assert entry(found, target)[0] == "2 launches, 7.50 µs, L2 flushed first (5.50 µs without)"


def test_a_missing_row_or_figure_is_not_measured(tmp_path):
    rows = [r for r in meeting_rows() if r["extra_info"]["path"] != "verify_greedy"]
    rows[0]["extra_info"].pop("graph_us")  # organize_tree at bs 32
    rows[0]["extra_info"]["graph_us_error"] = "RuntimeError: capture failed"
    found, lines = statuses(tmp_path, rows)
    assert entry(found, "tree cycle (organize + Q") == (
        "`organize_tree` at bs 32, k 4, S 4, N 16 has no graph_us",
        "**not measured**",
    )
    assert entry(found, "`verify_greedy`, bs 32, k") == (
        "no Triton row of `verify_greedy` at bs 32, k 4, S 4, N 16",
        "**not measured**",
    )
    assert lines[-1] == "targets: 1 met, 1 not met, 4 not measured"


def test_a_sampling_row_without_its_flushed_replay_is_not_measured(tmp_path):
    # Runs before the flushed replay timed the plain one only, with the final rows in L2.
    rows = meeting_rows()
    for r in rows:
        r["extra_info"].pop("graph_flushed_us", None)
    found, lines = statuses(tmp_path, rows)
    assert entry(found, "`verify_sampling`, V 1282") == (
        "`verify_sampling_v128256` at bs 32, k 4, S 4, N 16 has no graph_flushed_us",
        "**not measured**",
    )
    assert lines[-1] == "targets: 4 met, 0 not met, 2 not measured"


def test_main_prints_the_gpu_and_the_table(tmp_path, capsys):
    path = write_run(tmp_path, meeting_rows(), gpu_name="NVIDIA H200", torch_version="2.11.0")
    targets.main(["--from-json", str(path)])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "NVIDIA H200, torch 2.11.0, 2026-11-30T12:00:00"
    assert out[1] == "| target | measured | status |"
    assert out[-1] == "targets: 5 met, 1 not met, 0 not measured"


def test_main_takes_the_rate_from_the_command_line(tmp_path, capsys):
    path = write_run(tmp_path, meeting_rows(), gpu_name="NVIDIA A100-SXM4-80GB")
    targets.main(["--from-json", str(path), "--bandwidth", "2.0"])
    out = capsys.readouterr().out
    assert "≤ 16.42 µs replay (2x reading bs x V x 4 bytes at 2.0 TB/s)" in out
    assert out.splitlines()[-1] == "targets: 6 met, 0 not met, 0 not measured"
    for bad in ("0", "-1", "fast", "nan", "inf"):
        with pytest.raises(SystemExit):
            targets.main(["--from-json", str(path), "--bandwidth", bad])
        assert f"a rate in TB/s above 0, got '{bad}'" in capsys.readouterr().err
