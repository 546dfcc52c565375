"""Checks of bench/report.py, bench/run.py and plot.py's series on a hand-made run: what the
tables say, and that rendering one device leaves the rest of the page alone."""

import json

import pytest

import report
import run
from cases import Case

CASE = Case(32, 4, 4, 16)


def bench(path, median_us, *, device="cpu", compare=None, backend="torch", **extra):
    info = {"path": path, "backend": backend, "mode": "eager", "device": device, "ops": 3}
    info.update(bs=CASE.bs, num_steps=CASE.num_steps, topk=CASE.topk)
    info.update(num_draft_tokens=CASE.num_draft_tokens, compare=compare or {})
    info.update(extra)
    stats = {"median": median_us * 1e-6, "iqr": 1e-7}
    return {"extra_info": info, "stats": stats, "options": {"min_rounds": 5}}


def write_run(tmp_path, benches, **machine):
    data = {"benchmarks": benches, "machine_info": machine, "datetime": "2026-11-30T12:00:00"}
    data["version"] = "5.3.1"
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    return path


def test_cpu_rows_show_the_ratio_to_the_compared_path(tmp_path):
    versus = {"baseline": "tree_baseline"}
    rows = [bench("organize_tree", 30.0, compare=versus), bench("tree_baseline", 20.0)]
    rows.append(bench("organize_tree", 9.0, device="cuda"))  # another device: not rendered
    loaded = report.load_run(write_run(tmp_path, rows), "cpu")
    lines = report.case_lines(loaded)
    assert len(lines) == 2 + 2
    # median and IQR in µs (the JSON holds seconds), the ratio, the op count
    row = "| `organize_tree` | torch | eager | 32 | 4 | 4 | 16 | 30.00 | 0.10 "
    row += "| 1.50x `tree_baseline` | 3 |"
    assert lines[2] == row


def test_a_row_without_a_device_is_a_cpu_row(tmp_path):
    # runs from before the bench took a device recorded none
    row = bench("organize_tree", 30.0)
    del row["extra_info"]["device"]
    path = write_run(tmp_path, [row])
    assert [r.path for r in report.load_run(path, "cpu").rows] == ["organize_tree"]
    assert report.load_run(path, "cuda").rows == []


def test_cuda_rows_show_host_replay_kernels_and_missing_figures(tmp_path):
    versus = {"baseline": "tree_baseline"}
    rows = [
        bench(
            "organize_tree",
            50.0,
            device="cuda",
            compare=versus,
            host_us=40.0,
            graph_us=8.0,
            graph_flushed_us=10.0,
            kernels=9,
        ),
        bench(
            "tree_baseline", 45.0, device="cuda", host_us=20.0, graph_us=16.0, kernels=11, copies=2
        ),
    ]
    rows[1]["extra_info"]["launches_error"] = "RuntimeError: no CUPTI"
    path = write_run(tmp_path, rows, gpu_name="NVIDIA H200", cuda_version="13.0")
    loaded = report.load_run(path, "cuda")
    text = report.section(loaded, path.name)
    row = "| `organize_tree` | torch | eager | 32 | 4 | 4 | 16 | 40.00 | 8.00 | 10.00 | 9 | 50.00 |"
    assert row in text
    assert "2.00x / 0.50x / – `tree_baseline`" in text  # no flushed figure to divide by
    assert "| 20.00 | 16.00 |  | 11 (+2 copies) | 45.00 |" in text
    assert "| GPU | NVIDIA H200, CUDA 13.0 |" in text
    assert "no launches: `RuntimeError: no CUPTI`" in text


@pytest.mark.parametrize(
    ("commit", "shown"),
    [
        ({"id": "0123456789abcdef", "dirty": False}, "| eagle_fn commit | 0123456789 |"),
        ({"id": "0123456789abcdef", "dirty": True}, "0123456789 (uncommitted changes) |"),
        (None, "| eagle_fn commit | unknown |"),  # no git checkout where it ran
    ],
)
def test_the_machine_table_names_the_code_measured(tmp_path, commit, shown):
    path = write_run(tmp_path, [bench("organize_tree", 30.0)])
    if commit is not None:
        data = json.loads(path.read_text())
        path.write_text(json.dumps({**data, "commit_info": commit}))
    assert shown in report.section(report.load_run(path, "cpu"), path.name)


def test_compiled_rows_sit_beside_their_eager_row(tmp_path):
    # The compiled-mode table: eager then compiled per figure, and the ratio in the case table.
    rows = [
        bench("worker_tree", 50.0, device="cuda", host_us=40.0, graph_us=8.0, kernels=9),
        bench(
            "worker_tree",
            90.0,
            device="cuda",
            mode="compiled",
            compare={"baseline": "worker_tree"},
            host_us=120.0,
            graph_us=4.0,
            kernels=2,
            graphs=1,
            graph_breaks=0,
            sweep="1..256",
        ),
    ]
    path = write_run(tmp_path, rows, gpu_name="NVIDIA H200", cuda_version="13.0")
    text = report.section(report.load_run(path, "cuda"), path.name)
    assert "3.00x / 0.50x / – `worker_tree`" in text  # compiled over eager: host, replays
    row = "| `worker_tree` | bs 32, k 4, S 4, N 16 | 40.00 | 120.00 | 8.00 | 4.00 |  |  | 1 | 0 |"
    assert row in text


def test_main_writes_the_cuda_section_between_its_markers_and_alone(tmp_path):
    rows = [bench("organize_tree", 2.0, device="cuda", host_us=1.0, graph_us=2.0, kernels=1)]
    path = write_run(tmp_path, rows, gpu_name="NVIDIA H200", cuda_version="13.0")
    page, alone = tmp_path / "page.md", tmp_path / "cuda.md"
    page.write_text(
        "# B\n<!-- generated: cpu begin -->\nold cpu\n<!-- generated: cpu end -->\n"
        "<!-- generated: cuda begin -->\nold cuda\n<!-- generated: cuda end -->\n"
    )
    args = ["--device", "cuda", "--from-json", str(path), "--markdown", str(page)]
    report.main([*args, "--section-out", str(alone)])
    cpu, cuda = page.read_text().split("<!-- generated: cuda begin -->")
    assert "old cpu" in cpu
    assert "old cuda" not in cuda
    assert "| `organize_tree` | torch | eager | 32 | 4 | 4 | 16 | 1.00 | 2.00 |" in cuda
    assert alone.read_text().startswith("## CUDA\n\n")
    assert alone.read_text().split("\n", 2)[2] in page.read_text()


def test_rendering_one_device_keeps_the_other_and_the_hand_written_text():
    page = "# B\n\nintro\n\n<!-- generated: cpu begin -->\nold cpu\n<!-- generated: cpu end -->\n"
    page += "\nmiddle\n\n<!-- generated: cuda begin -->\nold cuda\n<!-- generated: cuda end -->\n"
    page += "\nend\n"
    new = report.replace_section(page, "cpu", "new cpu")
    assert new == page.replace("old cpu", "new cpu")
    assert report.replace_section(new, "cuda", "new cuda") == new.replace("old cuda", "new cuda")


def test_a_page_without_the_section_gets_it_appended():
    page = report.replace_section("# B\n\nintro\n", "cuda", "body")
    assert (
        page == "# B\n\nintro\n\n## CUDA\n\n<!-- generated: cuda begin -->\nbody\n"
        "<!-- generated: cuda end -->\n"
    )


def test_report_refuses_a_run_without_the_device(tmp_path, capsys):
    path = write_run(tmp_path, [bench("floor", 2.0)])
    with pytest.raises(SystemExit) as exited:
        report.main(["--device", "cuda", "--from-json", str(path), "--markdown", str(tmp_path)])
    assert exited.value.code == 2  # argparse's usage error, for this reason:
    assert f"{path} holds no benchmark run on cuda" in capsys.readouterr().err


def test_run_selects_the_compact_suite_on_the_device(tmp_path):
    command = run.pytest_command("cuda", tmp_path / "x.json", ["--benchmark-max-time=0.2"])
    assert command[1:] == [
        "-m",
        "pytest",
        "bench",
        "-m",
        "report",
        "--benchmark-only",
        "-q",
        "--device=cuda",
        f"--benchmark-json={tmp_path / 'x.json'}",
        "--benchmark-columns=median,iqr,rounds",
        "--ignore=bench/bench_compile_options.py",
        "--benchmark-max-time=0.2",
    ]
    assert "--ignore=bench/bench_compile_options.py" not in run.pytest_command("cpu", "x", [])


def test_plot_draws_the_swept_config_of_each_path(tmp_path):
    import plot  # its matplotlib import waits for draw(): the series need none

    rows = []
    for bs in (1, 8, 64):
        rows.append(bench("floor", 2.0 + bs, bs=bs, num_steps=5, topk=1, num_draft_tokens=6))
    rows.append(bench("floor", 9.0, bs=8, num_steps=3, topk=1, num_draft_tokens=4))
    rows.append(bench("organize_chain", 3.0, bs=8, num_steps=5, topk=1, num_draft_tokens=6))
    loaded = report.load_run(write_run(tmp_path, rows), "cpu")
    lines = plot.series(loaded, plot.PANELS["chain organize"])
    assert list(lines) == ["floor [torch, eager] (k1)"]
    bs, us = zip(*lines["floor [torch, eager] (k1)"], strict=True)
    assert bs == (1, 8, 64)
    assert us == pytest.approx((3.0, 10.0, 66.0))


def test_plot_draws_graph_replay_on_cuda_and_skips_a_row_without_it(tmp_path):
    import plot

    config = {"num_steps": 5, "topk": 1, "num_draft_tokens": 6}
    rows = [
        bench("floor", 100.0, device="cuda", bs=bs, host_us=50.0, graph_us=bs / 4, **config)
        for bs in (1, 8, 64)
    ]
    rows.append(bench("floor", 100.0, device="cuda", bs=256, **config))  # replay not recorded
    loaded = report.load_run(write_run(tmp_path, rows), "cuda")
    lines = plot.series(loaded, plot.PANELS["chain organize"])
    assert lines == {"floor [torch, eager] (k1)": [(1, 0.25), (8, 2.0), (64, 16.0)]}
