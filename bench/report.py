"""Renders a bench run (a pytest-benchmark ``--benchmark-json`` file) into docs/benchmarks.md.

Usage, from the repository root::

    python bench/report.py --from-json cpu.json                 # the CPU section
    python bench/report.py --device cuda --from-json cuda.json --section-out cuda.md

It rewrites only the chosen device's tables, between its markers, from what the run recorded:
no thresholds, no prose claims (docs/performance.md has those). ``bench/run.py`` runs the suite.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cases import Case, Mode

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = ROOT / "docs" / "benchmarks.md"
TITLES = {"cpu": "CPU", "cuda": "CUDA"}


@dataclass(frozen=True)
class Row:
    """One benchmark of the run: what ran, pytest-benchmark's timing and the recorded figures."""

    path: str
    backend: str
    mode: Mode
    case: Case
    median_us: float
    iqr_us: float
    info: dict[str, Any]  # the benchmark's extra_info as recorded


@dataclass(frozen=True)
class Run:
    """The rows of one device from a loaded ``--benchmark-json`` file."""

    device: str
    rows: list[Row]
    machine: dict[str, Any]
    date: str
    version: str
    options: dict[str, Any]

    def find(self, path: str, case: Case, mode: Mode = Mode.EAGER) -> Row | None:
        """The torch-backend row of ``path`` on ``case`` in ``mode``."""
        want = (path, "torch", mode, case)
        return next((r for r in self.rows if (r.path, r.backend, r.mode, r.case) == want), None)


def load_run(json_path: Path, device: str) -> Run:
    """The benchmarks of ``json_path`` run on ``device`` (a row without a device: CPU)."""
    data = json.loads(json_path.read_text())
    benches = [b for b in data["benchmarks"] if b["extra_info"].get("device", "cpu") == device]
    rows = [_row(bench) for bench in benches]
    options = benches[0]["options"] if benches else {}
    machine = {**data["machine_info"], "commit": data.get("commit_info") or {}}
    return Run(device, rows, machine, data["datetime"], data["version"], options)


def _row(bench: dict[str, Any]) -> Row:
    info, stats = bench["extra_info"], bench["stats"]
    case = Case(info["bs"], info["num_steps"], info["topk"], info["num_draft_tokens"])
    backend, mode = info.get("backend", "torch"), Mode(info["mode"])
    return Row(info["path"], backend, mode, case, stats["median"] * 1e6, stats["iqr"] * 1e6, info)


# A metric: a column title and how to read it from a row (None where not recorded).
Metric = tuple[str, Callable[[Row], float | None]]
CPU_METRICS: list[Metric] = [("median µs", lambda row: row.median_us)]
CUDA_METRICS: list[Metric] = [
    ("host µs/call", lambda row: row.info.get("host_us")),
    ("graph replay µs", lambda row: row.info.get("graph_us")),
    ("flushed replay µs", lambda row: row.info.get("graph_flushed_us")),
]


def metrics(run: Run) -> list[Metric]:
    return CUDA_METRICS if run.device == "cuda" else CPU_METRICS


def _us(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def ratios(run: Run, row: Row) -> str:
    """``row`` over each path it compares with (same case, torch, eager), per time column."""
    cells = []
    for ref_path in row.info.get("compare", {}).values():
        ref = run.find(ref_path, row.case)
        pairs = [(read(row), read(ref) if ref else None) for _, read in metrics(run)]
        shown = [f"{a / b:.2f}x" if a is not None and b else "–" for a, b in pairs]
        if set(shown) != {"–"}:
            cells.append(f"{' / '.join(shown)} `{ref_path}`")
    return ", ".join(cells)


def table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> list[str]:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def sorted_rows(run: Run) -> list[Row]:
    """Paths in the run's order, torch first, eager first, then config and batch size."""
    order = {path: i for i, path in enumerate(dict.fromkeys(row.path for row in run.rows))}

    def key(row: Row) -> tuple[object, ...]:
        case = row.case
        steps = (case.topk, case.num_steps, case.num_draft_tokens, case.bs)
        return (order[row.path], row.backend != "torch", row.mode is not Mode.EAGER, *steps)

    return sorted(run.rows, key=key)


def case_lines(run: Run) -> list[str]:
    header = ["path", "backend", "mode", "bs", "S", "k", "N"]
    if run.device == "cuda":
        header += [name for name, _ in CUDA_METRICS] + ["kernels/call", "synced call µs"]
    else:
        header += ["median µs", "IQR µs"]
    header += ["compared with", "ATen ops/call"]
    rows = []
    for row in sorted_rows(run):
        c, copies = row.case, row.info.get("copies")
        cells: list[object] = [f"`{row.path}`", row.backend, row.mode.value]
        cells += [c.bs, c.num_steps, c.topk, c.num_draft_tokens]
        if run.device == "cuda":
            kernels = f"{row.info.get('kernels', '')}" + (f" (+{copies} copies)" if copies else "")
            cells += [*(_us(read(row)) for _, read in CUDA_METRICS), kernels, _us(row.median_us)]
        else:
            cells += [_us(row.median_us), _us(row.iqr_us)]
        rows.append([*cells, ratios(run, row), row.info["ops"]])
    return table(header, rows)


def compiled_lines(run: Run) -> list[str]:
    header = ["path", "case"]
    header += [f"{way} {name}" for name, _ in metrics(run) for way in ("eager", "compiled")]
    header += ["graphs", "graph breaks", "bs sweep"]
    rows = []
    for row in sorted_rows(run):
        if row.info.get("graphs") is None:
            continue
        eager = run.find(row.path, row.case)
        cells: list[object] = [f"`{row.path}`", case_text(row.case)]
        for _, read in metrics(run):
            cells += [_us(read(eager) if eager else None), _us(read(row))]
        rows.append([*cells, *(row.info[name] for name in ("graphs", "graph_breaks", "sweep"))])
    return table(header, rows) if rows else ["No compiled path in this run."]


def error_lines(run: Run) -> list[str]:
    """CUDA figures a path could not give (a call that does not capture, say), as recorded."""
    lines = []
    for row in sorted_rows(run):
        for name, text in row.info.items():
            if name.endswith("_error"):
                what = f"{row.path} ({row.backend}, {row.mode.value}, {case_text(row.case)})"
                lines.append(f"- `{what}`: no {name.removesuffix('_error')}: `{text}`")
    return lines


def case_text(case: Case) -> str:
    if case.topk == 1:
        return f"bs {case.bs}, S {case.num_steps}"
    return f"bs {case.bs}, k {case.topk}, S {case.num_steps}, N {case.num_draft_tokens}"


def machine_lines(run: Run) -> list[str]:
    info, options = run.machine, run.options
    cpu = f"{info.get('cpu_model', info.get('processor'))}, {info.get('cpu_count')} cores"
    commit = info.get("commit", {})  # pytest-benchmark's record of the git checkout
    dirty = " (uncommitted changes)" if commit.get("dirty") else ""
    rows = [("eagle_fn commit", f"{commit.get('id', 'unknown')[:10]}{dirty}"), ("CPU", cpu)]
    if run.device == "cuda":
        rows.append(("GPU", f"{info.get('gpu_name')}, CUDA {info.get('cuda_version')}"))
    rows += [
        ("Python", f"{info.get('python_implementation')} {info.get('python_version')}"),
        ("torch", f"{info.get('torch_version')}, {info.get('torch_threads')} thread(s)"),
        ("triton", f"{info.get('triton_version')}"),
        ("pytest-benchmark", f"{run.version}, timer {options.get('timer')}"),
        ("GC during timing", "disabled" if options.get("disable_gc") else "enabled"),
        ("rounds", f"min {options.get('min_rounds')}, max time {options.get('max_time')} s"),
        ("date (UTC)", run.date.replace("T", " ")[:19]),
    ]
    return table(("", ""), rows)


def section(run: Run, source: str) -> str:
    """The generated body of ``run.device``'s section."""
    timing = {
        "cpu": "Times are pytest-benchmark's median over its rounds.",
        "cuda": "host µs/call: a loop of calls synchronized only at its ends; graph replay µs: "
        "one call captured into a CUDA graph, replayed and timed with CUDA events (flushed: "
        "each replay after overwriting L2: inputs from DRAM); kernels/call: the kernel nodes "
        "of one call's captured CUDA graph (torch.profiler's events before 2026-12-05); synced "
        "call µs: pytest-benchmark's median of one call followed by a synchronize.",
    }[run.device]
    intro = (
        f"Generated by `python bench/report.py --device {run.device} --from-json {source}` "
        f"from a compact run (`pytest bench -m report --benchmark-only --device {run.device}`) "
        f"of {run.date[:10]}; do not edit by hand. {timing} Ratios (compared with) divide "
        f"each time column by the same case's row of the named path, torch, eager, in "
        f"this same run. ATen ops/call and graph counts are deterministic."
    )
    lines = [intro, "", "### Machine", "", *machine_lines(run)]
    lines += ["", "### Cases", "", *case_lines(run)]
    lines += ["", "### Compiled mode", "", *compiled_lines(run)]
    if errors := error_lines(run):
        lines += ["", "### Figures not taken", "", *errors]
    return "\n".join(lines)


def replace_section(text: str, device: str, body: str) -> str:
    """``text`` with ``device``'s generated section set to ``body``; appended if absent."""
    begin, end = f"<!-- generated: {device} begin -->", f"<!-- generated: {device} end -->"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return f"{head}{begin}\n{body}\n{end}{rest.split(end, 1)[1]}"
    return f"{text.rstrip()}\n\n## {TITLES[device]}\n\n{begin}\n{body}\n{end}\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-json", type=Path, required=True, help="a --benchmark-json file")
    parser.add_argument("--device", choices=tuple(TITLES), default="cpu", help="whose section")
    parser.add_argument("--markdown", type=Path, default=MARKDOWN, help="the page to update")
    parser.add_argument("--section-out", type=Path, help="also write the section alone here")
    args = parser.parse_args(argv)
    run = load_run(args.from_json, args.device)
    if not run.rows:
        parser.error(f"{args.from_json} holds no benchmark run on {args.device}")
    body = section(run, args.from_json.name)
    if args.section_out:
        args.section_out.write_text(f"## {TITLES[args.device]}\n\n{body}\n")
    old = args.markdown.read_text() if args.markdown.exists() else "# Benchmarks\n"
    args.markdown.write_text(replace_section(old, args.device, body))
    print(f"wrote the {TITLES[args.device]} section of {args.markdown}")


if __name__ == "__main__":
    main()
