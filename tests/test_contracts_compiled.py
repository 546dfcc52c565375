"""The contracts check inside a caller's own torch.compile region too.

The check reads only shapes, dtypes and devices, in plain Python that dynamo traces: valid
calls compile in one graph (``fullgraph=True``) and give eager's values; a bad call raises
the contract's error, or under ``fullgraph=True`` dynamo's error carrying it.
"""

import pytest
import torch
from torch._dynamo.exc import Unsupported
from torch._dynamo.utils import counters

import eagle_fn
from helpers.asserts import assert_trees_equal
from helpers.valid_calls import (
    BONUS,
    CHAIN_CFG,
    COINS,
    CONSTANTS,
    LISTS,
    LOGITS,
    ML_I,
    ML_P,
    SEQ_LENS,
    STEP0,
    STEP1,
    TREE,
    TREE_CFG,
    VT,
)

pytestmark = pytest.mark.compiled

PROBS = torch.softmax(LOGITS, -1)

# name: (call, valid args, the same with one argument broken, the contract's error)
CASES = {
    "select_top_k step 0": (
        lambda p, i: eagle_fn.select_top_k(TREE_CFG, 0, p, i),
        STEP0[:2],
        (STEP0[0], STEP0[1].float()),
        "select_top_k: topk_index must be an int64 tensor, got torch.float32",
    ),
    "select_top_k step 1": (
        lambda p, i, s: eagle_fn.select_top_k(TREE_CFG, 1, p, i, s),
        STEP1,
        (STEP1[0], STEP1[1], STEP1[2][:, :1]),
        "select_top_k: scores must have shape [bs, topk] = [2, 2], got [2, 1]",
    ),
    "organize_tree": (
        lambda s, t, p: eagle_fn.organize_tree(TREE_CFG, s, t, p),
        LISTS,
        (LISTS[0], [LISTS[1][0], LISTS[1][1][:, :3]], LISTS[2]),
        "organize_tree: token_list[1] must have shape [bs, topk * topk] = [2, 4], got [2, 3] "
        "(bs = 2 from score_list[0])",
    ),
    "organize_multilayer": (
        lambda p, i: eagle_fn.organize_multilayer(CHAIN_CFG, p, i),
        (ML_P, ML_I),
        (ML_P.double(), ML_I[:, :1]),
        "organize_multilayer: topk_index must have shape [bs, num_steps] = [2, 2], got [2, 1]",
    ),
    "organize_chain": (
        lambda i: eagle_fn.organize_chain(CONSTANTS, i),
        (ML_I,),
        (ML_I.int(),),
        "organize_chain: topk_index must be an int64 tensor, got torch.int32",
    ),
    "build_verify_tree": (
        lambda b, s: eagle_fn.build_verify_tree(TREE_CFG, TREE, b, s),
        (BONUS, SEQ_LENS),
        (BONUS, SEQ_LENS[:1]),
        "build_verify_tree: seq_lens must have shape [bs] = [2], got [1] "
        "(bs = 2 from tree.top_scores_index)",
    ),
    "is_valid_tree": (
        lambda p: eagle_fn.is_valid_tree(TREE_CFG, TREE._replace(parent_list=p)),
        (TREE.parent_list,),
        (TREE.parent_list[:, :2],),
        "is_valid_tree: tree.parent_list must have shape [bs, parent_width] = [2, 3], got [2, 2] "
        "(bs = 2 from tree.top_scores_index)",
    ),
    "verify_greedy": (
        lambda t: eagle_fn.verify_greedy(TREE_CFG, VT, t),
        (torch.zeros(8, dtype=torch.int64),),
        (torch.zeros(7, dtype=torch.int64),),
        "verify_greedy: target_predict must have shape [bs * N] = [8] or [bs, N] = [2, 4], got [7] "
        "(bs = 2 from verify_tree.retrieve_index)",
    ),
    "verify_sampling": (
        lambda q, u, f: eagle_fn.verify_sampling(TREE_CFG, VT, q, u, f),
        (PROBS, *COINS),
        (PROBS, COINS[0][:, :3], COINS[1]),
        "verify_sampling: uniforms must have shape [bs, N] = [2, 4], got [2, 3] "
        "(bs = 2 from verify_tree.retrieve_index)",
    ),
    "target_probs_from_logits": (
        lambda x, t: eagle_fn.target_probs_from_logits(x, t),
        (LOGITS, torch.ones(2)),
        (LOGITS, torch.ones(3)),
        "target_probs_from_logits: logits must have shape [bs, N, V] = [3, N, V] or "
        "[rows, V], got [2, 4, 6] (bs = 3 from temperature)",
    ),
}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("dynamic", [None, True], ids=["default", "dynamic"])
@pytest.mark.parametrize("name", list(CASES))
def test_valid_calls_compile_in_one_graph_with_eager_values(name, dynamic):
    call, valid, _, _ = CASES[name]
    compiled = torch.compile(call, backend="eager", fullgraph=True, dynamic=dynamic)
    got, want = compiled(*valid), call(*valid)
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    else:
        assert_trees_equal(got, want)


def test_the_step_may_be_an_argument_of_the_callers_compile():
    # A draft loop compiled once, called with step 1, 2, 3: dynamo makes the int symbolic
    # once it changes, and select_top_k's checks branch on it.
    cfg = eagle_fn.DraftConfig(2, 4, 5)
    compiled = torch.compile(eagle_fn.select_top_k, backend="eager", fullgraph=True)
    gen = torch.Generator().manual_seed(0)
    for step in (1, 2, 3):
        p, s = torch.rand(4, 2, generator=gen), torch.rand(2, 2, generator=gen)
        i = torch.randint(0, 9, (4, 2), generator=gen)
        assert_trees_equal(compiled(cfg, step, p, i, s), eagle_fn.select_top_k(cfg, step, p, i, s))


@pytest.mark.parametrize("name", list(CASES))
def test_bad_calls_raise_the_contracts_error(name):
    call, _, broken, message = CASES[name]
    with pytest.raises((TypeError, ValueError)) as eager:
        call(*broken)
    assert str(eager.value) == message  # the table's message is the eager one
    with pytest.raises(type(eager.value)) as traced:
        torch.compile(call, backend="eager")(*broken)
    assert str(traced.value) == message


@pytest.mark.parametrize("name", list(CASES))
def test_bad_calls_under_fullgraph_name_the_contracts_error(name):
    call, _, broken, message = CASES[name]
    with pytest.raises(Unsupported) as traced:
        torch.compile(call, backend="eager", fullgraph=True)(*broken)
    assert message in str(traced.value)


@pytest.mark.parametrize("dynamic", [None, True], ids=["default", "dynamic"])
def test_a_full_mask_sized_from_seq_lens_compiles_in_the_callers_graph(dynamic):
    # Without seq_lens_sum the length is seq_lens' sum: an unbacked int in the caller's graph,
    # which the eager checks' comparisons (its sign, int64 overflow) would stop dynamo on.
    def call(b, s):
        return eagle_fn.build_verify_tree(TREE_CFG, TREE, b, s, mask_mode=eagle_fn.MaskMode.FULL)

    compiled = torch.compile(call, backend="eager", fullgraph=True, dynamic=dynamic)
    assert_trees_equal(compiled(BONUS, SEQ_LENS), call(BONUS, SEQ_LENS))
    longer = SEQ_LENS + 3  # a new length runs the same graph
    assert_trees_equal(compiled(BONUS, longer), call(BONUS, longer))
    empty = SEQ_LENS * 0  # a sum of 0 (no request has a prefix) is a length like any other
    assert_trees_equal(compiled(BONUS, empty), call(BONUS, empty))
    # A negative sum is asserted as the graph runs: the sum's own check, as sum -1 still
    # gives the mask a positive length (N * -1 + bs * N * N = 28).
    with pytest.raises(RuntimeError, match=r"Runtime assertion failed for expression u\d+ >= 0"):
        compiled(BONUS, torch.tensor([-1, 0]))


@pytest.mark.parametrize("mode", list(eagle_fn.MaskMode), ids=lambda m: m.name)
@pytest.mark.parametrize(
    "cfg", [eagle_fn.DraftConfig(2, 3, 5), eagle_fn.DraftConfig.chain(4)], ids=["tree", "chain"]
)
def test_an_engines_whole_draft_verify_step_compiles_in_one_graph(cfg, mode):
    # An engine wraps its own step, eagle_fn's calls and a worker's methods among them, in
    # one torch.compile region. bs 3, 4 and 7 share no size with the step's fixed dims (a
    # duck-sized match would specialize the first graph); bs 1 would get its own graph.
    worker = eagle_fn.DraftOrganizer(cfg, max_bs=8, device="cpu", compile=False)
    k, n = cfg.topk, cfg.num_draft_tokens

    def step(probs, tokens, bonus, seq_lens, logits, temperature, uniforms, final):
        drafted = eagle_fn.select_top_k(cfg, 0, probs[0], tokens[0])
        steps = [drafted]
        for i in range(1, cfg.num_steps):
            drafted = eagle_fn.select_top_k(cfg, i, probs[i], tokens[i], drafted.scores)
            steps.append(drafted)
        fields = ("score_entry", "token_entry", "parents_entry")
        tree = worker.organize_steps(*([getattr(s, f) for s in steps] for f in fields))
        vt = worker.build_verify(tree, bonus, seq_lens, mask_mode=mode)
        greedy = eagle_fn.verify_greedy(cfg, vt, logits.argmax(-1))
        target = eagle_fn.target_probs_from_logits(logits, temperature)
        return tree, vt, greedy, eagle_fn.verify_sampling(cfg, vt, target, uniforms, final)

    compiled = torch.compile(step, backend="eager", fullgraph=True, dynamic=True)
    gen = torch.Generator().manual_seed(3)
    counters.clear()
    for bs in (3, 4, 7):
        rows = [bs] + [bs * k] * (cfg.num_steps - 1)
        probs = [torch.rand(r, k, generator=gen) for r in rows]
        tokens = [torch.randint(0, 11, (r, k), generator=gen) for r in rows]
        bonus, seq_lens = torch.randint(0, 11, (bs,), generator=gen), torch.arange(bs) + 9
        logits, temperature = torch.randn(bs, n, 11, generator=gen), torch.rand(bs, generator=gen)
        coins = eagle_fn.draw_uniforms(bs, n, generator=gen)
        args = (probs, tokens, bonus, seq_lens, logits, temperature, *coins)
        for got, want in zip(compiled(*args), step(*args), strict=True):
            assert_trees_equal(got, want)
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]


def test_a_chain_workers_constants_leave_the_callers_batch_dynamic():
    # The chain verify constants are N = 4 wide; were their dims dynamic in the caller's
    # graph, a first bs of 4 would be duck-sized onto N and that graph specialized to it.
    cfg = eagle_fn.DraftConfig.chain(3)
    worker = eagle_fn.DraftOrganizer(cfg, max_bs=8, device="cpu", compile=False)

    def step(probs, tokens, bonus, seq_lens):
        return worker.build_verify(worker.organize(probs, tokens), bonus, seq_lens)

    compiled = torch.compile(step, backend="eager", fullgraph=True, dynamic=True)
    counters.clear()
    for bs in (4, 5, 7):
        args = (torch.rand(bs, 3), torch.randint(0, 9, (bs, 3)), torch.zeros(bs, dtype=torch.int64))
        assert_trees_equal(compiled(*args, torch.arange(bs)), step(*args, torch.arange(bs)))
    assert counters["stats"]["unique_graphs"] == 1


def test_the_max_batch_warning_leaves_the_callers_graph_alone():
    # The worker's warned-once flag is read only outside a trace: read inside, it became a
    # guard of the caller's graph, and the first eager warning recompiled that graph.
    cfg = eagle_fn.DraftConfig.chain(3)
    worker = eagle_fn.DraftOrganizer(cfg, max_bs=2, device="cpu", compile=False)
    compiled = torch.compile(worker.organize, backend="eager", fullgraph=True, dynamic=True)
    probs, tokens = torch.rand(5, 3), torch.randint(0, 9, (5, 3))
    counters.clear()
    assert_trees_equal(compiled(probs, tokens), eagle_fn.organize_multilayer(cfg, probs, tokens))
    with pytest.warns(eagle_fn.MaxBatchWarning):
        worker.organize(probs, tokens)
    assert_trees_equal(compiled(probs, tokens), eagle_fn.organize_multilayer(cfg, probs, tokens))
    assert counters["stats"]["unique_graphs"] == 1


def test_chain_constants_are_built_outside_a_callers_graph():
    # docs/design.md: the memo is not traceable, so constants are closed over, not looked up
    # inside the region (as a worker holds them). Should a torch trace it, update the docs.
    def looked_up(tokens):
        constants = eagle_fn.chain_constants(CHAIN_CFG, max_bs=CONSTANTS.max_bs, device="cpu")
        return eagle_fn.organize_chain(constants, tokens)

    tokens = torch.arange(3 * CHAIN_CFG.num_steps).view(3, -1)
    with pytest.raises(Unsupported):
        torch.compile(looked_up, backend="eager", fullgraph=True)(tokens)
    closed_over = torch.compile(lambda t: eagle_fn.organize_chain(CONSTANTS, t), fullgraph=True)
    assert_trees_equal(closed_over(tokens), looked_up(tokens))
