"""Fused greedy verification: each request's accept walk in one Triton program."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .. import verify
from ..config import DraftConfig
from ..types import GreedyVerdict
from ._kernels_verify import verify_greedy_kernel
from ._launch_verify import HAVE_TRITON, launch, next_power_of_2
from ._ops import fused


def greedy_core(
    cfg: DraftConfig,
    draft_tokens: Tensor,
    retrieve_index: Tensor,
    retrieve_next_token: Tensor,
    retrieve_next_sibling: Tensor,
    target_predict: Tensor,
) -> GreedyVerdict:
    """:func:`verify_greedy` without its checks, as :func:`eagle_fn.verify.greedy_core`.

    Shapes: ``draft_tokens, target_predict [bs * N]``, ``retrieve_index,
    retrieve_next_token, retrieve_next_sibling [bs, N]``.
    """
    links = (retrieve_index, retrieve_next_token, retrieve_next_sibling)
    outputs = VERIFY_GREEDY_OP(draft_tokens, *links, target_predict, cfg.num_steps)
    return GreedyVerdict(*outputs)


def _verify_greedy(
    draft_tokens: Tensor,  # [bs * N]
    retrieve_index: Tensor,  # [bs, N]
    next_token: Tensor,  # [bs, N]
    next_sibling: Tensor,  # [bs, N]
    target: Tensor,  # [bs * N]
    num_steps: int,
) -> tuple[Tensor, Tensor, Tensor]:
    bs, n = retrieve_index.shape
    accept_index = retrieve_index.new_empty(bs, num_steps + 1)  # [bs, S + 1]
    num_accepted = retrieve_index.new_empty(bs)  # [bs]
    predicts = target.new_empty(bs * n)  # [bs * N]
    launch(
        verify_greedy_kernel,
        bs,
        (
            draft_tokens.contiguous(), retrieve_index.contiguous(), next_token.contiguous(),
            next_sibling.contiguous(), target.contiguous(),
        ),
        (accept_index, num_accepted, predicts),
        (n, num_steps, bs),
        num_warps=1,  # a latency-bound walk: one warp reduces without shared memory
        BLOCK_N=next_power_of_2(n),
        BLOCK_S=next_power_of_2(num_steps + 1),
    )  # fmt: skip
    return accept_index, num_accepted, predicts


VERIFY_GREEDY_OP: Any = None  # torch.ops.eagle_fn.verify_greedy.default with Triton installed
if HAVE_TRITON:
    torch.library.triton_op("eagle_fn::verify_greedy", _verify_greedy, mutates_args=())
    VERIFY_GREEDY_OP = torch.ops.eagle_fn.verify_greedy.default


verify_greedy = fused(verify.verify_greedy, verify.greedy_args, greedy_core)
