"""Issues 10's and 11's GPU targets against a CUDA bench run, met or not.

Each target, what the run measured, and whether that meets it.

Usage, from the repository root::

    python bench/targets.py --from-json bench_cuda.json

Reads the Triton rows of the compact run (eager; CUDA-graph replay µs, host µs and launches per
call, a launch being a kernel or a copy; for issue 11, the replay with L2 flushed first). Issue
11's bound is twice reading the final rows at the DRAM rate of the GPU that ran, by its name
(``BANDWIDTHS``) or ``--bandwidth``. A target whose rows or figures the run lacks, or whose GPU
has no known rate, is "not measured", with what is missing. Prints a markdown table for
docs/performance.md, then a line of totals. bench/report.py renders the figures themselves,
without thresholds.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path

from cases import TREE_LARGE, TREE_TARGET, VOCABS, Case, Mode
from report import Run, case_text, load_run, table

# Issue 11's bound is twice reading bs x V x 4 bytes from DRAM at the rate of the GPU that ran:
# a sustained read rate (bytes/s), nine tenths of its peak, found by the first key the GPU's
# name holds as whole words (a GH200 is not an H200). The H200's gives 7.6 µs at V 128256; the
# device tool lends H100s too.
BANDWIDTHS: tuple[tuple[str, float], ...] = (
    ("H200", 4.3e12),  # peak 4.8 TB/s, NVL too
    ("H100 NVL", 3.5e12),  # peak 3.9
    ("H100 PCIe", 1.8e12),  # peak 2.0
    ("H100", 3.0e12),  # SXM ("H100 80GB HBM3"): peak 3.35
)
# select_top_k is benchmarked at S 2 (a step 0 and a step 1), each k at its tree's bs.
SELECT_TARGET = Case.grid(TREE_TARGET.bs, 2, TREE_TARGET.topk)
SELECT_LARGE = Case.grid(TREE_LARGE.bs, 2, TREE_LARGE.topk)
# Issue 10's stages: each one's bs-32 case and large case (None: BITPACKED holds <= 32 nodes).
STAGES: dict[str, tuple[Case, Case | None]] = {
    "organize_tree": (TREE_TARGET, TREE_LARGE),
    "verify_tree_qlen": (TREE_TARGET, TREE_LARGE),
    "verify_tree_bitpacked": (TREE_TARGET, None),
    "verify_greedy": (TREE_TARGET, TREE_LARGE),
    "select_top_k_step0": (SELECT_TARGET, SELECT_LARGE),
    "select_top_k_step1": (SELECT_TARGET, SELECT_LARGE),
}

# A target: its text, and what works its figures and verdict out of a run.
Target = tuple[str, Callable[[Run], tuple[str, bool]]]
CASE = case_text(TREE_TARGET)  # "bs 32, k 4, S 4, N 16"


class NotMeasuredError(LookupError):
    """A row or a figure the run does not hold."""


def figure(run: Run, path: str, case: Case, name: str) -> float:
    """``name`` (``graph_us``, ``host_us``, ``kernels``, ``copies``) of the Triton eager row."""
    want = (path, "triton", Mode.EAGER, case)
    row = next((r for r in run.rows if (r.path, r.backend, r.mode, r.case) == want), None)
    if row is None:
        raise NotMeasuredError(f"no Triton row of `{path}` at {case_text(case)}")
    if name == "copies":  # runs before 2026-12-05 (profiler counts) recorded none as absent
        return float(row.info.get("copies") or 0)
    if row.info.get(name) is None:
        raise NotMeasuredError(f"`{path}` at {case_text(case)} has no {name}")
    return float(row.info[name])


def launches(run: Run, path: str, case: Case) -> int:
    return int(figure(run, path, case, "kernels") + figure(run, path, case, "copies"))


def tree_cycle(run: Run) -> tuple[str, bool]:
    paths = ("organize_tree", "verify_tree_qlen")
    n = [launches(run, path, TREE_TARGET) for path in paths]
    us = [figure(run, path, TREE_TARGET, "graph_us") for path in paths]
    text = f"{n[0]} + {n[1]} launches, {us[0]:.2f} + {us[1]:.2f} = {sum(us):.2f} µs"
    return text, sum(n) <= 2 and sum(us) <= 12


def one_launch_within(path: str, case: Case, bound_us: float) -> Callable[[Run], tuple[str, bool]]:
    def check(run: Run) -> tuple[str, bool]:
        n, us = launches(run, path, case), figure(run, path, case, "graph_us")
        return f"{n} launch{'es' if n != 1 else ''}, {us:.2f} µs", n == 1 and us <= bound_us

    return check


def sampling_within(path: str, bound_us: float) -> Callable[[Run], tuple[str, bool]]:
    """Issue 11's bound on ``path`` at the bs-32 case: one launch, and the replay with L2
    flushed first within ``bound_us``. The bound is a read from DRAM, and the plain replay
    likely reads the final rows from L2 (16 MB at V 128256; each replay reads what the last
    one did): shown beside, not judged."""

    def check(run: Run) -> tuple[str, bool]:
        n = launches(run, path, TREE_TARGET)
        flushed = figure(run, path, TREE_TARGET, "graph_flushed_us")
        warm = figure(run, path, TREE_TARGET, "graph_us")
        text = f"{n} launch{'es' if n != 1 else ''}, {flushed:.2f} µs, L2 flushed first"
        return f"{text} ({warm:.2f} µs without)", n == 1 and flushed <= bound_us

    return check


def scaling(run: Run) -> tuple[str, bool]:
    cells, ratios = [], []
    for path, (small, large) in STAGES.items():
        if large is not None:
            us = figure(run, path, large, "graph_us")
            ratios.append(us / figure(run, path, small, "graph_us"))
            cells.append(f"{path} {us:.2f} µs ({ratios[-1]:.2f}x)")
    return ", ".join(cells), max(ratios) <= 2


def host_time(run: Run) -> tuple[str, bool]:
    """The median loops against the bound; each stage's fastest loop beside it, where the
    run has it (since 2026-12-04): how much of the median the rest of the machine made."""
    host = {path: figure(run, path, case, "host_us") for path, (case, _) in STAGES.items()}
    cells = []
    for path, us in host.items():
        try:
            fastest = f" (fastest loop {figure(run, path, STAGES[path][0], 'host_min_us'):.1f})"
        except NotMeasuredError:
            fastest = ""
        cells.append(f"{path} {us:.1f}{fastest}")
    return ", ".join(cells) + " µs", max(host.values()) <= 50


def dram_rate(gpu_name: object) -> float | None:
    """The read rate of :data:`BANDWIDTHS` for the GPU named ``gpu_name``; None if it has none."""
    name = str(gpu_name)
    return next((rate for key, rate in BANDWIDTHS if re.search(rf"\b{key}\b", name)), None)


def read_us(vocab: int, rate: float, bs: int = TREE_TARGET.bs) -> float:
    """Twice the time to read the final rows, bs x V float32, at ``rate`` bytes/s: issue 11's
    bound (bench/sweep_sampling.py holds other batches to it too)."""
    return 2 * bs * vocab * 4 / rate * 1e6


def sampling_target(vocab: int, rate: float | None, gpu: object) -> Target:
    """Issue 11's target at ``vocab``: not measured where the GPU's rate is not known."""
    path, text = f"verify_sampling_v{vocab}", f"`verify_sampling`, V {vocab}, {CASE}: 1 launch"
    if rate is not None:
        bound = read_us(vocab, rate)
        text += f", ≤ {bound:.2f} µs replay (2x reading bs x V x 4 bytes at {rate / 1e12:.1f} TB/s)"
        return text, sampling_within(path, bound)

    def unknown(run: Run) -> tuple[str, bool]:
        raise NotMeasuredError(f"no DRAM rate known for GPU {gpu} (--bandwidth gives one)")

    return f"{text}, ≤ 2x reading bs x V x 4 bytes from DRAM", unknown


FIXED: list[Target] = [
    (
        f"tree cycle (organize + QLEN verify build), {CASE}: ≤ 2 launches, ≤ 12 µs replay",
        tree_cycle,
    ),
    (
        f"`verify_greedy`, {CASE}: 1 launch, ≤ 6 µs replay",
        one_launch_within("verify_greedy", TREE_TARGET, 6.0),
    ),
    ("each stage at bs 256, k 8, S 8, N 64: ≤ 2x its bs-32 replay (select: S 2)", scaling),
    ("each stage ≤ 50 µs host time, eager, bs 32 (select: S 2)", host_time),
]


def target_lines(run: Run, rate: float | None = None) -> list[str]:
    """The targets' table, then a line of totals; issue 11's at ``rate`` bytes/s, by default
    the rate :data:`BANDWIDTHS` gives the run's GPU."""
    gpu = run.machine.get("gpu_name")
    rate = rate if rate is not None else dram_rate(gpu)
    found = [*FIXED, *(sampling_target(vocab, rate, gpu) for vocab in VOCABS)]
    rows, counts = [], {"met": 0, "not met": 0, "not measured": 0}
    for text, check in found:
        try:
            measured, met = check(run)
            status = "met" if met else "not met"
        except NotMeasuredError as missing:
            measured, status = str(missing), "not measured"
        counts[status] += 1
        rows.append((text, measured, status if status == "met" else f"**{status}**"))
    totals = ", ".join(f"{n} {status}" for status, n in counts.items())
    return [*table(("target", "measured", "status"), rows), "", f"targets: {totals}"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-json", type=Path, required=True, help="a CUDA --benchmark-json")
    parser.add_argument(
        "--bandwidth",
        type=tb_per_s,
        metavar="TB/S",
        help="the GPU's DRAM read rate for issue 11's bound (default: by its name, BANDWIDTHS)",
    )
    args = parser.parse_args(argv)
    run = load_run(args.from_json, "cuda")
    print(f"{run.machine.get('gpu_name')}, torch {run.machine.get('torch_version')}, {run.date}")
    print("\n".join(target_lines(run, args.bandwidth)))


def tb_per_s(text: str) -> float:
    """``--bandwidth``'s value, TB/s, in bytes/s."""
    try:
        rate = float(text)
    except ValueError:
        rate = math.nan
    if not 0 < rate < math.inf:
        raise argparse.ArgumentTypeError(f"a rate in TB/s above 0, got {text!r}")
    return rate * 1e12


if __name__ == "__main__":
    main()
