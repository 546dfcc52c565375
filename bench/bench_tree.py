"""The tree draft: organize_tree against the plain cat/topk/sort/gather on the same draft loop."""

from functools import partial

import pytest

import baselines
import inputs
from backends import BACKENDS, record_backend
from cases import TREE, TREE_REPORT, params
from eagle_fn import organize_tree
from eagle_fn.organize import tree_core
from measure import assert_same, record

TREE_PARAMS = params(TREE, report=TREE_REPORT)


@pytest.mark.parametrize("case", TREE_PARAMS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_organize_tree(benchmark, device, backend, case):
    lists = inputs.draft_lists(case.config, case.bs, device=device)
    versus = {"baseline": "tree_baseline"}
    args = (case.config, *lists)
    record_backend(
        benchmark,
        "organize_tree",
        case,
        "organize_tree",
        backend,
        *args,
        compare=versus,
        device=device,
    )


@pytest.mark.parametrize("case", TREE_PARAMS)
def test_tree_baseline(benchmark, device, case):
    lists = inputs.draft_lists(case.config, case.bs, device=device)
    organize = partial(baselines.organize_steps, num_draft_tokens=case.num_draft_tokens)
    assert_same(organize(*lists), organize_tree(case.config, *lists))
    record(benchmark, "tree_baseline", case, organize, *lists, device=device)


@pytest.mark.parametrize("case", TREE_PARAMS)
def test_organize_tree_core(benchmark, device, case):
    # organize_tree without its input checks: splits its cost against the baseline into what
    # the NaN/tie-safe selection costs and what validating 3 * num_steps tensors costs.
    lists = inputs.draft_lists(case.config, case.bs, device=device)
    versus = {"baseline": "tree_baseline"}
    args = (case.config, *lists)
    record(benchmark, "organize_tree_core", case, tree_core, *args, compare=versus, device=device)
