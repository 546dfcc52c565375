"""Plain-torch baselines: the engines' per-step select and cat/topk/sort/gather organization.

Written from the contract's semantics (docs/semantics.md §3 and §4), without eagle_fn, in the style
serving engines use: plain ``torch.topk``, which breaks ties arbitrarily and ranks NaN
first, and no input checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor


class Organized(NamedTuple):
    """The same three tensors as ``eagle_fn.DraftTree``, all int64."""

    parent_list: Tensor  # [bs, parent_width]
    top_scores_index: Tensor  # [bs, N - 1]
    draft_tokens: Tensor  # [bs, N - 1]


class Selected(NamedTuple):
    """The same six tensors as ``eagle_fn.DraftStep``."""

    input_ids: Tensor  # [bs * k]
    hidden_index: Tensor  # [bs * k]
    scores: Tensor  # [bs, k]
    score_entry: Tensor  # [bs, 1, k] at step 0, [bs, k, k] after
    token_entry: Tensor  # [bs, k] at step 0, [bs, k * k] after
    parents_entry: Tensor  # [bs, k + 1] at step 0, [bs, k] after


def select_step(
    step: int, topk_p: Tensor, topk_index: Tensor, scores: Tensor | None = None, *, topk: int
) -> Selected:
    """The engines' per-step top-k: expand the kept paths' scores by their ``k`` children,
    ``topk`` over the ``k * k`` products, then gather tokens, hidden index and parents.

    Shapes: step 0 ``topk_p, topk_index [bs, k]``; later ``[bs * k, k]`` and ``scores [bs, k]``.
    """
    k = topk
    if step == 0:
        bs = topk_p.shape[0]
        hidden_index = torch.arange(bs, device=topk_p.device).repeat_interleave(k)  # [bs * k]
        parents = torch.arange(-1, k, device=topk_p.device).repeat(bs, 1)  # [bs, k + 1]
        flat_ids = topk_index.flatten()  # [bs * k]
        return Selected(flat_ids, hidden_index, topk_p, topk_p.unsqueeze(1), topk_index, parents)
    assert scores is not None  # required after step 0
    bs = scores.shape[0]
    expand = scores.unsqueeze(2) * topk_p.view(bs, k, k)  # [bs, k, k]
    best = torch.topk(expand.flatten(1), k, dim=1)  # [bs, k] values and indices
    tokens = topk_index.view(bs, k * k)  # [bs, k * k]
    first_row = torch.arange(0, bs * k, k, device=scores.device).unsqueeze(1)  # [bs, 1]
    return Selected(
        input_ids=torch.gather(tokens, 1, best.indices).flatten(),  # [bs * k]
        hidden_index=(best.indices // k + first_row).flatten(),  # [bs * k]
        scores=best.values,
        score_entry=expand,
        token_entry=tokens,
        parents_entry=best.indices + (k * k * (step - 1) + k),  # [bs, k]
    )


def organize_steps(
    score_list: Sequence[Tensor],
    token_list: Sequence[Tensor],
    parents_list: Sequence[Tensor],
    *,
    num_draft_tokens: int,
) -> Organized:
    """The engines' organization of per-step lists: ``cat``, ``topk``, ``sort``, ``gather``."""
    scores = torch.cat(list(score_list), dim=1).flatten(1)  # [bs, num_candidates]
    tokens = torch.cat(list(token_list), dim=1)  # [bs, num_candidates]
    top = torch.topk(scores, num_draft_tokens - 1, dim=1).indices  # [bs, N - 1]
    top = torch.sort(top, dim=1).values  # [bs, N - 1] ascending flat indices
    draft_tokens = torch.gather(tokens, 1, top)  # [bs, N - 1]
    return Organized(parent_table(parents_list), top, draft_tokens)


def parent_table(parents_list: Sequence[Tensor]) -> Tensor:
    """Every step's parents entry but the last (never expanded), side by side."""
    first = parents_list[0]  # [bs, k + 1]
    if len(parents_list) == 1:
        return torch.empty(first.shape[0], 0, dtype=torch.int64, device=first.device)  # [bs, 0]
    return torch.cat(list(parents_list[:-1]), dim=1)  # [bs, parent_width]


def chain_step_lists(
    topk_p: Tensor, topk_index: Tensor
) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """The per-step lists an engine's chain draft loop held, from the multi-layer layout.

    ``topk_p, topk_index [bs, S]`` -> ``[bs, 1, 1]``, ``[bs, 1]`` and ``[bs, 2]`` then
    ``[bs, 1]`` per step: the parents are ``[-1, 0]`` at step 0 and ``[i]`` at step ``i``.
    """
    bs, num_steps = topk_index.shape
    device = topk_index.device
    score_list = [topk_p[:, i].view(bs, 1, 1) for i in range(num_steps)]  # [bs, 1, 1] each
    token_list = [topk_index[:, i].view(bs, 1) for i in range(num_steps)]  # [bs, 1] each
    first = torch.arange(-1, 1, device=device).repeat(bs, 1)  # [bs, 2]
    later = [torch.full((bs, 1), i, device=device) for i in range(1, num_steps)]  # [bs, 1] each
    return score_list, token_list, [first, *later]


def organize_chain_steps(topk_p: Tensor, topk_index: Tensor) -> Organized:
    """What engines ran for a chain before the fast path: build the lists, then organize.

    Shapes: ``topk_p, topk_index [bs, S]`` -> ``[bs, S]`` each (``[bs, 0]`` parents at S 1).
    """
    num_draft_tokens = topk_index.shape[1] + 1
    return organize_steps(*chain_step_lists(topk_p, topk_index), num_draft_tokens=num_draft_tokens)


def floor(
    max_bs: int, num_steps: int, bs: int, *, device: torch.device | str = "cpu"
) -> Callable[[Tensor], tuple[Tensor, ...]]:
    """The least any chain path can do: slice two preallocated tables, pass the input on."""
    parents = torch.zeros(max_bs, num_steps, dtype=torch.int64, device=device)  # [max_bs, S]
    indices = torch.zeros(max_bs, num_steps, dtype=torch.int64, device=device)  # [max_bs, S]
    return lambda topk_index: (parents[:bs], indices[:bs], topk_index)
