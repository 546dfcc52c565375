"""Triton bodies of the verify build and greedy verification kernels (one program per request).

Kernel parameters are untyped by Triton's convention and constexprs are upper case, hence the
file-wide lint exceptions.
"""

# ruff: noqa: ANN001, ANN202, N803
# mypy: disable-error-code="no-untyped-def, import-untyped, import-not-found"

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def verify_build_kernel(
    parent_ptr,
    selected_ptr,
    draft_ptr,
    bonus_ptr,
    seq_lens_ptr,
    tokens_ptr,
    positions_ptr,
    mask_ptr,
    index_ptr,
    next_ptr,
    sibling_ptr,
    topk,
    num_steps,
    width,
    n,
    total,
    MODE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
):
    """One request per program: parents, the bounded walk, links and the mask, all in-row."""
    row = tl.program_id(0).to(tl.int64)
    node = tl.arange(0, BLOCK_N)  # [BLOCK_N] nodes, valid below N
    valid = node < n
    parent = _parent_nodes(  # [BLOCK_N] int32, -1 past N
        parent_ptr + row * width, selected_ptr + row * (n - 1), node, topk, width, n, BLOCK_N, ROWS
    )
    seq_len = tl.load(seq_lens_ptr + row)
    base = row * n
    # Up to 64 nodes, each walk's visited nodes fit one int64 word: every mask row is read off
    # its word, with no second walk per row.
    packed: tl.constexpr = BLOCK_N <= 64
    depth, bits = _walk_all(parent, node, n, num_steps, packed)  # [BLOCK_N] int64 each
    draft = tl.load(draft_ptr + row * (n - 1) + node - 1, mask=valid & (node > 0), other=0)
    tl.store(
        tokens_ptr + base + node, tl.where(node == 0, tl.load(bonus_ptr + row), draft), mask=valid
    )
    tl.store(positions_ptr + base + node, seq_len + depth, mask=valid)
    tl.store(index_ptr + base + node, base + node, mask=valid)
    if MODE == 1:
        tl.store(mask_ptr + base + node, bits.to(mask_ptr.dtype.element_ty), mask=valid)
    start = row * 0
    if MODE == 2:
        # Request r's FULL block follows N rows of seq_len + N cells per earlier request.
        start = n * (_sum_before(seq_lens_ptr, row, 256) + row * n) + seq_len
    if packed:
        # One tile holds every row (ROWS == BLOCK_N): row r is node r.
        _links(parent, parent, node, node, n, next_ptr + base, sibling_ptr + base)
        if MODE != 1:
            visible = ((bits[:, None] >> node[None, :].to(tl.int64)) & 1) != 0  # [N, N]
            _store_rows(mask_ptr, visible, node, node, row, n, start, seq_len, total, MODE)
    else:
        for first_row in range(0, n, ROWS):
            rows = first_row + tl.arange(0, ROWS)  # [ROWS]
            own = tl.gather(parent, rows, 0)  # [ROWS] parent of each row's node
            _links(parent, own, node, rows, n, next_ptr + base, sibling_ptr + base)
            if MODE != 1:
                visible = _walk_rows(parent, node, rows, n, num_steps)  # [ROWS, BLOCK_N]
                _store_rows(mask_ptr, visible, node, rows, row, n, start, seq_len, total, MODE)


@triton.jit
def _store_rows(mask_ptr, visible, node, rows, row, n, start, seq_len, total, MODE: tl.constexpr):
    """Mask rows ``rows`` of request ``row``, QLEN (MODE 0) or FULL (MODE 2)."""
    keep = (rows < n)[:, None] & (node < n)[None, :]
    if MODE == 0:
        cell = row * n * n + rows[:, None] * n + node[None, :]
    else:
        cell = start + rows[:, None] * (seq_len + n) + node[None, :]
        keep = keep & (cell >= 0) & (cell < total)
    tl.store(mask_ptr + cell, visible, mask=keep)


@triton.jit
def _parent_nodes(
    parent_row, selected_row, node, topk, width, n, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr
):
    """Each node's parent node: 0 under the root, -1 for none or not found (first match wins)."""
    selected_node = (node > 0) & (node < n)
    sel = tl.load(selected_row + node - 1, mask=selected_node, other=0)
    quotient = sel // topk
    slot = tl.where(sel - quotient * topk < 0, quotient - 1, quotient)  # floor, as torch
    in_table = selected_node & (slot > 0) & (slot < width)
    wanted = tl.load(parent_row + slot, mask=in_table, other=0)
    first = tl.full([BLOCK_N], 0, tl.int32) + n  # n: not found
    for start in range(0, n - 1, CHUNK):
        position = start + tl.arange(0, CHUNK)  # [CHUNK]
        candidate = tl.load(selected_row + position, mask=position < n - 1, other=0)
        hit = (wanted[:, None] == candidate[None, :]) & (position < n - 1)[None, :]
        first = tl.minimum(first, tl.min(tl.where(hit, position[None, :], n), axis=1))
    linked = tl.where(in_table & (first < n), first + 1, -1)  # [BLOCK_N]
    return tl.where(selected_node & (slot == 0), 0, linked)


@triton.jit
def _walk_all(parent, node, n, num_steps, BITS: tl.constexpr):
    """Depth (visited nodes) and bit-packed visibility of every node's bounded root walk."""
    cur = node
    active = (node > 0) & (node < n)
    depth = tl.zeros_like(node).to(tl.int64)  # [BLOCK_N]
    bits = tl.full(node.shape, 1, tl.int64)  # the root column
    for _ in range(num_steps):
        if BITS:
            bits = bits | tl.where(active, tl.full(node.shape, 1, tl.int64) << cur.to(tl.int64), 0)
        depth += active.to(tl.int64)
        up = tl.gather(parent, cur, 0)  # [BLOCK_N]
        active = active & (up > 0)
        cur = tl.where(active, up, cur)  # [BLOCK_N]
    return depth, bits


@triton.jit
def _walk_rows(parent, node, rows, n, num_steps):
    """The visibility rows ``rows`` of the mask: ``[ROWS, BLOCK_N]`` bool."""
    cur = rows
    active = (rows > 0) & (rows < n)
    visible = (node[None, :] == 0) & (rows >= 0)[:, None]
    for _ in range(num_steps):
        visible = visible | (active[:, None] & (cur[:, None] == node[None, :]))
        up = tl.gather(parent, cur, 0)  # [BLOCK_N]
        active = active & (up > 0)
        cur = tl.where(active, up, cur)  # [BLOCK_N]
    return visible


@triton.jit
def _links(parent, own, node, rows, n, next_row, sibling_row):
    """First child and next sibling of the nodes ``rows`` (parents ``own``), children in
    ascending order."""
    child = parent[None, :] == rows[:, None]
    sibling = (
        (parent[None, :] == own[:, None]) & (own >= 0)[:, None] & (node[None, :] > rows[:, None])
    )
    first_child = tl.min(tl.where(child, node[None, :], n), axis=1)
    next_sibling = tl.min(tl.where(sibling, node[None, :], n), axis=1)
    keep = rows < n
    tl.store(next_row + rows, tl.where(first_child < n, first_child, -1).to(tl.int64), mask=keep)
    tl.store(
        sibling_row + rows, tl.where(next_sibling < n, next_sibling, -1).to(tl.int64), mask=keep
    )


@triton.jit
def _sum_before(values_ptr, row, CHUNK: tl.constexpr):
    """``sum(values[:row])``: where a request's FULL block starts."""
    total = row * 0
    for start in range(0, row, CHUNK):
        at = start + tl.arange(0, CHUNK)
        total += tl.sum(tl.load(values_ptr + at, mask=at < row, other=0))
    return total


@triton.jit
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
    accept = _walk(  # [BLOCK_S]
        tokens_ptr, index_ptr, next_ptr, sibling_ptr, target_ptr,
        row, n, num_steps, bs * n, node, lane,
    )  # fmt: skip
    tl.store(accept_ptr + row * width + lane, accept, mask=lane < width)
    drafted = (accept >= 0) & (lane > 0) & (lane < width)
    tl.store(count_ptr + row, tl.sum(drafted.to(tl.int64)))
    owned = row * n + node  # the flat nodes whose predicts this program writes
    # A request commits only within its own row, as the torch path does.
    committed = _accepted(accept, owned, lane, width)  # [BLOCK_N] bool
    valid = node < n
    target = tl.load(target_ptr + owned, mask=valid, other=0)
    tl.store(predicts_ptr + owned, tl.where(committed, target, 0), mask=valid)


@triton.jit
def _walk(
    tokens_ptr, index_ptr, next_ptr, sibling_ptr, target_ptr, row, n, num_steps, flat, node, lane
):
    """Request ``row``'s accepted flat nodes, root first, -1 padded: ``[BLOCK_S]``.

    Each level scans the current node's children in link order for at most N nodes: the
    first match within N hops is the first match of the list (a list that repeats a node
    before matching never matches), as the torch path's pointer doubling finds it.
    """
    valid = node < n
    base = row * n
    tokens = tl.load(tokens_ptr + base + node, mask=valid, other=0)
    index = tl.load(index_ptr + base + node, mask=valid, other=0)
    first = _clamp_link(tl.load(next_ptr + base + node, mask=valid, other=-1), n)
    sibling = _clamp_link(tl.load(sibling_ptr + base + node, mask=valid, other=-1), n)
    mine = tl.load(target_ptr + base + node, mask=valid, other=0)  # the usual target row
    last = _pick(index, node, 0)
    accept = tl.where(lane == 0, last, -1)
    cur = last * 0
    alive = last == last
    for step in range(num_steps):
        at = tl.minimum(tl.maximum(last, 0), flat - 1)
        local = (at >= base) & (at < base + n)
        far = tl.load(target_ptr + at, mask=(local == 0) & alive, other=0)
        want = tl.where(local, _pick(mine, node, at - base), far)
        child = _pick(first, node, cur)
        found = child * 0 - 1
        hops = 0
        while alive & (child >= 0) & (found < 0) & (hops < n):
            match = _pick(tokens, node, child) == want
            found = tl.where(match, child, -1)
            child = tl.where(match, child, _pick(sibling, node, child))
            hops += 1
        alive = alive & (found >= 0)
        cur = tl.where(alive, found, cur)
        picked = _pick(index, node, cur)
        last = tl.where(alive, picked, last)
        accept = tl.where(lane == step + 1, tl.where(alive, picked, -1), accept)
    return accept


@triton.jit
def _clamp_link(link, n):
    return tl.minimum(tl.maximum(link, -1), n - 1)


@triton.jit
def _pick(values, node, at):
    """``values[at]`` for a scalar ``at`` (a register lookup, no memory access)."""
    return tl.sum(tl.where(node == at, values, 0))


@triton.jit
def _accepted(accept, owned, lane, width):
    """Which of the flat nodes ``owned`` appear in ``accept[:width]``."""
    hit = (owned[:, None] == accept[None, :]) & (lane < width)[None, :]
    return tl.sum(hit.to(tl.int32), axis=1) > 0
