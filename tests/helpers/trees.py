"""Shared verify-tree inputs: semantics.md's example tree and its layout, malformed trees, agreeing
targets."""

import torch

from eagle_fn import DraftConfig, DraftTree, build_verify_tree
from helpers.asserts import on

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
}
# Two requests on MALFORMED_CFG: row 0's candidate 6 wants candidate 4, which row 0 did not
# select and row 1 starts with.
CROSS_ROW_TREE = DraftTree(
    torch.tensor([[-1, 0, 1, 4, 3], [-1, 0, 1, 2, 3]]),
    torch.tensor([[0, 1, 2, 6], [4, 5, 8, 9]]),
    torch.tensor([[5, 6, 7, 8], [1, 2, 3, 4]]),
)


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
    negative and out-of-range candidates (their slots floor below 0 or past the table)."""
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
    return DraftTree(parents, selected, tokens)


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
