"""One draft step: select_top_k at step 0 and at a later step."""

import pytest

import inputs
from cases import SELECT, SELECT_REPORT, params
from eagle_fn import select_top_k
from measure import record


@pytest.mark.parametrize("step", [0, 1], ids=["step0", "step1"])
@pytest.mark.parametrize("case", params(SELECT, report=SELECT_REPORT))
def test_select_top_k(benchmark, case, step):
    topk_p, topk_index, scores = inputs.step_inputs(case.config, step, case.bs)
    args = (case.config, step, topk_p, topk_index, scores)
    record(benchmark, f"select_top_k_step{step}", case, select_top_k, *args)
