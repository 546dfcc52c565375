"""Triton body of the verify build kernel (one program per request).

Kernel parameters are untyped by Triton's convention and constexprs are upper case, hence the
file-wide lint exceptions.
"""

# ruff: noqa: ANN001, ANN202, N803
# mypy: disable-error-code="no-untyped-def, import-untyped, import-not-found"

from __future__ import annotations

import triton
import triton.language as tl


# The FULL mask's length changes with every call; specialized (equal to 1, divisible by 16),
# it would compile the kernel again for each kind of value. It only bounds stores.
@triton.jit(do_not_specialize=["total"])
def verify_build_kernel(
    parent_ptr, selected_ptr, draft_ptr, bonus_ptr, seq_lens_ptr, tokens_ptr, positions_ptr,
    mask_ptr, index_ptr, next_ptr, sibling_ptr, topk, num_steps, width, n, total,
    MODE: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, WORDS: tl.constexpr,
):  # fmt: skip
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
    _store_nodes(draft_ptr, bonus_ptr, tokens_ptr, positions_ptr, index_ptr, mask_ptr, row, base,
                 node, valid, n, seq_len, depth, bits, MODE)  # fmt: skip
    start = row * 0
    if MODE == 2:
        # Request r's FULL block follows N rows of seq_len + N cells per earlier request.
        start = n * (_sum_before(seq_lens_ptr, row, 256) + row * n) + seq_len
    if packed:
        _packed_links(parent, node, next_ptr + base, sibling_ptr + base, n, BLOCK_N)
        if WORDS:
            _store_words(mask_ptr, bits, node, row, n, BLOCK_N)
        elif MODE != 1:
            visible = ((bits[:, None] >> node[None, :].to(tl.int64)) & 1) != 0  # [N, N]
            _store_rows(mask_ptr, visible, node, node, row, n, start, seq_len, total, MODE)
    else:
        _tiled_links_and_rows(parent, node, next_ptr, sibling_ptr, mask_ptr, row, base, n, start,
                              seq_len, total, num_steps, MODE, ROWS)  # fmt: skip


@triton.jit
def _store_nodes(draft_ptr, bonus_ptr, tokens_ptr, positions_ptr, index_ptr, mask_ptr, row, base,
                 node, valid, n, seq_len, depth, bits, MODE: tl.constexpr):  # fmt: skip
    """Each node's token (the bonus token at the root), position, flat index and, BITPACKED
    (MODE 1), its mask row: the bits of its walk."""
    draft = tl.load(draft_ptr + row * (n - 1) + node - 1, mask=valid & (node > 0), other=0)
    tl.store(
        tokens_ptr + base + node, tl.where(node == 0, tl.load(bonus_ptr + row), draft), mask=valid
    )
    tl.store(positions_ptr + base + node, seq_len + depth, mask=valid)
    tl.store(index_ptr + base + node, base + node, mask=valid)
    if MODE == 1:
        tl.store(mask_ptr + base + node, bits.to(mask_ptr.dtype.element_ty), mask=valid)


@triton.jit
def _tiled_links_and_rows(parent, node, next_ptr, sibling_ptr, mask_ptr, row, base, n, start,
                          seq_len, total, num_steps, MODE: tl.constexpr,
                          ROWS: tl.constexpr):  # fmt: skip
    """Past 64 nodes, ``ROWS`` nodes at a time: their links and, unless BITPACKED, their mask
    rows, each row from a walk of its own."""
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
def _store_words(mask_ptr, bits, node, row, n, BLOCK_N: tl.constexpr):
    """QLEN rows written as int32 words of four 0/1 cells (N a multiple of 4): byte k of word
    q is cell 4q + k. A nibble times 0x204081 moves its bit k to bit 8k, without carries."""
    quad = tl.arange(0, BLOCK_N // 4)  # [BLOCK_N // 4]
    nibble = ((bits[:, None] >> (4 * quad[None, :]).to(tl.int64)) & 0xF).to(tl.int32)
    word = (nibble * 0x204081) & 0x01010101  # [BLOCK_N, BLOCK_N // 4]
    per_row = n // 4
    at = row * n * per_row + node[:, None] * per_row + quad[None, :]
    keep = (node < n)[:, None] & (quad < per_row)[None, :]
    tl.store(mask_ptr.to(tl.pointer_type(tl.int32)) + at, word, mask=keep)


@triton.jit
def _parent_nodes(
    parent_row, selected_row, node, topk, width, n, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr
):
    """Each node's parent node: 0 under the root, -1 for none or not found (first match wins)."""
    selected_node = (node > 0) & (node < n)
    sel = tl.load(selected_row + node - 1, mask=selected_node, other=0)  # [BLOCK_N] by node
    quotient = sel // topk
    slot = tl.where(sel - quotient * topk < 0, quotient - 1, quotient)  # floor, as torch
    in_table = selected_node & (slot > 0) & (slot < width)
    wanted = tl.load(parent_row + slot, mask=in_table, other=0)
    # organize_tree selects in ascending order: then a bisection finds the first match.
    pair = selected_node & (node < n - 1)
    later = tl.load(selected_row + node, mask=pair, other=0)
    if tl.min(((sel <= later) | (pair == 0)).to(tl.int32), 0) == 1:
        found = _bisect(sel, wanted, n, BLOCK_N)
    else:
        found = _scan(selected_row, wanted, n, BLOCK_N, CHUNK)
    linked = tl.where(in_table & (found < n), found, -1)  # [BLOCK_N]
    return tl.where(selected_node & (slot == 0), 0, linked)


@triton.jit
def _bisect(sel, wanted, n, BLOCK_N: tl.constexpr):
    """The first node ``m`` in ``[1, N)`` with ``sel[m] == wanted``, N for none; ``sel[1:N]``
    ascending. Binary lifting: ``below`` grows to the last node whose value is below."""
    below = tl.zeros_like(wanted).to(tl.int32)  # [BLOCK_N] nodes 1..below hold smaller values
    # Shifts past log2(BLOCK_N) fold away at compile time: 31 covers any int32 block.
    for shift in tl.static_range(1, 32):
        if (BLOCK_N >> shift) > 0:
            probe = below + (BLOCK_N >> shift)
            value = tl.gather(sel, tl.minimum(probe, n - 1), 0)  # [BLOCK_N]
            below = tl.where((probe < n) & (value < wanted), probe, below)
    at = below + 1
    hit = (at < n) & (tl.gather(sel, tl.minimum(at, n - 1), 0) == wanted)
    return tl.where(hit, at, n)


@triton.jit
def _scan(selected_row, wanted, n, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr):
    """The first node whose candidate equals ``wanted``, N for none: ``[BLOCK_N, CHUNK]``
    compares per tile of positions."""
    first = tl.full([BLOCK_N], 0, tl.int32) + n  # n: not found
    for start in range(0, n - 1, CHUNK):
        position = start + tl.arange(0, CHUNK)  # [CHUNK]
        candidate = tl.load(selected_row + position, mask=position < n - 1, other=0)
        hit = (wanted[:, None] == candidate[None, :]) & (position < n - 1)[None, :]
        first = tl.minimum(first, tl.min(tl.where(hit, position[None, :] + 1, n), axis=1))
    return first


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
def _packed_links(parent, node, next_row, sibling_row, n, BLOCK_N: tl.constexpr):
    """``_links`` for N <= 64 from one ``[N, N]`` tile: each node's children as one int64
    word, whose lowest bit is the first child and whose lowest bit past a child is the next
    sibling of that child."""
    children = _children(parent, node, BLOCK_N)  # [BLOCK_N] int64
    siblings = tl.gather(children, tl.maximum(parent, 0), 0)  # [BLOCK_N] int64
    later = siblings & (tl.full(node.shape, -2, tl.int64) << node.to(tl.int64))
    keep = node < n
    tl.store(next_row + node, _lowest_bit(children), mask=keep)
    tl.store(sibling_row + node, tl.where(parent >= 0, _lowest_bit(later), -1), mask=keep)


@triton.jit
def _children(parent, node, BLOCK_N: tl.constexpr):
    """Bit ``c`` of word ``p`` set when ``parent[c] == p``: ``[BLOCK_N]`` int64, built from
    int32 halves (a 64-bit OR per cell would take twice the instructions)."""
    half: tl.constexpr = min(BLOCK_N, 32)
    halves = tl.reshape(parent, (BLOCK_N // half, half))  # [K, half]: child c at (c // 32, c % 32)
    lane = tl.arange(0, half)  # [half]
    child = halves[None, :, :] == node[:, None, None]  # [BLOCK_N (parent), K, half]
    bit = tl.full(lane.shape, 1, tl.int32) << lane  # [half]
    words = tl.reduce(tl.where(child, bit[None, None, :], 0), 2, _either)  # [BLOCK_N, K]
    shift = 32 * tl.arange(0, BLOCK_N // half).to(tl.int64)  # [K]
    return tl.sum((words.to(tl.int64) & 0xFFFFFFFF) << shift[None, :], 1)  # disjoint bits


@triton.jit
def _either(a, b):
    return a | b


@triton.jit
def _lowest_bit(word):
    """Index of the lowest set bit of an int64 ``word``, -1 for none: the exponent of that bit
    alone, converted exactly to float32 (bit 63 converts to -2^63, the sign masked off)."""
    alone = word & -word
    exponent = (alone.to(tl.float32).to(tl.int32, bitcast=True) >> 23) & 0xFF
    return tl.where(word != 0, exponent - 127, -1).to(tl.int64)


@triton.jit
def _sum_before(values_ptr, row, CHUNK: tl.constexpr):
    """``sum(values[:row])``: where a request's FULL block starts."""
    total = row * 0
    for start in range(0, row, CHUNK):
        at = start + tl.arange(0, CHUNK)
        total += tl.sum(tl.load(values_ptr + at, mask=at < row, other=0))
    return total
