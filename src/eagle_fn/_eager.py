"""When a compiled path runs its eager function instead, with the same values.

- A call whose first batch argument has no rows: on CUDA, torch 2.11's inductor launches its
  own kernels for an empty unbacked batch with a grid computation that divides by zero (seen
  on an H200, 2026-11-30); an empty batch has nothing to fuse, so every device takes the
  eager call. The check reads a shape: no host sync.
- A call dynamo refuses once the function has as many graphs as its recompile limit
  (``torch._dynamo.config.recompile_limit``, 8 by default): each mask mode, grad mode, score
  dtype or input layout compiles one, and a ``fullgraph`` compile past the limit raises. A
  warning, once, says the compiled path is being missed. Later calls of a refused
  :func:`_variant` run eagerly without asking dynamo again: its refusal costs milliseconds
  (guard failure reasons, a log record) on every call.
- A call under fake tensors (``FakeTensorMode``, ``make_fx``): the compiled code would read
  their data pointers (a segfault on CPU), and FX cannot trace a compiled function.

Plain calls of compiled paths also take turns, process-wide (:data:`_PLAIN_CALLS` says why).
"""

from __future__ import annotations

import enum
import functools
import importlib
import inspect
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ._dynamic import Batch, DynamicArg, UnbackedInt
from ._memo import faking
from .config import DraftConfig


def eager_when_needed(
    fn: Callable[..., Any], compiled: Callable[..., Any], shapes: Mapping[str, DynamicArg]
) -> Callable[..., Any]:
    """``compiled``, except where ``fn`` itself must run (the cases are this module's).
    Inside a caller's torch.compile region the compiled call is traced as it is.

    Plain calls of compiled paths run one at a time in the process (:data:`_PLAIN_CALLS`).
    """
    params = list(inspect.signature(fn).parameters)
    unbacked = frozenset(key for key, arg in shapes.items() if isinstance(arg, UnbackedInt))
    attempt = _refusing(fn, compiled, functools.partial(_variant, params, unbacked))
    without_rows = _without_rows(params, shapes)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_dynamo_compiling():
            return compiled(*args, **kwargs)
        if without_rows(args, kwargs):
            return fn(*args, **kwargs)
        with _PLAIN_CALLS:
            return attempt(args, kwargs)

    return call


# Two reasons to run plain compiled calls one at a time. Dynamo compiles a graph for every
# thread that misses its cache: 8 threads making a first call at once compiled 8 graphs, the
# whole recompile limit. And torch 2.13 to 2.15 count a fullgraph call's compiled frames in one
# counter for the process: overlapping calls reset each other's, and the check after the call
# then raises "found no compiled frames" from a finally block, skipping the restore of the
# thread's dynamo settings. Reentrant: a call must never wait on itself.
_PLAIN_CALLS = threading.RLock()


def _fresh_lock_after_fork() -> None:
    global _PLAIN_CALLS  # a child forked while another thread held it would wait forever
    _PLAIN_CALLS = threading.RLock()


os.register_at_fork(after_in_child=_fresh_lock_after_fork)


def _refusing(
    fn: Callable[..., Any],
    compiled: Callable[..., Any],
    variant: Callable[[tuple[Any, ...], dict[str, Any]], tuple[Any, ...]],
) -> Callable[[tuple[Any, ...], dict[str, Any]], Any]:
    """A plain call of ``compiled``, or of ``fn`` for a variant dynamo has refused."""
    refused: set[tuple[Any, ...]] = set()  # empty until dynamo first refuses: no cost before

    def attempt(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        key = variant(args, kwargs) if refused else None
        if key in refused:
            return fn(*args, **kwargs)
        try:
            return compiled(*args, **kwargs)
        except Exception as error:
            if not isinstance(error, _recompile_limit_hit()):
                raise
            if not refused:
                _warn_limit_hit(fn)
            elif len(refused) >= _REFUSED_KEPT:
                refused.clear()
            refused.add(key or variant(args, kwargs))
            return fn(*args, **kwargs)

    return attempt


def _without_rows(
    params: list[str], shapes: Mapping[str, DynamicArg]
) -> Callable[[tuple[Any, ...], dict[str, Any]], bool]:
    """Whether a call's first batch argument has no rows or is fake (never, without one)."""
    batches = [(name, arg) for name, arg in shapes.items() if isinstance(arg, Batch)]
    if not batches:
        return lambda args, kwargs: False
    name, batch = batches[0]
    position = params.index(name)

    def without_rows(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        value = args[position] if position < len(args) else kwargs[name]
        rows = value[0] if batch.length is not None else value  # a list: its first step
        return rows.shape[0] == 0 or faking()

    return without_rows


_REFUSED_KEPT = 1024  # refused variants remembered per function (each costs one refusal)
_BY_VALUE = (int, float, str, enum.Enum, torch.dtype, torch.device, DraftConfig)


def _variant(
    params: list[str], unbacked: frozenset[str], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    """What decides which graph a call needs, as far as a key can say it cheaply: each
    tensor's dtype, device, grad flag, layout, contiguity and dims after the batch dim; other
    arguments by value, objects by identity, an unbacked int by type (its graphs take any
    value); grad, inference and autocast modes and the default dtype. Coarser than dynamo's
    guards in places (contiguity, not strides; not the default device, which takes 9 µs to
    read): a call sharing a refused call's variant runs eagerly, with the same values."""

    def part(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            layout = (value.layout, value.is_contiguous(), tuple(value.shape[1:]))
            return (value.dtype, value.device, value.requires_grad, *layout)
        if isinstance(value, (list, tuple)):
            return (type(value), *map(part, value))
        if value is None or isinstance(value, _BY_VALUE):
            return value
        return (type(value), id(value))  # equality could compare tensors; the object will do

    named = [*zip(params, args, strict=False), *sorted(kwargs.items())]  # args: a prefix
    arguments = tuple(
        (name, type(value) if name in unbacked else part(value)) for name, value in named
    )
    modes = (
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        torch.get_default_dtype(),
        torch.is_autocast_enabled("cpu"),
        torch.is_autocast_enabled("cuda"),
    )
    return (*arguments, modes)


def _warn_limit_hit(fn: Callable[..., Any]) -> None:
    warnings.warn(
        f"eagle_fn: the compiled {fn.__name__} reached torch._dynamo's recompile limit (one "
        f"graph per mask mode, dtype, input layout and torch global setting: grad mode, "
        f"autocast, default dtype and device, ...); calls needing a new graph run eagerly",
        stacklevel=6,  # past this, attempt, the compiled call, the worker's _route and method
    )


@functools.cache
def _recompile_limit_hit() -> type[BaseException] | tuple[()]:
    """What a fullgraph compile raises past its recompile limit (looked up once one raised:
    importing dynamo costs seconds)."""
    return getattr(importlib.import_module("torch._dynamo.exc"), "FailOnRecompileLimitHit", ())
