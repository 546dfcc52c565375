"""Triton body of the greedy verification kernel (one program per request).

Kernel parameters are untyped by Triton's convention and constexprs are upper case, hence the
file-wide lint exceptions.
"""

# ruff: noqa: ANN001, ANN202, N803
# mypy: disable-error-code="no-untyped-def, import-untyped, import-not-found"

from __future__ import annotations

import triton
import triton.language as tl


# The batch size only bounds indices: unspecialized, one compile serves every batch size.
@triton.jit(do_not_specialize=["bs"])
def verify_greedy_kernel(
    tokens_ptr,
    index_ptr,
    next_ptr,
    sibling_ptr,
    target_ptr,
    accept_ptr,
    count_ptr,
    predicts_ptr,
    n,
    num_steps,
    bs,
    BLOCK_N: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """One request per program: its walk, its accept row and its row of ``predicts``."""
    row = tl.program_id(0).to(tl.int64)
    node = tl.arange(0, BLOCK_N)  # [BLOCK_N] nodes, valid below N
    lane = tl.arange(0, BLOCK_S)  # [BLOCK_S] accept slots, valid below S + 1
    width = num_steps + 1
    flat = bs.to(tl.int64) * n  # the target's rows: an int32 product wraps from 2**31 on
    accept, committed = _walk(  # [BLOCK_S], [BLOCK_N] bool
        tokens_ptr, index_ptr, next_ptr, sibling_ptr, target_ptr,
        row, n, num_steps, flat, node, lane,
    )  # fmt: skip
    tl.store(accept_ptr + row * width + lane, accept, mask=lane < width)
    drafted = (accept >= 0) & (lane > 0) & (lane < width)
    tl.store(count_ptr + row, tl.sum(drafted.to(tl.int64)))
    owned = row * n + node  # the flat nodes whose predicts this program writes
    valid = node < n
    target = tl.load(target_ptr + owned, mask=valid, other=0)  # [BLOCK_N]
    tl.store(predicts_ptr + owned, tl.where(committed, target, 0), mask=valid)  # [BLOCK_N]


@triton.jit
def _walk(
    tokens_ptr, index_ptr, next_ptr, sibling_ptr, target_ptr, row, n, num_steps, flat, node, lane
):
    """Request ``row``'s accepted flat nodes, root first, -1 padded (``[BLOCK_S]``), and which
    of its own nodes are among them (``[BLOCK_N]`` bool: a request commits only in its row).

    Each level scans the current node's children in link order for at most N nodes: the
    first match within N hops is the first match of the list (a list that repeats a node
    before matching never matches), as the torch path's pointer doubling finds it.
    """
    valid = node < n
    base = row * n
    tokens = tl.load(tokens_ptr + base + node, mask=valid, other=0)  # [BLOCK_N]
    index = tl.load(index_ptr + base + node, mask=valid, other=0)  # [BLOCK_N]
    first = end_outside(tl.load(next_ptr + base + node, mask=valid, other=-1), n)  # [BLOCK_N]
    sibling = end_outside(tl.load(sibling_ptr + base + node, mask=valid, other=-1), n)  # [BLOCK_N]
    mine = tl.load(target_ptr + base + node, mask=valid, other=0)  # [BLOCK_N] the usual row
    last = _pick(index, node, 0)
    accept = tl.where(lane == 0, last, -1)  # [BLOCK_S]
    committed = base + node == last  # [BLOCK_N]
    cur, alive = last * 0, last == last
    for step in range(num_steps):
        at = tl.minimum(tl.maximum(last, 0), flat - 1)
        local = (at >= base) & (at < base + n)
        far = tl.load(target_ptr + at, mask=(local == 0) & alive, other=0)  # []
        want = tl.where(local, _pick(mine, node, at - base), far)  # [] the target at the last node
        child = _pick(first, node, cur)
        found, hops = child * 0 - 1, 0
        while alive & (child >= 0) & (found < 0) & (hops < n):
            match = _pick(tokens, node, child) == want
            found = tl.where(match, child, -1)  # []
            child = tl.where(match, child, _pick(sibling, node, child))  # []
            hops += 1
        alive = alive & (found >= 0)
        cur = tl.where(alive, found, cur)  # []
        picked = _pick(index, node, cur)
        last = tl.where(alive, picked, last)  # []
        accept = tl.where(lane == step + 1, tl.where(alive, picked, -1), accept)  # [BLOCK_S]
        committed = committed | (alive & (base + node == picked))  # [BLOCK_N]
    return accept, committed


@triton.jit
def end_outside(link, n):
    """-1 for a link outside ``0..n-1``: it ends its list, as in the torch path."""
    return tl.where((link >= 0) & (link < n), link, -1)  # link's shape


@triton.jit
def _pick(values, node, at):
    """``values[at]`` for a scalar ``at`` (a register lookup, no memory access)."""
    return tl.sum(tl.where(node == at, values, 0))  # []
