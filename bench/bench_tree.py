"""The tree draft: organize_tree against the plain cat/topk/sort/gather on the same draft loop."""

from functools import partial

import pytest

import baselines
import inputs
from cases import TREE, TREE_REPORT, params
from eagle_fn import organize_tree
from eagle_fn.organize import _organize_tree
from measure import assert_same, record

TREE_PARAMS = params(TREE, report=TREE_REPORT)


@pytest.mark.parametrize("case", TREE_PARAMS)
def test_organize_tree(benchmark, case):
    lists = inputs.draft_lists(case.config, case.bs)
    versus = {"baseline": "tree_baseline"}
    record(benchmark, "organize_tree", case, organize_tree, case.config, *lists, compare=versus)


@pytest.mark.parametrize("case", TREE_PARAMS)
def test_tree_baseline(benchmark, case):
    lists = inputs.draft_lists(case.config, case.bs)
    organize = partial(baselines.organize_steps, num_draft_tokens=case.num_draft_tokens)
    assert_same(organize(*lists), organize_tree(case.config, *lists))
    record(benchmark, "tree_baseline", case, organize, *lists)


@pytest.mark.parametrize("case", TREE_PARAMS)
def test_organize_tree_core(benchmark, case):
    # organize_tree without its input checks: splits its cost against the baseline into what
    # the NaN/tie-safe selection costs and what validating 3 * num_steps tensors costs.
    lists = inputs.draft_lists(case.config, case.bs)
    versus = {"baseline": "tree_baseline"}
    record(
        benchmark, "organize_tree_core", case, _organize_tree, case.config, *lists, compare=versus
    )
