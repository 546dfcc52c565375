"""The ranking rule on adversarial floats: neighbours one ulp apart, subnormals, zeros, NaN."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from eagle_fn.selection import (
    MAX_KEYED_WIDTH,
    best_indices,
    best_indices_ascending,
    rank_keys,
)
from helpers import reference

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
NAN = float("nan")


def tiny_values(dtype):
    """Zero, the smallest normal and a subnormal of ``dtype``, built in ``dtype`` itself: made
    in float32 first, float64's would underflow to zero."""
    normal = torch.finfo(dtype).smallest_normal
    return torch.tensor([0.0, normal, normal / 4], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tiny_values_are_the_smallest_normal_and_a_subnormal(dtype):
    zero, normal, subnormal = tiny_values(dtype).tolist()
    assert zero == 0.0
    assert normal == torch.finfo(dtype).smallest_normal
    assert 0.0 < subnormal < normal


@st.composite
def probability_rows(draw, dtype):
    """Rows of non-negative scores and NaN, crowded with exact ties and one-ulp neighbours."""
    width = draw(st.integers(1, 80))
    base = draw(st.lists(st.floats(0, 1, width=32), min_size=1, max_size=4))
    pool = torch.tensor(base, dtype=dtype)
    up = torch.nextafter(pool, torch.tensor(2.0, dtype=dtype))  # the next float up
    values = torch.cat([pool, up, tiny_values(dtype), torch.tensor([NAN], dtype=dtype)])
    rows = draw(st.integers(1, 3))
    picks = draw(
        st.lists(st.integers(0, len(values) - 1), min_size=rows * width, max_size=rows * width)
    )
    return values[torch.tensor(picks)].view(rows, width)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_exact_on_probabilities_ties_and_nan(dtype, data):
    scores = data.draw(probability_rows(dtype))
    n = data.draw(st.integers(0, scores.shape[1]))
    expected = [reference.rank(row, n) for row in scores.double().tolist()]
    assert best_indices(scores, n).tolist() == expected
    assert best_indices_ascending(scores, n).tolist() == [sorted(e) for e in expected]


# Values that tie often outside the probabilities: negatives, both infinities, NaN of either
# sign, signed zeros.
SIGNED_TIES = (-1.0, -0.5, -(2.0**-24), float("inf"), -float("inf"), NAN, -NAN, 0.0, -0.0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_exact_on_any_floats(dtype, data):
    # Negative and infinite scores are not probabilities; the rule orders them all the same,
    # equal negatives and repeated +inf by the lower index (the kernels' order too).
    width = data.draw(st.integers(1, 40))
    value = st.one_of(st.floats(allow_nan=True, width=32), st.sampled_from(SIGNED_TIES))
    values = data.draw(st.lists(value, min_size=width, max_size=width))
    scores = torch.tensor([values], dtype=dtype)
    n = data.draw(st.integers(0, width))
    expected = reference.rank(scores[0].double().tolist(), n)
    assert best_indices(scores, n).tolist() == [expected]
    assert best_indices_ascending(scores, n).tolist() == [sorted(expected)]


@pytest.mark.parametrize("dtype", DTYPES[:3], ids=str)
@pytest.mark.parametrize("value", [0.5, -0.5, 2.0**-14])
def test_one_ulp_apart_across_the_widest_keyed_row(dtype, value):
    # The index factor must stay below half an ulp at g = MAX_KEYED_WIDTH - 1: neighbours at
    # the row's two ends keep their order either way round, and equal ones go by index.
    width = MAX_KEYED_WIDTH
    low = torch.tensor(value, dtype=dtype)
    high = torch.nextafter(low, torch.tensor(1.0, dtype=dtype))
    for first, last in ((low, high), (high, low), (low, low)):
        s = torch.full((1, width), -1.0, dtype=dtype)
        s[0, 0], s[0, -1] = first, last
        expected = reference.rank(s[0].double().tolist(), 2)
        assert best_indices(s, 2).tolist() == [expected]
        assert expected == ([width - 1, 0] if last > first else [0, width - 1])


def test_equal_negatives_and_repeated_infinity_rank_by_index():
    inf = float("inf")
    s = torch.tensor([[-1.0, inf, -1.0, inf, -1.0, -inf]])
    for dtype in DTYPES:
        assert best_indices(s.to(dtype), 6).tolist() == [[1, 3, 0, 2, 4, 5]], dtype


def test_hand_picked_row():
    # Values:      .5   NaN  0    .5   1e-45(subnormal)  0    NaN  .5+ulp
    s = torch.tensor([[0.5, NAN, 0.0, 0.5, 1e-45, 0.0, NAN, 0.50000006]])
    # Best first: the one-ulp-larger .5, then the two .5 by index, the subnormal, the zeros
    # by index, then NaN by index.
    assert best_indices(s, 8).tolist() == [[7, 0, 3, 4, 2, 5, 1, 6]]
    assert best_indices_ascending(s, 4).tolist() == [[0, 3, 4, 7]]


def test_nan_counts_as_negative_infinity():
    s = torch.tensor([[NAN, -float("inf"), -1.0, NAN]])
    for dtype in DTYPES:
        # -1 first; then NaN and -inf tie, in index order.
        assert best_indices(s.to(dtype), 4).tolist() == [[2, 0, 1, 3]], dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_infinities_rank_beyond_the_largest_finite_scores(dtype):
    # Kept infinite on every path (float64's sort too), not clipped onto finfo.max, where they
    # would tie with it and fall behind a lower index.
    big, inf = torch.finfo(dtype).max, float("inf")
    s = torch.tensor([[big, inf, -inf, -big]], dtype=dtype)
    assert best_indices(s, 4).tolist() == [[1, 0, 3, 2]]
    assert reference.rank(s[0].double().tolist(), 4) == [1, 0, 3, 2]


def test_negative_zero_ties_with_zero_by_index():
    s = torch.tensor([[0.0, -0.0, 0.0, -0.0]])
    assert best_indices(s, 4).tolist() == [[0, 1, 2, 3]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_rows_wider_than_the_key_range_fall_back_exactly(dtype):
    width = MAX_KEYED_WIDTH + 3
    s = torch.zeros(1, width, dtype=dtype)
    s[0, -1] = NAN
    s[0, 5] = 0.25
    assert best_indices(s, 4).tolist() == [[5, 0, 1, 2]]


def test_past_the_key_range_keys_would_misrank_adjacent_scores():
    # Why the range ends: at index 2**17 + 1 the tie-break factor takes more than a float32
    # ulp off 2 - 2**-23, and its key falls below index 0's 2 - 2**-22. The fallback is exact.
    width = 2**17 + 2
    s = torch.zeros(1, width)
    s[0, 0], s[0, -1] = 2 - 2**-22, 2 - 2**-23
    assert torch.topk(rank_keys(s), 2).indices.tolist() == [[0, width - 1]]  # keyed: wrong
    assert best_indices(s, 2).tolist() == [[width - 1, 0]]
    assert best_indices_ascending(s, 1).tolist() == [[width - 1]]


def test_outputs_have_canonical_strides():
    # A compiled graph guards on strides; a bs=1 row must not carry a wider row's stride.
    s = torch.rand(1, 52)
    assert best_indices_ascending(s, 15).stride() == (15, 1)
    assert best_indices_ascending(s.double(), 15).stride() == (15, 1)
