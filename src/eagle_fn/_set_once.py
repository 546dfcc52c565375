"""Objects whose public attributes are set once: what was built from them stays in step."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import torch

    from ._backend import Backend
    from .config import DraftConfig


class SetOnce:
    """Public attributes may be set once; assigning or deleting one afterwards raises
    ``AttributeError``, since what the object built from it would no longer match (a worker's
    paths and constants, say). Private ones (``_name``) stay free. A method that rebuilds
    removes the attribute through ``vars(self)`` first."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in vars(self) and not name.startswith("_"):
            raise AttributeError(self._read_only(name))
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if not name.startswith("_"):
            raise AttributeError(self._read_only(name))
        object.__delattr__(self, name)

    def _read_only(self, name: str) -> str:
        cls = type(self).__name__
        return f"{cls}.{name} is read-only: {cls} was built from it"


class WorkerSettings(SetOnce):
    """The worker's settings: read-only at run time (:class:`SetOnce`) and, as properties, to
    type checkers, so the worker sets them through ``vars(self)``. A worker is neither
    pickled nor copied: what it built belongs to its process."""

    if TYPE_CHECKING:

        @property
        def config(self) -> DraftConfig: ...
        @property
        def max_bs(self) -> int: ...
        @property
        def device(self) -> torch.device: ...
        @property
        def backend(self) -> Backend: ...
        @property
        def compiled(self) -> frozenset[str]: ...

    def __reduce__(self) -> NoReturn:
        cls = type(self).__name__
        raise TypeError(
            f"{cls} cannot be pickled or copied: its compiled functions and cached constants "
            f"belong to this process; build one in each process from its settings"
        )
