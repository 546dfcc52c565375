"""Operator registration for the fused kernels: one ``eagle_fn::<name>`` op per kernel."""

# mypy: disable-error-code="import-untyped, import-not-found"

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch
import triton
from triton.runtime.interpreter import InterpretedFunction

from .._backend import triton_unavailable_reason

NAMESPACE = "eagle_fn"
# Tile edges of the pairwise ranking: 64 x 64 compares keep a tile in registers on a GPU.
MIN_BLOCK = 16
MAX_BLOCK = 64


def register_op(
    name: str, impl: Callable[..., Any], fake: Callable[..., Any], kernel: object
) -> torch._ops.OpOverload:
    """Registers ``impl`` as ``eagle_fn::<name>`` with ``fake`` as its shape function.

    Compiled kernels register as ``torch.library.triton_op``, so torch.compile traces into
    the launch and Inductor sees the kernel. Under ``TRITON_INTERPRET=1`` the kernel is a
    Python function that reads real data and cannot run on the fake tensors tracing uses,
    so there the op is an opaque ``custom_op`` with the same schema: compiled graphs call it.
    Returns the op's ``.default`` overload, to bind once at module level.
    """
    qualname = f"{NAMESPACE}::{name}"
    op: Any
    if isinstance(kernel, InterpretedFunction):
        op = torch.library.custom_op(qualname, impl, mutates_args=())
    else:
        op = torch.library.triton_op(qualname, impl, mutates_args=())
    op.register_fake(fake)
    overload: torch._ops.OpOverload = getattr(getattr(torch.ops, NAMESPACE), name).default
    return overload


def launcher(kernel: Any) -> Any:
    """The kernel as a traceable launch (``wrap_triton``), or itself when interpreted (some
    torch releases' ``wrap_triton``, 2.11's, refuse an interpreted function)."""
    return kernel if isinstance(kernel, InterpretedFunction) else torch.library.wrap_triton(kernel)


def block(width: int) -> int:
    """Tile edge for a ``width``-wide row: a power of two in ``[MIN_BLOCK, MAX_BLOCK]``."""
    return max(MIN_BLOCK, min(MAX_BLOCK, triton.next_power_of_2(width)))


F = TypeVar("F", bound=Callable[..., Any])


def fused(
    reference: F, checked_args: Callable[..., tuple[Any, ...]], core: Callable[..., Any]
) -> F:
    """``reference``'s public function with ``core`` computing: the same signature and the
    same checks (``checked_args`` is the reference's own), one fused launch after them."""

    name = reference.__name__

    @functools.wraps(reference)
    def public(*args: Any, **kwargs: Any) -> Any:
        checked = checked_args(*args, **kwargs)
        require_kernel_device(name, _device(checked))
        return core(*checked)

    public.__doc__ = (  # the reference's example runs on CPU tensors, not always here
        f":func:`eagle_fn.{reference.__name__}` as one fused kernel: the same signature, "
        f"checks and values (bit for bit); see its documentation."
    )
    return cast(F, public)


def require_kernel_device(where: str, device: torch.device) -> None:
    """A clear error where the kernels cannot run: CUDA tensors, or CPU ones when the
    interpreter is on (docs/kernels.md)."""
    reason = triton_unavailable_reason(device)
    if reason is not None:
        raise ValueError(f"{where}: the Triton kernels cannot run here: {reason}")


def _device(checked: tuple[Any, ...]) -> torch.device:
    """The device of the first tensor among (or inside the lists of) checked arguments."""
    for arg in checked:
        for item in arg if isinstance(arg, (list, tuple)) else (arg,):
            if isinstance(item, torch.Tensor):
                return item.device
    raise AssertionError("a checked call has a tensor")
