import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from eagle_fn import DraftConfig, DraftStep, select_top_k
from eagle_fn.profiling import OpCounter
from helpers import reference
from helpers.asserts import assert_matches
from helpers.drafts import KINDS, configs, step_inputs

I64 = torch.int64


def check_against_reference(cfg, step, topk_p, topk_index, scores):
    out = select_top_k(cfg, step, topk_p, topk_index, scores)
    ref = reference.select_top_k(cfg, step, topk_p, topk_index, scores)
    k = cfg.topk
    bs = topk_p.shape[0] if step == 0 else scores.shape[0]
    assert isinstance(out, DraftStep)
    assert_matches(out.input_ids, ref["input_ids"], (bs * k,), I64)
    assert_matches(out.hidden_index, ref["hidden_index"], (bs * k,), I64)
    assert_matches(out.scores, ref["scores"], (bs, k), topk_p.dtype)
    # semantics.md §3: the entries of step 0 and of a later step differ in shape.
    first = step == 0
    score_shape = (bs, 1, k) if first else (bs, k, k)
    token_shape = (bs, k) if first else (bs, k * k)
    parents_shape = (bs, k + 1) if first else (bs, k)
    assert_matches(out.score_entry, ref["score_entry"], score_shape, topk_p.dtype)
    assert_matches(out.token_entry, ref["token_entry"], token_shape, I64)
    assert_matches(out.parents_entry, ref["parents_entry"], parents_shape, I64)
    return out


def test_first_step_by_hand():
    cfg = DraftConfig(topk=2, num_steps=3, num_draft_tokens=5)
    p = torch.tensor([[0.6, 0.4], [0.7, 0.2]])
    out = select_top_k(cfg, 0, p, torch.tensor([[7, 9], [3, 5]]))
    assert out.input_ids.tolist() == [7, 9, 3, 5]
    assert out.hidden_index.tolist() == [0, 0, 1, 1]  # every kept path continues its own row
    assert out.scores is p  # step 0's scores are the probabilities themselves
    assert torch.equal(out.score_entry, p.view(2, 1, 2))  # [bs, 1, k]: the same values
    assert out.parents_entry.tolist() == [[-1, 0, 1], [-1, 0, 1]]


def test_later_step_by_hand():
    cfg = DraftConfig(topk=2, num_steps=3, num_draft_tokens=5)
    scores = torch.tensor([[0.6, 0.4]])
    # Path 0 (score .6) proposes tokens 1, 2 at .5 each; path 1 (.4) proposes 3, 4 at .9, .1.
    # expand = [[.30, .30], [.36, .04]]: .36 wins (position 2), then the .30 tie goes to
    # the lower position 0.
    p = torch.tensor([[0.5, 0.5], [0.9, 0.1]])
    out = select_top_k(cfg, 2, p, torch.tensor([[1, 2], [3, 4]]), scores)
    assert out.input_ids.tolist() == [3, 1]
    assert out.hidden_index.tolist() == [1, 0]  # position // k: path 1, then path 0
    # The float32 products themselves, not 0.36 and 0.30 rounded otherwise.
    assert out.scores.tolist() == [
        [(scores[0, 1] * p[1, 0]).item(), (scores[0, 0] * p[0, 0]).item()]
    ]
    # Step 2 candidates start at flat index k + k*k*(2-1) = 6: positions 2, 0 -> 8, 6.
    assert out.parents_entry.tolist() == [[8, 6]]
    assert out.token_entry.tolist() == [[1, 2, 3, 4]]


def test_chain_step_keeps_its_only_child():
    cfg = DraftConfig.chain(3)
    out = select_top_k(
        cfg,
        1,
        torch.tensor([[0.5], [0.25]]),
        torch.tensor([[8], [9]]),
        torch.tensor([[0.5], [0.5]]),
    )
    assert out.input_ids.tolist() == [8, 9]
    assert out.hidden_index.tolist() == [0, 1]
    assert out.parents_entry.tolist() == [[1], [1]]  # candidate i-1 + ... = flat index 1
    assert out.scores.tolist() == [[0.25], [0.125]]


def test_nan_ranks_last_and_ties_go_to_the_lower_index():
    cfg = DraftConfig(topk=2, num_steps=2, num_draft_tokens=3)
    nan = float("nan")
    # expand = [[nan, .5], [.5, .25]]: NaN loses to everything; the .5 tie keeps position 1.
    out = select_top_k(
        cfg,
        1,
        torch.tensor([[nan, 0.5], [1.0, 0.5]]),
        torch.tensor([[1, 2], [3, 4]]),
        torch.tensor([[1.0, 0.5]]),
    )
    assert out.parents_entry.tolist() == [[1 + 2, 2 + 2]]
    assert out.input_ids.tolist() == [2, 3]


@pytest.mark.parametrize("cfg", configs(), ids=str)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bs", [0, 1, 5])
def test_matches_reference_table(cfg, kind, bs):
    gen = torch.Generator().manual_seed(bs * 31 + cfg.topk)
    for step in range(min(cfg.num_steps, 3)):
        check_against_reference(cfg, step, *step_inputs(cfg, step, bs, gen, kind))


@given(
    topk=st.integers(1, 8),
    num_steps=st.integers(1, 8),
    bs=st.integers(0, 16),
    kind=st.sampled_from(KINDS),
    dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]),
    seed=st.integers(0, 2**31),
    data=st.data(),
)
def test_matches_reference_hypothesis(topk, num_steps, bs, kind, dtype, seed, data):
    cfg = DraftConfig(topk, num_steps, num_steps + 1 if topk == 1 else 2)
    step = data.draw(st.integers(0, num_steps - 1))
    gen = torch.Generator().manual_seed(seed)
    check_against_reference(cfg, step, *step_inputs(cfg, step, bs, gen, kind, dtype=dtype))


def test_runs_on_device(device):
    cfg = DraftConfig(4, 3, 8)
    gen = torch.Generator().manual_seed(0)
    cpu = select_top_k(cfg, 1, *step_inputs(cfg, 1, 3, gen))
    gen = torch.Generator().manual_seed(0)
    dev = select_top_k(cfg, 1, *step_inputs(cfg, 1, 3, gen, device=device))
    for name, a, b in zip(DraftStep._fields, cpu, dev, strict=True):
        assert b.device == device, name
        torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0, msg=name)


CFG = DraftConfig(2, 3, 5)
P0, I0 = torch.rand(3, 2), torch.zeros(3, 2, dtype=I64)
P1, I1, S1 = torch.rand(6, 2), torch.zeros(6, 2, dtype=I64), torch.rand(3, 2)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((None, 0, P0, I0), TypeError, r"select_top_k: cfg must be a DraftConfig, got NoneType"),
        ((CFG, 3, P0, I0), ValueError, r"step must be in \[0, num_steps = 3\), got 3"),
        ((CFG, -1, P0, I0), ValueError, r"step must be in .* got -1"),
        ((CFG, 1.0, P0, I0), TypeError, r"step must be an int, got float"),
        ((CFG, False, P0, I0), TypeError, r"step must be an int, got bool"),
        ((CFG, 1, P1, I1), ValueError, r"scores .* is required at step 1"),
        ((CFG, 0, P0, I0, S1), ValueError, r"scores must be None at step 0"),
        ((CFG, 0, P0.numpy(), I0), TypeError, r"topk_p must be a torch.Tensor, got ndarray"),
        (
            (CFG, 0, P0[0], I0),
            ValueError,
            r"topk_p must have shape \[bs, topk\] \(rank 2\), got shape \[2\]",
        ),
        (
            (CFG, 0, P0, I0[:, :1]),
            ValueError,
            r"topk_index must have shape \[bs, topk\] = \[3, 2\], got \[3, 1\]",
        ),
        ((CFG, 0, P0, I0.int()), TypeError, r"topk_index must be an int64 tensor, got torch.int32"),
        (
            (CFG, 0, I0, I0),
            TypeError,
            r"topk_p must be a floating-point tensor \(float16, bfloat16, float32 or float64\), got torch.int64",
        ),
        (
            (CFG, 0, P0.to(torch.float8_e4m3fn), I0),
            TypeError,
            r"topk_p must be a floating-point tensor .* got torch.float8_e4m3fn",
        ),
        (
            (CFG, 0, P0, I0.to_sparse()),
            TypeError,
            r"topk_index must be a dense \(strided\) tensor, got torch.sparse_coo",
        ),
        (
            (CFG, 1, P1[:4], I1, S1),
            ValueError,
            r"topk_p must have shape \[bs \* topk, topk\] = \[6, 2\], got \[4, 2\]",
        ),
        (
            (CFG, 1, P1, I1[:5], S1),
            ValueError,
            r"topk_index must have shape .* = \[6, 2\], got \[5, 2\]",
        ),
        (
            (CFG, 1, P1, I1, S1[:, :1]),
            ValueError,
            r"scores must have shape \[bs, topk\] = \[3, 2\], got \[3, 1\]",
        ),
        ((CFG, 1, P1, I1, S1.long()), TypeError, r"scores must be a floating-point tensor"),
        ((CFG, 1, P1, I1, [0.5, 0.5]), TypeError, r"scores must be a torch.Tensor, got list"),
    ],
)
def test_bad_inputs(args, error, match):
    with pytest.raises(error, match=match):
        select_top_k(*args)


def test_aten_ops_per_step():
    # docs/kernels.md, docs/performance.md: step 0 runs 4 ATen ops (two aranges, the clone of
    # repeat_interleave, a repeat); a later step 13, the engines' select 7.
    cfg = DraftConfig(4, 4, 16)
    gen = torch.Generator().manual_seed(0)
    first = step_inputs(cfg, 0, 2, gen)[:2]
    with OpCounter() as counter:
        select_top_k(cfg, 0, *first)
    assert dict(counter.ops) == {
        "aten.arange.default": 1,
        "aten.arange.start": 1,
        "aten.clone.default": 1,
        "aten.repeat.default": 1,
    }
    later = step_inputs(cfg, 1, 2, gen)
    select_top_k(cfg, 1, *later)  # warm: the ranking keys' constants are built on first use
    with OpCounter() as counter:
        select_top_k(cfg, 1, *later)
    assert counter.total == 13
