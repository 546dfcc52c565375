"""Inputs for the verify-kernel tests: small configs and adversarial links (malformed trees and
agreeing targets are in trees.py, shared with the torch tests)."""

import torch

from drafts import draft_configs
from eagle_fn import VerifyTree

I64 = torch.int64


# Configs small enough for the Triton interpreter: topk and num_steps <= 5, N <= 40.
SMALL_CONFIGS = draft_configs(max_topk=5, max_steps=5, max_n=40)


def scrambled_links(vt, gen, *, scramble_index=False):
    """``vt`` with random first-child and sibling links (cycles, self-links, values outside
    ``[-1, N - 1]``), tokens from a 3-letter alphabet so matches are frequent, and optionally
    a random ``retrieve_index`` (entries naming other rows' nodes, or no node at all)."""
    bs, n = vt.retrieve_index.shape
    links = (bs, n)
    vt = vt._replace(
        draft_tokens=torch.randint(0, 3, (bs * n,), generator=gen),
        retrieve_next_token=torch.randint(-3, n + 3, links, generator=gen),
        retrieve_next_sibling=torch.randint(-3, n + 3, links, generator=gen),
    )
    if scramble_index:
        vt = vt._replace(retrieve_index=torch.randint(-2, bs * n + 2, links, generator=gen))
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
