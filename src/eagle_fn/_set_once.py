"""Objects whose public attributes are set once: what was built from them stays in step."""

from __future__ import annotations


class SetOnce:
    """Public attributes may be set once; assigning one again raises ``AttributeError``, since
    what the object built from it would no longer match (a worker's paths and constants, say).
    Private ones (``_name``) stay free. A method that rebuilds deletes the attribute first."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in vars(self) and not name.startswith("_"):
            cls = type(self).__name__
            raise AttributeError(f"{cls}.{name} is read-only: {cls} was built from it")
        object.__setattr__(self, name, value)
