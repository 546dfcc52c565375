"""Fused sampling verification: each request's walk and final draw in one Triton program.

One launch per call, registered as ``eagle_fn::verify_sampling`` (``torch.library.triton_op``
with ``wrap_triton``), so torch.compile and CUDA graphs see the kernel. The program walks the
tree with scalar loads (the children's probabilities only), then reads the last accepted
node's row twice: once for the total mass, once for the inverse CDF.

Exactness against :func:`eagle_fn.verify_sampling` (the torch function): ``accept_index`` and
``num_accepted`` are equal bit for bit on every input (the accumulator adds in the same order,
in the same type, and divides with IEEE rounding). The final token is equal whenever the
float64 running sums of the final row are exact (as for dyadic probabilities such as 0.25),
because this kernel sums blocks in a tree and the torch function sums sequentially; otherwise
they can differ only where a running sum ties ``coin * total`` within rounding. ``predicts``
is then equal too, given ``retrieve_index = row * N + node`` (each program zeroes and writes
its own request's slots). No product feeds a sum, so FMA fusion cannot change a rounding.

"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .. import sampling
from ..config import DraftConfig
from ..probs import compute_dtype
from ..sampling import THRESHOLD_ACC_FLOOR
from ..types import GreedyVerdict, VerifyTree
from ._kernels_sampling import HAVE_TRITON, verify_sampling_kernel
from ._ops import fused

BLOCK_V = 1024  # vocabulary entries per step of the final row's two passes


def sampling_core(
    cfg: DraftConfig,
    verify_tree: VerifyTree,
    q: Tensor,
    uniforms: Tensor,
    final_uniforms: Tensor,
    threshold_single: float,
    threshold_acc: float,
    p: Tensor | None,
) -> GreedyVerdict:
    """:func:`eagle_fn.sampling.sampling_core` in one launch."""
    vt = verify_tree
    bs, n = vt.retrieve_index.shape
    vocab = q.shape[-1]
    rows = q.reshape(bs * n, vocab)  # [bs * N, V]
    draft = rows if p is None else p.reshape(bs * n, vocab)  # [bs * N, V] unread without p
    links = (vt.retrieve_index, vt.retrieve_next_token, vt.retrieve_next_sibling)
    accept_index, num_accepted, predicts = VERIFY_SAMPLING(
        vt.draft_tokens, *links, rows, draft, uniforms, final_uniforms, cfg.num_steps,
        float(threshold_single), max(float(threshold_acc), THRESHOLD_ACC_FLOOR), p is not None,
    )  # fmt: skip
    return GreedyVerdict(accept_index, num_accepted, predicts)


def _verify_sampling(
    draft_tokens: Tensor,  # [bs * N]
    retrieve_index: Tensor,  # [bs, N]
    next_token: Tensor,  # [bs, N]
    next_sibling: Tensor,  # [bs, N]
    target_probs: Tensor,  # [bs * N, V]
    draft_probs: Tensor,  # [bs * N, V]
    uniforms: Tensor,  # [bs, N]
    final_uniforms: Tensor,  # [bs]
    num_steps: int,
    threshold_single: float,
    threshold_acc: float,
    has_draft: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    bs, n = retrieve_index.shape
    vocab = target_probs.shape[1]
    accept_index = retrieve_index.new_empty(bs, num_steps + 1)  # [bs, S + 1]
    num_accepted = retrieve_index.new_empty(bs)  # [bs]
    predicts = draft_tokens.new_empty(bs * n)  # [bs * N]
    if bs == 0:
        return accept_index, num_accepted, predicts
    wide = compute_dtype(target_probs.dtype) == torch.float64
    inputs = [
        draft_tokens.contiguous(), retrieve_index.contiguous(), next_token.contiguous(),
        next_sibling.contiguous(), target_probs.contiguous(), draft_probs.contiguous(),
        uniforms.contiguous(), final_uniforms.contiguous(),
    ]  # fmt: skip
    outputs = [accept_index, num_accepted, predicts]
    blocks = [_next_power_of_2(n), min(BLOCK_V, _next_power_of_2(vocab))]
    sizes = [n, vocab, num_steps, bs * n, *blocks]
    thresholds = [threshold_single, threshold_acc]
    if _interpreted() and not all(type(t) is Tensor for t in (*inputs, *outputs)):
        # The interpreter reads real memory: tracing records an opaque launch instead.
        _interpreted_launch(outputs, inputs, sizes, thresholds, has_draft, wide)
    else:
        _launch(outputs, inputs, sizes, thresholds, has_draft, wide)
    return accept_index, num_accepted, predicts


def _launch(
    outputs: list[Tensor],
    inputs: list[Tensor],
    sizes: list[int],
    thresholds: list[float],
    has_draft: bool,
    wide: bool,
) -> None:
    n, vocab, num_steps, total, block_n, block_v = sizes
    kernel = verify_sampling_kernel
    launchable = kernel if _interpreted() else torch.library.wrap_triton(kernel)
    launchable[(outputs[1].shape[0],)](
        *inputs, *outputs, n, vocab, num_steps, total, *thresholds,
        HAS_DRAFT=has_draft, WIDE=wide, BLOCK_N=block_n, BLOCK_V=block_v, num_warps=4,
    )  # fmt: skip


@torch.library.custom_op("eagle_fn::verify_sampling_interpreted_launch", mutates_args=("outputs",))
def _interpreted_launch(
    outputs: list[Tensor],
    inputs: list[Tensor],
    sizes: list[int],
    thresholds: list[float],
    has_draft: bool,
    wide: bool,
) -> None:
    _launch(outputs, inputs, sizes, thresholds, has_draft, wide)


@_interpreted_launch.register_fake
def _(
    outputs: list[Tensor],
    inputs: list[Tensor],
    sizes: list[int],
    thresholds: list[float],
    has_draft: bool,
    wide: bool,
) -> None:
    return None


def _interpreted() -> bool:
    """Whether the kernel runs in Triton's CPU interpreter (``TRITON_INTERPRET=1``)."""
    try:
        from triton.runtime.interpreter import (  # type: ignore[import-untyped]
            InterpretedFunction,
        )
    except ImportError:
        return False
    return isinstance(verify_sampling_kernel, InterpretedFunction)


def _next_power_of_2(value: int) -> int:
    return 1 << max(value - 1, 0).bit_length()


VERIFY_SAMPLING: Any = None
if HAVE_TRITON:
    torch.library.triton_op("eagle_fn::verify_sampling", _verify_sampling, mutates_args=())
    VERIFY_SAMPLING = torch.ops.eagle_fn.verify_sampling.default


verify_sampling = fused(sampling.verify_sampling, sampling.sampling_args, sampling_core)
