"""eagle_fn: EAGLE speculative-decoding draft organization and verification as PyTorch functions."""

from ._memo import check_constants
from .chain import ChainConstants, chain_constants, organize_chain
from .config import DraftConfig
from .layout import build_verify_tree, is_valid_tree
from .organize import organize_multilayer, organize_tree
from .probs import Uniforms, draw_uniforms, target_probs_from_logits
from .sampling import verify_sampling
from .selection import select_top_k
from .types import (
    DraftStep,
    DraftTree,
    GreedyVerdict,
    MaskMode,
    MaxBatchWarning,
    VerifyOptions,
    VerifyTree,
)
from .verify import verify_greedy
from .worker import DraftOrganizer

__version__ = "0.2.0"

__all__ = [
    "ChainConstants",
    "DraftConfig",
    "DraftOrganizer",
    "DraftStep",
    "DraftTree",
    "GreedyVerdict",
    "MaskMode",
    "MaxBatchWarning",
    "Uniforms",
    "VerifyOptions",
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
