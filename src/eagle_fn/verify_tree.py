"""Verify-ready trees: what the target model's verify pass consumes, built from a DraftTree."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from . import _checks
from ._memo import memoized
from .config import DraftConfig
from .constants import CachedTensors
from .organize import DraftTree


class MaskMode(enum.Enum):
    """Layouts of the tree attention mask, as SGLang's verify step expects them."""

    FULL = "full"  # bool, per request N x (seq_len + N), prefix columns all True
    QLEN = "qlen"  # bool [bs * N * N]: row t marks t and its ancestors
    BITPACKED = "bitpacked"  # one integer per row, bit j set when column j is visible


class VerifyTree(NamedTuple):
    """The draft tree laid out for one verify forward of the target model.

    Node 0 of each request is the bonus token (the root), node ``j >= 1`` is the candidate
    ``top_scores_index[:, j - 1]``. Links are node indices within the request, ``-1`` for none.
    """

    draft_tokens: Tensor  # [bs * N] bonus token first, then the N - 1 draft tokens
    positions: Tensor  # [bs * N] seq_len + depth
    tree_mask: Tensor  # QLEN [bs*N*N] | FULL [N*sum(seq_lens) + bs*N*N] | BITPACKED [bs*N]
    retrieve_index: Tensor  # [bs, N] row * N + node
    retrieve_next_token: Tensor  # [bs, N] first child of each node
    retrieve_next_sibling: Tensor  # [bs, N] next child of the same parent


BITPACKED_DTYPES = {8: torch.uint8, 16: torch.uint16, 32: torch.uint32}


def bitpacked_dtype(num_nodes: int) -> torch.dtype:
    """The integer type of a BITPACKED mask row: 8, 16 or 32 bits for up to that many nodes."""
    for bits, dtype in BITPACKED_DTYPES.items():
        if num_nodes <= bits:
            return dtype
    raise ValueError(f"BITPACKED masks hold at most 32 nodes, got num_draft_tokens = {num_nodes}")


def build_verify_tree(
    cfg: DraftConfig,
    tree: DraftTree,
    bonus_tokens: Tensor,
    seq_lens: Tensor,
    *,
    mask_mode: MaskMode = MaskMode.QLEN,
    seq_lens_sum: int | None = None,
) -> VerifyTree:
    """Lays the draft tree out for the verify pass (SPEC §8).

    A node's parent is the root when its slot (``candidate // topk``) is 0, otherwise the node
    whose candidate equals ``parent_list[row, slot]``, searched among the same request's
    selected candidates only. Malformed trees keep SGLang's bounded semantics: a node whose
    parent is not found is left unlinked (its ``retrieve_index`` is still set); its mask row
    and position come from walking toward the root for at most ``num_steps`` nodes, stopping
    after a child of the root or a node whose parent is not found. Well-formed trees give the
    exact depths. :func:`is_valid_tree` tells the two apart.

    Args:
        cfg: the draft configuration.
        tree: the organized draft.
        bonus_tokens: the last verified token of each request (the root), int64.
        seq_lens: verified tokens of each request before this round, int64.
        mask_mode: the tree-mask layout.
        seq_lens_sum: ``sum(seq_lens)``, sizes the FULL mask without a host sync; derived
            from ``seq_lens`` (one device sync) when omitted. Ignored by the other modes.

    Shapes: ``bonus_tokens, seq_lens [bs]`` -> see :class:`VerifyTree`.

    Example:
        >>> cfg = DraftConfig(topk=2, num_steps=2, num_draft_tokens=4)
        >>> tree = DraftTree(
        ...     parent_list=torch.tensor([[-1, 0, 1]]),
        ...     top_scores_index=torch.tensor([[0, 1, 2]]),  # candidate 2 is a child of 0
        ...     draft_tokens=torch.tensor([[7, 9, 4]]),
        ... )
        >>> vt = build_verify_tree(cfg, tree, torch.tensor([5]), torch.tensor([10]))
        >>> vt.draft_tokens.tolist(), vt.positions.tolist()
        ([5, 7, 9, 4], [10, 11, 11, 12])
        >>> vt.retrieve_next_token.tolist(), vt.retrieve_next_sibling.tolist()
        ([[1, 3, -1, -1]], [[-1, 2, -1, -1]])
        >>> vt.tree_mask.view(4, 4).int().tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
    """
    where = "build_verify_tree"
    if not verify_fits(cfg, tree, bonus_tokens, seq_lens, mask_mode):
        check_verify_inputs(where, cfg, tree, bonus_tokens, seq_lens, mask_mode)
    total = full_mask_length(where, cfg, seq_lens, mask_mode, seq_lens_sum)
    return _build_verify_tree(
        cfg, tree.parent_list, tree.top_scores_index, tree.draft_tokens,
        bonus_tokens, seq_lens, mask_mode, total,
    )  # fmt: skip


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
    check_tree("is_valid_tree", cfg, tree)
    return _is_valid_tree(cfg, tree.parent_list, tree.top_scores_index)


@dataclass(frozen=True, eq=False)
class ChainVerifyConstants(CachedTensors):
    """A chain's verify buffers for ``bs <= max_bs`` rows, on one device: all constant.

    Node ``t`` of a chain sits at depth ``t`` under node ``t - 1``. Shared, read-only.
    """

    config: DraftConfig
    max_bs: int
    retrieve_index: Tensor  # [max_bs, N] row * N + node
    next_token: Tensor  # [max_bs, N] node + 1, -1 for the last node
    next_sibling: Tensor  # [max_bs, N] all -1: a chain has no siblings
    visible: Tensor  # [max_bs, N, N] lower triangle: a node sees itself and every earlier node
    bitpacked: Tensor  # [max_bs * N] visible, bit-packed: 2**(t + 1) - 1 (empty when N > 32)
    depth: Tensor  # [N] position offsets 0..N-1

    def _expected(self) -> dict[str, Tensor]:
        return _chain_verify_tensors(self.config, self.max_bs, self.depth.device)


def chain_verify_constants(
    cfg: DraftConfig, *, max_bs: int, device: torch.device
) -> ChainVerifyConstants:
    """The memoized :class:`ChainVerifyConstants` of a chain config (arguments pre-checked)."""
    key = ("chain_verify", cfg, max_bs, device)
    return memoized(
        key, lambda: ChainVerifyConstants(cfg, max_bs, **_chain_verify_tensors(cfg, max_bs, device))
    )


def _chain_verify_tensors(cfg: DraftConfig, max_bs: int, device: torch.device) -> dict[str, Tensor]:
    n = cfg.num_draft_tokens
    node = torch.arange(n, device=device)  # [N]
    next_token = torch.where(node + 1 < n, node + 1, -1)  # [N]
    visible = (node.unsqueeze(1) >= node).repeat(max_bs, 1, 1)  # [max_bs, N, N]
    return {
        "retrieve_index": torch.arange(max_bs * n, device=device).view(max_bs, n),
        "next_token": next_token.repeat(max_bs, 1),
        "next_sibling": torch.full((max_bs, n), -1, device=device),
        "visible": visible,
        # BITPACKED holds at most 32 nodes; wider chains keep an empty placeholder.
        "bitpacked": bitpack(visible) if n <= 32 else node[:0],
        "depth": node,
    }


def _build_chain_verify(
    constants: ChainVerifyConstants,
    draft_tokens: Tensor,
    bonus_tokens: Tensor,
    seq_lens: Tensor,
    mask_mode: MaskMode,
    total: int,
) -> VerifyTree:
    bs = draft_tokens.shape[0]
    n = constants.depth.shape[0]
    if mask_mode is MaskMode.BITPACKED:
        mask = constants.bitpacked[: bs * n]  # [bs * N], cached
    else:
        mask = layout_mask(constants.visible[:bs], seq_lens, mask_mode, total)
    return VerifyTree(
        draft_tokens=verify_tokens(bonus_tokens, draft_tokens),
        positions=(seq_lens.unsqueeze(1) + constants.depth).flatten(),  # [bs * N]
        tree_mask=mask,
        retrieve_index=constants.retrieve_index[:bs],
        retrieve_next_token=constants.next_token[:bs],
        retrieve_next_sibling=constants.next_sibling[:bs],
    )


def _build_verify_tree(
    cfg: DraftConfig,
    parent_list: Tensor,
    top_scores_index: Tensor,
    draft_tokens: Tensor,
    bonus_tokens: Tensor,
    seq_lens: Tensor,
    mask_mode: MaskMode,
    total: int,
) -> VerifyTree:
    parent = parent_nodes(cfg, parent_list, top_scores_index)  # [bs, N]
    visible, depth = ancestor_walk(parent, cfg.num_steps)  # [bs, N, N], [bs, N]
    next_token, next_sibling = retrieve_links(parent)  # [bs, N] each
    return VerifyTree(
        draft_tokens=verify_tokens(bonus_tokens, draft_tokens),
        positions=(seq_lens.unsqueeze(1) + depth).flatten(),  # [bs * N]
        tree_mask=layout_mask(visible, seq_lens, mask_mode, total),
        retrieve_index=flat_node_index(parent),
        retrieve_next_token=next_token,
        retrieve_next_sibling=next_sibling,
    )


def _is_valid_tree(cfg: DraftConfig, parent_list: Tensor, top_scores_index: Tensor) -> Tensor:
    parent = parent_nodes(cfg, parent_list, top_scores_index)  # [bs, N]
    # Climb num_steps times from every node; -1 (no parent found) and 0 (root) are kept.
    cur = parent
    for _ in range(cfg.num_steps - 1):
        cur = torch.where(cur > 0, parent.gather(1, cur.clamp(min=0)), cur)
    in_range = (top_scores_index >= 0) & (top_scores_index < cfg.num_candidates)  # [bs, N-1]
    return in_range.all(1) & (cur[:, 1:] == 0).all(1)  # [bs]


def verify_tokens(bonus_tokens: Tensor, draft_tokens: Tensor) -> Tensor:
    """``[bonus, d_1, .., d_{N-1}]`` per request, flattened: ``[bs], [bs, N-1] -> [bs * N]``."""
    return torch.cat([bonus_tokens.unsqueeze(1), draft_tokens], dim=1).flatten()


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
        linked = torch.full_like(sel, -1)  # a one-step draft has no parent table
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
        cur = torch.where(active, up, cur)
    return visible, depth


def retrieve_links(parent: Tensor) -> tuple[Tensor, Tensor]:
    """First-child and next-sibling links, children in ascending node order.

    Shapes: ``parent [bs, N]`` -> ``next_token, next_sibling [bs, N]`` (-1 for none).
    """
    n = parent.shape[1]
    node = torch.arange(n, device=parent.device)  # [N]
    children = parent.unsqueeze(1) == node.unsqueeze(1)  # [bs, N (parent), N (child)]
    same_parent = (parent.unsqueeze(2) == parent.unsqueeze(1)) & (parent >= 0).unsqueeze(2)
    later = node.unsqueeze(1) < node  # [N, N] column after row
    return first_true(children), first_true(same_parent & later)


def flat_node_index(parent: Tensor) -> Tensor:
    """``row * N + node`` for every node: ``[bs, N]``."""
    bs, n = parent.shape
    return torch.arange(bs * n, device=parent.device).view(bs, n)


def first_true(mask: Tensor) -> Tensor:
    """Index of the first True along the last dim, -1 when none: ``[..., n] -> [...]``."""
    n = mask.shape[-1]
    index = torch.arange(n, device=mask.device)
    first = torch.where(mask, index, n).amin(-1)  # n when none
    return torch.where(first < n, first, -1)


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
    return packed.flatten().to(bitpacked_dtype(n))


def full_mask(visible: Tensor, seq_lens: Tensor, total: int) -> Tensor:
    """Per request an ``N x (seq_len + N)`` block, prefix columns True, concatenated.

    ``total`` must be ``N * sum(seq_lens) + bs * N * N``; cells that would fall outside it
    (a wrong ``seq_lens_sum``) are dropped rather than written out of bounds.

    Shapes: ``visible [bs, N, N]``, ``seq_lens [bs]`` -> ``[total]`` bool.
    """
    n = visible.shape[-1]
    node = torch.arange(n, device=visible.device)  # [N]
    width = seq_lens + n  # [bs] block width
    start = n * (torch.cumsum(width, 0) - width)  # [bs] block offset
    cell = (start + seq_lens).view(-1, 1, 1) + node.view(1, n, 1) * width.view(-1, 1, 1) + node
    cell = cell.clamp(0, total)  # [bs, N, N]; index total is a discarded overflow slot
    mask = torch.ones(total + 1, dtype=torch.bool, device=visible.device)
    return mask.index_put((cell.flatten(),), visible.flatten())[:total]


def full_mask_length(
    where: str, cfg: DraftConfig, seq_lens: Tensor, mode: MaskMode, seq_lens_sum: object
) -> int:
    """The FULL mask's length, ``N * sum(seq_lens) + bs * N * N`` (0 for other layouts)."""
    if mode is not MaskMode.FULL:
        return 0
    if seq_lens_sum is None:
        seq_lens_sum = int(seq_lens.sum())  # the one host sync, avoidable by passing it
    total = _checks.require_int(where, "seq_lens_sum", seq_lens_sum, 0)
    n = cfg.num_draft_tokens
    return n * total + seq_lens.shape[0] * n * n


def verify_fits(
    cfg: Any,
    tree: Any,
    bonus_tokens: Any,
    seq_lens: Any,
    mode: Any,
    device: torch.device | None = None,
) -> bool:
    """Fast, non-raising form of :func:`check_verify_inputs` (and of the device check)."""
    try:
        top = tree.top_scores_index
        bs, dev = top.shape[0], top.device
        n = cfg.num_draft_tokens
        nodes = torch.Size((bs, n - 1))
        rows = (torch.Size((bs,)), _checks.INT64, dev, _checks.STRIDED)
        return (
            type(cfg) is DraftConfig
            and type(tree) is DraftTree
            and type(mode) is MaskMode
            and (mode is not MaskMode.BITPACKED or n <= 32)
            and _checks.signature(top) == (nodes, _checks.INT64, dev, _checks.STRIDED)
            and _checks.signature(tree.draft_tokens) == (nodes, _checks.INT64, dev, _checks.STRIDED)
            and tree.parent_list.shape == (bs, cfg.parent_width)
            and _checks.signature(tree.parent_list)[1:] == (_checks.INT64, dev, _checks.STRIDED)
            and _checks.signature(bonus_tokens) == rows
            and _checks.signature(seq_lens) == rows
            and (device is None or dev == device)
        )
    except (AttributeError, IndexError, TypeError):
        return False


def check_tree(where: str, cfg: object, tree: object) -> DraftTree:
    cfg = _checks.require_config(where, cfg)
    if not isinstance(tree, DraftTree):
        raise TypeError(f"{where}: tree must be a DraftTree, got {type(tree).__name__}")
    top = _checks.require_rank(
        where, "tree.top_scores_index", tree.top_scores_index, "[bs, N - 1]", 2
    )
    bs, device = top.shape[0], top.device
    shape = (bs, cfg.num_draft_tokens - 1)
    _checks.require_index(where, "tree.top_scores_index", top, "[bs, N - 1]", shape)
    _checks.require_index(where, "tree.draft_tokens", tree.draft_tokens, "[bs, N - 1]", shape)
    parents = _checks.require_index(
        where, "tree.parent_list", tree.parent_list, "[bs, parent_width]", (bs, cfg.parent_width)
    )
    for name, tensor in (("tree.draft_tokens", tree.draft_tokens), ("tree.parent_list", parents)):
        _checks.require_device(where, name, tensor, device, "tree.top_scores_index")
    return tree


def check_verify_inputs(
    where: str, cfg: object, tree: object, bonus_tokens: object, seq_lens: object, mode: object
) -> None:
    tree = check_tree(where, cfg, tree)
    if not isinstance(mode, MaskMode):
        raise TypeError(f"{where}: mask_mode must be a MaskMode, got {type(mode).__name__}")
    n = tree.top_scores_index.shape[1] + 1
    if mode is MaskMode.BITPACKED:
        try:
            bitpacked_dtype(n)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
    bs, device = tree.top_scores_index.shape[0], tree.top_scores_index.device
    for name, value in (("bonus_tokens", bonus_tokens), ("seq_lens", seq_lens)):
        tensor = _checks.require_index(where, name, value, "[bs]", (bs,))
        _checks.require_device(where, name, tensor, device, "the tree")
