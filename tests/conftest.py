"""Shared fixtures: the hypothesis profile (loaded), the interpreter switch, the device
parameter and a fresh dynamo."""

import contextlib
import os
import sys

import pytest
import torch
from hypothesis import settings

# Without CUDA the Triton kernels run in Triton's CPU interpreter. It must be chosen before
# anything imports triton (torch.compile's inductor does, in test_compile): triton.language's
# own jit helpers (tl.sum, tl.zeros, ...) are decorated once, at that import.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# Triton reads it once, at its first import: made here, so that no test that sets or unsets
# the variable (test_backend) can fix the mode for the tests after it.
with contextlib.suppress(ImportError):
    import triton  # noqa: F401

from eagle_fn._backend import interpreting
from eagle_fn.arguments import as_device
from helpers import profiles  # registers the profiles

settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
assert settings.get_profile("ci").max_examples == profiles.CI_EXAMPLES

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    ),
]


@pytest.fixture(params=DEVICES)
def device(request):
    # As the library resolves it ("cuda" -> "cuda:0"), which is what its tensors report.
    return as_device("tests", request.param)


@pytest.fixture
def fresh_dynamo():
    """Dynamo reset and its counters cleared, before and after the test: a reset alone forgets
    compiled code, but not the counters."""
    import torch._dynamo  # loaded here: only the compiled tests need it

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()


@pytest.fixture(autouse=True)
def memchecked(request):
    """Where the kernels run interpreted, every launch in every test is memchecked (each
    address a kernel touches lies inside its arguments) and runs its programs out of order;
    the kernel modules' eager tests also get poisoned allocations, which the others leave
    out because deterministic mode is a global setting that torch.compile guards on
    (tests/helpers/interpreter_checks.py). Yields what the memcheck saw (``None`` where
    nothing is interpreted)."""
    if not interpreting() or "triton" not in sys.modules:
        yield None
        return
    from helpers import interpreter_checks as checks

    kernel_test = request.module.__name__.startswith("test_kernels")
    eager = request.node.get_closest_marker("compiled") is None
    poisoned = checks.poisoned_allocations() if kernel_test and eager else contextlib.nullcontext()
    with poisoned, checks.shuffled_programs(), checks.memcheck() as seen:
        yield seen


@pytest.fixture(autouse=True)
def _no_compile_env(monkeypatch):
    # Tests choose compiled mode explicitly; a developer's shell must not change results.
    monkeypatch.delenv("EAGLE_FN_COMPILE", raising=False)


# The tests a GPU machine must run: those on CUDA tensors and those of the Triton kernels.
# bench/gpu_check.sh selects them with -m gpu; -k would also match the checkout's directory
# names, which pytest counts among every test's keywords.
GPU_WORDS = ("cuda", "kernel", "triton")


def pytest_collection_modifyitems(items):
    for item in items:
        test_id = item.nodeid.lower()
        if any(word in test_id for word in GPU_WORDS):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture
def another_thread_compiling(monkeypatch):
    """torch.compiler.is_compiling() as this thread sees it while another thread compiles:
    torch 2.13 and later hold it true process-wide for a compile's whole length (2.11 and 2.12 do
    not, but read the same flag)."""
    monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)
    assert torch.compiler.is_compiling()
    assert not torch.compiler.is_dynamo_compiling()
