"""Sampling verification: accept drafts so that the emitted tokens follow the target's distribution.

Randomness is an input (coins drawn by :func:`~eagle_fn.draw_uniforms` or the engine), so
verification is deterministic, syncs nothing with the host and can be captured in a CUDA graph.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import torch
from torch import Tensor

from .config import DraftConfig
from .contracts import FLOAT, Arg, Contract, contract
from .layout import first_true
from .probs import compute_dtype, sample_from_row
from .types import GreedyVerdict, VerifyTree
from .verify import VERIFY_TREE, end_outside, in_own_row

THRESHOLD_ACC_FLOOR = 1e-9  # SGLang floors threshold_acc here before dividing by it
_PROBS = Arg("[bs, N, V] or [bs * N, V]", FLOAT)
SAMPLING = contract(
    "verify_sampling",
    verify_tree=VERIFY_TREE,
    target_probs=_PROBS,
    uniforms=Arg("[bs, N]", FLOAT),
    final_uniforms=Arg("[bs]", FLOAT),
)


_ONE_DRAFT_PER_NODE = (
    "draft_probs is only defined for chains (topk == 1): rejection sampling against one "
    "draft distribution per node cannot weigh sibling drafts; this config has "
    "topk = {topk}, verify it target-only (draft_probs=None)"
)
SAMPLING_DRAFT = Contract(
    "verify_sampling", (*SAMPLING.args, ("draft_probs", _PROBS)), chain_only=_ONE_DRAFT_PER_NODE
)


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
    """Accepts drafts so that the emitted tokens follow the target (docs/semantics.md §9).

    Args:
        cfg, verify_tree: a draft configuration and a tree built with it (only ``N`` checked).
        target_probs, uniforms, final_uniforms: row ``j`` is the target's distribution after
            node ``j``; the coins (in ``[0, 1)``, unchecked) at node ``j``, and the final one.
        threshold_single, threshold_acc: accept if ``q >= single`` or ``coin <= acc / acc_t``
            (both rounded to float32 first, as SGLang's kernel takes them); lossless at 1.
        draft_probs: chains only: rejection sampling, where row ``j`` is the draft's distribution
            that drew node ``j + 1``, whose token ``x`` is accepted if ``q(x) > 0`` and ``coin *
            p(x) <= q(x)``. Without it: target-only (SGLang's), for trees and chains.

    Shapes: ``target_probs, draft_probs [bs, N, V]`` or ``[bs * N, V]``, ``uniforms [bs, N]``,
    ``final_uniforms [bs]`` -> as :func:`~eagle_fn.verify_greedy`'s.

    Example:
        >>> from eagle_fn import DraftConfig, DraftTree, build_verify_tree
        >>> cfg, t = DraftConfig.chain(2), torch.tensor
        >>> tree = DraftTree(t([[-1, 0]]), t([[0, 1]]), t([[1, 2]]))
        >>> vt = build_verify_tree(cfg, tree, t([0]), t([3]))
        >>> q = t([[0.1, 0.6, 0.2, 0.1], [0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 0.0, 1.0]])
        >>> # .5 <= q(1) = .6 accepts 1, .4 > q(2) = .3 rejects 2, .8 picks 3 of [.5, 0, 0, .2]
        >>> v = verify_sampling(cfg, vt, q, t([[0.5, 0.4, 0.9]]), t([0.8]))
        >>> v.accept_index.tolist(), v.num_accepted.tolist(), v.predicts.tolist()
        ([[0, 1, -1]], [1], [1, 3, 0])
    """
    options = {"threshold_single": threshold_single, "threshold_acc": threshold_acc}
    args = (cfg, verify_tree, target_probs, uniforms, final_uniforms)
    return sampling_core(*sampling_args(*args, **options, draft_probs=draft_probs))


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
    """:func:`verify_sampling` without its checks (``q`` the target's, ``p`` the draft's)."""
    bs, n = verify_tree.retrieve_index.shape
    dtype = compute_dtype(q.dtype)
    q = q.reshape(bs, n, q.shape[-1]).to(dtype)  # [bs, N, V]
    coins = uniforms.to(dtype)  # [bs, N]
    if p is None:
        step = _target_only_step(
            verify_tree, q, coins, threshold_single, max(threshold_acc, THRESHOLD_ACC_FLOOR)
        )
    else:
        step = _draft_step(verify_tree, q, p.reshape(q.shape).to(dtype), coins)  # p [bs, N, V]
    return _walk(cfg, verify_tree, q, final_uniforms.to(dtype), step)


class NodeStep(NamedTuple):
    """Each node's decision, the same every time the walk visits it."""

    child: Tensor  # [bs, N] the accepted child, -1 if none
    rejected: Tensor  # [bs, N, N] bool: children whose tokens leave the row if the walk ends here
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
    first = first_true(accept)  # [bs, N] position of the accepted child, -1 if none
    chosen = children.gather(2, first.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # [bs, N]
    child = torch.where(first >= 0, chosen, -1)  # [bs, N]
    # rejected: tried. Only a node that accepts none of its children ends the walk (the one
    # place the walk reads it), so there every tried child was rejected.
    return NodeStep(child, tried, tokens, None)  # rejected [bs, N, N]


def _draft_step(vt: VerifyTree, q: Tensor, p: Tensor, coins: Tensor) -> NodeStep:
    bs, n, vocab = q.shape
    head = vt.retrieve_next_token
    child = end_outside(head, n)  # [bs, N] a chain's only child
    tokens = _child_tokens(vt.draft_tokens.view(bs, n), torch.where(child >= 0, child, n)
                           .unsqueeze(-1), vocab)  # [bs, N, 1]  # fmt: skip
    qx, px = _probs_at(q, tokens).squeeze(-1), _probs_at(p, tokens).squeeze(-1)  # [bs, N]
    # q(x) = 0 is never accepted (min(1, q/p) = 0), even where coin * p(x) <= 0.
    accept = (child >= 0) & (qx > 0) & (coins * px <= qx)  # [bs, N]
    rejected = ((child >= 0) & ~accept).unsqueeze(-1)  # [bs, N, 1]
    return NodeStep(torch.where(accept, child, -1), rejected, tokens, p)  # child [bs, N]


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
    hop = torch.cat([end_outside(next_sibling, n, n), none], dim=1)  # [bs, N + 1]
    walk = torch.arange(n + 1, device=hop.device).expand(bs, n + 1).unsqueeze(-1)  # [bs, N+1, 1]
    width = 1
    while width < n:
        later = walk.gather(1, hop.unsqueeze(-1).expand(-1, -1, width))  # [bs, N + 1, width]
        walk, hop, width = torch.cat([walk, later], dim=2), hop.gather(1, hop), 2 * width
    head = end_outside(next_token, n, n)  # [bs, N]
    return walk[:, :, :n].gather(1, head.unsqueeze(-1).expand(-1, -1, n))  # [bs, N, N]


def running_sums(values: Tensor) -> list[Tensor]:
    """Sums of ``values[..., :i+1]`` added one at a time in the input's dtype, like a kernel's
    sequential accumulator (``torch.cumsum`` may accumulate in a wider type)."""
    acc = torch.zeros_like(values[..., 0])  # [...]
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
    alive = torch.ones(bs, dtype=torch.bool, device=q.device)  # [bs]
    nodes = [cur]
    for _ in range(cfg.num_steps):
        child = step.child.gather(1, cur.unsqueeze(1)).squeeze(1)  # [bs]
        alive = alive & (child >= 0)
        cur = torch.where(alive, child, cur)  # [bs]
        nodes.append(torch.where(alive, cur, -1))  # [bs]
    path = torch.stack(nodes, dim=1)  # [bs, S + 1] accepted nodes, -1 padded
    num_accepted = (path[:, 1:] >= 0).sum(1)  # [bs]
    # The walk ends on a rejection unless every level accepted (or the node had no child).
    ended = (num_accepted < cfg.num_steps).view(bs, 1, 1)  # [bs, 1, 1]
    final_row = _final_row(q, cur, step, ended)  # [bs, V]
    token = sample_from_row(final_row, final)  # [bs]
    index = vt.retrieve_index.gather(1, path.clamp(min=0))  # [bs, S + 1]
    accept_index = torch.where(path >= 0, index, -1)  # [bs, S + 1]
    return GreedyVerdict(accept_index, num_accepted, _emit(vt, path, accept_index, token))


def _final_row(q: Tensor, cur: Tensor, step: NodeStep, ended: Tensor) -> Tensor:
    """``relu(q - removed)`` at the last accepted node, before the positive-entry filter."""
    bs, vocab = q.shape[0], q.shape[2]
    at = cur.view(bs, 1, 1)  # [bs, 1, 1]
    row = q.gather(1, at.expand(-1, 1, vocab)).squeeze(1)  # [bs, V]
    rejected = step.rejected.gather(1, at.expand(-1, 1, step.rejected.shape[2])).squeeze(1)
    if step.residual is not None:
        sub = step.residual.gather(1, at.expand(-1, 1, vocab)).squeeze(1)  # [bs, V]
        return torch.where((rejected.any(1, keepdim=True)) & ended.view(bs, 1), row - sub, row)
    tokens = step.tokens.gather(1, at.expand(-1, 1, step.tokens.shape[2])).squeeze(1)  # [bs, N]
    drop = torch.where(rejected & ended.view(bs, 1), tokens, vocab)  # [bs, N] V: keep
    mask = torch.zeros(bs, vocab + 1, dtype=torch.bool, device=q.device)  # [bs, V + 1]
    return torch.where(mask.scatter_(1, drop, True)[:, :vocab], 0.0, row)  # [bs, V]


def _emit(vt: VerifyTree, path: Tensor, accept_index: Tensor, token: Tensor) -> Tensor:
    """``predicts``: each accepted node's next accepted draft token, the last one's sampled token.

    Written in walk order, the final token last, and only into the request's own row (a
    malformed ``retrieve_index`` elsewhere commits nothing, as in greedy verification). Of
    writes to one slot (a looping tree, repeated entries) the last wins, as in SGLang's
    sequential kernel: the earlier ones are dropped, so no index_put meets a duplicate.
    """
    bs, n = vt.retrieve_index.shape
    flat, steps = bs * n, path.shape[1]
    nxt = path[:, 1:]  # [bs, S] the node accepted after each level
    drafted = vt.draft_tokens.view(bs, n).gather(1, nxt.clamp(min=0))  # [bs, S]
    level = torch.arange(steps, device=path.device)  # [S + 1]
    last = (path >= 0).sum(1, keepdim=True) - 1  # [bs, 1] the last accepted node's level
    values = torch.where(level < last, torch.cat([drafted, token.unsqueeze(1)], 1), token[:, None])
    own = (level <= last) & in_own_row(accept_index, n)  # [bs, S + 1]
    same = accept_index.unsqueeze(2) == accept_index.unsqueeze(1)  # [bs, S + 1, S + 1]
    later = same & own.unsqueeze(1) & (level.view(1, 1, -1) > level.view(1, -1, 1))
    slot = torch.where(own & ~later.any(2), accept_index, flat)  # [bs, S + 1] flat discards
    predicts = vt.draft_tokens.new_zeros(flat + 1)  # [bs * N + 1]
    return predicts.index_put((slot.flatten(),), values.flatten())[:flat]  # [bs * N]


def _child_tokens(tokens: Tensor, children: Tensor, vocab: int) -> Tensor:
    """Tokens of ``children [bs, N, C]`` (``N`` past the end), ``V`` where none or out of range."""
    bs = tokens.shape[0]
    padded = torch.cat([tokens, tokens.new_full((bs, 1), vocab)], dim=1)  # [bs, N + 1]
    picked = padded.gather(1, children.flatten(1)).view(children.shape)  # [bs, N, C]
    return torch.where((picked >= 0) & (picked < vocab), picked, vocab)  # [bs, N, C]


def _probs_at(probs: Tensor, tokens: Tensor) -> Tensor:
    """``probs[b, node, tokens[b, node, i]]``, 0 where the token is ``V``. ``[bs, N, C]``."""
    vocab = probs.shape[2]
    picked = probs.gather(2, tokens.clamp(max=vocab - 1))  # [bs, N, C]
    return torch.where(tokens < vocab, picked, 0.0)  # [bs, N, C]


def _as_float32(value: float, like: Tensor) -> Tensor:
    """A threshold rounded to float32, as SGLang's kernel takes it, in ``like``'s dtype (past
    float32's range: +-inf, as a C cast rounds it)."""
    wide = torch.full((), value, dtype=torch.float64, device=like.device)  # []
    return wide.to(torch.float32).to(like.dtype)


def sampling_args(
    cfg: Any, vt: Any, target_probs: Any, uniforms: Any, final_uniforms: Any, **options: Any
) -> tuple[Any, ...]:
    """Checks every input of :func:`verify_sampling` (its keyword arguments as ``options``);
    returns them as its core takes them."""
    where = "verify_sampling"
    thresholds = options.pop("threshold_single", 1.0), options.pop("threshold_acc", 1.0)
    draft_probs = options.pop("draft_probs", None)
    if options:
        raise TypeError(f"{where}: unexpected keyword arguments {sorted(options)}")
    contract = SAMPLING if draft_probs is None else SAMPLING_DRAFT
    values = (vt, target_probs, uniforms, final_uniforms, draft_probs)[: len(contract.args)]
    contract(cfg, *values)
    if target_probs.shape[-1] < 1:
        raise ValueError(f"{where}: target_probs must have V >= 1 columns, got 0")
    pairs = zip(("threshold_single", "threshold_acc"), thresholds, strict=True)
    single, acc = (_check_threshold(where, name, value) for name, value in pairs)
    return cfg, vt, target_probs, uniforms, final_uniforms, single, acc, draft_probs


def _check_threshold(where: str, name: str, value: object) -> float:
    """A checked threshold as a float (an int past 2**63 would overflow a tensor fill)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{where}: {name} must be a float, got {type(value).__name__}")
    if isinstance(value, int) and abs(value) > sys.float_info.max:
        raise ValueError(f"{where}: {name} must fit a float, got {value.bit_length()} bits")
    if value != value:  # NaN; math.isnan would break a caller's dynamic=True compile
        raise ValueError(f"{where}: {name} must be a number, got nan")
    return float(value)
