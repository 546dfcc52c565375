"""Shared verify-tree inputs: semantics.md's example tree and its layout, malformed trees, agreeing
targets."""

import torch

from eagle_fn import DraftConfig, DraftTree, build_verify_tree, organize_tree
from helpers import reference
from helpers.asserts import on
from helpers.drafts import draft_lists

I64 = torch.int64
SPEC_CFG = DraftConfig(4, 3, 8)
SPEC_TREE = DraftTree(
    parent_list=torch.tensor([[-1, 0, 1, 2, 3, 4, 5, 6, 8], [-1, 0, 1, 2, 3, 4, 8, 12, 5]]),
    top_scores_index=torch.tensor([[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 8, 12]]),
    draft_tokens=torch.tensor([[10, 11, 12, 13, 14, 15, 16], [20, 21, 22, 23, 24, 25, 26]]),
)
SPEC_SEQ_LENS = torch.tensor([5, 9])
SPEC_BONUS = torch.tensor([100, 200])


# Mask widths by N for BITPACKED: the narrowest unsigned dtype that holds N bits.
BITPACKED_DTYPES = [
    (2, torch.uint8),
    (8, torch.uint8),
    (9, torch.uint16),
    (16, torch.uint16),
    (17, torch.uint32),
    (32, torch.uint32),
]

# One request on k=2, S=3, N=5: candidates 0-1 step 0, 2-5 step 1 under slots 1-2, 6-9 step 2
# under slots 3-4. (parent_list, top_scores_index) by name; the first five are SGLang's cases.
MALFORMED_CFG = DraftConfig(2, 3, 5)
MALFORMED_CASES = {
    "missing-direct-parent": ([-1, 0, 1, 2, 3], [0, 1, 6, 7]),  # 6, 7 want 2: not selected
    "missing-ancestor": ([-1, 0, 1, 2, 3], [1, 2, 6, 7]),  # 2 wants 0 (missing); 6, 7 want 2
    "cyclic-ancestors": ([-1, 0, 1, 8, 6], [0, 1, 6, 8]),  # 6 wants 8 and 8 wants 6
    "self-parent": ([-1, 0, 1, 6, 3], [0, 1, 6, 7]),  # 6 wants itself (slot 3), 7 wants 6
    "maximum-depth-chain": ([-1, 0, 1, 2, 3], [0, 1, 2, 6]),  # 0 -> 2 -> 6: well formed
    # -1 // 2 is -1 (floor), not 0: candidate -1 has no parent, it is not a root child.
    "negative-candidate": ([-1, 0, 1, 2, 3], [-1, 0, 2, 3]),
    "slot-past-the-table": ([-1, 0, 1, 2, 3], [0, 1, 10, 11]),  # slot 5: no parent
    # Candidate 0 selected twice: children of 0 link to its first node.
    "duplicate-candidate": ([-1, 0, 1, 2, 3], [0, 0, 2, 3]),
    "too-deep-chain": ([-1, 0, 1, 2, 6], [0, 2, 6, 8]),  # 0 -> 2 -> 6 -> 8: four levels
}
# Two requests on MALFORMED_CFG: row 0's candidate 6 wants candidate 4, which row 0 did not
# select and row 1 starts with.
CROSS_ROW_TREE = DraftTree(
    torch.tensor([[-1, 0, 1, 4, 3], [-1, 0, 1, 2, 3]]),
    torch.tensor([[0, 1, 2, 6], [4, 5, 8, 9]]),
    torch.tensor([[5, 6, 7, 8], [1, 2, 3, 4]]),
)

# FULL masks with huge or negative seq_lens and wrong seq_lens_sum, on a chain of N = 3
# (mask rows [1,0,0], [1,1,0], [1,1,1]): name -> (seq_lens, seq_lens_sum, the mask's zero
# cells). Each request's block is 3 rows of seq_len + 3 cells, after the earlier blocks; a
# cell whose int64 offset is outside [0, total) is dropped, every other cell is 1.
FULL_EDGE_CFG = DraftConfig.chain(2)
FULL_EDGE_CASES = {
    "valid": ([2, 1], 3, [3, 4, 9, 17, 18, 22]),  # blocks [0, 15) and [15, 27)
    "sum-too-small": ([2, 1], 1, [3, 4, 9, 17, 18]),  # total 21: 21, 22, 24-26 dropped
    "sum-zero": ([2, 1], 0, [3, 4, 9, 17]),  # total 18
    "sum-too-large": ([2, 1], 5, [3, 4, 9, 17, 18, 22]),  # total 33: 27-32 stay 1
    # 0.4 * 2**64: row 0 past the end, row 1 wraps negative, row 2 wraps back past the end.
    "huge": ([int(0.4 * 2**64)], 0, []),
    # Request 1's block starts at 3 * 2**62, which wraps to -2**62: its row 0 lands on 0-2.
    "huge-wraps-into-range": ([2**62 - 3, 2**62], 0, [1, 2]),
    "negative": ([-10], 0, []),  # every offset below 0
    "negative-huge": ([-(2**62)], 0, []),  # row 2 wraps past the end
    # Request 1 starts at 3 * (-11 + 3) = -24: row 0 below 0, rows 1-2 at 19-21 and 42-44.
    "negative-then-valid": ([-11, 20], 9, [21]),
    # Request 1 starts at 3 * (-2**61 + 3) + 3 * 2**61 - 10 = -1: row 0's nodes 1 and 2,
    # unseen by the root, land on cells 0 and 1 (the first cell kept); rows 1-2 past the end.
    "lands-on-0": ([-(2**61), 3 * 2**61 - 10], 0, [0, 1]),
}


# Negative seq_lens whose blocks overlap inside the mask: rows of one request (and of
# neighbours) share cells, with different values, which no ordering specifies.
OVERLAPPING_FULL = {
    "chain, seq_len -1": (FULL_EDGE_CFG, [-1], 0),  # cells 1 and 3 each get a 0 and a 1
    "tree, three requests": (DraftConfig(2, 3, 6), [-6, -4, -4], 0),
}


def overlapping_full_inputs(name, device="cpu"):
    """(cfg, tree, bonus_tokens, seq_lens, seq_lens_sum, allowed) of ``OVERLAPPING_FULL[name]``:
    ``allowed`` lists, per cell of the FULL mask, the values it may hold."""
    cfg, seq_lens, seq_lens_sum = OVERLAPPING_FULL[name]
    bs, n = len(seq_lens), cfg.num_draft_tokens
    tree = organize_tree(cfg, *draft_lists(cfg, bs, torch.Generator().manual_seed(bs)))
    bonus, lens = torch.arange(bs), torch.tensor(seq_lens)
    flat = reference.verify_tree(cfg, tree, bonus, lens, "qlen")["tree_mask"]  # [bs * N * N]
    rows = torch.tensor(flat).view(bs, n, n).tolist()
    allowed = reference.full_mask_values(rows, seq_lens, n * seq_lens_sum + bs * n * n)
    assert any(len(values) > 1 for values in allowed)  # the case overlaps, as it says
    return cfg, on(tree, device), bonus.to(device), lens.to(device), seq_lens_sum, allowed


def full_edge_inputs(name, device="cpu"):
    """(tree, bonus_tokens, seq_lens, seq_lens_sum) of ``FULL_EDGE_CASES[name]``: chains."""
    seq_lens, seq_lens_sum, _ = FULL_EDGE_CASES[name]
    bs = len(seq_lens)
    tree = DraftTree(
        torch.tensor([[-1, 0]] * bs), torch.tensor([[0, 1]] * bs), torch.tensor([[5, 6]] * bs)
    )
    rows = torch.tensor([7] * bs, device=device), torch.tensor(seq_lens, device=device)
    return on(tree, device), *rows, seq_lens_sum


def full_edge_mask(name):
    """The exact FULL mask (0/1 list) of ``FULL_EDGE_CASES[name]``."""
    seq_lens, seq_lens_sum, zeros = FULL_EDGE_CASES[name]
    mask = [1] * (3 * seq_lens_sum + len(seq_lens) * 9)
    for cell in zeros:
        mask[cell] = 0
    return mask


def spec_inputs(device="cpu"):
    """(tree, bonus_tokens, seq_lens) of semantics.md's example on ``device``."""
    return on(SPEC_TREE, device), SPEC_BONUS.to(device), SPEC_SEQ_LENS.to(device)


def assert_spec_layout(vt):
    """``vt`` has semantics.md §7's positions and first-child / next-sibling links, literally."""
    assert vt.positions.tolist() == [5, 6, 6, 6, 6, 7, 7, 7, 9, 10, 10, 10, 10, 11, 11, 11]
    assert vt.retrieve_next_token.tolist() == [
        [1, 5, -1, -1, -1, -1, -1, -1],
        [1, 5, 6, 7, -1, -1, -1, -1],
    ]
    assert vt.retrieve_next_sibling.tolist() == [
        [-1, 2, 3, 4, -1, 6, 7, -1],
        [-1, 2, 3, 4, -1, -1, -1, -1],
    ]


def spec_target(device="cpu"):
    """[bs * N] target predictions for SPEC_TREE whose greedy walk takes a later sibling.

    Row 0: root -> node 1 (token 10) -> children 5, 6, 7 (tokens 14, 15, 16); the target
    picks 16, the third sibling, then says 77. Row 1: root -> node 3 (token 22) -> node 7
    (token 26), a leaf, then 88.
    """
    target = torch.zeros(16, dtype=I64)
    target[[0, 1, 7]] = torch.tensor([10, 16, 77])
    target[[8, 11, 15]] = torch.tensor([22, 26, 88])
    return target.to(device)


def assert_spec_walk(verdict):
    """``verdict`` is the greedy walk of spec_target() over SPEC_TREE."""
    assert verdict.accept_index.tolist() == [[0, 1, 7, -1], [8, 11, 15, -1]]
    assert verdict.num_accepted.tolist() == [2, 2]


def malformed_case(name, device="cpu"):
    """MALFORMED_CASES[name] as a one-request DraftTree drafting tokens 5, 6, 7, 8."""
    parents, selected = MALFORMED_CASES[name]
    tree = DraftTree(
        torch.tensor([parents]), torch.tensor([selected]), torch.tensor([[5, 6, 7, 8]])
    )
    return on(tree, device)


def chain_verify_tree(tokens, device="cpu"):
    """(cfg, verify tree) of a one-request chain drafting ``tokens`` after bonus 50, seq_len 10."""
    steps = len(tokens)
    cfg = DraftConfig.chain(steps)
    tree = DraftTree(
        torch.arange(-1, steps - 1).view(1, -1) if steps > 1 else torch.zeros(1, 0, dtype=I64),
        torch.arange(steps).view(1, -1),
        torch.tensor([tokens]),
    )
    row = torch.tensor([50], device=device), torch.tensor([10], device=device)
    return cfg, build_verify_tree(cfg, on(tree, device), *row)


def malformed_tree(cfg, bs, gen):
    """Random parent tables and selections: missing parents, cycles, self-parents, duplicates,
    negative and out-of-range candidates (their slots floor below 0 or past the table), and
    rows whose only fault is a chain one level deeper than num_steps (:func:`too_deep`)."""
    n, width = cfg.num_draft_tokens, cfg.num_candidates
    parents = torch.randint(-2, width + 2, (bs, cfg.parent_width), generator=gen)
    selected = torch.randint(-cfg.topk - 2, width + cfg.topk + 2, (bs, n - 1), generator=gen)
    if torch.rand(1, generator=gen).item() < 0.5:
        selected = torch.sort(selected, dim=1).values
    # Point many parent slots at selected candidates so that links and cycles actually form.
    for b in range(bs):
        for slot in range(1, cfg.parent_width):
            if torch.rand(1, generator=gen).item() < 0.6:
                parents[b, slot] = selected[b, torch.randint(0, n - 1, (1,), generator=gen)]
    tokens = torch.randint(0, 1000, (bs, n - 1), generator=gen)
    for b in range(bs):
        if torch.rand(1, generator=gen).item() < 0.3:
            too_deep(cfg, parents[b], selected[b], gen)
    return DraftTree(parents, selected, tokens)


def too_deep(cfg, parents, selected, gen):
    """Rewrites one request as a cycle-free chain of num_steps + 1 selected candidates, each
    the parent of the next, among children of the root: well formed but for the chain's
    depth, a fault only the last of num_steps hops finds. Needs num_steps slots past the
    first (a chain config has num_steps - 1) and N - 1 > num_steps; else writes nothing."""
    k, steps = cfg.topk, cfg.num_steps
    if k < 2 or steps < 2 or cfg.num_draft_tokens - 1 <= steps:
        return
    slots = torch.randperm(cfg.parent_width - 1, generator=gen)[:steps].sort().values + 1
    chain = [int(torch.randint(0, k, (1,), generator=gen))]  # a child of the root
    for slot in slots.tolist():  # ascending slots: each link points back, no cycle
        parents[slot] = chain[-1]
        chain.append(slot * k + int(torch.randint(0, k, (1,), generator=gen)))
    selected.copy_(torch.randint(0, k, selected.shape, generator=gen))  # the rest: depth 1
    at = torch.randperm(selected.numel(), generator=gen)[: steps + 1].sort().values
    selected[at] = torch.tensor(chain)


def agreeing_children(vt, gen, agree=0.8):
    """Per flat node, the flat index of the child a target should name, or -1: usually a child
    (often a later sibling), so that greedy walks go deep and take every branch. Only links
    inside [0, N) are followed, at most N sibling hops: scrambled and malformed trees are fine."""
    bs, n = vt.retrieve_index.shape
    first, sibling = vt.retrieve_next_token.tolist(), vt.retrieve_next_sibling.tolist()
    chosen = [-1] * (bs * n)
    for b in range(bs):
        for node in range(n):
            child = first[b][node]
            if not 0 <= child < n or torch.rand(1, generator=gen).item() > agree:
                continue
            hops = 0
            while 0 <= sibling[b][child] < n and hops < n and torch.rand(1, generator=gen) < 0.4:
                child, hops = sibling[b][child], hops + 1
            chosen[b * n + node] = b * n + child
    return chosen


def agreeing_target(vt, gen, agree=0.8):
    """[bs * N] target predictions that name agreeing_children's choice, else a random token."""
    tokens = vt.draft_tokens.tolist()
    target = torch.randint(0, 1000, (len(tokens),), generator=gen).tolist()
    for node, child in enumerate(agreeing_children(vt, gen, agree)):
        if child >= 0:
            target[node] = tokens[child]
    return torch.tensor(target, dtype=I64)
