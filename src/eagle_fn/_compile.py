"""The one place that calls torch.compile: mode selection, options and the dynamic batch."""

from __future__ import annotations

import enum
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch.fx.experimental.dynamic_spec import SeqSpec, ShapeVar, TensorSpec

from . import organize
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

    ``auto`` compiles only on CUDA: on a CPU a compiled call's fixed overhead exceeds the
    microseconds of eager work these functions do (docs/benchmarks.md has the numbers).
    """
    if compile is not None:
        if not isinstance(compile, bool):
            raise TypeError(f"compile must be a bool or None, got {type(compile).__name__}")
        return compile
    mode = mode_from_env()
    if mode is CompileMode.AUTO:
        return device.type == "cuda"
    return mode is CompileMode.COMPILED


def compile_fn(fn: Callable[..., Any], *, enabled: bool, shapes: dict[str, object]) -> Any:
    """``fn`` compiled as one full graph with the given dynamic arguments, or ``fn`` itself.

    ``shapes`` maps parameter names to specs whose dim 0 is the batch, an unbacked size:
    plain ``dynamic=True`` specializes sizes 0 and 1 and would compile a second graph at
    ``bs == 1``, and ``mark_unbacked`` would have to write onto the caller's tensors. Every
    other argument is static. Each call gets its own recompile budget
    (``isolate_recompiles``), so many configs never exhaust a shared one. No global dynamo
    or inductor setting of the host process is changed.
    """
    return torch.compile(
        fn,
        fullgraph=True,
        shapes_spec=shapes if enabled else None,
        isolate_recompiles=True,
        disable=not enabled,
    )


def _batch_first(bs: ShapeVar, rank: int) -> TensorSpec:
    return TensorSpec([bs, *([None] * (rank - 1))])


class Organizers(NamedTuple):
    """The organize functions of one config, compiled or eager."""

    chain: Callable[..., organize.DraftTree]  # (constants, topk_index)
    multilayer: Callable[..., organize.DraftTree]  # (cfg, topk_p, topk_index)
    tree: Callable[..., organize.DraftTree]  # (cfg, score_list, token_list, parents_list)


def organizers(cfg: DraftConfig, max_bs: int, *, enabled: bool) -> Organizers:
    """The (shared, memoized) organize functions of ``cfg``: each compiles once on first use."""
    return memoized(("organizers", cfg, max_bs, enabled), lambda: _organizers(cfg, max_bs, enabled))


def _organizers(cfg: DraftConfig, max_bs: int, enabled: bool) -> Organizers:
    # The chain graph slices constants of max_bs rows, so its batch is bounded by max_bs.
    chain_bs = ShapeVar("bs", max=max_bs)
    bs = ShapeVar("bs")
    steps = range(cfg.num_steps)
    return Organizers(
        chain=compile_fn(
            organize._organize_chain,
            enabled=enabled,
            shapes={"topk_index": _batch_first(chain_bs, 2)},
        ),
        multilayer=compile_fn(
            organize._organize_multilayer,
            enabled=enabled,
            shapes={"topk_p": _batch_first(bs, 2), "topk_index": _batch_first(bs, 2)},
        ),
        tree=compile_fn(
            organize._organize_tree,
            enabled=enabled,
            shapes={
                "score_list": SeqSpec([_batch_first(bs, 3) for _ in steps]),
                "token_list": SeqSpec([_batch_first(bs, 2) for _ in steps]),
                "parents_list": SeqSpec([_batch_first(bs, 2) for _ in steps]),
            },
        ),
    )
