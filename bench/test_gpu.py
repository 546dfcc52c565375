"""Checks of bench/gpu.py: its GPU-free logic on any machine, its CUDA figures on a GPU."""

import contextlib
from types import SimpleNamespace

import pytest
import torch

import gpu
from eagle_fn.profiling import Launches

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class FakeClock:
    """A clock that only the timed function advances: each call costs ``step`` seconds."""

    def __init__(self, step):
        self.now, self.step, self.calls = 0.0, step, 0

    def __call__(self):
        return self.now

    def call(self):
        self.now += self.step
        self.calls += 1


def test_host_loops_are_the_per_call_time_of_loops_synced_at_their_ends():
    clock, syncs = FakeClock(2.5e-6), []
    loops = gpu.host_loops_us(
        clock.call,
        (),
        sync=lambda: syncs.append(clock.calls),
        calls=8,
        repeat=3,
        warmup=2,
        clock=clock,
    )
    assert loops == pytest.approx([2.5] * 3, rel=1e-9)
    assert clock.calls == 2 + 8 * 3
    # Two syncs per loop, at its ends: before its first call and after its last.
    assert syncs == [2, 10, 10, 18, 18, 26]


@pytest.mark.parametrize("enabled", [True, False], ids=["on", "off"])
def test_host_loops_run_with_the_collector_off(enabled):
    import gc

    seen = []
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        gpu.host_loops_us(lambda: seen.append(gc.isenabled()), (), sync=lambda: None, calls=2,
                          repeat=2, warmup=1)  # fmt: skip
        assert seen == [enabled, False, False, False, False]  # the warm-up as it was
        assert gc.isenabled() is enabled  # restored
    finally:
        (gc.enable if was else gc.disable)()


def test_host_loops_us_gives_each_loop():
    clock = FakeClock(1e-6)
    steps = iter([1e-6] * 2 + [1e-6] * 4 + [2e-6] * 4 + [9e-6] * 4)  # warm-up, then 3 loops

    def call():
        clock.step = next(steps)
        clock.call()

    loops = gpu.host_loops_us(call, (), sync=lambda: None, calls=4, repeat=3, warmup=2,
                              clock=clock)  # fmt: skip
    assert loops == pytest.approx([1.0, 2.0, 9.0])


def test_cuda_synchronize_waits_for_that_device(monkeypatch):
    seen = []
    monkeypatch.setattr(torch.cuda, "synchronize", seen.append)
    gpu.synchronize_on(torch.device("cuda", 1))()
    assert seen == [torch.device("cuda", 1)]


def test_cuda_figures_gather_host_launches_and_replay(monkeypatch):
    monkeypatch.setattr(gpu, "host_loops_us", lambda fn, args, sync: [3.0, 1.5, 9.0])
    monkeypatch.setattr(gpu, "count_launches", lambda fn, *args: Launches(4, 1))
    monkeypatch.setattr(gpu, "graph_replay_us", lambda fn, args: 2.0)
    monkeypatch.setattr(gpu, "flushed_replay_us", lambda fn, args: 2.5)
    figures = gpu.cuda_figures(lambda: None, ())
    want = {"host_us": 3.0, "host_min_us": 1.5, "kernels": 4, "copies": 1, "graph_us": 2.0}
    assert figures == {**want, "graph_flushed_us": 2.5}


def test_cuda_figures_keep_a_host_error(monkeypatch):
    def broken(fn, args, sync):
        raise RuntimeError("no GPU")

    monkeypatch.setattr(gpu, "host_loops_us", broken)
    monkeypatch.setattr(gpu, "count_launches", lambda fn, *args: Launches(4, 1))
    monkeypatch.setattr(gpu, "graph_replay_us", lambda fn, args: 2.0)
    monkeypatch.setattr(gpu, "flushed_replay_us", lambda fn, args: 2.5)
    figures = gpu.cuda_figures(lambda: None, ())
    assert figures == {"host_us_error": "RuntimeError: no GPU", "kernels": 4, "copies": 1,
                       "graph_us": 2.0, "graph_flushed_us": 2.5}  # fmt: skip


def test_figure_or_error_keeps_a_figure_or_records_its_error():
    info = {}
    gpu.figure_or_error(info, "graph_us", lambda: 1.5)
    gpu.figure_or_error(info, "kernels", lambda: [][0])
    assert info == {"graph_us": 1.5, "kernels_error": "IndexError: list index out of range"}


class FakeCuda:
    """The ``torch.cuda`` names the replay timings use, logging each step: calls of the timed
    function by stream or capture, replays, and events whose intervals say ``elapsed`` ms, in
    turn."""

    def __init__(self, *elapsed):
        self.log, self.where, self.elapsed = [], "current", list(elapsed)
        test = self

        class Stream:
            def wait_stream(self, other):
                test.log.append("wait")

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing

            def record(self):
                test.log.append("record")

            def synchronize(self):
                test.log.append("sync")

            def elapsed_time(self, end):
                return test.elapsed.pop(0)

        class CUDAGraph:
            def __init__(self, keep_graph=False):
                assert not keep_graph  # timings replay: nothing reads the nodes

            def replay(self):
                test.log.append("replay")

        self.Stream, self.Event, self.CUDAGraph = Stream, Event, CUDAGraph

    def current_stream(self):
        return self.Stream()

    def current_device(self):
        return 3

    @contextlib.contextmanager
    def stream(self, stream):
        self.where = "side"
        yield
        self.where = "current"

    @contextlib.contextmanager
    def graph(self, graph):
        self.where = "capture"
        yield
        self.where = "current"


def test_graph_replay_us_warms_on_a_side_stream_and_times_replays_in_us(monkeypatch):
    fake = FakeCuda(3.0)  # ms for all timed replays
    for name in ("Stream", "Event", "CUDAGraph", "current_stream", "stream", "graph"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    us = gpu.graph_replay_us(lambda x: fake.log.append(f"call {fake.where} {x}"), (7,),
                             replays=4, warmup=2)  # fmt: skip
    assert us == 750.0  # 3 ms over 4 replays, exact in binary
    assert fake.log == [
        "wait", "call side 7", "call side 7", "wait", "call capture 7",
        "replay",  # the upload, untimed
        "record", "replay", "replay", "replay", "replay", "record", "sync",
    ]  # fmt: skip


def test_flushed_replays_are_each_timed_alone_after_a_flush(monkeypatch):
    fake = FakeCuda(0.004, 0.002, 0.009)  # ms, one interval a replay
    for name in ("Stream", "Event", "CUDAGraph", "current_stream", "stream", "graph"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    monkeypatch.setattr(torch.cuda, "current_device", fake.current_device)
    flush = SimpleNamespace(zero_=lambda: fake.log.append("flush"))
    monkeypatch.setattr(gpu, "flush_buffer", lambda index: fake.log.append(index) or flush)
    us = gpu.flushed_replay_us(lambda x: fake.log.append(f"call {fake.where} {x}"), (7,),
                               replays=3, warmup=1)  # fmt: skip
    assert us == pytest.approx(5.0)  # (4 + 2 + 9) µs over 3 replays
    assert fake.log == [
        "wait", "call side 7", "wait", "call capture 7",
        "replay",  # the upload, untimed
        3,  # the current device's flush buffer
        "flush", "record", "replay", "record",
        "flush", "record", "replay", "record",
        "flush", "record", "replay", "record",
        "sync",
    ]  # fmt: skip


def test_a_flush_overwrites_twice_the_l2_and_at_least_256_mib():
    assert gpu.flush_bytes(50 << 20) == 256 << 20  # an H200's 50 MiB
    assert gpu.flush_bytes(200 << 20) == 400 << 20


def test_device_times_are_per_call_sums_by_name_of_device_events_only():
    def timed(name, device_type, us):
        return SimpleNamespace(
            name=name, device_type=device_type, time_range=SimpleNamespace(elapsed_us=lambda: us)
        )

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    events = [
        timed("fill", cuda, 1.0),
        timed("kernel", cuda, 6.0),
        timed("cudaLaunchKernel", cpu, 50.0),  # host side: not counted
        timed("fill", cuda, 3.0),
        timed("kernel", cuda, 10.0),
    ]
    assert gpu.device_us_by_name(events, calls=2) == {"fill": 2.0, "kernel": 8.0}
    assert list(gpu.device_us_by_name(events, calls=2)) == ["fill", "kernel"]


def test_cpu_synchronize_waits_for_nothing():
    assert gpu.synchronize_on(torch.device("cpu"))() is None


@CUDA
def test_two_elementwise_ops_take_device_time_each():
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    found = gpu.device_us_per_call(lambda t: (t + 1) * 2, (x,), calls=3)
    assert len(found) == 2
    assert all(us > 0 for us in found.values())


@CUDA
def test_cuda_figures_of_a_call():
    x = torch.arange(1024, device="cuda", dtype=torch.float32)
    info = gpu.cuda_figures(lambda t: (t + 1) * 2, (x,))
    assert (info["kernels"], info["copies"]) == (2, 0)
    assert info["graph_us"] > 0
    assert info["graph_flushed_us"] > 0
    assert info["host_us"] > 0
    # A view launches nothing: the figures still come back, with zero kernels.
    assert gpu.cuda_figures(lambda t: t[:8], (x,))["kernels"] == 0


@CUDA
def test_the_flush_buffer_overwrites_twice_the_l2():
    index = torch.cuda.current_device()
    buffer = gpu.flush_buffer(index)
    l2 = torch.cuda.get_device_properties(index).L2_cache_size
    assert l2 > 0
    assert (buffer.numel(), buffer.dtype, buffer.device.index) == (
        gpu.flush_bytes(l2),
        torch.uint8,
        index,
    )
    assert gpu.flush_buffer(index) is buffer  # kept: one allocation a process
