"""Selection: one draft step keeps its top-k paths, by the one ranking rule of eagle_fn.

The rule, used by every top-k (kept paths here, selected candidates in organize): larger
scores first, NaN counted as -inf, equal scores by the lower index.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ._memo import memoized
from .arguments import require_config, require_int
from .config import DraftConfig
from .contracts import FLOAT, Arg, contract
from .types import DraftStep

SELECT_FIRST = contract(
    "select_top_k", topk_p=Arg("[bs, topk]", FLOAT), topk_index=Arg("[bs, topk]")
)
SELECT_NEXT = contract(
    "select_top_k",
    scores=Arg("[bs, topk]", FLOAT),
    topk_p=Arg("[bs * topk, topk]", FLOAT),
    topk_index=Arg("[bs * topk, topk]"),
)


# What select_top_k says when scores are passed at step 0, or missing after it.
_SCORES_AT = {
    True: "scores must be None at step 0 (it starts the paths)",
    False: "scores (the previous DraftStep.scores) is required at step {step}",
}


def select_top_k(
    cfg: DraftConfig,
    step: int,
    topk_p: Tensor,
    topk_index: Tensor,
    scores: Tensor | None = None,
) -> DraftStep:
    """Keeps the ``topk`` best paths after draft step ``step`` (docs/semantics.md §3).

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
    return select_core(*select_args(cfg, step, topk_p, topk_index, scores))


def select_core(
    cfg: DraftConfig,
    step: int,
    topk_p: Tensor,
    topk_index: Tensor,
    scores: Tensor | None,
    first: Callable[..., DraftStep] | None = None,
    later: Callable[..., DraftStep] | None = None,
) -> DraftStep:
    """:func:`select_top_k` without its checks; ``first``/``later`` replace the step functions
    (the fused kernels pass theirs)."""
    if step == 0:
        return (first or first_step)(cfg, topk_p, topk_index)
    assert scores is not None  # checked by select_args; narrows the type
    return (later or next_step)(cfg, step, topk_p, topk_index, scores)


def first_step(cfg: DraftConfig, topk_p: Tensor, topk_index: Tensor) -> DraftStep:
    k = cfg.topk
    bs = topk_p.shape[0]
    device = topk_index.device
    hidden_index = torch.arange(bs, device=device).repeat_interleave(k)  # [bs * k]
    parents = torch.arange(-1, k, device=device).repeat(bs, 1)  # [bs, k + 1]
    return first_entries(topk_p, topk_index, hidden_index, parents)


def first_entries(
    topk_p: Tensor, topk_index: Tensor, hidden_index: Tensor, parents: Tensor
) -> DraftStep:
    """Step 0's :class:`~eagle_fn.DraftStep`: views of the inputs and the two index tables."""
    return DraftStep(
        input_ids=topk_index.flatten(),  # [bs * k]
        hidden_index=hidden_index,
        scores=topk_p,
        score_entry=topk_p.unsqueeze(1),  # [bs, 1, k]
        token_entry=topk_index,
        parents_entry=parents,
    )


def next_step(
    cfg: DraftConfig, step: int, topk_p: Tensor, topk_index: Tensor, scores: Tensor
) -> DraftStep:
    k = cfg.topk
    bs = scores.shape[0]
    expand = scores.unsqueeze(2) * topk_p.reshape(bs, k, k)  # [bs, k, k]
    flat = expand.flatten(1)  # [bs, k * k]
    sel = best_indices(flat, k)  # [bs, k] positions in 0..k*k-1, best first
    tokens = token_entry(topk_index, bs, k)  # [bs, k * k]
    rows = torch.arange(bs, device=sel.device).unsqueeze(1)  # [bs, 1]
    return DraftStep(
        input_ids=tokens.gather(1, sel).flatten(),  # [bs * k]
        hidden_index=(sel // k + rows * k).flatten(),  # [bs * k]
        scores=flat.gather(1, sel),  # [bs, k]
        score_entry=expand,
        token_entry=tokens,
        parents_entry=sel + (k * k * (step - 1) + k),  # [bs, k] flat index of each kept path
    )


def token_entry(topk_index: Tensor, bs: int, k: int) -> Tensor:
    """A later step's ``token_entry``: ``topk_index [bs * k, k]`` as ``[bs, k * k]``.

    A chain's ``[bs, 1]`` is already that shape and comes back as it is: reshape would
    restride it at bs 1 (a column of a wider buffer turns (W, 1) into (1, 1)), and a compiled
    organize fed the steps would compile again. The kernels' step shares this.
    """
    return topk_index if k == 1 else topk_index.reshape(bs, k * k)  # [bs, k * k]


def select_args(
    cfg: Any, step: Any, topk_p: Any, topk_index: Any, scores: Any = None
) -> tuple[Any, ...]:
    """:func:`select_top_k`'s arguments, checked (the step, then that step's contract)."""
    cfg = require_config("select_top_k", cfg)
    require_int("select_top_k", "step", step, 0, ("num_steps", cfg.num_steps))
    # A branch, not bool(): traced in a caller's compile, a symbolic step becomes a plain bool.
    first = True if step == 0 else False  # noqa: SIM210
    if (scores is None) != first:
        raise ValueError(f"select_top_k: {_SCORES_AT[first].format(step=step)}")
    if first:
        SELECT_FIRST(cfg, topk_p, topk_index)
    else:
        SELECT_NEXT(cfg, scores, topk_p, topk_index)
    return cfg, step, topk_p, topk_index, scores


# Scores of up to 32 bits rank by a float64 key, m - |m| * g * 2**-40 for flat index g, where
# m = score - g * 2**-300 with NaN and -inf as -2**1000 and +inf as 2**200. The factor moves
# a score towards -inf by less than half a float32 ulp (for g < 2**15), whatever its sign, so
# distinct scores keep their order while equal ones get distinct keys, the lower index
# larger; +inf, NaN and -inf, made finite beyond every float32, tie-break the same way. The
# additive term, below half the float64 ulp of any nonzero score (2**-202 at 2**-149, the
# least float32), leaves m = score there and separates zeros likewise. Every key is a normal
# float64: a CPU that flushes subnormals (torch.set_flush_denormal) would zero a subnormal
# one, and zeros would tie.
_TIE = 2.0**-40
_ZERO_TIE = 2.0**-300
_FLOOR = 2.0**1000  # NaN and -inf: below every finite key, and g's factor keeps it finite
_CEILING = 2.0**200  # +inf: above every finite float32
_INF = float("inf")
MAX_KEYED_WIDTH = 2**15


def best_indices(scores: Tensor, n: int) -> Tensor:
    """Indices of the ``n`` best entries of each row, best first.

    Larger scores rank first and NaN counts as ``-inf``, below every finite score; equal
    scores rank by the lower index. With probability scores (a child's score never exceeds
    its parent's, and a parent has the lower flat index) the selected set is therefore always
    closed under ancestors. Exact for scores of every floating dtype and sign, infinities
    included.

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
    offset, scale = _key_constants(scores.shape[1], scores.device)
    m = torch.nan_to_num(scores + offset, nan=-_FLOOR, posinf=_CEILING, neginf=-_FLOOR)  # [bs, W]
    return torch.addcmul(m, m.abs(), scale)  # [bs, W] float64


def _keyed(scores: Tensor) -> bool:
    return scores.dtype is not torch.float64 and scores.shape[1] <= MAX_KEYED_WIDTH


def _key_constants(width: int, device: torch.device) -> tuple[Tensor, Tensor]:
    if torch.compiler.is_dynamo_compiling():
        return _key_tensors(width, device)  # folded into the graph by the compiler
    key, build = ("rank_keys", width, device), lambda: _key_tensors(width, device)
    return memoized(key, build, capturable=True)  # first needed in a capture: in the graph


def _key_tensors(width: int, device: torch.device) -> tuple[Tensor, Tensor]:
    g = torch.arange(width, dtype=torch.float64, device=device)  # [W]
    return -g * _ZERO_TIE, -g * _TIE
