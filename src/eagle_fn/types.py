"""The data that flows between the stages: draft steps, draft trees, verify trees, verdicts."""

from __future__ import annotations

import enum
from typing import NamedTuple, TypeAlias, TypedDict

import torch
from torch import Tensor

# The per-step lists of a draft loop: a list (or tuple) with one tensor per step.
Tensors: TypeAlias = list[Tensor] | tuple[Tensor, ...]


class DraftStep(NamedTuple):
    """What one draft step hands to the next step and to :func:`~eagle_fn.organize_tree`.

    ``input_ids`` and ``hidden_index`` feed the next draft forward; the three ``*_entry``
    tensors are appended to ``score_list``, ``token_list`` and ``parents_list``.
    """

    input_ids: Tensor  # [bs * topk] tokens of the kept paths, row-major
    hidden_index: Tensor  # [bs * topk] hidden-state row each kept path continues
    # [bs, topk] cumulative path scores of the kept paths: topk_p as given at step 0, best
    # first after it
    scores: Tensor
    score_entry: Tensor  # [bs, 1, topk] at step 0, [bs, topk, topk] after
    token_entry: Tensor  # [bs, topk] at step 0, [bs, topk * topk] after
    parents_entry: Tensor  # [bs, topk + 1] at step 0, [bs, topk] after


class DraftTree(NamedTuple):
    """The organized draft: which candidates were selected and how they hang together.

    Candidate ``g`` (a flat index into the concatenated steps) hangs under parent-table slot
    ``g // topk``: slot 0 is the root, otherwise ``parent_list[row, g // topk]`` is the flat
    index of its parent candidate. All int64.
    """

    parent_list: Tensor  # [bs, parent_width]
    top_scores_index: Tensor  # [bs, N - 1] selected flat indices, ascending
    draft_tokens: Tensor  # [bs, N - 1] their tokens


class MaskMode(enum.Enum):
    """Layouts of the tree attention mask, as SGLang's verify step expects them."""

    FULL = "full"  # bool, per request N x (seq_len + N), prefix columns all True
    QLEN = "qlen"  # bool [bs * N * N]: row t marks t and its ancestors
    BITPACKED = "bitpacked"  # one integer per row, bit j set when column j is visible


class VerifyOptions(TypedDict, total=False):
    """The keyword arguments of :func:`~eagle_fn.build_verify_tree` and
    :meth:`~eagle_fn.DraftOrganizer.build_verify`, for an engine's front that passes them on
    (``**options: Unpack[VerifyOptions]``); their defaults apply."""

    mask_mode: MaskMode
    seq_lens_sum: int | None


class VerifyTree(NamedTuple):
    """The draft tree laid out for one verify forward of the target model.

    Node 0 of each request is the bonus token (the root), node ``j >= 1`` is the candidate
    ``top_scores_index[:, j - 1]``. Links are node indices within the request, ``-1`` for none.
    """

    draft_tokens: Tensor  # [bs * N] bonus token first, then the N - 1 draft tokens
    positions: Tensor  # [bs * N] seq_len + depth
    tree_mask: Tensor  # QLEN [bs*N*N] | FULL [N*sum(seq_lens) + bs*N*N] | BITPACKED [bs*N]
    retrieve_index: Tensor  # [bs, N] row * N + node
    retrieve_next_token: Tensor  # [bs, N] first child of each node
    retrieve_next_sibling: Tensor  # [bs, N] next child of the same parent

    @property
    def links(self) -> tuple[Tensor, Tensor, Tensor]:
        """What verification walks: ``retrieve_index``, ``retrieve_next_token`` and
        ``retrieve_next_sibling``."""
        return self.retrieve_index, self.retrieve_next_token, self.retrieve_next_sibling


class GreedyVerdict(NamedTuple):
    """What verification accepted and which tokens to commit (greedy and sampled alike)."""

    accept_index: Tensor  # [bs, num_steps + 1] flat nodes row * N + node, root first, -1 padded
    num_accepted: Tensor  # [bs] accepted draft tokens (the root not counted)
    predicts: Tensor  # [bs * N] the token to commit after every accepted node, 0 elsewhere


BITPACKED_DTYPES = {8: torch.uint8, 16: torch.uint16, 32: torch.uint32}


def bitpacked_dtype(num_nodes: int) -> torch.dtype:
    """The integer type of a BITPACKED mask row: 8, 16 or 32 bits for up to that many nodes."""
    for bits, dtype in BITPACKED_DTYPES.items():
        if num_nodes <= bits:
            return dtype
    raise ValueError(bitpacked_limit(num_nodes))


def bitpacked_limit(num_nodes: int) -> str:
    return f"BITPACKED masks hold at most 32 nodes, got num_draft_tokens = {num_nodes}"


class MaxBatchWarning(UserWarning):
    """A chain worker got a batch above its ``max_bs`` and took the general path."""

    @classmethod
    def about(cls, bs: int, max_bs: int) -> MaxBatchWarning:
        return cls(
            f"DraftOrganizer: bs = {bs} exceeds max_bs = {max_bs}, so this chain batch takes "
            f"the general path (tens of ops instead of cached constants); build the worker with "
            f"max_bs >= {bs} to keep the fast path. Warned once per worker."
        )
