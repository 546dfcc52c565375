"""Test inputs shaped like a draft model's output, with optional exact ties and NaN."""

import torch
from hypothesis import strategies as st

from eagle_fn import DraftConfig, select_top_k

KINDS = ("smooth", "ties", "nan")
VOCAB = 1000


def probs(rows, k, gen, kind, device="cpu", dtype=torch.float32):
    """[rows, k] top-k probabilities, best first.

    smooth: a softmax's top-k (no ties almost surely); ties: values on a coarse grid that
    includes exactly 1.0 and 0.0, so children tie with their parents and with each other;
    nan: smooth with about one entry in five poisoned.
    """
    if kind == "ties":
        grid = torch.tensor([0.0, 0.25, 0.5, 1.0], dtype=dtype)
        p = grid[torch.randint(0, 4, (rows, k), generator=gen)]
        p = torch.sort(p, dim=1, descending=True).values
    else:
        logits = torch.randn(rows, 64, generator=gen, dtype=torch.float64)
        p = torch.topk(torch.softmax(logits, dim=1), k, dim=1).values.to(dtype)
        if kind == "nan":
            p[torch.rand(rows, k, generator=gen) < 0.2] = float("nan")
    return p.to(device)


def tokens(rows, k, gen, device="cpu"):
    return torch.randint(0, VOCAB, (rows, k), generator=gen).to(device)


def step_inputs(cfg, step, bs, gen, kind="smooth", device="cpu", dtype=torch.float32):
    """(topk_p, topk_index, scores) for select_top_k at ``step``."""
    k = cfg.topk
    rows = bs if step == 0 else bs * k
    scores = None if step == 0 else probs(bs, k, gen, kind, device, dtype)
    return probs(rows, k, gen, kind, device, dtype), tokens(rows, k, gen, device), scores


def draft_lists(cfg, bs, gen, kind="smooth", device="cpu", dtype=torch.float32):
    """Runs a draft loop of select_top_k; returns (score_list, token_list, parents_list)."""
    score_list, token_list, parents_list = [], [], []
    scores = None
    for step in range(cfg.num_steps):
        topk_p, topk_index, _ = step_inputs(cfg, step, bs, gen, kind, device, dtype)
        out = select_top_k(cfg, step, topk_p, topk_index, scores)
        scores = out.scores
        score_list.append(out.score_entry)
        token_list.append(out.token_entry)
        parents_list.append(out.parents_entry)
    return score_list, token_list, parents_list


def multilayer(num_steps, bs, gen, device="cpu"):
    """(topk_p, topk_index) of a multi-layer draft: one token per step, [bs, num_steps]."""
    return probs(bs, num_steps, gen, "smooth", device), tokens(bs, num_steps, gen, device)


def configs():
    """A table of configs covering chains, wide trees, one-step drafts and extreme N."""
    return [
        DraftConfig.chain(1),
        DraftConfig.chain(3),
        DraftConfig.chain(8),
        DraftConfig(2, 1, 2),
        DraftConfig(2, 1, 3),
        DraftConfig(2, 2, 4),
        DraftConfig(4, 3, 8),
        DraftConfig(4, 4, 16),
        DraftConfig(8, 2, 73),
        DraftConfig(8, 8, 64),
        DraftConfig(3, 5, 2),
    ]


SEEDS = st.integers(0, 2**31)


@st.composite
def draft_configs(draw, max_topk=8, max_steps=8, max_n=None):
    """Valid configs up to the given sizes: chains, and trees with any N from 2 to
    num_candidates + 1 (or to ``max_n``)."""
    topk, num_steps = draw(st.integers(1, max_topk)), draw(st.integers(1, max_steps))
    if topk == 1:
        return DraftConfig.chain(num_steps)
    most = topk + (num_steps - 1) * topk**2 + 1  # num_candidates + 1
    most = most if max_n is None else min(most, max_n)
    return DraftConfig(topk, num_steps, draw(st.integers(2, most)))


def organized_args(configs, min_bs, max_bs):
    """``@given`` arguments of a property over organized drafts: cfg, bs, kind and seed."""
    bs = st.integers(min_bs, max_bs)
    return {"cfg": configs, "bs": bs, "kind": st.sampled_from(KINDS), "seed": SEEDS}
