"""Checks for what Triton's CPU interpreter hides and a GPU would show: where each access
goes, whether the result depends on the order the programs run in, and what an output holds
where a kernel never wrote it.

- :func:`memcheck`: every address an active lane of an interpreted kernel loads, stores or
  updates atomically must lie inside one of that launch's tensor arguments (the extent of
  each view, not the buffer behind it), as compute-sanitizer's memcheck requires on a GPU.
  The interpreter reads and writes through raw pointers, so a load one element past an input
  whose value is then unused (a mask let through by one) changes no result the tests
  compare; on a GPU it reads another allocation or faults. ``kernel_support.guarded_outputs``
  finds stray stores by the values they leave; this finds every stray access by its address.
- :func:`shuffled_programs`: the interpreter runs a launch's programs one after another in
  order, so a program that writes into the row the next program then overwrites leaves no
  trace. Running the even programs first, then the odd ones, puts every pair of neighbours
  in both orders across a launch of three or more programs: a write into a neighbour's row
  survives one of them, as it may on a GPU, where programs run in any order or together.
- :func:`poisoned_allocations`: new tensors hold NaN or the dtype's largest value, not the
  zeros fresh CPU memory often holds.

The first two patch ``triton.runtime.interpreter`` (its launch, its builder's grid index
and memory methods, whose signatures differ across Triton releases: only the positions read
here are the same in all).
"""

import contextlib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from triton.runtime import interpreter

# Builder method -> (kind, position of the pointers, position of the mask or None), after self.
_ACCESSES = {
    "create_masked_load": ("load", 0, 1),
    "create_masked_store": ("store", 0, 2),
    "create_atomic_rmw": ("atomic", 1, 3),
    "create_atomic_cas": ("atomic", 0, None),
}


@dataclass
class Accesses:
    """What a :func:`memcheck` block saw: lanes checked per kind, and the stray accesses as
    ``(kernel, kind, bytes, address)`` (at most three per access instruction). A test that
    makes stray accesses on purpose reads and clears ``stray``."""

    lanes: Counter = field(default_factory=Counter)
    stray: list = field(default_factory=list)
    ranges: dict = field(default_factory=dict)  # kernel -> its arguments at its first stray

    def report(self):
        return "\n".join(
            f"{name}: a {size}-byte {kind} at {address:#x}, outside {self.ranges[name]}"
            for name, kind, size, address in self.stray[:8]
        )


def extents(values):
    """``(lo, hi)`` byte ranges of the non-empty tensors among ``values`` (tuples opened)."""
    out = []
    for value in values:
        if isinstance(value, tuple):
            out.extend(extents(value))
        elif isinstance(value, torch.Tensor) and value.numel() > 0:
            last = sum(
                (size - 1) * stride
                for size, stride in zip(value.shape, value.stride(), strict=True)
            )
            lo = value.data_ptr()
            out.append((lo, lo + (last + 1) * value.element_size()))
    return out


@contextlib.contextmanager
def memcheck():
    """Checks every interpreted launch inside the block; yields its :class:`Accesses` and
    fails on exit if any access strayed (the first few named)."""
    seen = Accesses()
    launches = []  # (kernel name, extents) of the launches running, innermost last
    run = interpreter.GridExecutor.__call__

    def launch(self, *args, **kwargs):
        launches.append((self.fn.__name__, extents([*args, *kwargs.values()])))
        try:
            return run(self, *args, **kwargs)
        finally:
            launches.pop()

    def check(kind, ptrs, mask):
        addresses = ptrs.data.astype(np.uint64)
        if mask is not None:
            addresses = addresses[np.broadcast_to(mask.data, addresses.shape)]
        addresses = addresses.ravel()
        size = np.dtype(interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize
        name, ranges = launches[-1]
        inside = np.zeros(addresses.shape, dtype=bool)
        for lo, hi in ranges:
            inside |= (addresses >= lo) & (addresses + size <= hi)
        seen.lanes[kind] += addresses.size
        stray = [(name, kind, size, int(a)) for a in addresses[~inside][:3]]
        if stray:
            seen.ranges.setdefault(name, [(hex(lo), hex(hi)) for lo, hi in ranges])
            seen.stray.extend(stray)

    def checked(method, kind, at, mask_at):
        original = getattr(interpreter.InterpreterBuilder, method)

        def access(self, *args):
            check(kind, args[at], None if mask_at is None else args[mask_at])
            return original(self, *args)

        return access

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(interpreter.GridExecutor, "__call__", launch)
        for method, (kind, at, mask_at) in _ACCESSES.items():
            patch.setattr(
                interpreter.InterpreterBuilder, method, checked(method, kind, at, mask_at)
            )
        yield seen
    assert not seen.stray, "accesses outside the kernel's arguments:\n" + seen.report()


@contextlib.contextmanager
def shuffled_programs():
    """Inside the block, each interpreted launch runs its programs along axis 0 evens first,
    then odds (``0, 2, 4, .., 1, 3, ..``)."""
    place = interpreter.InterpreterBuilder.set_grid_idx

    def program(self, x, y, z):
        half = (self.grid_dim[0] + 1) // 2
        return place(self, 2 * x if x < half else 2 * (x - half) + 1, y, z)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(interpreter.InterpreterBuilder, "set_grid_idx", program)
        yield


@contextlib.contextmanager
def poisoned_allocations():
    """Inside the block, ``torch.empty`` and ``new_empty`` fill what they allocate with NaN
    (floats) or the dtype's largest value (integers, ``True`` for bool): torch's own fill for
    deterministic mode, which adds no dispatched op. Fresh CPU memory is often zero, the very
    value an unwritten ``predicts`` slot or mask cell should hold; a GPU's caching allocator
    hands back whatever the last tensor left."""
    mode, warn_only = (
        torch.are_deterministic_algorithms_enabled(),
        (torch.is_deterministic_algorithms_warn_only_enabled()),
    )
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill
