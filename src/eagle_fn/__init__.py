"""eagle_fn: EAGLE speculative-decoding draft organization as pure PyTorch functions."""

from .config import DraftConfig
from .constants import ChainConstants, chain_constants, check_constants
from .organize import DraftTree, organize_chain, organize_multilayer, organize_tree
from .steps import DraftStep, select_top_k
from .worker import DraftOrganizer

__all__ = [
    "ChainConstants",
    "DraftConfig",
    "DraftOrganizer",
    "DraftStep",
    "DraftTree",
    "chain_constants",
    "check_constants",
    "organize_chain",
    "organize_multilayer",
    "organize_tree",
    "select_top_k",
]
