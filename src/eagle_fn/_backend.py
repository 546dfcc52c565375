"""Backend selection: the torch functions or the fused Triton kernels, by device and setting.

``EAGLE_FN_BACKEND`` (or an explicit ``backend=``) takes ``torch``, ``triton`` or ``auto``:

- ``auto`` (also when unset): Triton on CUDA devices when ``triton`` and
  :mod:`eagle_fn.kernels` import, torch everywhere else. CPU tensors stay on torch even
  under ``TRITON_INTERPRET=1``: the interpreter is a test harness, far slower than the torch
  functions.
- ``torch``: the reference functions, on any device.
- ``triton``: the kernels, or a ``RuntimeError`` saying why they cannot run. They run on CUDA
  devices (ROCm's included), and on CPU tensors only when ``TRITON_INTERPRET=1`` was set
  before triton was first imported (Triton decides at decoration time, its own helpers'
  as ``triton.language`` is imported; torch._dynamo imports it, ``import eagle_fn`` not).
"""

from __future__ import annotations

import enum
import functools
import importlib.util
import os

import torch

from .arguments import type_name

ENV_VAR = "EAGLE_FN_BACKEND"
INTERPRET_VAR = "TRITON_INTERPRET"


class Backend(enum.Enum):
    """Values of ``EAGLE_FN_BACKEND``; :func:`resolve_backend` never returns ``AUTO``."""

    TORCH = "torch"
    TRITON = "triton"
    AUTO = "auto"


def parse_backend(value: str | Backend, *, source: str = "backend", unset: str = "") -> Backend:
    """The :class:`Backend` named by ``value``; a ``ValueError`` lists the valid names."""
    if isinstance(value, Backend):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{source} must be a str, a Backend or None, got {type_name(value)}")
    try:
        return Backend(value)
    except ValueError:
        valid = ", ".join(repr(b.value) for b in Backend)
        raise ValueError(f"{source} must be one of {valid}{unset}, got {value!r}") from None


def backend_from_env() -> Backend:
    """Parses ``EAGLE_FN_BACKEND``; unset (or empty) means ``auto``."""
    raw = os.environ.get(ENV_VAR) or Backend.AUTO.value
    return parse_backend(raw, source=ENV_VAR, unset=" or unset/empty")


def resolve_backend(
    backend: str | Backend | None, device: torch.device, where: str = ""
) -> Backend:
    """The backend that serves tensors on ``device``: ``TORCH`` or ``TRITON``.

    Args:
        backend: ``"torch"``, ``"triton"``, ``"auto"`` or a :class:`Backend`; ``None`` reads
            ``EAGLE_FN_BACKEND``.
        device: the device of the tensors the backend will see.
        where: the caller errors name (``"DraftOrganizer"``), if any.

    Example:
        >>> from eagle_fn._backend import resolve_backend
        >>> resolve_backend("auto", torch.device("cpu"))
        <Backend.TORCH: 'torch'>
    """
    name = f"{where}: backend" if where else "backend"
    choice = backend_from_env() if backend is None else parse_backend(backend, source=name)
    if choice is Backend.TORCH:
        return Backend.TORCH
    if choice is Backend.AUTO:
        usable = device.type == "cuda" and triton_available() and kernels_import_error() is None
        return Backend.TRITON if usable else Backend.TORCH
    reason = triton_unavailable_reason(device) or kernels_import_error()
    if reason is not None:
        raise RuntimeError(f"{name} 'triton' cannot run on {device}: {reason}")
    return Backend.TRITON


def triton_unavailable_reason(device: torch.device) -> str | None:
    """Why the kernels cannot run on ``device``, or ``None`` when they can."""
    return triton_import_error() or kernel_device_reason(device)


def kernels_import_error() -> str | None:
    """Why :mod:`eagle_fn.kernels` fails to import once triton does (its kernels decorated in
    another mode than Triton's own helpers, ``TRITON_INTERPRET`` having changed), or ``None``.
    Asked where the kernels are about to be imported anyway."""
    try:
        importlib.import_module("eagle_fn.kernels")
    except ImportError as error:
        return str(error)
    return None


def kernel_device_reason(device: torch.device) -> str | None:
    """:func:`triton_unavailable_reason` once triton is known to be there: what the kernels
    check as they run, in callers' compiles too, which is why it reads no import machinery."""
    if device.type == "cuda":
        return None
    if device.type == "cpu":
        if interpreting():
            return None
        return (
            f"Triton kernels run on CPU tensors only in interpreter mode; set "
            f"{INTERPRET_VAR}=1 before triton is first imported (before `import eagle_fn`)"
        )
    return f"Triton kernels need a CUDA device or CPU tensors, got device type {device.type!r}"


def interpreting() -> bool:
    """Whether the kernels run in Triton's interpreter. Triton decides when it decorates them:
    once :mod:`eagle_fn.kernels` is imported, as it did then; before, as it would now, from
    ``TRITON_INTERPRET`` (any case of ``1``, ``true``, ``on``, ``yes`` or ``y``)."""
    if _decided:
        return _decided[0]
    return os.environ.get(INTERPRET_VAR, "").lower() in ("1", "true", "on", "yes", "y")


_decided: list[bool] = []  # how eagle_fn.kernels' kernels were decorated, once imported


def record_kernels(interpreted: bool) -> None:
    """Called by :mod:`eagle_fn.kernels` on import: whether its kernels are interpreted."""
    _decided[:] = [interpreted]


def triton_available() -> bool:
    """Whether ``triton`` imports. Asked only where the kernels are about to be imported,
    which imports triton anyway (seconds): ``auto`` on CUDA, ``triton`` anywhere."""
    return triton_import_error() is None


def triton_import_error() -> str | None:
    """Why ``import triton`` fails, or ``None`` when it succeeds. Installed is not enough: a
    broken install (a CUDA library it cannot load, say) sends ``auto`` to torch."""
    return import_error("triton")


@functools.cache
def import_error(name: str) -> str | None:
    """Why ``import name`` fails (not installed, or raising), or ``None`` once it succeeds."""
    if importlib.util.find_spec(name) is None:
        return f"the {name} package is not installed (pip install {name})"
    try:
        importlib.import_module(name)
    except Exception as error:  # a broken install raises anything: ImportError, OSError, ...
        return f"{name} is installed but does not import ({type(error).__name__}: {error})"
    return None
