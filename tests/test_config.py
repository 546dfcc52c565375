import dataclasses
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eagle_fn import DraftConfig


@pytest.mark.parametrize(
    ("cfg", "num_candidates", "parent_width", "is_chain"),
    [
        (DraftConfig(4, 3, 8), 4 + 2 * 16, 4 * 2 + 1, False),  # semantics.md §7 tree
        (DraftConfig(1, 3, 4), 3, 3, True),  # semantics.md §7 chain: one candidate per step
        (DraftConfig(1, 1, 2), 1, 0, True),  # one step: no parent table at all
        (DraftConfig(8, 1, 9), 8, 0, False),  # one wide step
        (DraftConfig(2, 5, 3), 2 + 4 * 4, 2 * 4 + 1, False),
    ],
)
def test_derived_values(cfg, num_candidates, parent_width, is_chain):
    assert cfg.num_candidates == num_candidates
    assert cfg.parent_width == parent_width
    assert cfg.is_chain is is_chain


@given(st.integers(1, 64))
def test_chain_builds_the_only_valid_chain(num_steps):
    cfg = DraftConfig.chain(num_steps)
    assert (cfg.topk, cfg.num_steps, cfg.num_draft_tokens) == (1, num_steps, num_steps + 1)
    assert cfg.num_candidates == num_steps


@given(st.integers(1, 9), st.integers(1, 9), st.data())
def test_every_valid_triple_is_accepted(topk, num_steps, data):
    cands = topk + (num_steps - 1) * topk**2
    lo = num_steps + 1 if topk == 1 else 2
    n = data.draw(st.integers(lo, cands + 1))
    cfg = DraftConfig(topk, num_steps, n)
    assert cfg.num_draft_tokens == n


def test_frozen_and_hashable():
    cfg = DraftConfig(4, 3, 8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.topk = 2
    assert {cfg: 1}[DraftConfig(4, 3, 8)] == 1
    assert cfg != DraftConfig(4, 3, 9)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"topk": 0, "num_steps": 3, "num_draft_tokens": 4}, r"topk must be an int >= 1, got 0"),
        ({"topk": True, "num_steps": 3, "num_draft_tokens": 4}, r"topk .* got True"),
        ({"topk": 2.0, "num_steps": 3, "num_draft_tokens": 4}, r"topk .* got 2\.0"),
        ({"topk": "2", "num_steps": 3, "num_draft_tokens": 4}, r"topk .* got '2'"),
        (
            {"topk": 2, "num_steps": 0, "num_draft_tokens": 2},
            r"num_steps must be an int >= 1, got 0",
        ),
        ({"topk": 2, "num_steps": None, "num_draft_tokens": 2}, r"num_steps .* got None"),
        (
            {"topk": 2, "num_steps": 2, "num_draft_tokens": 1},
            r"num_draft_tokens must be an int >= 2, got 1",
        ),
        # 2 + 1 * 4 = 6 candidates: at most 7 nodes.
        (
            {"topk": 2, "num_steps": 2, "num_draft_tokens": 8},
            r"num_draft_tokens must be <= .* = 7 .* got 8",
        ),
        # A chain selects every candidate, so N is fixed at S + 1.
        (
            {"topk": 1, "num_steps": 3, "num_draft_tokens": 3},
            r"must equal num_steps \+ 1 = 4 .* got 3",
        ),
    ],
)
def test_bad_values_name_field_and_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DraftConfig(**kwargs)


@pytest.mark.parametrize("num_steps", [0, -1, 1.5, False, None, "3"])
def test_chain_rejects_bad_steps(num_steps):
    # A ValueError for a non-int too, not the TypeError of num_steps + 1.
    message = f"DraftConfig.num_steps must be an int >= 1, got {num_steps!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        DraftConfig.chain(num_steps)
