"""Fused sampling verification: each request's walk and final draw in one Triton launch.

One kernel launch per call, in the op ``eagle_fn::verify_sampling`` (registered and launched
by ``kernels._ops``, as every kernel is), plus, split, the fill that zeroes the arrival
counters. ``SPLIT``: several programs per request; each walks the tree and sums its chunks
of the final row block by block, and the request's last program to arrive draws, rescanning
only the block that holds ``coin * total`` (docs/sampling.md, "The fused kernel"). Otherwise
one program per request does the same over its whole row, in one launch. Either way the row
is read once, plus one block.

Exactness against :func:`eagle_fn.verify_sampling` (the torch function): ``accept_index`` and
``num_accepted`` are equal bit for bit on every input (the accumulator adds in the same order,
in the same type, and divides with IEEE rounding). The final token is equal whenever the
float64 running sums of the final row are exact (as for dyadic probabilities such as 0.25),
because this kernel sums within blocks as a tree and across them as a scan, and the torch
function with ``torch.cumsum`` (sequential on a CPU); otherwise they can differ only where
a running sum ties ``coin * total`` within rounding. ``predicts`` is then equal too, for any
``retrieve_index``: each request's programs zero and write only its own row, in walk order.
No product feeds a sum, so FMA fusion cannot change a rounding.
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
from ._kernels_sampling import verify_sampling_kernel
from ._ops import call, fused, kernel_core, launcher, power_of_2, register_op
from .greedy import empty_verdict

# Launch knobs, read at each call; bench/sweep_sampling.py times them (docs/performance.md).
BLOCK_V = 4096  # vocabulary entries per block of the final row (a power of 2)
NUM_WARPS = 8
# A cap on registers per thread (ptxas's maxnreg), or None for ptxas's choice: 220 at
# NUM_WARPS 8 and V 32000 (Triton 3.6, sm_90) leave room for one program an SM; at 128, two
# fit and nothing spills. On an H200 (2026-12-04, two sweeps) the cap took V 128256 from
# 21.4-21.8 to 16.2-16.4 µs of replay, and V 32000 from 10.3-10.4 to 10.5 (docs/sampling.md).
MAXNREG: int | None = 128
# Several programs per request (the last to finish draws), so that a small batch still
# spreads over the GPU: about PROGRAMS in all, at most one per chunk of BLOCKS_PER_PROGRAM
# blocks, loaded at once (bs 32, V 128256: 512 programs, 32 float32 loads in flight a
# thread; bs 256: 2 programs a request, 8 chunks each). False: one program per request
# loops over its row's chunks, in one launch: no arrival counters to zero.
SPLIT = True
BLOCKS_PER_PROGRAM = 2  # a power of 2
PROGRAMS = 512
# Up to this many nodes (BLOCK_N, a power of 2), the walk gathers every node's row at every
# node's token before it starts, BLOCK_N ** 2 loads in flight together, instead of one
# gather a level that waits on the level before: 0 turns it off. Not yet timed on a GPU
# (bench/sweep_sampling.py times both), hence off.
PREFETCH_N = 0
# Chunks a program's loads run ahead of its sums by, plus one (Triton's software pipeline:
# STAGES - 1 chunks of BLOCKS_PER_PROGRAM * BLOCK_V entries in shared memory, 64 KB at 3
# stages of two float32 blocks); 1 loads each chunk when it sums it. Only a program with
# several chunks (one program a request, or a large batch) gains. Not yet timed on a GPU
# (bench/sweep_sampling.py times it), hence 1.
STAGES = 1


def _sample(cfg: DraftConfig, verify_tree: VerifyTree, q: Tensor, *args: Any) -> GreedyVerdict:
    """``sampling_core``'s body: ``args`` are ``uniforms, final_uniforms, threshold_single,
    threshold_acc, p``."""
    uniforms, final_uniforms, single, acc, p = args
    vt = verify_tree
    bs, n = vt.retrieve_index.shape
    vocab = q.shape[-1]
    rows = q.reshape(bs * n, vocab)  # [bs * N, V]
    draft = rows if p is None else p.reshape(bs * n, vocab)  # [bs * N, V] unread without p
    accept_index, num_accepted, predicts = call(
        VERIFY_SAMPLING,
        vt.draft_tokens, *vt.links, rows, draft, uniforms, final_uniforms, cfg.num_steps,
        float(single), max(float(acc), THRESHOLD_ACC_FLOOR), p is not None,
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
    accept_index, num_accepted, predicts = empty_verdict(retrieve_index, draft_tokens, num_steps)
    block, max_blocks, per_program, parts, chunks = _launch_shape(bs, vocab)
    sums, arrivals = _scratch(retrieve_index, max_blocks, SPLIT)
    q = _unit_columns(target_probs)  # [bs * N, V]
    p = _unit_columns(draft_probs) if has_draft else q  # [bs * N, V] unread without a draft
    launch(
        bs * parts,
        draft_tokens.contiguous(), retrieve_index.contiguous(), next_token.contiguous(),
        next_sibling.contiguous(), q, p, uniforms.contiguous(), final_uniforms.contiguous(),
        accept_index, num_accepted, predicts, sums, arrivals,
        n, vocab, q.stride(0), p.stride(0), num_steps, bs * n, parts, chunks, threshold_single,
        threshold_acc,
        **_constants(n, has_draft, target_probs.dtype, block, max_blocks, per_program),
    )  # fmt: skip
    return accept_index, num_accepted, predicts


def _constants(
    n: int, has_draft: bool, dtype: torch.dtype, block: int, max_blocks: int, per_program: int
) -> dict[str, Any]:
    """The launch's compile-time constants and options, the module's knobs among them."""
    return {
        "HAS_DRAFT": has_draft,
        "WIDE": compute_dtype(dtype) == torch.float64,
        "SPLIT": SPLIT,
        "BLOCK_N": power_of_2(n),
        "BLOCK_V": block,
        "MAX_BLOCKS": max_blocks,
        "PER_PROGRAM": per_program,
        "PREFETCH": power_of_2(n) <= PREFETCH_N,
        "STAGES": STAGES,
        "num_warps": NUM_WARPS,
        **({} if MAXNREG is None else {"maxnreg": MAXNREG}),
    }


def _launch_shape(bs: Any, vocab: int) -> tuple[int, int, int, Any, Any]:
    """The final row's block size, its block count rounded up to a power of 2, the blocks a
    program loads at once, the programs per request and the chunks per program."""
    block = min(BLOCK_V, power_of_2(vocab))
    num_blocks = -(-vocab // block)
    max_blocks = power_of_2(num_blocks)
    per_program = min(BLOCKS_PER_PROGRAM, max_blocks)
    parts, chunks = _parts(bs, -(-num_blocks // per_program), SPLIT)
    return block, max_blocks, per_program, parts, chunks


def _unit_columns(probs: Tensor) -> Tensor:
    """``probs`` as the kernel reads it in place: any row stride (a view of a padded buffer,
    say), consecutive columns; copied only when its columns are apart."""
    return probs if probs.stride(1) == 1 else probs.contiguous()


def _parts(bs: Any, num_chunks: int, split: bool) -> tuple[Any, Any]:
    """Programs per request and chunks per program: one program unless ``split``, else about
    ``PROGRAMS`` in all. ``torch.sym_*``: a traced ``bs`` stays symbolic, unguarded."""
    if not split:
        return 1, num_chunks
    parts = torch.sym_max(1, torch.sym_min(num_chunks, -(-PROGRAMS // torch.sym_max(bs, 1))))
    return parts, -(-num_chunks // parts)


def _scratch(like: Tensor, max_blocks: int, split: bool) -> tuple[Tensor, Tensor]:
    """The block sums, and a split launch's arrival counters (an unread placeholder
    otherwise). Only the counters must start at 0: the one fill."""
    sums = like.new_empty(like.shape[0], max_blocks, dtype=torch.float64)  # [bs, MAX_BLOCKS]
    if not split:
        return sums, like.new_empty(1, dtype=torch.int32)  # [1]
    return sums, like.new_zeros(like.shape[0], dtype=torch.int32)  # [bs]


launch = launcher(verify_sampling_kernel)
VERIFY_SAMPLING = register_op("verify_sampling", _verify_sampling, verify_sampling_kernel)
sampling_core = kernel_core(sampling.sampling_core, _sample)
verify_sampling = fused(
    sampling.verify_sampling,
    sampling.sampling_args,
    sampling_core,
    "values (bit for bit, but for a final token whose float64 running sum ties the coin "
    "within rounding: docs/sampling.md)",
)
