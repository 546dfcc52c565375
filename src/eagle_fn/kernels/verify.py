"""Fused verify build: the whole verify-ready tree of each request in one Triton program."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .. import layout
from ..config import DraftConfig
from ..types import MaskMode, VerifyTree, bitpacked_dtype
from ._kernels_build import verify_build_kernel
from ._ops import call, fused, kernel_core, launcher, power_of_2, register_op

# The op takes the mask layout as a flat int (schemas hold no enums).
QLEN, BITPACKED, FULL = 0, 1, 2
# The kernel writes BITPACKED rows through a signed view of the same width.
_SIGNED = {torch.uint8: torch.int8, torch.uint16: torch.int16, torch.uint32: torch.int32}
TILE = 4096  # elements of the [rows, N] tiles a program works on at once
PACKED_N = 64  # up to this many nodes a walk fits one int64 word: one [N, N] tile, one warp


def _build(cfg: DraftConfig, *args: Any) -> VerifyTree:
    """``verify_core``'s body: ``args`` are its five tensors, ``mask_mode`` and ``total``."""
    *tensors, mask_mode, total = args
    code = mask_code(mask_mode)
    return VerifyTree(*call(VERIFY_BUILD_OP, *tensors, cfg.topk, cfg.num_steps, code, total))


def mask_code(mode: MaskMode) -> int:
    """The op's int for a mask layout: QLEN 0, BITPACKED 1, FULL 2.

    Identity tests, not a dict lookup: under torch.compile with a shapes spec (the worker's
    compile), dynamo 2.13 installed no guard on an enum used only as a dict key, so a graph
    traced for one layout was replayed for the others.
    """
    if mode is MaskMode.QLEN:
        return QLEN
    if mode is MaskMode.BITPACKED:
        return BITPACKED
    return FULL


def _verify_build(
    parent_list: Tensor,  # [bs, parent_width]
    top_scores_index: Tensor,  # [bs, N - 1]
    draft_tokens: Tensor,  # [bs, N - 1]
    bonus_tokens: Tensor,  # [bs]
    seq_lens: Tensor,  # [bs]
    topk: int,
    num_steps: int,
    mask_mode: int,
    total: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    bs, n = top_scores_index.shape[0], top_scores_index.shape[1] + 1
    tokens = top_scores_index.new_empty(bs * n)  # [bs * N]
    positions = top_scores_index.new_empty(bs * n)  # [bs * N]
    index = top_scores_index.new_empty(bs, n)  # [bs, N]
    next_token = top_scores_index.new_empty(bs, n)  # [bs, N]
    next_sibling = top_scores_index.new_empty(bs, n)  # [bs, N]
    mask = _empty_mask(top_scores_index, bs, n, mask_mode, total)
    bits = mask.view(_SIGNED.get(mask.dtype, mask.dtype))  # same memory, a type Triton takes
    block, rows, warps, words = _launch_shape(n, mask_mode)
    width = parent_list.shape[1]
    # A one-step draft has no parent table; its loads are masked off, but the kernel still
    # takes a pointer, so it gets one that points at real memory.
    parents = parent_list.contiguous() if width > 0 else top_scores_index
    launch(
        bs,
        parents, top_scores_index.contiguous(), draft_tokens.contiguous(),
        bonus_tokens.contiguous(), seq_lens.contiguous(),
        tokens, positions, bits, index, next_token, next_sibling,
        topk, num_steps, width, n, total,
        num_warps=warps,
        MODE=mask_mode,
        BLOCK_N=block,
        ROWS=rows,
        WORDS=words,
    )  # fmt: skip
    return tokens, positions, mask, index, next_token, next_sibling


def _launch_shape(n: int, mask_mode: int) -> tuple[int, int, int, bool]:
    """``BLOCK_N``, ``ROWS``, ``num_warps`` and ``WORDS`` of an ``n``-node build."""
    block = power_of_2(n)
    rows = min(block, max(1, TILE // block))
    # Packed trees are light (one tile, no per-row walks): one warp keeps the reductions and
    # register gathers inside it, with no barriers and no work copied across warps.
    warps = 1 if block <= PACKED_N else 4
    # The kernel writes packed QLEN rows of whole 4-cell words as int32 words.
    words = mask_mode == QLEN and block <= PACKED_N and n % 4 == 0
    return block, rows, warps, words


def _empty_mask(like: Tensor, bs: Any, n: int, mode: int, total: int) -> Tensor:
    if mode == QLEN:
        return like.new_empty(bs * n * n, dtype=torch.bool)  # [bs * N * N]
    if mode == BITPACKED:
        return like.new_empty(bs * n, dtype=bitpacked_dtype(n))  # [bs * N]
    if mode == FULL:
        return like.new_ones(total, dtype=torch.bool)  # [total] prefix columns stay True
    raise ValueError(
        f"verify_build: mask_mode must be 0 (QLEN), 1 (BITPACKED) or 2 (FULL), got {mode}"
    )


launch = launcher(verify_build_kernel)
VERIFY_BUILD_OP = register_op("verify_build", _verify_build, verify_build_kernel)
verify_core = kernel_core(layout.verify_core, _build)
build_verify_tree = fused(layout.build_verify_tree, layout.verify_args, verify_core)
