"""Inputs and statistics for the sampling tests: random verify trees and target rows, exact
toy-model marginals, and a chi-square test that needs no scipy."""

from typing import NamedTuple

import torch
from hypothesis import strategies as st

from eagle_fn import (
    DraftConfig,
    VerifyTree,
    build_verify_tree,
    organize_tree,
    target_probs_from_logits,
)
from helpers.drafts import KINDS, SEEDS, draft_configs, draft_lists

I64 = torch.int64
ROW_KINDS = ("smooth", "ties", "agree", "zero", "nan", "onehot")
COIN_KINDS = ("uniform", "grid")
# Thresholds are rounded to float32 as SGLang's kernel takes them: 2**-150 becomes 0 (a tie,
# to even), and past float32's range (the last two) a threshold is +-inf, as a C cast rounds it.
THRESHOLDS = [(1.0, 1.0), (0.5, 0.8), (0.3, 0.0), (2.0, 1e-12), (0.25, 0.5), (2.0**-150, 1.0)]
THRESHOLDS += [(1e39, 1e39), (-1e39, -1e39), (2**64, -(10**39))]  # ints past int64 too


def as_float32(value):
    """``value`` rounded to float32, as verify_sampling takes its thresholds."""
    return torch.tensor(value, dtype=torch.float64).float().item()


# Chains and trees small enough for a loop reference to check many of them.
SAMPLING_CONFIGS = draft_configs(max_topk=4, max_steps=5, max_n=24)


def organized_tree(cfg, bs, gen, vocab, kind="smooth"):
    """A verify tree from organize_tree on drafts.py inputs, tokens folded into [0, vocab)
    so that siblings sometimes share a token."""
    tree = organize_tree(cfg, *draft_lists(cfg, bs, gen, kind))
    bonus = torch.randint(0, vocab, (bs,), generator=gen)
    vt = build_verify_tree(cfg, tree, bonus, torch.zeros(bs, dtype=I64))
    return vt._replace(draft_tokens=vt.draft_tokens % vocab)


def random_links(cfg, bs, gen, vocab, scramble_index=False):
    """A verify tree with arbitrary links: cycles, self-links, shared children, links outside
    [-1, N) (which end a list), and tokens that are sometimes outside [0, vocab). With
    ``scramble_index`` about a third of the retrieve_index entries are any of -2..bs*N+1:
    negative, past the end, repeated, or in another request's row."""
    n = cfg.num_draft_tokens
    first = torch.randint(-3, n + 3, (bs, n), generator=gen)
    sibling = torch.randint(-3, n + 3, (bs, n), generator=gen)
    tokens = torch.randint(-2, vocab + 2, (bs * n,), generator=gen)
    index = torch.arange(bs * n).view(bs, n)
    if scramble_index:
        scrambled = torch.randint(-2, bs * n + 2, (bs, n), generator=gen)
        index = torch.where(torch.rand(bs, n, generator=gen) < 0.35, scrambled, index)
    return VerifyTree(
        draft_tokens=tokens,
        positions=torch.zeros(bs * n, dtype=I64),
        tree_mask=torch.ones(bs * n * n, dtype=torch.bool),
        retrieve_index=index,
        retrieve_next_token=first,
        retrieve_next_sibling=sibling,
    )


def target_rows(vt, vocab, gen, kind, dtype=torch.float32):
    """[bs, N, V] target probabilities of one kind (rows need not sum to 1: the contract
    takes any non-negative weights).

    smooth: softmax rows; ties: coarse grid values, exact sums; agree: smooth plus heavy mass
    on each node's children's tokens, so walks go deep; zero: some rows all zero; nan: some
    entries NaN; onehot: greedy rows.
    """
    bs, n = vt.retrieve_index.shape
    if kind == "ties":
        grid = torch.tensor([0.0, 0.125, 0.25, 0.5])
        q = grid[torch.randint(0, 4, (bs, n, vocab), generator=gen)]
    elif kind == "onehot":
        q = torch.zeros(bs, n, vocab)
        q.scatter_(2, torch.randint(0, vocab, (bs, n, 1), generator=gen), 1.0)
    else:
        q = torch.softmax(2 * torch.randn(bs, n, vocab, generator=gen, dtype=torch.float64), -1)
    if kind == "agree":
        tokens = vt.draft_tokens.view(bs, n).clamp(0, vocab - 1)
        first = vt.retrieve_next_token.clamp(0, n - 1)
        boost = tokens.gather(1, first)  # each node's first child's token
        q.scatter_add_(2, boost.unsqueeze(-1), torch.full((bs, n, 1), 3.0, dtype=q.dtype))
        q = q / q.sum(-1, keepdim=True)
    if kind == "zero":
        q[torch.rand(bs, n, generator=gen) < 0.4] = 0.0
    if kind == "nan":
        q[torch.rand(bs, n, vocab, generator=gen) < 0.2] = float("nan")
    return q.to(dtype)


def coins(bs, n, gen, kind, dtype=torch.float32):
    """(uniforms [bs, N], final_uniforms [bs]): continuous, or on a grid that includes 0 and
    the grid sums of target_rows' ties, to hit every ``<=`` boundary."""
    if kind == "grid":
        grid = torch.tensor([0.0, 0.125, 0.25, 0.5, 0.75], dtype=dtype)
        u = grid[torch.randint(0, 5, (bs, n + 1), generator=gen)]
    else:
        u = torch.rand(bs, n + 1, generator=gen, dtype=dtype)
    return u[:, :n].contiguous(), u[:, n].contiguous()


def engine_layouts(rows, bs):
    """``rows [bs * N, V]`` in the memory layouts an engine hands over, values unchanged:
    flat and batched, a view into a larger (padded) buffer, column-major, a gap between
    columns, a ``[bs, N, V]`` view with gaps between rows and nodes. ``{name: tensor}``."""
    flat, vocab = rows.reshape(bs, -1, rows.shape[-1]), rows.shape[-1]
    n = flat.shape[1]
    padded = rows.new_full((bs * n + 3, vocab + 5), float("nan"))  # pads never read
    padded[1 : bs * n + 1, 2 : vocab + 2] = rows
    gapped = rows.new_full((bs * n, 2 * vocab), float("nan"))
    gapped[:, ::2] = rows
    spaced = rows.new_full((bs, n + 1, vocab + 3), float("nan"))
    spaced[:, :n, :vocab] = flat
    return {
        "flat": rows.reshape(bs * n, vocab),
        "batched": flat,
        "sliced": padded[1 : bs * n + 1, 2 : vocab + 2],
        "column_major": rows.t().contiguous().t(),
        "column_gap": gapped[:, ::2],
        "node_gap": spaced[:, :n, :vocab],
    }


def engine_step(verify, cfg):
    """An engine's sampling step around ``verify`` (the torch function or the kernel's): the
    probabilities from the logits, then the verdict. Returns ``(probs, *verdict)``."""

    def step(vt, logits, temperature, top_k, top_p, uniforms, final, draft):
        probs = target_probs_from_logits(logits, temperature, top_k=top_k, top_p=top_p)
        return (probs, *verify(cfg, vt, probs, uniforms, final, draft_probs=draft))

    return step


def engine_step_inputs(cfg, bs, vocab, seed, device="cpu"):
    """:func:`engine_step`'s arguments: greedy and sampled requests mixed, logits that often
    agree with the drafts, and draft rows for a chain (None for a tree)."""
    gen = torch.Generator().manual_seed(seed)
    n = cfg.num_draft_tokens
    vt = organized_tree(cfg, bs, gen, vocab)
    logits = 3 * torch.log(target_rows(vt, vocab, gen, "agree")).view(bs * n, vocab)
    temperature = torch.tensor([0.0, 0.8, 1.5])[torch.arange(bs) % 3]
    top_k, top_p = torch.arange(bs) % vocab, 1 - torch.rand(bs, generator=gen) / 2
    u, final = coins(bs, n, gen, "uniform")
    p = target_rows(vt, vocab, gen, "smooth").view(bs * n, vocab) if cfg.is_chain else None
    tensors = (logits, temperature, top_k, top_p, u, final, p)
    moved = [None if t is None else t.to(device) for t in tensors]
    return (type(vt)(*(t.to(device) for t in vt)), *moved)


# Property-test cases shared by the torch and kernel tests. Hypothesis reports a failing case
# as the call that built it, e.g. tree_case(cfg=..., bs=2, ..., seed=7).


class SamplingCase(NamedTuple):
    """The arguments of the tests' checks: cfg, verify_sampling's tensors, the thresholds
    (single, acc) and the chains' draft_probs (None for trees)."""

    cfg: DraftConfig
    verify_tree: VerifyTree
    target_probs: torch.Tensor  # [bs, N, V]
    uniforms: torch.Tensor  # [bs, N]
    final_uniforms: torch.Tensor  # [bs]
    thresholds: tuple[float, float] = (1.0, 1.0)
    draft_probs: torch.Tensor | None = None  # [bs, N, V]


def tree_case(cfg, bs, vocab, tree_kind, row_kind, coin_kind, thresholds, dtype, seed):
    """A case on an organized tree."""
    gen = torch.Generator().manual_seed(seed)
    vt = organized_tree(cfg, bs, gen, vocab, tree_kind)
    q = target_rows(vt, vocab, gen, row_kind, dtype)
    return SamplingCase(cfg, vt, q, *coins(bs, cfg.num_draft_tokens, gen, coin_kind), thresholds)


def tree_cases(max_bs, max_vocab):
    return st.builds(
        tree_case,
        cfg=SAMPLING_CONFIGS,
        bs=st.integers(0, max_bs),
        vocab=st.integers(2, max_vocab),
        tree_kind=st.sampled_from(KINDS),
        row_kind=st.sampled_from(ROW_KINDS),
        coin_kind=st.sampled_from(COIN_KINDS),
        thresholds=st.sampled_from(THRESHOLDS),
        dtype=st.sampled_from([torch.float32, torch.float64, torch.float16]),
        seed=SEEDS,
    )


def links_case(cfg, bs, row_kind, coin_kind, thresholds, seed, dtype, scramble_index):
    """A case on random_links over a vocabulary of 10: cycles, self-links, shared children,
    out-of-vocabulary tokens and, with ``scramble_index``, any retrieve_index entries."""
    gen = torch.Generator().manual_seed(seed)
    vt = random_links(cfg, bs, gen, vocab=10, scramble_index=scramble_index)
    q = target_rows(vt, 10, gen, row_kind, dtype)
    return SamplingCase(cfg, vt, q, *coins(bs, cfg.num_draft_tokens, gen, coin_kind), thresholds)


def links_cases(max_bs, coin_kinds=COIN_KINDS, dtype=torch.float32):
    return st.builds(
        links_case,
        cfg=SAMPLING_CONFIGS,
        bs=st.integers(1, max_bs),
        row_kind=st.sampled_from(ROW_KINDS),
        coin_kind=st.sampled_from(coin_kinds),
        thresholds=st.sampled_from(THRESHOLDS),
        seed=SEEDS,
        dtype=st.just(dtype),
        scramble_index=st.booleans(),
    )


def chain_case(num_steps, bs, vocab, row_kind, draft_kind, coin_kind, arbitrary_links, seed):
    """A chain's case with draft_probs, on an organized chain or on arbitrary links."""
    gen = torch.Generator().manual_seed(seed)
    cfg = DraftConfig.chain(num_steps)
    vt = (random_links if arbitrary_links else organized_tree)(cfg, bs, gen, vocab)
    q = target_rows(vt, vocab, gen, row_kind)
    p = target_rows(vt, vocab, gen, draft_kind)
    return SamplingCase(cfg, vt, q, *coins(bs, num_steps + 1, gen, coin_kind), draft_probs=p)


def chain_cases(max_steps, max_bs, max_vocab, coin_kinds=COIN_KINDS):
    return st.builds(
        chain_case,
        num_steps=st.integers(1, max_steps),
        bs=st.integers(0, max_bs),
        vocab=st.integers(2, max_vocab),
        row_kind=st.sampled_from(ROW_KINDS),
        draft_kind=st.sampled_from(ROW_KINDS),
        coin_kind=st.sampled_from(coin_kinds),
        arbitrary_links=st.booleans(),
        seed=SEEDS,
    )


# Exact distributions of the toy model and the chi-square test.


def toy_probs(table, temperature):
    """q(y | previous, last) of a toy table at ``temperature``, float64 ``[V, V, V]``."""
    return torch.softmax(table.double() / temperature, dim=-1)


def position_marginals(probs, previous, last, positions):
    """Exact marginal distribution of each of the next ``positions`` sampled tokens after
    the context ``(previous, last)``, by dynamic programming over the two-token context.

    Returns ``[positions, V]`` float64.
    """
    vocab = probs.shape[0]
    state = torch.zeros(vocab, vocab, dtype=torch.float64)  # P(previous, last)
    state[previous, last] = 1.0
    out = []
    for _ in range(positions):
        joint = state.unsqueeze(-1) * probs  # [V, V, V] P(previous, last, next)
        out.append(joint.sum((0, 1)))
        state = joint.sum(0)  # the new context is (last, next)
    return torch.stack(out)


def chi_square_p(samples, expected, min_count=5.0):
    """Pearson's chi-square test of ``samples`` (token ids) against the distribution
    ``expected [V]``; bins expected below ``min_count`` draws are pooled. Returns the p-value
    (the regularized upper incomplete gamma function gives the survival function)."""
    draws = samples.numel()
    observed = torch.bincount(samples.flatten(), minlength=expected.numel()).double()
    want = expected.double() * draws
    small = want < min_count
    obs = torch.cat([observed[~small], observed[small].sum().view(1)])
    exp = torch.cat([want[~small], want[small].sum().view(1)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    if bool((observed[want == 0] > 0).any()):
        return 0.0  # a token the target never emits
    stat = ((obs - exp) ** 2 / exp).sum()
    dof = obs.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), stat / 2))


def assert_lossless(tokens, marginals, min_p=1e-3):
    """Every column of ``tokens [draws, positions]`` follows its row of ``marginals``;
    returns the p-values."""
    ps = [chi_square_p(tokens[:, i], marginals[i]) for i in range(marginals.shape[0])]
    assert min(ps) > min_p, f"chi-square p-values per position: {ps}"
    return ps
