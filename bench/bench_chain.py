"""The chain draft: the zero-op fast path against the floor, the engines' and the general path."""

import pytest

import baselines
import inputs
from cases import CHAIN, CHAIN_REPORT, MAX_BS, params
from eagle_fn import chain_constants, organize_chain, organize_multilayer
from measure import assert_same, record

CHAIN_PARAMS = params(CHAIN, report=CHAIN_REPORT)
VERSUS = {"baseline": "chain_baseline", "floor": "floor"}


@pytest.mark.parametrize("case", CHAIN_PARAMS)
def test_floor(benchmark, device, case):
    _, topk_index = inputs.multilayer(case.bs, case.num_steps, device=device)  # [bs, S]
    floor = baselines.floor(MAX_BS, case.num_steps, case.bs, device=device)
    record(benchmark, "floor", case, floor, topk_index, device=device)


@pytest.mark.parametrize("case", CHAIN_PARAMS)
def test_organize_chain(benchmark, device, case):
    constants = chain_constants(case.config, max_bs=MAX_BS, device=device)
    _, topk_index = inputs.multilayer(case.bs, case.num_steps, device=device)  # [bs, S]
    args = (constants, topk_index)
    record(benchmark, "organize_chain", case, organize_chain, *args, compare=VERSUS, device=device)


@pytest.mark.parametrize("case", CHAIN_PARAMS)
def test_chain_baseline(benchmark, device, case):
    topk_p, topk_index = inputs.multilayer(case.bs, case.num_steps, device=device)  # [bs, S] each
    organize = baselines.organize_chain_steps
    assert_same(organize(topk_p, topk_index), organize_multilayer(case.config, topk_p, topk_index))
    versus = {"floor": "floor"}
    args = (topk_p, topk_index)
    record(benchmark, "chain_baseline", case, organize, *args, compare=versus, device=device)


@pytest.mark.parametrize("case", CHAIN_PARAMS)
def test_organize_multilayer(benchmark, device, case):
    topk_p, topk_index = inputs.multilayer(case.bs, case.num_steps, device=device)  # [bs, S] each
    args = (case.config, topk_p, topk_index)
    path = "organize_multilayer"
    record(benchmark, path, case, organize_multilayer, *args, compare=VERSUS, device=device)
