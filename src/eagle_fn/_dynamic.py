"""Dynamic arguments in torch-neutral terms, and how the installed torch compiles them.

Callers describe their dynamic arguments (:class:`Batch`, :class:`UnbackedInt`); this module
finds, by feature detection (never by version string, see docs/torch-versions.md), what the
installed torch offers, and compiles with it:

- a shapes spec (``torch.fx.experimental.dynamic_spec`` passed to ``torch.compile`` as
  ``shapes_spec`` on torch 2.13, ``dynamic_shapes`` on 2.14 and 2.15), or else
- marking: each call hands the graph fresh aliases of the caller's tensors, marked unbacked,
  so the caller's own tensors are never written to (torch 2.11 and 2.12).

Either way each path compiles one graph over every batch size, 0 and 1 included.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

# ---- Dynamic arguments, in torch-neutral terms ----------------------------------------------


@dataclass(frozen=True)
class Batch:
    """A tensor argument of rank ``rank`` whose dim 0 is ``rows * <size>``; other dims static.

    ``size`` names an unbacked size: the arguments of one compiled function that name the
    same size share it, different names are independent sizes. ``max`` bounds the size (all
    arguments naming it must then give the same ``max``). ``rows`` > 1 describes a flattened
    per-request layout that keeps its relation to the batch, such as
    ``draft_tokens [bs * N]`` as ``Batch(1, rows=N)``. With ``length``, the argument is a
    list of that many such tensors (the per-step lists).
    """

    rank: int
    max: int | None = None
    rows: int = 1
    size: str = "bs"
    length: int | None = None


@dataclass(frozen=True)
class UnbackedInt:
    """A non-negative Python ``int`` argument, such as the FULL mask's length.

    It is traced as a symbol, so new values never recompile. ``min`` must be ``>= 0``: on
    torch without a shapes spec the value travels as a size.
    """

    min: int = 0

    def __post_init__(self) -> None:
        if self.min < 0:
            raise ValueError(f"UnbackedInt.min must be >= 0, got {self.min}")


DynamicArg = Batch | UnbackedInt


# ---- What the installed torch offers --------------------------------------------------------


class TorchFeatures(NamedTuple):
    """The compile features of the installed torch, found by looking, not by version.

    ``spec_keyword``: the ``torch.compile`` keyword that takes a
    ``torch.fx.experimental.dynamic_spec`` shapes spec (``"shapes_spec"``,
    ``"dynamic_shapes"``), or ``None`` when there is no usable one.
    ``mark_unbacked``: whether dynamo can mark a dim unbacked with a ``shape_id``.
    """

    spec_keyword: str | None
    mark_unbacked: bool


# The shapes spec's ``torch.compile`` keyword, by name across releases.
_SPEC_KEYWORDS = ("shapes_spec", "dynamic_shapes")
_SPEC_NAMES = ("IntVar", "SeqSpec", "ShapeVar", "TensorSpec")


@functools.cache
def torch_features() -> TorchFeatures:
    """Detects :class:`TorchFeatures` once, on first use (eager-only users never pay it)."""
    compile_params = inspect.signature(torch.compile).parameters
    keyword = next((k for k in _SPEC_KEYWORDS if k in compile_params), None)
    if keyword is not None and spec_module() is None:
        keyword = None
    return TorchFeatures(
        spec_keyword=keyword,
        mark_unbacked="shape_id" in _mark_unbacked_params(),
    )


def spec_module() -> types.ModuleType | None:
    try:
        module = importlib.import_module("torch.fx.experimental.dynamic_spec")
    except ImportError:
        return None
    return module if all(hasattr(module, name) for name in _SPEC_NAMES) else None


def _mark_unbacked_params() -> Mapping[str, inspect.Parameter]:
    decorators = importlib.import_module("torch._dynamo.decorators")
    mark = getattr(decorators, "mark_unbacked", None)
    return {} if mark is None else inspect.signature(mark).parameters


def isolated(fn: Callable[..., Any], name: str | None = None) -> Callable[..., Any]:
    """A copy of ``fn`` with its own code object, so its own dynamo cache and recompile count.

    Dynamo keeps compiled entries on the code object: every compile of one function (one per
    config and ``max_bs``) would share the default budget of 8, and with
    ``isolate_recompiles`` still the ``accumulated_recompile_limit`` of 256 entries, which
    counts the code's every compile. ``name`` renames the code, which dynamo's logs show.
    """
    code = fn.__code__.replace(co_name=name or fn.__code__.co_name)
    copy = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return functools.update_wrapper(copy, fn)


def compile_with_spec(
    fn: Callable[..., Any],
    shapes: Mapping[str, DynamicArg],
    features: TorchFeatures,
    how: dict[str, Any],
) -> Any:
    spec = _to_spec(shapes)
    extra: dict[str, Any] = {str(features.spec_keyword): spec}
    compile_: Any = torch.compile  # the spec keyword is not in every torch's stubs
    return compile_(isolated(fn), fullgraph=True, **how, **extra)


def _to_spec(shapes: Mapping[str, DynamicArg]) -> dict[str, object]:
    spec: Any = spec_module()
    sizes: dict[str, Any] = {}  # one ShapeVar per size name

    def batch_first(arg: Batch) -> object:
        if arg.size not in sizes:
            sizes[arg.size] = spec.ShapeVar(arg.size, max=arg.max)
        first = sizes[arg.size] * arg.rows if arg.rows != 1 else sizes[arg.size]
        return spec.TensorSpec([first, *[None] * (arg.rank - 1)])

    out: dict[str, object] = {}
    for name, arg in shapes.items():
        if isinstance(arg, UnbackedInt):
            out[name] = spec.IntVar(name, min=arg.min)
        elif arg.length is None:
            out[name] = batch_first(arg)
        else:
            out[name] = spec.SeqSpec([batch_first(arg) for _ in range(arg.length)])
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

# A scalar whose expanded views carry UnbackedInt values as sizes; no data is ever read. On
# the CPU whatever torch's default device at import: a CUDA one would initialize CUDA then.
_SIZE_CARRIER = torch.empty((), dtype=torch.float32, device="cpu")

_Plan = tuple[tuple[int, str, DynamicArg], ...]


def compile_with_marks(
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
    traced = isolated(adapter, name=f"{fn.__name__}_marked")
    graph = torch.compile(traced, fullgraph=True, dynamic=False, **how)

    @functools.wraps(fn)
    def marked_call(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_dynamo_compiling():  # a caller traces fn itself: nothing to mark
            return fn(*args, **kwargs)
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
    if arg.length is not None:
        one = dataclasses.replace(arg, length=None)
        return [_marked(decorators, one, t) for t in value]
    # detach, not view_as: a view's _base is fakified too, and its size then guarded.
    alias = value.detach()  # the same storage, a new tensor object
    decorators.mark_unbacked(alias, 0, shape_id=f"eagle_fn:{arg.size}*{arg.rows}")
    return alias


def _unmarked(arg: DynamicArg, value: Any) -> Any:
    """Traced: an UnbackedInt's value back from its carrier, at least its ``min``."""
    if not isinstance(arg, UnbackedInt):
        return value
    size = value.shape[0]
    torch._check(size >= arg.min)
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
        for t in value if arg.length is not None else [value]:
            if arg.size not in sizes:
                sizes[arg.size] = t.shape[0] // arg.rows
                if arg.max is not None:
                    torch._check(sizes[arg.size] <= arg.max)
            torch._check(t.shape[0] == sizes[arg.size] * arg.rows)
