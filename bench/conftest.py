"""Benchmark session set-up: bench_*.py collected, the device, one thread, GC off while timing."""

import os
import platform
from fnmatch import fnmatch

import pytest
import torch

from measure import GraphSweeps


def pytest_addoption(parser):
    parser.addoption(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where every benchmark builds its inputs and workers (default: cpu)",
    )


def pytest_configure(config):
    if config.getoption("--device") == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--device cuda: torch sees no CUDA device")
    # Threads pinned: the organize functions are microseconds of work on small tensors.
    torch.set_num_threads(1)
    # pytest-benchmark's own --benchmark-disable-gc, on by default for this suite.
    config.option.benchmark_disable_gc = True
    config.addinivalue_line(
        "markers", "report: the compact cases `python bench/run.py` runs (pytest -m report)"
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
        device=config.getoption("--device"),
        triton_version=triton_version(),
        triton_interpret=os.environ.get("TRITON_INTERPRET", ""),
    )
    if config.getoption("--device") == "cuda":
        machine_info.update(gpu_name=torch.cuda.get_device_name(), cuda_version=torch.version.cuda)


def triton_version():
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


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
def device(request):
    """The ``--device`` every benchmark builds its inputs and workers on."""
    return torch.device(request.config.getoption("--device"))


@pytest.fixture(scope="session")
def graph_sweeps():
    return GraphSweeps()


@pytest.fixture(autouse=True)
def _no_compile_env(monkeypatch):
    # Every benchmark names its mode and backend; a developer's shell must not change them.
    # A torch row runs the torch functions even where eagle_fn would pick Triton by itself.
    monkeypatch.delenv("EAGLE_FN_COMPILE", raising=False)
    monkeypatch.setenv("EAGLE_FN_BACKEND", "torch")


def pytest_benchmark_update_json(config, benchmarks, output_json):
    # Keep the statistics, drop every round's time: calls of a few µs run ~10^5 rounds a
    # second, which made the compact run's json hundreds of MB.
    for bench in output_json["benchmarks"]:
        bench["stats"].pop("data", None)
