"""The selection rule shared by every top-k of eagle_fn: NaN last, ties to the lower index."""

from __future__ import annotations

import torch
from torch import Tensor


def best_indices(scores: Tensor, n: int) -> Tensor:
    """Indices of the ``n`` best entries of each row, best first.

    Larger scores rank first; NaN ranks below every number; equal scores rank by the lower
    index. With probability scores (a child's score never exceeds its parent's, and a parent
    has the lower flat index) the selected set is therefore always closed under ancestors.

    Args:
        scores: ``[bs, W]`` floating.
        n: how many to keep, ``0 <= n <= W``.

    Shapes: ``[bs, W] -> [bs, n]`` int64.
    """
    # A stable ascending sort of the negated scores puts NaN last (NaN sorts above every
    # number) and keeps equal scores in index order.
    return torch.sort(scores.neg(), dim=1, stable=True).indices[:, :n]  # [bs, n]


def best_indices_ascending(scores: Tensor, n: int) -> Tensor:
    """The set of :func:`best_indices`, in ascending index order. ``[bs, W] -> [bs, n]``."""
    return torch.sort(best_indices(scores, n), dim=1).values  # [bs, n]
