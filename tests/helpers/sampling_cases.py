"""Literal sampling-verification cases at the edges of the contract (docs/sampling.md), with
their exact verdicts worked out by hand: the torch function, the loop reference and the
kernel must all give them.

Each entry of EDGE_CASES is ``(SamplingCase, [accept_index, num_accepted, predicts])``.
"""

import math

import torch

from eagle_fn import DraftConfig, DraftTree, VerifyTree, build_verify_tree
from helpers.sampling_inputs import SamplingCase

t = torch.tensor
NAN = math.nan

# A chain of S = 2 drafting tokens 1 then 2 after bonus 0 (test_sampling's CHAIN_VT).
CHAIN_CFG = DraftConfig.chain(2)
CHAIN_VT = build_verify_tree(
    CHAIN_CFG, DraftTree(t([[-1, 0]]), t([[0, 1]]), t([[1, 2]])), t([0]), t([3])
)
Q = [[0.1, 0.6, 0.2, 0.1], [0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 0.0, 1.0]]
P = [[0.0, 0.8, 0.2, 0.0], [0.25, 0.0, 0.75, 0.0], [0.0, 0.0, 0.0, 0.0]]


def chain(coins, final, *, q0=None, p0=None, tokens=None):
    """A chain case with draft_probs: Q and P with row 0 replaced, and other draft tokens."""
    q, p = t(Q), t(P)
    if q0 is not None:
        q[0], p[0] = t(q0), t(p0)
    vt = CHAIN_VT if tokens is None else CHAIN_VT._replace(draft_tokens=t(tokens))
    return SamplingCase(CHAIN_CFG, vt, q, t([coins]), t([final]), draft_probs=p)


def chain_with_sibling():
    """CHAIN_VT whose node 1 has node 2 as its next sibling, a link no chain has; coin 0.99
    rejects node 1, and node 2 would pass (0.99 * 0.2 <= 0.2) if it were tried."""
    links = {"retrieve_next_token": t([[1, -1, -1]]), "retrieve_next_sibling": t([[-1, 2, -1]])}
    vt = CHAIN_VT._replace(**links)
    return SamplingCase(CHAIN_CFG, vt, t(Q), t([[0.99, 0.5, 0.5]]), t([0.75]), draft_probs=t(P))


# test_sampling's tree (topk 2): root -> node 1 (token 7), node 2 (token 9); node 1 -> node 3.
TREE_CFG = DraftConfig(2, 2, 4)
TREE_VT = build_verify_tree(
    TREE_CFG, DraftTree(t([[-1, 0, 1]]), t([[0, 1, 2]]), t([[7, 9, 4]])), t([5]), t([10])
)
NAN_ROOT = [0.1, 0.0, 0.0, 0.1, 0.0, 0.1, 0.0, NAN, 0.0, 0.5]  # q(7) NaN, q(9) = 0.5
NODE2 = [0.0, 0.0, 0.25, 0.0, 0.0, 0.0, 0.75, 0.0, 0.0, 0.0]


def nan_sibling(single):
    q = t([NAN_ROOT, [0.0] * 4 + [1.0] + [0.0] * 5, NODE2, [0.0, 1.0] + [0.0] * 8])
    return SamplingCase(TREE_CFG, TREE_VT, q, t([[0.4, 0.5, 0.5, 0.5]]), t([0.5]), (single, 1.0))


# topk 2, one step: root children node 1 (token 3), node 2 (token 1); greedy one-hot rows at
# token 1 (tiny_threshold_single_breaks_greedy_rows).
TINY_CFG = DraftConfig(2, 1, 3)
TINY_VT = build_verify_tree(
    TINY_CFG, DraftTree(torch.zeros(1, 0, dtype=torch.int64), t([[0, 1]]), t([[3, 1]])),
    t([0]), t([4]),
)  # fmt: skip


def tiny_single(single):
    q = t([[0.0, 1.0, 0.0, 0.0]] * 3)
    return SamplingCase(TINY_CFG, TINY_VT, q, t([[0.5] * 3]), t([0.5]), (single, 1.0))


# topk 3, one step: root children node 1 (token 0), node 2 (token 1), node 3 (token 2).
WIDE_CFG = DraftConfig(3, 1, 4)
WIDE_VT = build_verify_tree(
    WIDE_CFG, DraftTree(torch.zeros(1, 0, dtype=torch.int64), t([[0, 1, 2]]), t([[0, 1, 2]])),
    t([3]), t([4]),
)  # fmt: skip


def sequential_accumulator():
    # q: 0.5, then 2**-25 twice: 0.5 + 2**-25 rounds back to 0.5 (a tie, to even) at each add,
    # where a wider accumulator (torch.cumsum on a CPU) reaches 0.5 + 2**-24 at node 3.
    root = [0.5, 2.0**-25, 2.0**-25, 0.25]
    q = t([root] + [[0.0, 0.0, 0.0, 1.0]] * 3)
    return SamplingCase(WIDE_CFG, WIDE_VT, q, t([[0.5 + 2.0**-24, 0.5, 0.5, 0.5]]), t([0.5]))


def sibling_ring():
    """WIDE_VT with the root's children in a ring 1 -> 2 -> 3 -> 1 (tokens 0, 1, 2): the walk
    tries N = 4 of them, node 1 twice, and stops with acc 0.625 below coin 0.75, where a fifth
    try (node 2 again, acc 0.875) would accept. All rejected: the final row keeps token 3."""
    vt = WIDE_VT._replace(retrieve_next_sibling=t([[-1, 2, 3, 1]]))
    q = t([[0.125, 0.25, 0.125, 0.5]] + [[0.0, 0.0, 0.0, 1.0]] * 3)
    return SamplingCase(WIDE_CFG, vt, q, t([[0.75, 0.5, 0.5, 0.5]]), t([0.5]))


def tied_final_coin():
    """WIDE_VT whose root children (tokens 0, 1, 2) have no target mass, so all are rejected;
    the final row is four 0.25s at tokens 3..6, and coin 0.5 * total 1 equals the running sum
    at token 4: the first sum that exceeds it is token 5's."""
    q = t([[0.0, 0.0, 0.0, 0.25, 0.25, 0.25, 0.25, 0.0]] * 4)
    return SamplingCase(WIDE_CFG, WIDE_VT, q, t([[0.5, 0.5, 0.5, 0.5]]), t([0.5]))


def floored(q7, acc):
    """TREE_VT with node 1's token 7 at ``q7`` in the root row, 0.5 at token 0, and coins 0.5:
    node 1 passes when q7 / max(acc, 1e-9) >= 0.5, then node 3 (token 4, q 0.6) does too."""
    root = [0.5] + [0.0] * 6 + [q7, 0.0, 0.0]
    node1 = [0.0] * 4 + [0.6] + [0.0] * 3 + [0.4, 0.0]
    q = t([root, node1, NODE2, [0.0, 1.0] + [0.0] * 8])
    return SamplingCase(TREE_CFG, TREE_VT, q, t([[0.5] * 4]), t([0.5]), (1.0, acc))


# A chain of S = 1 whose node 1 (token 1) is its own child: after the walk accepts it, node 1
# still tries (and rejects, coin 0.75 > 0.5) its child, but every level accepted, so the final
# token comes from node 1's plain row [0, .5, .5, 0]: u = 0.25, token 1.
LOOP_CFG = DraftConfig.chain(1)
LOOP_VT = VerifyTree(
    draft_tokens=t([0, 1]),
    positions=t([0, 1]),
    tree_mask=torch.ones(4, dtype=torch.bool),
    retrieve_index=t([[0, 1]]),
    retrieve_next_token=t([[1, 1]]),
    retrieve_next_sibling=t([[-1, -1]]),
)
LOOP_Q = [[0.0, 1.0, 0.0, 0.0], [0.0, 0.5, 0.5, 0.0]]


def accepted_loop(draft):
    p = t([[0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]) if draft else None
    return SamplingCase(LOOP_CFG, LOOP_VT, t(LOOP_Q), t([[0.5, 0.75]]), t([0.25]), draft_probs=p)


def one_token(tokens):
    """TREE_VT's shape drafting ``tokens`` over a vocabulary of one token: every row [1.0]."""
    vt = TREE_VT._replace(draft_tokens=t(tokens))
    return SamplingCase(TREE_CFG, vt, torch.ones(4, 1), torch.full((1, 4), 0.5), t([0.5]))


EDGE_CASES = {
    # q(1) = p(1) = 0: 0.99 * 0 <= 0, yet rejected (min(1, q/p) = 0); relu(q0 - p0) is
    # [0, 0, 0, 0.2]: token 3.
    "draft_q_zero_p_zero": (
        chain([0.99, 0.5, 0.5], 0.5, q0=[0.4, 0.0, 0.4, 0.2], p0=[0.5, 0.0, 0.5, 0.0]),
        [[[0, -1, -1]], [0], [3, 0, 0]],
    ),
    # q(1) = 0 with coin 0 (0 * 0.8 <= 0): rejected. relu(q0 - p0) = [0.4, 0, 0.2, 0.2],
    # u = 0.5 * 0.8 = 0.4 ties token 0's running sum, which does not exceed it: token 2.
    "draft_q_zero_coin_zero": (
        chain([0.0, 0.5, 0.5], 0.5, q0=[0.4, 0.0, 0.4, 0.2], p0=[0.0, 0.8, 0.2, 0.0]),
        [[[0, -1, -1]], [0], [2, 0, 0]],
    ),
    # coin * p == q exactly (0.5 * 0.75 = 0.375) accepts: the rule is coin * p <= q. Node 2
    # is rejected (0.5 * 0.75 > 0.3); relu(Q1 - P1) = [0.25, 0, 0, 0.2], u = 0.3375: token 3.
    "draft_coin_times_p_equals_q": (
        chain([0.5, 0.5, 0.5], 0.75, q0=[0.25, 0.375, 0.25, 0.125], p0=[0.0, 0.75, 0.25, 0.0]),
        [[[0, 1, -1]], [1], [1, 3, 0]],
    ),
    # With draft_probs only a node's first child is tried, whatever its sibling links say:
    # node 1 is rejected (0.99 * 0.8 > 0.6), its sibling never tried. relu(Q0 - P0) =
    # [0.1, 0, 0, 0.1], u = 0.15: token 3.
    "draft_ignores_siblings": (chain_with_sibling(), [[[0, -1, -1]], [0], [3, 0, 0]]),
    # Token 9 outside [0, V): q = p = 0, rejected; relu(Q0 - P0) = [0.1, 0, 0, 0.1], u = 0.15.
    "draft_outside_vocab_at_root": (
        chain([0.999, 0.999, 0.5], 0.75, tokens=[0, 9, 2]),
        [[[0, -1, -1]], [0], [3, 0, 0]],
    ),
    # Token 1 accepted (0.7 * 0.8 <= 0.6), then -3 rejected: relu(Q1 - P1) = [0.25, 0, 0, 0.2],
    # u = 0.75 * 0.45 = 0.3375: token 3.
    "draft_outside_vocab_deeper": (
        chain([0.7, 0.0, 0.5], 0.75, tokens=[0, 1, -3]),
        [[[0, 1, -1]], [1], [1, 3, 0]],
    ),
    # Rejected (q(1) < 0); the residual is relu(q - p) = [0, 0.25, 0, 0]: the rejected token
    # keeps its mass (only target-only removes tried tokens).
    "draft_negative_probabilities": (
        chain([0.5, 0.5, 0.5], 0.5, q0=[0.0, -0.75, 0.0, 0.0], p0=[0.0, -1.0, 0.5, 0.0]),
        [[[0, -1, -1]], [0], [1, 0, 0]],
    ),
    # The NaN child makes the accumulator NaN (SGLang adds it): node 2 (q 0.5) is rejected at
    # coin 0.4, although 0.5 >= 0.4. Tokens 7, 9 leave the root row; u = 0.15: token 3.
    "nan_sibling": (nan_sibling(1.0), [[[0, -1, -1]], [0], [3, 0, 0, 0]]),
    # ... but q(9) = 0.5 >= threshold_single still accepts node 2; its row draws token 6.
    "nan_sibling_single": (nan_sibling(0.5), [[[0, 2, -1]], [1], [9, 0, 6, 0]]),
    # threshold_single 2**-150 rounds to float32 0: q(3) = 0 >= 0 accepts node 1.
    "tiny_single_rounds_to_zero": (tiny_single(2.0**-150), [[[0, 1]], [1], [3, 1, 0]]),
    # 2**-149 is float32's least subnormal: node 1 rejected, node 2 (the argmax) accepted.
    "tiny_single_positive": (tiny_single(2.0**-149), [[[0, 2]], [1], [1, 0, 1]]),
    # The accumulator adds in float32 one child at a time (SGLang's kernel): coin 0.5 + 2**-24
    # exceeds it at every child, all three are rejected and leave the root row: token 3.
    "sequential_accumulator": (sequential_accumulator(), [[[0, -1]], [0], [3, 0, 0, 0]]),
    # Every root child rejected; the final coin ties token 4's running sum, so token 5.
    "final_coin_ties_a_running_sum": (tied_final_coin(), [[[0, -1]], [0], [5, 0, 0, 0]]),
    "sibling_ring_tries_n_children": (sibling_ring(), [[[0, -1]], [0], [3, 0, 0, 0]]),
    # threshold_acc is floored at 1e-9, not lower: 2e-10 / 1e-9 = 0.2 < 0.5 rejects node 1
    # (node 2 adds 0); tokens 7, 9 leave the root row, which keeps 0.5 at token 0 ...
    "threshold_acc_floor_rejects": (floored(2e-10, 0.0), [[[0, -1, -1]], [0], [0, 0, 0, 0]]),
    "threshold_acc_below_floor": (floored(2e-10, 1e-12), [[[0, -1, -1]], [0], [0, 0, 0, 0]]),
    # ... and not higher: 1e-9 / 1e-9, about 1, >= 0.5 accepts node 1, then node 3: its row
    # [0, 1, 0, ...] draws token 1.
    "threshold_acc_floor_accepts": (floored(1e-9, 0.0), [[[0, 1, 3]], [2], [7, 4, 0, 1]]),
    # Every level accepted: node 1's rejected child removes nothing from the final row ...
    "accepted_loop": (accepted_loop(False), [[[0, 1]], [1], [1, 1]]),
    # ... and with draft_probs the final row is q, not relu(q - p) = [0, 0, .5, 0].
    "accepted_loop_draft": (accepted_loop(True), [[[0, 1]], [1], [1, 1]]),
    # V = 1: token 0 has q = 1 (acc 1 >= coin 0.5) and is accepted at both levels; every
    # draw gives token 0 ...
    "one_token_vocabulary": (one_token([5, 0, 9, 0]), [[[0, 1, 3]], [2], [0, 0, 0, 0]]),
    # ... and a token outside it reads q = 0: node 1 (token 3) is rejected, node 2 accepted.
    "one_token_vocabulary_outside": (one_token([5, 3, 0, 0]), [[[0, 2, -1]], [1], [0, 0, 0, 0]]),
}
