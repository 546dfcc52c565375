"""The selection rule in Triton: rank by counting the candidates that beat each one.

Candidate ``h`` beats ``g`` when ``key(h) > key(g)``, or the keys are equal and ``h < g``, with
``key`` the score and NaN counted as ``-inf``. That is a strict total order, so ``rank(g)``,
the number of candidates that beat ``g``, is ``g``'s position in the best-first order: no
sort, no float64 keys, and exact on every score dtype.
"""

# ruff: noqa: ANN001, ANN202, N803  (Triton kernels: untyped tensor args, CAPS constexprs)
# mypy: allow-untyped-defs, disable-error-code="import-untyped, import-not-found"

from __future__ import annotations

import triton
import triton.language as tl

from ._floats import widen


@triton.jit
def rank_key(score, WIDE: tl.constexpr):
    """Score as an exact comparison key: float64 when ``WIDE``, else float32; NaN is -inf."""
    key = widen(score, WIDE)
    return tl.where(key != key, float("-inf"), key)


@triton.jit
def count_better(key_g, index_g, key_h, index_h):
    """For each ``g`` of a tile, how many of the ``h`` beat it. ``[G], [H] -> [G]`` int32."""
    kg = key_g[:, None]  # [G, 1]
    kh = key_h[None, :]  # [1, H]
    better = (kh > kg) | ((kh == kg) & (index_h[None, :] < index_g[:, None]))  # [G, H]
    return tl.sum(better.to(tl.int32), axis=1)  # [G]
