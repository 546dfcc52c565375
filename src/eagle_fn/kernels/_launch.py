"""Eager CUDA launches that find their compiled kernel again by a key of their own.

Triton's ``kernel[grid](*args)`` binds every argument, works out its specialization and
builds launch metadata on every call, in Python, before the C launcher runs. An eager
eagle_fn stage makes one launch, so that is a large share of its host time: on an H200's host
(torch 2.11, Triton 3.6, 2026-12-04, docs/performance.md) a probe launching as
:class:`CachedLaunch` does took 16-35 µs less per stage, with the same outputs.

The first launch of each key goes through Triton, which compiles and launches; later ones
call the compiled kernel's launcher directly. The key is at least as fine as Triton's
specialization (:func:`launch_key`; a test checks it against Triton's own binder for every
kernel), so a kernel found by it is the one Triton would have picked. Launch hooks
(profilers register them), pre-run hooks, or a compiled kernel without the launcher's
attributes send every call back through Triton.
"""

# mypy: disable-error-code="import-untyped, import-not-found"

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from triton import knobs

MAX_KEYS = 64  # per kernel; past it new keys launch through Triton (a loop of varied shapes)
INT32 = range(-(2**31), 2**31)


def launch_key(args: tuple[Any, ...], options: dict[str, Any]) -> tuple[Any, ...]:
    """What Triton specializes a launch on, or finer: each tensor's dtype and 16-byte
    alignment; each int's classes (equal to 1, divisible by 16, 32-bit, unsigned 64-bit);
    each float's type (Triton passes every float as fp32); any other argument's type and
    value; the options; and the debug and instrumentation settings Triton reads per call."""
    # One comprehension, None and tensors inline: half the time of a call per argument
    # (organize passes 27, 13 of them None), and this runs on every eager launch.
    found = [
        arg
        if arg is None
        else (arg.dtype, arg.data_ptr() % 16 == 0)
        if isinstance(arg, Tensor)
        else _scalar_key(arg)
        for arg in args
    ]
    return (
        tuple(found),
        tuple(options.items()),
        knobs.runtime.debug,
        knobs.compilation.instrumentation_mode,
    )


def _scalar_key(arg: Any) -> Any:
    kind = type(arg)
    if kind is int:
        return kind, arg == 1, arg % 16 == 0, arg in INT32, arg >= 2**63
    if kind is float:
        return kind
    return kind, arg


def stream(device_index: int) -> int:
    """The current CUDA stream of a device, as a raw handle (what Triton's driver reads)."""
    return torch._C._cuda_getCurrentRawStream(device_index)


class CachedLaunch:
    """``kernel[(programs,)](*args, **options)`` on the current CUDA device, with the compiled
    kernel found by :func:`launch_key` after its first launch."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        # key -> (compiled kernel, the names of the parameters passed by name)
        self.compiled: dict[tuple[Any, ...], tuple[Any, tuple[str, ...]]] = {}

    def __call__(
        self, programs: int, device_index: int, args: tuple[Any, ...], **options: Any
    ) -> None:
        if self._hooked():
            self.kernel[(programs,)](*args, **options)
            return
        key = (device_index, launch_key(args, options))
        found = self.compiled.get(key)
        if found is None:
            compiled = self.kernel[(programs,)](*args, **options)  # compiles where needed
            named = tuple(self.kernel.arg_names[len(args) :])
            if len(self.compiled) < MAX_KEYS and self._reusable(compiled, named, options):
                self.compiled[key] = compiled, named
            return
        compiled, named = found
        compiled.run(programs, 1, 1, stream(device_index), compiled.function,
                     compiled.packed_metadata, None, None, None,
                     *args, *[options[name] for name in named])  # fmt: skip

    def _hooked(self) -> bool:
        hooks = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
        # A HookChain (Triton 3.6 on) is never None; it is idle when it holds no calls.
        return bool(getattr(self.kernel, "pre_run_hooks", ())) or any(
            hook is not None and getattr(hook, "calls", True) for hook in hooks
        )

    def _reusable(self, compiled: Any, named: tuple[str, ...], options: dict[str, Any]) -> bool:
        """Whether later launches can call ``compiled`` directly: it has the launcher's
        attributes (an asynchronous compile returns a future) and every parameter after the
        positional ones came by name (one left to its default is not in ``options``)."""
        loaded = all(hasattr(compiled, name) for name in ("run", "function", "packed_metadata"))
        given = all(name in options for name in named)
        return loaded and given and compiled.function is not None
