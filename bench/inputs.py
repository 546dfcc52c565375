"""Seeded benchmark inputs shaped like a draft model's output, built once outside timing.

Every input is drawn on the CPU from a seeded generator, then moved to the benchmark's
device: the same case holds the same values on every device.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from cases import MAX_BS, Case
from eagle_fn import DraftConfig, DraftOrganizer, DraftTree, VerifyTree, select_top_k

VOCAB = 32000
WIDTH = 64  # softmax width of the stand-in draft distribution
CPU = torch.device("cpu")


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


def multilayer(
    bs: int, num_steps: int, *, seed: int = 0, device: torch.device = CPU
) -> tuple[Tensor, Tensor]:
    """``(topk_p, topk_index)`` of a multi-layer draft, one token per step: ``[bs, S]`` each."""
    gen = generator(seed)
    topk_p, topk_index = draft_topk(bs * num_steps, 1, gen)  # [bs * S, 1] each
    return topk_p.view(bs, num_steps).to(device), topk_index.view(bs, num_steps).to(device)


def step_inputs(
    cfg: DraftConfig, step: int, bs: int, *, seed: int = 0, device: torch.device = CPU
) -> StepInputs:
    """``select_top_k``'s inputs at ``step``; ``scores`` come from a real step 0."""
    gen = generator(seed)
    k = cfg.topk
    topk_p, topk_index = draft_topk(bs, k, gen)  # [bs, k] each
    if step == 0:
        return StepInputs(topk_p.to(device), topk_index.to(device), None)
    scores = select_top_k(cfg, 0, topk_p, topk_index).scores  # [bs, k]
    topk_p, topk_index = draft_topk(bs * k, k, gen)  # [bs * k, k] each
    return StepInputs(topk_p.to(device), topk_index.to(device), scores.to(device))


def draft_lists(
    cfg: DraftConfig, bs: int, *, seed: int = 0, device: torch.device = CPU
) -> StepLists:
    """Runs a draft loop of ``select_top_k`` over seeded top-k probabilities (on the CPU)."""
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
    return StepLists(*([entry.to(device) for entry in entries] for entries in lists))


def verify_inputs(case: Case, device: torch.device = CPU) -> tuple[DraftTree, Tensor, Tensor]:
    """An organized tree, bonus tokens and sequence lengths for ``case``, built eagerly on the
    CPU and moved to ``device``."""
    organizer = DraftOrganizer(case.config, max_bs=MAX_BS, device="cpu", compile=False)
    if case.topk == 1:
        tree = organizer.organize(*multilayer(case.bs, case.num_steps))
    else:
        tree = organizer.organize_steps(*draft_lists(case.config, case.bs))
    gen = generator(1)
    bonus = torch.randint(0, VOCAB, (case.bs,), generator=gen)  # [bs]
    seq_lens = torch.randint(16, 4096, (case.bs,), generator=gen)  # [bs]
    return DraftTree(*(t.to(device) for t in tree)), bonus.to(device), seq_lens.to(device)


def agreeing_target(case: Case, verify_tree: VerifyTree) -> Tensor:
    """The target's argmax at every node: the token of the node's first child, so greedy
    verification accepts a full path of first children; at a leaf, a token of the bonus.

    Shapes: ``[bs * N]``, on the tree's device.
    """
    n = case.num_draft_tokens
    first_child = verify_tree.retrieve_next_token  # [bs, N] -1 at a leaf
    tokens = verify_tree.draft_tokens.view(-1, n)  # [bs, N]
    child_token = tokens.gather(1, first_child.clamp(min=0))  # [bs, N]
    return torch.where(first_child >= 0, child_token, tokens[:, :1]).flatten()  # [bs * N]
