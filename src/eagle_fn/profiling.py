"""Deterministic and timed cost of a call: ATen ops that do work, CUDA launches counted in a
captured graph, and median microseconds."""

from __future__ import annotations

import ctypes
import functools
import gc
import statistics
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

import torch
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


class Launches(NamedTuple):
    """Device work of one call: kernel launches, and copies and fills (memcpy, memset)."""

    kernels: int
    copies: int


# CUgraphNodeType values of the CUDA driver API (stable since CUDA 10).
_KERNEL_NODE, _MEMCPY_NODE, _MEMSET_NODE, _CHILD_GRAPH_NODE = 0, 1, 2, 4


def count_launches(fn: Callable[..., object], /, *args: object, **kwargs: object) -> Launches:
    """Kernels, and copies and fills, that one call ``fn(*args, **kwargs)`` launches on the
    current CUDA device: the nodes of a CUDA graph captured from the call, after one warm-up
    call on a side stream (a first call may compile or allocate; capture needs it off the
    graph's stream). The call must be capturable: no host sync, no pageable copy. Child
    graphs count as their nodes; other nodes (events, conditionals) are not counted.

    Not ``torch.profiler``: Kineto keeps CUPTI attached after a session (it tears it down only
    where ``TEARDOWN_CUPTI=1``), which can slow every later launch in the process
    (pytorch/pytorch#144455): a timing taken after a count could time CUPTI. A capture
    leaves nothing behind.
    """
    with warnings.catch_warnings():  # a call that launches nothing makes an empty graph
        warnings.filterwarnings("ignore", "The CUDA Graph is empty")
        graph = capture_graph(functools.partial(fn, *args, **kwargs), keep_graph=True)
    kinds = Counter(_node_types(graph.raw_cuda_graph(), _driver()))
    return Launches(kinds[_KERNEL_NODE], kinds[_MEMCPY_NODE] + kinds[_MEMSET_NODE])


def count_kernels(fn: Callable[..., object], /, *args: object, **kwargs: object) -> int:
    """CUDA kernels one call ``fn(*args, **kwargs)`` launches (:func:`count_launches`):
    copies and fills are not kernels and not counted, as in the bench's ``kernels`` figure."""
    return count_launches(fn, *args, **kwargs).kernels


def capture_graph(
    call: Callable[[], object], *, warmup: int = 1, keep_graph: bool = False
) -> torch.cuda.CUDAGraph:
    """A ``torch.cuda.CUDAGraph`` of one ``call()``, after ``warmup`` calls on a side stream,
    as capture requires (lazy initialization and the allocator's first blocks stay out of
    the graph). ``keep_graph`` keeps the graph's nodes readable (``raw_cuda_graph``),
    uninstantiated."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph(keep_graph=keep_graph)
    with torch.cuda.graph(graph):
        call()
    return graph


class _GraphDriver(Protocol):
    """The driver calls :func:`_node_types` makes, on raw handles (ints)."""

    def nodes(self, graph: int) -> list[int]: ...

    def node_type(self, node: int) -> int: ...

    def child_graph(self, node: int) -> int: ...


def _node_types(graph: int, cuda: _GraphDriver) -> Iterator[int]:
    """The type of every node of ``graph``, child graphs' nodes in place of theirs."""
    for node in cuda.nodes(graph):
        kind = cuda.node_type(node)
        if kind == _CHILD_GRAPH_NODE:
            yield from _node_types(cuda.child_graph(node), cuda)
        else:
            yield kind


class _CudaDriver:
    """:class:`_GraphDriver` through the CUDA driver library (``libcuda``), with ctypes."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")

    def nodes(self, graph: int) -> list[int]:
        count = ctypes.c_size_t(0)
        self._check("cuGraphGetNodes", graph, None, ctypes.byref(count))
        if count.value == 0:
            return []
        found = (ctypes.c_void_p * count.value)()
        self._check("cuGraphGetNodes", graph, found, ctypes.byref(count))
        return [node or 0 for node in found[: count.value]]

    def node_type(self, node: int) -> int:
        kind = ctypes.c_int(-1)
        self._check("cuGraphNodeGetType", node, ctypes.byref(kind))
        return kind.value

    def child_graph(self, node: int) -> int:
        child = ctypes.c_void_p()
        self._check("cuGraphChildGraphNodeGetGraph", node, ctypes.byref(child))
        return child.value or 0

    def _check(self, name: str, handle: int, *args: Any) -> None:
        result = getattr(self.lib, name)(ctypes.c_void_p(handle), *args)
        if result != 0:
            raise RuntimeError(f"{name} failed: CUresult {result}")


@functools.cache
def _driver() -> _GraphDriver:
    """The CUDA driver's graph calls, loaded once a process."""
    return _CudaDriver()


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
