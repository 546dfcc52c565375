"""The DraftOrganizer worker, eager and compiled: shape guard, dispatch and compiled graphs."""

import pytest

import inputs
from cases import (
    CHAIN_REPORT,
    MAX_BS,
    WORKER_CHAIN,
    WORKER_TREE,
    WORKER_TREE_REPORT,
    Mode,
    mode_params,
)
from eagle_fn import DraftOrganizer
from measure import graphs_of, record


def bench_worker(benchmark, graph_sweeps, device, mode, case, path, method, make_inputs, versus):
    """Times ``method`` of a worker for ``case`` (inputs from ``make_inputs(bs)``) and counts
    its compiled graphs over the batch sweep."""
    compile = mode is Mode.COMPILED
    organizer = DraftOrganizer(case.config, max_bs=MAX_BS, device=device, compile=compile)
    call = getattr(organizer, method)
    graphs = graphs_of(graph_sweeps, path, organizer, lambda bs: call(*make_inputs(bs)))
    args = make_inputs(case.bs)
    record(
        benchmark, path, case, call, *args, mode=mode, compare=versus, graphs=graphs, device=device
    )


@pytest.mark.parametrize(("mode", "case"), mode_params(WORKER_CHAIN, report=CHAIN_REPORT))
def test_worker_chain(benchmark, graph_sweeps, device, mode, case):
    def make_inputs(bs):
        return inputs.multilayer(bs, case.num_steps, device=device)  # [bs, S] each

    versus = {"baseline": "chain_baseline", "floor": "floor"}
    where = (benchmark, graph_sweeps, device, mode, case)
    bench_worker(*where, "worker_chain", "organize", make_inputs, versus)


@pytest.mark.parametrize(("mode", "case"), mode_params(WORKER_TREE, report=WORKER_TREE_REPORT))
def test_worker_tree(benchmark, graph_sweeps, device, mode, case):
    def make_inputs(bs):
        return inputs.draft_lists(case.config, bs, device=device)

    where = (benchmark, graph_sweeps, device, mode, case)
    bench_worker(
        *where, "worker_tree", "organize_steps", make_inputs, {"baseline": "tree_baseline"}
    )
