"""One small valid input for each public entry point: the calls that tests then damage."""

import torch

from eagle_fn import DraftConfig, build_verify_tree, chain_constants, organize_tree
from helpers.drafts import draft_lists, multilayer, step_inputs

TREE_CFG, CHAIN_CFG = DraftConfig(2, 2, 4), DraftConfig.chain(2)
GEN = torch.Generator().manual_seed(0)
LISTS = draft_lists(TREE_CFG, 2, GEN)
TREE = organize_tree(TREE_CFG, *LISTS)
BONUS, SEQ_LENS = torch.tensor([3, 4]), torch.tensor([5, 9])
VT = build_verify_tree(TREE_CFG, TREE, BONUS, SEQ_LENS)
TARGET = torch.randint(0, 9, (8,), generator=GEN)
CONSTANTS = chain_constants(CHAIN_CFG, max_bs=4, device="cpu")
ML_P, ML_I = multilayer(2, 2, GEN)
STEP0, STEP1 = step_inputs(TREE_CFG, 0, 2, GEN), step_inputs(TREE_CFG, 1, 2, GEN)
LOGITS = torch.randn(2, 4, 6, generator=GEN)  # [bs, N, V] for the tree
COINS = torch.rand(2, 4, generator=GEN), torch.rand(2, generator=GEN)  # uniforms, final
