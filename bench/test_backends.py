"""Checks of bench/backends.py: which function a backend row runs, and when it skips."""

import copy
import sys
from types import ModuleType, SimpleNamespace

import pytest
import torch

import backends
import eagle_fn
import gpu
import inputs
from cases import TREE_TARGET
from eagle_fn import _backend

CPU = torch.device("cpu")


@pytest.fixture
def fake_kernels(monkeypatch):
    """An ``eagle_fn.kernels`` whose organize_tree is the torch one, whatever exists today."""
    module = ModuleType("eagle_fn.kernels")
    module.organize_tree = eagle_fn.organize_tree
    monkeypatch.setitem(sys.modules, "eagle_fn.kernels", module)
    return module


def test_torch_rows_run_eagle_fn_itself():
    assert backends.function("organize_tree", "torch", CPU) is eagle_fn.organize_tree


def test_triton_skips_when_the_kernels_do_not_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "eagle_fn.kernels", None)  # import raises ImportError
    assert backends.kernel("organize_tree") is None
    with pytest.raises(pytest.skip.Exception, match="not importable"):
        backends.function("organize_tree", "triton", CPU)


def test_triton_on_a_cpu_needs_the_interpreter(fake_kernels, monkeypatch):
    # As the kernels were decorated (eagle_fn._backend.interpreting), not the variable now.
    monkeypatch.setattr(_backend, "_decided", [False])
    with pytest.raises(pytest.skip.Exception, match="TRITON_INTERPRET=1"):
        backends.function("organize_tree", "triton", CPU)
    monkeypatch.setattr(_backend, "_decided", [True])
    assert backends.function("organize_tree", "triton", CPU) is fake_kernels.organize_tree


def test_a_missing_torch_function_skips(monkeypatch):
    monkeypatch.delattr(eagle_fn, "verify_sampling", raising=False)
    with pytest.raises(pytest.skip.Exception, match="does not exist yet"):
        backends.reference("verify_sampling")


class FakeBenchmark:
    """pytest-benchmark's fixture as a run with ``--benchmark-disable`` sees it: one call."""

    def __init__(self, disabled):
        self.disabled, self.extra_info, self.calls = disabled, {}, 0

    def __call__(self, fn, *args):
        self.calls += 1
        return fn(*args)


@pytest.mark.parametrize("disabled", [True, False], ids=["disabled", "timed"])
def test_an_interpreted_triton_row_is_checked_then_not_timed(fake_kernels, monkeypatch, disabled):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    case = TREE_TARGET.at_bs(2)
    args = (case.config, *inputs.draft_lists(case.config, case.bs))
    bench = FakeBenchmark(disabled)

    def run():
        backends.record_backend(
            bench, "organize_tree", case, "organize_tree", "triton", *args, device=CPU
        )

    if disabled:  # the smoke run: recorded once, untimed, beside torch's row
        run()
        assert (bench.calls, bench.extra_info["backend"]) == (1, "triton")
        assert bench.extra_info["compare"] == {"torch": "organize_tree"}
    else:
        with pytest.raises(pytest.skip.Exception, match="checked, not timed"):
            run()
        assert (bench.calls, bench.extra_info) == (0, {})
    # A kernel that disagrees with torch fails the row before anything is recorded.
    fake_kernels.organize_tree = lambda cfg, *lists: eagle_fn.organize_tree(cfg, *lists)._replace(
        draft_tokens=torch.zeros(2, TREE_TARGET.num_draft_tokens - 1, dtype=torch.int64)
    )
    recorded = (bench.calls, copy.deepcopy(bench.extra_info))
    with pytest.raises(AssertionError, match="Tensor-likes are not equal"):
        run()
    assert (bench.calls, bench.extra_info) == recorded


def test_an_interpreted_triton_row_at_a_large_batch_is_skipped(fake_kernels, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    case = TREE_TARGET  # bs 32
    args = (case.config, *inputs.draft_lists(case.config, case.bs))
    bench = FakeBenchmark(True)
    with pytest.raises(pytest.skip.Exception, match="checked at bs <= 8"):
        backends.record_backend(
            bench, "organize_tree", case, "organize_tree", "triton", *args, device=CPU
        )
    assert bench.calls == 0


def test_a_triton_row_on_cuda_is_timed_at_any_batch_with_a_synchronize(fake_kernels, monkeypatch):
    # No GPU needed: a device of type "cuda", gpu.py's CUDA figures and synchronize faked.
    # The interpreter's skips do not apply, the figures are recorded, and the timed call
    # ends with a synchronize (one call's latency).
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    synced = []
    monkeypatch.setattr(gpu, "cuda_figures", lambda fn, args: {"host_us": 1.0, "graph_us": 2.0})
    monkeypatch.setattr(gpu, "synchronize_on", lambda device: lambda: synced.append(device))
    case, cuda = TREE_TARGET, SimpleNamespace(type="cuda")  # bs 32
    args = (case.config, *inputs.draft_lists(case.config, case.bs))
    bench = FakeBenchmark(False)
    try:
        backends.record_backend(
            bench, "organize_tree", case, "organize_tree", "triton", *args, device=cuda
        )
    except pytest.skip.Exception as skip:  # a skip would pass unseen
        pytest.fail(f"a CUDA Triton row was skipped: {skip}")
    assert (bench.calls, synced) == (1, [cuda])
    info = bench.extra_info
    assert (info["backend"], info["device"], info["host_us"], info["graph_us"]) == (
        "triton",
        "cuda",
        1.0,
        2.0,
    )
