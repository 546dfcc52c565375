"""DraftOrganizer: holds a config, its constants and callables, and picks a path by shape."""

from __future__ import annotations

import torch
from torch import Tensor

from . import _checks, _compile
from .config import DraftConfig
from .constants import ChainConstants, chain_constants
from .organize import (
    DraftTree,
    Tensors,
    _check_multilayer,
    _check_steps,
    layers_fit,
    steps_fit,
)
from .verify_tree import (
    ChainVerifyConstants,
    MaskMode,
    VerifyTree,
    chain_verify_constants,
    check_verify_inputs,
    full_mask_length,
    verify_fits,
)


class DraftOrganizer:
    """The thin stateful front of eagle_fn for a serving engine's draft loop.

    Holds the config, the chain constants and the (compiled or eager) organize functions,
    and takes the zero-computation chain path when the config is a chain and the batch fits
    ``max_bs``; otherwise the general path, which gives identical values.

    Args:
        cfg: the draft configuration.
        max_bs: the largest batch the chain constants serve, ``>= 1``.
        device: where the constants live: a ``torch.device`` or a string such as ``"cpu"``.
        compile: ``True``/``False`` to force compiled/eager functions; ``None`` reads
            ``EAGLE_FN_COMPILE`` now (``0``, ``1``, or unset/``auto`` = compiled on CUDA).

    Example:
        >>> worker = DraftOrganizer(DraftConfig.chain(3), max_bs=8, device="cpu", compile=False)
        >>> tree = worker.organize(torch.rand(2, 3), torch.tensor([[11, 0, 6], [5, 10, 3]]))
        >>> tree.parent_list.tolist(), tree.draft_tokens.tolist()
        ([[-1, 0, 1], [-1, 0, 1]], [[11, 0, 6], [5, 10, 3]])
    """

    config: DraftConfig
    max_bs: int
    device: torch.device
    compiled: bool

    def __init__(
        self,
        cfg: DraftConfig,
        *,
        max_bs: int,
        device: torch.device | str,
        compile: bool | None = None,
    ) -> None:
        where = "DraftOrganizer"
        _checks.require_config(where, cfg)
        self.max_bs = _checks.require_int(where, "max_bs", max_bs, 1)
        self.device = _checks.as_device(where, device)
        self.compiled = _compile.resolve(compile, self.device)
        self.reconfigure(cfg)

    def reconfigure(self, cfg: DraftConfig) -> None:
        """Switches to ``cfg``; constants and compiled functions come from the shared caches."""
        self.config = _checks.require_config("DraftOrganizer.reconfigure", cfg)
        self._constants: ChainConstants | None = None
        self._verify_constants: ChainVerifyConstants | None = None
        if cfg.is_chain:
            self._constants = chain_constants(cfg, max_bs=self.max_bs, device=self.device)
            self._verify_constants = chain_verify_constants(
                cfg, max_bs=self.max_bs, device=self.device
            )
        self._fns = _compile.paths(cfg, self.max_bs, enabled=self.compiled)
        # The multi-layer layout has num_steps columns; only chains accept it.
        self._layer_width = cfg.num_steps if cfg.is_chain else -1

    def organize(self, topk_p: Tensor, topk_index: Tensor) -> DraftTree:
        """Organizes a multi-layer draft: one token per step, ``[bs, num_steps]`` each (SPEC §5).

        Shape guard: a chain config with ``bs <= max_bs`` returns the cached constants and
        ``topk_index`` (no computation); anything else runs the general path.
        """
        if not layers_fit(self._layer_width, topk_p, topk_index, self.device):
            where = "DraftOrganizer.organize"
            _check_multilayer(where, self.config, topk_p, topk_index)
            _checks.require_device(where, "topk_index", topk_index, self.device, "the worker")
        if self._constants is not None and topk_index.shape[0] <= self.max_bs:
            return self._fns.chain(self._constants, topk_index)
        return self._fns.multilayer(self.config, topk_p, topk_index)

    def organize_steps(
        self,
        score_list: Tensors,
        token_list: Tensors,
        parents_list: Tensors,
    ) -> DraftTree:
        """Organizes the per-step lists of a draft loop (SPEC §3-4).

        A chain config with ``bs <= max_bs`` returns the cached constants and the tokens
        concatenated; anything else runs :func:`~eagle_fn.organize_tree`.
        """
        if not (
            steps_fit(self.config, score_list, token_list, parents_list)
            and score_list[0].device == self.device
        ):
            where = "DraftOrganizer.organize_steps"
            _check_steps(where, self.config, score_list, token_list, parents_list)
            _checks.require_device(where, "score_list[0]", score_list[0], self.device, "the worker")
        bs = score_list[0].shape[0]
        if self._constants is not None and bs <= self.max_bs:
            return self._fns.chain(self._constants, torch.cat(token_list, dim=1))
        return self._fns.tree(self.config, score_list, token_list, parents_list)

    def build_verify(
        self,
        tree: DraftTree,
        bonus_tokens: Tensor,
        seq_lens: Tensor,
        *,
        mask_mode: MaskMode = MaskMode.QLEN,
        seq_lens_sum: int | None = None,
    ) -> VerifyTree:
        """Lays ``tree`` out for the verify pass, like :func:`~eagle_fn.build_verify_tree`.

        A chain config with ``bs <= max_bs`` serves the retrieve links, the QLEN/BITPACKED
        masks and the position offsets from cached constants and reads only the tree's
        ``draft_tokens`` (a chain's structure is fixed); anything else runs the general path.
        """
        where = "DraftOrganizer.build_verify"
        if not verify_fits(self.config, tree, bonus_tokens, seq_lens, mask_mode, self.device):
            check_verify_inputs(where, self.config, tree, bonus_tokens, seq_lens, mask_mode)
            _checks.require_device(
                where, "tree.top_scores_index", tree.top_scores_index, self.device, "the worker"
            )
        total = full_mask_length(where, self.config, seq_lens, mask_mode, seq_lens_sum)
        if self._verify_constants is not None and seq_lens.shape[0] <= self.max_bs:
            return self._fns.chain_verify(
                self._verify_constants, tree.draft_tokens, bonus_tokens, seq_lens, mask_mode, total
            )
        return self._fns.verify(
            self.config, tree.parent_list, tree.top_scores_index, tree.draft_tokens,
            bonus_tokens, seq_lens, mask_mode, total,
        )  # fmt: skip
