"""The Triton kernel of fused sampling verification (eagle_fn.kernels.sampling launches it).

Kernel parameters are untyped by Triton's convention and constexprs are upper case, hence the
file-wide lint exceptions.
"""

# ruff: noqa: ANN001, ANN202, N803
# mypy: disable-error-code="no-untyped-def, import-untyped, import-not-found"

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def verify_sampling_kernel(
    tokens_ptr,
    index_ptr,
    next_ptr,
    sibling_ptr,
    q_ptr,
    p_ptr,
    coins_ptr,
    final_ptr,
    accept_ptr,
    num_ptr,
    predicts_ptr,
    n,
    vocab,
    num_steps,
    total_nodes,
    threshold_single,
    threshold_acc,
    HAS_DRAFT: tl.constexpr,
    WIDE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    """One request per program: the bounded walk, then the final draw at the last node."""
    row = tl.program_id(0).to(tl.int64)
    base = row * n
    slots = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    tl.store(predicts_ptr + base + slots, tl.full([BLOCK_N], 0, tl.int64), mask=slots < n)
    last = tl.load(index_ptr + base)  # flat index of the last accepted node
    tl.store(accept_ptr + row * (num_steps + 1), last)
    cur = row * 0  # the last accepted node
    count = row * 0
    alive = row == row
    rejected = row * 0  # children tried (all rejected) at the level that accepted nothing
    for level in range(num_steps):
        chosen, tried = _level(
            tokens_ptr, next_ptr, sibling_ptr, q_ptr, p_ptr, coins_ptr, base, cur, alive, n,
            vocab, threshold_single, threshold_acc, HAS_DRAFT, WIDE,
        )  # fmt: skip
        accepted = alive & (chosen >= 0)
        token = tl.load(tokens_ptr + base + chosen, mask=accepted, other=0)
        slot = tl.minimum(tl.maximum(last, 0), total_nodes)
        tl.store(predicts_ptr + slot, token, mask=accepted & (slot < total_nodes))
        rejected = tl.where(alive & ~accepted, tried, rejected)
        cur = tl.where(accepted, chosen, cur)
        last = tl.where(accepted, tl.load(index_ptr + base + cur), last)
        tl.store(accept_ptr + row * (num_steps + 1) + level + 1, tl.where(accepted, last, -1))
        count += accepted.to(tl.int64)
        alive = accepted
    tl.store(num_ptr + row, count)
    # `rejected` is only set by a level that accepted nothing, at the final node: after S
    # acceptances (or at a leaf) nothing is removed.
    coin = tl.load(final_ptr + row).to(tl.float64 if WIDE else tl.float32).to(tl.float64)
    head = tl.load(next_ptr + base + cur)
    token = _final_draw(q_ptr, p_ptr, tokens_ptr, sibling_ptr, base, (base + cur) * vocab, head,
                        rejected, coin, vocab, HAS_DRAFT, WIDE, BLOCK_V)  # fmt: skip
    slot = tl.minimum(tl.maximum(last, 0), total_nodes)
    tl.store(predicts_ptr + slot, token, mask=slot < total_nodes)


@triton.jit
def _level(
    tokens_ptr,
    next_ptr,
    sibling_ptr,
    q_ptr,
    p_ptr,
    coins_ptr,
    base,
    cur,
    alive,
    n,
    vocab,
    threshold_single,
    threshold_acc,
    HAS_DRAFT: tl.constexpr,
    WIDE: tl.constexpr,
):
    """Node ``cur``'s children in link order (at most N; only the first with a draft): the
    accepted child (-1 if none) and how many children were tried.

    Tokens outside the vocabulary are tried with probability 0.
    """
    dtype = tl.float64 if WIDE else tl.float32
    coin = tl.load(coins_ptr + base + cur, mask=alive, other=0.0).to(dtype)
    child = tl.load(next_ptr + base + cur, mask=alive, other=-1)
    child = tl.where((child >= 0) & (child < n), child, -1)
    acc = (child * 0).to(dtype)
    chosen = child * 0 - 1
    tried = child * 0
    single = tl.cast(threshold_single, tl.float32).to(dtype)
    divisor = tl.cast(threshold_acc, tl.float32).to(dtype)
    for _ in range(1 if HAS_DRAFT else n):
        live = alive & (child >= 0) & (chosen < 0)
        token = tl.load(tokens_ptr + base + child, mask=live, other=0)
        known = live & (token >= 0) & (token < vocab)
        offset = (base + cur) * vocab + token
        q = tl.load(q_ptr + offset, mask=known, other=0.0).to(dtype)
        if HAS_DRAFT:
            p = tl.load(p_ptr + offset, mask=known, other=0.0).to(dtype)
            ok = live & (coin * p <= q)
        else:
            acc = acc + q
            # float64 `/` rounds to nearest; float32's may not, div_rn does.
            limit = acc / divisor if WIDE else tl.math.div_rn(acc, divisor)
            ok = live & ((coin <= limit) | (q >= single))
        chosen = tl.where(ok, child, chosen)
        tried += live.to(tl.int64)
        sibling = tl.load(sibling_ptr + base + child, mask=live & ~ok, other=-1)
        child = tl.where(live & ~ok & (sibling >= 0) & (sibling < n), sibling, -1)
    return chosen, tried


@triton.jit
def _final_draw(q_ptr, p_ptr, tokens_ptr, sibling_ptr, base, start, head, rejected, coin, vocab,
                HAS_DRAFT: tl.constexpr, WIDE: tl.constexpr, BLOCK_V: tl.constexpr):  # fmt: skip
    """Inverse CDF of the final row: its total, then the first running sum above
    ``coin * total``; else the last positive index, else ``vocab - 1``."""
    total = (start * 0).to(tl.float64)
    for first in range(0, vocab, BLOCK_V):
        index = first + tl.arange(0, BLOCK_V)  # [BLOCK_V]
        mass = _final_mass(q_ptr, p_ptr, tokens_ptr, sibling_ptr, base, start, head, rejected,
                           index, vocab, HAS_DRAFT, WIDE)  # fmt: skip
        total += tl.sum(mass, axis=0)
    target = coin * total
    carry = (start * 0).to(tl.float64)
    found = start * 0 + vocab
    last_positive = found * 0 - 1
    for first in range(0, vocab, BLOCK_V):
        index = first + tl.arange(0, BLOCK_V)  # [BLOCK_V]
        mass = _final_mass(q_ptr, p_ptr, tokens_ptr, sibling_ptr, base, start, head, rejected,
                           index, vocab, HAS_DRAFT, WIDE)  # fmt: skip
        running = carry + tl.cumsum(mass, axis=0)  # [BLOCK_V]
        hit = (mass > 0) & (running > target)
        found = tl.minimum(found, tl.min(tl.where(hit, index, vocab), axis=0))
        last_positive = tl.maximum(last_positive, tl.max(tl.where(mass > 0, index, -1), axis=0))
        carry += tl.sum(mass, axis=0)
    fallback = tl.where(last_positive >= 0, last_positive, vocab - 1)
    return tl.where(found < vocab, found, fallback)


@triton.jit
def _final_mass(q_ptr, p_ptr, tokens_ptr, sibling_ptr, base, start, head, rejected, index, vocab,
                HAS_DRAFT: tl.constexpr, WIDE: tl.constexpr):  # fmt: skip
    """The positive part of ``relu(q - removed)`` at ``index``, as float64.

    Target-only: the first ``rejected`` children from ``head`` (the ones the walk tried, all
    valid links) have their tokens set to 0; walking them again costs cached scalar loads
    instead of a [BLOCK_V, N] comparison. With a draft: ``q - p`` after a rejection.
    """
    dtype = tl.float64 if WIDE else tl.float32
    inside = index < vocab
    row = tl.load(q_ptr + start + index, mask=inside, other=0.0).to(dtype)
    if HAS_DRAFT:
        sub = tl.load(p_ptr + start + index, mask=inside, other=0.0).to(dtype)
        row = tl.where(rejected > 0, row - sub, row)  # [BLOCK_V]
    else:
        child = head
        for _ in range(rejected):
            row = tl.where(index == tl.load(tokens_ptr + base + child), 0.0, row)
            child = tl.load(sibling_ptr + base + child)
    return tl.where(inside & (row > 0), row.to(tl.float64), 0.0)
