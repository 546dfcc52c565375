"""The process-wide memo of cached device tensors: same key, same objects, built once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar, cast

import torch
from torch import Tensor
from torch._guards import detect_fake_mode
from torch.utils._python_dispatch import _get_current_dispatch_mode

from .arguments import show

_T = TypeVar("_T")
_lock = threading.Lock()
_cache: dict[tuple[object, ...], object] = {}


def memoized(key: tuple[object, ...], build: Callable[[], _T], *, capturable: bool = False) -> _T:
    """Returns the value cached under ``key``, calling ``build`` at most once per key.

    ``build`` runs outside inference mode: engines call eagle_fn under it, and inference
    tensors, cached, would break every later caller outside it (no version counter, no
    autograd). Nothing is ever evicted: captured graphs may hold the addresses of cached
    tensors. A value first needed while a CUDA graph is being captured cannot be cached: the
    capture records its kernels without running them. ``capturable`` values are then built
    into the graph, uncached; any other raises (build it before capturing). Under fake
    tensors (``FakeTensorMode``, ``make_fx``'s fake and symbolic tracing) the value is built
    in the trace and never cached: fake tensors would break every real caller after it, and
    cached real ones break the trace.
    """
    if faking():
        return build()
    value = _cache.get(key)
    if value is None:
        if _capturing():
            if not capturable:
                raise RuntimeError(
                    f"eagle_fn's cache entry {key[0]!r} was first needed during a CUDA graph "
                    f"capture, where it cannot be built: build the worker (or make one call) "
                    f"before capturing"
                )
            with torch.inference_mode(False):
                return build()
        with _lock:
            value = _cache.get(key)
            if value is None:
                with torch.inference_mode(False):
                    value = build()
                _cache[key] = value
    return cast(_T, value)


def faking() -> bool:
    """Whether a fake-tensor mode is active (a dispatch mode first: the common case pays one
    C call; other modes, such as an op counter, see real cached values)."""
    return _get_current_dispatch_mode() is not None and detect_fake_mode() is not None


def _capturing() -> bool:
    """Whether this thread's current CUDA stream is being captured (CUDA is not initialized
    to find out)."""
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def cached_values() -> list[object]:
    with _lock:
        return list(_cache.values())


def check_constants() -> None:
    """Runs :meth:`CachedTensors.check` on every cached constant set (a debugging aid).

    Example:
        >>> check_constants()  # silent while no cached constant was modified
    """
    for value in cached_values():
        if isinstance(value, CachedTensors):
            value.check()


class CachedTensors:
    """Base of the cached constant sets: records each tensor's version to detect writes."""

    _versions: dict[str, int]  # set once in __post_init__; not a dataclass field

    def __post_init__(self) -> None:
        object.__setattr__(self, "_versions", self._tensor_versions())
        # Fixed shapes: under a caller's torch.compile(dynamic=True) a dim left dynamic would
        # be duck-sized onto an equal bs and specialize the caller's first graph to that bs.
        for tensor in self._tensors().values():
            torch._dynamo.mark_static(tensor)

    def _tensors(self) -> dict[str, Tensor]:
        values = {f.name: getattr(self, f.name) for f in fields(cast(Any, self))}
        return {name: value for name, value in values.items() if isinstance(value, Tensor)}

    def _tensor_versions(self) -> dict[str, int]:
        return {name: t._version for name, t in self._tensors().items()}

    def _expected(self) -> dict[str, Tensor]:
        raise NotImplementedError

    def check(self) -> None:
        """Raises ``RuntimeError`` if any cached tensor was modified since it was built.

        A debugging aid, not for the hot path: it compares every value against a fresh build
        (a host sync on CUDA; meta tensors have no values, only versions and layout). In-place
        writes through torch, also through a returned view, are caught by their version
        counter; writes by raw-pointer kernels by the values.
        """
        versions = self._tensor_versions()
        expected_tensors = self._expected()
        for name, tensor in self._tensors().items():
            expected = expected_tensors[name]
            if versions[name] != self._versions[name]:
                reason = "was written in place"
            elif tensor.shape != expected.shape or tensor.stride() != expected.stride():
                reason = (
                    f"changed layout to shape {show(tensor.shape)}, strides {show(tensor.stride())}"
                )
            elif not tensor.is_meta and not torch.equal(tensor, expected):  # meta: no values
                reason = "holds different values"
            else:
                continue
            raise RuntimeError(
                f"{type(self).__name__}.{name} {reason}: cached constants are shared and must "
                f"be treated as read-only"
            )
