"""The Triton kernel of fused sampling verification (eagle_fn.kernels.sampling launches it).

Kernel parameters are untyped by Triton's convention and constexprs are upper case, hence the
file-wide lint exceptions.
"""

# ruff: noqa: ANN001, ANN202, N803
# mypy: disable-error-code="no-untyped-def, import-untyped, import-not-found"

from __future__ import annotations

import triton
import triton.language as tl

from ._floats import widen
from ._walk import own_slot, walk


# The ints that change with the batch size only bound indices and loops: unspecialized, one
# compile serves every batch size.
@triton.jit(do_not_specialize=["total_nodes", "parts", "chunks"])
def verify_sampling_kernel(
    tokens_ptr, index_ptr, next_ptr, sibling_ptr, q_ptr, p_ptr, coins_ptr, final_ptr, accept_ptr,
    num_ptr, predicts_ptr, sums_ptr, arrivals_ptr, n, vocab, q_stride, p_stride, num_steps,
    total_nodes, parts, chunks, threshold_single, threshold_acc, HAS_DRAFT: tl.constexpr,
    WIDE: tl.constexpr, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr,
    MAX_BLOCKS: tl.constexpr, PER_PROGRAM: tl.constexpr, PREFETCH: tl.constexpr,
    STAGES: tl.constexpr,
):  # fmt: skip
    """``parts`` programs per request, each with the bounded walk; then the final draw.

    The final row's chunks of ``PER_PROGRAM`` blocks of ``BLOCK_V`` entries go ``chunks`` to a
    program: program ``part`` sums each block of chunks ``part * chunks`` on into ``sums``.
    ``SPLIT``: the request's last program to arrive (``arrivals``, zeroed by the caller) adds
    the block sums up and draws. Otherwise ``parts`` is 1 and the one program draws itself.
    """
    pid = tl.program_id(0)
    row = (pid // parts).to(tl.int64)
    part = pid % parts
    base = row * n
    cur, last, rejected, drop = walk(
        tokens_ptr, index_ptr, next_ptr, sibling_ptr, q_ptr, p_ptr, coins_ptr, accept_ptr,
        num_ptr, predicts_ptr, row, base, n, vocab, q_stride, p_stride, num_steps, total_nodes,
        threshold_single, threshold_acc, part, HAS_DRAFT, WIDE, BLOCK_N, PREFETCH,
    )  # fmt: skip
    coin = widen(tl.load(final_ptr + row), WIDE).to(tl.float64)
    # From here on q_ptr and p_ptr point at the final row (rows lie any stride apart).
    q_ptr += (base + cur) * q_stride
    p_ptr += (base + cur) * p_stride
    blocks = tl.arange(0, MAX_BLOCKS)  # [MAX_BLOCKS] the final row's blocks, both shapes
    slot = own_slot(last, base, n, total_nodes)
    num_blocks = tl.cdiv(vocab, BLOCK_V)
    _sum_chunks(q_ptr, p_ptr, sums_ptr, row, part, chunks, rejected, drop, vocab,
                num_blocks, HAS_DRAFT, WIDE, BLOCK_V, MAX_BLOCKS, PER_PROGRAM, STAGES)  # fmt: skip
    _draw_last_arrival(q_ptr, p_ptr, predicts_ptr, sums_ptr, arrivals_ptr, row, parts,
                       rejected, drop, coin, slot, total_nodes, vocab, blocks, num_blocks,
                       HAS_DRAFT, WIDE, SPLIT, BLOCK_V, MAX_BLOCKS)  # fmt: skip


@triton.jit
def _sum_chunks(q_ptr, p_ptr, sums_ptr, row, part, chunks, rejected, drop, vocab,
                num_blocks, HAS_DRAFT: tl.constexpr, WIDE: tl.constexpr, BLOCK_V: tl.constexpr,
                MAX_BLOCKS: tl.constexpr, PER_PROGRAM: tl.constexpr,
                STAGES: tl.constexpr):  # fmt: skip
    """Program ``part``'s share of the final row, each block's float64 sum stored into the
    request's ``sums``. ``STAGES > 1`` pipelines the chunks' loads: Triton copies the next
    ``STAGES - 1`` chunks into shared memory (``cp.async``) while one is summed."""
    for c in tl.range(chunks, num_stages=STAGES):
        # One load a chunk, so that its blocks' loads are in flight together.
        chunk = part * chunks + c
        mass, _ = _final_mass(q_ptr, p_ptr, rejected, drop,
                              chunk * (PER_PROGRAM * BLOCK_V), vocab, HAS_DRAFT, WIDE,
                              PER_PROGRAM * BLOCK_V)  # fmt: skip
        mass = tl.reshape(mass, [PER_PROGRAM, BLOCK_V])  # [PER_PROGRAM, BLOCK_V]
        mine = chunk * PER_PROGRAM + tl.arange(0, PER_PROGRAM)  # [PER_PROGRAM] its blocks
        tl.store(sums_ptr + row * MAX_BLOCKS + mine, tl.sum(mass.to(tl.float64), axis=1),
                 mask=mine < num_blocks)  # fmt: skip


@triton.jit
def _draw_last_arrival(q_ptr, p_ptr, predicts_ptr, sums_ptr, arrivals_ptr, row, parts,
                       rejected, drop, coin, slot, total_nodes, vocab, blocks, num_blocks,
                       HAS_DRAFT: tl.constexpr, WIDE: tl.constexpr, SPLIT: tl.constexpr,
                       BLOCK_V: tl.constexpr, MAX_BLOCKS: tl.constexpr):  # fmt: skip
    """The request's last program to arrive (``SPLIT``; else its only one) adds up every
    program's block sums (``blocks``: the indices of the ``num_blocks``) and draws the final
    token into ``slot``."""
    # Every thread's stores (the block sums, part 0's walk outputs) precede the barrier and,
    # split, the release below; the last arrival's acquire makes them all visible to it.
    tl.debug_barrier()
    last = True
    if SPLIT:
        last = tl.atomic_add(arrivals_ptr + row, 1, sem="acq_rel", scope="gpu") == parts - 1
    if last:
        sums = tl.load(sums_ptr + row * MAX_BLOCKS + blocks, mask=blocks < num_blocks,
                       other=0.0, cache_modifier=".cg")  # fmt: skip
        ends = tl.cumsum(sums, axis=0)  # [MAX_BLOCKS] the running sum at each block's end
        total = tl.sum(tl.where(blocks == num_blocks - 1, ends, 0.0), axis=0)
        token = _locate(q_ptr, p_ptr, rejected, drop, sums, ends, total, coin,
                        num_blocks, vocab, HAS_DRAFT, WIDE, BLOCK_V, MAX_BLOCKS)  # fmt: skip
        tl.store(predicts_ptr + slot, token, mask=slot < total_nodes)


@triton.jit
def _locate(q_ptr, p_ptr, rejected, drop, sums, ends, total, coin, num_blocks, vocab,
            HAS_DRAFT: tl.constexpr, WIDE: tl.constexpr, BLOCK_V: tl.constexpr,
            MAX_BLOCKS: tl.constexpr):  # fmt: skip
    """Inverse CDF from the block sums and the running sums at the blocks' ends: one block
    is scanned again, the only one whose entries are needed.

    The first block with mass whose end exceeds ``coin * total`` gives its first index whose
    running sum exceeds the target (its last positive one if rounding left none). With no
    such block, the last block with mass gives its last positive index: the row's. Else
    ``vocab - 1``. A block has mass exactly when its sum is positive: a float64 sum of
    positive entries is. Without mass a block cannot cross a target ``>= 0``, but it can a
    negative one (a coin below 0) or, by a scan's rounding, one its predecessor did not.
    """
    target = coin * total
    blocks = tl.arange(0, MAX_BLOCKS)  # [MAX_BLOCKS]
    inside = blocks < num_blocks
    heavy_blocks = inside & (sums > 0)  # [MAX_BLOCKS]
    crossing = tl.min(tl.where(heavy_blocks & (ends > target), blocks, MAX_BLOCKS), axis=0)
    heavy = tl.max(tl.where(heavy_blocks, blocks, -1), axis=0)
    crosses = crossing < num_blocks
    block = tl.where(crosses, crossing, tl.maximum(heavy, 0))
    before = tl.sum(tl.where(blocks == block - 1, ends, 0.0), axis=0)  # exact: one term
    mass, index = _final_mass(q_ptr, p_ptr, rejected, drop, block * BLOCK_V, vocab,
                              HAS_DRAFT, WIDE, BLOCK_V)  # fmt: skip
    running = before + tl.cumsum(mass.to(tl.float64), axis=0)  # [BLOCK_V]
    found = tl.min(tl.where((mass > 0) & (running > target), index, vocab), axis=0)
    final = tl.max(tl.where(mass > 0, index, -1), axis=0)
    token = tl.where(crosses & (found < vocab), found, final)
    return tl.where(token >= 0, token, vocab - 1)


@triton.jit
def _final_mass(q_ptr, p_ptr, rejected, drop, first, vocab, HAS_DRAFT: tl.constexpr,
                WIDE: tl.constexpr, BLOCK_V: tl.constexpr):  # fmt: skip
    """The positive part of ``relu(q - removed)`` on the block at ``first`` (float32, or
    float64 for ``WIDE``; sums take it in float64) and its indices.

    Target-only: the ``rejected`` tokens in ``drop`` are set to 0, by a block that holds one
    (each taken from the vector by a reduction within a warp). With a draft: ``q - p`` after
    a rejection.
    """
    index = first + tl.arange(0, BLOCK_V)  # [BLOCK_V]
    inside = index < vocab
    row = widen(tl.load(q_ptr + index, mask=inside, other=0.0), WIDE)  # [BLOCK_V]
    if HAS_DRAFT:
        sub = widen(tl.load(p_ptr + index, mask=inside, other=0.0), WIDE)  # [BLOCK_V]
        row = tl.where(rejected > 0, row - sub, row)  # [BLOCK_V]
    else:
        here = (drop >= first) & (drop < first + BLOCK_V)  # [BLOCK_N]
        if tl.max(here.to(tl.int32), axis=0) > 0:
            slots = tl.arange(0, drop.shape[0])  # [BLOCK_N]
            for i in range(rejected):
                token = tl.sum(tl.where(slots == i, drop, 0), axis=0)
                row = tl.where(index == token, 0.0, row)
    return tl.where(inside & (row > 0), row, 0.0), index
