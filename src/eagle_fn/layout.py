"""The verify layout: a DraftTree laid out for the target's verify pass (masks, links).

Also the tree primitives it is built from (parent nodes, the bounded ancestor walk, the
retrieve links, the three mask layouts) and :func:`is_valid_tree`."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .arguments import require_int, require_type
from .config import DraftConfig
from .contracts import Arg, contract, fields
from .types import (
    BITPACKED_DTYPES,
    DraftTree,
    MaskMode,
    VerifyTree,
    bitpacked_dtype,
    bitpacked_limit,
)

TREE = fields(
    DraftTree,
    top_scores_index=Arg("[bs, N - 1]"),
    draft_tokens=Arg("[bs, N - 1]"),
    parent_list=Arg("[bs, parent_width]"),
)
IS_VALID_TREE = contract("is_valid_tree", tree=TREE)
BUILD_VERIFY = contract(
    "build_verify_tree",
    device_label="the tree",
    tree=TREE,
    bonus_tokens=Arg("[bs]"),
    seq_lens=Arg("[bs]"),
)


def build_verify_tree(
    cfg: DraftConfig,
    tree: DraftTree,
    bonus_tokens: Tensor,
    seq_lens: Tensor,
    *,
    mask_mode: MaskMode = MaskMode.QLEN,
    seq_lens_sum: int | None = None,
) -> VerifyTree:
    """Lays the draft tree out for the verify pass (docs/semantics.md §8, which also gives
    malformed trees' bounded semantics; :func:`is_valid_tree` tells them apart).

    Args:
        cfg: the draft configuration.
        tree: the organized draft.
        bonus_tokens: the last verified token of each request (the root), int64.
        seq_lens: verified tokens of each request before this round, int64.
        mask_mode: the tree-mask layout.
        seq_lens_sum: ``sum(seq_lens)``, sizes the FULL mask without a host sync (FULL
            only); derived from ``seq_lens`` (one device sync; not on meta) when omitted. A
            wrong value cannot be detected without that sync: cells past it are dropped.

    Shapes: ``bonus_tokens, seq_lens [bs]`` -> see :class:`VerifyTree`.

    Example:
        >>> cfg = DraftConfig(topk=2, num_steps=2, num_draft_tokens=4)
        >>> t = torch.tensor  # candidate 2 is a child of candidate 0:
        >>> tree = DraftTree(t([[-1, 0, 1]]), t([[0, 1, 2]]), t([[7, 9, 4]]))
        >>> vt = build_verify_tree(cfg, tree, torch.tensor([5]), torch.tensor([10]))
        >>> vt.draft_tokens.tolist(), vt.positions.tolist()
        ([5, 7, 9, 4], [10, 11, 11, 12])
        >>> vt.retrieve_next_token.tolist(), vt.retrieve_next_sibling.tolist()
        ([[1, 3, -1, -1]], [[-1, 2, -1, -1]])
        >>> vt.tree_mask.view(4, 4).int().tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
    """
    checked = verify_args(
        cfg, tree, bonus_tokens, seq_lens, mask_mode=mask_mode, seq_lens_sum=seq_lens_sum
    )
    return verify_core(*checked)


def verify_args(
    cfg: Any,
    tree: Any,
    bonus_tokens: Any,
    seq_lens: Any,
    mask_mode: object = MaskMode.QLEN,
    seq_lens_sum: object = None,
    *,
    where: str = BUILD_VERIFY.where,
    device: torch.device | None = None,
    device_label: str | None = None,
) -> tuple[Any, ...]:
    """:func:`build_verify_tree`'s arguments, checked, as :func:`verify_core` takes them: the
    tree's fields spread, and the FULL mask's length in place of ``seq_lens_sum``. The worker
    passes ``mask_mode`` and ``seq_lens_sum`` by position, so a caller's keywords meet only its
    own signature. The last three are as in :meth:`~eagle_fn.contracts.Contract.check`."""
    site = {"where": where, "device": device, "device_label": device_label}
    BUILD_VERIFY(cfg, tree, bonus_tokens, seq_lens, **site)
    n = cfg.num_draft_tokens
    require_type(where, "mask_mode", mask_mode, MaskMode, "a MaskMode")
    if mask_mode is MaskMode.BITPACKED and n > max(BITPACKED_DTYPES):
        raise ValueError(f"{where}: {bitpacked_limit(n)}")
    total = full_mask_length(where, seq_lens, n, seq_lens_sum) if mask_mode is MaskMode.FULL else 0
    return cfg, *tree, bonus_tokens, seq_lens, mask_mode, total


def is_valid_tree(cfg: DraftConfig, tree: DraftTree) -> Tensor:
    """Whether each request's tree is well formed: ``[bs]`` bool, no host sync.

    Well formed: every selected candidate is in ``[0, num_candidates)`` and reaches the root
    through selected parents in at most ``num_steps`` hops (no missing parent, no cycle, no
    self-parent). :func:`~eagle_fn.organize_tree` always produces such trees.

    Example:
        >>> cfg = DraftConfig(topk=2, num_steps=2, num_draft_tokens=3)
        >>> parents = torch.tensor([[-1, 0, 1], [-1, 0, 1]])
        >>> selected = torch.tensor([[0, 2], [1, 2]])  # row 1 lacks candidate 0, 2's parent
        >>> is_valid_tree(cfg, DraftTree(parents, selected, selected)).tolist()
        [True, False]
    """
    IS_VALID_TREE(cfg, tree)
    return valid_tree_core(cfg, tree.parent_list, tree.top_scores_index)


def verify_core(
    cfg: DraftConfig,
    parent_list: Tensor,
    top_scores_index: Tensor,
    draft_tokens: Tensor,
    bonus_tokens: Tensor,
    seq_lens: Tensor,
    mask_mode: MaskMode,
    total: int,
) -> VerifyTree:
    """:func:`build_verify_tree` without its checks; ``total`` is the FULL mask's length."""
    parent = parent_nodes(cfg, parent_list, top_scores_index)  # [bs, N]
    visible, depth = ancestor_walk(parent, cfg.num_steps)  # [bs, N, N], [bs, N]
    mask = layout_mask(visible, seq_lens, mask_mode, total)
    links = (flat_node_index(parent), *retrieve_links(parent))  # [bs, N] each
    return assemble(bonus_tokens, draft_tokens, seq_lens, depth, mask, links)


def assemble(
    bonus_tokens: Tensor,
    draft_tokens: Tensor,
    seq_lens: Tensor,
    depth: Tensor,
    mask: Tensor,
    links: tuple[Tensor, Tensor, Tensor],
) -> VerifyTree:
    """The :class:`VerifyTree` of a tree's depths (``[bs, N]`` or ``[N]``), mask and
    ``(retrieve_index, next_token, next_sibling)``: the token layout and positions added."""
    tokens = verify_tokens(bonus_tokens, draft_tokens)  # [bs * N]
    positions = (seq_lens.unsqueeze(1) + depth).flatten()  # [bs * N]
    return VerifyTree(tokens, positions, mask, *links)


def valid_tree_core(cfg: DraftConfig, parent_list: Tensor, top_scores_index: Tensor) -> Tensor:
    # An index outside [0, num_candidates) has its slot outside the table: no parent, invalid.
    parent = parent_nodes(cfg, parent_list, top_scores_index)  # [bs, N]
    cur = parent  # climbs from every node; -1 (no parent found) and 0 (root) are kept
    for _ in range(cfg.num_steps - 1):
        cur = torch.where(cur > 0, parent.gather(1, cur.clamp(min=0)), cur)  # [bs, N]
    return (cur[:, 1:] == 0).all(1)  # [bs]


def verify_tokens(bonus_tokens: Tensor, draft_tokens: Tensor) -> Tensor:
    """``[bonus, d_1, .., d_{N-1}]`` per request, flattened: ``[bs], [bs, N-1] -> [bs * N]``."""
    return torch.cat([bonus_tokens.unsqueeze(1), draft_tokens], dim=1).flatten()  # [bs * N]


def parent_nodes(cfg: DraftConfig, parent_list: Tensor, top_scores_index: Tensor) -> Tensor:
    """Each node's parent node: ``[bs, N]``, 0 for children of the root, -1 for none.

    The root has none; neither has a node whose slot is outside the parent table or whose
    parent candidate is not among its own request's selected candidates (the first match
    wins when a candidate is selected twice).
    """
    sel = top_scores_index  # [bs, N - 1]
    slot = torch.div(sel, cfg.topk, rounding_mode="floor")  # [bs, N - 1]
    width = cfg.parent_width
    if width > 0:
        wanted = parent_list.gather(1, slot.clamp(0, width - 1))  # [bs, N - 1] parent candidate
        match = sel.unsqueeze(1) == wanted.unsqueeze(2)  # [bs, N - 1 (child), N - 1 (position)]
        position = first_true(match)  # [bs, N - 1], -1 when not selected
        in_table = (slot > 0) & (slot < width) & (position >= 0)
        linked = torch.where(in_table, position + 1, -1)  # [bs, N - 1] parent node
    else:
        linked = torch.full_like(sel, -1)  # [bs, N - 1]: a one-step draft has no parent table
    parent = torch.where(slot == 0, 0, linked)  # [bs, N - 1]
    root = torch.full_like(parent[:, :1], -1)  # [bs, 1]
    return torch.cat([root, parent], dim=1)  # [bs, N]


def ancestor_walk(parent: Tensor, steps: int) -> tuple[Tensor, Tensor]:
    """Visibility and depth of every node, from at most ``steps`` parent-pointer gathers.

    Row ``t`` of the visibility marks the root and, walking from ``t`` toward the root, each
    visited node; the walk stops after a child of the root or a node without a parent.
    ``depth`` counts the visited nodes: the true depth in a well-formed tree.

    Shapes: ``parent [bs, N]`` -> ``visible [bs, N, N]`` bool, ``depth [bs, N]`` int64.
    """
    bs, n = parent.shape
    node = torch.arange(n, device=parent.device)  # [N]
    cur = node.expand(bs, n)  # [bs, N] where each walk stands
    active = cur > 0  # [bs, N] the root's walk is empty
    visible = (node == 0).expand(bs, n, n)  # [bs, N, N] root column
    depth = torch.zeros_like(cur)  # [bs, N]
    for _ in range(steps):
        visible = visible | (active.unsqueeze(2) & (cur.unsqueeze(2) == node))  # [bs, N, N]
        depth = depth + active
        up = parent.gather(1, cur)  # [bs, N]
        active = active & (up > 0)
        cur = torch.where(active, up, cur)  # [bs, N]
    return visible, depth


def retrieve_links(parent: Tensor) -> tuple[Tensor, Tensor]:
    """First-child and next-sibling links, children in ascending node order.

    Shapes: ``parent [bs, N]`` -> ``next_token, next_sibling [bs, N]`` (-1 for none).
    """
    node = torch.arange(parent.shape[1], device=parent.device)  # [N]
    children = parent.unsqueeze(1) == node.unsqueeze(1)  # [bs, N (parent), N (child)]
    same_parent = (parent.unsqueeze(2) == parent.unsqueeze(1)) & (parent >= 0).unsqueeze(2)
    later = node.unsqueeze(1) < node  # [N, N] column after row
    return first_true(children), first_true(same_parent & later)


def flat_node_index(parent: Tensor) -> Tensor:
    """``row * N + node`` for every node: ``[bs, N]``."""
    return torch.arange(parent.numel(), device=parent.device).view_as(parent)  # [bs, N]


def first_true(mask: Tensor) -> Tensor:
    """Index of the first True along the last dim, -1 when none: ``[..., n] -> [...]``."""
    n = mask.shape[-1]
    index = torch.arange(n, device=mask.device)  # [n]
    first = torch.where(mask, index, n).amin(-1)  # [...], n when none
    return torch.where(first < n, first, -1)  # [...]


def layout_mask(visible: Tensor, seq_lens: Tensor, mode: MaskMode, total: int) -> Tensor:
    """The ``[bs, N, N]`` visibility in the requested layout."""
    if mode is MaskMode.QLEN:
        return visible.flatten()  # [bs * N * N]
    if mode is MaskMode.BITPACKED:
        return bitpack(visible)
    return full_mask(visible, seq_lens, total)


def bitpack(visible: Tensor) -> Tensor:
    """One integer per row, bit ``j`` for column ``j``: ``[bs, N, N] -> [bs * N]``."""
    n = visible.shape[-1]
    weights = torch.ones(n, dtype=torch.int64, device=visible.device) << torch.arange(
        n, device=visible.device
    )  # [N] 1, 2, 4, ...
    packed = (visible * weights).sum(-1)  # [bs, N] int64
    return packed.flatten().to(bitpacked_dtype(n))  # [bs * N]


def full_mask(visible: Tensor, seq_lens: Tensor, total: int) -> Tensor:
    """Per request an ``N x (seq_len + N)`` block, prefix columns True, concatenated.

    ``total`` must be ``N * sum(seq_lens) + bs * N * N``. As in the kernel, a cell at an int64
    offset outside ``[0, total)`` is dropped; one two rows share (negative seq_lens) holds either.

    Shapes: ``visible [bs, N, N]``, ``seq_lens [bs]`` -> ``[total]`` bool.
    """
    n = visible.shape[-1]
    node = torch.arange(n, device=visible.device)  # [N]
    width = seq_lens + n  # [bs] block width
    start = n * (torch.cumsum(width, 0) - width)  # [bs] block offset
    cell = (start + seq_lens).view(-1, 1, 1) + node.view(1, n, 1) * width.view(-1, 1, 1) + node
    inside = (cell >= 0) & (cell < total)  # [bs, N, N]
    cell = torch.where(inside, cell, total)  # [bs, N, N]; index total is a discard slot
    mask = torch.ones(total + 1, dtype=torch.bool, device=visible.device)  # [total + 1]
    return mask.index_put((cell.flatten(),), visible.flatten())[:total]  # [total]


def full_mask_length(where: str, seq_lens: Tensor, n: int, seq_lens_sum: Any) -> int:
    """The FULL mask's length, ``N * sum(seq_lens) + bs * N * N``."""
    name, traced = "seq_lens_sum", isinstance(seq_lens_sum, torch.SymInt)  # a fake trace's symbol
    if seq_lens_sum is None and seq_lens.is_meta:  # no values to sum
        raise ValueError(f"{where}: a FULL mask of meta tensors needs seq_lens_sum")
    if seq_lens_sum is None:  # the one host sync, avoidable by passing it; item(), not int():
        name, seq_lens_sum = "sum(seq_lens)", seq_lens.sum().item()  # a symbol under fakes
        traced = torch.compiler.is_dynamo_compiling() or isinstance(seq_lens_sum, torch.SymInt)
    if traced:  # dynamo sees a symbol as an int; its sign is checked in the graph
        torch._check(seq_lens_sum >= 0)
        return n * seq_lens_sum + seq_lens.shape[0] * n * n
    total = require_int(where, name, seq_lens_sum, 0)
    length = n * total + seq_lens.shape[0] * n * n
    if length >= 2**63:  # no tensor has that many elements: say which input, not where it broke
        msg = f"makes the FULL mask N * seq_lens_sum + bs * N * N = {length} elements long"
        raise ValueError(f"{where}: {name} = {total} {msg}, past int64")
    return length
