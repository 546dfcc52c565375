"""DraftOrganizer: a config, its constants and a table of paths; one guard picks the path."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from . import chain, layout, organize
from ._backend import resolve_backend
from ._compile import Path, compiled_paths, path_functions
from .arguments import as_device, require_config, require_int
from .config import DraftConfig
from .types import DraftTree, MaxBatchWarning, Tensors, VerifyOptions, VerifyTree

if TYPE_CHECKING:
    from typing_extensions import Unpack  # in typing from Python 3.11

# Each path: its torch function, the contract naming its batch dims, whether it slices the
# cached constants, the ints that vary per call, and its kernel (eagle_fn.kernels), if any.
PATHS = {
    "chain": Path(chain.chain_core, chain.CHAIN, chain=True),
    "chain_steps": Path(chain.chain_steps_core, organize.ORGANIZE_TREE, chain=True),
    "multilayer": Path(organize.multilayer_core, organize.MULTILAYER),
    "tree": Path(organize.tree_core, organize.ORGANIZE_TREE, kernel="tree_core"),
    "chain_verify": Path(chain.chain_verify_core, layout.BUILD_VERIFY, chain=True, ints=("total",)),
    "verify": Path(layout.verify_core, layout.BUILD_VERIFY, ints=("total",), kernel="verify_core"),
}


class DraftOrganizer:
    """The thin stateful front of eagle_fn for a serving engine's draft loop (semantics §6).

    A chain config with ``bs <= max_bs`` takes the chain path (cached constants, no
    computation); anything else the general path, with identical values. ``compile`` and
    ``backend`` override ``EAGLE_FN_COMPILE`` and ``EAGLE_FN_BACKEND``.

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
        self.backend = resolve_backend(backend, self.device)
        self.compiled = compiled_paths(compile, self.device, PATHS, self.backend)
        self._site, self._warned = {"device": self.device, "device_label": "the worker"}, False
        self.reconfigure(cfg)

    def reconfigure(self, cfg: DraftConfig) -> None:
        """Switches to ``cfg``; constants and functions come from the shared caches."""
        self.config = require_config("DraftOrganizer.reconfigure", cfg)
        self._fns = path_functions(PATHS, cfg, self.max_bs, self.compiled, self.backend)
        self._chain, bound = cfg.is_chain, dict[str, Any](max_bs=self.max_bs, device=self.device)
        self._constants = chain.chain_constants(cfg, **bound) if self._chain else None
        self._verify_constants = chain.chain_verify_constants(cfg, **bound) if self._chain else None

    def organize(self, topk_p: Tensor, topk_index: Tensor) -> DraftTree:
        """A multi-layer draft (``[bs, num_steps]`` each) organized, as
        :func:`~eagle_fn.organize_multilayer` or :func:`~eagle_fn.organize_chain` would."""
        where = "DraftOrganizer.organize"
        args = organize.multilayer_args(self.config, topk_p, topk_index, where=where, **self._site)
        if self._on_chain(topk_index.shape[0]):
            return self._fns["chain"](self._constants, topk_index)
        return self._fns["multilayer"](*args)

    def organize_steps(
        self, score_list: Tensors, token_list: Tensors, parents_list: Tensors
    ) -> DraftTree:
        """A draft loop's per-step lists organized, as :func:`~eagle_fn.organize_tree` would."""
        lists, where = (score_list, token_list, parents_list), "DraftOrganizer.organize_steps"
        args = organize.tree_args(self.config, *lists, where=where, **self._site)
        if self._on_chain(score_list[0].shape[0]):
            return self._fns["chain_steps"](self._constants, token_list)
        return self._fns["tree"](*args)

    def build_verify(
        self,
        tree: DraftTree,
        bonus_tokens: Tensor,
        seq_lens: Tensor,
        **options: Unpack[VerifyOptions],
    ) -> VerifyTree:
        """``tree`` laid out for the verify pass, as :func:`~eagle_fn.build_verify_tree` would
        with the same keyword arguments (``mask_mode``, ``seq_lens_sum``)."""
        where = "DraftOrganizer.build_verify"
        args = layout.verify_args(
            self.config, tree, bonus_tokens, seq_lens, **options, where=where, **self._site
        )
        if self._on_chain(seq_lens.shape[0]):
            return self._fns["chain_verify"](self._verify_constants, tree.draft_tokens, *args[4:])
        return self._fns["verify"](*args)

    def _on_chain(self, bs: int) -> bool:
        """The guard: a chain config within ``max_bs`` takes the chain path."""
        if self._chain and bs > self.max_bs and not self._warned:
            self._warned = True
            warnings.warn(MaxBatchWarning.about(bs, self.max_bs), stacklevel=3)
        return self._chain and bs <= self.max_bs
