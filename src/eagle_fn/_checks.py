"""Input checks for the public entry points: Python shape/dtype comparisons, never a host sync."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .config import DraftConfig


def show(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def require_config(where: str, cfg: object) -> DraftConfig:
    if not isinstance(cfg, DraftConfig):
        raise TypeError(f"{where}: cfg must be a DraftConfig, got {type(cfg).__name__}")
    return cfg


SCORE_DTYPES = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))
INT64 = torch.int64
STRIDED = torch.strided

# Every entry point first runs a fast predicate built from signature() comparisons; only when
# it fails do the require_* checks run, to raise the precise error (or to accept an input the
# predicate is too strict for, such as mixed score dtypes). Valid calls pay 0.5-0.6 µs per tensor.
Signature = tuple[torch.Size, torch.dtype, torch.device, torch.layout]


def signature(tensor: Tensor) -> Signature:
    """What the fast predicates compare: shape, dtype, device and layout in one tuple."""
    return tensor.shape, tensor.dtype, tensor.device, tensor.layout


def require_tensor(where: str, name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{where}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if value.layout != torch.strided:
        raise TypeError(f"{where}: {name} must be a dense (strided) tensor, got {value.layout}")
    return value


def require_rank(where: str, name: str, value: object, symbolic: str, ndim: int) -> Tensor:
    """Checks ``value`` is a tensor of rank ``ndim``; ``symbolic`` is its shape in SPEC symbols."""
    tensor = require_tensor(where, name, value)
    if tensor.dim() != ndim:
        raise ValueError(
            f"{where}: {name} must have shape {symbolic} (rank {ndim}), "
            f"got shape {show(tensor.shape)}"
        )
    return tensor


def require_shape(
    where: str, name: str, value: object, symbolic: str, shape: tuple[int, ...]
) -> Tensor:
    tensor = require_tensor(where, name, value)
    if tensor.shape != shape:
        raise ValueError(
            f"{where}: {name} must have shape {symbolic} = {show(shape)}, got {show(tensor.shape)}"
        )
    return tensor


def require_index(
    where: str, name: str, value: object, symbolic: str, shape: tuple[int, ...]
) -> Tensor:
    tensor = require_shape(where, name, value, symbolic, shape)
    if tensor.dtype != torch.int64:
        raise TypeError(f"{where}: {name} must be an int64 tensor, got {tensor.dtype}")
    return tensor


def require_scores(
    where: str, name: str, value: object, symbolic: str, shape: tuple[int, ...]
) -> Tensor:
    tensor = require_shape(where, name, value, symbolic, shape)
    if tensor.dtype not in SCORE_DTYPES:
        raise TypeError(
            f"{where}: {name} must be a floating-point tensor (float16, bfloat16, float32 or "
            f"float64), got {tensor.dtype}"
        )
    return tensor


def require_device(
    where: str, name: str, tensor: Tensor, device: torch.device, source: str
) -> None:
    if tensor.device != device:
        raise ValueError(
            f"{where}: {name} is on {tensor.device}, expected {device} (the device of {source})"
        )


def require_steps(where: str, name: str, value: object, num_steps: int) -> Sequence[object]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(
            f"{where}: {name} must be a list of num_steps = {num_steps} tensors, "
            f"got {type(value).__name__}"
        )
    if len(value) != num_steps:
        raise ValueError(
            f"{where}: {name} must hold num_steps = {num_steps} tensors, got {len(value)}"
        )
    return value


def require_int(where: str, name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{where}: {name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{where}: {name} must be >= {minimum}, got {value}")
    return value


def as_device(where: str, device: object) -> torch.device:
    """Canonical ``torch.device`` for a ``torch.device`` or a string such as ``"cpu"``."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(
            f"{where}: device must be a torch.device or a str, got {type(device).__name__}"
        )
    try:
        resolved = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"{where}: device {device!r} is not a valid device: {error}") from None
    if resolved.type == "cpu":
        return torch.device("cpu")
    # An empty tensor proves the device exists and resolves "cuda" to "cuda:0", as tensors
    # report it, so that device comparisons and cache keys agree.
    try:
        return torch.empty(0, device=resolved).device
    except (RuntimeError, AssertionError) as error:
        raise ValueError(f"{where}: device {device!r} is not available: {error}") from None
