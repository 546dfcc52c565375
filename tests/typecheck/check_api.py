"""The public API's types as a user's code sees them: checked by mypy in CI, never run.

Each ``# type: ignore[code]`` marks a line that must be a type error: ``warn_unused_ignores``
fails CI where one stops being an error. ``assert_type`` fails it where a type drifts.
"""

import torch
from typing_extensions import assert_type

import eagle_fn
from eagle_fn import DraftConfig, DraftOrganizer, DraftTree, GreedyVerdict, VerifyTree


def worker_settings(worker: DraftOrganizer) -> None:
    assert_type(worker.config, DraftConfig)
    assert_type(worker.max_bs, int)
    assert_type(worker.device, torch.device)
    assert_type(worker.compiled, frozenset[str])
    # Read-only at run time (AttributeError), so to a type checker too.
    worker.config = DraftConfig.chain(5)  # type: ignore[misc]
    worker.max_bs = 16  # type: ignore[misc]
    worker.device = torch.device("cpu")  # type: ignore[misc]
    worker.compiled = frozenset()  # type: ignore[misc]


def worker_methods(worker: DraftOrganizer, t: torch.Tensor, tree: DraftTree) -> None:
    assert_type(worker.organize(t, t), DraftTree)
    assert_type(worker.organize_steps([t], [t], [t]), DraftTree)
    assert_type(worker.build_verify(tree, t, t), VerifyTree)
    worker.organize(t)  # type: ignore[call-arg]


def functions(cfg: DraftConfig, tree: DraftTree, vt: VerifyTree, t: torch.Tensor) -> None:
    assert_type(eagle_fn.organize_tree(cfg, [t], [t], [t]), DraftTree)
    assert_type(eagle_fn.build_verify_tree(cfg, tree, t, t), VerifyTree)
    assert_type(eagle_fn.verify_greedy(cfg, vt, t), GreedyVerdict)
    assert_type(eagle_fn.verify_sampling(cfg, vt, t, t, t), GreedyVerdict)
    assert_type(eagle_fn.target_probs_from_logits(t, t, top_p=t), torch.Tensor)
    cfg.topk = 2  # type: ignore[misc]
