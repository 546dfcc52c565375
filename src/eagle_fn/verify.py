"""Greedy verification: walk the verify tree, accepting drafts the target model agrees with."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .config import DraftConfig
from .contracts import Arg, contract, fields
from .types import GreedyVerdict, VerifyTree

# What verification reads of a VerifyTree (sampling verification too).
VERIFY_TREE = fields(
    VerifyTree,
    retrieve_index=Arg("[bs, N]"),
    retrieve_next_token=Arg("[bs, N]"),
    retrieve_next_sibling=Arg("[bs, N]"),
    draft_tokens=Arg("[bs * N]"),
)
VERIFY_GREEDY = contract(
    "verify_greedy", verify_tree=VERIFY_TREE, target_predict=Arg("[bs * N] or [bs, N]")
)


def verify_greedy(
    cfg: DraftConfig, verify_tree: VerifyTree, target_predict: Tensor
) -> GreedyVerdict:
    """Accepts the longest draft path the target agrees with greedily (docs/semantics.md §8).

    Each level accepts the first child, in link order, whose token is the target's argmax
    at the last accepted node; looping links terminate. Commit ``predicts`` at
    ``accept_index``: the accepted drafts, then the target's token after the last one.

    Args:
        cfg: the draft configuration the tree was built with. Only its ``N`` shows in the
            tree's shapes: a config of fewer ``num_steps`` cuts the walk short, unchecked.
        verify_tree: from :func:`~eagle_fn.build_verify_tree` or
            :meth:`~eagle_fn.DraftOrganizer.build_verify`.
        target_predict: the target model's argmax at every node, int64.

    Shapes: ``target_predict [bs * N]`` or ``[bs, N]`` -> ``accept_index [bs, num_steps + 1]``,
    ``num_accepted [bs]``, ``predicts [bs * N]``.

    Example:
        >>> from eagle_fn import DraftConfig, DraftTree, build_verify_tree
        >>> cfg = DraftConfig.chain(2)
        >>> parents, selected = torch.tensor([[-1, 0]]), torch.tensor([[0, 1]])
        >>> tree = DraftTree(parents, selected, draft_tokens=torch.tensor([[7, 9]]))
        >>> bonus, seq_lens = torch.tensor([5]), torch.tensor([3])
        >>> vt = build_verify_tree(cfg, tree, bonus, seq_lens)
        >>> # The target follows 5 with 7 (accept), then 7 with 8, not 9 (stop): commit 7, 8.
        >>> verdict = verify_greedy(cfg, vt, torch.tensor([7, 8, 2]))
        >>> verdict.accept_index.tolist(), verdict.num_accepted.tolist(), verdict.predicts.tolist()
        ([[0, 1, -1]], [1], [7, 8, 0])
    """
    return greedy_core(*greedy_args(cfg, verify_tree, target_predict))


def greedy_args(cfg: Any, verify_tree: Any, target_predict: Any) -> tuple[Any, ...]:
    """:func:`verify_greedy`'s arguments, checked, as :func:`greedy_core` takes them."""
    VERIFY_GREEDY(cfg, verify_tree, target_predict)
    return cfg, verify_tree.draft_tokens, *verify_tree.links, target_predict.reshape(-1)


def greedy_core(
    cfg: DraftConfig,
    draft_tokens: Tensor,
    retrieve_index: Tensor,
    retrieve_next_token: Tensor,
    retrieve_next_sibling: Tensor,
    target_predict: Tensor,
) -> GreedyVerdict:
    """:func:`verify_greedy` without its checks; ``target_predict`` is flat, ``[bs * N]``.

    Parameters are named as the contract names the fields, so compiled specs line up.
    """
    next_token, next_sibling, target = retrieve_next_token, retrieve_next_sibling, target_predict
    bs, n = retrieve_index.shape
    flat = bs * n
    tokens = draft_tokens.view(bs, n)  # [bs, N]
    links = end_outside(next_sibling, n)  # [bs, N]
    cur = torch.zeros(bs, dtype=torch.int64, device=tokens.device)  # [bs] last accepted node
    last = retrieve_index[:, 0]  # [bs] its flat index
    alive = torch.ones(bs, dtype=torch.bool, device=tokens.device)  # [bs]
    accepted = [last]
    for _ in range(cfg.num_steps):
        want = target.gather(0, last.clamp(0, max(flat - 1, 0)))  # [bs] the target's next token
        head = end_outside(next_token.gather(1, cur.unsqueeze(1)).squeeze(1), n)  # [bs]
        child = first_match_along(links, head, tokens == want.unsqueeze(1))  # [bs]
        alive = alive & (child >= 0)
        cur = torch.where(alive, child, cur)  # [bs]
        picked = retrieve_index.gather(1, cur.unsqueeze(1)).squeeze(1)  # [bs]
        last = torch.where(alive, picked, last)  # [bs]
        accepted.append(torch.where(alive, picked, -1))  # [bs]
    accept_index = torch.stack(accepted, dim=1)  # [bs, S + 1]
    num_accepted = (accept_index[:, 1:] >= 0).sum(1)  # [bs]
    return GreedyVerdict(accept_index, num_accepted, commit(accept_index, target, n))


def end_outside(links: Tensor, n: int, end: int = -1) -> Tensor:
    """``links`` with every value outside ``0..n-1`` made ``end``: such a link ends its list."""
    return torch.where((links >= 0) & (links < n), links, end)  # [links.shape]


def first_match_along(next_sibling: Tensor, head: Tensor, match: Tensor) -> Tensor:
    """The first node with ``match`` on the sibling list starting at ``head``, -1 if none.

    Pointer doubling: ``jump[c]`` is ``c`` on a match, else the next sibling; squaring it
    ``ceil(log2 N)`` times reaches the first match of every list, or its end. Bounded on any
    links, cyclic ones included.

    Shapes: ``next_sibling [bs, N]``, ``head [bs]``, ``match [bs, N]`` -> ``[bs]``.
    """
    n = next_sibling.shape[1]
    node = torch.arange(n, device=next_sibling.device)  # [N]
    jump = torch.where(match, node, next_sibling)  # [bs, N] in -1..N-1
    for _ in range(max(1, math.ceil(math.log2(n)))):
        jump = torch.where(jump >= 0, jump.gather(1, jump.clamp(min=0)), -1)  # [bs, N]
    found = jump.gather(1, head.clamp(min=0).unsqueeze(1)).squeeze(1)  # [bs]
    hit = match.gather(1, found.clamp(min=0).unsqueeze(1)).squeeze(1)  # [bs]
    return torch.where((head >= 0) & (found >= 0) & hit, found, -1)  # [bs]


def commit(accept_index: Tensor, target: Tensor, n: int) -> Tensor:
    """``predicts``: the target's token at every accepted node, 0 elsewhere. ``[bs*N]``.

    A request writes only its own row: an accepted index in another request's row (a
    malformed ``retrieve_index``, any int64) commits nothing, so requests never touch each
    other.
    """
    flat = target.shape[0]
    slot = torch.where(in_own_row(accept_index, n), accept_index, flat)  # [bs, S + 1]
    padded = torch.cat([target, target.new_zeros(1)])  # [bs * N + 1] slot flat discards
    predicts = target.new_zeros(flat + 1)  # [bs * N + 1]
    return predicts.index_put((slot.flatten(),), padded[slot.flatten()])[:flat]  # [bs * N]


def in_own_row(index: Tensor, n: int) -> Tensor:
    """Which flat node indices ``[bs, M]`` lie in their own request's row, ``[row * N, row * N
    + N)``. The bounds are row starts: no product of an index can overflow."""
    start = torch.arange(index.shape[0], device=index.device).unsqueeze(1) * n  # [bs, 1]
    return (index >= start) & (index < start + n)  # [bs, M]
