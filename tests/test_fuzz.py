"""Fuzz every public entry point that takes arguments (all but check_constants): whatever comes
in, a result or a ValueError/TypeError comes out."""

import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st

from eagle_fn import (
    DraftConfig,
    DraftOrganizer,
    DraftTree,
    MaskMode,
    VerifyTree,
    build_verify_tree,
    chain_constants,
    draw_uniforms,
    is_valid_tree,
    organize_chain,
    organize_multilayer,
    organize_tree,
    select_top_k,
    target_probs_from_logits,
    verify_greedy,
    verify_sampling,
)
from eagle_fn.toy import greedy_generate, speculative_generate, toy_models
from helpers.profiles import examples
from helpers.valid_calls import (
    BONUS,
    CHAIN_CFG,
    COINS,
    CONSTANTS,
    LISTS,
    LOGITS,
    ML_I,
    ML_P,
    SEQ_LENS,
    STEP0,
    STEP1,
    TARGET,
    TREE,
    TREE_CFG,
    VT,
)

TOY_TARGET, TOY_DRAFT = toy_models(vocab=8)
PROBS = torch.softmax(LOGITS, -1)  # [bs 2, N 4, V 6]
CHAIN_VT = build_verify_tree(CHAIN_CFG, organize_multilayer(CHAIN_CFG, ML_P, ML_I), BONUS, SEQ_LENS)
CHAIN_Q, CHAIN_P = PROBS[:, :3], PROBS.flip(-1)[:, :3]  # [bs 2, N 3, V 6]: target, draft
PROMPTS = torch.tensor([[1, 2, 3], [4, 5, 6]])
DTYPES = [
    torch.int64,
    torch.int32,
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bool,
    torch.uint8,
]


def worker(cfg):
    return DraftOrganizer(cfg, max_bs=4, device="cpu", compile=False)


def tensor_like(base, values):
    """A tensor with ``base``'s signature and arbitrary values: out-of-range indices, NaN."""
    if not base.dtype.is_floating_point:  # integers: huge, negative, anything in range
        values = [int(v) if v == v and abs(v) < 1e6 else -(10**6) for v in values]
    flat = torch.tensor(
        values, dtype=torch.float64 if base.dtype.is_floating_point else torch.int64
    )
    repeated = flat.repeat(base.numel() // len(values) + 1)[: base.numel()]
    return repeated.reshape(base.shape).to(base.dtype)


@st.composite
def random_tensors(draw):
    shape = draw(st.lists(st.integers(0, 4), min_size=0, max_size=3))
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**32 - 1))  # reproducible: hypothesis replays the seed
    t = torch.randint(-20, 20, shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
    if draw(st.booleans()) and t.dim() == 2:
        t = t.t()  # non-contiguous
    if draw(st.integers(0, 9)) == 0 and t.dim() >= 1:
        t = t.to_sparse()
    return t


JUNK = st.one_of(
    random_tensors(),
    st.none(),
    st.integers(-5, 40),
    st.floats(allow_nan=True),
    st.sampled_from(["cpu", "cuda", "cuda:1", "meta", "mps", "", "x", "cpu:0"]),
    st.booleans(),
    st.lists(random_tensors(), max_size=3),
    st.sampled_from(list(MaskMode)),
)
VALUES = st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1, max_size=8)


@st.composite
def injured(draw, value):
    """``value`` itself, junk in its place, or a part of it hurt (a list entry, a tree field,
    the values of a tensor). Returns ``(value, damaged)``."""
    if draw(st.integers(0, 5)) <= 1:
        return value, False
    return draw(damaged(value)), True


@st.composite
def damaged(draw, value):
    if draw(st.booleans()):
        return draw(JUNK)
    if isinstance(value, torch.Tensor):
        return tensor_like(value, draw(VALUES))
    if (
        isinstance(value, (list, tuple))
        and value
        and not isinstance(value, (DraftTree, VerifyTree))
    ):
        items = list(value)
        i = draw(st.integers(0, len(items) - 1))
        items[i] = draw(damaged(items[i]))
        return items if draw(st.booleans()) else items[:-1]
    if isinstance(value, (DraftTree, VerifyTree)):
        i = draw(st.integers(0, len(value) - 1))
        return value._replace(**{value._fields[i]: draw(damaged(value[i]))})
    return draw(JUNK)


ENTRY_POINTS = {
    "DraftConfig": (DraftConfig, [2, 2, 4]),
    "DraftConfig.chain": (DraftConfig.chain, [3]),
    "select_top_k step 0": (select_top_k, [TREE_CFG, 0, STEP0[0], STEP0[1], None]),
    "select_top_k step 1": (select_top_k, [TREE_CFG, 1, *STEP1]),
    "organize_tree": (organize_tree, [TREE_CFG, *LISTS]),
    "organize_chain": (organize_chain, [CONSTANTS, ML_I]),
    "organize_multilayer": (organize_multilayer, [CHAIN_CFG, ML_P, ML_I]),
    "chain_constants": (
        lambda c, m, d: chain_constants(c, max_bs=m, device=d),
        [CHAIN_CFG, 4, "cpu"],
    ),
    "DraftOrganizer": (
        lambda c, m, d: DraftOrganizer(c, max_bs=m, device=d, compile=False),
        [CHAIN_CFG, 4, "cpu"],
    ),
    "DraftOrganizer.organize": (lambda *a: worker(CHAIN_CFG).organize(*a), [ML_P, ML_I]),
    "DraftOrganizer.organize_steps": (lambda *a: worker(TREE_CFG).organize_steps(*a), list(LISTS)),
    "DraftOrganizer.build_verify": (
        lambda t, b, s, m, n: worker(TREE_CFG).build_verify(t, b, s, mask_mode=m, seq_lens_sum=n),
        [TREE, BONUS, SEQ_LENS, MaskMode.FULL, None],
    ),
    "DraftOrganizer.build_verify chain": (
        lambda t, b, s, m: worker(CHAIN_CFG).build_verify(t, b, s, mask_mode=m),
        [organize_multilayer(CHAIN_CFG, ML_P, ML_I), BONUS, SEQ_LENS, MaskMode.QLEN],
    ),
    "DraftOrganizer.reconfigure": (lambda c: worker(CHAIN_CFG).reconfigure(c), [TREE_CFG]),
    "build_verify_tree": (
        lambda c, t, b, s, m, n: build_verify_tree(c, t, b, s, mask_mode=m, seq_lens_sum=n),
        [TREE_CFG, TREE, BONUS, SEQ_LENS, MaskMode.FULL, 14],
    ),
    "is_valid_tree": (is_valid_tree, [TREE_CFG, TREE]),
    "verify_greedy": (verify_greedy, [TREE_CFG, VT, TARGET]),
    "verify_sampling": (
        lambda c, t, q, u, f, s, a: verify_sampling(
            c, t, q, u, f, threshold_single=s, threshold_acc=a
        ),
        [TREE_CFG, VT, PROBS, *COINS, 0.9, 0.5],
    ),
    "verify_sampling draft": (
        lambda c, t, q, u, f, p: verify_sampling(c, t, q, u, f, draft_probs=p),
        [CHAIN_CFG, CHAIN_VT, CHAIN_Q, COINS[0][:, :3], COINS[1], CHAIN_P],
    ),
    "target_probs_from_logits": (
        lambda x, t, k, p: target_probs_from_logits(x, t, top_k=k, top_p=p),
        [LOGITS, torch.tensor([1.0, 0.0]), torch.tensor([2, 0]), torch.tensor([0.9, 1.0])],
    ),
    "draw_uniforms": (
        lambda b, n, g, d: draw_uniforms(b, n, generator=g, device=d),
        [2, 4, torch.Generator().manual_seed(0), "cpu"],
    ),
    "greedy_generate": (greedy_generate, [TOY_TARGET, PROMPTS, 3]),
    "speculative_generate": (speculative_generate, [TREE_CFG, TOY_TARGET, TOY_DRAFT, PROMPTS, 3]),
}


# DraftConfig.chain builds a DraftConfig, whose own messages name the field.
RAISED_AS = {"DraftConfig.chain": "DraftConfig"}


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
@examples(200)
@given(data=st.data())
def test_only_clear_errors_come_out(name, data):
    fn, valid = ENTRY_POINTS[name]
    drawn = [data.draw(injured(value), label=f"arg {i}") for i, value in enumerate(valid)]
    args = [value for value, _ in drawn]
    damaged = any(hurt for _, hurt in drawn)
    event("damaged" if damaged else "undamaged")
    message = None
    if not damaged:
        fn(*args)  # an undamaged call must succeed
    else:
        try:
            fn(*args)
        except (ValueError, TypeError) as error:
            message = str(error) or "(no message)"
    if message is not None:
        # A clear error starts with the entry point it was raised for, not deep inside.
        where = RAISED_AS.get(name, name.split(" ")[0])
        assert message.startswith((f"{where}: ", f"{where}.")), message
