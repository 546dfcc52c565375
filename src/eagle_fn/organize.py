"""Organization: turn the per-step draft entries into the draft tree the target verifies."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, TypeAlias

import torch
from torch import Tensor

from . import _checks
from ._ranking import best_indices_ascending
from .config import DraftConfig
from .constants import ChainConstants

# The per-step lists of a draft loop: a list (or tuple) with one tensor per step.
Tensors: TypeAlias = "list[Tensor] | tuple[Tensor, ...]"


class DraftTree(NamedTuple):
    """The organized draft: which candidates were selected and how they hang together.

    Candidate ``g`` (a flat index into the concatenated steps) hangs under parent-table slot
    ``g // topk``: slot 0 is the root, otherwise ``parent_list[row, g // topk]`` is the flat
    index of its parent candidate. All int64.
    """

    parent_list: Tensor  # [bs, parent_width]
    top_scores_index: Tensor  # [bs, N - 1] selected flat indices, ascending
    draft_tokens: Tensor  # [bs, N - 1] their tokens


def organize_tree(
    cfg: DraftConfig,
    score_list: Tensors,
    token_list: Tensors,
    parents_list: Tensors,
) -> DraftTree:
    """Selects the ``N - 1`` best candidates of all steps (SPEC §4).

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
    if not steps_fit(cfg, score_list, token_list, parents_list):
        _check_steps("organize_tree", cfg, score_list, token_list, parents_list)
    return _organize_tree(cfg, score_list, token_list, parents_list)


def organize_chain(constants: ChainConstants, topk_index: Tensor) -> DraftTree:
    """The organized chain draft, from cached constants: no computation at all.

    Equals :func:`organize_tree` on the same chain. The returned ``parent_list`` and
    ``top_scores_index`` are views of shared constants and ``draft_tokens`` is ``topk_index``
    itself: treat all three as read-only.

    Args:
        constants: :func:`~eagle_fn.chain_constants` of a chain config.
        topk_index: the chain's token per step, int64, ``bs <= constants.max_bs``.

    Shapes: ``topk_index [bs, num_steps]`` -> ``parent_list [bs, parent_width]``,
    ``top_scores_index [bs, num_steps]``, ``draft_tokens [bs, num_steps]``.

    Example:
        >>> constants = chain_constants(DraftConfig.chain(3), max_bs=4, device="cpu")
        >>> tree = organize_chain(constants, torch.tensor([[11, 0, 6], [5, 10, 3]]))
        >>> tree.parent_list.tolist(), tree.top_scores_index.tolist()
        ([[-1, 0, 1], [-1, 0, 1]], [[0, 1, 2], [0, 1, 2]])
    """
    if not chain_fits(constants, topk_index):
        _check_chain("organize_chain", constants, topk_index)
    return _organize_chain(constants, topk_index)


def organize_multilayer(cfg: DraftConfig, topk_p: Tensor, topk_index: Tensor) -> DraftTree:
    """The general path for a multi-layer draft's one token per step (SPEC §5).

    Builds the per-step lists a chain draft loop would have produced and runs
    :func:`organize_tree` on them: what :func:`organize_chain` returns without computing.

    Args:
        cfg: a chain configuration (``topk == 1``).
        topk_p: each step's probability, floating.
        topk_index: each step's token, int64.

    Shapes: ``topk_p, topk_index [bs, num_steps]`` -> a :class:`DraftTree` as in
    :func:`organize_chain`.

    Example:
        >>> tree = organize_multilayer(
        ...     DraftConfig.chain(2), torch.tensor([[0.9, 0.5]]), torch.tensor([[4, 2]])
        ... )
        >>> tree.parent_list.tolist(), tree.top_scores_index.tolist(), tree.draft_tokens.tolist()
        ([[-1, 0]], [[0, 1]], [[4, 2]])
    """
    if not (
        type(cfg) is DraftConfig and cfg.is_chain and layers_fit(cfg.num_steps, topk_p, topk_index)
    ):
        _check_multilayer("organize_multilayer", cfg, topk_p, topk_index)
    return _organize_multilayer(cfg, topk_p, topk_index)


def _organize_tree(
    cfg: DraftConfig,
    score_list: Tensors,
    token_list: Tensors,
    parents_list: Tensors,
) -> DraftTree:
    scores = torch.cat(score_list, dim=1).flatten(1)  # [bs, num_candidates]
    tokens = torch.cat(token_list, dim=1)  # [bs, num_candidates]
    top = best_indices_ascending(scores, cfg.num_draft_tokens - 1)  # [bs, N - 1]
    return DraftTree(_parent_list(parents_list), top, tokens.gather(1, top))


def _parent_list(parents_list: Tensors) -> Tensor:
    first = parents_list[0]
    if len(parents_list) == 1:
        # The last step is never expanded, so a one-step draft has no parent table.
        return first.new_empty((first.shape[0], 0))  # [bs, 0]
    return torch.cat(parents_list[:-1], dim=1)  # [bs, parent_width]


def _organize_chain(constants: ChainConstants, topk_index: Tensor) -> DraftTree:
    bs = topk_index.shape[0]
    return DraftTree(constants.parents[:bs], constants.score_indices[:bs], topk_index)


def _organize_multilayer(cfg: DraftConfig, topk_p: Tensor, topk_index: Tensor) -> DraftTree:
    bs, steps = topk_index.shape
    device = topk_index.device
    score_list = [topk_p[:, i : i + 1].unsqueeze(2) for i in range(steps)]  # [bs, 1, 1] each
    token_list = [topk_index[:, i : i + 1] for i in range(steps)]  # [bs, 1] each
    first = torch.arange(-1, 1, device=device).repeat(bs, 1)  # [bs, 2], no host copy
    later = [torch.full((bs, 1), i, device=device) for i in range(1, steps)]  # [bs, 1] each
    return _organize_tree(cfg, score_list, token_list, [first, *later])


def steps_fit(cfg: Any, score_list: Any, token_list: Any, parents_list: Any) -> bool:
    """Fast, non-raising form of :func:`_check_steps` for the common, valid call."""
    if type(cfg) is not DraftConfig:  # before cfg keys the signature cache
        return False
    try:
        first = score_list[0]
        expected = _step_signatures(cfg, first.shape[0], first.dtype, first.device)
        return (
            type(score_list) in _LISTS
            and type(token_list) in _LISTS
            and type(parents_list) in _LISTS
            and first.dtype in _checks.SCORE_DTYPES
            and [_checks.signature(t) for t in score_list] == expected[0]
            and [_checks.signature(t) for t in token_list] == expected[1]
            and [_checks.signature(t) for t in parents_list] == expected[2]
        )
    except (AttributeError, IndexError, KeyError, TypeError):
        return False


_LISTS = (list, tuple)


@functools.lru_cache(maxsize=1024)
def _step_signatures(
    cfg: DraftConfig, bs: int, dtype: torch.dtype, device: torch.device
) -> tuple[list[_checks.Signature], ...]:
    k = cfg.topk
    steps = range(cfg.num_steps)

    def sig(shape: tuple[int, ...], dt: torch.dtype) -> _checks.Signature:
        return torch.Size(shape), dt, device, _checks.STRIDED

    return (
        [sig((bs, k if i else 1, k), dtype) for i in steps],
        [sig((bs, k * k if i else k), _checks.INT64) for i in steps],
        [sig((bs, k if i else k + 1), _checks.INT64) for i in steps],
    )


def chain_fits(constants: Any, topk_index: Any) -> bool:
    """Fast, non-raising form of :func:`_check_chain`."""
    try:
        shape = topk_index.shape
        return (
            type(constants) is ChainConstants
            and len(shape) == 2
            and shape[1] == constants.config.num_steps
            and shape[0] <= constants.max_bs
            and topk_index.dtype is _checks.INT64
            and topk_index.device == constants.parents.device
            and topk_index.layout is _checks.STRIDED
        )
    except (AttributeError, TypeError):
        return False


def layers_fit(
    num_steps: int, topk_p: Any, topk_index: Any, device: torch.device | None = None
) -> bool:
    """Fast, non-raising form of :func:`_check_multilayer` (and of the device check)."""
    try:
        shape = topk_index.shape
        index_device = topk_index.device
        return (
            len(shape) == 2
            and shape[1] == num_steps
            and topk_index.dtype is _checks.INT64
            and topk_p.shape == shape
            and topk_p.dtype in _checks.SCORE_DTYPES
            and topk_p.device == index_device
            and (device is None or index_device == device)
            and topk_index.layout is _checks.STRIDED
            and topk_p.layout is _checks.STRIDED
        )
    except (AttributeError, TypeError):
        return False


def _check_steps(
    where: str,
    cfg: object,
    score_list: object,
    token_list: object,
    parents_list: object,
) -> None:
    cfg = _checks.require_config(where, cfg)
    k, steps = cfg.topk, cfg.num_steps
    scores = _checks.require_steps(where, "score_list", score_list, steps)
    tokens = _checks.require_steps(where, "token_list", token_list, steps)
    parents = _checks.require_steps(where, "parents_list", parents_list, steps)
    first = _checks.require_rank(where, "score_list[0]", scores[0], "[bs, 1, topk]", 3)
    bs, device = first.shape[0], first.device
    for i in range(steps):
        rows, width = (1, k) if i == 0 else (k, k * k)
        name = f"score_list[{i}]"
        entry = _checks.require_scores(
            where, name, scores[i], "[bs, 1, topk]" if i == 0 else "[bs, topk, topk]", (bs, rows, k)
        )
        _checks.require_device(where, name, entry, device, "score_list[0]")
        name = f"token_list[{i}]"
        entry = _checks.require_index(
            where, name, tokens[i], "[bs, topk]" if i == 0 else "[bs, topk * topk]", (bs, width)
        )
        _checks.require_device(where, name, entry, device, "score_list[0]")
        name = f"parents_list[{i}]"
        entry = _checks.require_index(
            where,
            name,
            parents[i],
            "[bs, topk + 1]" if i == 0 else "[bs, topk]",
            (bs, k + (i == 0)),
        )
        _checks.require_device(where, name, entry, device, "score_list[0]")


def _check_chain(where: str, constants: object, topk_index: object) -> None:
    if not isinstance(constants, ChainConstants):
        raise TypeError(
            f"{where}: constants must be ChainConstants, got {type(constants).__name__}"
        )
    steps = constants.config.num_steps
    index = _checks.require_rank(where, "topk_index", topk_index, "[bs, num_steps]", 2)
    _checks.require_index(where, "topk_index", index, "[bs, num_steps]", (index.shape[0], steps))
    if index.shape[0] > constants.max_bs:
        raise ValueError(
            f"{where}: topk_index has bs = {index.shape[0]} rows, more than "
            f"constants.max_bs = {constants.max_bs}"
        )
    _checks.require_device(where, "topk_index", index, constants.parents.device, "constants")


def _check_multilayer(where: str, cfg: object, topk_p: object, topk_index: object) -> None:
    cfg = _checks.require_config(where, cfg)
    if not cfg.is_chain:
        raise ValueError(
            f"{where}: the multi-layer layout has one token per step and needs a chain config "
            f"(topk == 1), got topk = {cfg.topk}"
        )
    index = _checks.require_rank(where, "topk_index", topk_index, "[bs, num_steps]", 2)
    shape = (index.shape[0], cfg.num_steps)
    _checks.require_index(where, "topk_index", index, "[bs, num_steps]", shape)
    p = _checks.require_scores(where, "topk_p", topk_p, "[bs, num_steps]", shape)
    _checks.require_device(where, "topk_p", p, index.device, "topk_index")
