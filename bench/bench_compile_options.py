"""The fixed cost of a compiled call on CPU under the inductor options eagle_fn weighed."""

import pytest
import torch
from torch.fx.experimental.dynamic_spec import SeqSpec, ShapeVar, TensorSpec

import inputs
from cases import CHAIN_TARGET, MAX_BS, TREE_TARGET, params
from eagle_fn import chain_constants
from eagle_fn.organize import _organize_chain, _organize_tree
from measure import record

# eagle_fn compiles with {"size_asserts": False}; the others are what it was measured against.
VARIANTS = {
    "inductor_defaults": {},
    "eagle_fn": {"options": {"size_asserts": False}},
    "cpp_wrapper": {"options": {"size_asserts": False, "cpp_wrapper": True}},
    "eager_backend": {"backend": "eager"},
}


def compiled(fn, shapes, variant):
    return torch.compile(
        fn, fullgraph=True, shapes_spec=shapes, isolate_recompiles=True, **VARIANTS[variant]
    )


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("case", params([CHAIN_TARGET], report=[CHAIN_TARGET]))
def test_compiled_chain(benchmark, case, variant):
    constants = chain_constants(case.config, max_bs=MAX_BS, device="cpu")
    shapes = {"topk_index": TensorSpec([ShapeVar("bs", max=MAX_BS), None])}
    _, topk_index = inputs.multilayer(case.bs, case.num_steps)  # [bs, S]
    fn = compiled(_organize_chain, shapes, variant)
    versus = {"baseline": "organize_chain"}
    record(benchmark, f"compiled_chain_{variant}", case, fn, constants, topk_index, compare=versus)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("case", params([TREE_TARGET], report=[TREE_TARGET]))
def test_compiled_tree(benchmark, case, variant):
    bs = ShapeVar("bs")
    steps = range(case.num_steps)
    shapes = {
        "score_list": SeqSpec([TensorSpec([bs, None, None]) for _ in steps]),
        "token_list": SeqSpec([TensorSpec([bs, None]) for _ in steps]),
        "parents_list": SeqSpec([TensorSpec([bs, None]) for _ in steps]),
    }
    lists = inputs.draft_lists(case.config, case.bs)
    fn = compiled(_organize_tree, shapes, variant)
    versus = {"baseline": "organize_tree_core"}
    record(benchmark, f"compiled_tree_{variant}", case, fn, case.config, *lists, compare=versus)
