"""The fixed cost of a compiled call on CPU under the inductor options eagle_fn weighed."""

import pytest

import inputs
from cases import CHAIN_TARGET, MAX_BS, TREE_TARGET, params
from eagle_fn import _compile, chain_constants
from eagle_fn.chain import chain_core
from eagle_fn.organize import tree_core
from measure import record

# eagle_fn compiles with {"size_asserts": False}; the others are what it was measured against.
# Each goes through _compile, so the dynamic batch is declared the way this torch supports.
VARIANTS = {
    "inductor_defaults": {"options": {}},
    "eagle_fn": {},
    "cpp_wrapper": {"options": {"size_asserts": False, "cpp_wrapper": True}},
    "eager_backend": {"backend": "eager"},
}


def compiled(fn, shapes, variant):
    return _compile.compile_fn(fn, enabled=True, shapes=shapes, **VARIANTS[variant])


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("case", params([CHAIN_TARGET], report=[CHAIN_TARGET]))
def test_compiled_chain(benchmark, case, variant):
    constants = chain_constants(case.config, max_bs=MAX_BS, device="cpu")
    shapes = {"topk_index": _compile.Batch(2, max=MAX_BS)}
    _, topk_index = inputs.multilayer(case.bs, case.num_steps)  # [bs, S]
    fn = compiled(chain_core, shapes, variant)
    versus = {"baseline": "organize_chain"}
    record(benchmark, f"compiled_chain_{variant}", case, fn, constants, topk_index, compare=versus)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("case", params([TREE_TARGET], report=[TREE_TARGET]))
def test_compiled_tree(benchmark, case, variant):
    steps = case.num_steps
    shapes = {
        "score_list": _compile.Batch(3, length=steps),
        "token_list": _compile.Batch(2, length=steps),
        "parents_list": _compile.Batch(2, length=steps),
    }
    lists = inputs.draft_lists(case.config, case.bs)
    fn = compiled(tree_core, shapes, variant)
    versus = {"baseline": "organize_tree_core"}
    record(benchmark, f"compiled_tree_{variant}", case, fn, case.config, *lists, compare=versus)
