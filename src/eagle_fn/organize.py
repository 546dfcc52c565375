"""Tree organization: select the N - 1 best candidates of all steps and their parent table."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .config import DraftConfig
from .contracts import FLOAT, Arg, contract
from .selection import best_indices_ascending
from .types import DraftTree, Tensors

ORGANIZE_TREE = contract(
    "organize_tree",
    score_list=Arg("[bs, 1, topk]", FLOAT, later="[bs, topk, topk]"),
    token_list=Arg("[bs, topk]", later="[bs, topk * topk]"),
    parents_list=Arg("[bs, topk + 1]", later="[bs, topk]"),
)


MULTILAYER = contract(
    "organize_multilayer",
    chain_only="the multi-layer layout has one token per step and needs a chain config "
    "(topk == 1), got topk = {topk}",
    topk_index=Arg("[bs, num_steps]"),
    topk_p=Arg("[bs, num_steps]", FLOAT),
)


def organize_tree(
    cfg: DraftConfig,
    score_list: Tensors,
    token_list: Tensors,
    parents_list: Tensors,
) -> DraftTree:
    """Selects the ``N - 1`` best candidates of all steps (docs/semantics.md §4).

    Ranking: larger scores first, NaN as -inf, equal scores by the lower flat index, so the
    selection is closed under ancestors; on inputs without NaN or ties it is exactly the
    plain ``cat/topk/sort/gather`` organization.

    Args:
        cfg: the draft configuration.
        score_list, token_list, parents_list: the ``num_steps`` entries of
            :class:`~eagle_fn.DraftStep` (``score_entry``, ``token_entry``, ``parents_entry``).

    Shapes:
        ``score_list[0] [bs, 1, k]``, ``score_list[i] [bs, k, k]`` (floating);
        ``token_list[0] [bs, k]``, ``token_list[i] [bs, k * k]`` (int64);
        ``parents_list[0] [bs, k + 1]``, ``parents_list[i] [bs, k]`` (int64).
        Returns ``parent_list [bs, parent_width]`` and ``[bs, N - 1]`` index and tokens.

    Example:
        >>> cfg = DraftConfig(topk=2, num_steps=2, num_draft_tokens=4)
        >>> tree = organize_tree(
        ...     cfg,
        ...     [torch.tensor([[[0.6, 0.4]]]), torch.tensor([[[0.3, 0.3], [0.36, 0.04]]])],
        ...     [torch.tensor([[7, 9]]), torch.tensor([[1, 2, 3, 4]])],
        ...     [torch.tensor([[-1, 0, 1]]), torch.tensor([[4, 2]])],
        ... )
        >>> tree.top_scores_index.tolist(), tree.draft_tokens.tolist(), tree.parent_list.tolist()
        ([[0, 1, 4]], [[7, 9, 3]], [[-1, 0, 1]])
    """
    return tree_core(*tree_args(cfg, score_list, token_list, parents_list))


def tree_args(cfg: Any, *lists: Any, **where: Any) -> tuple[Any, ...]:
    """:func:`organize_tree`'s arguments, checked, as :func:`tree_core` takes them; ``where=``,
    ``device=`` and ``device_label=`` as in :meth:`~eagle_fn.contracts.Contract.check`."""
    ORGANIZE_TREE(cfg, *lists, **where)
    return cfg, *lists


def organize_multilayer(cfg: DraftConfig, topk_p: Tensor, topk_index: Tensor) -> DraftTree:
    """The general path for a multi-layer draft's one token per step (docs/semantics.md §5).

    Builds the per-step lists a chain draft loop would have produced and runs
    :func:`organize_tree` on them: what :func:`~eagle_fn.organize_chain` returns without
    computing.

    Args:
        cfg: a chain configuration (``topk == 1``).
        topk_p: each step's probability, floating.
        topk_index: each step's token, int64.

    Shapes: ``topk_p, topk_index [bs, num_steps]`` -> a :class:`~eagle_fn.DraftTree` of
    ``parent_list [bs, parent_width]``, ``top_scores_index, draft_tokens [bs, num_steps]``.

    Example:
        >>> tree = organize_multilayer(
        ...     DraftConfig.chain(2), torch.tensor([[0.9, 0.5]]), torch.tensor([[4, 2]])
        ... )
        >>> tree.parent_list.tolist(), tree.top_scores_index.tolist(), tree.draft_tokens.tolist()
        ([[-1, 0]], [[0, 1]], [[4, 2]])
    """
    return multilayer_core(*multilayer_args(cfg, topk_p, topk_index))


def multilayer_args(cfg: Any, topk_p: Any, topk_index: Any, **where: Any) -> tuple[Any, ...]:
    """:func:`organize_multilayer`'s arguments, checked, as :func:`multilayer_core` takes
    them; ``where=``, ``device=`` and ``device_label=`` as in :func:`tree_args`."""
    MULTILAYER(cfg, topk_index, topk_p, **where)
    return cfg, topk_p, topk_index


def tree_core(
    cfg: DraftConfig, score_list: Tensors, token_list: Tensors, parents_list: Tensors
) -> DraftTree:
    """:func:`organize_tree` without its checks: the torch backend's compiled function."""
    scores = torch.cat(score_list, dim=1).flatten(1)  # [bs, num_candidates]
    tokens = torch.cat(token_list, dim=1)  # [bs, num_candidates]
    top = best_indices_ascending(scores, cfg.num_draft_tokens - 1)  # [bs, N - 1]
    return DraftTree(parent_table(parents_list), top, tokens.gather(1, top))  # [bs, N - 1]


def parent_table(parents_list: Tensors) -> Tensor:
    """Every step's parents entry but the last (never expanded): ``[bs, parent_width]``."""
    first = parents_list[0]  # [bs, k + 1]
    if len(parents_list) == 1:
        return first.new_empty((first.shape[0], 0))  # [bs, 0]: a one-step draft has none
    return torch.cat(parents_list[:-1], dim=1)  # [bs, parent_width]


def multilayer_core(cfg: DraftConfig, topk_p: Tensor, topk_index: Tensor) -> DraftTree:
    """:func:`organize_multilayer` without its checks."""
    bs, steps = topk_index.shape
    device = topk_index.device
    score_list = [topk_p[:, i : i + 1].unsqueeze(2) for i in range(steps)]  # [bs, 1, 1] each
    token_list = [topk_index[:, i : i + 1] for i in range(steps)]  # [bs, 1] each
    first = torch.arange(-1, 1, device=device).repeat(bs, 1)  # [bs, 2], no host copy
    later = [torch.full((bs, 1), i, device=device) for i in range(1, steps)]  # [bs, 1] each
    return tree_core(cfg, score_list, token_list, [first, *later])
