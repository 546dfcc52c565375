"""Compilation: the one call site of torch.compile (through :mod:`eagle_fn._dynamic`), and the
worker's compiled path functions (which of them compile: :mod:`eagle_fn._modes`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ._backend import Backend
from ._dynamic import (
    Batch,
    DynamicArg,
    TorchFeatures,
    UnbackedInt,
    compile_with_marks,
    compile_with_spec,
    torch_features,
)
from ._eager import eager_when_needed
from ._memo import memoized
from ._modes import ENV_VAR
from .config import DraftConfig
from .contracts import Contract, shape_dims

# ---- Compiling ------------------------------------------------------------------------------


def compile_fn(
    fn: Callable[..., Any],
    *,
    enabled: bool,
    shapes: Mapping[str, DynamicArg],
    features: TorchFeatures | None = None,
    backend: str = "inductor",
    options: Mapping[str, Any] | None = None,
) -> Any:
    """``fn`` compiled as one full graph with the given dynamic arguments, or ``fn`` itself.

    Arguments not in ``shapes`` are static; batch sizes are unbacked (``dynamic=True`` would
    specialize 0 and 1), an empty batch calls ``fn`` itself (:mod:`eagle_fn._eager`). No global
    dynamo or inductor setting changes and no caller's tensor is written.

    Args:
        fn: the pure function to compile.
        enabled: ``False`` returns ``fn`` unchanged.
        shapes: parameter name -> :class:`Batch` or :class:`UnbackedInt`.
        features: what torch offers; detected when ``None`` (tests force the fallback).
        backend, options: ``torch.compile``'s, in place of eagle_fn's (benchmarks weigh them).

    Example:
        >>> compile_fn(abs, enabled=False, shapes={}) is abs
        True
    """
    if not enabled:
        return fn
    _check_shapes(fn, shapes)
    features = torch_features() if features is None else features
    how = _how(backend, _INDUCTOR_OPTIONS if options is None else options)
    if features.spec_keyword is not None:
        return eager_when_needed(fn, compile_with_spec(fn, shapes, features, how), shapes)
    if features.mark_unbacked:
        return eager_when_needed(fn, compile_with_marks(fn, shapes, how), shapes)
    raise RuntimeError(
        "this torch offers neither a shapes spec (torch.fx.experimental.dynamic_spec) nor "
        "torch._dynamo.decorators.mark_unbacked(shape_id=...); compile with "
        f"{ENV_VAR}=0 or upgrade torch (eagle_fn needs torch>=2.11)"
    )


def _check_shapes(fn: Callable[..., Any], shapes: Mapping[str, DynamicArg]) -> None:
    params = inspect.signature(fn).parameters
    unknown = [name for name in shapes if name not in params]
    if unknown:
        raise ValueError(f"shapes names {unknown} that are not parameters of {fn.__name__}")
    bounds_of: dict[str, set[int | None]] = {}
    for arg in shapes.values():
        if not isinstance(arg, UnbackedInt):
            bounds_of.setdefault(arg.size, set()).add(arg.max)
    for size, bounds in bounds_of.items():
        if len(bounds) > 1:
            listed = sorted(bounds, key=lambda bound: (bound is not None, bound or 0))
            raise ValueError(
                f"the arguments of {fn.__name__} sized {size!r} give different max: {listed}"
            )


# Per-compile inductor options (never the global config). The generated code re-asserts
# input sizes and strides that dynamo's guards already checked; skipping that cuts the tree
# graph's CPU call by ~8 µs. cpp_wrapper was measured too and stays off: its graphs read
# the unbacked batch size on the host every call. docs/benchmarks.md has the numbers.
_INDUCTOR_OPTIONS = {"size_asserts": False}


def _how(backend: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The backend keywords of ``torch.compile``: options go to inductor only."""
    if backend != "inductor":
        return {"backend": backend}
    # A fresh dict per compile: torch.compile pops entries out of the one it is given.
    return {"backend": backend, "options": dict(options)}


def batch_shapes(
    fn: Callable[..., Any],
    shapes: dict[str, str | tuple[str, ...]],
    *,
    max_bs: int | None = None,
    ints: tuple[str, ...] = (),
) -> dict[str, DynamicArg]:
    """:func:`compile_fn`'s ``shapes`` for ``fn`` from contract shapes (``"[bs, topk]"``):
    dim 0 is one unbacked size per expression (``bs``, at most ``max_bs`` when given;
    ``bs * N``), the other dims static; each name in ``ints`` is an :class:`UnbackedInt`."""
    params = inspect.signature(fn).parameters

    def describe(shape: str, length: int | None = None) -> Batch:
        first, *rest = shape_dims(shape)
        size = "_".join(first.replace("*", " ").split())
        bound = max_bs if size == "bs" else None
        return Batch(1 + len(rest), max=bound, size=size, length=length)

    out: dict[str, DynamicArg] = {}
    for name, shape in shapes.items():
        if name not in params:
            continue
        if isinstance(shape, tuple):  # a list: every step of one rank here
            out[name] = describe(shape[-1], len(shape))
        else:
            out[name] = describe(shape)
    out.update({name: UnbackedInt() for name in ints})
    return out


class Path(NamedTuple):
    """One of a worker's paths: its torch function and what compiling it needs."""

    torch_fn: Callable[..., Any]
    contract: Contract  # the dims named bs are the dynamic batch
    constants: Callable[..., Any] | None = None  # the chain's, which it slices: bs <= max_bs
    ints: tuple[str, ...] = ()  # int parameters that vary per call (unbacked)
    kernel: str | None = None  # its eagle_fn.kernels counterpart, if any


def path_functions(
    paths: Mapping[str, Path],
    cfg: DraftConfig,
    max_bs: int,
    compiled: frozenset[str],
    backend: Backend,
    features: TorchFeatures | None = None,
) -> dict[str, Callable[..., Any]]:
    """Each path's function for ``cfg``: the backend's, compiled where ``compiled`` names it
    (``features`` as in :func:`compile_fn`). Memoized per path, so workers sharing a config
    share graphs (``max_bs`` bounds only the chain paths'); each compiles on first use."""

    def function(name: str, path: Path) -> Callable[..., Any]:
        enabled, bound = name in compiled, max_bs if path.constants else None
        key = ("path", path, enabled, cfg, bound, backend, features)
        return memoized(key, lambda: _function(path, enabled, cfg, max_bs, backend, features))

    return {name: function(name, path) for name, path in paths.items()}


def _function(
    path: Path,
    enabled: bool,
    cfg: DraftConfig,
    max_bs: int,
    backend: Backend,
    features: TorchFeatures | None,
) -> Callable[..., Any]:
    fn = path.torch_fn
    if backend is Backend.TRITON and path.kernel is not None:
        fn = getattr(importlib.import_module("eagle_fn.kernels"), path.kernel)
    bound = max_bs if path.constants else None
    shapes = batch_shapes(fn, path.contract.batch_shapes(cfg), max_bs=bound, ints=path.ints)
    return compile_fn(fn, enabled=enabled, shapes=shapes, features=features)
