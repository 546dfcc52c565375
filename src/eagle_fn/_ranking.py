"""The selection rule shared by every top-k of eagle_fn: NaN last, ties to the lower index."""

from __future__ import annotations

import torch
from torch import Tensor

from ._memo import memoized

# Scores of up to 32 bits rank by a float64 key, score * (1 - g * 2**-40) - g * 2**-1060 for
# flat index g. The factor moves a score by less than half a float32 ulp (for g < 2**15), so
# distinct scores keep their order while equal ones get distinct keys, the lower index
# larger; the additive term, below any nonzero score's float64 ulp, does the same for zeros.
# NaN and -inf keys become -2**1000 * (1 + g * 2**-40): below every finite key, in index order.
_TIE = 2.0**-40
_ZERO_TIE = 2.0**-1060
_NAN_FLOOR = -(2.0**1000)
_INF = float("inf")
MAX_KEYED_WIDTH = 2**15


def best_indices(scores: Tensor, n: int) -> Tensor:
    """Indices of the ``n`` best entries of each row, best first.

    Larger scores rank first and NaN counts as ``-inf``, below every finite score; equal
    scores rank by the lower index. With probability scores (a child's score never exceeds
    its parent's, and a parent has the lower flat index) the selected set is therefore always
    closed under ancestors. Exact for float16/bfloat16/float32 scores of any sign, except
    that equal negative scores and repeated ``+inf`` (neither can be a probability) tie in an
    unspecified order; exact without exception for float64 scores.

    Shapes: ``scores [bs, W]`` floating -> ``[bs, n]`` int64, ``0 <= n <= W``.
    """
    if _keyed(scores):
        return torch.topk(rank_keys(scores), n, dim=1).indices  # [bs, n]
    # float64 has no spare precision for the tie-break: a stable sort keeps equal scores in
    # index order, once NaN is made the -inf it counts as.
    as_inf = torch.nan_to_num(scores, nan=-_INF, posinf=_INF, neginf=-_INF)  # [bs, W]
    return torch.sort(as_inf, dim=1, descending=True, stable=True).indices[:, :n]  # [bs, n]


def best_indices_ascending(scores: Tensor, n: int) -> Tensor:
    """The set of :func:`best_indices`, in ascending index order. ``[bs, W] -> [bs, n]``."""
    if _keyed(scores):
        chosen = torch.topk(rank_keys(scores), n, dim=1, sorted=False).indices  # [bs, n]
    else:
        chosen = best_indices(scores, n)
    # topk of all n smallest is a sort, cheaper than torch.sort on small rows, and its output
    # is freshly allocated (canonical strides, so compiled graphs never see new ones).
    return torch.topk(chosen, n, dim=1, largest=False).values  # [bs, n]


def rank_keys(scores: Tensor) -> Tensor:
    """Distinct float64 keys ordering ``scores [bs, W]`` by the rule above. ``-> [bs, W]``."""
    scale, offset, floor = _key_constants(scores.shape[1], scores.device)
    return torch.fmax(torch.addcmul(offset, scores, scale), floor)  # [bs, W]


def _keyed(scores: Tensor) -> bool:
    return scores.dtype is not torch.float64 and scores.shape[1] <= MAX_KEYED_WIDTH


def _key_constants(width: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    if torch.compiler.is_compiling():
        return _key_tensors(width, device)  # folded into the graph by the compiler
    return memoized(("rank_keys", width, device), lambda: _key_tensors(width, device))


def _key_tensors(width: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.arange(width, dtype=torch.float64, device=device)  # [W]
    return 1 - g * _TIE, -g * _ZERO_TIE, _NAN_FLOOR * (1 + g * _TIE)
