"""The toy draft model's side of a round: a chain or a tree, drafted and organized."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .config import DraftConfig
from .probs import target_probs_from_logits
from .selection import select_top_k
from .types import DraftTree
from .worker import DraftOrganizer

if TYPE_CHECKING:
    from .toy import ToyModel


def sampled_chain(
    cfg: DraftConfig,
    worker: DraftOrganizer,
    draft: ToyModel,
    previous: Tensor,
    last: Tensor,
    temps: Tensor,
    generator: torch.Generator | None,
) -> tuple[DraftTree, Tensor]:
    """A chain drafted by sampling the draft at each request's temperature, organized by the
    chain fast path, and the distributions the tokens were drawn from.

    Shapes: ``previous, last, temps [bs]`` -> a chain :class:`DraftTree`,
    ``draft_probs [bs, N, V]`` (row ``j`` drew node ``j + 1``; the last row is zero).
    """
    rows, picked, tokens = [], [], []
    for _ in range(cfg.num_steps):
        probs = target_probs_from_logits(draft.logits(previous, last), temps)  # [bs, V]
        token = torch.multinomial(probs, 1, generator=generator)  # [bs, 1]
        previous, last = last, token.squeeze(1)  # [bs] each
        rows.append(probs)
        picked.append(probs.gather(1, token).squeeze(1))  # [bs]
        tokens.append(last)
    rows.append(torch.zeros_like(rows[0]))  # [bs, V]
    tree = worker.organize(torch.stack(picked, 1), torch.stack(tokens, 1))
    return tree, torch.stack(rows, 1)  # [bs, N, V]


def draft_tree(
    cfg: DraftConfig, worker: DraftOrganizer, draft: ToyModel, previous: Tensor, last: Tensor
) -> DraftTree:
    """One draft round from each request's last two tokens, organized by ``worker``.

    Shapes: ``previous, last [bs]`` -> a :class:`DraftTree` of ``[bs, ...]``.
    """
    if cfg.is_chain:
        # A multi-layer draft: one greedy token per step, organized by the chain fast path.
        probs, tokens = [], []
        for _ in range(cfg.num_steps):
            p, token = torch.softmax(draft.logits(previous, last), -1).max(-1)
            previous, last = last, token
            probs.append(p)
            tokens.append(token)
        return worker.organize(torch.stack(probs, 1), torch.stack(tokens, 1))
    lists: tuple[list[Tensor], list[Tensor], list[Tensor]] = ([], [], [])
    scores = None
    for step in range(cfg.num_steps):
        topk_p, topk_index = torch.softmax(draft.logits(previous, last), -1).topk(cfg.topk, -1)
        out = select_top_k(cfg, step, topk_p, topk_index, scores)
        # Each kept path continues the row hidden_index names: that row's last token becomes
        # the path's previous one.
        previous, last, scores = last[out.hidden_index], out.input_ids, out.scores
        for kept, entry in zip(
            lists, (out.score_entry, out.token_entry, out.parents_entry), strict=True
        ):
            kept.append(entry)
    return worker.organize_steps(*lists)
