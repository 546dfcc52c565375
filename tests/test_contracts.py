"""Calling a contract agrees with its full check, also when it answers from memory."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from eagle_fn import DraftConfig, DraftTree, select_top_k
from eagle_fn.contracts import _REMEMBERED, FLOAT, Arg, contract, fields
from eagle_fn.organize import MULTILAYER, ORGANIZE_TREE
from eagle_fn.verify import VERIFY_GREEDY
from helpers.profiles import examples

CHAIN = DraftConfig.chain(3)
CPU, META = torch.device("cpu"), torch.device("meta")
DTYPES = [torch.int64, torch.int32, torch.float32, torch.float16, torch.bfloat16, torch.bool]


def passes(contract_, cfg, *values, device=None):
    """Whether ``check`` accepts the call (the ground truth the remembered calls must match)."""
    try:
        contract_.check(cfg, *values, device=device, device_label="the caller")
    except (TypeError, ValueError):
        return False
    return True


def fits(contract_, cfg, *values, device=None):
    """Whether calling the contract, which may answer from memory, accepts the call."""
    try:
        contract_(cfg, *values, device=device, device_label="the caller")
    except (TypeError, ValueError):
        return False
    return True


call = st.tuples(
    st.integers(0, 3),  # bs of topk_index
    st.integers(0, 3),  # bs of topk_p
    st.integers(2, 4),  # width of topk_index (3 = num_steps fits)
    st.sampled_from(DTYPES),
    st.sampled_from(DTYPES),
    st.sampled_from([None, CPU, META]),
    st.booleans(),  # topk_p on the meta device
)


@examples(150)
@given(st.lists(call, min_size=1, max_size=8))
def test_a_call_passes_exactly_where_check_passes(calls):
    # A sequence of calls: each one after the first may be answered from the earlier ones.
    for bs, p_bs, width, index_dtype, p_dtype, device, p_meta in calls:
        topk_index = torch.zeros(bs, width, dtype=index_dtype)
        topk_p = torch.zeros(p_bs, width, dtype=p_dtype, device=META if p_meta else CPU)
        called = fits(MULTILAYER, CHAIN, topk_index, topk_p, device=device)
        assert called == passes(MULTILAYER, CHAIN, topk_index, topk_p, device=device)
        floats = (torch.float32, torch.float16, torch.bfloat16)
        exact = index_dtype == torch.int64 and p_dtype in floats and width == 3
        if exact and bs == p_bs and not p_meta and device in (None, CPU):
            assert called  # the oracle above is not vacuous: well-formed calls pass


def test_a_repeated_signature_still_honours_the_device():
    topk_index, topk_p = torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 3)
    assert fits(MULTILAYER, CHAIN, topk_index, topk_p, device=CPU)
    assert not fits(MULTILAYER, CHAIN, topk_index, topk_p, device=META)
    assert fits(MULTILAYER, CHAIN, topk_index, topk_p)
    assert fits(MULTILAYER, CHAIN, topk_index, topk_p, device=torch.device("cpu"))  # equal
    # The tensors' own devices are part of what is remembered: one moved fails again.
    assert not fits(MULTILAYER, CHAIN, topk_index, topk_p.to("meta"))


def test_a_config_rule_fails_the_fast_path_and_names_itself():
    tree_cfg = DraftConfig(2, 3, 4)
    topk_index, topk_p = torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 3)
    assert not fits(MULTILAYER, tree_cfg, topk_index, topk_p)
    with pytest.raises(ValueError, match=r"needs a chain config \(topk == 1\), got topk = 2"):
        MULTILAYER.check(tree_cfg, topk_index, topk_p)


def test_equal_configs_agree():
    topk_index, topk_p = torch.zeros(1, 3, dtype=torch.int64), torch.zeros(1, 3)
    assert fits(MULTILAYER, CHAIN, topk_index, topk_p)
    assert fits(MULTILAYER, DraftConfig.chain(3), topk_index, topk_p)
    assert not fits(MULTILAYER, DraftConfig.chain(4), topk_index, topk_p)


def test_list_arguments_take_the_full_path():
    cfg = DraftConfig(2, 2, 4)
    scores = [torch.zeros(3, 1, 2), torch.zeros(3, 2, 2)]
    tokens = [torch.zeros(3, 2, dtype=torch.int64), torch.zeros(3, 4, dtype=torch.int64)]
    parents = [torch.zeros(3, 3, dtype=torch.int64), torch.zeros(3, 2, dtype=torch.int64)]
    assert fits(ORGANIZE_TREE, cfg, scores, tokens, parents)
    assert fits(ORGANIZE_TREE, cfg, scores, tokens, parents)
    assert not fits(ORGANIZE_TREE, cfg, scores, tokens, parents[:1])
    assert not fits(ORGANIZE_TREE, cfg, scores, tokens, [parents[0], parents[0]])


def test_mixed_float_dtypes_pass_both_tiers_alike():
    pair = contract("pair", config=False, p=Arg("[n]", FLOAT), q=Arg("[n]", FLOAT))
    p, q = torch.zeros(3), torch.zeros(3, dtype=torch.float16)
    assert fits(pair, None, p, q)
    pair.check(None, p, q)
    assert not fits(pair, None, p, q.long())


def test_a_tensor_subclass_is_remembered_apart():
    topk_index, topk_p = torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 3)
    assert fits(MULTILAYER, CHAIN, topk_index, topk_p)
    assert fits(MULTILAYER, CHAIN, topk_index, torch.nn.Parameter(topk_p))  # still a Tensor

    class Duck:  # the same attributes, not a tensor
        shape, dtype, device, layout = topk_p.shape, topk_p.dtype, topk_p.device, topk_p.layout

    assert not fits(MULTILAYER, CHAIN, topk_index, Duck())


def test_a_sparse_tensor_is_remembered_apart_from_a_dense_one():
    # The same class, shape, dtype and device: only the layout tells the refused call apart.
    topk_index, topk_p = torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 3)
    assert fits(MULTILAYER, CHAIN, topk_index, topk_p)
    assert not fits(MULTILAYER, CHAIN, topk_index.to_sparse(), topk_p)


def test_a_contract_without_config_binds_its_own_symbols():
    pair = contract("pair", config=False, a=Arg("[n, 2]"), b=Arg("[n]", FLOAT))
    a, b = torch.zeros(4, 2, dtype=torch.int64), torch.zeros(4)
    assert fits(pair, None, a, b)
    assert fits(pair, None, a, b)
    assert not fits(pair, None, a, torch.zeros(5))
    with pytest.raises(ValueError, match=r"pair: b must have shape \[n\] = \[4\], got \[5\]"):
        pair.check(None, a, torch.zeros(5))


def test_a_remembered_signature_skips_the_full_check(monkeypatch):
    pair = contract("pair", config=False, a=Arg("[n]"))
    pair(None, torch.zeros(2, dtype=torch.int64))

    def fail(*args, **kwargs):
        raise AssertionError("the full check ran again")

    monkeypatch.setattr(type(pair), "check", fail)
    pair(None, torch.ones(2, dtype=torch.int64))  # same signature: answered from memory
    with pytest.raises(AssertionError, match="ran again"):
        pair(None, torch.ones(3, dtype=torch.int64))  # a new shape: checked in full


def test_remembered_calls_stay_bounded():
    # A server meets every bs up to its largest: the signatures kept per contract are capped,
    # after every call (the set empties when full), not only at the end.
    lone = contract("lone", config=False, a=Arg("[n]"))
    sizes = []
    for n in range(_REMEMBERED + 2):
        lone(None, torch.zeros(n, dtype=torch.int64))
        sizes.append(len(lone._accepted))
    assert max(sizes) == _REMEMBERED
    assert sizes[-2:] == [1, 2]


def test_a_first_call_without_signatures_is_checked():
    # Nothing is remembered yet, and the values have no signatures to remember them by.
    fresh = contract("fresh", config=False, a=Arg("[n]"))
    with pytest.raises(TypeError, match=r"fresh: a must be a torch.Tensor, got NoneType"):
        fresh(None, None)
    lists = contract("lists", b=Arg("[bs, 1]", later="[bs, 2]"))
    with pytest.raises(TypeError, match=r"lists: b must be a list of num_steps = 2 tensors"):
        lists(DraftConfig(2, 2, 4), "not a list")


TREE_CFG = DraftConfig(2, 2, 4)
SIGNATURES = {  # each contract kind, with two calls of different signatures
    "tensors": (
        contract("plain", config=False, a=Arg("[n]")),
        None,
        [(torch.zeros(2, dtype=torch.int64),), (torch.zeros(3, dtype=torch.int64),)],
    ),
    "lists": (
        contract("lists", b=Arg("[bs, 1]", later="[bs, 2]")),
        TREE_CFG,
        [
            ([torch.zeros(n, 1, dtype=torch.int64), torch.zeros(n, 2, dtype=torch.int64)],)
            for n in (2, 3)
        ],
    ),
    "fields": (
        contract("fields", tree=fields(DraftTree, parent_list=Arg("[bs, parent_width]"))),
        TREE_CFG,
        [(DraftTree(torch.zeros(n, 3, dtype=torch.int64), None, None),) for n in (2, 3)],
    ),
}


@pytest.mark.parametrize("kind", SIGNATURES)
def test_every_remembered_signature_skips_the_full_check(monkeypatch, kind):
    # Not only the last call's: any accepted one, and for list and NamedTuple arguments too.
    remembered, cfg, calls = SIGNATURES[kind]
    for values in calls:
        remembered(cfg, *values)

    def fail(*args, **kwargs):
        raise AssertionError("the full check ran again")

    monkeypatch.setattr(type(remembered), "check", fail)
    for values in calls:
        remembered(cfg, *values)


@pytest.mark.parametrize("wrong", [list, tuple])
def test_a_list_or_tuple_of_another_length_is_named(wrong):
    lists = contract("lists", b=Arg("[bs, 1]", later="[bs, 2]"))
    steps = [torch.zeros(2, 1, dtype=torch.int64), torch.zeros(2, 2, dtype=torch.int64)]
    lists(TREE_CFG, steps)
    for check in (lists, lists.check):
        for value, got in ((wrong(steps[:1]), 1), (wrong([*steps, steps[1]]), 3)):
            message = rf"^lists: b must hold num_steps = 2 tensors, got {got}$"
            with pytest.raises(ValueError, match=message):
                check(TREE_CFG, value)


def test_a_symbol_is_bound_by_its_first_occurrence():
    # A symbol not yet known is bound by the first tensor that has it, and within that
    # tensor by its first dimension: the message shows [2, 2], what the shape asked for.
    square = contract("square", config=False, m=Arg("[n, n]"))
    square(None, torch.zeros(3, 3, dtype=torch.int64))
    with pytest.raises(
        ValueError, match=r"^square: m must have shape \[n, n\] = \[2, 2\], got \[2, 3\]$"
    ):
        square(None, torch.zeros(2, 3, dtype=torch.int64))


def test_a_symbol_another_tensor_bound_is_named_with_that_tensor():
    # The wrong argument may be the one that bound bs: the message says where bs came from,
    # for each symbol another tensor gave (a config's symbols and the slot's own are plain).
    pair = contract(
        "pair",
        config=False,
        scores=Arg("[bs, k]", FLOAT),
        rows=Arg("[bs * k, m]", FLOAT),
        lone=Arg("[bs, m, k]", FLOAT),
    )
    scores, rows = torch.zeros(4, 2), torch.zeros(8, 3)
    with pytest.raises(
        ValueError,
        match=r"^pair: rows must have shape \[bs \* k, m\] = \[8, 3\], got \[6, 3\] "
        r"\(bs = 4 from scores; k = 2 from scores\)$",
    ):
        pair(None, scores, torch.zeros(6, 3), torch.zeros(4, 3, 2))
    with pytest.raises(
        ValueError,
        match=r"^pair: lone must have shape \[bs, m, k\] = \[4, 3, 2\], got \[4, 3, 5\] "
        r"\(bs = 4 from scores; m = 3 from rows; k = 2 from scores\)$",
    ):
        pair(None, scores, rows, torch.zeros(4, 3, 5))
    with pytest.raises(
        ValueError, match=r"^select_top_k: topk_p .* got \[6, 2\] \(bs = 4 from scores\)$"
    ):
        select_top_k(
            TREE_CFG, 1, torch.rand(6, 2), torch.zeros(6, 2, dtype=torch.int64), torch.rand(4, 2)
        )


def test_batch_shapes_take_each_arguments_first_alternative():
    # What the compiled paths declare dynamic: dim 0 involves bs; a list gives each step's.
    assert VERIFY_GREEDY.batch_shapes(TREE_CFG) == {
        "retrieve_index": "[bs, N]",
        "retrieve_next_token": "[bs, N]",
        "retrieve_next_sibling": "[bs, N]",
        "draft_tokens": "[bs * N]",
        "target_predict": "[bs * N]",
    }
    assert ORGANIZE_TREE.batch_shapes(TREE_CFG) == {
        "score_list": ("[bs, 1, topk]", "[bs, topk, topk]"),
        "token_list": ("[bs, topk]", "[bs, topk * topk]"),
        "parents_list": ("[bs, topk + 1]", "[bs, topk]"),
    }
