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


def worker(case, mode, device):
    compile = mode is Mode.COMPILED
    return DraftOrganizer(case.config, max_bs=MAX_BS, device=device, compile=compile)


@pytest.mark.parametrize(("mode", "case"), mode_params(WORKER_CHAIN, report=CHAIN_REPORT))
def test_worker_chain(benchmark, graph_sweeps, device, mode, case):
    organizer = worker(case, mode, device)
    graphs = graphs_of(
        graph_sweeps,
        "worker_chain",
        organizer,
        lambda bs: organizer.organize(*inputs.multilayer(bs, case.num_steps, device=device)),
    )
    topk_p, topk_index = inputs.multilayer(case.bs, case.num_steps, device=device)  # [bs, S]
    versus = {"baseline": "chain_baseline", "floor": "floor"}
    record(
        benchmark,
        "worker_chain",
        case,
        organizer.organize,
        topk_p,
        topk_index,
        mode=mode,
        compare=versus,
        graphs=graphs,
        device=device,
    )


@pytest.mark.parametrize(("mode", "case"), mode_params(WORKER_TREE, report=WORKER_TREE_REPORT))
def test_worker_tree(benchmark, graph_sweeps, device, mode, case):
    organizer = worker(case, mode, device)
    graphs = graphs_of(
        graph_sweeps,
        "worker_tree",
        organizer,
        lambda bs: organizer.organize_steps(*inputs.draft_lists(case.config, bs, device=device)),
    )
    lists = inputs.draft_lists(case.config, case.bs, device=device)
    versus = {"baseline": "tree_baseline"}
    record(
        benchmark,
        "worker_tree",
        case,
        organizer.organize_steps,
        *lists,
        mode=mode,
        compare=versus,
        graphs=graphs,
        device=device,
    )
