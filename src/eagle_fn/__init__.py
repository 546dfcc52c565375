"""eagle_fn: EAGLE speculative-decoding draft organization as pure PyTorch functions."""

from .config import DraftConfig
from .constants import ChainConstants, chain_constants, check_constants
from .organize import DraftTree, organize_chain, organize_multilayer, organize_tree
from .steps import DraftStep, select_top_k
from .verify import GreedyVerdict, verify_greedy
from .verify_tree import MaskMode, VerifyTree, build_verify_tree, is_valid_tree
from .worker import DraftOrganizer

__all__ = [
    "ChainConstants",
    "DraftConfig",
    "DraftOrganizer",
    "DraftStep",
    "DraftTree",
    "GreedyVerdict",
    "MaskMode",
    "VerifyTree",
    "build_verify_tree",
    "chain_constants",
    "check_constants",
    "is_valid_tree",
    "organize_chain",
    "organize_multilayer",
    "organize_tree",
    "select_top_k",
    "verify_greedy",
]
