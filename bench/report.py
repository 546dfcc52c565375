"""The benchmark report: run the compact suite, write docs/benchmarks.md and its latency plot.

Usage, from the repository root::

    python bench/report.py                       # run `pytest bench -m report`, then write
    python bench/report.py --from-json run.json  # write from a saved --benchmark-json file
    python bench/report.py --json run.json -- --benchmark-max-time=0.5  # keep the json, tune
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cases import CHAIN_TARGET, TREE_TARGET, Case, Mode

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MARKDOWN = DOCS / "benchmarks.md"
PLOT = DOCS / "benchmarks_latency.png"

# What each path times, in report order; a path missing here is listed under its own name.
PATHS = {
    "floor": "slices two preallocated `[max_bs, S]` int64 tables and passes `topk_index` "
    "through: the least any chain path can do",
    "organize_chain": "`organize_chain(constants, topk_index)`: the chain fast path",
    "worker_chain": "`DraftOrganizer.organize(topk_p, topk_index)` on a chain config: the "
    "shape guard, then the fast path",
    "chain_baseline": "what engines ran before the fast path: per-step lists built from the "
    "multi-layer input, then plain `cat/topk/sort/gather` (`bench/baselines.py`, no eagle_fn)",
    "organize_multilayer": "`organize_multilayer(cfg, topk_p, topk_index)`: eagle_fn's general "
    "path on chain input",
    "organize_tree": "`organize_tree(cfg, score_list, token_list, parents_list)` on the lists "
    "of a `select_top_k` draft loop",
    "tree_baseline": "plain `cat/topk/sort/gather` on the same lists (`bench/baselines.py`)",
    "organize_tree_core": "`organize_tree` without its input checks (`eagle_fn.organize."
    "_organize_tree`): the NaN/tie-safe selection alone",
    "worker_tree": "`DraftOrganizer.organize_steps(...)` on a tree config",
    "worker_chain_verify_qlen": "`DraftOrganizer.build_verify(..., mask_mode=QLEN)` on a chain: "
    "cached constants, only positions and the token layout computed",
    "worker_chain_verify_bitpacked": "the same with `mask_mode=BITPACKED`",
    "worker_tree_verify_qlen": "`DraftOrganizer.build_verify(...)` on a tree config (QLEN)",
    "verify_tree_qlen": "`build_verify_tree(..., mask_mode=QLEN)`: the general path",
    "verify_tree_bitpacked": "`build_verify_tree(..., mask_mode=BITPACKED)`: the general path",
    "compiled_chain_inductor_defaults": "the chain graph compiled with inductor's defaults",
    "compiled_chain_eagle_fn": "the chain graph compiled as eagle_fn does "
    '(`options={"size_asserts": False}`)',
    "compiled_chain_cpp_wrapper": "the chain graph with inductor's C++ wrapper as well",
    "compiled_chain_eager_backend": "the chain graph traced by dynamo, run without inductor",
    "compiled_tree_inductor_defaults": "`organize_tree`'s graph compiled with inductor's defaults",
    "compiled_tree_eagle_fn": "`organize_tree`'s graph compiled as eagle_fn does",
    "compiled_tree_cpp_wrapper": "`organize_tree`'s graph with inductor's C++ wrapper as well",
    "compiled_tree_eager_backend": "`organize_tree`'s graph traced by dynamo, run without inductor",
    "select_top_k_step0": "`select_top_k` at step 0: `[bs, k]` inputs",
    "select_top_k_step1": "`select_top_k` at step 1: `[bs * k, k]` inputs and `[bs, k]` scores",
}
CHAIN_PATHS = ("organize_chain", "worker_chain")  # the paths that must run no ATen op
CHAIN_VERIFY = "worker_chain_verify_qlen"  # at most 3 ATen ops per call
COMPILE_VARIANTS = ("inductor_defaults", "eagle_fn", "cpp_wrapper", "eager_backend")
SYNC_OP = "aten._local_scalar_dense.default"  # a host read of a device scalar


@dataclass(frozen=True)
class Row:
    """One benchmark of the run: what ran, its median time and its deterministic figures."""

    path: str
    mode: Mode
    case: Case
    median_us: float
    iqr_us: float
    ops: int
    op_names: dict[str, int]
    compare: dict[str, str]
    graphs: int | None
    graph_breaks: int | None
    sweep: str | None


@dataclass(frozen=True)
class Run:
    """A loaded ``--benchmark-json`` file."""

    rows: list[Row]
    machine: dict[str, object]
    date: str
    version: str
    options: dict[str, object]

    def find(self, path: str, case: Case, mode: Mode = Mode.EAGER) -> Row | None:
        for row in self.rows:
            if (row.path, row.mode, row.case) == (path, mode, case):
                return row
        return None

    def ratio(self, row: Row, key: str) -> tuple[float, str] | None:
        """``row``'s median over the median of its ``compare[key]`` path, same case, eager."""
        ref = row.compare.get(key)
        found = self.find(ref, row.case) if ref else None
        return (row.median_us / found.median_us, ref) if found else None


def load_run(json_path: Path) -> Run:
    data = json.loads(json_path.read_text())
    rows = [_row(bench) for bench in data["benchmarks"]]
    options = data["benchmarks"][0]["options"] if data["benchmarks"] else {}
    return Run(rows, data["machine_info"], data["datetime"], data["version"], options)


def _row(bench: dict) -> Row:
    info, stats = bench["extra_info"], bench["stats"]
    case = Case(info["bs"], info["num_steps"], info["topk"], info["num_draft_tokens"])
    return Row(
        path=info["path"],
        mode=Mode(info["mode"]),
        case=case,
        median_us=stats["median"] * 1e6,
        iqr_us=stats["iqr"] * 1e6,
        ops=info["ops"],
        op_names=info.get("op_names", {}),
        compare=info.get("compare", {}),
        graphs=info.get("graphs"),
        graph_breaks=info.get("graph_breaks"),
        sweep=info.get("sweep"),
    )


def run_suite(json_path: Path, pytest_args: list[str]) -> float:
    """Runs the compact suite with ``--benchmark-json``; returns its wall time in seconds."""
    command = [
        *(sys.executable, "-m", "pytest", "bench", "-m", "report", "--benchmark-only", "-q"),
        *(f"--benchmark-json={json_path}", "--benchmark-columns=median,iqr,rounds"),
        *pytest_args,
    ]
    print("running: python", " ".join(command[1:]), flush=True)
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True)
    return time.perf_counter() - start


# Targets: each returns (target, measured, status).
Target = tuple[str, str, str]


def _status(ok: bool) -> str:
    return "pass" if ok else "**fail**"


def _missing(what: str) -> Target:
    return (what, "not measured in this run", "not measured")


def _case_text(case: Case) -> str:
    if case.topk == 1:
        return f"bs {case.bs}, S {case.num_steps}"
    return f"bs {case.bs}, k {case.topk}, S {case.num_steps}, N {case.num_draft_tokens}"


def ratio_target(
    run: Run, what: str, path: str, reference: str, case: Case, limit: float
) -> Target:
    """``path`` at most ``limit`` times ``reference`` on ``case``, both eager, same run."""
    row, ref = run.find(path, case), run.find(reference, case)
    if not (row and ref):
        return _missing(what)
    ratio = row.median_us / ref.median_us
    measured = f"{ratio:.2f}x ({row.median_us:.2f} vs {ref.median_us:.2f} µs)"
    return (what, measured, _status(ratio <= limit))


def target_floor(run: Run) -> Target:
    what = f"chain path through the worker <= 2.0x the floor ({_case_text(CHAIN_TARGET)})"
    return ratio_target(run, what, "worker_chain", "floor", CHAIN_TARGET, 2.0)


def target_speedup(run: Run, general: str) -> Target:
    what = f">= 8x faster than `{general}` on the same chain input ({_case_text(CHAIN_TARGET)})"
    worker, slow = run.find("worker_chain", CHAIN_TARGET), run.find(general, CHAIN_TARGET)
    if not (worker and slow):
        return _missing("chain path (worker) " + what)
    speedup = slow.median_us / worker.median_us
    measured = f"{speedup:.1f}x ({slow.median_us:.1f} vs {worker.median_us:.2f} µs)"
    return ("chain path (worker) " + what, measured, _status(speedup >= 8.0))


def target_tree(run: Run) -> Target:
    what = f"`organize_tree` no slower than `tree_baseline` ({_case_text(TREE_TARGET)})"
    return ratio_target(run, what, "organize_tree", "tree_baseline", TREE_TARGET, 1.0)


def ops_target(run: Run, what: str, paths: tuple[str, ...], limit: int) -> Target:
    """At most ``limit`` ATen ops per call on every benchmark of ``paths``, all modes."""
    rows = [row for row in run.rows if row.path in paths]
    if not rows:
        return _missing(what)
    most = max(row.ops for row in rows)
    return (what, f"at most {most} ops/call over {len(rows)} benchmarks", _status(most <= limit))


def target_zero_ops(run: Run) -> Target:
    what = "zero ATen ops on the chain organize path (" + ", ".join(CHAIN_PATHS) + ", all modes)"
    return ops_target(run, what, CHAIN_PATHS, 0)


def target_verify_ops(run: Run) -> Target:
    what = "at most 3 ATen ops on the chain verify build (QLEN), all modes"
    return ops_target(run, what, (CHAIN_VERIFY,), 3)


def targets_graphs(run: Run) -> list[Target]:
    compiled = {row.path: row for row in run.rows if row.graphs is not None}
    if not compiled:
        return [_missing("compiled mode: one graph per path, zero graph breaks")]
    targets = []
    for path, row in compiled.items():
        what = f"compiled `{path}`: one graph over bs {row.sweep}, zero graph breaks"
        measured = f"{row.graphs} graph(s), {row.graph_breaks} graph break(s)"
        targets.append((what, measured, _status(row.graphs == 1 and row.graph_breaks == 0)))
    return targets


def target_overhead(run: Run) -> Target:
    what = f"fixed overhead of a compiled call on CPU, chain worker ({_case_text(CHAIN_TARGET)})"
    eager = run.find("worker_chain", CHAIN_TARGET)
    compiled = run.find("worker_chain", CHAIN_TARGET, Mode.COMPILED)
    if not (eager and compiled):
        return _missing(what)
    extra = compiled.median_us - eager.median_us
    measured = (
        f"{extra:+.1f} µs per call ({compiled.median_us:.1f} compiled vs "
        f"{eager.median_us:.2f} µs eager, {compiled.median_us / eager.median_us:.1f}x)"
    )
    return (what, measured, "reported")


def targets(run: Run) -> list[Target]:
    return [
        target_floor(run),
        target_speedup(run, "chain_baseline"),
        target_speedup(run, "organize_multilayer"),
        target_tree(run),
        target_zero_ops(run),
        target_verify_ops(run),
        *targets_graphs(run),
        target_overhead(run),
    ]


def tree_findings(run: Run) -> list[str]:
    """Where `organize_tree`'s time goes against the plain baseline, from this run."""
    tree, core, base = (
        run.find(p, TREE_TARGET) for p in ("organize_tree", "organize_tree_core", "tree_baseline")
    )
    if not (tree and core and base):
        return []
    ops = f"{core.ops} against {base.ops}"
    per_tensor = (tree.median_us - core.median_us) / (3 * TREE_TARGET.num_steps)
    return [
        f"**`organize_tree` vs the plain baseline ({_case_text(TREE_TARGET)}).** "
        f"The full call takes {tree.median_us:.1f} µs against the baseline's "
        f"{base.median_us:.1f} µs. Without its input checks it takes {core.median_us:.1f} µs: "
        f"the NaN/tie-safe selection costs {core.median_us - base.median_us:+.1f} µs "
        f"({ops} ATen ops), validating {3 * TREE_TARGET.num_steps} input tensors "
        f"{tree.median_us - core.median_us:.1f} µs. The selection already uses the cheaper "
        "`topk(sorted=False)` and a `topk` instead of `sort` for the selected indices, which "
        "together save about what one elementwise op costs; ties broken toward the lower index "
        "and NaN ranked as -inf need exact keys, two elementwise passes over the scores "
        "(`addcmul`, then `fmax`, the maximum that maps NaN to the per-index floor), because "
        "`topk` itself breaks ties arbitrarily. Input checks are Python attribute reads: "
        f"{per_tensor:.2f} µs per tensor. "
        "So on a CPU in eager mode the target is out of reach while the guarantee and the "
        "checks hold. Compiled, the guarantee adds no kernel launch: inductor fuses the "
        "concatenation, the key constants and both passes into one generated kernel (seen in "
        "this build's generated code; the compiled graph runs two fused kernels and two `topk`).",
    ]


def compile_findings(run: Run) -> list[str]:
    """What each inductor option does to a compiled call's time, from this run."""
    lines, syncs = [], []
    for kind, case, eager_path in (
        ("chain", CHAIN_TARGET, "organize_chain"),
        ("tree", TREE_TARGET, "organize_tree_core"),
    ):
        eager = run.find(eager_path, case)
        found = {v: run.find(f"compiled_{kind}_{v}", case) for v in COMPILE_VARIANTS}
        if not eager or not all(found.values()):
            continue
        cells = ", ".join(f"{v} {row.median_us:.1f} µs" for v, row in found.items() if row)
        lines.append(
            f"- {kind} ({_case_text(case)}): eager {eager.median_us:.1f} µs; compiled: {cells}."
        )
        cpp = found["cpp_wrapper"]
        if cpp and SYNC_OP in cpp.op_names:
            syncs.append(kind)
    if not lines:
        return []
    sync_text = (
        f" Its {' and '.join(syncs)} graphs call `{SYNC_OP}` on every call: a host read of the "
        "unbacked batch size, a device sync on CUDA, so eagle_fn leaves it off."
        if syncs
        else ""
    )
    worker_lines = []
    for path, case in (
        ("worker_chain", CHAIN_TARGET),
        ("worker_tree", TREE_TARGET),
        ("worker_tree_verify_qlen", TREE_TARGET),
    ):
        eager, compiled = run.find(path, case), run.find(path, case, Mode.COMPILED)
        if eager and compiled:
            worker_lines.append(
                f"- `{path}` ({_case_text(case)}): eager {eager.median_us:.1f} µs "
                f"({eager.ops} ATen ops), compiled {compiled.median_us:.1f} µs."
            )
    return [
        "**Compiled calls on CPU.** A compiled call pays dynamo's frame and guard handling "
        "and inductor's runtime wrapper, tens of µs per call. Where the eager work is a few "
        "ops (the organize paths) that only adds time; where it is tens of small ops (the "
        "general verify build) fusion wins even on a CPU:",
        "",
        *worker_lines,
        "",
        "`EAGLE_FN_COMPILE=auto` compiles on CUDA only, where launches cost most; on a CPU, "
        "`EAGLE_FN_COMPILE=1` pays off when general verify builds dominate. eagle_fn "
        "compiles with `size_asserts` off (the generated code re-checked sizes and strides "
        "that dynamo's guards already check). Inductor's C++ wrapper is listed for "
        "comparison." + sync_text + " The eager backend skips inductor's wrapper but also its "
        "fusion, which the tree path needs.",
        "",
        *lines,
    ]


def table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> list[str]:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def path_order(run: Run) -> list[str]:
    known = [path for path in PATHS if any(row.path == path for row in run.rows)]
    return known + sorted({row.path for row in run.rows} - set(known))


def sorted_rows(run: Run) -> list[Row]:
    """Rows by path (report order), eager first, then config and batch size."""
    order = {path: i for i, path in enumerate(path_order(run))}

    def key(row: Row) -> tuple[int, bool, int, int, int, int]:
        case = row.case
        return (
            order[row.path],
            row.mode is not Mode.EAGER,
            case.topk,
            case.num_steps,
            case.num_draft_tokens,
            case.bs,
        )

    return sorted(run.rows, key=key)


def _ratio_cell(run: Run, row: Row, key: str) -> str:
    found = run.ratio(row, key)
    return f"{found[0]:.2f}x `{found[1]}`" if found else ""


def case_lines(run: Run) -> list[str]:
    header = ("path", "mode", "bs", "S", "k", "N", "median µs", "IQR µs")
    header += ("vs baseline", "vs floor", "ATen ops/call")
    rows = [
        (
            f"`{row.path}`",
            row.mode.value,
            row.case.bs,
            row.case.num_steps,
            row.case.topk,
            row.case.num_draft_tokens,
            f"{row.median_us:.2f}",
            f"{row.iqr_us:.2f}",
            _ratio_cell(run, row, "baseline"),
            _ratio_cell(run, row, "floor"),
            row.ops,
        )
        for row in sorted_rows(run)
    ]
    return table(header, rows)


def compiled_lines(run: Run) -> list[str]:
    header = ("path", "case", "eager µs", "compiled µs", "compiled - eager µs", "graphs")
    header += ("graph breaks", "bs sweep")
    rows = []
    for row in sorted_rows(run):
        if row.graphs is None:
            continue
        eager = run.find(row.path, row.case)
        eager_us = f"{eager.median_us:.2f}" if eager else ""
        extra = f"{row.median_us - eager.median_us:+.1f}" if eager else ""
        compiled_us = f"{row.median_us:.2f}"
        counts = (row.graphs, row.graph_breaks, row.sweep)
        rows.append((f"`{row.path}`", _case_text(row.case), eager_us, compiled_us, extra, *counts))
    return table(header, rows)


def machine_lines(run: Run, seconds: float | None) -> list[str]:
    info = run.machine
    options = run.options
    rows = [
        ("CPU", f"{info.get('cpu_model', info.get('processor'))}, {info.get('cpu_count')} cores"),
        ("Python", f"{info.get('python_implementation')} {info.get('python_version')}"),
        ("torch", f"{info.get('torch_version')}, {info.get('torch_threads')} thread(s)"),
        ("pytest-benchmark", f"{run.version}, timer {options.get('timer')}"),
        ("GC during timing", "disabled" if options.get("disable_gc") else "enabled"),
        ("rounds", f"min {options.get('min_rounds')}, max time {options.get('max_time')} s"),
        ("date (UTC)", run.date.replace("T", " ")[:19]),
    ]
    if seconds is not None:
        rows.append(("compact run wall time", f"{seconds:.0f} s"))
    return table(("", ""), rows)


def markdown(run: Run, *, plotted: bool, seconds: float | None) -> str:
    intro = (
        "Generated by `python bench/report.py` from a compact run of the suite "
        "(`pytest bench -m report --benchmark-only`); do not edit by hand. Times are the "
        "median over pytest-benchmark's rounds; every ratio compares two paths measured in "
        "this same run. ATen ops/call and compiled graph counts are deterministic."
    )
    lines = ["# Benchmarks", "", intro, "", "## Machine", "", *machine_lines(run, seconds)]
    lines += ["", "## Targets", "", *table(("target", "measured", "status"), targets(run))]
    findings = [*tree_findings(run), "", *compile_findings(run)]
    if any(findings):
        lines += ["", "## Findings", "", *findings]
    lines += ["", "## Latency vs batch size", ""]
    if plotted:
        lines.append(f"![latency vs batch size per path]({PLOT.name})")
    else:
        lines.append("_Plot skipped: matplotlib is not installed (`pip install -e '.[plot]'`)._")
    lines += ["", "## Cases", "", *case_lines(run)]
    lines += ["", "## Compiled mode", "", *compiled_lines(run)]
    lines += ["", "## Paths", ""]
    lines += [f"- `{path}`: {PATHS.get(path, path)}" for path in path_order(run)]
    lines += [
        "",
        "Grid rule for tree cases: `num_draft_tokens = min(num_candidates + 1, topk * "
        "num_steps)`; chains use `num_steps + 1`. The full grid runs with "
        "`pytest bench --benchmark-only`.",
        "",
        "## Reproduce and compare",
        "",
        "```bash",
        "python bench/report.py  # this page: the compact run (pytest bench -m report)",
        "python -m pytest bench --benchmark-only  # the full grid",
        "# two runs side by side: save one on the old code, compare on the new",
        "python -m pytest bench --benchmark-only --benchmark-save=before",
        "python -m pytest bench --benchmark-only --benchmark-compare=0001",
        "```",
        "",
    ]
    return "\n".join(lines)


# The plot's panels: a title and the paths drawn there (single-case paths stay in the tables).
PANELS = (
    (
        "chain organize",
        ("floor", "organize_chain", "worker_chain", "chain_baseline", "organize_multilayer"),
    ),
    (
        "chain verify build",
        (
            "worker_chain_verify_qlen",
            "worker_chain_verify_bitpacked",
            "verify_tree_qlen",
            "verify_tree_bitpacked",
        ),
    ),
    (
        "tree organize and select_top_k",
        (
            "organize_tree",
            "organize_tree_core",
            "tree_baseline",
            "worker_tree",
            "select_top_k_step0",
            "select_top_k_step1",
        ),
    ),
)


def plot(run: Run, png: Path) -> bool:
    """Latency vs batch size per path, one panel per topic; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: skipping the plot (pip install -e '.[plot]')")
        return False
    fig, axes = plt.subplots(1, len(PANELS), figsize=(18, 6))
    for ax, (title, paths) in zip(axes, PANELS, strict=True):
        rows = [row for row in sorted_rows(run) if row.path in paths and row.case.topk in (1, 4)]
        _plot_panel(ax, [row for row in rows if _on_sweep(row)], references(run))
        ax.set_title(title)
    axes[0].set_ylabel("median µs per call (log)")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return True


def _on_sweep(row: Row) -> bool:
    """Rows of the two target configs, the ones swept over batch size."""
    target = CHAIN_TARGET if row.case.topk == 1 else TREE_TARGET
    base = Case(row.case.bs, target.num_steps, target.topk, target.num_draft_tokens)
    return row.case == base or row.path.startswith("select_top_k")


def references(run: Run) -> set[str]:
    """The paths others compare against: baselines and the floor."""
    return {ref for row in run.rows for ref in row.compare.values()}


def _plot_panel(ax: Any, rows: list[Row], dashed: set[str]) -> None:
    """One line per path, mode and config: median µs over bs; reference paths dashed."""
    series: dict[tuple[str, Mode, int, int, int], list[Row]] = {}
    for row in rows:
        case = row.case
        key = (row.path, row.mode, case.topk, case.num_steps, case.num_draft_tokens)
        series.setdefault(key, []).append(row)
    from matplotlib import colormaps  # the plot extra is imported only when plotting

    colors = colormaps["tab20"].colors
    for i, ((path, mode, k, steps, n), points) in enumerate(series.items()):
        label = path + ("" if mode is Mode.EAGER else f" [{mode.value}]") + f" (k{k} S{steps} N{n})"
        bs = [row.case.bs for row in points]  # ascending: rows come sorted
        style = "--" if path in dashed else "-"
        color = colors[(2 * i) % len(colors)]
        ax.plot(bs, [row.median_us for row in points], style, color=color, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({row.case.bs for row in rows}), labels=None)
    ax.xaxis.set_major_formatter("{x:.0f}")
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-json", type=Path, help="write from this json; run nothing")
    parser.add_argument("--json", type=Path, help="keep the run's --benchmark-json here")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")
    args = parser.parse_args(argv)
    seconds = None
    with tempfile.TemporaryDirectory() as tmp:
        json_path = args.from_json or args.json or Path(tmp) / "benchmarks.json"
        if args.from_json is None:
            seconds = run_suite(json_path.resolve(), args.pytest_args)
        run = load_run(json_path)
    DOCS.mkdir(exist_ok=True)
    plotted = plot(run, PLOT)
    MARKDOWN.write_text(markdown(run, plotted=plotted, seconds=seconds))
    print(
        f"wrote {MARKDOWN.relative_to(ROOT)}"
        + (f" and {PLOT.relative_to(ROOT)}" if plotted else "")
    )


if __name__ == "__main__":
    main()
