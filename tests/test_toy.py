"""End to end: speculative decoding with eagle_fn emits exactly plain greedy decoding."""

import pytest
import torch

from eagle_fn import DraftConfig, DraftOrganizer
from eagle_fn.toy import (
    greedy_generate,
    sample_generate,
    speculative_generate,
    toy_models,
)
from eagle_fn.toy_draft import draft_tree
from helpers import reference

CONFIGS = [
    DraftConfig.chain(1),
    DraftConfig.chain(4),
    DraftConfig(2, 3, 6),
    DraftConfig(4, 4, 16),
    DraftConfig(8, 5, 48),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
@pytest.mark.parametrize("bs", [1, 3, 8])
def test_speculative_equals_greedy(cfg, bs):
    target, draft = toy_models(seed=bs)
    prompts = torch.randint(
        0, target.vocab, (bs, 3), generator=torch.Generator().manual_seed(cfg.topk)
    )
    generated = speculative_generate(cfg, target, draft, prompts, max_new_tokens=30)
    assert torch.equal(generated.tokens, greedy_generate(target, prompts, 30))
    # Accepting nothing would also reproduce greedy decoding: the drafts must pay off too.
    # Every round of a request accepts between 0 and num_steps drafts (-1 once it is done),
    # and the runs are seeded.
    accepted = generated.accepted
    assert ((accepted == -1) | ((accepted >= 0) & (accepted <= cfg.num_steps))).all()
    assert generated.mean_accepted > (0.4 if cfg.num_steps > 1 else 0.2)
    # A request's rounds count while it needs tokens (each commits accepted + 1), then -1.
    for rounds in accepted.T.tolist():
        live = [a for a in rounds if a >= 0]
        assert rounds == live + [-1] * (len(rounds) - len(live))
        made = [a + 1 for a in live]
        assert sum(made) >= 30 > sum(made[:-1])


@pytest.mark.parametrize("cfg", [DraftConfig(2, 3, 6), DraftConfig(4, 4, 16)], ids=str)
def test_each_drafted_token_is_a_top_k_token_after_its_parent(cfg):
    # The draft model sees a node's parent and grandparent tokens (the root's: the last two
    # tokens of the request), so each node's token is one of its top k there.
    _, draft = toy_models(seed=2)
    bs = 5
    previous, last = torch.randint(
        0, draft.vocab, (2, bs), generator=torch.Generator().manual_seed(7)
    )
    tree = draft_tree(cfg, DraftOrganizer(cfg, max_bs=bs, device="cpu"), draft, previous, last)
    for b in range(bs):
        parents, selected, tokens = (t[b].tolist() for t in tree)
        token, before = [last[b].item(), *tokens], {0: previous[b].item()}  # node 0: the root
        for j in range(1, cfg.num_draft_tokens):
            p = reference.parent_node(cfg, parents, selected, j)
            assert p in range(j), (b, j)  # found, and before its child
            before[j] = token[p]
            top = draft.logits(torch.tensor(before[p]), torch.tensor(token[p])).topk(cfg.topk)
            assert token[j] in top.indices.tolist(), (b, j)


def test_wider_trees_accept_more():
    target, draft = toy_models(seed=0)
    prompts = torch.randint(0, target.vocab, (8, 3), generator=torch.Generator().manual_seed(0))
    means = [
        speculative_generate(cfg, target, draft, prompts, 40).mean_accepted
        for cfg in (DraftConfig.chain(4), DraftConfig(4, 4, 16))
    ]
    assert means[0] < means[1]


@pytest.mark.compiled
def test_speculative_equals_greedy_compiled(monkeypatch):
    monkeypatch.setenv("EAGLE_FN_COMPILE", "1")
    target, draft = toy_models(seed=5)
    prompts = torch.randint(0, target.vocab, (4, 2), generator=torch.Generator().manual_seed(5))
    for cfg in (DraftConfig.chain(3), DraftConfig(2, 3, 6)):
        generated = speculative_generate(cfg, target, draft, prompts, max_new_tokens=20)
        assert torch.equal(generated.tokens, greedy_generate(target, prompts, 20))


def test_zero_new_tokens():
    target, draft = toy_models(seed=1)
    prompts = torch.tensor([[1, 2], [3, 4]])
    assert greedy_generate(target, prompts, 0).shape == (2, 0)
    generated = speculative_generate(DraftConfig(2, 2, 4), target, draft, prompts, 0)
    assert generated.tokens.shape == (2, 0)
    assert generated.accepted.shape == (0, 2)
    assert generated.mean_accepted == 0.0


TARGET, DRAFT = toy_models(vocab=8)
PROMPTS = torch.tensor([[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (
            (None, PROMPTS, 4),
            TypeError,
            r"greedy_generate: target must be a ToyModel, got NoneType",
        ),
        (
            (TARGET, [[1, 2]], 4),
            TypeError,
            r"greedy_generate: prompts must be a torch.Tensor, got list",
        ),
        (
            (TARGET, PROMPTS[0], 4),
            ValueError,
            r"greedy_generate: prompts must have shape \[bs, context\] \(rank 2\), got shape \[3\]",
        ),
        (
            (TARGET, PROMPTS[:, :1], 4),
            ValueError,
            r"greedy_generate: prompts must hold at least 2 tokens per request, got \[2, 1\]",
        ),
        (
            (TARGET, PROMPTS.float(), 4),
            TypeError,
            r"greedy_generate: prompts must be an int64 tensor, got torch.float32",
        ),
        (
            (TARGET, PROMPTS.to("meta"), 4),
            ValueError,
            r"greedy_generate: prompts is on meta, expected cpu \(the device of the models\)",
        ),
        (
            (TARGET, PROMPTS + 5, 4),
            ValueError,
            r"greedy_generate: prompts must hold token ids in \[0, 8\)",
        ),
        (  # the first id past the vocabulary
            (TARGET, torch.full_like(PROMPTS, 8), 4),
            ValueError,
            r"greedy_generate: prompts must hold token ids in \[0, 8\)",
        ),
        (
            (TARGET, PROMPTS, -1),
            ValueError,
            r"greedy_generate: max_new_tokens must be >= 0, got -1",
        ),
        ((TARGET, PROMPTS, 2.0), TypeError, r"greedy_generate: max_new_tokens must be an int"),
    ],
)
def test_greedy_generate_names_bad_input(args, error, match):
    with pytest.raises(error, match=match):
        greedy_generate(*args)


def test_speculative_generate_names_mismatched_models():
    other, _ = toy_models(vocab=9)
    cfg = DraftConfig.chain(2)
    with pytest.raises(ValueError, match=r"speculative_generate: target and draft vocabularies"):
        speculative_generate(cfg, TARGET, other, PROMPTS, 4)
    with pytest.raises(TypeError, match=r"speculative_generate: draft must be a ToyModel, got int"):
        speculative_generate(cfg, TARGET, 3, PROMPTS, 4)
    with pytest.raises(TypeError, match=r"speculative_generate: cfg must be a DraftConfig"):
        speculative_generate(None, TARGET, DRAFT, PROMPTS, 4)


def test_speculative_generate_checks_topk_and_generator_before_drafting():
    with pytest.raises(
        ValueError, match=r"^speculative_generate: topk = 9 exceeds the vocabulary of 8$"
    ):
        speculative_generate(DraftConfig(9, 1, 2), TARGET, DRAFT, PROMPTS, 4)
    greedy = speculative_generate(DraftConfig(8, 1, 2), TARGET, DRAFT, PROMPTS, 4)  # all 8
    assert torch.equal(greedy.tokens, greedy_generate(TARGET, PROMPTS, 4))
    for generate, args in [
        (speculative_generate, (DraftConfig.chain(2), TARGET, DRAFT, PROMPTS, 4)),
        (sample_generate, (TARGET, PROMPTS, 4)),
    ]:
        name = generate.__name__
        match = rf"{name}: generator must be a torch.Generator or None, got int"
        with pytest.raises(TypeError, match=match):
            generate(*args, temperature=0.8, generator=1)
