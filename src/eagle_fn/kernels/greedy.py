"""Fused greedy verification: each request's accept walk in one Triton program."""

from __future__ import annotations

from torch import Tensor

from .. import verify
from ..config import DraftConfig
from ..types import GreedyVerdict
from ._kernels_verify import verify_greedy_kernel
from ._ops import call, fused, kernel_core, launcher, power_of_2, register_op


def _greedy(cfg: DraftConfig, *tensors: Tensor) -> GreedyVerdict:
    """``greedy_core``'s body: ``tensors`` are its five tensors, in order."""
    return GreedyVerdict(*call(VERIFY_GREEDY_OP, *tensors, cfg.num_steps))


def _verify_greedy(
    draft_tokens: Tensor,  # [bs * N]
    retrieve_index: Tensor,  # [bs, N]
    next_token: Tensor,  # [bs, N]
    next_sibling: Tensor,  # [bs, N]
    target: Tensor,  # [bs * N]
    num_steps: int,
) -> tuple[Tensor, Tensor, Tensor]:
    bs, n = retrieve_index.shape
    accept_index, num_accepted, predicts = empty_verdict(retrieve_index, target, num_steps)
    launch(
        bs,
        draft_tokens.contiguous(), retrieve_index.contiguous(), next_token.contiguous(),
        next_sibling.contiguous(), target.contiguous(),
        accept_index, num_accepted, predicts,
        n, num_steps, bs,
        num_warps=1,  # a latency-bound walk: one warp reduces without shared memory
        BLOCK_N=power_of_2(n),
        BLOCK_S=power_of_2(num_steps + 1),
    )  # fmt: skip
    return accept_index, num_accepted, predicts


def empty_verdict(
    retrieve_index: Tensor, like: Tensor, num_steps: int
) -> tuple[Tensor, Tensor, Tensor]:
    """A verdict's outputs, allocated: ``accept_index``, ``num_accepted`` and ``predicts``
    (of ``like``'s dtype), for a ``[bs, N]`` ``retrieve_index``."""
    bs, n = retrieve_index.shape
    return (
        retrieve_index.new_empty(bs, num_steps + 1),  # [bs, S + 1]
        retrieve_index.new_empty(bs),  # [bs]
        like.new_empty(bs * n),  # [bs * N]
    )


launch = launcher(verify_greedy_kernel)
VERIFY_GREEDY_OP = register_op("verify_greedy", _verify_greedy, verify_greedy_kernel)
greedy_core = kernel_core(verify.greedy_core, _greedy)
verify_greedy = fused(verify.verify_greedy, verify.greedy_args, greedy_core)
