"""DraftOrganizer: a config, its constants and a table of paths; one guard picks the path."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import torch

from ._backend import resolve_backend
from ._forwarding import cut, forwarding
from ._modes import compiled_paths
from ._paths import PATHS, ROUTES, worker_state
from ._set_once import WorkerSettings
from .arguments import as_device, require_config, require_int
from .config import DraftConfig
from .layout import build_verify_tree
from .organize import organize_multilayer, organize_tree
from .types import MaxBatchWarning

P = ParamSpec("P")
R = TypeVar("R")


def _route(method: str, worker: DraftOrganizer, *args: Any) -> Any:
    """The one guard, over one snapshot of the worker's state; no warning where dynamo traces."""
    checks, general, chain_path, taken = ROUTES[method]
    cfg, fns, constants = worker._state
    checked = checks(cfg, *args, where=f"DraftOrganizer.{method}", **worker._site)
    lead = checked[1][0] if isinstance(checked[1], (list, tuple)) else checked[1]
    if chain_path in constants and lead.shape[0] <= worker.max_bs:  # all tensors have bs
        return fns[chain_path](constants[chain_path], *checked[taken])
    warn = chain_path in constants and not torch.compiler.is_dynamo_compiling()  # can't trace it
    if warn and worker._unwarned.acquire(blocking=False):  # never released: one thread, once
        warnings.warn(MaxBatchWarning.about(lead.shape[0], worker.max_bs), stacklevel=3)
    return fns[general](*checked)


def _method(
    name: str, fn: Callable[Concatenate[DraftConfig, P], R]
) -> Callable[Concatenate[DraftOrganizer, P], R]:
    """The method ``name``: ``fn``'s parameters after ``cfg``, and the guard."""
    doc = f"As :func:`~eagle_fn.{fn.__name__}` with the worker's config (docs/semantics.md §6)."
    signature, qualname = cut(fn, slice(1, None), "self"), f"DraftOrganizer.{name}"
    return forwarding(name, signature, _route, name, qualname=qualname, doc=doc)


class DraftOrganizer(WorkerSettings):
    """The thin stateful front of eagle_fn for a serving engine's draft loop.

    A chain config within ``max_bs`` takes cached constants (no kernel), others the general
    path, with equal values; methods take their function's arguments less ``cfg`` (§6 of
    docs/semantics.md: the guard, compilation, read-only settings, ``MaxBatchWarning``).

    Args:
        cfg: the draft's shape; :meth:`reconfigure` switches it.
        max_bs: the largest batch the chain constants cover; above it, the general path.
        device: the device every tensor argument must be on.
        compile: ``True``/``False`` compiles every/no path; ``None`` reads ``EAGLE_FN_COMPILE``.
        backend: ``'torch'``, ``'triton'``, ``'auto'``, or ``None`` for ``EAGLE_FN_BACKEND``.

    Example:
        >>> import torch
        >>> from eagle_fn import DraftConfig, DraftOrganizer
        >>> worker = DraftOrganizer(DraftConfig.chain(3), max_bs=8, device="cpu", compile=False)
        >>> worker.organize(torch.rand(1, 3), torch.tensor([[11, 0, 6]])).parent_list
        tensor([[-1,  0,  1]])
    """

    organize = _method("organize", organize_multilayer)
    organize_steps = _method("organize_steps", organize_tree)
    build_verify = _method("build_verify", build_verify_tree)

    def __init__(
        self,
        cfg: DraftConfig,
        *,
        max_bs: int,
        device: torch.device | str,
        compile: bool | None = None,
        backend: str | None = None,
    ) -> None:
        require_config(where := "DraftOrganizer", cfg)
        max_bs, device = require_int(where, "max_bs", max_bs, 1), as_device(where, device)
        chosen = resolve_backend(backend, device, where)
        compiled_names = compiled_paths(compile, device, PATHS, chosen, where)
        vars(self).update(max_bs=max_bs, device=device, backend=chosen, compiled=compiled_names)
        self._site = {"device": device, "device_label": "the worker"}
        self._unwarned, self._reconfiguring = threading.Lock(), threading.Lock()
        self.reconfigure(cfg)

    def reconfigure(self, cfg: DraftConfig) -> None:
        """Switches to ``cfg`` (or, failing, keeps the old one): ``config`` is read-only."""
        require_config("DraftOrganizer.reconfigure", cfg)
        state = worker_state(cfg, self.max_bs, self.device, self.compiled, self.backend)
        with self._reconfiguring:  # config and state agree: the last reconfigure wins both
            vars(self)["config"] = cfg  # the one place config is set again
            self._state = state  # read once a call: one in flight runs on one config
