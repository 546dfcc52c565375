"""Runs the compact bench suite on a device, then renders it with bench/report.py.

Usage, from the repository root::

    python bench/run.py                                  # CPU: run, write the CPU section
    python bench/run.py --device cuda --json cuda.json   # CUDA: keep the json too
    python bench/run.py --json cpu.json -- --benchmark-max-time=0.5  # extra pytest arguments

The compact suite is the benchmarks marked ``report`` (``pytest bench -m report``). A failing
benchmark does not stop the rendering of the others; the exit status is pytest's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import report

# Measures inductor options on the CPU only, and imports an API torch 2.11 lacks.
CPU_ONLY = ("--ignore=bench/bench_compile_options.py",)


def pytest_command(device: str, json_path: Path, extra: list[str]) -> list[str]:
    return [
        *(sys.executable, "-m", "pytest", "bench", "-m", "report", "--benchmark-only", "-q"),
        *(f"--device={device}", f"--benchmark-json={json_path}"),
        "--benchmark-columns=median,iqr,rounds",
        *(CPU_ONLY if device == "cuda" else ()),
        *extra,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", choices=tuple(report.TITLES), default="cpu", help="whose section to write"
    )
    parser.add_argument("--json", type=Path, help="keep the run's --benchmark-json here")
    parser.add_argument(
        "--markdown",
        type=Path,
        default=report.MARKDOWN,
        help="the page to update (docs/benchmarks.md)",
    )
    parser.add_argument("--section-out", type=Path, help="also write the section alone here")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        json_path = (args.json or Path(tmp) / "benchmarks.json").resolve()
        command = pytest_command(args.device, json_path, args.pytest_args)
        print("running: python", " ".join(command[1:]), flush=True)
        start = time.perf_counter()
        status = subprocess.run(command, cwd=report.ROOT, check=False).returncode
        print(f"pytest exited {status} after {time.perf_counter() - start:.0f} s", flush=True)
        if not json_path.exists():
            return status or 1
        rendered = ["--device", args.device, "--from-json", str(json_path)]
        rendered += ["--markdown", str(args.markdown)]
        if args.section_out:
            rendered += ["--section-out", str(args.section_out)]
        report.main(rendered)
    return status


if __name__ == "__main__":
    sys.exit(main())
