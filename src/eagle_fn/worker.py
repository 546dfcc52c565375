"""DraftOrganizer: a config, its constants and a table of paths; one guard picks the path."""

from __future__ import annotations

import warnings
from typing import Any, cast

import torch
from torch import Tensor
from torch.compiler import is_compiling
from typing_extensions import Unpack  # in typing from Python 3.11; torch depends on it

from . import chain, layout, organize
from ._backend import resolve_backend
from ._compile import Path, path_functions
from ._modes import compiled_paths
from .arguments import as_device, require_config, require_int
from .config import DraftConfig
from .types import DraftTree, MaxBatchWarning, Tensors, VerifyOptions, VerifyTree

# Each path: its torch function, the contract naming its batch dims, the chain constants it
# slices (if any), the ints that vary per call, and its kernel (eagle_fn.kernels), if any.
ORGANIZED, VERIFY = chain.chain_constants, chain.chain_verify_constants
PATHS = {
    "chain": Path(chain.chain_core, chain.CHAIN, ORGANIZED),
    "chain_steps": Path(chain.chain_steps_core, organize.ORGANIZE_TREE, ORGANIZED),
    "multilayer": Path(organize.multilayer_core, organize.MULTILAYER),
    "tree": Path(organize.tree_core, organize.ORGANIZE_TREE, kernel="tree_core"),
    "chain_verify": Path(chain.chain_verify_core, layout.BUILD_VERIFY, VERIFY, ints=("total",)),
    "verify": Path(layout.verify_core, layout.BUILD_VERIFY, ints=("total",), kernel="verify_core"),
}
# Each method: its checks, its general path, and the chain path that replaces it, which takes
# its constants and a slice of the checked arguments (topk_index; token_list; draft_tokens on).
ROUTES: dict[str, tuple[Any, str, str, slice]] = {
    "organize": (organize.multilayer_args, "multilayer", "chain", slice(2, 3)),
    "organize_steps": (organize.tree_args, "tree", "chain_steps", slice(2, 3)),
    "build_verify": (layout.verify_args, "verify", "chain_verify", slice(3, None)),
}


class DraftOrganizer:
    """The thin stateful front of eagle_fn for a serving engine's draft loop (semantics §6).

    A chain config with ``bs <= max_bs`` takes the chain path (cached constants, handed out as
    shared read-only views; no work), anything else the general path, with identical values.
    ``compile`` and ``backend`` override ``EAGLE_FN_COMPILE`` and ``EAGLE_FN_BACKEND``."""

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
        return cast(DraftTree, self._route("organize", topk_p, topk_index))

    def organize_steps(
        self, score_list: Tensors, token_list: Tensors, parents_list: Tensors
    ) -> DraftTree:
        """A draft loop's per-step lists organized, as :func:`~eagle_fn.organize_tree` would."""
        return cast(DraftTree, self._route("organize_steps", score_list, token_list, parents_list))

    def build_verify(
        self, tree: DraftTree, bonus_tokens: Tensor, seq_lens: Tensor, **opts: Unpack[VerifyOptions]
    ) -> VerifyTree:
        """``tree`` laid out as :func:`~eagle_fn.build_verify_tree` would, with its keywords."""
        return cast(VerifyTree, self._route("build_verify", tree, bonus_tokens, seq_lens, **opts))

    def _route(self, method: str, *args: Any, **options: Any) -> Any:
        """The one guard; no warning where dynamo traces (it cannot trace ``warnings.warn``)."""
        checks, general, chain_path, taken = ROUTES[method]
        where = f"DraftOrganizer.{method}"
        checked = checks(self.config, *args, **options, where=where, **self._site)
        lead = checked[1][0] if isinstance(checked[1], (list, tuple)) else checked[1]
        bs, is_chain = lead.shape[0], chain_path in self._constants  # every tensor has bs
        if is_chain and bs > self.max_bs and not self._warned and not is_compiling():
            self._warned = True
            warnings.warn(MaxBatchWarning.about(bs, self.max_bs), stacklevel=3)
        if is_chain and bs <= self.max_bs:
            return self._fns[chain_path](self._constants[chain_path], *checked[taken])
        return self._fns[general](*checked)
