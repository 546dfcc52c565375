"""The data that flows between the stages: draft steps, draft trees, verify trees, verdicts."""

from __future__ import annotations

import enum
from typing import Any, NamedTuple, TypeAlias, TypedDict

import torch
import torch.utils._pytree as pytree
from torch import Tensor

# The per-step lists of a draft loop: a list (or tuple) with one tensor per step.
Tensors: TypeAlias = list[Tensor] | tuple[Tensor, ...]


class DraftStep(NamedTuple):
    """What one draft step hands to the next step and to :func:`~eagle_fn.organize_tree`.

    ``input_ids`` and ``hidden_index`` feed the next draft forward; the three ``*_entry``
    tensors are appended to ``score_list``, ``token_list`` and ``parents_list``.

    Attributes:
        input_ids: ``[bs * topk]`` int64, the tokens of the kept paths, row-major.
        hidden_index: ``[bs * topk]`` int64, the hidden-state row each kept path continues.
        scores: ``[bs, topk]``, the kept paths' cumulative scores: ``topk_p`` as given at
            step 0, best first after it.
        score_entry: ``[bs, 1, topk]`` at step 0, ``[bs, topk, topk]`` after.
        token_entry: ``[bs, topk]`` at step 0, ``[bs, topk * topk]`` after, int64.
        parents_entry: ``[bs, topk + 1]`` at step 0, ``[bs, topk]`` after, int64.
    """

    input_ids: Tensor
    hidden_index: Tensor
    scores: Tensor
    score_entry: Tensor
    token_entry: Tensor
    parents_entry: Tensor


class DraftTree(NamedTuple):
    """The organized draft: which candidates were selected and how they hang together.

    Candidate ``g`` (a flat index into the concatenated steps) hangs under parent-table slot
    ``g // topk``: slot 0 is the root, otherwise ``parent_list[row, g // topk]`` is the flat
    index of its parent candidate. All int64.

    Attributes:
        parent_list: ``[bs, parent_width]``, the parent table.
        top_scores_index: ``[bs, N - 1]``, the selected flat indices, ascending.
        draft_tokens: ``[bs, N - 1]``, their tokens.
    """

    parent_list: Tensor
    top_scores_index: Tensor
    draft_tokens: Tensor


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

    Attributes:
        draft_tokens: ``[bs * N]`` int64, each request's bonus token, then its N - 1 drafts.
        positions: ``[bs * N]`` int64, ``seq_len + depth``.
        tree_mask: bool ``[bs * N * N]`` (QLEN), bool ``[N * sum(seq_lens) + bs * N * N]``
            (FULL), or ``[bs * N]`` uint8/16/32 (BITPACKED), by :class:`MaskMode`.
        retrieve_index: ``[bs, N]`` int64, ``row * N + node``.
        retrieve_next_token: ``[bs, N]`` int64, each node's first child.
        retrieve_next_sibling: ``[bs, N]`` int64, the next child of the same parent.
    """

    draft_tokens: Tensor
    positions: Tensor
    tree_mask: Tensor
    retrieve_index: Tensor
    retrieve_next_token: Tensor
    retrieve_next_sibling: Tensor

    @property
    def links(self) -> tuple[Tensor, Tensor, Tensor]:
        """What verification walks: ``retrieve_index``, ``retrieve_next_token`` and
        ``retrieve_next_sibling``."""
        return self.retrieve_index, self.retrieve_next_token, self.retrieve_next_sibling


class GreedyVerdict(NamedTuple):
    """What verification accepted and which tokens to commit (greedy and sampled alike).

    Attributes:
        accept_index: ``[bs, num_steps + 1]`` int64, the accepted flat nodes
            (``row * N + node``), root first, ``-1`` padded.
        num_accepted: ``[bs]`` int64, the accepted draft tokens (the root not counted).
        predicts: ``[bs * N]`` int64, the token to commit after each accepted node, 0
            elsewhere.
    """

    accept_index: Tensor
    num_accepted: Tensor
    predicts: Tensor


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


def exportable(*classes: type[Any]) -> None:
    """Lets torch.export save and load programs whose inputs or outputs hold these NamedTuples:
    ``torch.export.save`` refuses one without a serialized name, and ``torch.export.load``
    unpickles the example inputs only from allowed classes (tuples of tensors: safe). The
    register call is private to torch (in 2.11 to 2.15); where it is missing, only the second."""
    torch.serialization.add_safe_globals(list(classes))
    register: Any = getattr(pytree, "_register_namedtuple", None)
    for cls in classes if register is not None else ():
        register(cls, serialized_type_name=f"{cls.__module__}.{cls.__qualname__}")


exportable(DraftStep, DraftTree, VerifyTree, GreedyVerdict)
