"""One draft step: select_top_k at step 0 and at a later step, beside the engines' select."""

from functools import partial

import pytest

import baselines
import inputs
from backends import BACKENDS, record_backend
from cases import SELECT, SELECT_REPORT, params
from eagle_fn import select_top_k
from measure import assert_same, record

STEPS = pytest.mark.parametrize("step", [0, 1], ids=["step0", "step1"])
SELECT_PARAMS = params(SELECT, report=SELECT_REPORT)


@pytest.mark.parametrize("case", SELECT_PARAMS)
@STEPS
@pytest.mark.parametrize("backend", BACKENDS)
def test_select_top_k(benchmark, device, backend, step, case):
    topk_p, topk_index, scores = inputs.step_inputs(case.config, step, case.bs, device=device)
    args = (case.config, step, topk_p, topk_index, scores)
    versus = {"baseline": f"select_baseline_step{step}"}
    path = f"select_top_k_step{step}"
    record_backend(
        benchmark, path, case, "select_top_k", backend, *args, compare=versus, device=device
    )


@pytest.mark.parametrize("case", SELECT_PARAMS)
@STEPS
def test_select_baseline(benchmark, device, step, case):
    # No ties almost surely (softmax draws), so plain topk selects what select_top_k selects.
    topk_p, topk_index, scores = inputs.step_inputs(case.config, step, case.bs, device=device)
    select = partial(baselines.select_step, step, topk=case.topk)
    args = (topk_p, topk_index, scores)
    assert_same(select(*args), select_top_k(case.config, step, *args))
    record(benchmark, f"select_baseline_step{step}", case, select, *args, device=device)
