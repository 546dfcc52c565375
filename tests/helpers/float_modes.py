"""Process-wide float settings for a test's duration."""

import contextlib
from collections.abc import Iterator

import pytest
import torch


@contextlib.contextmanager
def flush_denormal() -> Iterator[None]:
    """Subnormal floats flushed to zero (read and written), where the CPU can."""
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
