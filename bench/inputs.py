"""Seeded benchmark inputs shaped like a draft model's output, built once outside timing."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from eagle_fn import DraftConfig, select_top_k

VOCAB = 32000
WIDTH = 64  # softmax width of the stand-in draft distribution


class StepInputs(NamedTuple):
    """The arguments of ``select_top_k`` at one step."""

    topk_p: Tensor  # [bs, k] at step 0, [bs * k, k] after
    topk_index: Tensor  # [bs, k] at step 0, [bs * k, k] after
    scores: Tensor | None  # None at step 0, [bs, k] after


class StepLists(NamedTuple):
    """The per-step entries a draft loop collects for ``organize_tree``."""

    score_list: list[Tensor]  # [bs, 1, k], then [bs, k, k] per step
    token_list: list[Tensor]  # [bs, k], then [bs, k * k] per step
    parents_list: list[Tensor]  # [bs, k + 1], then [bs, k] per step


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def draft_topk(rows: int, k: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """A softmax's top-k probabilities (no ties almost surely) and random token ids."""
    probs = torch.softmax(torch.randn(rows, WIDTH, generator=gen), dim=1)  # [rows, WIDTH]
    topk_p = torch.topk(probs, k, dim=1).values  # [rows, k]
    return topk_p, torch.randint(0, VOCAB, (rows, k), generator=gen)  # [rows, k] each


def multilayer(bs: int, num_steps: int, *, seed: int = 0) -> tuple[Tensor, Tensor]:
    """``(topk_p, topk_index)`` of a multi-layer draft, one token per step: ``[bs, S]`` each."""
    gen = generator(seed)
    topk_p, topk_index = draft_topk(bs * num_steps, 1, gen)  # [bs * S, 1] each
    return topk_p.view(bs, num_steps), topk_index.view(bs, num_steps)  # [bs, S] each


def step_inputs(cfg: DraftConfig, step: int, bs: int, *, seed: int = 0) -> StepInputs:
    """``select_top_k``'s inputs at ``step``; ``scores`` come from a real step 0."""
    gen = generator(seed)
    k = cfg.topk
    topk_p, topk_index = draft_topk(bs, k, gen)  # [bs, k] each
    if step == 0:
        return StepInputs(topk_p, topk_index, None)
    scores = select_top_k(cfg, 0, topk_p, topk_index).scores  # [bs, k]
    return StepInputs(*draft_topk(bs * k, k, gen), scores)  # [bs * k, k] each


def draft_lists(cfg: DraftConfig, bs: int, *, seed: int = 0) -> StepLists:
    """Runs a draft loop of ``select_top_k`` over seeded top-k probabilities."""
    gen = generator(seed)
    lists = StepLists([], [], [])
    scores = None
    for step in range(cfg.num_steps):
        rows = bs if step == 0 else bs * cfg.topk
        out = select_top_k(cfg, step, *draft_topk(rows, cfg.topk, gen), scores)
        scores = out.scores  # [bs, k]
        lists.score_list.append(out.score_entry)
        lists.token_list.append(out.token_entry)
        lists.parents_list.append(out.parents_entry)
    return lists
