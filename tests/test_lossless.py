"""Sampled speculative decoding is lossless: its tokens follow the target's sampling distribution.

One batch of 20 000 identical prompts stands for 20 000 independent runs. The exact marginal
of each of the first three emitted positions comes from dynamic programming over the toy's
two-token context; Pearson's chi-square compares them, p > 1e-3 with fixed seeds.
"""

from fractions import Fraction

import numpy as np
import pytest
import torch

from eagle_fn import DraftConfig, DraftOrganizer, draw_uniforms, verify_sampling
from eagle_fn.toy import (
    draft_tree,
    greedy_generate,
    sample_generate,
    speculative_generate,
    toy_models,
)
from helpers.sampling_inputs import assert_lossless, chi_square_p, position_marginals, toy_probs

DRAWS = 20_000
POSITIONS = 3


def prompts(previous, last):
    return torch.tensor([[previous, last]]).repeat(DRAWS, 1)


@pytest.mark.parametrize(
    ("cfg", "temperature", "context", "min_accepted"),
    [
        # A chain samples its drafts and verifies them against draft_probs.
        (DraftConfig.chain(3), 1.0, (3, 7), 1.0),
        # Trees keep the draft's top-k and verify target-only.
        (DraftConfig(2, 3, 6), 0.7, (11, 2), 0.3),
        (DraftConfig(4, 3, 10), 1.0, (40, 5), 0.2),
    ],
    ids=str,
)
def test_speculative_sampling_follows_the_target(cfg, temperature, context, min_accepted):
    target, draft = toy_models(seed=0)
    generated = speculative_generate(
        cfg,
        target,
        draft,
        prompts(*context),
        POSITIONS,
        temperature=temperature,
        generator=torch.Generator().manual_seed(cfg.num_draft_tokens),
    )
    marginals = position_marginals(toy_probs(target.table, temperature), *context, POSITIONS)
    assert_lossless(generated.tokens, marginals)
    # The drafts were used: a verifier that accepts nothing would be lossless too.
    assert generated.mean_accepted > min_accepted


def test_plain_sampling_follows_the_target():
    target, _ = toy_models(seed=0)
    tokens = sample_generate(
        target,
        prompts(3, 7),
        POSITIONS,
        temperature=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    assert_lossless(tokens, position_marginals(toy_probs(target.table, 1.0), 3, 7, POSITIONS))


def test_the_statistic_detects_the_draft_distribution():
    # Power: the draft model's own samples differ from the target's at this sample size.
    target, draft = toy_models(seed=0)
    tokens = sample_generate(
        draft, prompts(3, 7), POSITIONS, temperature=1.0, generator=torch.Generator().manual_seed(0)
    )
    marginals = position_marginals(toy_probs(target.table, 1.0), 3, 7, POSITIONS)
    assert max(chi_square_p(tokens[:, i], marginals[i]) for i in range(POSITIONS)) < 1e-3


def test_marginals_are_distributions_of_the_toy():
    # Position 1 is the target's row after the context; every marginal sums to 1.
    target, _ = toy_models(seed=0)
    probs = toy_probs(target.table, 0.5)
    marginals = position_marginals(probs, 4, 9, 3)
    assert torch.equal(marginals[0], probs[4, 9])
    # Sums of float64 products: a few ulps off 1, and the brute force's order differs.
    ulps = {"rtol": 16 * 2.0**-52, "atol": 0.0}
    torch.testing.assert_close(marginals.sum(1), torch.ones(3, dtype=torch.float64), **ulps)
    # Position 2 by brute force over the first token.
    second = sum(probs[4, 9, y] * probs[9, y] for y in range(target.vocab))
    torch.testing.assert_close(marginals[1], second, **ulps)


@pytest.mark.parametrize("cfg", [DraftConfig.chain(4), DraftConfig(4, 3, 10)], ids=str)
def test_greedy_requests_of_a_mixed_batch_decode_greedily(cfg):
    target, draft = toy_models(seed=2)
    start = torch.randint(0, target.vocab, (8, 2), generator=torch.Generator().manual_seed(1))
    temperature = torch.tensor([0.0, 1.0, -1.0, 1.0] * 2)  # entries <= 0 are greedy
    generated = speculative_generate(
        cfg, target, draft, start, 20, temperature=temperature,
        generator=torch.Generator().manual_seed(2),
    )  # fmt: skip
    greedy = greedy_generate(target, start, 20)
    assert torch.equal(generated.tokens[::2], greedy[::2])
    assert not torch.equal(generated.tokens[1::2], greedy[1::2])  # the others did sample


def test_temperature_zero_is_greedy_verification():
    target, draft = toy_models(seed=3)
    start = torch.tensor([[1, 2], [3, 4]])
    cfg = DraftConfig(2, 3, 6)
    default = speculative_generate(cfg, target, draft, start, 12)
    zero = speculative_generate(cfg, target, draft, start, 12, temperature=0.0)
    assert torch.equal(default.tokens, zero.tokens)
    assert torch.equal(default.accepted, zero.accepted)
    state = torch.get_rng_state()  # an int 0 is greedy too: no coin drawn from torch's RNG
    assert torch.equal(
        speculative_generate(cfg, target, draft, start, 12, temperature=0).tokens, zero.tokens
    )
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(zero.tokens, greedy_generate(target, start, 12))


@pytest.mark.parametrize(
    ("temperature", "error", "match"),
    [
        (-1.0, ValueError, r"speculative_generate: temperature must be finite and >= 0, got -1.0"),
        (float("nan"), ValueError, r"temperature must be finite and >= 0, got nan"),
        (float("inf"), ValueError, r"temperature must be finite and >= 0, got inf"),
        ("hot", TypeError, r"temperature must be a float or a \[bs\] tensor, got str"),
        (False, TypeError, r"temperature must be a float or a \[bs\] tensor, got bool"),
        (True, TypeError, r"temperature must be a float or a \[bs\] tensor, got bool"),
        (np.bool_(False), TypeError, r"a float or a \[bs\] tensor, got bool"),
        (Fraction(0), TypeError, r"temperature must be a float or a \[bs\] tensor, got Fraction"),
        (torch.ones(3), ValueError, r"temperature must have shape \[bs\] = \[2\], got \[3\]"),
    ],
)
def test_bad_temperature(temperature, error, match):
    target, draft = toy_models(seed=0)
    with pytest.raises(error, match=match):
        speculative_generate(
            DraftConfig.chain(2), target, draft, torch.tensor([[1, 2], [3, 4]]), 3,
            temperature=temperature,
        )  # fmt: skip


def first_tokens(cfg, thresholds):
    """Position-1 tokens of one verification round over DRAWS identical requests, and their
    target distribution. Position 1 is the root's decision alone, so only the root rows need
    the target's distribution (the other rows are uniform)."""
    target, draft = toy_models(seed=0)
    previous, last = torch.full((DRAWS,), 3), torch.full((DRAWS,), 7)
    worker = DraftOrganizer(cfg, max_bs=DRAWS, device="cpu", compile=False)
    vt = worker.build_verify(
        draft_tree(cfg, worker, draft, previous, last), last, torch.full((DRAWS,), 2)
    )
    n, vocab = cfg.num_draft_tokens, target.vocab
    q = torch.full((DRAWS, n, vocab), 1.0 / vocab)
    q[:, 0] = toy_probs(target.table, 1.0)[3, 7].float()
    coins = draw_uniforms(DRAWS, n, generator=torch.Generator().manual_seed(9))
    single, acc = thresholds
    verdict = verify_sampling(cfg, vt, q, *coins, threshold_single=single, threshold_acc=acc)
    return verdict.predicts.view(DRAWS, n)[:, 0], toy_probs(target.table, 1.0)[3, 7]


def test_one_round_is_lossless_at_the_root():
    tokens, want = first_tokens(DraftConfig(4, 2, 8), (1.0, 1.0))
    assert chi_square_p(tokens, want) > 1e-3


@pytest.mark.parametrize("thresholds", [(0.05, 1.0), (1.0, 0.5)], ids=["single", "acc"])
def test_lower_thresholds_are_detectably_lossy(thresholds):
    # Power against the verification itself: accepting more drafts than the coin allows
    # skews the first token toward the draft's top-k, and the same statistic sees it.
    tokens, want = first_tokens(DraftConfig(4, 2, 8), thresholds)
    assert chi_square_p(tokens, want) < 1e-3
