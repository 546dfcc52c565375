"""Draws latency against batch size from a bench run: one panel per topic (needs matplotlib).

Usage, from the repository root, with the ``plot`` extra installed::

    python bench/plot.py --from-json cpu.json                 # docs/benchmarks_latency_cpu.png
    python bench/plot.py --device cuda --from-json cuda.json  # graph replay µs on CUDA

Only the paths swept over batch size are drawn; the tables of docs/benchmarks.md hold every row.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import report
from report import Row, Run

PANELS = {
    "chain organize": ("floor", "organize_chain", "worker_chain", "chain_baseline"),
    "tree organize": ("organize_tree", "organize_tree_core", "tree_baseline", "worker_tree"),
    "select_top_k, step 1": ("select_top_k_step1", "select_baseline_step1"),
    "chain verify build": ("worker_chain_verify_qlen", "verify_tree_qlen"),
}
# On CUDA the GPU time of a call, CUDA-graph replayed; on a CPU pytest-benchmark's median.
METRIC = {"cpu": "median µs", "cuda": "graph replay µs"}


def series(run: Run, paths: tuple[str, ...]) -> dict[str, list[tuple[int, float]]]:
    """``(bs, µs)`` per path, backend and mode, over the configs swept in this run."""
    read = dict(report.metrics(run))[METRIC[run.device]]
    lines: dict[str, list[tuple[int, float]]] = {}
    for row in report.sorted_rows(run):
        value = read(row)
        if row.path in paths and value is not None and swept(run, row):
            label = f"{row.path} [{row.backend}, {row.mode.value}] (k{row.case.topk})"
            lines.setdefault(label, []).append((row.case.bs, value))
    return {label: points for label, points in lines.items() if len(points) > 1}


def swept(run: Run, row: Row) -> bool:
    """Whether ``row``'s config (all but bs) has the most batch sizes of its path."""
    configs: dict[tuple[int, int, int], int] = {}
    for other in run.rows:
        if other.path == row.path:
            key = (other.case.topk, other.case.num_steps, other.case.num_draft_tokens)
            configs[key] = configs.get(key, 0) + 1
    mine = (row.case.topk, row.case.num_steps, row.case.num_draft_tokens)
    return configs[mine] == max(configs.values())


def draw(run: Run, png: Path) -> None:
    import matplotlib  # the plot extra: imported only when drawing

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(6 * len(PANELS), 5))
    for ax, (title, paths) in zip(axes, PANELS.items(), strict=True):
        panel(ax, series(run, paths))
        ax.set_title(title)
    axes[0].set_ylabel(f"{METRIC[run.device]} per call (log)")
    fig.suptitle(f"{report.TITLES[run.device]}, run of {run.date[:10]}")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def panel(ax: Any, lines: dict[str, list[tuple[int, float]]]) -> None:
    for label, points in lines.items():
        bs, us = zip(*points, strict=True)
        ax.plot(bs, us, "--" if "baseline" in label else "-", marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter("{x:.0f}")
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-json", type=Path, required=True, help="a --benchmark-json file")
    parser.add_argument(
        "--device", choices=tuple(report.TITLES), default="cpu", help="whose rows to plot"
    )
    parser.add_argument("--png", type=Path, help="default: docs/benchmarks_latency_<device>.png")
    args = parser.parse_args(argv)
    png = args.png or report.MARKDOWN.parent / f"benchmarks_latency_{args.device}.png"
    try:
        import matplotlib  # noqa: F401 -- the plot extra, checked before loading the run
    except ImportError:
        parser.exit(1, "bench/plot.py needs matplotlib: pip install -e '.[plot]'\n")
    draw(report.load_run(args.from_json, args.device), png)
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
