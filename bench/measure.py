"""One benchmark record: the timed callable, with its ATen ops, compiled graphs and, on CUDA,
its host, graph-replay and kernel figures beside it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any, NamedTuple

import torch
import torch._dynamo
from torch._dynamo.utils import counters

import gpu
from cases import MAX_BS, Case, Mode
from eagle_fn.profiling import OpCounter

CPU = torch.device("cpu")


class GraphCount(NamedTuple):
    """What compiling one path cost over a batch-size sweep."""

    graphs: int
    graph_breaks: int
    sweep: str  # the batch sizes, e.g. "1..256"


def count_graphs(call_at: Callable[[int], object], batch_sizes: Iterable[int]) -> GraphCount:
    """Compiles from scratch, calls ``call_at(bs)`` over the sweep, reads dynamo's counters.

    ``torch._dynamo.reset()`` forgets compiled code but not the counters: clear them too.
    """
    sizes = list(batch_sizes)
    torch._dynamo.reset()
    counters.clear()
    for bs in sizes:
        call_at(bs)
    graphs = counters["stats"]["unique_graphs"]
    breaks = sum(counters["graph_break"].values())
    return GraphCount(graphs, breaks, f"{sizes[0]}..{sizes[-1]}")


class GraphSweeps:
    """The session's graph counts, one sweep per key (a path and its config)."""

    def __init__(self) -> None:
        self._counts: dict[object, GraphCount] = {}

    def get(
        self, key: object, call_at: Callable[[int], object], batch_sizes: Iterable[int]
    ) -> GraphCount:
        if key not in self._counts:
            self._counts[key] = count_graphs(call_at, batch_sizes)
        return self._counts[key]


def graphs_of(
    graph_sweeps: GraphSweeps, path: str, organizer: Any, call_at: Callable[[int], object]
) -> GraphCount | None:
    """A compiled worker path's graphs over bs 1..MAX_BS (one sweep per path and config);
    None when the worker is eager."""
    if not organizer.compiled:
        return None
    return graph_sweeps.get((path, organizer.config), call_at, range(1, MAX_BS + 1))


def record(
    benchmark: Any,
    path: str,
    case: Case,
    fn: Callable[..., object],
    *args: object,
    mode: Mode = Mode.EAGER,
    compare: dict[str, str] | None = None,
    graphs: GraphCount | None = None,
    device: torch.device = CPU,
    backend: str = "torch",
) -> object:
    """Times ``fn(*args)`` as ``path`` on ``case`` and notes the deterministic figures beside it.

    ``benchmark.extra_info`` gets the path, backend, mode, device, case, thread count, the
    non-view ATen ops of one untimed call (after a warm-up call, so a compiled path is already
    compiled), the paths to compare against (``{"baseline": path, "floor": path}``) and the
    graph counts. On CUDA it adds ``gpu.cuda_figures`` (host µs, graph-replay µs, kernels),
    and pytest-benchmark times a call followed by a synchronize: one call's latency.
    """
    fn(*args)  # warm-up: compiles a compiled path outside the timing
    with OpCounter() as counter:
        fn(*args)
    info = benchmark.extra_info
    info.update(path=path, backend=backend, mode=mode.value, device=device.type, **asdict(case))
    info.update(threads=torch.get_num_threads(), ops=counter.total, op_names=dict(counter.ops))
    if compare:
        info["compare"] = compare
    if graphs is not None:
        info.update(graphs._asdict())
    if device.type != "cuda":
        return benchmark(fn, *args)
    info.update(gpu.cuda_figures(fn, args))
    sync = gpu.synchronize_on(device)
    return benchmark(lambda: (fn(*args), sync())[0])


def assert_same(actual: tuple[torch.Tensor, ...], expected: tuple[torch.Tensor, ...]) -> None:
    """A baseline computes what eagle_fn computes: equal fields, dtypes and shapes, exactly."""
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
