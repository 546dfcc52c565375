"""The one place that calls torch.compile: mode selection, options and the dynamic batch.

Callers describe their dynamic arguments in torch-neutral terms (:class:`Batch`,
:class:`BatchList`, :class:`UnbackedInt`); this module translates them to what the installed
torch offers, found by feature detection (never by version string, see docs/torch-versions.md):

- a shapes spec (``torch.fx.experimental.dynamic_spec`` passed to ``torch.compile`` as
  ``shapes_spec`` on torch 2.13, ``dynamic_shapes`` on 2.14), or else
- marking: each call hands the graph fresh aliases of the caller's tensors, marked unbacked,
  so the caller's own tensors are never written to (torch 2.11).

Either way each path compiles one graph over every batch size, 0 and 1 included.
"""

from __future__ import annotations

import enum
import functools
import importlib
import inspect
import os
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from . import organize, verify_tree
from ._memo import memoized
from .config import DraftConfig

ENV_VAR = "EAGLE_FN_COMPILE"


class CompileMode(enum.Enum):
    """Values of ``EAGLE_FN_COMPILE``: ``0`` eager, ``1`` compiled, ``auto`` compiled on CUDA."""

    EAGER = "0"
    COMPILED = "1"
    AUTO = "auto"


def mode_from_env() -> CompileMode:
    """Parses ``EAGLE_FN_COMPILE``; unset means ``auto``."""
    raw = os.environ.get(ENV_VAR, CompileMode.AUTO.value)
    try:
        return CompileMode(raw)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in CompileMode)
        raise ValueError(f"{ENV_VAR} must be one of {allowed} or unset, got {raw!r}") from None


def resolve(compile: object, device: torch.device) -> bool:
    """Whether to compile: the ``compile=`` argument if given, else the environment variable.

    ``auto`` compiles only on CUDA. On a CPU a compiled call's fixed overhead exceeds the few
    eager ops of the organize paths, though not the general verify build's tens
    (docs/benchmarks.md has the numbers).
    """
    if compile is not None:
        if not isinstance(compile, bool):
            raise TypeError(f"compile must be a bool or None, got {type(compile).__name__}")
        return compile
    mode = mode_from_env()
    if mode is CompileMode.AUTO:
        return device.type == "cuda"
    return mode is CompileMode.COMPILED


# ---- Dynamic arguments, in torch-neutral terms ----------------------------------------------


@dataclass(frozen=True)
class Batch:
    """A tensor argument of rank ``rank`` whose dim 0 is ``rows * <size>``; other dims static.

    ``size`` names an unbacked size: the arguments of one compiled function that name the
    same size share it, different names are independent sizes. ``max`` bounds the size (all
    arguments naming it must then give the same ``max``). ``rows`` > 1 describes a flattened
    per-request layout that keeps its relation to the batch, such as
    ``draft_tokens [bs * N]`` as ``Batch(1, rows=N)``.
    """

    rank: int
    max: int | None = None
    rows: int = 1
    size: str = "bs"


@dataclass(frozen=True)
class BatchList:
    """A list of ``length`` tensors, each like :class:`Batch` ``(rank, max, rows, size)``."""

    rank: int
    length: int
    max: int | None = None
    rows: int = 1
    size: str = "bs"


@dataclass(frozen=True)
class UnbackedInt:
    """A non-negative Python ``int`` argument, such as the FULL mask's length.

    It is traced as a symbol, so new values never recompile. ``min`` must be ``>= 0``: on
    torch without a shapes spec the value travels as a size.
    """

    min: int = 0
    max: int | None = None

    def __post_init__(self) -> None:
        if self.min < 0:
            raise ValueError(f"UnbackedInt.min must be >= 0, got {self.min}")


DynamicArg = Batch | BatchList | UnbackedInt


# ---- What the installed torch offers --------------------------------------------------------


class TorchFeatures(NamedTuple):
    """The compile features of the installed torch, found by looking, not by version.

    ``spec_keyword``: the ``torch.compile`` keyword that takes a
    ``torch.fx.experimental.dynamic_spec`` shapes spec (``"shapes_spec"``,
    ``"dynamic_shapes"``), or ``None`` when there is no usable one.
    ``isolate_recompiles``: whether ``torch.compile`` takes ``isolate_recompiles``.
    ``mark_unbacked``: whether dynamo can mark a dim unbacked with a ``shape_id``.
    """

    spec_keyword: str | None
    isolate_recompiles: bool
    mark_unbacked: bool


# The shapes spec's ``torch.compile`` keyword, by name across releases.
_SPEC_KEYWORDS = ("shapes_spec", "dynamic_shapes")
_SPEC_NAMES = ("IntVar", "SeqSpec", "ShapeVar", "TensorSpec")


@functools.cache
def torch_features() -> TorchFeatures:
    """Detects :class:`TorchFeatures` once, on first use (eager-only users never pay it)."""
    compile_params = inspect.signature(torch.compile).parameters
    keyword = next((k for k in _SPEC_KEYWORDS if k in compile_params), None)
    if keyword is not None and _spec_module() is None:
        keyword = None
    return TorchFeatures(
        spec_keyword=keyword,
        isolate_recompiles="isolate_recompiles" in compile_params,
        mark_unbacked="shape_id" in _mark_unbacked_params(),
    )


def _spec_module() -> types.ModuleType | None:
    try:
        module = importlib.import_module("torch.fx.experimental.dynamic_spec")
    except ImportError:
        return None
    return module if all(hasattr(module, name) for name in _SPEC_NAMES) else None


def _mark_unbacked_params() -> Mapping[str, inspect.Parameter]:
    decorators = importlib.import_module("torch._dynamo.decorators")
    mark = getattr(decorators, "mark_unbacked", None)
    return {} if mark is None else inspect.signature(mark).parameters


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

    ``shapes`` maps parameter names of ``fn`` to their dynamic description; every other
    argument is static (a new value compiles a new graph). Batch sizes are unbacked: plain
    ``dynamic=True`` specializes sizes 0 and 1 and would compile more graphs. Each call has
    its own recompile budget, so many configs never exhaust a shared one. No global dynamo
    or inductor setting of the host process is changed, and no caller's tensor is written.

    Args:
        fn: the pure function to compile.
        enabled: ``False`` returns ``fn`` unchanged.
        shapes: parameter name -> :class:`Batch`, :class:`BatchList` or :class:`UnbackedInt`.
        features: what torch offers; detected when ``None`` (tests force the fallback here).
        backend: the ``torch.compile`` backend; benchmarks weigh ``"eager"`` against it.
        options: inductor options in place of eagle_fn's (benchmarks weigh the variants).

    Example:
        >>> double = compile_fn(lambda x: 2 * x, enabled=False, shapes={"x": Batch(1)})
        >>> double(torch.tensor([1, 2])).tolist()
        [2, 4]
    """
    if not enabled:
        return fn
    _check_shapes(fn, shapes)
    features = torch_features() if features is None else features
    how = _how(backend, _INDUCTOR_OPTIONS if options is None else options)
    if features.spec_keyword is not None:
        return _compile_with_spec(fn, shapes, features, how)
    if features.mark_unbacked:
        return _compile_with_marks(fn, shapes, how)
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


def _isolated(fn: Callable[..., Any], name: str | None = None) -> Callable[..., Any]:
    """A copy of ``fn`` with its own code object, so its own dynamo cache and recompile count.

    Dynamo keeps compiled entries on the code object: without ``isolate_recompiles`` every
    compile of one function (one per config) would share the default budget of 8. ``name``
    renames the code, which dynamo's logs show.
    """
    code = fn.__code__.replace(co_name=name or fn.__code__.co_name)
    copy = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return functools.update_wrapper(copy, fn)


def _compile_with_spec(
    fn: Callable[..., Any],
    shapes: Mapping[str, DynamicArg],
    features: TorchFeatures,
    how: dict[str, Any],
) -> Any:
    spec = _to_spec(shapes)
    extra: dict[str, Any] = {str(features.spec_keyword): spec}
    if features.isolate_recompiles:
        extra["isolate_recompiles"] = True
    else:
        fn = _isolated(fn)
    compile_: Any = torch.compile  # the spec keyword is not in every torch's stubs
    return compile_(fn, fullgraph=True, **how, **extra)


def _to_spec(shapes: Mapping[str, DynamicArg]) -> dict[str, object]:
    spec: Any = _spec_module()
    sizes: dict[str, Any] = {}  # one ShapeVar per size name

    def batch_first(arg: Batch | BatchList) -> object:
        if arg.size not in sizes:
            sizes[arg.size] = spec.ShapeVar(arg.size, max=arg.max)
        first = sizes[arg.size] * arg.rows if arg.rows != 1 else sizes[arg.size]
        return spec.TensorSpec([first, *[None] * (arg.rank - 1)])

    out: dict[str, object] = {}
    for name, arg in shapes.items():
        if isinstance(arg, Batch):
            out[name] = batch_first(arg)
        elif isinstance(arg, BatchList):
            out[name] = spec.SeqSpec([batch_first(arg) for _ in range(arg.length)])
        else:
            out[name] = spec.IntVar(name, min=arg.min, max=arg.max)
    return out


# ---- The fallback without a shapes spec: marked alias views ---------------------------------
#
# The caller's arguments reach the graph through two small functions. Eagerly, before the
# call, each dynamic tensor is replaced by a fresh alias (``detach``: no copy, no ATen op
# but a view) whose dim 0 is marked unbacked, one shape id per size and rows; an UnbackedInt
# travels as the length of a stride-0 view of a scalar. Inside the graph, the traced adapter
# turns those lengths back into ints and states with torch._check what the marks cannot
# carry on every torch: the bounds, and ``dim 0 == rows * size``. The adapter gets its own
# code object per compile.

# A scalar whose expanded views carry UnbackedInt values as sizes; no data is ever read.
_SIZE_CARRIER = torch.empty(())

_Plan = tuple[tuple[int, str, DynamicArg], ...]


def _compile_with_marks(
    fn: Callable[..., Any], shapes: Mapping[str, DynamicArg], how: dict[str, Any]
) -> Any:
    names = list(inspect.signature(fn).parameters)
    # Arguments with rows == 1 first: the first of each size names it for the others.
    ordered = sorted(shapes.items(), key=lambda item: getattr(item[1], "rows", 1) != 1)
    plan: _Plan = tuple((names.index(name), name, arg) for name, arg in ordered)
    marked = functools.partial(_marked, importlib.import_module("torch._dynamo.decorators"))

    def adapter(*args: Any, **kwargs: Any) -> Any:
        unmarked = _replace(plan, args, kwargs, _unmarked)
        _check_batches(plan, unmarked, kwargs)
        return fn(*unmarked, **kwargs)

    # dynamic=False: every argument not marked stays static, as with a shapes spec.
    traced = _isolated(adapter, name=f"{fn.__name__}_marked")
    graph = torch.compile(traced, fullgraph=True, dynamic=False, **how)

    @functools.wraps(fn)
    def marked_call(*args: Any, **kwargs: Any) -> Any:
        return graph(*_replace(plan, args, kwargs, marked), **kwargs)

    return marked_call


def _replace(
    plan: _Plan,
    args: tuple[Any, ...] | list[Any],
    kwargs: dict[str, Any],
    convert: Callable[[DynamicArg, Any], Any],
) -> list[Any]:
    """``args`` as a new list with each planned argument converted; ``kwargs`` in place."""
    out = list(args)
    for index, name, arg in plan:
        if index < len(out):
            out[index] = convert(arg, out[index])
        elif name in kwargs:
            kwargs[name] = convert(arg, kwargs[name])
    return out


def _marked(decorators: types.ModuleType, arg: DynamicArg, value: Any) -> Any:
    """Eager: a fresh marked stand-in for ``value``; ``value`` itself is left untouched."""
    if isinstance(arg, UnbackedInt):
        carrier = _SIZE_CARRIER.expand(value)  # [value], a view
        decorators.mark_unbacked(carrier, 0)
        return carrier
    if isinstance(arg, BatchList):
        one = Batch(arg.rank, arg.max, arg.rows, arg.size)
        return [_marked(decorators, one, t) for t in value]
    # detach, not view_as: a view's _base is fakified too, and its size then guarded.
    alias = value.detach()  # the same storage, a new tensor object
    decorators.mark_unbacked(alias, 0, shape_id=f"eagle_fn:{arg.size}*{arg.rows}")
    return alias


def _unmarked(arg: DynamicArg, value: Any) -> Any:
    """Traced: an UnbackedInt's value back from its carrier, within its bounds."""
    if not isinstance(arg, UnbackedInt):
        return value
    size = value.shape[0]
    torch._check(size >= arg.min)
    if arg.max is not None:
        torch._check(size <= arg.max)
    return size


def _check_batches(plan: _Plan, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Traced: every batch dim is ``rows * size`` for one value per size, ``<= max``."""
    sizes: dict[str, Any] = {}
    for index, name, arg in plan:
        if isinstance(arg, UnbackedInt):
            continue
        if index >= len(args) and name not in kwargs:
            continue
        value = args[index] if index < len(args) else kwargs[name]
        for t in value if isinstance(arg, BatchList) else [value]:
            if arg.size not in sizes:
                sizes[arg.size] = t.shape[0] // arg.rows
                if arg.max is not None:
                    torch._check(sizes[arg.size] <= arg.max)
            torch._check(t.shape[0] == sizes[arg.size] * arg.rows)


# ---- The worker's table of paths ------------------------------------------------------------


class Paths(NamedTuple):
    """The functions behind a worker's paths for one config, compiled or eager."""

    chain: Callable[..., organize.DraftTree]  # (constants, topk_index)
    multilayer: Callable[..., organize.DraftTree]  # (cfg, topk_p, topk_index)
    tree: Callable[..., organize.DraftTree]  # (cfg, score_list, token_list, parents_list)
    chain_verify: Callable[..., verify_tree.VerifyTree]  # (constants, draft_tokens, ...)
    verify: Callable[..., verify_tree.VerifyTree]  # (cfg, parent_list, ..., mask_mode, total)


def paths(
    cfg: DraftConfig, max_bs: int, *, enabled: bool, features: TorchFeatures | None = None
) -> Paths:
    """The (shared, memoized) functions of ``cfg``: each compiles once, on first use.

    ``features`` as in :func:`compile_fn` (``None``: detected).
    """
    key = ("paths", cfg, max_bs, enabled, features)
    return memoized(key, lambda: _paths(cfg, max_bs, enabled, features))


def _paths(cfg: DraftConfig, max_bs: int, enabled: bool, features: TorchFeatures | None) -> Paths:
    # The chain graphs slice constants of max_bs rows, so their batch is bounded by max_bs.
    # The FULL mask's length is unbacked too, so new sequence lengths never recompile.
    total = UnbackedInt(min=0)
    steps = cfg.num_steps
    return Paths(
        chain=compile_fn(
            organize._organize_chain,
            enabled=enabled,
            features=features,
            shapes={"topk_index": Batch(2, max=max_bs)},
        ),
        multilayer=compile_fn(
            organize._organize_multilayer,
            enabled=enabled,
            features=features,
            shapes={"topk_p": Batch(2), "topk_index": Batch(2)},
        ),
        tree=compile_fn(
            organize._organize_tree,
            enabled=enabled,
            features=features,
            shapes={
                "score_list": BatchList(3, steps),
                "token_list": BatchList(2, steps),
                "parents_list": BatchList(2, steps),
            },
        ),
        chain_verify=compile_fn(
            verify_tree._build_chain_verify,
            enabled=enabled,
            features=features,
            shapes={
                "draft_tokens": Batch(2, max=max_bs),
                "bonus_tokens": Batch(1, max=max_bs),
                "seq_lens": Batch(1, max=max_bs),
                "total": total,
            },
        ),
        verify=compile_fn(
            verify_tree._build_verify_tree,
            enabled=enabled,
            features=features,
            shapes={
                "parent_list": Batch(2),
                "top_scores_index": Batch(2),
                "draft_tokens": Batch(2),
                "bonus_tokens": Batch(1),
                "seq_lens": Batch(1),
                "total": total,
            },
        ),
    )
