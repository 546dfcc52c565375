"""Exact float conversions in Triton, the same bits on a GPU and in the interpreter.

The interpreter converts bfloat16 inexactly (float32 -> bfloat16 truncates, and bfloat16
subnormals widen wrongly), so bfloat16 goes through its bits here: widening is a shift, and
narrowing rounds to nearest even as ATen does, NaN becoming ATen's quiet NaN ``0x7FC0``.
float16 and float64 use Triton's casts, which round to nearest even on both.
"""

# ruff: noqa: ANN001, ANN202, N803  (Triton kernels: untyped tensor args, CAPS constexprs)
# mypy: allow-untyped-defs, disable-error-code="import-untyped, import-not-found"

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def widen(x, WIDE: tl.constexpr):
    """``x`` exactly as float32, or float64 when ``WIDE``."""
    if x.dtype == tl.bfloat16:
        bits = x.to(tl.int16, bitcast=True).to(tl.int32) << 16
        x = bits.to(tl.float32, bitcast=True)
    return x.to(tl.float64) if WIDE else x.to(tl.float32)


@triton.jit
def narrow(x, dtype: tl.constexpr):
    """``x`` (float32, or float64 for a float64 ``dtype``) rounded to nearest even in ``dtype``."""
    if dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        rounded = tl.where(x != x, 0x7FC0, rounded)
        out = rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        out = x.to(dtype)
    return out
