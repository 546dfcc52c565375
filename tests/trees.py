"""Shared verify-tree inputs: the SPEC's example tree, malformed trees, agreeing targets."""

import torch

from eagle_fn import DraftConfig, DraftTree

I64 = torch.int64
SPEC_CFG = DraftConfig(4, 3, 8)
SPEC_TREE = DraftTree(
    parent_list=torch.tensor([[-1, 0, 1, 2, 3, 4, 5, 6, 8], [-1, 0, 1, 2, 3, 4, 8, 12, 5]]),
    top_scores_index=torch.tensor([[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 8, 12]]),
    draft_tokens=torch.tensor([[10, 11, 12, 13, 14, 15, 16], [20, 21, 22, 23, 24, 25, 26]]),
)
SPEC_SEQ_LENS = torch.tensor([5, 9])
SPEC_BONUS = torch.tensor([100, 200])


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


def agreeing_target(vt, gen, agree=0.8):
    """Target predictions that usually name a child of each node (often a later sibling), so
    that greedy walks go deep and take every branch. Links outside [0, N) and sibling cycles,
    as in scrambled or malformed trees, end the search for a child."""
    bs, n = vt.retrieve_index.shape
    tokens = vt.draft_tokens.tolist()
    first, sibling = vt.retrieve_next_token.tolist(), vt.retrieve_next_sibling.tolist()
    target = torch.randint(0, 1000, (bs * n,), generator=gen).tolist()
    for b in range(bs):
        for node in range(n):
            child = first[b][node]
            if not 0 <= child < n or torch.rand(1, generator=gen).item() > agree:
                continue
            hops = 0
            while 0 <= sibling[b][child] < n and hops < n and torch.rand(1, generator=gen) < 0.4:
                child, hops = sibling[b][child], hops + 1
            target[b * n + node] = tokens[b * n + child]
    return torch.tensor(target, dtype=I64)
