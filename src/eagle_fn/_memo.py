"""The process-wide memo: same key, same object, built once even under concurrent first use."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar, cast

_T = TypeVar("_T")
_lock = threading.Lock()
_cache: dict[tuple[object, ...], object] = {}


def memoized(key: tuple[object, ...], build: Callable[[], _T]) -> _T:
    """Returns the value cached under ``key``, calling ``build`` at most once per key.

    Nothing is ever evicted: captured graphs may hold the addresses of cached tensors.
    """
    value = _cache.get(key)
    if value is None:
        with _lock:
            value = _cache.get(key)
            if value is None:
                value = build()
                _cache[key] = value
    return cast(_T, value)


def cached_values() -> list[object]:
    with _lock:
        return list(_cache.values())
