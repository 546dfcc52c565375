"""Checks of bench/measure.py: graph counts per sweep, and what a CPU row records."""

import torch

import measure
from cases import Case, Mode
from test_backends import FakeBenchmark


def test_each_sweep_counts_only_its_own_graphs():
    # dynamo's counters outlive torch._dynamo.reset(): a second sweep of the same function
    # must not add the first one's graphs and breaks to its own.
    def with_a_break(x):
        y = x + 1
        torch._dynamo.graph_break()
        return y * 2

    compiled = torch.compile(with_a_break, dynamic=False)
    sweeps = [measure.count_graphs(lambda bs: compiled(torch.ones(bs)), [3]) for _ in range(2)]
    assert sweeps[0] == sweeps[1] == measure.GraphCount(graphs=2, graph_breaks=1, sweep="3..3")


def test_graph_sweeps_count_each_key_once():
    calls = []
    sweeps = measure.GraphSweeps()
    first = sweeps.get("path", calls.append, [1, 2])
    assert sweeps.get("path", calls.append, [1, 2]) is first
    assert calls == [1, 2]
    assert first.sweep == "1..2"


def test_a_cpu_row_records_its_case_ops_and_graphs_beside_one_timed_call():
    bench, case = FakeBenchmark(disabled=False), Case(2, 3, 4, 5)
    x = torch.arange(4)
    graphs = measure.GraphCount(1, 0, "1..8")
    out = measure.record(
        bench, "p", case, torch.add, x, x, mode=Mode.COMPILED, compare={"b": "q"}, graphs=graphs
    )
    assert torch.equal(out, 2 * x)
    assert bench.calls == 1
    info = bench.extra_info
    assert (info["path"], info["backend"], info["mode"], info["device"]) == (
        "p",
        "torch",
        "compiled",
        "cpu",
    )
    assert (info["bs"], info["num_steps"], info["topk"], info["num_draft_tokens"]) == (2, 3, 4, 5)
    assert (info["ops"], info["op_names"]) == (1, {"aten.add.Tensor": 1})
    assert info["threads"] == torch.get_num_threads()
    assert info["compare"] == {"b": "q"}
    assert (info["graphs"], info["graph_breaks"], info["sweep"]) == (1, 0, "1..8")
    assert "host_us" not in info  # CUDA figures only on CUDA
