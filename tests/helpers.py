"""Assertions and small tensor helpers shared by the tests."""

import torch


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
    """Two DraftTrees (or VerifyTrees) are equal field by field: values, dtype, device, shape."""
    assert type(actual) is type(expected)
    for name, a, e in zip(actual._fields, actual, expected, strict=True):
        assert a.shape == e.shape, f"{name}: shape {tuple(a.shape)} != {tuple(e.shape)}"
        torch.testing.assert_close(a, e, rtol=0, atol=0, equal_nan=True, msg=name)


def on(tensors, device):
    """A NamedTuple of tensors (a DraftTree, a VerifyTree...) moved to ``device``."""
    return type(tensors)(*(t.to(device) for t in tensors))
