"""Launching the verify kernels: straight to Triton, or through an opaque op when interpreted.

Triton is optional: without it ``HAVE_TRITON`` is False, ``jit`` leaves functions undecorated
and nothing here launches. Under ``TRITON_INTERPRET=1`` a kernel is a Python function that
reads real memory, so it cannot run on the fake or functional tensors that opcheck, make_fx
and torch.compile trace with; ``launch`` then goes through ``eagle_fn::verify_interpreted_launch``,
an opaque mutating op whose fake does nothing, so tracing records the launch and replays it on
real tensors.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

F = TypeVar("F", bound=Callable[..., Any])

triton: Any
tl: Any
try:
    import triton  # type: ignore[import-untyped,no-redef]
    import triton.language as tl  # type: ignore[import-untyped,no-redef]
except ImportError:  # the torch backend needs no Triton
    triton = tl = None

HAVE_TRITON = triton is not None

InterpretedFunction: Any
try:
    from triton.runtime.interpreter import (  # type: ignore[import-untyped,no-redef]
        InterpretedFunction,
    )
except ImportError:
    InterpretedFunction = None

# Every kernel made by ``jit``, by name: the opaque op names its kernel by a string, which
# (unlike a position) stays right in graphs cached by an older build.
KERNELS: dict[str, Any] = {}


def jit(fn: F) -> F:
    """``triton.jit`` when Triton is installed (the function unchanged otherwise)."""
    if triton is None:
        return fn
    kernel = triton.jit(fn)
    KERNELS[kernel.fn.__name__] = kernel
    return kernel


def interpreted(kernel: object) -> bool:
    """Whether ``kernel`` runs in Triton's CPU interpreter (``TRITON_INTERPRET=1``)."""
    return InterpretedFunction is not None and isinstance(kernel, InterpretedFunction)


def launch(
    kernel: Any,
    programs: int,
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    scalars: Sequence[int],
    *,
    num_warps: int = 4,
    **constexprs: int,
) -> None:
    """Runs ``kernel[(programs,)](*inputs, *outputs, *scalars, **constexprs)``; none for 0.

    ``num_warps`` is a launch option (the interpreter has no warps and ignores it).
    """
    if type(programs) is int and programs == 0:  # eager: an empty grid is not launched at all
        return  # (a traced batch size is symbolic; Triton's launcher skips empty grids itself)
    tensors = (*inputs, *outputs)
    if interpreted(kernel) and not all(type(t) is Tensor for t in tensors):
        values = [constexprs[name] for name in constexpr_names(kernel, len(constexprs))]
        _interpreted_launch(
            list(outputs), list(inputs), list(scalars), kernel.fn.__name__, programs, values
        )
        return
    launchable = kernel if interpreted(kernel) else torch.library.wrap_triton(kernel)
    launchable[(programs,)](*tensors, *scalars, num_warps=num_warps, **constexprs)


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 ``>= n`` (a Triton block size)."""
    return 1 << max(n - 1, 0).bit_length()


@torch.library.custom_op("eagle_fn::verify_interpreted_launch", mutates_args=("outputs",))
def _interpreted_launch(
    outputs: list[Tensor],
    inputs: list[Tensor],
    scalars: list[int],
    kernel: str,
    programs: int,
    values: list[int],
) -> None:
    jitted = KERNELS[kernel]
    names = constexpr_names(jitted, len(values))
    jitted[(programs,)](*inputs, *outputs, *scalars, **dict(zip(names, values, strict=True)))


@_interpreted_launch.register_fake
def _(
    outputs: list[Tensor],
    inputs: list[Tensor],
    scalars: list[int],
    kernel: str,
    programs: int,
    values: list[int],
) -> None:
    return None


def constexpr_names(kernel: Any, count: int) -> list[str]:
    """The last ``count`` parameters of ``kernel``: by convention, its constexprs."""
    return list(inspect.signature(kernel.fn).parameters)[
        len(inspect.signature(kernel.fn).parameters) - count :
    ]
