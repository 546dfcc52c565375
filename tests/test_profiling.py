"""profiling.time_us on a fake clock (what it calls, what it returns, the GC state it leaves);
the launch counter on a fake CUDA driver (tests/test_cuda_graphs.py checks it against
torch.profiler on a GPU; bench/test_gpu.py logs capture_graph's order through bench/gpu.py)."""

import gc
from types import SimpleNamespace

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


class FakeDriver:
    """Graphs as lists of node handles, node types by handle, child graphs by node."""

    def __init__(self, graphs, types, children):
        self.graphs, self.types, self.children = graphs, types, children

    def nodes(self, graph):
        return self.graphs[graph]

    def node_type(self, node):
        return self.types[node]

    def child_graph(self, node):
        return self.children[node]


KERNEL, MEMCPY, MEMSET, CHILD, EVENT = 0, 1, 2, 4, 7  # CUgraphNodeType, from cuda.h
# Graph 1: a kernel, a child graph (a memcpy, a kernel, and a child of its own with one
# memset), a memset and an event record node; graph 5 is empty.
NESTED = FakeDriver(
    graphs={1: [10, 11, 12, 13], 2: [20, 21, 22], 3: [30], 5: []},
    types={
        10: KERNEL,
        11: CHILD,
        12: MEMSET,
        13: EVENT,
        20: MEMCPY,
        21: KERNEL,
        22: CHILD,
        30: MEMSET,
    },
    children={11: 2, 22: 3},
)


def test_node_types_walk_child_graphs_in_place():
    assert list(profiling._node_types(1, NESTED)) == [KERNEL, MEMCPY, KERNEL, MEMSET, MEMSET, EVENT]
    assert list(profiling._node_types(5, NESTED)) == []


@pytest.mark.parametrize(("graph", "want"), [(1, (2, 3)), (5, (0, 0))], ids=["nested", "empty"])
def test_launches_are_kernel_nodes_and_copy_or_fill_nodes(monkeypatch, graph, want):
    calls, captures = [], []

    def capture_graph(call, *, warmup=1, keep_graph=False):
        captures.append((warmup, keep_graph))
        call()
        return SimpleNamespace(raw_cuda_graph=lambda: graph)

    monkeypatch.setattr(profiling, "capture_graph", capture_graph)
    monkeypatch.setattr(profiling, "_driver", lambda: NESTED)
    got = profiling.count_launches(lambda *a, **k: calls.append((a, k)), 1, x=2)
    assert got == profiling.Launches(*want)
    assert calls == [((1,), {"x": 2})]
    assert captures == [(1, True)]  # the graph kept, to read its nodes
    assert profiling.count_kernels(lambda: None) == want[0]
