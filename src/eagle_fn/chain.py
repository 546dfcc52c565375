"""The chain draft (topk = 1): its cached device constants and both builders from them.

A chain's organization and most of its verify layout are constants. They are built once
per ``(config, max_bs, device)`` (``repeat``, not ``expand``: kernels read raw memory),
never rebound (a captured graph may hold their addresses) and handed out as row slices:
cut on an eager call's first use of a bs and kept (a dict look-up costs a fraction of a
slice), with a symbolic bs inside a compiled graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.compiler import is_dynamo_compiling

from ._forwarding import cut, forwarding
from ._memo import CachedTensors, faking, memoized
from .arguments import as_device, require_config, require_int, require_type
from .config import DraftConfig
from .contracts import Arg, contract
from .layout import assemble, bitpack, layout_mask, verify_core
from .types import DraftTree, MaskMode, Tensors, VerifyTree

CHAIN = contract("organize_chain", topk_index=Arg("[bs, num_steps]"))


class RowViews(CachedTensors):
    """Cached constants handed out as their first ``bs`` rows.

    :meth:`cut` names the views; ``rows[bs]`` keeps them from an eager call's first use of
    ``bs`` on, so later calls look them up instead of slicing. They are not cut up front: at
    a ``max_bs`` of 65536 that took seconds and hundreds of MB of view objects. Inside a
    compiled graph :meth:`at` cuts them with the graph's symbolic bs: one graph for every bs.
    """

    config: DraftConfig
    max_bs: int
    rows: dict[int, tuple[Tensor, ...]]  # set once in __post_init__; not a dataclass field

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", {})
        super().__post_init__()

    def cut(self, bs: Any) -> tuple[Tensor, ...]:
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        # By reference: unpickling (or copying) finds that process's cached set. A copy with
        # tensors of its own would be outside the cache, where check_constants never looks.
        device = next(iter(self._tensors().values())).device
        return _cached, (type(self).__name__, self.config, self.max_bs, device)

    def at(self, bs: Any) -> tuple[Tensor, ...]:
        """The views for ``bs`` rows: kept when eager, cut when compiling or symbolic."""
        if is_dynamo_compiling() or not isinstance(bs, int):  # a SymInt (make_fx) is unhashable
            return self.cut(bs)
        views = self.rows.get(bs)
        if views is None:
            if not 0 <= bs <= self.max_bs:  # callers check first; a slice would just stop short
                raise IndexError(f"{type(self).__name__}: bs = {bs} is outside 0..{self.max_bs}")
            if faking():  # fake views, kept, would reach every real caller after the trace
                return self.cut(bs)
            views = self.rows.setdefault(bs, self.cut(bs))  # atomic: racing threads share one
        return views

    def check(self) -> None:
        """As :meth:`CachedTensors.check`, and the views handed out still show the constants:
        a caller could rebind one (``view.data = ...``) or reshape it in place."""
        super().check()
        for bs, views in list(self.rows.items()):
            for view, fresh in zip(views, self.cut(bs), strict=True):
                if _placement(view) != _placement(fresh):
                    raise RuntimeError(
                        f"{type(self).__name__}.rows[{bs}] no longer views the constants: "
                        f"cached constants are shared and must be treated as read-only"
                    )


def _placement(t: Tensor) -> tuple[object, ...]:
    """Where a view reads: its memory, shape and strides."""
    return t.data_ptr(), t.shape, t.stride()


@dataclass(frozen=True, eq=False)
class ChainConstants(RowViews):
    """The organization of a chain draft, precomputed on one device for ``bs <= max_bs``.

    Contiguous int64 (made with ``repeat``, not ``expand``: downstream kernels read raw
    memory) and shared by every caller with the same key: treat them as read-only.
    ``rows[bs]``, from an eager call's first use of ``bs`` on, holds the views eager calls
    return: ``(parents[:bs], score_indices[:bs])``.
    """

    config: DraftConfig
    max_bs: int
    parents: Tensor  # [max_bs, parent_width] arange(-1, S - 1) per row
    score_indices: Tensor  # [max_bs, num_steps] arange(S) per row

    def cut(self, bs: Any) -> tuple[Tensor, ...]:
        return self.parents[:bs], self.score_indices[:bs]  # [bs, parent_width], [bs, S]

    def _expected(self) -> dict[str, Tensor]:
        return _organize_tensors(self.config, self.max_bs, self.parents.device)


@dataclass(frozen=True, eq=False)
class ChainVerifyConstants(RowViews):
    """A chain's verify buffers for ``bs <= max_bs`` rows: node ``t`` sits under ``t - 1``.

    ``rows[bs]``, from an eager call's first use of ``bs`` on, holds the first ``bs`` rows
    of the links, of ``visible`` and of ``bitpacked`` (``bs * N`` entries).
    """

    config: DraftConfig
    max_bs: int
    retrieve_index: Tensor  # [max_bs, N] row * N + node
    next_token: Tensor  # [max_bs, N] node + 1, -1 for the last node
    next_sibling: Tensor  # [max_bs, N] all -1: a chain has no siblings
    visible: Tensor  # [max_bs, N, N] lower triangle: a node sees itself and every earlier one
    bitpacked: Tensor  # [max_bs * N] visible, bit-packed: 2**(t + 1) - 1 (empty when N > 32)
    depth: Tensor  # [N] position offsets 0..N-1

    def cut(self, bs: Any) -> tuple[Tensor, ...]:
        links = (self.retrieve_index[:bs], self.next_token[:bs], self.next_sibling[:bs])
        n = self.depth.shape[0]
        return *links, self.visible[:bs], self.bitpacked[: bs * n]  # [bs, N] x3, [bs, N, N], [bs*N]

    def _expected(self) -> dict[str, Tensor]:
        return _verify_tensors(self.config, self.max_bs, self.depth.device)


def chain_constants(cfg: DraftConfig, *, max_bs: int, device: torch.device | str) -> ChainConstants:
    """The cached :class:`ChainConstants` of a chain config on ``device``.

    The same arguments return the same object and tensors every time (also from many threads
    at once), so a captured graph holding their addresses never sees them rebound.

    Args:
        cfg: a chain configuration (``topk == 1``).
        max_bs: the largest batch the constants serve, ``>= 1``.
        device: a ``torch.device`` or a string such as ``"cpu"``.

    Shapes: ``parents [max_bs, parent_width]``, ``score_indices [max_bs, num_steps]``.

    Example:
        >>> constants = chain_constants(DraftConfig.chain(3), max_bs=2, device="cpu")
        >>> constants.parents.tolist(), constants.score_indices.tolist()
        ([[-1, 0, 1], [-1, 0, 1]], [[0, 1, 2], [0, 1, 2]])
        >>> constants is chain_constants(DraftConfig.chain(3), max_bs=2, device="cpu")
        True
    """
    where = "chain_constants"
    cfg = require_config(where, cfg)
    if not cfg.is_chain:
        raise ValueError(f"{where}: cfg must be a chain config (topk == 1), got topk = {cfg.topk}")
    require_int(where, "max_bs", max_bs, 1)
    dev = as_device(where, device)
    key = ("chain", cfg, max_bs, dev)
    return memoized(key, lambda: ChainConstants(cfg, max_bs, **_organize_tensors(cfg, max_bs, dev)))


def chain_verify_constants(
    cfg: DraftConfig, *, max_bs: int, device: torch.device
) -> ChainVerifyConstants:
    """The memoized :class:`ChainVerifyConstants` of a chain config (arguments pre-checked)."""
    key = ("chain_verify", cfg, max_bs, device)
    return memoized(
        key, lambda: ChainVerifyConstants(cfg, max_bs, **_verify_tensors(cfg, max_bs, device))
    )


def _cached(kind: str, cfg: DraftConfig, max_bs: int, device: torch.device) -> RowViews:
    """The cached constant set of class ``kind`` for these arguments: what unpickling one
    returns."""
    build = chain_constants if kind == "ChainConstants" else chain_verify_constants
    return build(cfg, max_bs=max_bs, device=device)


def organize_chain(constants: ChainConstants, topk_index: Tensor) -> DraftTree:
    """The organized chain draft, from cached constants: no computation at all.

    Equals :func:`~eagle_fn.organize_tree` on the same chain. The returned ``parent_list``
    and ``top_scores_index`` are views of shared constants and ``draft_tokens`` is
    ``topk_index`` itself: treat all three as read-only.

    Args:
        constants: :func:`chain_constants` of a chain config.
        topk_index: the chain's token per step, int64, ``bs <= constants.max_bs``.

    Shapes: ``topk_index [bs, num_steps]`` -> ``parent_list [bs, parent_width]``,
    ``top_scores_index [bs, num_steps]``, ``draft_tokens [bs, num_steps]``.

    Example:
        >>> constants = chain_constants(DraftConfig.chain(3), max_bs=4, device="cpu")
        >>> tree = organize_chain(constants, torch.tensor([[11, 0, 6], [5, 10, 3]]))
        >>> tree.parent_list.tolist(), tree.top_scores_index.tolist()
        ([[-1, 0, 1], [-1, 0, 1]], [[0, 1, 2], [0, 1, 2]])
    """
    return chain_core(*chain_args(constants, topk_index))


def chain_args(constants: Any, topk_index: Any) -> tuple[ChainConstants, Tensor]:
    """:func:`organize_chain`'s arguments, checked, as :func:`chain_core` takes them."""
    require_type("organize_chain", "constants", constants, ChainConstants, "ChainConstants")
    CHAIN(constants.config, topk_index, device=constants.parents.device, device_label="constants")
    if (bs := topk_index.shape[0]) > constants.max_bs:
        rows = f"bs = {bs} rows, more than constants.max_bs = {constants.max_bs}"
        raise ValueError(f"organize_chain: topk_index has {rows}")
    return constants, topk_index


def chain_core(constants: ChainConstants, topk_index: Tensor) -> DraftTree:
    """:func:`organize_chain` without its checks: two row slices, the tokens handed through."""
    parents, score_indices = constants.at(topk_index.shape[0])  # [bs, parent_width], [bs, S]
    return DraftTree(parents, score_indices, topk_index)


def chain_steps_core(constants: ChainConstants, token_list: Tensors) -> DraftTree:
    """The chain organized from a draft loop's per-step token entries: one ``cat``."""
    return chain_core(constants, torch.cat(token_list, dim=1))  # [bs, num_steps]


def _chain_verify(constants: ChainVerifyConstants, *request: Any) -> VerifyTree:
    """A chain's verify tree: constants but for positions, the token layout and FULL's prefix.
    ``request``: :func:`~eagle_fn.layout.verify_core`'s arguments after the tree's."""
    draft_tokens, bonus_tokens, seq_lens, mask_mode, total = request
    index, next_token, next_sibling, visible, bitpacked = constants.at(draft_tokens.shape[0])
    if mask_mode is MaskMode.BITPACKED:
        mask = bitpacked  # [bs * N], cached
    else:
        mask = layout_mask(visible, seq_lens, mask_mode, total)
    links = (index, next_token, next_sibling)  # [bs, N] each
    return assemble(bonus_tokens, draft_tokens, seq_lens, constants.depth, mask, links)


# The chain's verify path takes the general one's checked arguments after the tree's three
# (the worker hands it that slice), so its parameters are written from verify_core's.
VERIFY_REQUEST = slice(3, None)
chain_verify_core = forwarding(
    "chain_verify_core",
    cut(verify_core, VERIFY_REQUEST, "constants"),
    _chain_verify,
    doc=_chain_verify.__doc__,
)


def _organize_tensors(cfg: DraftConfig, max_bs: int, device: torch.device) -> dict[str, Tensor]:
    parents = torch.arange(-1, cfg.parent_width - 1, device=device)  # [parent_width]
    score_indices = torch.arange(cfg.num_steps, device=device)  # [S]
    return {"parents": parents.repeat(max_bs, 1), "score_indices": score_indices.repeat(max_bs, 1)}


def _verify_tensors(cfg: DraftConfig, max_bs: int, device: torch.device) -> dict[str, Tensor]:
    n = cfg.num_draft_tokens
    node = torch.arange(n, device=device)  # [N]
    next_token = torch.where(node + 1 < n, node + 1, -1)  # [N]
    visible = (node.unsqueeze(1) >= node).repeat(max_bs, 1, 1)  # [max_bs, N, N]
    return {
        "retrieve_index": torch.arange(max_bs * n, device=device).view(max_bs, n),  # [max_bs, N]
        "next_token": next_token.repeat(max_bs, 1),  # [max_bs, N]
        "next_sibling": torch.full((max_bs, n), -1, device=device),  # [max_bs, N]
        "visible": visible,
        # BITPACKED holds at most 32 nodes; wider chains keep an empty placeholder.
        "bitpacked": bitpack(visible) if n <= 32 else node[:0],  # [max_bs * N]
        "depth": node,
    }
