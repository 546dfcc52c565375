"""Inputs for the verify-kernel tests: small configs and adversarial links (malformed trees and
agreeing targets are in trees.py, shared with the torch tests)."""

import torch

from eagle_fn import DraftConfig, DraftTree, VerifyTree
from helpers.drafts import draft_configs

I64 = torch.int64


# Configs small enough for the Triton interpreter: topk and num_steps <= 5, N <= 40.
SMALL_CONFIGS = draft_configs(max_topk=5, max_steps=5, max_n=40)


def scrambled_links(vt, gen, *, scramble_index=False):
    """``vt`` with random first-child and sibling links (cycles, self-links, values outside
    ``[-1, N - 1]``), tokens from a 3-letter alphabet so matches are frequent, and optionally
    a random ``retrieve_index`` (entries naming other rows' nodes, or no node at all, some
    at the ends of int64)."""
    bs, n = vt.retrieve_index.shape
    links = (bs, n)
    vt = vt._replace(
        draft_tokens=torch.randint(0, 3, (bs * n,), generator=gen),
        retrieve_next_token=torch.randint(-3, n + 3, links, generator=gen),
        retrieve_next_sibling=torch.randint(-3, n + 3, links, generator=gen),
    )
    if scramble_index:
        index = torch.randint(-2, bs * n + 2, links, generator=gen)
        extremes = torch.tensor([-(2**63), -(2**62), 2**62, 2**63 - 1])  # no product may wrap
        pick = torch.randint(0, len(extremes), links, generator=gen)
        rare = torch.randint(0, 8, links, generator=gen) == 0
        vt = vt._replace(retrieve_index=torch.where(rare, extremes[pick], index))
    return vt


def sibling_ring(n, match_at):
    """One request whose root's first child is the root itself, and whose sibling links run
    0 -> 1 -> .. -> N-1 -> 0, a cycle through every node. Only node ``match_at`` carries token
    7 (``-1``: none does), so a target of 7 at the root is found after ``match_at`` hops; N - 1
    hops, the most any first match can need, for ``match_at = N - 1``.
    """
    tokens = [7 if node == match_at else 3 for node in range(n)]
    return VerifyTree(
        draft_tokens=torch.tensor(tokens),
        positions=torch.zeros(n, dtype=I64),
        tree_mask=torch.ones(n * n, dtype=torch.bool),
        retrieve_index=torch.arange(n).view(1, n),
        retrieve_next_token=torch.tensor([[0] + [-1] * (n - 1)]),
        retrieve_next_sibling=torch.tensor([[*range(1, n), 0]]),
    )


# N = 64, the most nodes whose walks fit one int64 word: topk 2 and 33 steps give a parent
# table of 65 slots, so node j >= 2 can be candidate 2j, in slot j (node 1 is candidate 0, the
# root's child). Node 5 has children 6, 31, 32 and 63: siblings across the int32 halves and at
# bit 63. 2..30 and 33..62 chain down from 1 and 32; 45's parent is not selected; 50 is its
# own parent; 62's walk is 36 nodes long, past the 33 steps.
EDGE_CFG = DraftConfig(2, 33, 64)
EDGE_PARENTS = {**{j: j - 1 for j in range(2, 64)}, 31: 5, 32: 5, 63: 5, 45: None, 50: 50}


def edge_tree(*, ascending=True):
    """EDGE_PARENTS as a one-request DraftTree; ``ascending=False`` lists the same candidates
    in descending order (the nodes are then numbered the other way round)."""
    candidate = {1: 0, **{j: 2 * j for j in range(2, 64)}}
    parents = [-1] * EDGE_CFG.parent_width
    for node, parent in EDGE_PARENTS.items():
        parents[node] = -7 if parent is None else candidate[parent]  # -7: never selected
    selected = [candidate[j] for j in range(1, 64)]
    selected = selected if ascending else selected[::-1]
    tokens = [100 + c for c in selected]
    return DraftTree(torch.tensor([parents]), torch.tensor([selected]), torch.tensor([tokens]))
