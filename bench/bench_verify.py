"""Verify-ready trees: the chain's cached constants against the general build_verify_tree."""

from functools import partial

import pytest
import torch

import inputs
from cases import CHAIN, CHAIN_REPORT, MAX_BS, TREE_SWEEP, TREE_TARGET, Mode, mode_params, params
from eagle_fn import DraftOrganizer, MaskMode, build_verify_tree
from measure import graphs_of, record

MASKS = [MaskMode.QLEN, MaskMode.BITPACKED]
MASK_IDS = [mode.value for mode in MASKS]
VERIFY_TREE = [case for case in TREE_SWEEP if case.bs in (1, 8, 32, 256)]


def verify_inputs(case):
    """An organized tree, bonus tokens and sequence lengths for ``case``, built eagerly."""
    organizer = DraftOrganizer(case.config, max_bs=MAX_BS, device="cpu", compile=False)
    if case.topk == 1:
        tree = organizer.organize(*inputs.multilayer(case.bs, case.num_steps))
    else:
        tree = organizer.organize_steps(*inputs.draft_lists(case.config, case.bs))
    gen = inputs.generator(1)
    bonus = torch.randint(0, inputs.VOCAB, (case.bs,), generator=gen)  # [bs]
    seq_lens = torch.randint(16, 4096, (case.bs,), generator=gen)  # [bs]
    return tree, bonus, seq_lens


@pytest.mark.parametrize("mask", MASKS, ids=MASK_IDS)
@pytest.mark.parametrize(
    ("mode", "case"),
    mode_params({Mode.EAGER: CHAIN, Mode.COMPILED: CHAIN_REPORT}, report=CHAIN_REPORT),
)
def test_worker_chain_verify(benchmark, graph_sweeps, mode, case, mask):
    organizer = DraftOrganizer(
        case.config, max_bs=MAX_BS, device="cpu", compile=mode is Mode.COMPILED
    )
    path = f"worker_chain_verify_{mask.value}"
    build = partial(organizer.build_verify, mask_mode=mask)
    graphs = graphs_of(
        graph_sweeps, path, organizer, lambda bs: build(*verify_inputs(case.at_bs(bs)))
    )
    versus = {"baseline": f"verify_tree_{mask.value}"}
    args = verify_inputs(case)
    record(benchmark, path, case, build, *args, mode=mode, compare=versus, graphs=graphs)


@pytest.mark.parametrize("mask", MASKS, ids=MASK_IDS)
@pytest.mark.parametrize("case", params(CHAIN + VERIFY_TREE, report=[*CHAIN_REPORT, TREE_TARGET]))
def test_build_verify_tree(benchmark, case, mask):
    args = verify_inputs(case)
    build = partial(build_verify_tree, case.config, mask_mode=mask)
    record(benchmark, f"verify_tree_{mask.value}", case, build, *args)


@pytest.mark.parametrize(
    ("mode", "case"),
    mode_params({Mode.EAGER: VERIFY_TREE, Mode.COMPILED: [TREE_TARGET]}, report=[TREE_TARGET]),
)
def test_worker_tree_verify(benchmark, graph_sweeps, mode, case):
    # The general build is tens of small ops: the one path where compiling pays off on a CPU.
    organizer = DraftOrganizer(
        case.config, max_bs=MAX_BS, device="cpu", compile=mode is Mode.COMPILED
    )
    path = "worker_tree_verify_qlen"
    build = organizer.build_verify
    graphs = graphs_of(
        graph_sweeps, path, organizer, lambda bs: build(*verify_inputs(case.at_bs(bs)))
    )
    record(benchmark, path, case, build, *verify_inputs(case), mode=mode, graphs=graphs)
