"""CUDA figures of one call: host µs in a loop, CUDA-graph replay µs and kernel launches.

Each figure is measured the way a serving engine pays for it:

- ``host_us``: calls issued back to back and synchronized only at the two ends, so the
  figure is whichever is slower per call, the host issuing launches or the GPU running them;
  the median of 7 loops of 100 calls (``host_min_us``: the fastest). The garbage collector
  is off while they run, as ``timeit`` has it: a benchmark process holds many objects, and a
  full collection landing in a loop times the process, not the call;
- ``graph_us``: one call captured into a ``torch.cuda.CUDAGraph`` and replayed, timed with
  CUDA events: the GPU time of the call with every host cost removed, its inputs in L2
  where they fit (each replay reads what the last one did);
- ``graph_flushed_us``: the same replays, each timed alone after a write that evicts L2: the
  inputs come from DRAM, the case of an engine's target rows (issue 11's bound is a DRAM
  read);
- ``kernels``: kernel nodes of a CUDA graph captured from one call, copies and memsets
  counted apart (``eagle_fn.profiling.count_launches``). Not ``torch.profiler``: Kineto
  keeps CUPTI attached after a session, which can slow every later launch in the process
  (pytorch/pytorch#144455), and each case's host loop follows the cases before it.

Nothing here needs a GPU to import; the logic that does not touch one (the timing loops, event
classification, error capture) is checked on the CPU by ``bench/test_gpu.py``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from eagle_fn.profiling import Launches, capture_graph, count_launches


def synchronize_on(device: torch.device) -> Callable[[], None]:
    """A no-argument synchronize for ``device``: waits for CUDA, does nothing on a CPU."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def host_loops_us(
    fn: Callable[..., object],
    args: tuple[object, ...],
    *,
    sync: Callable[[], None],
    calls: int = 100,
    repeat: int = 7,
    warmup: int = 10,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """µs per call of each of ``repeat`` loops; each loop of ``calls`` calls is bracketed by
    ``sync()`` and never synchronized inside, with the garbage collector off."""
    for _ in range(warmup):
        fn(*args)
    loops = []
    with collector_off():
        for _ in range(repeat):
            sync()
            start = clock()
            for _ in range(calls):
                fn(*args)
            sync()
            loops.append((clock() - start) / calls * 1e6)
    return loops


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """Python's garbage collector off inside; on again after, if it was on before."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def graph_replay_us(
    fn: Callable[..., object], args: tuple[object, ...], *, replays: int = 200, warmup: int = 3
) -> float:
    """µs per replay of one call captured into a CUDA graph, replayed back to back and timed
    with CUDA events. What the call reads stays in L2 from one replay to the next where it
    fits (bs 32 rows of 128256 float32 are 16 MB; an H100's L2 holds 50, and
    ``bench/sweep_sampling.py`` prints the size where it runs): see :func:`flushed_replay_us`."""
    graph = captured(fn, args, warmup)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / replays  # elapsed_time is in ms


def flushed_replay_us(
    fn: Callable[..., object], args: tuple[object, ...], *, replays: int = 50, warmup: int = 3
) -> float:
    """µs per replay as :func:`graph_replay_us` captures it, each replay timed alone after
    overwriting :func:`flush_bytes` of memory: the call reads its inputs from DRAM, as an
    engine's verification reads target rows among many more written before it (a softmax over
    ``[bs, N, V]`` outgrows L2), with written lines to evict as it goes. The overwrite takes
    the GPU longer than the host takes to queue the replay behind it, so each timing holds
    the replay's device time and no host time."""
    graph = captured(fn, args, warmup)
    flush = flush_buffer(torch.cuda.current_device())
    timed = []
    for _ in range(replays):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        timed.append((start, end))
    timed[-1][1].synchronize()
    return sum(start.elapsed_time(end) for start, end in timed) * 1e3 / replays


def flush_bytes(l2_bytes: int) -> int:
    """What overwrites an L2 of ``l2_bytes``: twice it, and at least 256 MiB (at a few TB/s,
    tens of µs of GPU time, longer than a replay and two events take to queue)."""
    return max(2 * l2_bytes, 256 << 20)


@functools.cache
def flush_buffer(device_index: int) -> torch.Tensor:
    """One buffer of :func:`flush_bytes` per device, kept for the process."""
    l2 = torch.cuda.get_device_properties(device_index).L2_cache_size
    return torch.empty(flush_bytes(l2), dtype=torch.uint8, device=f"cuda:{device_index}")


def captured(fn: Callable[..., object], args: tuple[object, ...], warmup: int) -> Any:
    """A ``torch.cuda.CUDAGraph`` of ``fn(*args)`` (``warmup`` calls first, on a side
    stream), replayed once: the first replay uploads it."""
    graph = capture_graph(functools.partial(fn, *args), warmup=warmup)
    graph.replay()
    return graph


def profiled_events(fn: Callable[..., object], args: tuple[object, ...], calls: int) -> Any:
    """``torch.profiler``'s events of ``calls`` calls of ``fn(*args)``, after a warm-up call.
    Kineto leaves CUPTI attached after the session (``eagle_fn.profiling.count_launches``
    says why that matters): open one only after every timing a process takes."""
    fn(*args)
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    return prof.events()


def device_us_by_name(events: Iterable[Any], calls: int) -> dict[str, float]:
    """Device µs a call of each kernel or copy among profiler events (``calls`` calls
    recorded), by name, in the order they first ran."""
    totals: dict[str, float] = {}
    for event in events:
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] = totals.get(event.name, 0.0) + event.time_range.elapsed_us()
    return {name: us / calls for name, us in totals.items()}


def device_us_per_call(
    fn: Callable[..., object], args: tuple[object, ...], calls: int = 20
) -> dict[str, float]:
    """Device µs a call of each kernel ``fn(*args)`` launches, from ``torch.profiler`` over
    ``calls`` eager calls after a warm-up call: the kernels' own time, without the launches
    and the gaps between kernels that a replay also holds."""
    return device_us_by_name(profiled_events(fn, args, calls), calls)


def figure_or_error(info: dict[str, object], name: str, measure: Callable[[], object]) -> None:
    """Stores ``measure()`` as ``info[name]``, or its error as ``info[name + "_error"]``: one
    figure that cannot be taken (a path that does not capture) must not hide the others."""
    try:
        info[name] = measure()
    except Exception as error:  # recorded: the report shows it
        info[name + "_error"] = f"{type(error).__name__}: {error}"[:200]


def cuda_figures(fn: Callable[..., object], args: tuple[object, ...]) -> dict[str, object]:
    """``host_us`` (the median loop), ``host_min_us`` (the fastest: the least interference from
    the rest of the machine), ``graph_us``, ``graph_flushed_us`` (L2 flushed before each
    replay), ``kernels`` and ``copies`` of ``fn(*args)`` on CUDA."""
    info: dict[str, object] = {}
    sync = synchronize_on(torch.device("cuda"))
    figure_or_error(info, "host_us", lambda: host_loops_us(fn, args, sync=sync))
    loops = info.get("host_us")
    if isinstance(loops, list):
        info.update(host_us=statistics.median(loops), host_min_us=min(loops))
    figure_or_error(info, "launches", lambda: count_launches(fn, *args))
    launches = info.pop("launches", None)
    if isinstance(launches, Launches):
        info.update(launches._asdict())
    figure_or_error(info, "graph_us", lambda: graph_replay_us(fn, args))
    figure_or_error(info, "graph_flushed_us", lambda: flushed_replay_us(fn, args))
    return info
