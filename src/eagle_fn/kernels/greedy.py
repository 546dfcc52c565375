"""Fused greedy verification: each request's accept walk in one Triton program."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..config import DraftConfig
from ..types import GreedyVerdict, VerifyTree
from ..verify import VERIFY_GREEDY
from ._kernels_verify import verify_greedy_kernel
from ._launch_verify import HAVE_TRITON, launch, next_power_of_2, require_kernel_device

SCAN = 1024  # retrieve_index entries a program scans at once for links into its row


def verify_greedy(
    cfg: DraftConfig, verify_tree: VerifyTree, target_predict: Tensor
) -> GreedyVerdict:
    """:func:`eagle_fn.verify_greedy` in one fused kernel launch.

    Same arguments, checks, errors and outputs, bit for bit, on every input the torch
    function accepts: looping links (each sibling list is walked for at most N nodes, which
    finds the same first match as the torch path's pointer doubling), links out of range
    (clamped to ``[-1, N - 1]``) and any ``retrieve_index``.

    Args:
        cfg: the draft configuration.
        verify_tree: the verify-ready tree, on a CUDA device (CPU under
            ``TRITON_INTERPRET=1``).
        target_predict: the target model's argmax at every node, int64.

    Shapes: ``target_predict [bs * N]`` or ``[bs, N]`` -> ``accept_index [bs, num_steps + 1]``,
    ``num_accepted [bs]``, ``predicts [bs * N]``.

    Example:
        >>> cfg = DraftConfig.chain(2)
        >>> vt = VerifyTree(torch.tensor([5, 7, 9]), torch.tensor([3, 4, 5]),
        ...                 torch.ones(9, dtype=torch.bool), torch.tensor([[0, 1, 2]]),
        ...                 torch.tensor([[1, 2, -1]]), torch.tensor([[-1, -1, -1]]))
        >>> # The target follows 5 with 7 (accept), then 7 with 8, not 9 (stop): commit 7, 8.
        >>> verdict = verify_greedy(cfg, vt, torch.tensor([7, 8, 2]))
        >>> verdict.accept_index.tolist(), verdict.num_accepted.tolist(), verdict.predicts.tolist()
        ([[0, 1, -1]], [1], [7, 8, 0])
    """
    if not VERIFY_GREEDY.fits(cfg, verify_tree, target_predict):
        VERIFY_GREEDY.check(cfg, verify_tree, target_predict)
    require_kernel_device("verify_greedy", target_predict.device)
    vt, flat = verify_tree, target_predict.reshape(-1)  # [bs * N]
    links = (vt.retrieve_index, vt.retrieve_next_token, vt.retrieve_next_sibling)
    return greedy_core(cfg, vt.draft_tokens, *links, flat)


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
        SCAN=SCAN,
    )  # fmt: skip
    return accept_index, num_accepted, predicts


VERIFY_GREEDY_OP: Any = None  # torch.ops.eagle_fn.verify_greedy.default with Triton installed
if HAVE_TRITON:
    torch.library.triton_op("eagle_fn::verify_greedy", _verify_greedy, mutates_args=())
    VERIFY_GREEDY_OP = torch.ops.eagle_fn.verify_greedy.default
