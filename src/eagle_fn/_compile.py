"""The one place that calls torch.compile: mode selection, options and the dynamic batch."""

from __future__ import annotations

import enum
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch.fx.experimental.dynamic_spec import IntVar, SeqSpec, ShapeVar, TensorSpec

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


def compile_fn(fn: Callable[..., Any], *, enabled: bool, shapes: dict[str, object]) -> Any:
    """``fn`` compiled as one full graph with the given dynamic arguments, or ``fn`` itself.

    ``shapes`` maps parameter names to specs whose dim 0 is the batch, an unbacked size:
    plain ``dynamic=True`` specializes sizes 0 and 1 and would compile a second graph at
    ``bs == 1``, and ``mark_unbacked`` would have to write onto the caller's tensors. Every
    other argument is static. Each call gets its own recompile budget
    (``isolate_recompiles``), so many configs never exhaust a shared one. No global dynamo
    or inductor setting of the host process is changed.
    """
    # torch's typing stubs lack isolate_recompiles, which torch.compile accepts.
    return torch.compile(  # type: ignore[call-overload]
        fn,
        fullgraph=True,
        shapes_spec=shapes if enabled else None,
        isolate_recompiles=True,
        disable=not enabled,
        options=_INDUCTOR_OPTIONS,
    )


# Per-compile inductor options (never the global config). The generated code re-asserts
# input sizes and strides that dynamo's guards already checked; skipping that cuts the tree
# graph's CPU call by ~8 µs. cpp_wrapper was measured too and stays off: its graphs read
# the unbacked batch size on the host every call. docs/benchmarks.md has the numbers.
_INDUCTOR_OPTIONS = {"size_asserts": False}


def _batch_first(bs: ShapeVar, rank: int) -> TensorSpec:
    return TensorSpec([bs, *([None] * (rank - 1))])


class Paths(NamedTuple):
    """The functions behind a worker's paths for one config, compiled or eager."""

    chain: Callable[..., organize.DraftTree]  # (constants, topk_index)
    multilayer: Callable[..., organize.DraftTree]  # (cfg, topk_p, topk_index)
    tree: Callable[..., organize.DraftTree]  # (cfg, score_list, token_list, parents_list)
    chain_verify: Callable[..., verify_tree.VerifyTree]  # (constants, draft_tokens, ...)
    verify: Callable[..., verify_tree.VerifyTree]  # (cfg, parent_list, ..., mask_mode, total)


def paths(cfg: DraftConfig, max_bs: int, *, enabled: bool) -> Paths:
    """The (shared, memoized) functions of ``cfg``: each compiles once, on first use."""
    return memoized(("paths", cfg, max_bs, enabled), lambda: _paths(cfg, max_bs, enabled))


def _paths(cfg: DraftConfig, max_bs: int, enabled: bool) -> Paths:
    # The chain graphs slice constants of max_bs rows, so their batch is bounded by max_bs.
    chain_bs = ShapeVar("bs", max=max_bs)
    bs = ShapeVar("bs")
    # The FULL mask's length: unbacked too, so new sequence lengths never recompile.
    total = IntVar("total", min=0)
    steps = range(cfg.num_steps)
    verify_rows = {"bonus_tokens": _batch_first(bs, 1), "seq_lens": _batch_first(bs, 1)}
    return Paths(
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
        chain_verify=compile_fn(
            verify_tree._build_chain_verify,
            enabled=enabled,
            shapes={
                "draft_tokens": _batch_first(chain_bs, 2),
                "bonus_tokens": _batch_first(chain_bs, 1),
                "seq_lens": _batch_first(chain_bs, 1),
                "total": total,
            },
        ),
        verify=compile_fn(
            verify_tree._build_verify_tree,
            enabled=enabled,
            shapes={
                "parent_list": _batch_first(bs, 2),
                "top_scores_index": _batch_first(bs, 2),
                "draft_tokens": _batch_first(bs, 2),
                **verify_rows,
                "total": total,
            },
        ),
    )
