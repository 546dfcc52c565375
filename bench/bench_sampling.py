"""Sampling verification at two vocabulary sizes, torch and the fused kernel."""

import pytest
import torch

import inputs
from backends import BACKENDS, function, record_backend, reference
from cases import TREE_TARGET, VOCABS, params
from eagle_fn import build_verify_tree


def sampling_inputs(case, vocab, device):
    """A verify tree, target probabilities that favour each node's first child, and coins.

    Shapes: ``target_probs [bs, N, V]``, ``uniforms [bs, N]``, ``final_uniforms [bs]``.
    """
    verify_tree = build_verify_tree(case.config, *inputs.verify_inputs(case))
    favoured = inputs.agreeing_target(case, verify_tree).view(case.bs, -1, 1)  # [bs, N, 1]
    gen = inputs.generator(2)
    logits = torch.randn(case.bs, case.num_draft_tokens, vocab, generator=gen)  # [bs, N, V]
    logits.scatter_add_(2, favoured, torch.full(favoured.shape, 8.0))
    uniforms = torch.rand(case.bs, case.num_draft_tokens, generator=gen)  # [bs, N]
    final_uniforms = torch.rand(case.bs, generator=gen)  # [bs]
    tensors = (torch.softmax(logits, dim=2), uniforms, final_uniforms)
    moved = type(verify_tree)(*(t.to(device) for t in verify_tree))
    return (moved, *(t.to(device) for t in tensors))


@pytest.mark.parametrize("vocab", VOCABS, ids=[f"V{v}" for v in VOCABS])
@pytest.mark.parametrize("case", params([TREE_TARGET], report=[TREE_TARGET]))
@pytest.mark.parametrize("backend", BACKENDS)
def test_verify_sampling(benchmark, device, backend, case, vocab):
    # Skips before building ~0.5 GB of inputs when either function is missing.
    reference("verify_sampling")
    function("verify_sampling", backend, device)
    args = (case.config, *sampling_inputs(case, vocab, device))
    path = f"verify_sampling_v{vocab}"
    record_backend(benchmark, path, case, "verify_sampling", backend, *args, device=device)
