"""Deterministic and timed cost of a call: ATen ops that do work, and median microseconds."""

from __future__ import annotations

import gc
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """Counts the ATen ops that run inside the ``with`` block, views apart.

    Compile-aware: a compiled graph counts as the ops it launches at run time (its fused
    kernels are not ATen ops), never as the eager ops it replaced, and the counter does not
    force compiled calls back to eager.

    Example:
        >>> x = torch.arange(6)
        >>> with OpCounter() as counter:
        ...     _ = x[:3], x + 1
        >>> counter.total, dict(counter.ops), dict(counter.views)
        (1, {'aten.add.Tensor': 1}, {'aten.slice.Tensor': 1})
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.views: Counter[str] = Counter()

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        (self.views if func.is_view else self.ops)[str(func)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        """ATen ops that did work (views excluded)."""
        return sum(self.ops.values())


def count_ops(fn: Callable[..., object], /, *args: object, **kwargs: object) -> int:
    """Non-view ATen ops of one call ``fn(*args, **kwargs)``."""
    with OpCounter() as counter:
        fn(*args, **kwargs)
    return counter.total


COPY_EVENTS = ("Memcpy", "Memset")  # kineto's names for device copies and fills


def count_kernels(fn: Callable[..., object], /, *args: object, **kwargs: object) -> int:
    """CUDA kernels launched by one call ``fn(*args, **kwargs)``, from ``torch.profiler``;
    device copies and fills (``Memcpy``/``Memset`` events) are not kernels and not counted,
    as in the bench's ``kernels`` figure.

    Call it after a warm-up call: a first call may compile or allocate.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args, **kwargs)
        torch.cuda.synchronize()
    device = [event for event in prof.events() if event.device_type == DeviceType.CUDA]
    return sum(1 for event in device if not event.name.startswith(COPY_EVENTS))


def time_us(
    fn: Callable[..., object], /, *args: object, number: int = 200, repeat: int = 15
) -> float:
    """Median over ``repeat`` runs of the mean microseconds per call, GC off while timing."""
    for _ in range(number):  # warm caches and any lazy compilation
        fn(*args)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        runs = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                fn(*args)
            runs.append((time.perf_counter() - start) / number * 1e6)
    finally:
        if gc_was_enabled:
            gc.enable()
    return statistics.median(runs)
