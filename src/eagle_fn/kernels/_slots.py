"""Slot lists in Triton: read the concatenation of up to 8 tensors without concatenating.

A draft loop hands over one tensor per step. A kernel cannot take a list of pointers, so each
list travels as 8 pointer arguments, ``None`` for the unused ones. A ``None`` becomes a
compile-time constant, free on the GPU, but Triton's launcher still binds and hashes every
argument on the host: 8 slots rather than 16 take 24 arguments off the organize launch
(docs/kernels.md). Slot ``0`` holds ``FIRST`` entries per row, each later slot ``STEP``, and
the last slot runs to ``TOTAL``: a longer list is passed with its tail concatenated into the
last slot, which is where that layout puts it.
"""

# ruff: noqa: ANN001, ANN202, N803  (Triton kernels: untyped tensor args, CAPS constexprs)
# mypy: allow-untyped-defs, disable-error-code="import-untyped, import-not-found"

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ._floats import widen

MAX_SLOTS = 8


def slot_args(tensors: list[Tensor]) -> list[Tensor | None]:
    """``MAX_SLOTS`` kernel arguments: contiguous row-major slots, then ``None`` padding."""
    if len(tensors) > MAX_SLOTS:
        tail = torch.cat(tensors[MAX_SLOTS - 1 :], dim=1)  # [bs, rest...] the last slot
        tensors = [*tensors[: MAX_SLOTS - 1], tail]
    slots: list[Tensor | None] = [t.contiguous() for t in tensors]
    return slots + [None] * (MAX_SLOTS - len(slots))


@triton.jit
def load_slots(
    acc,
    flat,
    row,
    mask,
    a0,
    a1,
    a2,
    a3,
    a4,
    a5,
    a6,
    a7,
    SLOTS: tl.constexpr,
    FIRST: tl.constexpr,
    STEP: tl.constexpr,
    TOTAL: tl.constexpr,
):
    """Entries ``flat`` of row ``row`` of the slots' concatenation, cast to ``acc``'s dtype.

    ``acc`` keeps its values where ``mask`` is off or ``flat`` is past ``TOTAL``.
    """
    slots = (a0, a1, a2, a3, a4, a5, a6, a7)
    for j in tl.static_range(SLOTS):
        slot = slots[j]  # a compile-time index: each step's own pointer
        start = 0 if j == 0 else FIRST + STEP * (j - 1)
        end = TOTAL if j == SLOTS - 1 else FIRST + STEP * j
        inside = mask & (flat >= start) & (flat < end)
        value = tl.load(slot + row * (end - start) + (flat - start), mask=inside)
        if value.dtype == tl.bfloat16:
            value = widen(value, False)
        acc = tl.where(inside, value.to(acc.dtype), acc)
    return acc
