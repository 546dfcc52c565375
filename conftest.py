"""Names every docstring example in src/ may use, as a user's session would import them."""

import pytest
import torch

import eagle_fn
from eagle_fn import profiling


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    doctest_namespace["torch"] = torch
    doctest_namespace.update({name: getattr(eagle_fn, name) for name in eagle_fn.__all__})
    doctest_namespace.update(OpCounter=profiling.OpCounter)
