"""Arguments beside the tensors: configs, ints and devices, checked with exact messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import Tensor

from .config import DraftConfig


def show(shape: Sequence[int | str]) -> str:
    return "[" + ", ".join(f"{d}" for d in shape) + "]"  # dynamo traces f-strings, not str()


def type_name(value: object) -> str:
    return type(value).__name__


def require_type(
    where: str, name: str, value: object, kind: type | tuple[type, ...], what: str
) -> Any:
    """``value`` when it is a ``kind``, else a ``TypeError`` saying that it must be ``what``."""
    if not isinstance(value, kind):
        raise TypeError(f"{where}: {name} must be {what}, got {type_name(value)}")
    return value


def require_config(where: str, cfg: object) -> DraftConfig:
    return cast(DraftConfig, require_type(where, "cfg", cfg, DraftConfig, "a DraftConfig"))


def require_tensor(where: str, name: str, value: object) -> Tensor:
    tensor = require_type(where, name, value, Tensor, "a torch.Tensor")
    if tensor.layout != torch.strided:
        raise TypeError(f"{where}: {name} must be a dense (strided) tensor, got {tensor.layout}")
    return cast(Tensor, tensor)


def require_int(
    where: str, name: str, value: object, minimum: int, bound: tuple[str, int] | None = None
) -> int:
    """``value`` if it is an int (a bool is not) ``>= minimum`` and, with ``bound``, below it:
    ``("num_steps", 4)`` asks for ``value`` in ``[minimum, num_steps = 4)``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{where}: {name} must be an int, got {type_name(value)}")
    if value < minimum or (bound is not None and value >= bound[1]):
        wanted = f">= {minimum}" if bound is None else f"in [{minimum}, {bound[0]} = {bound[1]})"
        raise ValueError(f"{where}: {name} must be {wanted}, got {value}")
    return value


def as_device(where: str, device: object) -> torch.device:
    """Canonical ``torch.device`` for a ``torch.device`` or a string: ``"cuda"`` resolves to
    ``cuda:0`` (the current device), as tensors report it, so comparisons and keys agree."""
    spec = require_type(where, "device", device, (str, torch.device), "a torch.device or a str")
    try:
        resolved = torch.device(spec)
    except RuntimeError as error:
        raise ValueError(f"{where}: device {device!r} is not a valid device: {error}") from None
    try:  # an empty tensor proves the device exists and reports its index
        return torch.empty(0, device=resolved).device
    except (RuntimeError, AssertionError) as error:
        raise ValueError(f"{where}: device {device!r} is not available: {error}") from None
