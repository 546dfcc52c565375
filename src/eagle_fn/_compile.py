"""Compilation: which paths compile, the one call of torch.compile, and the dynamic batch."""

from __future__ import annotations

import enum
import importlib
import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
from torch.fx.experimental.dynamic_spec import IntVar, SeqSpec, ShapeVar, TensorSpec

from ._backend import Backend
from ._memo import memoized
from .config import DraftConfig
from .contracts import Contract

ENV_VAR = "EAGLE_FN_COMPILE"


class CompileMode(enum.Enum):
    """Values of ``EAGLE_FN_COMPILE``: ``0`` eager, ``1`` compiled, ``auto`` by measurement."""

    EAGER = "0"
    COMPILED = "1"
    AUTO = "auto"


# What `auto` compiles, per device type: the paths whose compiled call measured faster than
# eager there (docs/performance.md has the figures and their sources). On a CPU only the
# general verify build (84 small ops) gains; on CUDA the tree organize gains under CUDA-graph
# replay, the chain paths run no kernel (compiling adds only guard cost), and the general
# verify build is left eager: inductor failed to compile it with a dynamic batch on torch 2.11.
AUTO_COMPILED = {"cpu": frozenset({"verify"}), "cuda": frozenset({"tree"})}


def mode_from_env() -> CompileMode:
    """Parses ``EAGLE_FN_COMPILE``; unset means ``auto``."""
    raw = os.environ.get(ENV_VAR, CompileMode.AUTO.value)
    try:
        return CompileMode(raw)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in CompileMode)
        raise ValueError(f"{ENV_VAR} must be one of {allowed} or unset, got {raw!r}") from None


def compiled_paths(compile: object, device: torch.device, paths: frozenset[str]) -> frozenset[str]:
    """The paths to compile: all or none for ``compile=True/False``, else by the variable."""
    if compile is not None:
        if not isinstance(compile, bool):
            raise TypeError(f"compile must be a bool or None, got {type(compile).__name__}")
        return paths if compile else frozenset()
    mode = mode_from_env()
    if mode is CompileMode.AUTO:
        return paths & AUTO_COMPILED.get(device.type, frozenset())
    return paths if mode is CompileMode.COMPILED else frozenset()


def compile_fn(fn: Callable[..., Any], *, enabled: bool, shapes: dict[str, object]) -> Any:
    """``fn`` compiled as one full graph with the given dynamic arguments, or ``fn`` itself.

    ``shapes`` maps parameter names to specs whose dim 0 is the batch, an unbacked size:
    plain ``dynamic=True`` specializes sizes 0 and 1 and would compile a second graph at
    ``bs == 1``, and ``mark_unbacked`` would have to write onto the caller's tensors. Every
    other argument is static. Each call gets its own recompile budget
    (``isolate_recompiles``), so many configs never exhaust a shared one. No global dynamo
    or inductor setting of the host process is changed.
    """
    if not enabled:
        return fn
    # torch's typing stubs lack isolate_recompiles, which torch.compile accepts.
    return torch.compile(  # type: ignore[call-overload]
        fn,
        fullgraph=True,
        shapes_spec=shapes,
        isolate_recompiles=True,
        options=_INDUCTOR_OPTIONS,
    )


# Per-compile inductor options (never the global config). The generated code re-asserts
# input sizes and strides that dynamo's guards already checked; skipping that cuts the tree
# graph's CPU call by ~8 µs. cpp_wrapper was measured too and stays off: its graphs read
# the unbacked batch size on the host every call. docs/benchmarks.md has the numbers.
_INDUCTOR_OPTIONS = {"size_asserts": False}


def batch_shapes(
    fn: Callable[..., Any],
    shapes: dict[str, str | tuple[str, ...]],
    *,
    max_bs: int | None = None,
    ints: tuple[str, ...] = (),
) -> dict[str, object]:
    """Compile specs for ``fn``'s parameters from contract shapes (``"[bs, topk]"``): dim 0
    is unbacked, one size per expression (``bs``, at most ``max_bs`` when given; ``bs * N``),
    the other dims static; each name in ``ints`` is an unbacked int."""
    sizes: dict[str, ShapeVar] = {}

    def spec(shape: str) -> TensorSpec:
        dims = shape.strip("[] ").split(",")
        first = dims[0].strip()
        if first not in sizes:
            bound = max_bs if first == "bs" else None
            sizes[first] = ShapeVar("_".join(first.replace("*", " ").split()), max=bound)
        return TensorSpec([sizes[first], *([None] * (len(dims) - 1))])

    params = inspect.signature(fn).parameters
    specs: dict[str, object] = {
        name: SeqSpec([spec(s) for s in shape]) if isinstance(shape, tuple) else spec(shape)
        for name, shape in shapes.items()
        if name in params
    }
    specs.update({name: IntVar(name, min=0) for name in ints})
    return specs


class Path(NamedTuple):
    """One of a worker's paths: its torch function and what compiling it needs."""

    torch_fn: Callable[..., Any]
    contract: Contract  # the dims named bs are the dynamic batch
    chain: bool = False  # slices cached constants: its batch is at most max_bs
    ints: tuple[str, ...] = ()  # int parameters that vary per call (unbacked)
    kernel: str | None = None  # its eagle_fn.kernels counterpart, if any


def path_functions(
    paths: Mapping[str, Path],
    cfg: DraftConfig,
    max_bs: int,
    compiled: frozenset[str],
    backend: Backend,
) -> dict[str, Callable[..., Any]]:
    """Each path's function for ``cfg``: the backend's, compiled where ``compiled`` names it.
    Memoized, so workers sharing a config share graphs; each compiles on first use."""
    key = ("paths", cfg, max_bs, compiled, backend, tuple(paths))
    return memoized(
        key,
        lambda: {n: _function(p, n in compiled, cfg, max_bs, backend) for n, p in paths.items()},
    )


def _function(
    path: Path, enabled: bool, cfg: DraftConfig, max_bs: int, backend: Backend
) -> Callable[..., Any]:
    fn = path.torch_fn
    if backend is Backend.TRITON and path.kernel is not None:
        fn = getattr(importlib.import_module("eagle_fn.kernels"), path.kernel)
    bound = max_bs if path.chain else None
    shapes = batch_shapes(fn, path.contract.batch_shapes(cfg), max_bs=bound, ints=path.ints)
    return compile_fn(fn, enabled=enabled, shapes=shapes)
