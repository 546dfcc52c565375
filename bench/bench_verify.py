"""Verification: the chain's cached verify constants against the general build_verify_tree,
and greedy verification of a tree the target model agrees with."""

from functools import partial

import pytest

from backends import BACKENDS, record_backend
from cases import (
    CHAIN,
    CHAIN_REPORT,
    MAX_BS,
    TREE_LARGE,
    TREE_SWEEP,
    TREE_TARGET,
    Mode,
    mode_params,
    params,
)
from eagle_fn import DraftOrganizer, MaskMode, build_verify_tree, verify_greedy
from inputs import agreeing_target, verify_inputs
from measure import graphs_of, record

MASKS = [MaskMode.QLEN, MaskMode.BITPACKED]
MASK_IDS = [mode.value for mode in MASKS]
VERIFY_TREE = [case for case in TREE_SWEEP if case.bs in (1, 8, 32, 256)] + [TREE_LARGE]
VERIFY_PARAMS = params(CHAIN + VERIFY_TREE, report=[*CHAIN_REPORT, TREE_TARGET, TREE_LARGE])


@pytest.mark.parametrize("mask", MASKS, ids=MASK_IDS)
@pytest.mark.parametrize(
    ("mode", "case"),
    mode_params({Mode.EAGER: CHAIN, Mode.COMPILED: CHAIN_REPORT}, report=CHAIN_REPORT),
)
def test_worker_chain_verify(benchmark, graph_sweeps, device, mode, case, mask):
    organizer = DraftOrganizer(
        case.config, max_bs=MAX_BS, device=device, compile=mode is Mode.COMPILED
    )
    path = f"worker_chain_verify_{mask.value}"
    build = partial(organizer.build_verify, mask_mode=mask)
    graphs = graphs_of(
        graph_sweeps, path, organizer, lambda bs: build(*verify_inputs(case.at_bs(bs), device))
    )
    versus = {"baseline": f"verify_tree_{mask.value}"}
    args = verify_inputs(case, device)
    record(
        benchmark,
        path,
        case,
        build,
        *args,
        mode=mode,
        compare=versus,
        graphs=graphs,
        device=device,
    )


@pytest.mark.parametrize("mask", MASKS, ids=MASK_IDS)
@pytest.mark.parametrize("case", VERIFY_PARAMS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_build_verify_tree(benchmark, device, backend, case, mask):
    if mask is MaskMode.BITPACKED and case.num_draft_tokens > 32:
        pytest.skip("BITPACKED masks hold at most 32 nodes")
    args = (case.config, *verify_inputs(case, device))
    record_backend(
        benchmark,
        f"verify_tree_{mask.value}",
        case,
        "build_verify_tree",
        backend,
        *args,
        options={"mask_mode": mask},
        device=device,
    )


@pytest.mark.parametrize("case", VERIFY_PARAMS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_verify_greedy(benchmark, device, backend, case):
    verify_tree = build_verify_tree(case.config, *verify_inputs(case, device))
    target = agreeing_target(case, verify_tree)  # [bs * N]
    args = (case.config, verify_tree, target)
    # The target agrees with the draft: every request accepts at least its first child.
    assert int(verify_greedy(*args).num_accepted.min()) >= 1
    record_backend(benchmark, "verify_greedy", case, "verify_greedy", backend, *args, device=device)


@pytest.mark.parametrize(
    ("mode", "case"),
    mode_params({Mode.EAGER: VERIFY_TREE, Mode.COMPILED: [TREE_TARGET]}, report=[TREE_TARGET]),
)
def test_worker_tree_verify(benchmark, graph_sweeps, device, mode, case):
    organizer = DraftOrganizer(
        case.config, max_bs=MAX_BS, device=device, compile=mode is Mode.COMPILED
    )
    path = "worker_tree_verify_qlen"
    build = organizer.build_verify
    graphs = graphs_of(
        graph_sweeps, path, organizer, lambda bs: build(*verify_inputs(case.at_bs(bs), device))
    )
    args = verify_inputs(case, device)
    record(benchmark, path, case, build, *args, mode=mode, graphs=graphs, device=device)
