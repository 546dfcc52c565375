"""Arguments beside the tensors: configs, ints and devices, checked with exact messages."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .config import DraftConfig


def show(shape: Sequence[int | str]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _of(value: object) -> str:
    return type(value).__name__


def require_config(where: str, cfg: object) -> DraftConfig:
    if not isinstance(cfg, DraftConfig):
        raise TypeError(f"{where}: cfg must be a DraftConfig, got {_of(cfg)}")
    return cfg


def require_tensor(where: str, name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{where}: {name} must be a torch.Tensor, got {_of(value)}")
    if value.layout != torch.strided:
        raise TypeError(f"{where}: {name} must be a dense (strided) tensor, got {value.layout}")
    return value


def require_int(where: str, name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{where}: {name} must be an int, got {_of(value)}")
    if value < minimum:
        raise ValueError(f"{where}: {name} must be >= {minimum}, got {value}")
    return value


def as_device(where: str, device: object) -> torch.device:
    """Canonical ``torch.device`` for a ``torch.device`` or a string: ``"cuda"`` resolves to
    ``cuda:0`` (the current device), as tensors report it, so comparisons and keys agree."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"{where}: device must be a torch.device or a str, got {_of(device)}")
    try:
        resolved = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"{where}: device {device!r} is not a valid device: {error}") from None
    try:  # an empty tensor proves the device exists and reports its index
        return torch.empty(0, device=resolved).device
    except (RuntimeError, AssertionError) as error:
        raise ValueError(f"{where}: device {device!r} is not available: {error}") from None
