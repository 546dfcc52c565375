"""Backends: the torch functions or the fused Triton kernels, chosen by EAGLE_FN_BACKEND."""

from __future__ import annotations

import enum
import os

import torch

ENV_VAR = "EAGLE_FN_BACKEND"


class Backend(enum.Enum):
    TORCH = "torch"
    TRITON = "triton"
    AUTO = "auto"


def resolve_backend(backend: object, device: torch.device) -> Backend:
    """The backend for ``device``: ``backend`` if given, else the variable; ``auto`` is torch."""
    raw = os.environ.get(ENV_VAR, "auto") if backend is None else backend
    try:
        chosen = Backend(raw)
    except ValueError:
        allowed = ", ".join(repr(b.value) for b in Backend)
        raise ValueError(f"{ENV_VAR} must be one of {allowed} or unset, got {raw!r}") from None
    return Backend.TORCH if chosen is Backend.AUTO else chosen
