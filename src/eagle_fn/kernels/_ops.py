"""How every fused kernel becomes a torch operator: one op body, one registration, one launch.

Each kernel family writes one typed *op body*: it allocates the outputs from shapes alone
(``new_empty``), calls its kernel's :func:`launcher` once and returns the outputs.
:func:`register_op` makes it ``torch.ops.eagle_fn.<name>``, which the kernel functions reach
through :func:`call` (plain eager code runs the body without the dispatcher's round trip):

- compiled kernels (a GPU): a ``torch.library.triton_op``. The body is also its fake, and
  the launch goes through ``torch.library.wrap_triton``, so torch.compile traces into the
  body and Inductor sees the kernel itself;
- under ``TRITON_INTERPRET=1``: an opaque ``torch.library.custom_op`` with the same schema,
  and again the body as its fake. An interpreted kernel is Python that reads real memory, so
  the launch skips it when handed fake tensors: the fake only allocates, and opcheck,
  make_fx and torch.compile record one opaque call that runs on real tensors.

:func:`kernel_core` and :func:`fused` build the unchecked cores and the public functions from
the torch functions, so no signature is written twice. Triton is required here; the package's
``__init__`` says so before anything imports this module.
"""

# mypy: disable-error-code="import-untyped, import-not-found"

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake
from torch.library import wrap_triton
from torch.utils._python_dispatch import _get_current_dispatch_mode
from triton.runtime.interpreter import InterpretedFunction

from .._backend import kernel_device_reason
from .._forwarding import forwarding
from ._launch import CachedLaunch

NAMESPACE = "eagle_fn"
# Tile edges of the pairwise ranking: 64 x 64 compares keep a tile in registers on a GPU.
MIN_BLOCK = 16
MAX_BLOCK = 64

F = TypeVar("F", bound=Callable[..., Any])

_BODIES: dict[torch._ops.OpOverload, Callable[..., Any]] = {}  # each registered op's body
# Triton's interpreter keeps the grid of the launch it runs in module state: two threads
# launching at once read each other's grid (InterpreterError: "x >= grid_dim[0]", or a
# crash). Only eagle_fn's launches take it: a caller's own interpreted kernels do not.
_INTERPRETING = threading.Lock()


def _fresh_lock_after_fork() -> None:
    global _INTERPRETING  # a child forked while another thread held it would wait forever
    _INTERPRETING = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_after_fork)


def interpreted(kernel: object) -> bool:
    """Whether ``kernel`` runs in Triton's CPU interpreter (``TRITON_INTERPRET=1``)."""
    return isinstance(kernel, InterpretedFunction)


def register_op(name: str, body: Callable[..., Any], kernel: object) -> torch._ops.OpOverload:
    """Registers the op body ``body``, which launches ``kernel``, as ``eagle_fn::<name>``.

    The schema comes from ``body``'s annotations. Returns the ``.default`` overload, to bind
    once at module level.
    """
    qualname = f"{NAMESPACE}::{name}"
    if interpreted(kernel):
        torch.library.custom_op(qualname, body, mutates_args=()).register_fake(body)
    else:
        torch.library.triton_op(qualname, body, mutates_args=())  # its fake is the body too
    overload: torch._ops.OpOverload = getattr(getattr(torch.ops, NAMESPACE), name).default
    _BODIES[overload] = body
    return overload


def plain_eager() -> bool:
    """Neither dynamo nor a dispatch mode (fake tensors, make_fx) traces this call: nothing
    would see an op here."""
    return not torch.compiler.is_dynamo_compiling() and _get_current_dispatch_mode() is None


def call(op: torch._ops.OpOverload, *args: Any) -> Any:
    """``op(*args)``, or in plain eager code its body directly.

    The dispatcher's round trip through a custom op costs about 35 µs of host time per call
    on the 2-core development CPU (docs/kernels.md) and buys nothing when no compiler, tracer
    or dispatch mode is looking. Where one is (torch.compile, make_fx, opcheck, an op
    counter), the call goes through the op, so each public kernel function still records as
    one op. The kernels have no derivative: through the op, an input that requires grad
    enters detached (no autograd formula is needed, in a caller's compile either), so outputs
    never require grad, as in plain eager code.
    """
    if plain_eager():
        return _BODIES[op](*args)
    return op(*(_detached(arg) for arg in args))


def _detached(arg: Any) -> Any:
    if isinstance(arg, (list, tuple)):
        return type(arg)(_detached(item) for item in arg)
    return arg.detach() if isinstance(arg, Tensor) and arg.requires_grad else arg


def launcher(kernel: Any) -> Callable[..., None]:
    """``kernel``'s launch for op bodies: ``launch(programs, *args, **options)`` runs
    ``kernel[(programs,)](*args, **options)``, or nothing where it must not run.

    Nothing runs for an eager batch of 0 (a traced batch is symbolic: Triton's launcher skips
    an empty grid itself), nor for an interpreted kernel given fake tensors (the op's fake);
    a real tensor of a subclass (an ``nn.Parameter``) is launched on.
    An interpreted kernel is called as it is: torch 2.11's ``wrap_triton`` refuses one.
    Plain eager launches on CUDA find their compiled kernel through
    :class:`~eagle_fn.kernels._launch.CachedLaunch`, which skips Triton's per-call binding.

    A closure that names ``wrap_triton(kernel)``: torch finds a ``triton_op``'s kernels by
    reading its body and the functions it calls for such calls, and hashes their source into
    the keys of torch.compile's on-disk caches. A kernel it cannot find leaves a cached graph
    valid after the kernel changed: an upgraded eagle_fn would run its old kernels.
    """

    compiled = not interpreted(kernel)
    cached = CachedLaunch(kernel)

    def launch(programs: Any, *args: Any, **options: Any) -> None:
        if type(programs) is int and programs == 0:
            return
        if compiled and plain_eager():
            device = next(arg.device for arg in args if isinstance(arg, Tensor))
            if device.type != "cuda":
                kernel[(programs,)](*args, **options)
                return
            with on_device(device):
                cached(programs, device.index, args, **options)
        elif compiled:  # wrap_triton lets tracers see the kernel
            wrap_triton(kernel)[(programs,)](*args, **options)
        elif not any(is_fake(arg) for arg in args if isinstance(arg, Tensor)):
            with _INTERPRETING:  # one launch at a time: the interpreter's grid state is global
                kernel[(programs,)](*args, **options)

    launch.kernel = kernel  # type: ignore[attr-defined]  # what tools recording launches read
    launch.cached = cached  # type: ignore[attr-defined]  # its keys, for tests
    return launch


def on_device(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """A CUDA ``device`` made current, where it is not: Triton launches on the current device
    (torch ops guard theirs the same way; compiled graphs do it themselves)."""
    if device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def power_of_2(n: int) -> int:
    """The smallest power of 2 ``>= n``, and 1 for ``n <= 1`` (a Triton block size)."""
    return 1 << max(n - 1, 0).bit_length()


def block(width: int) -> int:
    """Tile edge for a ``width``-wide row: a power of two in ``[MIN_BLOCK, MAX_BLOCK]``."""
    return max(MIN_BLOCK, min(MAX_BLOCK, power_of_2(width)))


def kernel_core(reference: F, compute: Callable[..., Any]) -> F:
    """The torch core ``reference`` computed by ``compute``, which takes its arguments in order.

    The result has ``reference``'s name, parameter names and signature by construction
    (:func:`eagle_fn._forwarding.forwarding` writes it out): the worker swaps one for the
    other, and compiled paths key their shapes specs by parameter name.
    """
    name = reference.__name__
    doc = f":func:`{reference.__module__}.{name}` in one fused launch (unchecked)."
    return cast(F, forwarding(name, inspect.signature(reference, eval_str=True), compute, doc=doc))


def fused(
    reference: F,
    checked_args: Callable[..., tuple[Any, ...]],
    core: Callable[..., Any],
    values: str = "values (bit for bit)",
) -> F:
    """``reference``'s public function with ``core`` computing: the same signature and the
    same checks (``checked_args`` is the reference's own), one fused launch after them.
    ``values`` says how its outputs compare with the reference's, for its docstring."""

    name, signature = reference.__name__, inspect.signature(reference, eval_str=True)
    options = [p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY]
    positional = len(signature.parameters) - len(options)

    def checked_call(*values: Any) -> Any:
        # The checks name their parameters their own way and take keywords of their own
        # (where=, device=), which a caller must not reach: Python binds the call by the
        # public signature, and the checks get its values by position, options by name.
        named = dict(zip(options, values[positional:], strict=True))
        checked = checked_args(*values[:positional], **named)
        require_kernel_device(name, _device(checked))
        return core(*checked)

    doc = (  # the reference's example runs on CPU tensors, not always here
        f":func:`eagle_fn.{name}` as one fused kernel: the same signature, checks and "
        f"{values}; see its documentation."
    )
    public = forwarding(name, signature, checked_call, doc=doc)
    # The module that binds it, as namedtuple finds its caller's: pickle and docs look there.
    public.__module__ = sys._getframe(1).f_globals["__name__"]
    return cast(F, public)


def require_kernel_device(where: str, device: torch.device) -> None:
    """A clear error where the kernels cannot run: CUDA tensors, or CPU ones when the
    interpreter is on (docs/kernels.md)."""
    reason = kernel_device_reason(device)
    if reason is not None:
        raise ValueError(f"{where}: the Triton kernels cannot run here: {reason}")


def _device(checked: tuple[Any, ...]) -> torch.device:
    """The device of the first tensor among (or inside the lists of) checked arguments."""
    for arg in checked:
        for item in arg if isinstance(arg, (list, tuple)) else (arg,):
            if isinstance(item, torch.Tensor):
                return item.device
    raise AssertionError("a checked call has a tensor")
