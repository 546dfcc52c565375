"""profiling.time_us on a fake clock: what it calls, what it returns, the GC state it leaves."""

import gc

import pytest

from eagle_fn import profiling


class Clock:
    """A perf_counter that moves only when the timed function says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("gc_on", [True, False])
def test_time_us_is_the_median_run_with_gc_off_while_timing(monkeypatch, gc_on):
    clock = Clock()
    monkeypatch.setattr(profiling.time, "perf_counter", clock)
    # Each call takes the µs its run is given: warm-up 100, then runs of 5, 1, 9, 3, 30.
    costs = iter([100] * 4 + [5] * 4 + [1] * 4 + [9] * 4 + [3] * 4 + [30] * 4)
    seen = []

    def fn(*args):
        seen.append((args, gc.isenabled()))
        clock.now += next(costs) * 1e-6

    was = gc.isenabled()
    (gc.enable if gc_on else gc.disable)()
    try:
        got = profiling.time_us(fn, 1, "a", number=4, repeat=5)
        after = gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
    assert got == pytest.approx(5)  # the median of the runs (their mean is 9.6), not the warm-up
    assert [args for args, _ in seen] == [(1, "a")] * 24
    assert [on for _, on in seen] == [gc_on] * 4 + [False] * 20  # warm-up as the caller had it
    assert after is gc_on


def test_time_us_restores_gc_when_the_function_raises():
    calls = []

    def fn():
        calls.append(gc.isenabled())
        if len(calls) > 2:
            raise RuntimeError("fails while timed")

    gc.enable()
    with pytest.raises(RuntimeError, match="fails while timed"):
        profiling.time_us(fn, number=2, repeat=3)
    assert gc.isenabled()
    assert calls == [True, True, False]
