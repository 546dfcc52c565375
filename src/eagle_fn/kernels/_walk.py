"""The sampling kernel's walk down the tree (eagle_fn.kernels._kernels_sampling calls it).

The request's per-node arrays are loaded once, as ``[BLOCK_N]`` vectors in flight together.
A level then has one load that depends on the walk: the gather of every node's token from the
current node's row (target, and draft with one). Its children's values are picked from those
vectors, so a level waits on one load, not on a chain of scalar loads per child.

Kernel parameters are untyped by Triton's convention and constexprs are upper case, hence the
file-wide lint exceptions.
"""

# ruff: noqa: ANN001, ANN202, N803
# mypy: disable-error-code="no-untyped-def, import-untyped, import-not-found"

from __future__ import annotations

import triton
import triton.language as tl

from ._floats import widen
from ._kernels_verify import end_outside


@triton.jit
def walk(tokens_ptr, index_ptr, next_ptr, sibling_ptr, q_ptr, p_ptr, coins_ptr, accept_ptr,
         num_ptr, predicts_ptr, row, base, n, vocab, q_stride, p_stride, num_steps, total_nodes,
         threshold_single, threshold_acc, part, HAS_DRAFT: tl.constexpr, WIDE: tl.constexpr,
         BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr):  # fmt: skip
    """The bounded walk from the root, its outputs stored by part 0: the last accepted
    node, its flat index, how many of its children were tried, all rejected (0 unless a
    level accepted nothing: after S acceptances, or at a leaf, nothing is removed), and
    their tokens (``[BLOCK_N]``, -1 past them). ``PREFETCH``: the levels pick their rows from
    tables loaded before the walk (``_tables``), which then waits on memory once, not a level."""
    write = part == 0
    nodes = _nodes(tokens_ptr, index_ptr, next_ptr, sibling_ptr, coins_ptr, base, n, WIDE,
                   BLOCK_N)  # fmt: skip
    tables = _tables(q_ptr, p_ptr, base, nodes, n, vocab, q_stride, p_stride, HAS_DRAFT, WIDE,
                     PREFETCH)  # fmt: skip
    last = tl.load(index_ptr + base)  # [] flat index of the last accepted node
    _clear(predicts_ptr, base, n, part, BLOCK_N)
    tl.store(accept_ptr + row * (num_steps + 1), last, mask=write)
    cur = row * 0  # the last accepted node
    count = row * 0
    alive = row == row
    rejected = row * 0
    dropped = tl.full([BLOCK_N], -1, tl.int64)  # [BLOCK_N]
    for level in range(num_steps):
        chosen, tried, tokens = _level(nodes, tables, q_ptr, p_ptr, base, cur, alive, n, vocab,
                                       q_stride, p_stride, threshold_single, threshold_acc,
                                       HAS_DRAFT, WIDE, BLOCK_N, PREFETCH)  # fmt: skip
        accepted = alive & (chosen >= 0)
        slot = own_slot(last, base, n, total_nodes)
        tl.store(predicts_ptr + slot, _pick(nodes[0], chosen),
                 mask=write & accepted & (slot < total_nodes))  # fmt: skip
        rejected = tl.where(alive & ~accepted, tried, rejected)  # []
        dropped = tl.where(alive & ~accepted, tokens, dropped)  # [BLOCK_N]
        cur = tl.where(accepted, chosen, cur)  # []
        last = tl.where(accepted, _pick(nodes[1], cur), last)  # []
        tl.store(accept_ptr + row * (num_steps + 1) + level + 1, tl.where(accepted, last, -1),
                 mask=write)  # []  # fmt: skip
        count += accepted.to(tl.int64)
        alive = accepted
    tl.store(num_ptr + row, count, mask=write)
    return cur, last, rejected, dropped


@triton.jit
def own_slot(index, base, n, total_nodes):
    """``index`` where it lies in the request's own row, else ``total_nodes`` (no store):
    a malformed ``retrieve_index`` never writes into another request's row."""
    return tl.where((index >= base) & (index < base + n), index, total_nodes)  # index's shape


@triton.jit
def _clear(predicts_ptr, base, n, part, BLOCK_N: tl.constexpr):
    """Part 0 zeroes the request's ``predicts``, before any thread stores a token there."""
    slots = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    # A [BLOCK_N] test of `part`: the interpreter rejects a scalar & vector mask.
    mine = (slots < n) & (slots * 0 + part == 0)  # [BLOCK_N]
    tl.store(predicts_ptr + base + slots, tl.full([BLOCK_N], 0, tl.int64), mask=mine)  # [BLOCK_N]
    tl.debug_barrier()  # the zeros land before the tokens, which other threads may store


@triton.jit
def _nodes(tokens_ptr, index_ptr, next_ptr, sibling_ptr, coins_ptr, base, n,
           WIDE: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    """The request's per-node arrays, ``[BLOCK_N]`` each: draft tokens, flat indices, first
    children and next siblings (-1 for a link outside ``[0, n)``, which ends a list), coins.
    Independent loads, in flight together, so that a level's only load is its gather."""
    slots = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    inside = slots < n
    tokens = tl.load(tokens_ptr + base + slots, mask=inside, other=0)  # [BLOCK_N]
    index = tl.load(index_ptr + base + slots, mask=inside, other=0)  # [BLOCK_N]
    first = tl.load(next_ptr + base + slots, mask=inside, other=-1)  # [BLOCK_N]
    sibling = tl.load(sibling_ptr + base + slots, mask=inside, other=-1)  # [BLOCK_N]
    coins = tl.load(coins_ptr + base + slots, mask=inside, other=0.0)  # [BLOCK_N]
    # int32 links (n fits): one shuffle a pick, not two.
    first = end_outside(first, n).to(tl.int32)  # [BLOCK_N]
    sibling = end_outside(sibling, n).to(tl.int32)  # [BLOCK_N]
    return tokens, index, first, sibling, widen(coins, WIDE)


@triton.jit
def _level(nodes, tables, q_ptr, p_ptr, base, cur, alive, n, vocab, q_stride, p_stride,
           threshold_single, threshold_acc, HAS_DRAFT: tl.constexpr, WIDE: tl.constexpr,
           BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr):  # fmt: skip
    """Node ``cur``'s children in link order (at most N; only the first with a draft): the
    accepted child (-1 if none), how many children were tried and their tokens (``[BLOCK_N]``,
    -1 past them), which the final row loses if none is accepted.
    """
    tokens, _, first, sibling, coins = nodes
    if PREFETCH:
        q = _row(tables[0], cur)  # [BLOCK_N]
        p = _row(tables[1], cur) if HAS_DRAFT else q  # [BLOCK_N]
    else:
        # The current node's rows, of the target and the draft: rows lie any stride apart.
        q, p = _gather(q_ptr + (base + cur) * q_stride, p_ptr + (base + cur) * p_stride,
                       tokens, tl.where(alive, n, 0), vocab, HAS_DRAFT, WIDE)  # fmt: skip
    dtype = tl.float64 if WIDE else tl.float32
    coin = _pick(coins, cur)
    child = tl.where(alive, _pick(first, cur), -1)  # []
    acc = (child * 0).to(dtype)
    chosen = child * 0 - 1
    tried = child * 0
    slots = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    tried_tokens = tl.full([BLOCK_N], -1, tl.int64)  # [BLOCK_N]
    single = tl.cast(threshold_single, tl.float32).to(dtype)
    divisor = tl.cast(threshold_acc, tl.float32).to(dtype)
    # Only the children tried, not N rounds of masked work: every program of a split row
    # walks, so the walk's instructions count as much as its latency. Their values are
    # picked from the vectors: no load waits in this loop.
    while (child >= 0) & (chosen < 0) & (tried < (1 if HAS_DRAFT else n)):
        target = _pick(q, child)
        ok, acc = _accepts(target, _pick(p, child) if HAS_DRAFT else target, coin, acc, single,
                           divisor, HAS_DRAFT, WIDE)  # fmt: skip
        chosen = tl.where(ok, child, chosen)  # []
        token = _pick(tokens, child)
        tried_tokens = tl.where(slots == tried, token, tried_tokens)  # [BLOCK_N]
        tried += 1
        child = tl.where(ok, -1, _pick(sibling, child))  # []
    return chosen, tried, tried_tokens


@triton.jit
def _gather(q_ptr, p_ptr, tokens, live, vocab, HAS_DRAFT: tl.constexpr,
            WIDE: tl.constexpr):  # fmt: skip
    """The target (and draft) probability of every node's token in the rows at the pointers
    (``[BLOCK_N]`` each, float32 or float64 for ``WIDE``), for the first ``live`` nodes: one
    load each, which depends on the row only. Tokens outside the vocabulary read 0."""
    slots = tl.arange(0, tokens.shape[0])  # [BLOCK_N]
    known = (slots < live) & (tokens >= 0) & (tokens < vocab)  # [BLOCK_N]
    q = widen(tl.load(q_ptr + tokens, mask=known, other=0.0), WIDE)  # [BLOCK_N]
    p = q
    if HAS_DRAFT:
        p = widen(tl.load(p_ptr + tokens, mask=known, other=0.0), WIDE)  # [BLOCK_N]
    return q, p


@triton.jit
def _tables(q_ptr, p_ptr, base, nodes, n, vocab, q_stride, p_stride, HAS_DRAFT: tl.constexpr,
            WIDE: tl.constexpr, PREFETCH: tl.constexpr):  # fmt: skip
    """``PREFETCH``: the target (and draft) probability of every node's token in every node's
    row (``[BLOCK_N, BLOCK_N]`` each, node ``j``'s row ``j``, float32 or float64 for
    ``WIDE``), independent loads; tokens outside the vocabulary read 0, as in ``_gather``.
    Otherwise unread placeholders."""
    q = nodes[4]
    p = q
    if PREFETCH:  # one return: Triton matches every return's type, even past a constexpr test
        tokens = nodes[0]
        slots = tl.arange(0, tokens.shape[0])  # [BLOCK_N]
        known = (slots < n) & (tokens >= 0) & (tokens < vocab)  # [BLOCK_N]
        rows = (base + slots)[:, None]  # [BLOCK_N, 1]
        mask = (slots < n)[:, None] & known[None, :]  # [BLOCK_N, BLOCK_N]
        q = widen(tl.load(q_ptr + rows * q_stride + tokens[None, :], mask=mask, other=0.0), WIDE)
        p = q
        if HAS_DRAFT:
            p = tl.load(p_ptr + rows * p_stride + tokens[None, :], mask=mask, other=0.0)
            p = widen(p, WIDE)  # [BLOCK_N, BLOCK_N]
    return q, p


@triton.jit
def _row(table, at):
    """``table[at]`` (``[BLOCK_N]``) for ``at`` in ``[0, BLOCK_N)``, bit for bit: a gather."""
    size: tl.constexpr = table.shape[1]
    index = tl.full([1, size], 0, tl.int32) + at.to(tl.int32)  # [1, BLOCK_N]
    return tl.reshape(tl.gather(table, index, 0), [size])  # [BLOCK_N]


@triton.jit
def _pick(values, at):
    """``values[at]`` for ``at`` in ``[0, BLOCK_N)`` (``values[0]`` for a negative ``at``),
    bit for bit: a gather, one shuffle per 32 bits while BLOCK_N fits a warp (through shared
    memory past 32), then a sum of one term. No load: no wait on memory."""
    index = tl.full([1], 0, tl.int32) + tl.maximum(at, 0).to(tl.int32)  # [1]
    return tl.sum(tl.gather(values, index, 0), axis=0)  # []


@triton.jit
def _accepts(q, p, coin, acc, single, divisor, HAS_DRAFT: tl.constexpr, WIDE: tl.constexpr):
    """Whether the child of target probability ``q`` (draft ``p``) is accepted, and ``acc``:
    the target probability of the children tried so far (target-only; unchanged with a draft).

    With a draft: ``q > 0`` and ``coin * p <= q`` (``q = 0`` is never accepted). Target-only:
    ``coin <= acc / threshold_acc`` (``acc`` now counting this child, NaN after a NaN ``q``, as
    SGLang adds it), or ``q >= threshold_single``.
    """
    if HAS_DRAFT:
        ok = (q > 0) & (coin * p <= q)
    else:
        acc = acc + q
        # float64 `/` rounds to nearest; float32's may not, div_rn does.
        limit = acc / divisor if WIDE else tl.math.div_rn(acc, divisor)
        ok = (coin <= limit) | (q >= single)
    return ok, acc
