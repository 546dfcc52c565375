"""One draft step in one launch: the step-0 tables, or expand, rank and keep the k best."""

# ruff: noqa: ANN001, ANN202, N803  (Triton kernels: untyped tensor args, CAPS constexprs)
# mypy: allow-untyped-defs, disable-error-code="import-untyped, import-not-found"

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from torch import Tensor

from .. import selection
from ..config import DraftConfig
from ..types import DraftStep
from ._floats import narrow, widen
from ._ops import block, call, fused, launcher, power_of_2, register_op
from ._rank import count_better, rank_key


def first_step(cfg: DraftConfig, topk_p: Tensor, topk_index: Tensor) -> DraftStep:
    """Step 0 with one launch for ``hidden_index`` and ``parents_entry``."""
    return selection.first_entries(topk_p, topk_index, *call(first_step_op, topk_index, cfg.topk))


def next_step(
    cfg: DraftConfig, step: int, topk_p: Tensor, topk_index: Tensor, scores: Tensor
) -> DraftStep:
    k = cfg.topk
    offset = k * k * (step - 1) + k  # flat index of this step's first candidate
    input_ids, hidden_index, best, expand, parents = call(
        next_step_op, topk_p, topk_index, scores, k, offset
    )
    return DraftStep(
        input_ids=input_ids,
        hidden_index=hidden_index,
        scores=best,
        score_entry=expand,
        token_entry=selection.token_entry(topk_index, scores.shape[0], k),  # [bs, k * k]
        parents_entry=parents,
    )


def _first_step(topk_index: Tensor, topk: int) -> tuple[Tensor, Tensor]:
    bs = topk_index.shape[0]
    hidden_index = topk_index.new_empty((bs * topk,), dtype=torch.int64)  # [bs * k]
    parents = topk_index.new_empty((bs, topk + 1), dtype=torch.int64)  # [bs, k + 1]
    launch_first(bs, hidden_index, parents, K=topk, BLOCK=power_of_2(topk + 1))
    return hidden_index, parents


def _next_step(
    topk_p: Tensor, topk_index: Tensor, scores: Tensor, topk: int, offset: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    bs = scores.shape[0]
    dtype = torch.promote_types(scores.dtype, topk_p.dtype)
    out = (
        topk_index.new_empty((bs * topk,), dtype=torch.int64),  # [bs * k] input_ids
        topk_index.new_empty((bs * topk,), dtype=torch.int64),  # [bs * k] hidden_index
        scores.new_empty((bs, topk), dtype=dtype),  # [bs, k] scores
        scores.new_empty((bs, topk, topk), dtype=dtype),  # [bs, k, k] score_entry
        topk_index.new_empty((bs, topk), dtype=torch.int64),  # [bs, k] parents_entry
    )
    launch_next(
        bs,
        topk_p.contiguous(),
        topk_index.contiguous(),
        scores.contiguous(),
        *out,
        offset,
        K=topk,
        WIDE=dtype == torch.float64,
        BLOCK=block(topk * topk),
    )
    return out


@triton.jit
def _first_step_kernel(hidden_out, parents_out, K: tl.constexpr, BLOCK: tl.constexpr):
    # Row b continues its own hidden state: hidden_index = b; parents = [-1, 0, .., k - 1].
    row = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK)  # [BLOCK]
    tl.store(hidden_out + row * K + lanes, lanes * 0 + row, mask=lanes < K)
    tl.store(parents_out + row * (K + 1) + lanes, lanes.to(tl.int64) - 1, mask=lanes < K + 1)


@triton.jit
def _expand(g, row, valid, p_ptr, scores_ptr, expand_out, K: tl.constexpr, WIDE: tl.constexpr):
    """``scores[row, g // k] * topk_p[row * k + g // k, g % k]``, rounded as torch rounds it.

    Each operand converts exactly to float32 (float64 when ``WIDE``); a product of 16-bit
    floats is exact in float32, so the one rounding is to the output dtype, as in ATen.
    """
    score = tl.load(scores_ptr + row * K + g // K, mask=valid, other=0)
    prob = tl.load(p_ptr + row * K * K + g, mask=valid, other=0)
    return narrow(widen(score, WIDE) * widen(prob, WIDE), expand_out.dtype.element_ty)


@triton.jit
def _next_step_kernel(
    p_ptr, index_ptr, scores_ptr,
    ids_out, hidden_out, scores_out, expand_out, parents_out,
    offset,
    K: tl.constexpr, WIDE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # One program per request row; candidate g of k * k is kept at position rank(g) < k.
    row = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK)  # [BLOCK]
    for g0 in range(0, K * K, BLOCK):
        g = g0 + lanes  # [BLOCK]
        valid = g < K * K
        product = _expand(g, row, valid, p_ptr, scores_ptr, expand_out, K, WIDE)  # [BLOCK]
        tl.store(expand_out + row * K * K + g, product, mask=valid)
        key_g = tl.where(valid, rank_key(product, WIDE), float("-inf"))
        better = tl.zeros([BLOCK], tl.int32)  # [BLOCK]
        for h0 in range(0, K * K, BLOCK):
            h = h0 + lanes  # [BLOCK]
            valid_h = h < K * K
            other = _expand(h, row, valid_h, p_ptr, scores_ptr, expand_out, K, WIDE)
            key_h = tl.where(valid_h, rank_key(other, WIDE), float("-inf"))
            better += count_better(key_g, g, key_h, h)
        chosen = valid & (better < K)  # [BLOCK]
        slot = row * K + better  # [BLOCK] best first
        token = tl.load(index_ptr + row * K * K + g, mask=chosen)
        tl.store(ids_out + slot, token, mask=chosen)
        tl.store(hidden_out + slot, (g // K + row * K).to(tl.int64), mask=chosen)
        tl.store(scores_out + slot, product, mask=chosen)
        tl.store(parents_out + slot, (g + offset).to(tl.int64), mask=chosen)


launch_first, launch_next = launcher(_first_step_kernel), launcher(_next_step_kernel)
first_step_op = register_op("select_top_k_first", _first_step, _first_step_kernel)
next_step_op = register_op("select_top_k_next", _next_step, _next_step_kernel)
select_core = functools.partial(selection.select_core, first=first_step, later=next_step)
select_top_k = fused(selection.select_top_k, selection.select_args, select_core)
