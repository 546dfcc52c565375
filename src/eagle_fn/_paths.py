"""The worker's two tables (its paths, and the routes of its methods among them) and its state."""

from __future__ import annotations

from typing import Any

import torch

from . import chain, layout, organize
from ._backend import Backend
from ._compile import Path, path_functions
from .config import DraftConfig

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


def worker_state(
    cfg: DraftConfig, max_bs: int, device: torch.device, compiled: frozenset[str], backend: Backend
) -> tuple[DraftConfig, dict[str, Any], dict[str, Any]]:
    """What a worker's calls read, for ``cfg``: the config, each path's function, and the
    chain constants of the paths that take them (none for a tree config)."""
    fns = path_functions(PATHS, cfg, max_bs, compiled, backend)
    made = {n: p.constants for n, p in PATHS.items() if p.constants and cfg.is_chain}
    return cfg, fns, {n: c(cfg, max_bs=max_bs, device=device) for n, c in made.items()}
