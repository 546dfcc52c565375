"""Benchmark session set-up: bench_*.py collected, one thread, GC off while timing."""

import os
import platform
from fnmatch import fnmatch

import pytest
import torch

from measure import GraphSweeps


def pytest_configure(config):
    # Threads pinned: the organize functions are microseconds of work on small tensors.
    torch.set_num_threads(1)
    # pytest-benchmark's own --benchmark-disable-gc, on by default for this suite.
    config.option.benchmark_disable_gc = True
    config.addinivalue_line(
        "markers", "report: the compact cases `python bench/report.py` runs (pytest -m report)"
    )


def pytest_collect_file(file_path, parent):
    # The suite's modules are bench_<topic>.py, which pytest's python_files does not match.
    # pytest collects a file itself when it is named on the command line or matches
    # python_files: leave those to it, so that no module is collected twice.
    if file_path.suffix != ".py" or not file_path.name.startswith("bench_"):
        return None
    patterns = parent.config.getini("python_files")
    if parent.session.isinitpath(file_path) or any(fnmatch(file_path.name, p) for p in patterns):
        return None
    return pytest.Module.from_parent(parent, path=file_path)


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info.update(
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count(),
        torch_version=torch.__version__,
        torch_threads=torch.get_num_threads(),
        disable_gc=config.option.benchmark_disable_gc,
    )


def cpu_model():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@pytest.fixture(scope="session")
def graph_sweeps():
    return GraphSweeps()


@pytest.fixture(autouse=True)
def _no_compile_env(monkeypatch):
    # Every benchmark names its mode; a developer's EAGLE_FN_COMPILE must not change it.
    monkeypatch.delenv("EAGLE_FN_COMPILE", raising=False)
