"""The gpu marker that bench/gpu_check.sh selects with ``-m gpu`` (set in conftest.py)."""

import pytest


@pytest.mark.parametrize(
    ("name", "marked"), [("plain", False), ("on_cuda", True), ("a_kernel", True), ("Triton", True)]
)
def test_the_gpu_marker_follows_the_test_id(request, name, marked):
    assert (request.node.get_closest_marker("gpu") is not None) is marked
