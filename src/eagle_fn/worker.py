"""DraftOrganizer: a config, its constants and a table of paths; one guard picks the path."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from ._backend import resolve_backend
from ._compile import Path, compiled_paths, path_functions
from .arguments import as_device, require_config, require_int
from .chain import (
    CHAIN,
    chain_constants,
    chain_core,
    chain_steps_core,
    chain_verify_constants,
    chain_verify_core,
)
from .config import DraftConfig
from .layout import BUILD_VERIFY, check_verify, full_mask_length, verify_core
from .organize import MULTILAYER, ORGANIZE_TREE, check_multilayer, multilayer_core, tree_core
from .types import DraftTree, MaskMode, Tensors, VerifyTree

# Each path: its torch function, the contract giving its batch dims, whether it is a chain
# path (it takes cached constants; batch <= max_bs), and the kernels' function, if any.
PATHS = {
    "chain": Path(chain_core, CHAIN, chain=True),
    "chain_steps": Path(chain_steps_core, ORGANIZE_TREE, chain=True),
    "multilayer": Path(multilayer_core, MULTILAYER),
    "tree": Path(tree_core, ORGANIZE_TREE, kernel="tree_core"),
    "chain_verify": Path(chain_verify_core, BUILD_VERIFY, chain=True, ints=("total",)),
    "verify": Path(verify_core, BUILD_VERIFY, ints=("total",), kernel="verify_core"),
}


class MaxBatchWarning(UserWarning):
    """A chain worker got a batch above its ``max_bs`` and took the general path."""


class DraftOrganizer:
    """The thin stateful front of eagle_fn for a serving engine's draft loop.

    Holds the config, the chain constants and each path's function (compiled or eager, torch
    or Triton), and takes the zero-computation chain path when the config is a chain and the
    batch fits ``max_bs``; otherwise the general path, which gives identical values.

    Args:
        cfg: the draft configuration.
        max_bs: the largest batch the chain constants serve, ``>= 1``.
        device: where the constants live: a ``torch.device`` or a string such as ``"cpu"``.
        compile: ``True``/``False`` compiles every/no path; ``None`` reads ``EAGLE_FN_COMPILE``.
        backend: ``"torch"``, ``"triton"`` or ``"auto"``; ``None`` reads ``EAGLE_FN_BACKEND``.

    Example:
        >>> worker = DraftOrganizer(DraftConfig.chain(3), max_bs=8, device="cpu", compile=False)
        >>> tree = worker.organize(torch.rand(2, 3), torch.tensor([[11, 0, 6], [5, 10, 3]]))
        >>> tree.parent_list.tolist(), tree.draft_tokens.tolist()
        ([[-1, 0, 1], [-1, 0, 1]], [[11, 0, 6], [5, 10, 3]])
    """

    def __init__(
        self,
        cfg: DraftConfig,
        *,
        max_bs: int,
        device: torch.device | str,
        compile: bool | None = None,
        backend: str | None = None,
    ) -> None:
        require_config("DraftOrganizer", cfg)
        self.max_bs = require_int("DraftOrganizer", "max_bs", max_bs, 1)
        self.device = as_device("DraftOrganizer", device)
        self.compiled = compiled_paths(compile, self.device, frozenset(PATHS))
        self.backend = resolve_backend(backend, self.device)
        self._warned = False
        self._wheres = {  # the keyword arguments of the checks, built once
            method: {"where": f"DraftOrganizer.{method}", "device": self.device}
            | {"device_label": "the worker"}
            for method in ("organize", "organize_steps", "build_verify")
        }
        self.reconfigure(cfg)

    def reconfigure(self, cfg: DraftConfig) -> None:
        """Switches to ``cfg``; constants and functions come from the shared caches."""
        self.config = require_config("DraftOrganizer.reconfigure", cfg)
        self._fns = path_functions(PATHS, cfg, self.max_bs, self.compiled, self.backend)
        chain, bound = cfg.is_chain, dict[str, Any](max_bs=self.max_bs, device=self.device)
        self._constants = chain_constants(cfg, **bound) if chain else None
        self._verify_constants = chain_verify_constants(cfg, **bound) if chain else None

    def organize(self, topk_p: Tensor, topk_index: Tensor) -> DraftTree:
        """Organizes a multi-layer draft, ``[bs, num_steps]`` each, like
        :func:`~eagle_fn.organize_multilayer` (or, on the chain path,
        :func:`~eagle_fn.organize_chain`)."""
        check_multilayer(self.config, topk_p, topk_index, **self._where("organize"))
        if self._on_chain(topk_index.shape[0]):
            return self._fns["chain"](self._constants, topk_index)
        return self._fns["multilayer"](self.config, topk_p, topk_index)

    def organize_steps(
        self, score_list: Tensors, token_list: Tensors, parents_list: Tensors
    ) -> DraftTree:
        """Organizes a draft loop's per-step lists like :func:`~eagle_fn.organize_tree`."""
        lists = (score_list, token_list, parents_list)
        if not ORGANIZE_TREE.fits(self.config, *lists, device=self.device):
            ORGANIZE_TREE.check(self.config, *lists, **self._where("organize_steps"))
        if self._on_chain(score_list[0].shape[0]):
            return self._fns["chain_steps"](self._constants, token_list)
        return self._fns["tree"](self.config, *lists)

    def build_verify(
        self,
        tree: DraftTree,
        bonus_tokens: Tensor,
        seq_lens: Tensor,
        *,
        mask_mode: MaskMode = MaskMode.QLEN,
        seq_lens_sum: int | None = None,
    ) -> VerifyTree:
        """Lays ``tree`` out for the verify pass like :func:`~eagle_fn.build_verify_tree`."""
        where = self._where("build_verify")
        check_verify(self.config, tree, bonus_tokens, seq_lens, mask_mode, **where)
        total = full_mask_length(where["where"], self.config, seq_lens, mask_mode, seq_lens_sum)
        if self._on_chain(seq_lens.shape[0]):
            tokens = tree.draft_tokens
            return self._fns["chain_verify"](
                self._verify_constants, tokens, bonus_tokens, seq_lens, mask_mode, total
            )
        return self._fns["verify"](self.config, *tree, bonus_tokens, seq_lens, mask_mode, total)

    def _on_chain(self, bs: int) -> bool:
        """The guard: a chain config within ``max_bs`` takes the chain path."""
        if not self.config.is_chain or bs <= self.max_bs:
            return self.config.is_chain
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"DraftOrganizer: bs = {bs} exceeds max_bs = {self.max_bs}, so this chain "
                f"batch takes the general path (tens of ops instead of none); build the "
                f"worker with max_bs >= {bs} to keep the fast path. Warned once per worker.",
                MaxBatchWarning,
                stacklevel=3,
            )
        return False

    def _where(self, method: str) -> dict[str, Any]:
        return self._wheres[method]
