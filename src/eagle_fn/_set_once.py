"""Objects whose public attributes are set once: what was built from them stays in step."""

from __future__ import annotations


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
