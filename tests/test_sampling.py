"""Sampling verification (semantics.md §9): literal cases, the loop reference, greedy rows, bad input."""

import contextlib
import math
import sys

import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from eagle_fn import (
    DraftConfig,
    DraftTree,
    GreedyVerdict,
    VerifyTree,
    build_verify_tree,
    draw_uniforms,
    target_probs_from_logits,
    verify_greedy,
    verify_sampling,
)
from eagle_fn.probs import Uniforms, sample_from_row
from eagle_fn.profiling import OpCounter
from eagle_fn.sampling import child_lists
from helpers import sampling_reference as reference
from helpers.asserts import assert_matches, assert_verdict_equals
from helpers.float_modes import flush_denormal
from helpers.sampling_cases import EDGE_CASES
from helpers.sampling_inputs import (
    COIN_KINDS,
    ROW_KINDS,
    SAMPLING_CONFIGS,
    THRESHOLDS,
    as_float32,
    chain_cases,
    coins,
    engine_layouts,
    engine_step,
    engine_step_inputs,
    links_cases,
    organized_tree,
    random_links,
    target_rows,
    tree_case,
    tree_cases,
)
from helpers.trees import agreeing_children

I64 = torch.int64

# A two-level tree (topk 2): root -> node 1 (token 7), node 2 (token 9); node 1 -> node 3
# (token 4). Links: next_token [1, 3, -1, -1], next_sibling [-1, 2, -1, -1].
TREE_CFG = DraftConfig(2, 2, 4)
TREE = DraftTree(torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 2]]), torch.tensor([[7, 9, 4]]))
TREE_VT = build_verify_tree(TREE_CFG, TREE, torch.tensor([5]), torch.tensor([10]))
ROOT = [0.1, 0.0, 0.0, 0.1, 0.0, 0.1, 0.0, 0.2, 0.0, 0.5]  # q(7) = 0.2, q(9) = 0.5
NODE1 = [0.0, 0.0, 0.0, 0.0, 0.6, 0.0, 0.0, 0.0, 0.4, 0.0]  # q(4) = 0.6
NODE2 = [0.0, 0.0, 0.25, 0.0, 0.0, 0.0, 0.75, 0.0, 0.0, 0.0]
NODE3 = [0.0, 1.0] + [0.0] * 8


def tree_verdict(coin_root, final, *, root=ROOT, tokens=None, coin_node1=0.5, **kwargs):
    vt = TREE_VT if tokens is None else TREE_VT._replace(draft_tokens=torch.tensor(tokens))
    q = torch.tensor([root, NODE1, NODE2, NODE3])
    u = torch.tensor([[coin_root, coin_node1, 0.5, 0.5]])
    return verify_sampling(TREE_CFG, vt, q, u, torch.tensor([final]), **kwargs)


def as_lists(verdict):
    return [t.tolist() for t in verdict]


def test_tree_accepts_the_second_child():
    # Root coin 0.6: node 1 makes acc 0.2 (reject), node 2 makes 0.7 >= 0.6 (accept token 9).
    # Node 2 is a leaf: the final token comes from its plain row [.., 0.25 at 2, 0.75 at 6];
    # coin 0.5 -> u = 0.5, running 0.25 then 1.0 > 0.5 at token 6.
    assert as_lists(tree_verdict(0.6, 0.5)) == [[[0, 2, -1]], [1], [9, 0, 6, 0]]


def test_the_running_sum_must_exceed_the_coin():
    # Node 2's row [0.25 at 2, 0.75 at 6], final coin 0.25: u = 0.25 equals the running sum at
    # token 2, which does not exceed it; token 6 is the first whose running sum (1.0) does.
    assert tree_verdict(0.6, 0.25).predicts.tolist() == [9, 0, 6, 0]
    assert tree_verdict(0.6, 0.2499).predicts.tolist() == [9, 0, 2, 0]


@given(
    bs=st.integers(0, 5),
    vocab=st.integers(1, 12),
    seed=st.integers(0, 2**31),
)
def test_final_draw_matches_reference(bs, vocab, seed):
    # Grid rows and coins: running sums land exactly on coin * total, NaN and zero rows too.
    gen = torch.Generator().manual_seed(seed)
    grid = torch.tensor([0.0, 0.125, 0.25, 0.5, -0.25, math.nan])
    rows = grid[torch.randint(0, 6, (bs, vocab), generator=gen)]
    coin = torch.tensor([0.0, 0.25, 0.5, 0.75, 0.999])[torch.randint(0, 5, (bs,), generator=gen)]
    want = [reference.sample_row(rows[b], coin[b]) for b in range(bs)]
    assert_matches(sample_from_row(rows, coin), want, (bs,), I64)


@pytest.mark.parametrize(
    ("row", "token"),
    [
        # Eight entries of 2**-25 between two 1.0: float64 running sums pass u = 0.5 * total
        # = 1 + 2**-23 at the fifth small entry (index 5); float32 sums would round them away.
        ([1.0] + [2.0**-25] * 8 + [1.0], 5),
        # Running sums 2**-32, .5 + 2**-32, .5 + 2**-31, 1 + 2**-31: u = .5 + 2**-32, first
        # exceeded at index 2. A float32 product would round the total to 1, u to .5: index 1.
        ([2.0**-32, 0.5, 2.0**-32, 0.5], 2),
    ],
    ids=["sums", "target"],
)
def test_the_final_draw_is_taken_in_float64(row, token):
    row, coin = torch.tensor([row]), torch.tensor([0.5])
    assert sample_from_row(row, coin).tolist() == [reference.sample_row(row[0], coin[0])] == [token]


def test_the_documented_row_draws_another_token_than_float32_sums_would():
    # docs/sampling.md's example: float32 running sums and coin * total (SGLang's block scan)
    # first exceed u at token 2; float64 ones at token 1.
    row = torch.tensor([[0.0, 0.31183144, 0.42332646]])
    coin = torch.tensor([0.42416933])
    in_float32 = (row.cumsum(1) > coin * row.sum(1)).int().argmax(1)
    assert in_float32.tolist() == [2]
    assert sample_from_row(row, coin).tolist() == [reference.sample_row(row[0], coin[0])] == [1]


def test_a_float64_final_coin_is_not_rounded_to_float32():
    # u = 0.5 - 2**-40 falls just short of the first running sum, 0.5: token 0. In float32
    # the coin would round to 0.5, which the first sum does not exceed: token 1.
    row = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    coin = torch.tensor([0.5 - 2.0**-40], dtype=torch.float64)
    assert sample_from_row(row, coin).tolist() == [reference.sample_row(row[0], coin[0])] == [0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_coins_compare_at_the_compute_precision(dtype):
    # A root coin of exactly q(7) accepts node 1 (then node 3); one ulp above it in the
    # probabilities' dtype (float64 stays float64) rejects node 1, and acc 0.7 accepts node 2.
    q = torch.tensor([ROOT, NODE1, NODE2, NODE3], dtype=dtype)
    at = q[0, 7]
    above = torch.nextafter(at, torch.tensor(1.0, dtype=dtype))
    final = torch.tensor([0.5], dtype=dtype)
    for coin, accepted in ((at, [[0, 1, 3]]), (above, [[0, 2, -1]])):
        u = torch.stack([coin, *torch.full((3,), 0.5, dtype=dtype)]).view(1, 4)
        verdict = check_against_reference(TREE_CFG, TREE_VT, q, u, final)
        assert verdict.accept_index.tolist() == accepted


def test_tree_rejects_every_child_and_removes_them():
    # Root coin 0.9 > acc 0.7: both rejected; their tokens 7 and 9 leave the root row, which
    # keeps 0.1 at 0, 3 and 5 (total 0.3). Final coin 0.5 -> u = 0.15: token 3 (running 0.2).
    assert as_lists(tree_verdict(0.9, 0.5)) == [[[0, -1, -1]], [0], [3, 0, 0, 0]]


def test_tree_accepts_every_level():
    # Root coin 0.1 <= 0.2 takes node 1 (token 7); its coin 0.5 <= q(4) = 0.6 takes node 3
    # (token 4). Both levels accepted: the final token comes from node 3's plain row: 1.
    assert as_lists(tree_verdict(0.1, 0.99)) == [[[0, 1, 3]], [2], [7, 4, 0, 1]]


def test_rejection_at_a_deeper_level_removes_from_that_node():
    # Node 1 accepted; its coin 0.7 > q(4) = 0.6 rejects node 3, so token 4 leaves node 1's
    # row [0.6 at 4, 0.4 at 8]: the final token is 8 whatever the coin.
    verdict = tree_verdict(0.1, 0.0, coin_node1=0.7)
    assert as_lists(verdict) == [[[0, 1, -1]], [1], [7, 8, 0, 0]]


def test_threshold_single_accepts_a_likely_child():
    # Coin 0.99 rejects on the accumulator, but q(9) = 0.5 >= threshold_single = 0.5.
    verdict = tree_verdict(0.99, 0.5, threshold_single=0.5)
    assert verdict.accept_index.tolist() == [[0, 2, -1]]


def test_threshold_acc_scales_the_accumulator():
    # Coin 0.3 > acc 0.2, but 0.2 / threshold_acc 0.5 = 0.4 >= 0.3: node 1 accepted.
    assert tree_verdict(0.3, 0.5, threshold_acc=0.5).accept_index.tolist() == [[0, 1, 3]]
    # threshold_acc 0 is floored at 1e-9: any positive acc accepts the first child.
    assert tree_verdict(0.999, 0.5, threshold_acc=0.0).accept_index.tolist() == [[0, 1, 3]]


@pytest.mark.parametrize(
    ("q7", "acc", "accepted"),
    [
        (1e-8, 0.0, [[0, 1, 3]]),  # limit 1e-8 / 1e-9 = 10
        (1e-8, 1e-12, [[0, 1, 3]]),  # floored too
        (1e-8, 1e-7, [[0, -1, -1]]),  # above the floor: 0.1
        (2e-10, 0.0, [[0, -1, -1]]),  # 0.2: a floor of 1e-12 would give 200, and accept
        (2e-10, 1e-12, [[0, -1, -1]]),
        (1e-9, 0.0, [[0, 1, 3]]),  # about 1: a floor of 1e-8 would give 0.1, and reject
    ],
)
def test_threshold_acc_is_floored_at_1e_minus_9(q7, acc, accepted):
    # The root's children hold q(7) (node 1) and q(9) = 0 (node 2); coin 0.5.
    root = [0.5] + [0.0] * 6 + [q7, 0.0, 0.0]
    verdict = tree_verdict(0.5, 0.5, root=root, threshold_acc=acc)
    assert verdict.accept_index.tolist() == accepted


def test_an_int_threshold_up_to_the_largest_float_is_taken_as_that_float():
    big = int(sys.float_info.max)  # converts to a float exactly
    # Root coin 0.1 accepts node 1 at the default thresholds; acc 0.2 / big does not, and
    # q(7) = 0.2 < big: the int acts as the float it converts to, not as 1 or a clamp.
    rejected = [[[0, -1, -1]], [0], [3, 0, 0, 0]]
    for name in ("threshold_single", "threshold_acc"):
        as_int = tree_verdict(0.1, 0.5, **{name: big})
        assert as_lists(as_int) == as_lists(tree_verdict(0.1, 0.5, **{name: float(big)}))
    assert as_lists(tree_verdict(0.1, 0.5, threshold_acc=big)) == rejected


def test_siblings_with_one_token_count_twice_and_are_removed_once():
    # Both root children carry token 7 (q = 0.2). Coin 0.35: acc 0.2 rejects node 1, acc 0.4
    # (7 counted twice) accepts node 2.
    tokens = [5, 7, 7, 4]
    assert tree_verdict(0.35, 0.5, tokens=tokens).accept_index.tolist() == [[0, 2, -1]]
    # Coin 0.5 rejects both. Token 7 is set to 0 once; the root row keeps 0.1 at 0, 3, 5 and
    # 0.5 at 9 (total 0.8). Final coin 0.3 -> u = 0.24: token 5 (running 0.3).
    verdict = tree_verdict(0.5, 0.3, tokens=tokens)
    assert as_lists(verdict) == [[[0, -1, -1]], [0], [5, 0, 0, 0]]


def test_a_row_without_mass_emits_the_last_token():
    # An all-zero root row: every child rejected (coin > 0 = acc), nothing positive: V - 1.
    assert as_lists(tree_verdict(0.5, 0.5, root=[0.0] * 10)) == [[[0, -1, -1]], [0], [9, 0, 0, 0]]


def test_rounding_fallback_takes_the_last_positive_index():
    # A final coin of 1 (outside the [0, 1) contract) puts u at the total: no running sum
    # exceeds it, so the last positive index of node 2's row wins, SGLang's fallback.
    assert tree_verdict(0.6, 1.0).predicts.tolist() == [9, 0, 6, 0]


def test_nan_probabilities_never_reach_a_token():
    # NaN everywhere but token 3: NaN is never accepted and never sampled (the accumulator
    # turns NaN at node 1, so node 2 could pass only threshold_single: helpers/sampling_cases).
    root = [math.nan] * 10
    root[3] = 0.4
    assert as_lists(tree_verdict(0.5, 0.9, root=root)) == [[[0, -1, -1]], [0], [3, 0, 0, 0]]


def test_a_zero_coin_accepts_the_first_child():
    # SGLang's comparison is coin <= acc: a coin of exactly 0 accepts a child of probability 0.
    # draw_uniforms never draws 0 (see test_draw_uniforms_is_open_and_seeded).
    root = list(ROOT)
    root[7] = 0.0
    assert tree_verdict(0.0, 0.5, root=root).accept_index.tolist() == [[0, 1, 3]]


# Chains with draft probabilities: chain S = 2 drafting tokens 1 then 2 after bonus 0.
CHAIN_CFG = DraftConfig.chain(2)
CHAIN_VT = build_verify_tree(
    CHAIN_CFG,
    DraftTree(torch.tensor([[-1, 0]]), torch.tensor([[0, 1]]), torch.tensor([[1, 2]])),
    torch.tensor([0]),
    torch.tensor([3]),
)
Q = torch.tensor([[0.1, 0.6, 0.2, 0.1], [0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 0.0, 1.0]])
P = torch.tensor([[0.0, 0.8, 0.2, 0.0], [0.25, 0.0, 0.75, 0.0], [0.0, 0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("coin0", "coin1", "final", "expected"),
    [
        # 0.7 * p(1) = 0.56 <= q(1) = 0.6: accept; 0.5 * p(2) = 0.375 > q(2) = 0.3: reject.
        # relu(q1 - p1) = [0.25, 0, 0, 0.2] (total 0.45); coin 0.6 -> u = 0.27: token 3.
        (0.7, 0.5, 0.6, [[[0, 1, -1]], [1], [1, 3, 0]]),
        # The same, final coin 0.5 -> u = 0.225 < 0.25: token 0.
        (0.7, 0.5, 0.5, [[[0, 1, -1]], [1], [1, 0, 0]]),
        # 0.8 * 0.8 = 0.64 > 0.6: reject at the root; relu(q0 - p0) = [0.1, 0, 0, 0.1]: token 3.
        (0.8, 0.0, 0.75, [[[0, -1, -1]], [0], [3, 0, 0]]),
        # Both accepted (0.3 * 0.75 <= 0.3): the final token comes from q at node 2: 3.
        (0.7, 0.3, 0.1, [[[0, 1, 2]], [2], [1, 2, 3]]),
    ],
)
def test_chain_with_draft_probs(coin0, coin1, final, expected):
    u = torch.tensor([[coin0, coin1, 0.5]])
    verdict = verify_sampling(CHAIN_CFG, CHAIN_VT, Q, u, torch.tensor([final]), draft_probs=P)
    assert isinstance(verdict, GreedyVerdict)
    assert as_lists(verdict) == expected


def test_a_walk_back_to_the_root_writes_its_slot_in_walk_order():
    # Malformed links: node 1's child is the root. The root (coin 0.1 <= q(1) = 0.5) accepts
    # node 1, which (q(0) = 1) accepts the root: path 0, 1, 0. The root's slot is written at
    # levels 0 and 2 and the later write wins: the final token, 3 from the root's row at coin
    # 0.9; node 1's slot holds the token accepted after it, the root's 0.
    vt = CHAIN_VT._replace(retrieve_next_token=torch.tensor([[1, 0, -1]]))
    q = torch.tensor([[0.0, 0.5, 0.0, 0.5], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    verdict = check_against_reference(
        CHAIN_CFG, vt, q, torch.full((1, 3), 0.1), torch.tensor([0.9])
    )
    assert as_lists(verdict) == [[[0, 1, 0]], [2], [3, 0, 0]]


def test_draft_probability_zero_accepts():
    # p(x) = 0: coin * 0 <= q(x) always holds (a correct draft never proposes x).
    p = P.clone()
    p[0] = torch.tensor([0.5, 0.0, 0.5, 0.0])
    u = torch.tensor([[0.99, 0.99, 0.5]])
    verdict = verify_sampling(CHAIN_CFG, CHAIN_VT, Q, u, torch.tensor([0.5]), draft_probs=p)
    assert verdict.num_accepted.tolist() == [1]


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_edge_cases(name):
    # Draft tokens without target mass (q(x) = 0, outside [0, V), with coin 0), a residual
    # that keeps the rejected token, a NaN sibling in the accumulator, a threshold_single
    # that rounds to 0 in float32: exact verdicts (helpers/sampling_cases.py), the loop
    # reference's too.
    case, expected = EDGE_CASES[name]
    assert as_lists(check_against_reference(*case)) == expected


@pytest.mark.parametrize(
    ("single", "equal"), [(2.0**-150, False), (2.0**-149, True), (1e-30, True)]
)
def test_greedy_rows_need_threshold_single_positive_in_float32(single, equal):
    # 2**-150 > 0 rounds to float32 0 (a tie, to even): the child of probability 0 passes
    # q >= 0 and the greedy row leaves verify_greedy's verdict; 2**-149 does not round to 0.
    case, _ = EDGE_CASES["tiny_single_positive"]
    cfg, vt, q = case.cfg, case.verify_tree, case.target_probs
    sampled = verify_sampling(cfg, vt, q, case.uniforms, case.final_uniforms,
                              threshold_single=single)  # fmt: skip
    greedy = verify_greedy(cfg, vt, q.argmax(-1))
    assert as_lists(greedy) == [[[0, 2]], [1], [1, 0, 1]]
    assert (as_lists(sampled) == as_lists(greedy)) == equal


def test_flat_and_batched_probabilities_agree():
    u = torch.tensor([[0.7, 0.5, 0.5]])
    a = verify_sampling(CHAIN_CFG, CHAIN_VT, Q, u, torch.tensor([0.6]), draft_probs=P)
    b = verify_sampling(
        CHAIN_CFG, CHAIN_VT, Q.view(1, 3, 4), u, torch.tensor([0.6]), draft_probs=P.view(1, 3, 4)
    )
    assert as_lists(a) == as_lists(b)


def test_rows_are_taken_as_given_not_renormalized():
    # docs/sampling.md: acceptance compares the rows' values with the coins; only the final
    # draw is relative to the row's total. Half the root's mass: coin 0.6 no longer reaches
    # q(7) + q(9) = 0.35, where 0.7 accepted node 2; the final draw is unchanged.
    half = [v / 2 for v in ROOT]
    assert as_lists(tree_verdict(0.6, 0.5))[:2] == [[[0, 2, -1]], [1]]
    assert as_lists(tree_verdict(0.6, 0.5, root=half)) == [[[0, -1, -1]], [0], [3, 0, 0, 0]]
    assert as_lists(tree_verdict(0.99, 0.5, root=half)) == as_lists(tree_verdict(0.99, 0.5))
    # A draft row twice P's: 0.7 * 1.6 > q(1) = 0.6 rejects, where 0.7 * 0.8 accepted; then
    # relu(q - 2p) = [0.1, 0, 0, 0.1] and coin 0.6 gives token 3.
    u, final = torch.tensor([[0.7, 0.5, 0.5]]), torch.tensor([0.6])
    assert as_lists(verify_sampling(CHAIN_CFG, CHAIN_VT, Q, u, final, draft_probs=P))[1] == [1]
    doubled = verify_sampling(CHAIN_CFG, CHAIN_VT, Q, u, final, draft_probs=2 * P)
    assert as_lists(doubled) == [[[0, -1, -1]], [0], [3, 0, 0]]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("chain", [False, True], ids=["tree", "chain"])
def test_engine_layouts_give_the_contiguous_result(dtype, chain):
    # Logits and probabilities as an engine hands them over (16-bit, a vocabulary that is no
    # power of 2, views into padded buffers, transposed, gapped, [bs, N, V] or [bs * N, V]):
    # the same probabilities, and the reference's verdict, as from contiguous rows.
    gen = torch.Generator().manual_seed(0)
    cfg, bs, vocab = (DraftConfig.chain(4) if chain else DraftConfig(3, 3, 8)), 3, 37
    n = cfg.num_draft_tokens
    vt = organized_tree(cfg, bs, gen, vocab)
    logits = agreeing_logits(vt, vocab, gen).view(bs * n, vocab).to(dtype)
    temperature, top_k = torch.tensor([0.0, 0.7, 1.3]), torch.tensor([0, 5, 40])
    top_p = torch.tensor([1.0, 0.9, 0.5])
    want = target_probs_from_logits(logits, temperature, top_k=top_k, top_p=top_p)
    for name, x in engine_layouts(logits, bs).items():
        probs = target_probs_from_logits(x, temperature, top_k=top_k, top_p=top_p)
        assert probs.shape == x.shape, name
        assert torch.equal(probs.reshape(want.shape), want), name
    q, u = want.to(dtype), draw_uniforms(bs, n, generator=gen)
    p = torch.softmax(torch.randn(bs * n, vocab, generator=gen), -1).to(dtype) if chain else None
    expected = reference.verify_sampling(cfg, vt, q, *u, draft_probs=p)
    draft_layouts = engine_layouts(p, bs) if chain else {}
    for name, rows in engine_layouts(q, bs).items():
        verdict = verify_sampling(cfg, vt, rows, u.uniforms.t().contiguous().t(),
                                  u.final_uniforms, draft_probs=draft_layouts.get(name))  # fmt: skip
        assert_verdict_equals(verdict, expected, cfg, bs)


def test_child_lists_follow_links_and_stop_on_cycles():
    # Node 0 -> children 1, 2 (siblings 1 -> 2 -> 1 loop); node 1 -> child 3; out-of-range
    # links (7) end a list.
    first = torch.tensor([[1, 3, -1, 7]])
    sibling = torch.tensor([[-1, 2, 1, -1]])
    assert child_lists(first, sibling).tolist() == [
        [[1, 2, 1, 2], [3, 4, 4, 4], [4, 4, 4, 4], [4, 4, 4, 4]]
    ]


def check_against_reference(cfg, vt, q, u, final, thresholds=(1.0, 1.0), draft_probs=None):
    single, acc = thresholds
    verdict = verify_sampling(
        cfg, vt, q, u, final, threshold_single=single, threshold_acc=acc, draft_probs=draft_probs
    )
    ref = reference.verify_sampling(cfg, vt, q, u, final, single, acc, draft_probs)
    assert_verdict_equals(verdict, ref, cfg, vt.retrieve_index.shape[0])
    return verdict


@pytest.mark.parametrize("thresholds", THRESHOLDS)
@pytest.mark.parametrize("row_kind", ROW_KINDS)
@pytest.mark.parametrize("coin_kind", COIN_KINDS)
def test_matches_reference_table(thresholds, row_kind, coin_kind):
    gen = torch.Generator().manual_seed(len(row_kind) * 7 + len(coin_kind))
    cfg = DraftConfig(3, 4, 12)
    vt = organized_tree(cfg, 4, gen, vocab=12)
    q = target_rows(vt, 12, gen, row_kind)
    check_against_reference(cfg, vt, q, *coins(4, 12, gen, coin_kind), thresholds)


@given(case=tree_cases(max_bs=6, max_vocab=24))
# Under the ci profile 15 of the 60 drawn cases had NaN target rows, yet in none did a NaN
# child's q, which SGLang adds to the running sum, decide a sibling's verdict: here it does.
@example(case=tree_case(DraftConfig(4, 2, 8), 3, 6, "smooth", "nan", "uniform", (1.0, 1.0),
                        torch.float32, 1))  # fmt: skip
def test_matches_reference_on_organized_trees(case):
    check_against_reference(*case)


@given(case=links_cases(max_bs=5, dtype=torch.float64))
def test_matches_reference_on_arbitrary_links(case):
    # Cycles, self-links, shared children and out-of-vocabulary tokens: bounded and exact.
    check_against_reference(*case)


@given(case=chain_cases(max_steps=6, max_bs=6, max_vocab=16))
def test_chain_matches_reference(case):
    check_against_reference(*case)


def agreeing_logits(vt, vocab, gen, agree=0.8):
    """[bs, N, V] logits whose argmax is often the token of one of the node's children (see
    trees.agreeing_children), with exact ties, NaN, +inf and -inf now and then, and some rows
    all -inf or NaN."""
    bs, n = vt.retrieve_index.shape
    logits = torch.randn(bs, n, vocab, generator=gen).round(decimals=1)
    tokens = vt.draft_tokens.tolist()
    for node, child in enumerate(agreeing_children(vt, gen, agree)):
        if child >= 0 and 0 <= tokens[child] < vocab:
            logits.view(bs * n, vocab)[node, tokens[child]] = 5.0
    return with_special_logits(logits, gen)


def with_special_logits(logits, gen, nan=0.05, inf=0.01, rows=0.03):
    """``logits`` with NaN entries at rate ``nan``, +inf and -inf entries at ``inf`` each, and
    rows of only -inf and NaN at ``rows`` (rows that target_probs_from_logits gives no mass
    at a positive temperature, as it does rows with a +inf)."""
    draw = torch.rand(logits.shape, generator=gen)  # [..., V]
    logits = torch.where(draw < nan, math.nan, logits)
    logits = torch.where((draw >= nan) & (draw < nan + inf), math.inf, logits)
    logits = torch.where((draw >= nan + inf) & (draw < nan + 2 * inf), -math.inf, logits)
    empty = torch.rand(logits.shape[:-1], generator=gen).unsqueeze(-1) < rows  # [..., 1]
    return torch.where(empty, torch.where(draw < 0.5, math.nan, -math.inf), logits)


def greedy_targets(logits):
    """The argmax of each row with NaN as -inf, infinities kept (``nan_to_num(nan=-inf)`` would
    clamp +inf to the largest finite value and -inf to the lowest, ranking them with finite
    logits): docs/sampling.md's expression for greedy rows."""
    return torch.where(logits.isnan(), -math.inf, logits).argmax(-1)


@given(
    cfg=SAMPLING_CONFIGS,
    bs=st.integers(1, 6),
    # Where greedy rows are exact (docs/sampling.md): threshold_single positive in float32 (or
    # a child of probability 0 passes), and the argmax child accepted: single or acc <= 1.
    thresholds=st.sampled_from(
        [(s, a) for s, a in THRESHOLDS if as_float32(s) > 0 and min(s, a) <= 1]
    ),
    arbitrary_links=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_greedy_rows_of_a_mixed_batch_equal_verify_greedy(
    cfg, bs, thresholds, arbitrary_links, seed
):
    gen = torch.Generator().manual_seed(seed)
    vocab, n = 16, cfg.num_draft_tokens
    vt = (random_links if arbitrary_links else organized_tree)(cfg, bs, gen, vocab)
    logits = agreeing_logits(vt, vocab, gen)
    temperature = torch.where(torch.rand(bs, generator=gen) < 0.5, 0.0, 0.8)
    assume(bool((temperature == 0).any()))
    probs = target_probs_from_logits(logits, temperature)
    u = draw_uniforms(bs, n, generator=gen)
    single, acc = thresholds
    sampled = verify_sampling(cfg, vt, probs, *u, threshold_single=single, threshold_acc=acc)
    greedy = verify_greedy(cfg, vt, greedy_targets(logits))
    assert_greedy_rows_equal(sampled, greedy, temperature)


def assert_greedy_rows_equal(sampled, greedy, temperature):
    """The verdicts of the requests at temperature 0 are equal."""
    n = sampled.predicts.shape[0] // temperature.shape[0]
    for b in (temperature == 0).nonzero().flatten().tolist():
        assert sampled.accept_index[b].tolist() == greedy.accept_index[b].tolist()
        assert sampled.num_accepted[b].item() == greedy.num_accepted[b].item()
        assert (
            sampled.predicts[b * n : (b + 1) * n].tolist()
            == greedy.predicts[b * n : (b + 1) * n].tolist()
        )


@given(num_steps=st.integers(1, 6), bs=st.integers(1, 6), seed=st.integers(0, 2**31))
def test_greedy_chain_rows_with_draft_probs_equal_verify_greedy(num_steps, bs, seed):
    # A mixed batch. Draft rows, node by node, of the kinds docs/sampling.md names: one-hot at
    # the drafted token (a greedy draft), softmax rows (every entry in (0, 1)), all zero.
    # A drafted token other than the argmax a has q = 0 and is rejected whatever the coin;
    # relu(q - p) is then 1 - p(a) > 0 at a only: the argmax, as verify_greedy emits.
    gen = torch.Generator().manual_seed(seed)
    cfg, vocab, n = DraftConfig.chain(num_steps), 8, num_steps + 1
    vt = organized_tree(cfg, bs, gen, vocab)
    logits = agreeing_logits(vt, vocab, gen)
    temperature = torch.where(torch.rand(bs, generator=gen) < 0.5, 0.0, 0.8)
    assume(bool((temperature == 0).any()))
    probs = target_probs_from_logits(logits, temperature)
    drafted = vt.draft_tokens.view(bs, n).roll(-1, 1)  # [bs, N] row j drew node j + 1's token
    onehot = torch.zeros(bs, n, vocab).scatter_(2, drafted.unsqueeze(-1), 1.0)
    smooth = torch.softmax(torch.randn(bs, n, vocab, generator=gen), -1)
    kind = torch.randint(0, 3, (bs, n, 1), generator=gen)
    draft = torch.where(kind == 0, onehot, torch.where(kind == 1, smooth, 0.0))
    sampled = verify_sampling(cfg, vt, probs, *draw_uniforms(bs, n, generator=gen),
                              draft_probs=draft)  # fmt: skip
    greedy = verify_greedy(cfg, vt, greedy_targets(logits))
    assert_greedy_rows_equal(sampled, greedy, temperature)


def test_greedy_chain_row_fails_when_the_draft_row_has_all_mass_at_the_argmax():
    # The exception docs/sampling.md states: the root's argmax is token 0, the drafted token 1
    # (q = 0, rejected), and p(0) = 1, so relu(q - p) has no mass: token V - 1 = 3, where
    # verify_greedy emits 0. (A draft that drew token 1 from p has p(0) < 1.)
    q = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    p = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0] * 4])
    u, final = torch.tensor([[0.5, 0.5, 0.5]]), torch.tensor([0.5])
    verdict = verify_sampling(CHAIN_CFG, CHAIN_VT, q, u, final, draft_probs=p)
    assert as_lists(verdict) == [[[0, -1, -1]], [0], [3, 0, 0]]
    greedy = verify_greedy(CHAIN_CFG, CHAIN_VT, q.argmax(-1))
    assert as_lists(greedy) == [[[0, -1, -1]], [0], [0, 0, 0]]
    p[0] = torch.tensor([0.75, 0.25, 0.0, 0.0])  # p(0) < 1: the argmax again
    assert as_lists(verify_sampling(CHAIN_CFG, CHAIN_VT, q, u, final, draft_probs=p)) == [
        [[0, -1, -1]], [0], [0, 0, 0]
    ]  # fmt: skip


def test_greedy_chain_row_with_draft_probs_differs_where_a_malformed_chain_has_siblings():
    # docs/sampling.md's other condition: the root's first child is node 1 (token 3, not the
    # argmax 5), whose sibling link leads back to node 0 (token 5), a link no chain build
    # makes. verify_greedy walks on to that sibling and accepts it; draft mode tries only
    # the first child, rejects it and draws 5 from relu(q - p). Without draft_probs the
    # target-only walk tries the sibling too, as greedy does.
    cfg = DraftConfig.chain(1)
    links = torch.tensor([[0, 1]]), torch.tensor([[1, -1]]), torch.tensor([[-1, 0]])
    vt = VerifyTree(torch.tensor([5, 3]), torch.zeros(2, dtype=torch.int64),
                    torch.ones(4, dtype=torch.bool), *links)  # fmt: skip
    q = torch.zeros(2, 8)
    q[:, 5] = 1.0  # greedy rows: the argmax is token 5
    u, final = torch.tensor([[0.5, 0.5]]), torch.tensor([0.5])
    greedy = verify_greedy(cfg, vt, torch.tensor([5, 5]))
    assert as_lists(greedy) == [[[0, 0]], [1], [5, 0]]
    plain = verify_sampling(cfg, vt, q, u, final)
    assert as_lists(plain) == as_lists(greedy)
    drafted = verify_sampling(cfg, vt, q, u, final, draft_probs=torch.full((2, 8), 0.1))
    assert as_lists(drafted) == [[[0, -1]], [0], [5, 0]]


@pytest.mark.parametrize(
    ("row", "dtype", "argmax", "clamped"),
    [
        # NaN counts as -inf, and a -inf ties it: the first, 0. nan_to_num(nan=-inf) would
        # clamp the real -inf to the lowest finite float, above the NaN's -inf: 1.
        ([math.nan, -math.inf], torch.float32, 0, 1),
        # +inf is above the largest finite float16; nan_to_num clamps it to 65504: a tie, 0.
        ([65504.0, math.inf], torch.float16, 1, 0),
    ],
)
def test_greedy_rows_keep_infinities(row, dtype, argmax, clamped):
    cfg = DraftConfig.chain(1)  # N = 2: the root and a draft node with token 1 - argmax
    tree = DraftTree(torch.zeros(1, 0, dtype=I64), torch.tensor([[0]]), torch.tensor([[clamped]]))
    vt = build_verify_tree(cfg, tree, torch.tensor([0]), torch.tensor([3]))
    logits = torch.tensor([row, [0.0, 1.0]], dtype=dtype)
    probs = target_probs_from_logits(logits, torch.tensor([0.0]))
    assert probs[0].tolist() == [float(i == argmax) for i in range(2)]
    assert greedy_targets(logits)[0].item() == argmax
    assert logits.nan_to_num(nan=-math.inf).argmax(-1)[0].item() == clamped
    sampled = verify_sampling(cfg, vt, probs, *draw_uniforms(1, 2, generator=torch.Generator()))
    greedy = verify_greedy(cfg, vt, greedy_targets(logits))
    assert as_lists(sampled) == as_lists(greedy) == [[[0, -1]], [0], [argmax, 0]]


def test_greedy_rows_agree_on_a_fixed_batch():
    # A deterministic instance of the property above that accepts at every depth.
    gen = torch.Generator().manual_seed(3)
    cfg, bs, vocab = DraftConfig(4, 4, 16), 8, 16
    vt = organized_tree(cfg, bs, gen, vocab)
    logits = agreeing_logits(vt, vocab, gen, agree=1.0)
    temperature = torch.tensor([0.0, 1.0] * 4)
    probs = target_probs_from_logits(logits, temperature)
    sampled = verify_sampling(cfg, vt, probs, *draw_uniforms(bs, 16, generator=gen))
    greedy = verify_greedy(cfg, vt, greedy_targets(logits))
    assert torch.equal(sampled.accept_index[::2], greedy.accept_index[::2])
    assert torch.equal(sampled.predicts.view(bs, 16)[::2], greedy.predicts.view(bs, 16)[::2])
    assert greedy.num_accepted[::2].sum() >= 8  # deep walks, so the comparison means something


def test_draw_uniforms_is_open_and_seeded():
    a = draw_uniforms(3, 5, generator=torch.Generator().manual_seed(0))
    b = draw_uniforms(3, 5, generator=torch.Generator().manual_seed(0))
    assert isinstance(a, Uniforms)
    assert a.uniforms.shape == (3, 5)
    assert a.final_uniforms.shape == (3,)
    assert a.uniforms.dtype == torch.float32
    assert a.uniforms.is_contiguous()
    assert torch.equal(a.uniforms, b.uniforms)
    assert torch.equal(a.final_uniforms, b.final_uniforms)
    many = draw_uniforms(1000, 100, generator=torch.Generator().manual_seed(1)).uniforms
    assert many.min() > 0
    assert many.max() < 1
    # Midpoints of 2**23 bins: every coin times 2**24 is an odd integer.
    scaled = many.double() * 2**24
    assert torch.equal(scaled, scaled.round())
    assert bool((scaled % 2 == 1).all())
    assert abs(many.mean().item() - 0.5) < 0.01


def test_draw_uniforms_are_the_midpoints_of_the_generators_bins():
    # Reproducible from the generator alone: one randint over 2**23 bins for N + 1 coins a
    # request, the node coins first and the final coin last. (The test above cannot tell a
    # coin one grid step off, nor a bin that is never drawn.)
    bins = torch.randint(0, 2**23, (3, 6), generator=torch.Generator().manual_seed(5))
    coins = draw_uniforms(3, 5, generator=torch.Generator().manual_seed(5))
    want = (bins.double() + 0.5) / 2**23
    assert torch.equal(coins.uniforms.double(), want[:, :5])
    assert torch.equal(coins.final_uniforms.double(), want[:, 5])


def test_draw_uniforms_defaults_to_torchs_generator_on_the_cpu():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        a = draw_uniforms(2, 3)
        torch.manual_seed(5)
        b = draw_uniforms(2, 3)
    assert a.uniforms.device == a.final_uniforms.device == torch.device("cpu")
    assert torch.equal(a.uniforms, b.uniforms)
    assert torch.equal(a.final_uniforms, b.final_uniforms)
    assert bool(((a.uniforms > 0) & (a.uniforms < 1)).all())


@pytest.mark.parametrize("bs", [0, 1, 2])
def test_draw_uniforms_has_a_fresh_tensors_strides(bs):
    # A compiled graph guards on strides: a [1, N] view of the [1, N + 1] draw (stride N + 1)
    # would compile one more graph at bs = 1 where the batch is otherwise dynamic.
    coins = draw_uniforms(bs, 5, generator=torch.Generator().manual_seed(0))
    assert coins.uniforms.stride() == (5, 1)
    assert coins.final_uniforms.stride() == (1,)


def test_runs_on_device(device):
    gen = torch.Generator().manual_seed(0)
    cfg = DraftConfig(3, 3, 8)
    vt = organized_tree(cfg, 4, gen, 12)
    q = target_rows(vt, 12, gen, "agree")
    u, final = coins(4, 8, gen, "uniform")
    cpu = verify_sampling(cfg, vt, q, u, final)
    moved = type(vt)(*(t.to(device) for t in vt))
    dev = verify_sampling(cfg, moved, q.to(device), u.to(device), final.to(device))
    for a, b in zip(cpu, dev, strict=True):
        assert b.device == device
        assert torch.equal(a, b.cpu())


# target_probs_from_logits

# Against probabilities worked out by hand: torch's exp rounds (by the CPU's vector width),
# so a few float32 ulps, and zeros exact. Against the reference, which makes the same torch
# softmax and sum calls on each row, they are compared exactly.
BY_HAND = {"rtol": 2**-21, "atol": 0.0}


def test_probs_from_logits_literal():
    logits = torch.tensor(
        [
            [0.0, math.log(4.0), -math.inf],  # temperature 2: [1, 2, 0] / 3
            [1.0, math.nan, 1.0],  # greedy: first largest, NaN ignored -> one-hot at 0
            [-math.inf, math.nan, -math.inf],  # no mass at temperature 1: all zero
            [0.5, math.inf, 1.0],  # a +inf: no mass either (inf - inf is NaN), all zero
            [math.nan, -math.inf, math.inf],  # greedy: one-hot at the +inf
        ]
    )
    temperature = torch.tensor([2.0, 0.0, 1.0, 1.0, 0.0])
    probs = target_probs_from_logits(logits.view(5, 1, 3), temperature).view(5, 3)
    torch.testing.assert_close(probs[0], torch.tensor([1 / 3, 2 / 3, 0.0]), **BY_HAND)
    assert probs[1:].tolist() == [[1.0, 0.0, 0.0], [0.0] * 3, [0.0] * 3, [0.0, 0.0, 1.0]]
    want = reference.target_probs_from_logits(logits.view(5, 1, 3), temperature)
    torch.testing.assert_close(probs, torch.tensor(want), rtol=0, atol=0)


def test_top_k_keeps_ties_and_top_p_keeps_the_boundary_token():
    logits = torch.tensor([[1.0, 1.0, 0.0], [math.log(5.0), math.log(3.0), math.log(2.0)]])
    probs = target_probs_from_logits(
        logits, torch.tensor([1.0, 1.0]), top_k=torch.tensor([1, 0]), top_p=torch.tensor([1.0, 0.6])
    )
    # Row 0: top_k 1 keeps both tied logits. Row 1: [0.5, 0.3, 0.2]; the preceding mass of
    # 0.3 is 0.5 < 0.6 (kept), of 0.2 is 0.8 (dropped): [0.625, 0.375, 0].
    torch.testing.assert_close(
        probs, torch.tensor([[0.5, 0.5, 0.0], [0.625, 0.375, 0.0]]), **BY_HAND
    )


def test_top_p_of_one_keeps_a_tail_the_running_sum_cannot_see():
    # The tail tokens (about 4e-18 each) vanish from the float64 running sum: the mass before
    # them is exactly 1.0, not below p = 1. p >= 1 keeps every token all the same.
    logits = torch.tensor([[0.0, -40.0, -40.0]])
    probs = target_probs_from_logits(logits, torch.ones(1), top_p=torch.tensor([1.0]))
    want = reference.target_probs_from_logits(logits, torch.ones(1), None, torch.tensor([1.0]))
    assert (probs > 0).tolist() == [[v > 0 for v in row] for row in want] == [[True] * 3]


@pytest.mark.parametrize("top_p", [0.0, -0.5, math.nan, 1e-30])
def test_top_p_keeps_at_least_the_most_probable_token(top_p):
    # Nothing would precede the first token's mass below p <= 0 (or NaN): the most probable
    # tokens stay, both of the tied ones, instead of an empty row that emits V - 1.
    logits = torch.tensor([[0.0, 2.0, 1.0, 2.0, -1.0]])
    probs = target_probs_from_logits(logits, torch.ones(1), top_p=torch.tensor([top_p]))
    assert probs.tolist() == [[0.0, 0.5, 0.0, 0.5, 0.0]]
    want = reference.target_probs_from_logits(logits, torch.ones(1), None, [top_p])
    assert [[v > 0 for v in row] for row in want] == (probs > 0).tolist()  # unnormalized
    coins = torch.tensor([1e-7, 0.5, 1 - 2**-24])
    assert sample_from_row(probs.expand(3, 5), coins).tolist() == [1, 3, 3]


@pytest.mark.parametrize(
    ("probs", "top_p", "kept"),
    [
        ([1 / 12] * 12, 0.5, [1 / 12] * 12),  # the boundary token ties all the others
        ([1 / 16] * 16, 0.5, [1 / 16] * 16),  # 8 reach p exactly: their ties stay all the same
        ([0.4, 0.2, 0.2, 0.1, 0.1], 0.5, [0.5, 0.25, 0.25, 0.0, 0.0]),
        ([0.1, 0.2, 0.4, 0.2, 0.1], 0.5, [0.0, 0.25, 0.5, 0.25, 0.0]),  # order does not matter
        ([0.4, 0.2, 0.2, 0.1, 0.1], 0.6, [0.5, 0.25, 0.25, 0.0, 0.0]),  # 0.6 inside the ties
        ([0.4, 0.2, 0.2, 0.1, 0.1], 0.85, [0.4, 0.2, 0.2, 0.1, 0.1]),
        ([0.5, 0.3, 0.2], 0.6, [0.625, 0.375, 0.0]),  # no tie: the boundary token alone
    ],
)
def test_top_p_keeps_the_ties_of_its_boundary_token(probs, top_p, kept):
    # SGLang's top-p (flashinfer's top_p_renorm_prob) keeps every probability at or above a
    # threshold, so tokens tied at the boundary stay or go together, whatever their indices.
    logits = torch.tensor([probs], dtype=torch.float64).log()
    got = target_probs_from_logits(logits, torch.ones(1), top_p=torch.tensor([top_p]))
    torch.testing.assert_close(got, torch.tensor([kept], dtype=torch.float64), **BY_HAND)
    want = reference.target_probs_from_logits(logits, torch.ones(1), None, [top_p])
    assert [[v > 0 for v in row] for row in want] == (got > 0).tolist()


@given(vocab=st.integers(2, 24), top_p=st.floats(0.0, 1.0), seed=st.integers(0, 2**31))
def test_top_k_and_top_p_ignore_the_vocabularys_order(vocab, top_p, seed):
    # Ties everywhere (logits on a coarse grid): permuting the vocabulary permutes the
    # support, as it would not if ties at the boundary were broken by index. (The values may
    # move in the last bits: softmax sums in another order.)
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randint(-3, 1, (1, vocab), generator=gen).double()
    perm = torch.randperm(vocab, generator=gen)
    k, p = torch.randint(0, vocab + 1, (1,), generator=gen), torch.tensor([top_p])
    probs = target_probs_from_logits(logits, torch.ones(1), top_k=k, top_p=p)
    permuted = target_probs_from_logits(logits[:, perm], torch.ones(1), top_k=k, top_p=p)
    assert torch.equal(probs[:, perm] > 0, permuted > 0)
    torch.testing.assert_close(probs[:, perm], permuted, rtol=1e-12, atol=0)


def test_probs_rows_of_a_request_share_its_parameters():
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    temperature = torch.tensor([0.0, 0.7])
    batched = target_probs_from_logits(logits, temperature)
    flat = target_probs_from_logits(logits.view(6, 5), temperature)
    assert batched.shape == (2, 3, 5)
    assert flat.shape == (6, 5)
    assert torch.equal(batched.view(6, 5), flat)
    assert torch.equal(batched[0], torch.nn.functional.one_hot(logits[0].argmax(-1), 5).float())


@given(
    bs=st.integers(1, 4),
    rows=st.integers(1, 3),
    vocab=st.integers(1, 12),
    grid=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_probs_from_logits_match_reference(bs, rows, vocab, grid, seed):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(bs, rows, vocab, generator=gen)
    if grid:  # exact ties among logits
        logits = logits.round()
    logits = with_special_logits(logits, gen)  # NaN, +-inf, rows of only -inf and NaN
    temperature = torch.tensor([0.0, 0.5, 1.0, 2.0])[torch.randint(0, 4, (bs,), generator=gen)]
    top_k = torch.randint(-1, vocab + 2, (bs,), generator=gen)
    top_p = torch.rand(bs, generator=gen) * 1.4 - 0.2  # [-0.2, 1.2): p <= 0 keeps one token
    top_p[torch.rand(bs, generator=gen) < 0.1] = math.nan
    probs = target_probs_from_logits(logits, temperature, top_k=top_k, top_p=top_p)
    want = torch.tensor(reference.target_probs_from_logits(logits, temperature, top_k, top_p))
    want = want.view(bs, rows, vocab)
    assert not torch.isnan(probs).any()
    torch.testing.assert_close(probs > 0, want > 0)  # the same support, exactly
    total = want.sum(-1, keepdim=True)
    want = torch.where(total > 0, want / torch.where(total > 0, total, 1.0), 0.0)
    torch.testing.assert_close(probs, want.float(), rtol=0, atol=0)  # the same torch sums


@pytest.mark.parametrize(
    ("dtype", "computed"),
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
    ],
    ids=str,
)
def test_probs_are_computed_in_float32_or_float64(dtype, computed):
    # float64 logits stay float64: 1e-9 apart, their probabilities differ (in float32 both
    # would be 0.5).
    logits = torch.tensor([[0.0, 1e-9, -1.0]], dtype=dtype)
    probs = target_probs_from_logits(logits, torch.ones(1, dtype=dtype))
    assert probs.dtype == computed
    want = reference.target_probs_from_logits(logits, torch.ones(1))
    torch.testing.assert_close(probs, torch.tensor(want, dtype=computed), rtol=0, atol=0)
    assert (probs[0, 0] < probs[0, 1]).item() == (dtype == torch.float64)


def test_float64_logits_take_a_float64_temperature_at_full_precision():
    # 0.7 is not a float32: rounded to one, these probabilities would move in the last bits.
    logits = torch.tensor([[0.0, 1.0, -1.0]], dtype=torch.float64)
    temperature = torch.tensor([0.7], dtype=torch.float64)
    probs = target_probs_from_logits(logits, temperature)
    want = torch.tensor(
        reference.target_probs_from_logits(logits, temperature), dtype=torch.float64
    )
    torch.testing.assert_close(probs, want, rtol=0, atol=0)


def test_a_negative_temperature_is_greedy():
    # Temperature <= 0 gives one-hot rows at the first largest logit, not a softmax of the
    # negated logits.
    logits = torch.tensor([[1.0, 3.0, 2.0, 3.0]])
    for t in (-1.0, -1e-30):
        probs = target_probs_from_logits(logits, torch.tensor([t]))
        want = reference.target_probs_from_logits(logits, torch.tensor([t]))
        assert probs.tolist() == want == [[0.0, 1.0, 0.0, 0.0]]


@pytest.mark.parametrize("top", [{}, {"top_k": torch.zeros(0, dtype=torch.int64)}])
@pytest.mark.parametrize("shape", [(0, 5), (0, 3, 5)], ids=["flat", "batched"])
def test_an_empty_batch_gives_empty_rows(shape, top):
    # bs 0 (an empty temperature) with no logit rows, flat or batched: nothing to refuse.
    probs = target_probs_from_logits(torch.zeros(shape), torch.zeros(0), **top)
    assert probs.shape == shape
    assert probs.dtype == torch.float32


@pytest.mark.parametrize("temperature", [1e-39, 1e-30, 1e-6])
def test_a_tiny_temperature_is_the_argmax(temperature):
    # Unshifted, logits / t would overflow to inf (NaN after softmax, an all-zero row) at
    # t 1e-39, which divides as float32's smallest normal (1.2e-38): 10 / 1.2e-38 > 3.4e38.
    logits = torch.tensor([[1.0, 10.0, 2.0], [-1.0, -3.0, -2.0], [0.5, 0.5, -1.0]])
    probs = target_probs_from_logits(logits, torch.full((3,), temperature))
    assert probs.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]
    want = reference.target_probs_from_logits(logits, torch.full((3,), temperature))
    assert probs.tolist() == want


@pytest.mark.parametrize("flush", [False, True], ids=["subnormals", "flushed"])
@pytest.mark.parametrize(
    ("temperature", "want"),
    [(1e-50, [0.5, 0.5, 0.0, 0.0]), (1e39, [1 / 3, 1 / 3, 1 / 3, 0.0]), (math.inf, None)],
    ids=["below-float32", "above-float32", "inf"],
)
def test_a_float64_temperature_past_float32_still_divides(temperature, want, flush):
    # float32 rounds 1e-50 to 0 and 1e39 to inf: taken into its normal range instead, they
    # give the argmax rows (ties shared, not greedy's first largest alone) and the uniform
    # rows (not -inf / inf = NaN), also where the CPU flushes subnormals.
    with flush_denormal() if flush else contextlib.nullcontext():
        logits = torch.tensor([[3.0, 3.0, 0.0, -math.inf]])
        t = torch.tensor([temperature], dtype=torch.float64)
        probs = target_probs_from_logits(logits, t)
        assert probs.tolist() == reference.target_probs_from_logits(logits, t)
    uniform = torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0])
    torch.testing.assert_close(probs[0], torch.tensor(want) if want else uniform, **BY_HAND)


@pytest.mark.parametrize("vocab", [3, 5, 10, 20])
@pytest.mark.parametrize("top_p", [0.1, 0.3, 0.5, 0.6, 2 / 3, 0.7, 0.9])
def test_top_p_on_even_rows_keeps_as_the_reference(vocab, top_p):
    # Uniform rows: the preceding mass meets p exactly, where rounding decides which token is
    # the boundary; every token ties it, so all stay whatever rounding does.
    logits = torch.zeros(2, vocab)
    temperature, p = torch.ones(2), torch.full((2,), top_p)
    probs = target_probs_from_logits(logits, temperature, top_p=p)
    want = torch.tensor(reference.target_probs_from_logits(logits, temperature, None, p))
    assert torch.equal(probs > 0, want > 0)
    assert bool((probs > 0).all())


VT = TREE_VT
QS = torch.rand(4, 10)
U, F = torch.rand(1, 4), torch.rand(1)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((None, VT, QS, U, F), {}, TypeError, r"verify_sampling: cfg must be a DraftConfig"),
        ((TREE_CFG, tuple(VT), QS, U, F), {}, TypeError, r"verify_tree must be a VerifyTree"),
        (
            (TREE_CFG, VT, QS[:3], U, F),
            {},
            ValueError,
            r"verify_sampling: target_probs must have shape \[bs, N, V\] = \[1, 4, V\] or "
            r"\[bs \* N, V\] = \[4, V\], got \[3, 10\]",
        ),
        ((TREE_CFG, VT, QS.view(2, 2, 10), U, F), {}, ValueError, r"got \[2, 2, 10\]"),
        (
            (TREE_CFG, VT, QS[:, :0], U, F),
            {},
            ValueError,
            r"target_probs must have V >= 1 columns, got 0",
        ),
        (
            (TREE_CFG, VT, QS.int(), U, F),
            {},
            TypeError,
            r"target_probs must be a floating-point tensor .* got torch.int32",
        ),
        ((TREE_CFG, VT, QS.tolist(), U, F), {}, TypeError, r"target_probs must be a torch.Tensor"),
        ((TREE_CFG, VT, QS.to("meta"), U, F), {}, ValueError, r"target_probs is on meta"),
        (
            (TREE_CFG, VT, QS, U[:, :3], F),
            {},
            ValueError,
            r"uniforms must have shape \[bs, N\] = \[1, 4\], got \[1, 3\]",
        ),
        ((TREE_CFG, VT, QS, U.double().long(), F), {}, TypeError, r"uniforms must be a floating"),
        (
            (TREE_CFG, VT, QS, U, F.view(1, 1)),
            {},
            ValueError,
            r"final_uniforms must have shape \[bs\] = \[1\], got \[1, 1\]",
        ),
        ((TREE_CFG, VT, QS, U, F.to("meta")), {}, ValueError, r"final_uniforms is on meta"),
        (
            (TREE_CFG, VT, QS, U, F),
            {"draft_probs": QS},
            ValueError,
            r"draft_probs is only defined for chains \(topk == 1\).* topk = 2",
        ),
        (
            (CHAIN_CFG, CHAIN_VT, Q, U[:, :3], F),
            {"draft_probs": P[:, :3]},
            ValueError,
            r"draft_probs must have shape \[bs, N, V\] = \[1, 3, 4\] or \[bs \* N, V\] = \[3, 4\], got \[3, 3\]",
        ),
        (
            (CHAIN_CFG, CHAIN_VT, Q, U[:, :3], F),
            {"draft_probs": P[:2]},
            ValueError,
            r"draft_probs must have shape \[bs, N, V\] = \[1, 3, 4\]",
        ),
        (
            (TREE_CFG, VT, QS, U, F),
            {"threshold_acc": "1"},
            TypeError,
            r"threshold_acc must be a float, got str",
        ),
        (
            (TREE_CFG, VT, QS, U, F),
            {"threshold_single": True},
            TypeError,
            r"threshold_single must be a float, got bool",
        ),
        (
            (TREE_CFG, VT, QS, U, F),
            {"threshold_acc": 10**400},
            ValueError,
            r"threshold_acc must fit a float, got 1329 bits",
        ),
        (
            (TREE_CFG, VT, QS, U, F),
            {"threshold_single": math.nan},
            ValueError,
            r"threshold_single must be a number, got nan",
        ),
        (
            (TREE_CFG, VT._replace(retrieve_next_token=VT.retrieve_next_token[:, :3]), QS, U, F),
            {},
            ValueError,
            r"verify_tree.retrieve_next_token must have shape \[bs, N\] = \[1, 4\], got \[1, 3\]",
        ),
        (
            (TREE_CFG, VT._replace(draft_tokens=VT.draft_tokens.int()), QS, U, F),
            {},
            TypeError,
            r"verify_tree.draft_tokens must be an int64 tensor",
        ),
    ],
)
def test_bad_inputs(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        verify_sampling(*args, **kwargs)


LOGITS = torch.zeros(2, 3, 5)
TEMPS = torch.ones(2)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (
            (LOGITS, TEMPS[:1]),
            {},
            ValueError,
            r"target_probs_from_logits: logits must have shape \[bs, N, V\] = \[1, N, V\] or "
            r"\[rows, V\], got \[2, 3, 5\]",
        ),
        ((LOGITS.view(6, 5), torch.ones(4)), {}, ValueError, r"bs = 4 .* got \[6, 5\]"),
        ((LOGITS.view(6, 5), torch.ones(0)), {}, ValueError, r"bs = 0 .* got \[6, 5\]"),
        ((LOGITS[..., :0], TEMPS), {}, ValueError, r"V >= 1, got \[2, 3, 0\]"),
        ((LOGITS.long(), TEMPS), {}, TypeError, r"logits must be a floating-point tensor"),
        ((LOGITS, 1.0), {}, TypeError, r"temperature must be a torch.Tensor, got float"),
        ((LOGITS, None), {}, TypeError, r"temperature must be a torch.Tensor, got NoneType"),
        ((None, TEMPS), {}, TypeError, r"logits must be a torch.Tensor, got NoneType"),
        (
            (LOGITS, TEMPS.view(2, 1)),
            {},
            ValueError,
            r"temperature must have shape \[bs\] \(rank 1\)",
        ),
        ((LOGITS, TEMPS.long()), {}, TypeError, r"temperature must be a floating-point tensor"),
        # The per-request tensors follow the logits: the message names the one elsewhere.
        (
            (LOGITS.to("meta"), TEMPS),
            {},
            ValueError,
            r"temperature is on cpu, expected meta \(the device of logits\)",
        ),
        (
            (LOGITS, TEMPS.to("meta")),
            {},
            ValueError,
            r"temperature is on meta, expected cpu \(the device of logits\)",
        ),
        (
            (LOGITS, TEMPS),
            {"top_p": TEMPS.to("meta")},
            ValueError,
            r"top_p is on meta, expected cpu \(the device of logits\)",
        ),
        ((LOGITS, TEMPS), {"top_k": torch.ones(2)}, TypeError, r"top_k must be an int64 tensor"),
        (
            (LOGITS, TEMPS),
            {"top_k": torch.ones(3, dtype=I64)},
            ValueError,
            r"top_k must have shape \[bs\] = \[2\], got \[3\]",
        ),
        ((LOGITS, TEMPS), {"top_p": torch.ones(2, dtype=I64)}, TypeError, r"top_p must be a float"),
    ],
)
def test_probs_bad_inputs(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        target_probs_from_logits(*args, **kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((-1, 3), {}, ValueError, r"draw_uniforms: bs must be >= 0, got -1"),
        ((2, 0), {}, ValueError, r"num_draft_tokens must be >= 1, got 0"),
        ((2.0, 3), {}, TypeError, r"bs must be an int, got float"),
        ((True, 3), {}, TypeError, r"bs must be an int, got bool"),
        ((2, 3), {"generator": "seed"}, TypeError, r"generator must be a torch\.Generator"),
        ((2, 3), {"device": 3}, TypeError, r"device must be a torch\.device or a str, got int"),
        ((2, 3), {"device": "nonsense"}, ValueError, r"device 'nonsense' is not a valid device"),
        (
            (2, 3),
            {"device": "meta", "generator": torch.Generator()},
            ValueError,
            r"draw_uniforms: generator is on cpu, device is meta",
        ),
    ],
)
def test_uniforms_bad_inputs(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        draw_uniforms(*args, **kwargs)


@pytest.mark.compiled
@pytest.mark.parametrize("chain", [False, True], ids=["tree", "chain"])
def test_compiles_in_one_graph_with_eager_values(chain):
    # fullgraph=True fails on any graph break: no data-dependent Python control flow, no sync.
    # aot_eager traces exactly as inductor would, without its C++ codegen (which torch 2.11's
    # CPU inductor gets wrong for this graph: docs/torch-versions.md).
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(0)
    cfg = DraftConfig.chain(3) if chain else DraftConfig(3, 3, 8)
    n = cfg.num_draft_tokens
    vt = organized_tree(cfg, 5, gen, 12)
    q = target_rows(vt, 12, gen, "agree")
    p = target_rows(vt, 12, gen, "smooth") if chain else None
    u = draw_uniforms(5, n, generator=gen)
    compiled = torch.compile(verify_sampling, fullgraph=True, backend="aot_eager")
    got = compiled(cfg, vt, q, *u, draft_probs=p)
    want = verify_sampling(cfg, vt, q, *u, draft_probs=p)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch._dynamo.reset()


@pytest.mark.compiled
def test_thresholds_specialize_a_callers_graph(fresh_dynamo):
    # docs/sampling.md: the checks read the thresholds, so each new value compiles a new
    # graph, with dynamic=True too; a value seen before reuses its graph.
    gen = torch.Generator().manual_seed(0)
    cfg = DraftConfig(3, 3, 8)
    vt = organized_tree(cfg, 2, gen, 12)
    q = target_rows(vt, 12, gen, "agree")
    u = draw_uniforms(2, 8, generator=gen)

    def step(vt, q, uniforms, final, single):
        return verify_sampling(cfg, vt, q, uniforms, final, threshold_single=single)

    compiled = torch.compile(step, fullgraph=True, dynamic=True, backend="aot_eager")
    for single in (1.0, 0.05, 1.0):
        assert as_lists(compiled(vt, q, *u, single)) == as_lists(step(vt, q, *u, single))
    assert as_lists(step(vt, q, *u, 0.05)) != as_lists(step(vt, q, *u, 1.0))  # values differ
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2


@pytest.mark.compiled
def test_draw_uniforms_with_a_generator_is_drawn_before_a_compiled_region(fresh_dynamo):
    # docs/sampling.md: dynamo cannot trace a torch.Generator argument.
    compiled = torch.compile(
        lambda gen: draw_uniforms(2, 3, generator=gen), fullgraph=True, backend="aot_eager"
    )
    with pytest.raises(torch._dynamo.exc.Unsupported):
        compiled(torch.Generator().manual_seed(0))


def test_draw_uniforms_fails_in_a_dynamic_graph_with_the_default_generator(fresh_dynamo):
    # docs/sampling.md: randint given generator=None cannot take a symbolic size.
    compiled = torch.compile(
        lambda x: draw_uniforms(x.shape[0], 3), fullgraph=True, dynamic=True, backend="aot_eager"
    )
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError, match="randint"):
        compiled(torch.ones(5))


@pytest.mark.compiled
@pytest.mark.parametrize("chain", [False, True], ids=["tree", "chain"])
def test_a_callers_dynamic_graph_serves_every_batch_size(fresh_dynamo, chain):
    # docs/sampling.md: an engine's step (probabilities, then verification) in one graph
    # under dynamic=True for bs 2, 3 and 5, equal to eager (dynamo specializes bs 0 and 1).
    cfg = DraftConfig.chain(3) if chain else DraftConfig(3, 3, 8)
    step = engine_step(verify_sampling, cfg)
    compiled = torch.compile(step, fullgraph=True, dynamic=True, backend="aot_eager")
    for bs in (2, 3, 5):
        inputs = engine_step_inputs(cfg, bs, vocab=13, seed=bs)
        for got, want in zip(compiled(*inputs), step(*inputs), strict=True):
            assert torch.equal(got, want)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_torch_function_runs_169_aten_ops():
    # docs/performance.md: 169 ATen ops at k 4, S 4, N 16 (V 32000 there; V does not matter).
    gen = torch.Generator().manual_seed(0)
    cfg = DraftConfig(4, 4, 16)
    vt = organized_tree(cfg, 2, gen, 50)
    q = target_rows(vt, 50, gen, "smooth")
    u = coins(2, 16, gen, "uniform")
    with OpCounter() as counter:
        verify_sampling(cfg, vt, q, *u)
    assert counter.total == 169
