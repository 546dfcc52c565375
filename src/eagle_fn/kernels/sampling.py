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

Kernel parameters are untyped by Triton's convention and constexprs are upper case, hence the
file-wide lint exceptions.
"""

# ruff: noqa: ANN001, ANN202, N803
# mypy: disable-error-code="no-untyped-def"

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..config import DraftConfig
from ..sampling import THRESHOLD_ACC_FLOOR, check_sampling_inputs, compute_dtype
from ..verify import GreedyVerdict
from ..verify_tree import VerifyTree

triton: Any
tl: Any
try:
    import triton  # type: ignore[import-untyped,no-redef]
    import triton.language as tl  # type: ignore[import-untyped,no-redef]
except ImportError:  # the torch function needs no Triton
    triton = tl = None

HAVE_TRITON = triton is not None
BLOCK_V = 1024  # vocabulary entries per step of the final row's two passes


def verify_sampling(
    cfg: DraftConfig,
    verify_tree: VerifyTree,
    target_probs: Tensor,
    uniforms: Tensor,
    final_uniforms: Tensor,
    *,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    draft_probs: Tensor | None = None,
) -> GreedyVerdict:
    """:func:`eagle_fn.verify_sampling` in one fused kernel launch.

    Same arguments, checks and errors; outputs as the module docstring states (equal bit for
    bit but for float ties of the final draw). Runs on CUDA devices, or on CPU tensors under
    ``TRITON_INTERPRET=1``.

    Args:
        cfg: the draft configuration.
        verify_tree: from :func:`~eagle_fn.build_verify_tree`.
        target_probs: row ``j`` is the target's distribution after node ``j``.
        uniforms: ``uniforms[:, j]`` is the coin used among node ``j``'s children.
        final_uniforms: the coin of the final token.
        threshold_single: accept a child whose probability is at least this.
        threshold_acc: accept when ``coin <= acc / threshold_acc``.
        draft_probs: chains only: row ``j`` is the draft's distribution that drew node ``j+1``.

    Shapes: ``target_probs, draft_probs [bs, N, V]`` or ``[bs * N, V]``, ``uniforms [bs, N]``,
    ``final_uniforms [bs]`` -> ``accept_index [bs, num_steps + 1]``, ``num_accepted [bs]``,
    ``predicts [bs * N]``.
    """
    where = "verify_sampling"
    q, p = check_sampling_inputs(where, cfg, verify_tree, target_probs, uniforms,
                                 final_uniforms, threshold_single, threshold_acc,
                                 draft_probs)  # fmt: skip
    if not HAVE_TRITON:
        raise RuntimeError(f"{where}: the Triton backend needs the triton package")
    device = verify_tree.retrieve_index.device
    if device.type != "cuda" and not _interpreted():
        raise ValueError(
            f"{where}: the Triton kernel runs on CUDA tensors (CPU tensors need "
            f"TRITON_INTERPRET=1), got tensors on {device}"
        )
    bs, n = verify_tree.retrieve_index.shape
    vocab = q.shape[-1]
    rows = q.reshape(bs * n, vocab)  # [bs * N, V]
    draft = rows if p is None else p.reshape(bs * n, vocab)  # [bs * N, V] unread without p
    accept_index, num_accepted, predicts = VERIFY_SAMPLING(
        verify_tree.draft_tokens, verify_tree.retrieve_index, verify_tree.retrieve_next_token,
        verify_tree.retrieve_next_sibling, rows, draft, uniforms, final_uniforms,
        cfg.num_steps, float(threshold_single), max(float(threshold_acc), THRESHOLD_ACC_FLOOR),
        p is not None,
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
    sizes = [
        n,
        vocab,
        num_steps,
        bs * n,
        _next_power_of_2(n),
        min(BLOCK_V, _next_power_of_2(vocab)),
    ]
    thresholds = [threshold_single, threshold_acc]
    if _interpreted() and not all(type(t) is Tensor for t in (*inputs, *outputs)):
        # The interpreter reads real memory: while tracing (fake tensors), record an opaque
        # launch that replays on real ones.
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
    torch.library.wrap_triton(_verify_sampling_kernel)[(outputs[1].shape[0],)](
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
    return isinstance(_verify_sampling_kernel, InterpretedFunction)


def _next_power_of_2(value: int) -> int:
    return 1 << max(value - 1, 0).bit_length()


def _jit(fn: Any) -> Any:
    return triton.jit(fn) if HAVE_TRITON else fn


@_jit
def _verify_sampling_kernel(
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
    slots = tl.arange(0, BLOCK_N)
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


@_jit
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


@_jit
def _final_draw(
    q_ptr,
    p_ptr,
    tokens_ptr,
    sibling_ptr,
    base,
    start,
    head,
    rejected,
    coin,
    vocab,
    HAS_DRAFT: tl.constexpr,
    WIDE: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    """Inverse CDF of the final row: its total, then the first running sum above
    ``coin * total``; else the last positive index, else ``vocab - 1``."""
    total = (start * 0).to(tl.float64)
    for first in range(0, vocab, BLOCK_V):
        index = first + tl.arange(0, BLOCK_V)
        mass = _final_mass(q_ptr, p_ptr, tokens_ptr, sibling_ptr, base, start, head, rejected,
                           index, vocab, HAS_DRAFT, WIDE)  # fmt: skip
        total += tl.sum(mass, axis=0)
    target = coin * total
    carry = (start * 0).to(tl.float64)
    found = start * 0 + vocab
    last_positive = found * 0 - 1
    for first in range(0, vocab, BLOCK_V):
        index = first + tl.arange(0, BLOCK_V)
        mass = _final_mass(q_ptr, p_ptr, tokens_ptr, sibling_ptr, base, start, head, rejected,
                           index, vocab, HAS_DRAFT, WIDE)  # fmt: skip
        running = carry + tl.cumsum(mass, axis=0)
        hit = (mass > 0) & (running > target)
        found = tl.minimum(found, tl.min(tl.where(hit, index, vocab), axis=0))
        last_positive = tl.maximum(last_positive, tl.max(tl.where(mass > 0, index, -1), axis=0))
        carry += tl.sum(mass, axis=0)
    fallback = tl.where(last_positive >= 0, last_positive, vocab - 1)
    return tl.where(found < vocab, found, fallback)


@_jit
def _final_mass(
    q_ptr,
    p_ptr,
    tokens_ptr,
    sibling_ptr,
    base,
    start,
    head,
    rejected,
    index,
    vocab,
    HAS_DRAFT: tl.constexpr,
    WIDE: tl.constexpr,
):
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
        row = tl.where(rejected > 0, row - sub, row)
    else:
        child = head
        for _ in range(rejected):
            row = tl.where(index == tl.load(tokens_ptr + base + child), 0.0, row)
            child = tl.load(sibling_ptr + base + child)
    return tl.where(inside & (row > 0), row.to(tl.float64), 0.0)


VERIFY_SAMPLING: Any = None
if HAVE_TRITON:
    torch.library.triton_op("eagle_fn::verify_sampling", _verify_sampling, mutates_args=())
    VERIFY_SAMPLING = torch.ops.eagle_fn.verify_sampling.default
