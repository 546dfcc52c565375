"""The selection rule in Triton: rank by counting, or select above a threshold.

Candidate ``h`` beats ``g`` when ``key(h) > key(g)``, or the keys are equal and ``h < g``, with
``key`` the score and NaN counted as ``-inf``. That is a strict total order, so ``rank(g)``,
the number of candidates that beat ``g``, is ``g``'s position in the best-first order: no
sort, no float64 keys, and exact on every score dtype.

For wide rows, counting all pairs costs ``W²`` compares. :func:`threshold` finds the ``n``-th
largest key instead, a bit at a time, on :func:`order_key`'s integers: the ``n`` best are
then the keys above it and, among those equal to it, the lowest indices.
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


@triton.jit
def order_key(key, WIDE: tl.constexpr):
    """A :func:`rank_key` as an unsigned integer in the same order, ties included.

    uint64 when ``WIDE``, else uint32, and never 0 (a NaN's pattern). ``-0.0`` becomes
    ``+0.0`` first, so that the two tie as they do under ``==``. Then a positive float's bits
    gain the sign bit (above every negative) and a negative's are all flipped (a larger
    magnitude ranks lower).
    """
    bits = key.to(tl.uint64 if WIDE else tl.uint32, bitcast=True)
    top: tl.constexpr = bits.dtype.primitive_bitwidth - 1
    zero = tl.zeros_like(bits)
    bits = tl.where((bits << 1) == zero, zero, bits)  # [...] -0.0 -> +0.0
    sign = (bits >> top) != zero
    # `bits ^ (zero - 1)` is `~bits`, which Triton 3.6's interpreter cannot apply to uints.
    return tl.where(sign, bits ^ (zero - 1), bits | ((zero + 1) << top))


@triton.jit
def threshold(keys, n, BITS: tl.constexpr):
    """The ``n``-th largest of the unsigned ``keys``, ``1 <= n <= B``. ``[B] -> []``.

    That is the largest ``t`` with at least ``n`` keys ``>= t``, built from the top bit down,
    ``BITS`` bits a round: of the ``2**BITS`` next digits, the largest that still leaves ``n``
    keys at or above. Digit 0 always does, so a round is one count of the keys against every
    digit (``2**BITS x B`` compares), then one count of the digits.
    """
    width: tl.constexpr = keys.dtype.primitive_bitwidth
    found = tl.full([], 0, keys.dtype)  # the bits fixed so far
    digits = tl.arange(0, 1 << BITS).to(keys.dtype)[None, :]  # [1, R]
    column = keys[:, None]  # [B, 1]
    for i in tl.static_range(width // BITS):
        shift = width - BITS * (i + 1)
        bound = found | (digits << shift)  # [1, R]
        at_least = tl.sum((column >= bound).to(tl.int32), axis=0)  # [R]
        digit = tl.sum((at_least >= n).to(tl.int32), axis=0) - 1  # the largest that fits
        found = found | (digit.to(keys.dtype) << shift)
    return found
