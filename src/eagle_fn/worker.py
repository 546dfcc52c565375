"""DraftOrganizer: a config, its constants and a table of paths; one guard picks the path."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from . import chain, layout, organize
from ._backend import resolve_backend
from ._compile import Path, path_functions
from ._modes import compiled_paths
from .arguments import as_device, require_config, require_int
from .config import DraftConfig
from .types import DraftTree, MaskMode, MaxBatchWarning, Tensors, VerifyTree

# Each path: its torch function, its contract, chain constants, per-call ints, kernel (if any).
ORGANIZED, VERIFY = chain.chain_constants, chain.chain_verify_constants
PATHS = {
    "chain": Path(chain.chain_core, chain.CHAIN, ORGANIZED),
    "chain_steps": Path(chain.chain_steps_core, organize.ORGANIZE_TREE, ORGANIZED),
    "multilayer": Path(organize.multilayer_core, organize.MULTILAYER),
    "tree": Path(organize.tree_core, organize.ORGANIZE_TREE, kernel="tree_core"),
    "chain_verify": Path(chain.chain_verify_core, layout.BUILD_VERIFY, VERIFY, ints=("total",)),
    "verify": Path(layout.verify_core, layout.BUILD_VERIFY, ints=("total",), kernel="verify_core"),
}
# Each method: its checks, general path, and chain path, which takes a slice of checked args.
ROUTES: dict[str, tuple[Any, str, str, slice]] = {
    "organize": (organize.multilayer_args, "multilayer", "chain", slice(2, 3)),
    "organize_steps": (organize.tree_args, "tree", "chain_steps", slice(2, 3)),
    "build_verify": (layout.verify_args, "verify", "chain_verify", chain.VERIFY_REQUEST),
}


class DraftOrganizer:
    """The thin stateful front of eagle_fn for a serving engine's draft loop (semantics §6):
    a chain config within ``max_bs`` takes cached constants (shared read-only views), the
    rest the general path, with identical values. ``compile`` and ``backend`` override
    ``EAGLE_FN_COMPILE`` and ``EAGLE_FN_BACKEND``."""

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
        self.backend = resolve_backend(backend, self.device, "DraftOrganizer")
        self.compiled = compiled_paths(compile, self.device, PATHS, self.backend, "DraftOrganizer")
        self._site, self._warned = {"device": self.device, "device_label": "the worker"}, False
        self.reconfigure(cfg)

    def reconfigure(self, cfg: DraftConfig) -> None:
        """Switches to ``cfg`` (or, failing, keeps the old one); the caches supply the rest."""
        require_config("DraftOrganizer.reconfigure", cfg)
        fns = path_functions(PATHS, cfg, self.max_bs, self.compiled, self.backend)
        made = {n: p.constants for n, p in PATHS.items() if p.constants and cfg.is_chain}
        constants = {n: c(cfg, max_bs=self.max_bs, device=self.device) for n, c in made.items()}
        self.config, self._fns, self._constants = cfg, fns, constants

    def organize(self, topk_p: Tensor, topk_index: Tensor) -> DraftTree:
        """``[bs, num_steps]`` each, organized as :func:`~eagle_fn.organize_multilayer` would."""
        return self._route("organize", topk_p, topk_index)

    def organize_steps(
        self, score_list: Tensors, token_list: Tensors, parents_list: Tensors
    ) -> DraftTree:
        """A draft loop's per-step lists organized, as :func:`~eagle_fn.organize_tree` would."""
        return self._route("organize_steps", score_list, token_list, parents_list)

    def build_verify(
        self,
        tree: DraftTree,
        bonus_tokens: Tensor,
        seq_lens: Tensor,
        *,
        mask_mode: MaskMode = MaskMode.QLEN,
        seq_lens_sum: int | None = None,
    ) -> VerifyTree:
        """``tree`` laid out as :func:`~eagle_fn.build_verify_tree` would, with its keywords."""
        return self._route("build_verify", tree, bonus_tokens, seq_lens, mask_mode, seq_lens_sum)

    def _route(self, method: str, *args: Any) -> Any:
        """The one guard; no warning where dynamo traces (it cannot trace ``warnings.warn``)."""
        checks, general, chain_path, taken = ROUTES[method]
        checked = checks(self.config, *args, where=f"DraftOrganizer.{method}", **self._site)
        lead = checked[1][0] if isinstance(checked[1], (list, tuple)) else checked[1]
        if chain_path in self._constants and lead.shape[0] <= self.max_bs:  # all tensors have bs
            return self._fns[chain_path](self._constants[chain_path], *checked[taken])
        if chain_path in self._constants and not torch.compiler.is_compiling() and not self._warned:
            self._warned = True
            warnings.warn(MaxBatchWarning.about(lead.shape[0], self.max_bs), stacklevel=3)
        return self._fns[general](*checked)
