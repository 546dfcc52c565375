"""Cached device constants: one memoized builder, same key -> same tensors, forever."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, cast

import torch
from torch import Tensor

from . import _checks
from ._memo import cached_values, memoized
from .config import DraftConfig


class CachedTensors:
    """Base of the cached constant sets: records each tensor's version to detect writes."""

    _versions: dict[str, int]  # set once in __post_init__; not a dataclass field

    def __post_init__(self) -> None:
        object.__setattr__(self, "_versions", self._tensor_versions())

    def _tensors(self) -> dict[str, Tensor]:
        values = {f.name: getattr(self, f.name) for f in fields(cast(Any, self))}
        return {name: value for name, value in values.items() if isinstance(value, Tensor)}

    def _tensor_versions(self) -> dict[str, int]:
        return {name: t._version for name, t in self._tensors().items()}

    def _expected(self) -> dict[str, Tensor]:
        raise NotImplementedError

    def check(self) -> None:
        """Raises ``RuntimeError`` if any cached tensor was modified since it was built.

        A debugging aid, not for the hot path: it compares every value against a fresh build
        (a host sync on CUDA). In-place writes through torch, also through a returned view,
        are caught by their version counter; writes by raw-pointer kernels by the values.
        """
        versions = self._tensor_versions()
        expected_tensors = self._expected()
        for name, tensor in self._tensors().items():
            expected = expected_tensors[name]
            if versions[name] != self._versions[name]:
                reason = "was written in place"
            elif tensor.shape != expected.shape or tensor.stride() != expected.stride():
                reason = f"changed layout to {_checks.show(tensor.shape)}"
            elif not torch.equal(tensor, expected):
                reason = "holds different values"
            else:
                continue
            raise RuntimeError(
                f"{type(self).__name__}.{name} {reason}: cached constants are shared and must "
                f"be treated as read-only"
            )


@dataclass(frozen=True, eq=False)
class ChainConstants(CachedTensors):
    """The organization of a chain draft, precomputed on one device for ``bs <= max_bs``.

    Both tensors are contiguous int64 (made with ``repeat``, not ``expand``: downstream kernels
    read raw memory) and shared by every caller with the same key: treat them as read-only.
    """

    config: DraftConfig
    max_bs: int
    parents: Tensor  # [max_bs, parent_width] arange(-1, S - 1) per row
    score_indices: Tensor  # [max_bs, num_steps] arange(S) per row

    def _expected(self) -> dict[str, Tensor]:
        return _chain_tensors(self.config, self.max_bs, self.parents.device)


def chain_constants(cfg: DraftConfig, *, max_bs: int, device: torch.device | str) -> ChainConstants:
    """The cached :class:`ChainConstants` of a chain config on ``device``.

    The same arguments return the same object and tensors every time (also from many threads
    at once), so a captured graph holding their addresses never sees them rebound.

    Args:
        cfg: a chain configuration (``topk == 1``).
        max_bs: the largest batch the constants serve, ``>= 1``.
        device: a ``torch.device`` or a string such as ``"cpu"``.

    Shapes: ``parents [max_bs, parent_width]``, ``score_indices [max_bs, num_steps]``.

    Example:
        >>> constants = chain_constants(DraftConfig.chain(3), max_bs=2, device="cpu")
        >>> constants.parents.tolist(), constants.score_indices.tolist()
        ([[-1, 0, 1], [-1, 0, 1]], [[0, 1, 2], [0, 1, 2]])
        >>> constants is chain_constants(DraftConfig.chain(3), max_bs=2, device="cpu")
        True
    """
    where = "chain_constants"
    cfg = _checks.require_config(where, cfg)
    if not cfg.is_chain:
        raise ValueError(f"{where}: cfg must be a chain config (topk == 1), got topk = {cfg.topk}")
    _checks.require_int(where, "max_bs", max_bs, 1)
    dev = _checks.as_device(where, device)
    return memoized(("chain", cfg, max_bs, dev), lambda: _build_chain(cfg, max_bs, dev))


def check_constants() -> None:
    """Runs :meth:`CachedTensors.check` on every cached constant set (a debugging aid)."""
    for value in cached_values():
        if isinstance(value, CachedTensors):
            value.check()


def _chain_tensors(cfg: DraftConfig, max_bs: int, device: torch.device) -> dict[str, Tensor]:
    steps = cfg.num_steps
    parents = torch.arange(-1, cfg.parent_width - 1, device=device).repeat(max_bs, 1)
    score_indices = torch.arange(steps, device=device).repeat(max_bs, 1)
    return {"parents": parents, "score_indices": score_indices}


def _build_chain(cfg: DraftConfig, max_bs: int, device: torch.device) -> ChainConstants:
    return ChainConstants(cfg, max_bs, **_chain_tensors(cfg, max_bs, device))
