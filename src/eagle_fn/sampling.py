"""Sampling verification: accept drafts so that the emitted tokens follow the target's distribution.

Randomness is an input (coins drawn by :func:`draw_uniforms` or the engine), so verification is
deterministic, syncs nothing with the host and can be captured in a CUDA graph.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from . import _checks
from .config import DraftConfig
from .verify import GreedyVerdict
from .verify_tree import VerifyTree

THRESHOLD_ACC_FLOOR = 1e-9  # SGLang floors threshold_acc here before dividing by it
UNIFORM_BITS = 23  # coins are midpoints of 2**23 equal bins: exact in float32, never 0 or 1


class Uniforms(NamedTuple):
    """The coins of one sampling verification."""

    uniforms: Tensor  # [bs, N] uniforms[:, j] picks among node j's children
    final_uniforms: Tensor  # [bs] draws the final token


def draw_uniforms(
    bs: int,
    num_draft_tokens: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Uniforms:
    """Draws the coins for :func:`verify_sampling` from ``generator``, float32, in (0, 1).

    Each coin is the midpoint of one of ``2**23`` equal bins, so it is never exactly 0: a zero
    coin would accept a first child whose target probability is 0 (``0 <= 0``), which breaks
    the exact agreement of greedy rows with :func:`~eagle_fn.verify_greedy`. A coin is off a
    continuous uniform by at most ``2**-24`` (``torch.rand``'s float32 grid step is ``2**-24``
    too), so acceptance probabilities are exact to that.

    Args:
        bs: requests.
        num_draft_tokens: ``N``, nodes per request.
        generator: the random source; ``torch``'s default generator when omitted.
        device: where to draw; the generator's device when omitted.

    Shapes: -> ``uniforms [bs, N]``, ``final_uniforms [bs]``.

    Example:
        >>> coins = draw_uniforms(2, 3, generator=torch.Generator().manual_seed(0))
        >>> coins.uniforms.shape, coins.final_uniforms.shape
        (torch.Size([2, 3]), torch.Size([2]))
        >>> bool(((coins.uniforms > 0) & (coins.uniforms < 1)).all())
        True
    """
    where = "draw_uniforms"
    _checks.require_int(where, "bs", bs, 0)
    _checks.require_int(where, "num_draft_tokens", num_draft_tokens, 1)
    if device is None:
        device = generator.device if generator is not None else torch.device("cpu")
    bins = torch.randint(
        0, 2**UNIFORM_BITS, (bs, num_draft_tokens + 1), generator=generator, device=device
    )  # [bs, N + 1]
    coins = (2 * bins + 1).to(torch.float32) * 2.0 ** -(UNIFORM_BITS + 1)  # [bs, N + 1]
    return Uniforms(coins[:, :-1].contiguous(), coins[:, -1].contiguous())


def target_probs_from_logits(
    logits: Tensor,
    temperature: Tensor,
    *,
    top_k: Tensor | None = None,
    top_p: Tensor | None = None,
) -> Tensor:
    """The target's sampling distribution at every node, per-request parameters (SPEC §9).

    Every row of a request shares its ``temperature``, ``top_k`` and ``top_p``. NaN logits count
    as ``-inf``. A row with temperature ``<= 0`` is greedy: one-hot at the first largest logit
    (so greedy rows of a mixed batch verify exactly as :func:`~eagle_fn.verify_greedy`);
    ``top_k``/``top_p`` do not apply to it. Other rows: ``softmax(logits / temperature)``; then,
    when given, ``top_k`` keeps the probabilities at least the ``k``-th largest (ties at the
    boundary kept; ``k <= 0`` or ``k >= V`` keeps all), and ``top_p`` keeps, in descending order
    (ties by lower index), each token whose preceding mass (after top-k, renormalized) is below
    ``p`` (``p >= 1`` keeps all); the kept probabilities are renormalized. A row with no positive
    mass (every logit ``-inf``, NaN or ``+inf``) comes back all zero: :func:`verify_sampling`
    then rejects its children (for coins > 0) and emits token ``V - 1``, SGLang's fallback.
    Temperatures must be finite; checking would sync.

    Args:
        logits: the target's logits at every node.
        temperature: per request, float.
        top_k: per request, int64, optional.
        top_p: per request, float, optional.

    Shapes: ``logits [bs, N, V]`` or ``[bs * N, V]``, ``temperature, top_k, top_p [bs]`` ->
    ``logits``' shape; float32 (float64 for float64 logits).

    Example:
        >>> logits = torch.tensor([[0.0, 1.0, 0.0], [2.0, float("nan"), 2.0]])
        >>> target_probs_from_logits(logits, torch.tensor([1.0, 0.0])).tolist()[1]
        [1.0, 0.0, 0.0]
        >>> top_1 = torch.tensor([1, 1])
        >>> target_probs_from_logits(logits, torch.tensor([1.0, 0.0]), top_k=top_1).tolist()[0]
        [0.0, 1.0, 0.0]
    """
    rows = _check_logits(logits, temperature, top_k, top_p)
    bs, vocab = temperature.shape[0], logits.shape[-1]
    dtype = compute_dtype(logits.dtype)
    x = logits.reshape(bs, rows, vocab).to(dtype)  # [bs, N, V]
    x = torch.where(torch.isnan(x), -math.inf, x)  # [bs, N, V]
    temps = temperature.to(dtype).view(bs, 1, 1)  # [bs, 1, 1]
    greedy = temps <= 0  # [bs, 1, 1]
    probs = torch.softmax(x / torch.where(greedy, 1.0, temps), dim=-1)  # [bs, N, V]
    probs = torch.where(probs > 0, probs, 0.0)  # [bs, N, V] NaN rows (no finite logit): 0
    if top_k is not None or top_p is not None:
        probs = _renormalize(probs * _top_k_top_p_mask(probs, top_k, top_p))  # [bs, N, V]
    onehot = torch.zeros_like(probs).scatter_(-1, x.argmax(-1, keepdim=True), 1.0)  # [bs, N, V]
    return torch.where(greedy, onehot, probs).reshape(logits.shape)  # logits' shape


def _top_k_top_p_mask(probs: Tensor, top_k: Tensor | None, top_p: Tensor | None) -> Tensor:
    """Which probabilities top-k then top-p keep. ``[bs, N, V]`` bool."""
    bs, vocab = probs.shape[0], probs.shape[-1]
    ordered, order = probs.sort(dim=-1, descending=True, stable=True)  # [bs, N, V]
    keep = torch.ones_like(ordered, dtype=torch.bool)  # [bs, N, V] in sorted order
    if top_k is not None:
        k = top_k.view(bs, 1, 1)  # [bs, 1, 1]
        kth = ordered.gather(-1, (k - 1).clamp(0, vocab - 1).expand(-1, probs.shape[1], 1))
        keep = keep & ((k <= 0) | (k >= vocab) | (ordered >= kth))  # [bs, N, V]
    if top_p is not None:
        mass = _renormalize(ordered * keep)  # [bs, N, V]
        running = torch.cumsum(mass, dim=-1)  # [bs, N, V]
        before = torch.cat([torch.zeros_like(running[..., :1]), running[..., :-1]], -1)
        p = top_p.to(probs.dtype).view(bs, 1, 1)  # [bs, 1, 1]
        keep = keep & ((before < p) | (p >= 1))  # [bs, N, V]
    return torch.zeros_like(keep).scatter_(-1, order, keep)  # [bs, N, V] in vocabulary order


def _renormalize(probs: Tensor) -> Tensor:
    total = probs.sum(-1, keepdim=True)  # [..., 1]
    return torch.where(total > 0, probs / torch.where(total > 0, total, 1.0), 0.0)  # [..., V]


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
    """Accepts drafts so that the emitted tokens follow the target's distribution (SPEC §9).

    **Target-only** (``draft_probs=None``, any tree; SGLang's
    ``tree_speculative_sampling_target_only``): from the root, for at most ``num_steps``
    levels, try the current node's children in link order (``retrieve_next_token``, then
    ``retrieve_next_sibling``, at most ``N`` of them, so looping links terminate; links outside
    ``0..N-1`` end the list). Each child adds its target probability ``q(token)`` to an
    accumulator that is 0 when the node becomes current; the child is accepted when
    ``coin <= acc / max(threshold_acc, 1e-9)`` or ``q(token) >= threshold_single``, with
    ``coin = uniforms[:, node]``. When no child is accepted, the tokens of all the node's tried
    children are removed from its distribution (a token tried twice is removed once: its
    probability is set to 0, as SGLang does; the accumulator counted it twice). The final
    token is drawn by inverse CDF from the last accepted node's ``relu(q - removed)``: the
    first index whose running sum over positive entries exceeds ``final_coin * total``;
    when none does (rounding), the last positive index, else ``V - 1``. After every level
    accepted (or at a leaf) nothing is removed.

    **Chains with draft probabilities** (``draft_probs``, ``topk == 1`` only): below node
    ``j`` the draft token ``x`` of its first child is accepted when
    ``coin * p_j(x) <= q_j(x)``; on rejection the final token comes from
    ``relu(q_j - p_j)``, after the last node (or a node without a child) from ``q``.

    Arithmetic runs in float32 (float64 for float64 ``target_probs``; thresholds are rounded
    to float32 first, as SGLang's kernel takes them): the accumulator adds in link order like
    SGLang's kernel, the final running sums are sequential float64 sums.
    Draft tokens outside ``[0, V)`` have probability 0. With both thresholds at 1 and distinct
    sibling tokens the emitted tokens follow the target distribution exactly; lower
    thresholds accept more and are lossy. Coins must lie in ``[0, 1)`` (the caller's
    contract: checking would sync); a coin of exactly 0 accepts a first child of probability
    0, so :func:`draw_uniforms` never returns one. ``retrieve_index`` must be ``row * N + node``.

    Args:
        cfg: the draft configuration.
        verify_tree: from :func:`~eagle_fn.build_verify_tree`.
        target_probs: row ``j`` is the target's distribution after node ``j``.
        uniforms: ``uniforms[:, j]`` is the coin used among node ``j``'s children.
        final_uniforms: the coin of the final token.
        threshold_single: accept a child whose probability is at least this.
        threshold_acc: accept when ``coin <= acc / threshold_acc``.
        draft_probs: row ``j`` is the draft's distribution that drew node ``j + 1``.

    Shapes: ``target_probs, draft_probs [bs, N, V]`` or ``[bs * N, V]``, ``uniforms [bs, N]``,
    ``final_uniforms [bs]`` -> ``accept_index [bs, num_steps + 1]``, ``num_accepted [bs]``,
    ``predicts [bs * N]`` (the emitted token at each accepted node, 0 elsewhere).

    Example:
        >>> cfg = DraftConfig.chain(2)
        >>> parents, selected = torch.tensor([[-1, 0]]), torch.tensor([[0, 1]])
        >>> tree = DraftTree(parents, selected, draft_tokens=torch.tensor([[1, 2]]))
        >>> vt = build_verify_tree(cfg, tree, torch.tensor([0]), torch.tensor([3]))
        >>> q = torch.tensor([[0.1, 0.6, 0.2, 0.1], [0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 0.0, 1.0]])
        >>> # Coin 0.5 <= q(1) = 0.6 accepts node 1; coin 0.4 > q(2) = 0.3 rejects node 2. The
        >>> # final coin 0.8 lands at index 3 of [0.5, 0, 0, 0.2] (token 2 removed).
        >>> verdict = verify_sampling(
        ...     cfg, vt, q, torch.tensor([[0.5, 0.4, 0.9]]), torch.tensor([0.8]))
        >>> verdict.accept_index.tolist(), verdict.num_accepted.tolist(), verdict.predicts.tolist()
        ([[0, 1, -1]], [1], [1, 3, 0])
    """
    where = "verify_sampling"
    q, p = check_sampling_inputs(where, cfg, verify_tree, target_probs, uniforms,
                                 final_uniforms, threshold_single, threshold_acc,
                                 draft_probs)  # fmt: skip
    bs, n = verify_tree.retrieve_index.shape
    dtype = compute_dtype(q.dtype)
    q = q.reshape(bs, n, q.shape[-1]).to(dtype)  # [bs, N, V]
    coins = uniforms.to(dtype)  # [bs, N]
    if p is None:
        step = _target_only_step(
            verify_tree, q, coins, threshold_single, max(threshold_acc, THRESHOLD_ACC_FLOOR)
        )
    else:
        step = _draft_step(verify_tree, q, p.reshape(q.shape).to(dtype), coins)
    return _walk(cfg, verify_tree, q, final_uniforms.to(dtype), step)


class NodeStep(NamedTuple):
    """Each node's decision, the same every time the walk visits it."""

    child: Tensor  # [bs, N] the accepted child, -1 if none
    rejected: Tensor  # [bs, N, N] bool: the i-th tried child's token leaves the final row
    tokens: Tensor  # [bs, N, N] token of the node's i-th tried child, V where none
    residual: Tensor | None  # [bs, N, V] what a rejection subtracts from q (draft mode)


def _target_only_step(
    vt: VerifyTree, q: Tensor, coins: Tensor, threshold_single: float, threshold_acc: float
) -> NodeStep:
    bs, n, vocab = q.shape
    children = child_lists(vt.retrieve_next_token, vt.retrieve_next_sibling)  # [bs, N, N]
    tried = children < n  # [bs, N, N]
    tokens = _child_tokens(vt.draft_tokens.view(bs, n), children, vocab)  # [bs, N, N]
    prob = _probs_at(q, tokens)  # [bs, N, N] q[node, token of its i-th child]
    acc = torch.stack(running_sums(prob), dim=-1)  # [bs, N, N] in link order, like SGLang
    limit = acc / _as_float32(threshold_acc, q)  # [bs, N, N]
    likely = prob >= _as_float32(threshold_single, q)  # [bs, N, N]
    accept = tried & ((coins.unsqueeze(-1) <= limit) | likely)  # [bs, N, N]
    first = _first_true(accept)  # [bs, N] position of the accepted child, N if none
    chosen = children.gather(2, first.clamp(max=n - 1).unsqueeze(-1)).squeeze(-1)  # [bs, N]
    child = torch.where(first < n, chosen, -1)  # [bs, N]
    # Only a node that accepts nothing ends the walk there: all its tried children go.
    return NodeStep(child, tried & (first == n).unsqueeze(-1), tokens, None)


def _draft_step(vt: VerifyTree, q: Tensor, p: Tensor, coins: Tensor) -> NodeStep:
    bs, n, vocab = q.shape
    head = vt.retrieve_next_token
    child = torch.where((head >= 0) & (head < n), head, -1)  # [bs, N] a chain's only child
    tokens = _child_tokens(vt.draft_tokens.view(bs, n), torch.where(child >= 0, child, n)
                           .unsqueeze(-1), vocab)  # fmt: skip
    qx, px = _probs_at(q, tokens).squeeze(-1), _probs_at(p, tokens).squeeze(-1)  # [bs, N]
    accept = (child >= 0) & (coins * px <= qx)  # [bs, N]
    rejected = ((child >= 0) & ~accept).unsqueeze(-1)  # [bs, N, 1]
    return NodeStep(torch.where(accept, child, -1), rejected, tokens, p)


def child_lists(next_token: Tensor, next_sibling: Tensor) -> Tensor:
    """The first ``N`` children of every node in link order, ``N`` past the end.

    ``walk[c, i]`` is the node ``i`` sibling hops after ``c``; pointer doubling builds it in
    ``ceil(log2 N)`` rounds (positions ``m..2m-1`` from ``c`` are positions ``0..m-1`` from
    the node ``m`` hops after ``c``), bounded on any links, cyclic ones included. Links
    outside ``0..N-1`` end a list.

    Shapes: ``next_token, next_sibling [bs, N]`` -> ``[bs, N, N]``.
    """
    bs, n = next_sibling.shape
    none = next_sibling.new_full((bs, 1), n)  # [bs, 1] node N: past the end, its own sibling
    hop = torch.cat([_in_range(next_sibling, n), none], dim=1)  # [bs, N + 1]
    walk = torch.arange(n + 1, device=hop.device).expand(bs, n + 1).unsqueeze(-1)  # [bs, N+1, 1]
    width = 1
    while width < n:
        later = walk.gather(1, hop.unsqueeze(-1).expand(-1, -1, width))  # [bs, N + 1, width]
        walk, hop, width = torch.cat([walk, later], dim=2), hop.gather(1, hop), 2 * width
    head = _in_range(next_token, n)  # [bs, N]
    return walk[:, :, :n].gather(1, head.unsqueeze(-1).expand(-1, -1, n))  # [bs, N, N]


def running_sums(values: Tensor) -> list[Tensor]:
    """Sums of ``values[..., :i+1]`` added one at a time in the input's dtype, like a kernel's
    sequential accumulator (``torch.cumsum`` may accumulate in a wider type)."""
    acc = torch.zeros_like(values[..., 0])
    sums = []
    for i in range(values.shape[-1]):
        acc = acc + values[..., i]
        sums.append(acc)
    return sums


def _walk(
    cfg: DraftConfig, vt: VerifyTree, q: Tensor, final: Tensor, step: NodeStep
) -> GreedyVerdict:
    bs = q.shape[0]
    cur = torch.zeros(bs, dtype=torch.int64, device=q.device)  # [bs] last accepted node
    alive = torch.ones(bs, dtype=torch.bool, device=q.device)
    nodes = [cur]
    for _ in range(cfg.num_steps):
        child = step.child.gather(1, cur.unsqueeze(1)).squeeze(1)  # [bs]
        alive = alive & (child >= 0)
        cur = torch.where(alive, child, cur)
        nodes.append(torch.where(alive, cur, -1))
    path = torch.stack(nodes, dim=1)  # [bs, S + 1] accepted nodes, -1 padded
    num_accepted = (path[:, 1:] >= 0).sum(1)  # [bs]
    # The walk ends on a rejection unless every level accepted (or the node had no child).
    ended = (num_accepted < cfg.num_steps).view(bs, 1, 1)
    final_row = _final_row(q, cur, step, ended)  # [bs, V]
    token = sample_from_row(final_row, final)  # [bs]
    index = vt.retrieve_index.gather(1, path.clamp(min=0))  # [bs, S + 1]
    accept_index = torch.where(path >= 0, index, -1)  # [bs, S + 1]
    return GreedyVerdict(accept_index, num_accepted, _emit(vt, path, accept_index, token))


def _final_row(q: Tensor, cur: Tensor, step: NodeStep, ended: Tensor) -> Tensor:
    """``relu(q - removed)`` at the last accepted node, before the positive-entry filter."""
    bs, vocab = q.shape[0], q.shape[2]
    at = cur.view(bs, 1, 1)
    row = q.gather(1, at.expand(-1, 1, vocab)).squeeze(1)  # [bs, V]
    rejected = step.rejected.gather(1, at.expand(-1, 1, step.rejected.shape[2])).squeeze(1)
    if step.residual is not None:
        sub = step.residual.gather(1, at.expand(-1, 1, vocab)).squeeze(1)  # [bs, V]
        return torch.where((rejected.any(1, keepdim=True)) & ended.view(bs, 1), row - sub, row)
    tokens = step.tokens.gather(1, at.expand(-1, 1, step.tokens.shape[2])).squeeze(1)  # [bs, N]
    drop = torch.where(rejected & ended.view(bs, 1), tokens, vocab)  # [bs, N] V: keep
    mask = torch.zeros(bs, vocab + 1, dtype=torch.bool, device=q.device)
    return torch.where(mask.scatter_(1, drop, True)[:, :vocab], 0.0, row)


def sample_from_row(row: Tensor, coin: Tensor) -> Tensor:
    """Inverse CDF over the positive entries of each row: the first index whose running sum
    (sequential, float64) exceeds ``coin * total``; else the last positive index, else ``V-1``.

    Shapes: ``row [bs, V]``, ``coin [bs]`` -> ``[bs]`` int64.
    """
    vocab = row.shape[1]
    positive = row > 0  # [bs, V] NaN is not positive
    mass = torch.where(positive, row, 0.0).to(torch.float64)  # [bs, V]
    running = torch.cumsum(mass, dim=1)  # [bs, V]
    target = coin.to(torch.float64) * running[:, -1]  # [bs]
    hit = positive & (running > target.unsqueeze(1))  # [bs, V]
    last_positive = vocab - 1 - positive.flip(1).to(torch.uint8).argmax(1)  # [bs] V-1 if none
    return torch.where(hit.any(1), hit.to(torch.uint8).argmax(1), last_positive)


def _emit(vt: VerifyTree, path: Tensor, accept_index: Tensor, token: Tensor) -> Tensor:
    """``predicts``: each accepted node's next accepted draft token, the last one's sampled token.

    A looping tree may revisit a node; its next accepted child is the same every time, and
    the final token is written last so that it wins, as in SGLang's sequential kernel.
    """
    bs, n = vt.retrieve_index.shape
    flat = bs * n
    nxt = path[:, 1:]  # [bs, S] the node accepted after each level
    drafted = vt.draft_tokens.view(bs, n).gather(1, nxt.clamp(min=0))  # [bs, S]
    slot = torch.where(nxt >= 0, accept_index[:, :-1], flat).clamp(0, flat)  # [bs, S]
    predicts = vt.draft_tokens.new_zeros(flat + 1)  # [bs * N + 1] slot flat discards
    predicts = predicts.index_put((slot.flatten(),), drafted.flatten())
    num = (path >= 0).sum(1)  # [bs] accepted nodes, the root included
    last = accept_index.gather(1, (num - 1).unsqueeze(1)).squeeze(1).clamp(0, flat)  # [bs]
    return predicts.index_put((last,), token)[:flat]


def _child_tokens(tokens: Tensor, children: Tensor, vocab: int) -> Tensor:
    """Tokens of ``children [bs, N, C]`` (``N`` past the end), ``V`` where none or out of range."""
    bs = tokens.shape[0]
    padded = torch.cat([tokens, tokens.new_full((bs, 1), vocab)], dim=1)  # [bs, N + 1]
    picked = padded.gather(1, children.flatten(1)).view(children.shape)  # [bs, N, C]
    return torch.where((picked >= 0) & (picked < vocab), picked, vocab)


def _probs_at(probs: Tensor, tokens: Tensor) -> Tensor:
    """``probs[b, node, tokens[b, node, i]]``, 0 where the token is ``V``. ``[bs, N, C]``."""
    vocab = probs.shape[2]
    picked = probs.gather(2, tokens.clamp(max=vocab - 1))  # [bs, N, C]
    return torch.where(tokens < vocab, picked, 0.0)


def _first_true(mask: Tensor) -> Tensor:
    """Index of the first True along the last dim, its size if none."""
    size = mask.shape[-1]
    position = torch.arange(size, device=mask.device)
    return torch.where(mask, position, size).amin(-1)


def _as_float32(value: float, like: Tensor) -> Tensor:
    """A threshold rounded to float32, as SGLang's kernel takes it, in ``like``'s dtype."""
    return torch.full((), value, dtype=torch.float32, device=like.device).to(like.dtype)


def _in_range(links: Tensor, n: int) -> Tensor:
    return torch.where((links >= 0) & (links < n), links, n)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The arithmetic type of verification: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_sampling_inputs(
    where: str,
    cfg: object,
    vt: object,
    target_probs: object,
    uniforms: object,
    final_uniforms: object,
    threshold_single: object,
    threshold_acc: object,
    draft_probs: object,
) -> tuple[Tensor, Tensor | None]:
    """Checks every input of verify_sampling; returns ``(target_probs, draft_probs)``."""
    cfg = _checks.require_config(where, cfg)
    tree = _check_tree(where, cfg, vt)
    bs, n = tree.retrieve_index.shape
    device = tree.retrieve_index.device
    q = _check_probs(where, "target_probs", target_probs, bs, n, device)
    coins = _checks.require_scores(where, "uniforms", uniforms, "[bs, N]", (bs, n))
    _checks.require_device(where, "uniforms", coins, device, "verify_tree.retrieve_index")
    final = _checks.require_scores(where, "final_uniforms", final_uniforms, "[bs]", (bs,))
    _checks.require_device(where, "final_uniforms", final, device, "verify_tree.retrieve_index")
    for name, value in (("threshold_single", threshold_single), ("threshold_acc", threshold_acc)):
        _check_threshold(where, name, value)
    if draft_probs is None:
        return q, None
    if not cfg.is_chain:
        raise ValueError(
            f"{where}: draft_probs is only defined for chains (topk == 1): rejection sampling "
            f"against one draft distribution per node cannot weigh sibling drafts; this config "
            f"has topk = {cfg.topk}, verify it target-only (draft_probs=None)"
        )
    p = _check_probs(where, "draft_probs", draft_probs, bs, n, device)
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"{where}: draft_probs has V = {p.shape[-1]}, target_probs has V = {q.shape[-1]}"
        )
    return q, p


def _check_tree(where: str, cfg: DraftConfig, vt: object) -> VerifyTree:
    if not isinstance(vt, VerifyTree):
        raise TypeError(f"{where}: verify_tree must be a VerifyTree, got {type(vt).__name__}")
    n = cfg.num_draft_tokens
    index = _checks.require_rank(
        where, "verify_tree.retrieve_index", vt.retrieve_index, "[bs, N]", 2
    )
    bs, device = index.shape[0], index.device
    for name in ("retrieve_index", "retrieve_next_token", "retrieve_next_sibling"):
        tensor = _checks.require_index(
            where, f"verify_tree.{name}", getattr(vt, name), "[bs, N]", (bs, n)
        )
        _checks.require_device(
            where, f"verify_tree.{name}", tensor, device, "verify_tree.retrieve_index"
        )
    tokens = _checks.require_index(
        where, "verify_tree.draft_tokens", vt.draft_tokens, "[bs * N]", (bs * n,)
    )
    _checks.require_device(
        where, "verify_tree.draft_tokens", tokens, device, "verify_tree.retrieve_index"
    )
    return vt


def _check_probs(
    where: str, name: str, value: object, bs: int, n: int, device: torch.device
) -> Tensor:
    probs = _checks.require_tensor(where, name, value)
    shape = tuple(probs.shape)
    if (
        not ((len(shape) == 3 and shape[:2] == (bs, n)) or (len(shape) == 2 and shape[0] == bs * n))
        or shape[-1] < 1
    ):
        raise ValueError(
            f"{where}: {name} must have shape [bs, N, V] = [{bs}, {n}, V] or [bs * N, V] = "
            f"[{bs * n}, V] with V >= 1, got {_checks.show(shape)}"
        )
    _checks.require_scores(where, name, probs, "[bs, N, V]", shape)
    _checks.require_device(where, name, probs, device, "verify_tree.retrieve_index")
    return probs


def _check_threshold(where: str, name: str, value: object) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{where}: {name} must be a float, got {type(value).__name__}")
    if math.isnan(value):
        raise ValueError(f"{where}: {name} must be a number, got nan")


def _check_logits(logits: object, temperature: object, top_k: object, top_p: object) -> int:
    """Checks the inputs of target_probs_from_logits; returns the rows per request."""
    where = "target_probs_from_logits"
    temps = _checks.require_rank(where, "temperature", temperature, "[bs]", 1)
    bs, device = temps.shape[0], temps.device
    _checks.require_scores(where, "temperature", temps, "[bs]", (bs,))
    x = _checks.require_tensor(where, "logits", logits)
    shape = tuple(x.shape)
    ok = (len(shape) == 3 and shape[0] == bs) or (
        len(shape) == 2 and (shape[0] % bs == 0 if bs else shape[0] == 0)
    )
    if not ok or shape[-1] < 1:
        raise ValueError(
            f"{where}: logits must have shape [bs, N, V] or [bs * N, V] with bs = {bs} (the "
            f"length of temperature) and V >= 1, got {_checks.show(shape)}"
        )
    _checks.require_scores(where, "logits", x, "[bs, N, V]", shape)
    _checks.require_device(where, "logits", x, device, "temperature")
    if top_k is not None:
        k = _checks.require_index(where, "top_k", top_k, "[bs]", (bs,))
        _checks.require_device(where, "top_k", k, device, "temperature")
    if top_p is not None:
        p = _checks.require_scores(where, "top_p", top_p, "[bs]", (bs,))
        _checks.require_device(where, "top_p", p, device, "temperature")
    if len(shape) == 3:
        return shape[1]
    return shape[0] // bs if bs else 0
