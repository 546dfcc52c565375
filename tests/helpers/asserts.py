"""Assertions and small tensor helpers shared by the tests."""

import torch

from eagle_fn import MaskMode
from eagle_fn.types import bitpacked_dtype


def assert_matches(actual, expected, shape, dtype=None):
    """``actual`` has exactly ``shape`` (and ``dtype``) and equals the nested list ``expected``.

    No tolerance: integers bit for bit, floats exactly, NaN in the same places.
    """
    assert tuple(actual.shape) == tuple(shape), f"shape {tuple(actual.shape)} != {tuple(shape)}"
    if dtype is not None:
        assert actual.dtype == dtype, f"dtype {actual.dtype} != {dtype}"
    want = torch.tensor(expected, dtype=actual.dtype).reshape(shape).to(actual.device)
    torch.testing.assert_close(actual, want, rtol=0, atol=0, equal_nan=True)


def assert_trees_equal(actual, expected):
    """Two NamedTuples of tensors (DraftTrees, VerifyTrees, DraftSteps, verdicts) are equal
    field by field: values (NaN where NaN), dtype, device, shape."""
    assert type(actual) is type(expected)
    for name, a, e in zip(actual._fields, actual, expected, strict=True):
        assert a.shape == e.shape, f"{name}: shape {tuple(a.shape)} != {tuple(e.shape)}"
        torch.testing.assert_close(a, e, rtol=0, atol=0, equal_nan=True, msg=name)


def assert_layout_equals(vt, expected, cfg, bs, mode):
    """A VerifyTree of ``bs`` requests has the contract's shapes and dtypes for ``mode`` and
    equals a reference's dict of nested lists (reference.verify_tree), field by field."""
    n = cfg.num_draft_tokens
    for name in ("draft_tokens", "positions"):
        assert_matches(getattr(vt, name), expected[name], (bs * n,), torch.int64)
    for name in ("retrieve_index", "retrieve_next_token", "retrieve_next_sibling"):
        assert_matches(getattr(vt, name), expected[name], (bs, n), torch.int64)
    # The FULL mask's length, N * seq_lens_sum + bs * N * N, is the reference's.
    length = {"qlen": bs * n * n, "bitpacked": bs * n, "full": len(expected["tree_mask"])}
    dtype = bitpacked_dtype(n) if mode is MaskMode.BITPACKED else torch.bool
    mask = vt.tree_mask
    assert (mask.dtype, tuple(mask.shape)) == (dtype, (length[mode.value],))
    assert mask.to(torch.int64).tolist() == expected["tree_mask"]


def assert_verdict_equals(verdict, expected, cfg, bs):
    """A GreedyVerdict of ``bs`` requests has the contract's shapes and equals a reference's
    (accept_index, num_accepted, predicts) nested lists."""
    accept, counts, predicts = expected
    assert_matches(verdict.accept_index, accept, (bs, cfg.num_steps + 1), torch.int64)
    assert_matches(verdict.num_accepted, counts, (bs,), torch.int64)
    assert_matches(verdict.predicts, predicts, (bs * cfg.num_draft_tokens,), torch.int64)


def assert_mask_allowed(mask, allowed):
    """Each cell of the flat ``mask`` holds one of the values ``allowed`` lists for it."""
    got = mask.to(torch.int64).tolist()
    assert len(got) == len(allowed)
    assert [cell for cell, value in enumerate(got) if value not in allowed[cell]] == []


def on(tensors, device):
    """A NamedTuple of tensors (a DraftTree, a VerifyTree...) moved to ``device``."""
    return type(tensors)(*(t.to(device) for t in tensors))
