"""Which of a worker's paths compile: ``EAGLE_FN_COMPILE``, ``auto``'s measured table, and
whether inductor can compile on a CPU at all."""

from __future__ import annotations

import enum
import functools
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from ._backend import Backend
from .arguments import type_name

if TYPE_CHECKING:
    from ._compile import Path

ENV_VAR = "EAGLE_FN_COMPILE"

# What `auto` compiles, per device type: the paths whose compiled call measured faster than
# eager there (docs/performance.md has the figures and their sources). On a CPU only the
# general verify build (84 small ops) gains. On CUDA (an H200, torch 2.11) the tree organize
# and the general verify build gain under CUDA-graph replay; the chain organize runs no kernel
# and the chain verify build two, where compiling adds host time and saves none.
AUTO_COMPILED = {"cpu": frozenset({"verify"}), "cuda": frozenset({"tree", "verify"})}


class CompileMode(enum.Enum):
    """Values of ``EAGLE_FN_COMPILE``: ``0`` eager, ``1`` compiled, ``auto`` by measurement."""

    EAGER = "0"
    COMPILED = "1"
    AUTO = "auto"


def mode_from_env() -> CompileMode:
    """Parses ``EAGLE_FN_COMPILE``; unset (or empty, as env files leave it) means ``auto``."""
    raw = os.environ.get(ENV_VAR) or CompileMode.AUTO.value
    try:
        return CompileMode(raw)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in CompileMode)
        raise ValueError(
            f"{ENV_VAR} must be one of {allowed} or unset/empty, got {raw!r}"
        ) from None


def compiled_paths(
    compile: object,
    device: torch.device,
    paths: Mapping[str, Path],
    backend: Backend,
    where: str = "",
) -> frozenset[str]:
    """The names of the paths to compile: all or none for ``compile=True/False``, else by
    the variable. ``where``: the caller errors name (``"DraftOrganizer"``), if any.

    ``auto`` never compiles a path that runs as one Triton kernel on ``backend``: compiling
    a single launch adds guard cost and fuses nothing. On a CPU with no working C++ compiler,
    and on meta tensors (inductor generates no code for them), ``auto`` compiles nothing and
    compiling on request raises, before any call.
    """
    names, prefix = frozenset(paths), f"{where}: " if where else ""
    if compile is not None:
        if not isinstance(compile, bool):
            raise TypeError(f"{prefix}compile must be a bool or None, got {type_name(compile)}")
        mode = CompileMode.COMPILED if compile else CompileMode.EAGER
    else:
        mode = mode_from_env()
    if mode is CompileMode.EAGER:
        return frozenset()
    missing = device.type == "cpu" and cpp_compiler_missing()
    if mode is CompileMode.AUTO:
        fused = {n for n, p in paths.items() if p.kernel and backend is Backend.TRITON}
        return frozenset() if missing else (names - fused) & AUTO_COMPILED.get(device.type, set())
    if device.type == "meta":
        raise ValueError(
            f"{prefix}cannot compile on meta: inductor generates no code for meta tensors; "
            f"pass compile=False or set {ENV_VAR}=0 or auto"
        )
    if missing:
        raise RuntimeError(
            f"{prefix}compiling on cpu needs a C++ compiler for inductor and none works: "
            f"{missing}; install one (g++), or pass compile=False or set {ENV_VAR}=0 or auto"
        )
    return names


def cpp_compiler_missing() -> str:
    """Why inductor's CPU backend would find no working C++ compiler, or ``""``: it builds
    every CPU graph with one, and without one the first compiled call would fail mid-serving.
    Asked once per process, also when threads build their first workers at once."""
    with _probing:
        return _probe()


_probing = threading.Lock()


@functools.cache
def _probe() -> str:
    """Inductor's own probe (``<cxx> --version``), then a build of a shared library, which a
    compiler that only answers ``--version`` fails."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:  # a torch without this probe: leave the decision to inductor
        return ""
    try:
        cxx = get_cpp_compiler()
    except Exception as error:  # InvalidCxxCompiler, or whatever a future probe raises
        return str(error) or type(error).__name__
    return "" if sys.platform == "win32" else _cannot_build(cxx)  # MSVC takes other flags


def _cannot_build(cxx: str) -> str:
    """Why ``cxx`` cannot build a one-function shared library, as inductor builds each graph
    (``-shared -fPIC``), or ``""``."""
    with tempfile.TemporaryDirectory(prefix="eagle_fn_cxx_") as folder:
        source = os.path.join(folder, "probe.cpp")
        with open(source, "w") as file:
            file.write('extern "C" int eagle_fn_probe() { return 0; }\n')
        command = [cxx, "-shared", "-fPIC", source, "-o", os.path.join(folder, "probe.so")]
        try:
            built = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as error:
            return f"{cxx} did not run: {error}"
    if built.returncode != 0:
        said = built.stderr.strip()[-300:] or f"exit status {built.returncode}"
        return f"{cxx} answers --version but cannot build a shared library: {said}"
    return ""
