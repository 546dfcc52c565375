"""Tree organization in one launch: rank, select, order, gather and the parent table."""

# ruff: noqa: ANN001, ANN202, N803  (Triton kernels: untyped tensor args, CAPS constexprs)
# mypy: allow-untyped-defs, disable-error-code="import-untyped, import-not-found"

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from .. import organize
from ..config import DraftConfig
from ..types import DraftTree, Tensors
from ._ops import MIN_BLOCK, block, call, fused, kernel_core, launcher, power_of_2, register_op
from ._rank import count_better, order_key, rank_key, threshold
from ._slots import MAX_SLOTS, load_slots, slot_args


def _tree(cfg: DraftConfig, *lists: Tensors) -> DraftTree:
    """``tree_core``'s body: ``lists`` are the score, token and parents lists."""
    ops_lists = [list(steps) for steps in lists]  # the schema takes lists, not tuples
    return DraftTree(*call(organize_tree_op, *ops_lists, cfg.topk, cfg.num_draft_tokens))


# Rows up to RANK_WIDTH candidates rank in one tile of pairwise compares (one reduction); wider
# ones select above a threshold found bit by bit, with all keys in one program's registers,
# up to SELECT_WIDTH. Past that (topk 16 and 17 steps, say) they rank by pairs, tile by tile.
RANK_WIDTH = 64
SELECT_WIDTH = 4096


def _organize_tree(
    score_list: list[Tensor],
    token_list: list[Tensor],
    parents_list: list[Tensor],
    topk: int,
    num_draft_tokens: int,
) -> tuple[Tensor, Tensor, Tensor]:
    first = parents_list[0]  # [bs, k + 1] int64
    bs, steps = first.shape[0], len(parents_list)
    wide = any(t.dtype == torch.float64 for t in score_list)
    widths = RANK_WIDTH, SELECT_WIDTH  # read per call: tests move them to force a path
    parent_width, constants = _launch_plan(topk, steps, num_draft_tokens, wide, widths)
    parent_list = first.new_empty((bs, parent_width))  # [bs, parent_width]
    top = first.new_empty((bs, num_draft_tokens - 1))  # [bs, N - 1]
    tokens = first.new_empty((bs, num_draft_tokens - 1))  # [bs, N - 1]
    launch(
        bs,
        *slot_args(score_list),
        *slot_args(token_list),
        *slot_args(parents_list[:-1]),
        parent_list,
        top,
        tokens,
        **constants,
    )
    return parent_list, top, tokens


@functools.cache
def _launch_plan(
    k: int, steps: int, n: int, wide: bool, widths: tuple[int, int]
) -> tuple[int, dict[str, Any]]:
    """The parent table's width and the launch's constants, worked out once per draft shape
    and ranking widths (``RANK_WIDTH``, ``SELECT_WIDTH``): every eager call would pay for
    them in host time."""
    parent_width = k * (steps - 1) + 1 if steps > 1 else 0
    width = k + (steps - 1) * k * k  # num_candidates
    by_rank = width <= widths[0] or width > widths[1]
    width_block = block(width) if by_rank else max(MIN_BLOCK, power_of_2(width))
    return parent_width, {
        "K": k,
        "SLOTS": min(steps, MAX_SLOTS),
        "PARENT_SLOTS": min(steps - 1, MAX_SLOTS),
        "W": width,
        "N1": n - 1,
        "PW": parent_width,
        "WIDE": wide,
        "BY_RANK": by_rank,
        # 2**BITS x BLOCK compares a round: at most 8192 up to a 2048 block, then 4 a lane.
        "BITS": 4 if width_block <= 512 else 2,
        "BLOCK": width_block,
        "num_warps": 4 if width_block <= 2048 else 8,
    }


@triton.jit
def _keys(flat, row, s0, s1, s2, s3, s4, s5, s6, s7,
          SLOTS: tl.constexpr, K: tl.constexpr, W: tl.constexpr, WIDE: tl.constexpr,
          BLOCK: tl.constexpr):  # fmt: skip
    """Ranking keys of candidates ``flat`` (``-inf`` past ``W``). ``[BLOCK]``."""
    if WIDE:
        floor = tl.full([BLOCK], float("-inf"), tl.float64)
    else:
        floor = tl.full([BLOCK], float("-inf"), tl.float32)
    scores = load_slots(floor, flat, row, flat < W, s0, s1, s2, s3, s4, s5, s6, s7,
                        SLOTS, K, K * K, W)  # fmt: skip
    return rank_key(scores, WIDE)


@triton.jit
def _tokens(flat, row, mask, t0, t1, t2, t3, t4, t5, t6, t7, SLOTS: tl.constexpr,
            K: tl.constexpr, W: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """Tokens of candidates ``flat`` where ``mask`` (0 elsewhere). ``[BLOCK]`` int64."""
    return load_slots(tl.zeros([BLOCK], tl.int64), flat, row, mask,
                      t0, t1, t2, t3, t4, t5, t6, t7,
                      SLOTS, K, K * K, W)  # fmt: skip


@triton.jit
def _emit(g, chosen, tokens, before, row, index_out, token_out, N1: tl.constexpr):
    """Writes the ``chosen`` of candidates ``g`` and their ``tokens`` after the ``before``
    already written, in ascending order; returns how many it wrote."""
    ones = chosen.to(tl.int32)
    slot = row * N1 + before + tl.cumsum(ones, axis=0) - ones  # [BLOCK] exclusive prefix
    tl.store(index_out + slot, g.to(tl.int64), mask=chosen)
    tl.store(token_out + slot, tokens, mask=chosen)
    return tl.sum(ones, axis=0)


@triton.jit
def _copy_parents(row, parent_out,
                  p0, p1, p2, p3, p4, p5, p6, p7,
                  SLOTS: tl.constexpr, K: tl.constexpr, PW: tl.constexpr,
                  BLOCK: tl.constexpr):  # fmt: skip
    """Row ``row`` of the parent table: the parents entries of every step but the last."""
    for c0 in range(0, PW, BLOCK):
        c = c0 + tl.arange(0, BLOCK)  # [BLOCK]
        parents = load_slots(tl.zeros([BLOCK], tl.int64), c, row, c < PW,
                             p0, p1, p2, p3, p4, p5, p6, p7,
                             SLOTS, K + 1, K, PW)  # fmt: skip
        tl.store(parent_out + row * PW + c, parents, mask=c < PW)


@triton.jit
def _select_by_rank(row, index_out, token_out,
                    s0, s1, s2, s3, s4, s5, s6, s7,
                    t0, t1, t2, t3, t4, t5, t6, t7,
                    K: tl.constexpr, SLOTS: tl.constexpr, W: tl.constexpr, N1: tl.constexpr,
                    WIDE: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """rank(g) by counting, tile against tile (W² compares); writes the selected candidates
    of each tile of ``g`` and their tokens after those of the earlier tiles."""
    lanes = tl.arange(0, BLOCK)  # [BLOCK]
    selected = tl.full([], 0, tl.int32)  # selected candidates in earlier tiles
    for g0 in range(0, W, BLOCK):
        g = g0 + lanes  # [BLOCK]
        key_g = _keys(g, row, s0, s1, s2, s3, s4, s5, s6, s7, SLOTS, K, W, WIDE, BLOCK)
        better = tl.zeros([BLOCK], tl.int32)  # [BLOCK]
        for h0 in range(0, W, BLOCK):
            h = h0 + lanes  # [BLOCK]
            key_h = _keys(h, row, s0, s1, s2, s3, s4, s5, s6, s7,
                          SLOTS, K, W, WIDE, BLOCK)  # fmt: skip
            better += count_better(key_g, g, key_h, h)
        chosen = (g < W) & (better < N1)  # [BLOCK]
        tokens = _tokens(g, row, chosen, t0, t1, t2, t3, t4, t5, t6, t7,
                         SLOTS, K, W, BLOCK)  # fmt: skip
        selected += _emit(g, chosen, tokens, selected, row, index_out, token_out, N1)


@triton.jit
def _above_threshold(key, N1: tl.constexpr, BITS: tl.constexpr):
    """Whether rank(g) < N - 1, from the whole row's order keys (0 past W): key(g) is above
    the (N - 1)-th largest key T, or equals T and fewer than N - 1 - #{key > T} equal keys
    lie below g."""
    cut = threshold(key, N1, BITS)
    above = key > cut  # [BLOCK]
    tied = (key == cut).to(tl.int32)  # [BLOCK]
    room = N1 - tl.sum(above.to(tl.int32), axis=0)  # ties to take, the lowest first
    return above | ((tied != 0) & (tl.cumsum(tied, axis=0) - tied < room))  # [BLOCK]


@triton.jit
def _organize_tree_kernel(
    s0, s1, s2, s3, s4, s5, s6, s7,
    t0, t1, t2, t3, t4, t5, t6, t7,
    p0, p1, p2, p3, p4, p5, p6, p7,
    parent_out, index_out, token_out,
    K: tl.constexpr, SLOTS: tl.constexpr, PARENT_SLOTS: tl.constexpr, W: tl.constexpr,
    N1: tl.constexpr, PW: tl.constexpr, WIDE: tl.constexpr, BY_RANK: tl.constexpr,
    BITS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # One program per request row. Candidate g is selected when fewer than N - 1 candidates
    # beat it; its output slot is the number of selected candidates below it (ascending order).
    row = tl.program_id(0).to(tl.int64)
    if BY_RANK:
        _select_by_rank(row, index_out, token_out,
                        s0, s1, s2, s3, s4, s5, s6, s7,
                        t0, t1, t2, t3, t4, t5, t6, t7,
                        K, SLOTS, W, N1, WIDE, BLOCK)  # fmt: skip
        _copy_parents(row, parent_out, p0, p1, p2, p3, p4, p5, p6, p7,
                      PARENT_SLOTS, K, PW, BLOCK)  # fmt: skip
    else:
        # The whole row in one block, selected above a threshold.
        lanes = tl.arange(0, BLOCK)  # [BLOCK]
        key = _keys(lanes, row, s0, s1, s2, s3, s4, s5, s6, s7,
                    SLOTS, K, W, WIDE, BLOCK)  # fmt: skip
        key = tl.where(lanes < W, order_key(key, WIDE), 0)  # [BLOCK] 0 past W: below all
        # Every token and the parent table now, while the keys load: they need no ranking,
        # and their latency hides under the keys' instead of following the selection.
        tokens = _tokens(lanes, row, lanes < W, t0, t1, t2, t3, t4, t5, t6, t7,
                         SLOTS, K, W, BLOCK)  # fmt: skip
        _copy_parents(row, parent_out, p0, p1, p2, p3, p4, p5, p6, p7,
                      PARENT_SLOTS, K, PW, BLOCK)  # fmt: skip
        chosen = _above_threshold(key, N1, BITS)  # [BLOCK]
        _emit(lanes, chosen, tokens, 0, row, index_out, token_out, N1)


launch = launcher(_organize_tree_kernel)
organize_tree_op = register_op("organize_tree", _organize_tree, _organize_tree_kernel)
tree_core = kernel_core(organize.tree_core, _tree)
organize_tree = fused(organize.organize_tree, organize.tree_args, tree_core)
