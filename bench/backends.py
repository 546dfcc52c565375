"""The backend axis: eagle_fn's torch functions, or its Triton kernels where they exist.

``eagle_fn.kernels`` holds Triton kernels with the torch functions' signatures. A Triton row
skips, with the reason, when the module or the function is missing, or on a CPU without
``TRITON_INTERPRET=1``. Under the interpreter a row checks its result against torch and is
not timed: interpreted timings say nothing about a GPU.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import torch

import eagle_fn
from eagle_fn._backend import interpreting
from measure import assert_same, record

BACKENDS = ("torch", "triton")
# The interpreter runs each program in Python (seconds per call at bs 32): on a CPU a Triton row
# is checked only at small batches; tests/test_kernels_* check the kernels exhaustively.
INTERPRETED_MAX_BS = 8


def kernel(name: str) -> Callable[..., Any] | None:
    """``eagle_fn.kernels.<name>``, or None when it cannot be imported."""
    try:
        kernels = importlib.import_module("eagle_fn.kernels")
    except ImportError:
        return None
    return getattr(kernels, name, None)


def reference(name: str) -> Callable[..., Any]:
    """``eagle_fn.<name>``, the torch function (a module of that name exporting it counts too),
    or a pytest skip when eagle_fn does not have it yet."""
    found = getattr(eagle_fn, name, None)
    if isinstance(found, types.ModuleType):
        found = getattr(found, name, None)
    if found is None:
        pytest.skip(f"eagle_fn.{name} does not exist yet")
    return found


def function(name: str, backend: str, device: torch.device) -> Callable[..., Any]:
    """``eagle_fn.<name>`` for torch; for triton the kernel, or a pytest skip saying why not."""
    if backend == "torch":
        return reference(name)
    fn = kernel(name)
    if fn is None:
        pytest.skip(f"eagle_fn.kernels.{name} is not importable")
    if device.type == "cpu" and not interpreting():
        pytest.skip("Triton on a CPU runs only with TRITON_INTERPRET=1")
    return fn


def record_backend(
    benchmark: Any,
    path: str,
    case: Any,
    name: str,
    backend: str,
    *args: object,
    options: dict[str, object] | None = None,
    **kwargs: Any,
) -> None:
    """``record``s ``eagle_fn.<name>(*args, **options)`` on ``backend``; a Triton result must
    equal torch's bit for bit first. Interpreted Triton is checked, then skipped when timing
    is on (with ``--benchmark-disable`` it runs through ``record`` once, untimed).

    ``kwargs`` go to ``record`` (``device`` is required: it decides where Triton may run).
    """
    device = kwargs["device"]
    fn = partial(function(name, backend, device), **(options or {}))
    if backend != "torch" and device.type == "cpu" and case.bs > INTERPRETED_MAX_BS:
        pytest.skip(
            f"the interpreter runs kernels in Python: checked at bs <= {INTERPRETED_MAX_BS}"
        )
    if backend != "torch":
        kwargs["compare"] = {**kwargs.get("compare", {}), "torch": path}
        assert_same(fn(*args), reference(name)(*args, **(options or {})))
        if device.type == "cpu" and not benchmark.disabled:
            pytest.skip("interpreted Triton is checked, not timed")
    record(benchmark, path, case, fn, *args, backend=backend, **kwargs)
