"""One draft step: keep the top-k paths and record the step's score, token and parent entries."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from . import _checks
from ._ranking import best_indices
from .config import DraftConfig


class DraftStep(NamedTuple):
    """What one draft step hands to the next step and to :func:`~eagle_fn.organize_tree`.

    ``input_ids`` and ``hidden_index`` feed the next draft forward; the three ``*_entry``
    tensors are appended to ``score_list``, ``token_list`` and ``parents_list``.
    """

    input_ids: Tensor  # [bs * topk] tokens of the kept paths, row-major
    hidden_index: Tensor  # [bs * topk] hidden-state row each kept path continues
    scores: Tensor  # [bs, topk] cumulative path scores of the kept paths, best first
    score_entry: Tensor  # [bs, 1, topk] at step 0, [bs, topk, topk] after
    token_entry: Tensor  # [bs, topk] at step 0, [bs, topk * topk] after
    parents_entry: Tensor  # [bs, topk + 1] at step 0, [bs, topk] after


def select_top_k(
    cfg: DraftConfig,
    step: int,
    topk_p: Tensor,
    topk_index: Tensor,
    scores: Tensor | None = None,
) -> DraftStep:
    """Keeps the ``topk`` best paths after draft step ``step`` (SPEC §3).

    At step 0 the draft's top-k are the kept paths. At a later step each of the ``topk``
    kept paths proposes ``topk`` children; the ``topk`` best cumulative scores
    (``scores * topk_p``) survive. Ranking: larger first, NaN as -inf, ties to the lower index.

    Args:
        cfg: the draft configuration.
        step: ``0 <= step < cfg.num_steps``.
        topk_p: the draft model's top-k probabilities.
        topk_index: the matching token ids, int64.
        scores: ``DraftStep.scores`` of the previous step; required at ``step >= 1``,
            ``None`` at step 0.

    Shapes:
        step 0: ``topk_p, topk_index [bs, topk]``.
        step >= 1: ``topk_p, topk_index [bs * topk, topk]``, ``scores [bs, topk]``.

    Example:
        >>> cfg = DraftConfig(topk=2, num_steps=2, num_draft_tokens=3)
        >>> first = select_top_k(cfg, 0, torch.tensor([[0.6, 0.4]]), torch.tensor([[7, 9]]))
        >>> first.input_ids.tolist(), first.parents_entry.tolist()
        ([7, 9], [[-1, 0, 1]])
        >>> p = torch.tensor([[0.5, 0.5], [0.9, 0.1]])  # children of token 7, then of 9
        >>> nxt = select_top_k(cfg, 1, p, torch.tensor([[1, 2], [3, 4]]), first.scores)
        >>> nxt.input_ids.tolist(), nxt.hidden_index.tolist(), nxt.parents_entry.tolist()
        ([3, 1], [1, 0], [[4, 2]])
    """
    _check_select(cfg, step, topk_p, topk_index, scores)
    if step == 0:
        return _first_step(cfg, topk_p, topk_index)
    assert scores is not None  # checked above; narrows the type
    return _next_step(cfg, step, topk_p, topk_index, scores)


def _first_step(cfg: DraftConfig, topk_p: Tensor, topk_index: Tensor) -> DraftStep:
    k = cfg.topk
    bs = topk_p.shape[0]
    device = topk_index.device
    hidden_index = torch.arange(bs, device=device).repeat_interleave(k)  # [bs * k]
    parents = torch.arange(-1, k, device=device).repeat(bs, 1)  # [bs, k + 1]
    return DraftStep(
        input_ids=topk_index.flatten(),  # [bs * k]
        hidden_index=hidden_index,
        scores=topk_p,
        score_entry=topk_p.unsqueeze(1),  # [bs, 1, k]
        token_entry=topk_index,
        parents_entry=parents,
    )


def _next_step(
    cfg: DraftConfig, step: int, topk_p: Tensor, topk_index: Tensor, scores: Tensor
) -> DraftStep:
    k = cfg.topk
    bs = scores.shape[0]
    expand = scores.unsqueeze(2) * topk_p.reshape(bs, k, k)  # [bs, k, k]
    flat = expand.flatten(1)  # [bs, k * k]
    sel = best_indices(flat, k)  # [bs, k] positions in 0..k*k-1, best first
    tokens = topk_index.reshape(bs, k * k)  # [bs, k * k]
    rows = torch.arange(bs, device=sel.device).unsqueeze(1)  # [bs, 1]
    return DraftStep(
        input_ids=tokens.gather(1, sel).flatten(),  # [bs * k]
        hidden_index=(sel // k + rows * k).flatten(),  # [bs * k]
        scores=flat.gather(1, sel),  # [bs, k]
        score_entry=expand,
        token_entry=tokens,
        parents_entry=sel + (k * k * (step - 1) + k),  # [bs, k] flat index of each kept path
    )


def _check_select(
    cfg: object, step: object, topk_p: object, topk_index: object, scores: object
) -> None:
    where = "select_top_k"
    cfg = _checks.require_config(where, cfg)
    k = cfg.topk
    if not isinstance(step, int) or isinstance(step, bool):
        raise TypeError(f"{where}: step must be an int, got {type(step).__name__}")
    if not 0 <= step < cfg.num_steps:
        raise ValueError(f"{where}: step must be in [0, num_steps = {cfg.num_steps}), got {step}")
    prev = None
    if step == 0:
        if scores is not None:
            raise ValueError(f"{where}: scores must be None at step 0 (it starts the paths)")
        p = _checks.require_rank(where, "topk_p", topk_p, "[bs, topk]", 2)
        shape, symbolic = (p.shape[0], k), "[bs, topk]"
    else:
        if scores is None:
            raise ValueError(
                f"{where}: scores (the previous DraftStep.scores) is required at step {step}"
            )
        prev = _checks.require_rank(where, "scores", scores, "[bs, topk]", 2)
        _checks.require_scores(where, "scores", prev, "[bs, topk]", (prev.shape[0], k))
        shape, symbolic = (prev.shape[0] * k, k), "[bs * topk, topk]"
    p = _checks.require_scores(where, "topk_p", topk_p, symbolic, shape)
    index = _checks.require_index(where, "topk_index", topk_index, symbolic, shape)
    _checks.require_device(where, "topk_index", index, p.device, "topk_p")
    if prev is not None:
        _checks.require_device(where, "scores", prev, p.device, "topk_p")
