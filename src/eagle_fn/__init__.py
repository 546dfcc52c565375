"""eagle_fn: EAGLE speculative-decoding draft organization as pure PyTorch functions."""

from .config import DraftConfig
from .constants import ChainConstants, chain_constants, check_constants
from .organize import DraftTree, organize_chain, organize_multilayer, organize_tree
from .sampling import Uniforms, draw_uniforms, target_probs_from_logits, verify_sampling
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
    "Uniforms",
    "VerifyTree",
    "build_verify_tree",
    "chain_constants",
    "check_constants",
    "draw_uniforms",
    "is_valid_tree",
    "organize_chain",
    "organize_multilayer",
    "organize_tree",
    "select_top_k",
    "target_probs_from_logits",
    "verify_greedy",
    "verify_sampling",
]
