"""Fills a Triton cache for a GPU check without a GPU: each kernel launch of the tests marked
``gpu``, compiled for sm_90 ahead of the run.

Both H200 runs of 2026-11-30 ran out of time in bench/gpu_check.sh's test step. Under the
interpreter those tests launch over 500 variants of eagle_fn's kernels (shapes become
constexprs), 2 minutes of compiling on the development CPU, paid in whichever test meets
each first. Triton finds a compiled kernel on disk by a key of its own version and build,
ptxas, the source, the specialization and the options, none of which needs the GPU. So:

1. ``record`` runs ``pytest tests -m gpu`` under ``TRITON_INTERPRET=1`` on the CPU and writes
   each distinct launch (kernel, argument dtypes and alignments, ints, constexprs) to
   ``OUT/launches.json``;
2. ``compile`` (a separate process, without the interpreter) rebuilds each launch from CPU
   tensors of the same dtypes and alignments and compiles it as ``JITFunction.run`` would for
   sm_90 (tests/helpers/kernel_aot.py), into ``OUT`` as a ``TRITON_CACHE_DIR``, with the
   ahead-of-time variants (the benchmarks' shapes) besides; it keeps each entry's metadata
   and cubin only.

``python scripts/triton_cache.py OUT`` does both. A key matches the GPU machine's only with
the same Triton build: run it under the Python minor version and Triton release there (the
lent H200: CPython 3.12, Triton 3.6.0; any torch), with no ``TRITON_*`` variable set that
Triton hashes into its keys. bench/gpu_check.sh uses ``.triton-cache`` when the device call
carries it (docs/benchmarks.md) and reports how many kernels it had to compile anyway;
hypothesis draws other shapes where its version differs, and those compile as before.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LAUNCHES = "launches.json"


class Recorder:
    """A pytest plugin that notes each interpreted launch as JSON-ready values."""

    def __init__(self) -> None:
        self.launches: dict[str, dict[str, Any]] = {}

    def pytest_configure(self, config: Any) -> None:
        from triton.runtime.interpreter import InterpretedFunction

        run = InterpretedFunction.run

        def recording(kernel: Any, *args: Any, grid: Any, warmup: Any, **kwargs: Any) -> Any:
            fn = kernel.fn
            launch = {
                "kernel": f"{fn.__module__}:{fn.__name__}",
                "args": [encode(arg) for arg in args],
                "kwargs": {name: encode(value) for name, value in kwargs.items()},
            }
            self.launches.setdefault(json.dumps(launch, sort_keys=True), launch)
            return run(kernel, *args, grid=grid, warmup=warmup, **kwargs)

        InterpretedFunction.run = recording  # type: ignore[method-assign]


def encode(value: Any) -> Any:
    """A tensor as its dtype and its address modulo 16 (what a kernel specializes on)."""
    import torch

    if isinstance(value, torch.Tensor):
        return {"dtype": str(value.dtype).removeprefix("torch."), "offset": value.data_ptr() % 16}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a launch argument of type {type(value).__name__} cannot be recorded")


def decode(value: Any) -> Any:
    """A CPU tensor whose dtype and address modulo 16 are the recorded ones, or the value."""
    import torch

    if not isinstance(value, dict):
        return value
    dtype = getattr(torch, value["dtype"])
    buffer = torch.empty(64, dtype=torch.uint8)
    start = value["offset"] - buffer.data_ptr() % 16
    start += 16 if start < 0 else 0
    return buffer[start : start + 16].view(dtype)


def record(out: Path, pytest_args: list[str]) -> None:
    os.environ["TRITON_INTERPRET"] = "1"
    # gpu_check.sh's profile: derandomized, so that hypothesis draws the shapes it will draw.
    os.environ["HYPOTHESIS_PROFILE"] = "ci"
    import pytest

    recorder = Recorder()
    os.chdir(ROOT)
    code = pytest.main(
        ["tests", "-m", "gpu", "-q", "-p", "no:cacheprovider", *pytest_args], plugins=[recorder]
    )
    launches = sorted(recorder.launches.values(), key=lambda launch: json.dumps(launch))
    (out / LAUNCHES).write_text(json.dumps(launches, indent=0))
    print(f"recorded {len(launches)} distinct launches (pytest exit {int(code)})")


def compile_all(out: Path) -> None:
    os.environ["TRITON_CACHE_DIR"] = str(out.resolve())
    sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "helpers")]
    import kernel_aot
    import triton
    from triton._C.libtriton import get_cache_invalidating_env_vars

    if hashed := get_cache_invalidating_env_vars():  # the GPU check sets none of them
        sys.exit(f"Triton hashes these into its keys; unset them first: {sorted(hashed)}")

    done: set[str] = set()
    start = time.perf_counter()
    sources = {
        "the tests": recorded(out),
        "the AOT variants": aot_launches(),
        "the sampling sweep": sweep_launches(),
    }
    for source, launches in sources.items():
        count = len(done)
        for kernel, args, kwargs in launches:
            key = f"{kernel.fn.__module__}:{kernel.fn.__name__} "
            key += kernel_aot.specialization(kernel, args, kwargs)
            if key not in done:
                done.add(key)
                kernel_aot.compile_for_hopper(kernel, args, kwargs)
        print(f"{len(done) - count} variants from {source}")
    seconds = time.perf_counter() - start
    print(f"compiled {len(done)} variants for sm_90 in {seconds:.0f} s, with Triton")
    print(f"{triton.__version__} on Python {sys.version.split()[0]}, into {out}")
    (out / "key.txt").write_text(key_parts() + "\n")
    place(out, keep=(".json", ".cubin"))


def recorded(out: Path) -> Iterator[tuple[Any, list[Any], dict[str, Any]]]:
    """The launches ``record`` wrote, rebuilt; a test's own kernels (a few) left out. A launch
    with a tensor off the 16-byte grid comes twice, the second time with every tensor on it:
    the kernel tests draw inputs on the CPU and move them to the GPU, and a view moved with
    ``.to`` lands in a fresh, aligned allocation there."""
    for launch in json.loads((out / LAUNCHES).read_text()):
        module, name = launch["kernel"].split(":")
        if not module.startswith("eagle_fn."):
            continue
        kernel = getattr(importlib.import_module(module), name)
        kwargs = {key: decode(value) for key, value in launch["kwargs"].items()}
        yield kernel, [decode(arg) for arg in launch["args"]], kwargs
        aligned = [{**a, "offset": 0} if isinstance(a, dict) else a for a in launch["args"]]
        if aligned != launch["args"]:
            yield kernel, [decode(arg) for arg in aligned], kwargs


def aot_launches() -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    """tests/helpers/kernel_aot_variants.py's launches: every variant (the benchmarks' target
    shapes in every dtype and mask mode) and each stage over its batch sizes (each way Triton
    specializes a batch-dependent int), which the interpreted tests do not all reach."""
    import kernel_aot_variants as variants

    launchers = [launcher for _, launcher in variants.variants(everything=True)]
    for bs in variants.BATCH_SIZES:
        launchers += [launcher for _, launcher in variants.batch_launchers(bs)]
    for launcher in launchers:
        yield from variants.recorded_launches(launcher)


def sweep_launches() -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    """bench/sweep_sampling.py's launch shapes on its inputs (built on the CPU): a compile
    each, which its step of the GPU check would otherwise pay."""
    import kernel_aot_variants as variants
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    import sweep_sampling as sweep
    from eagle_fn import sampling
    from eagle_fn.kernels import sampling as fused

    default = tuple(getattr(fused, name) for name in sweep.KNOBS)
    try:
        for vocab in sweep.VOCABS:
            inputs = sweep.sampling_inputs(sweep.TREE_TARGET, vocab, torch.device("cpu"))
            args = sampling.sampling_args(sweep.TREE_TARGET.config, *inputs)
            for shape in sweep.SHAPES:
                sweep.set_shape(shape)
                yield from variants.recorded_launches(partial(fused.sampling_core, *args))
    finally:
        sweep.set_shape(default)


def place(out: Path, keep: tuple[str, ...] | None = None) -> None:
    """Points each cache entry's file list at ``out`` as it is now (Triton writes absolute
    paths and drops a file it does not find, so a moved cache would miss), and with ``keep``
    deletes the other files: a launch loads only the metadata and the cubin (the IR and PTX
    made three quarters of the size)."""
    for group in out.glob("*/__grp__*.json"):
        children = json.loads(group.read_text())["child_paths"]
        paths = {name: group.parent / name for name in children}
        for name, path in paths.items():
            if keep is not None and not name.endswith(keep):
                path.unlink(missing_ok=True)
        found = {name: str(path.resolve()) for name, path in paths.items() if path.exists()}
        group.write_text(json.dumps({"child_paths": found}))


def key_parts() -> str:
    """What besides the kernel and its launch keys Triton's cache for sm_90, as one line: the
    Triton build, ptxas (its version text, hashed), the options a launch gets from the
    environment (``TRITON_DEBUG``, ``PTXAS_OPTIONS``..., as ``JITFunction.run`` sets them; hashed)
    and the variables Triton hashes in."""
    import hashlib

    import triton
    from triton import knobs
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    try:
        from triton.runtime.cache import triton_key
    except ImportError:  # before Triton 3.5
        from triton.compiler.compiler import triton_key

    def digest(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    backend = make_backend(GPUTarget("cuda", 90, 32))
    launch = {
        "debug": knobs.runtime.debug,
        "instrumentation_mode": knobs.compilation.instrumentation_mode,
    }
    options = digest(backend.parse_options(launch).hash())
    env = get_cache_invalidating_env_vars()
    parts = f"build {digest(triton_key())} ptxas {digest(backend.hash())} options {options}"
    return f"triton {triton.__version__} {parts} env {env}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="the cache folder (.triton-cache)")
    steps = ("record", "compile", "both", "place", "key")
    parser.add_argument("--step", choices=steps, default="both", help="place: after a move")
    options, pytest_args = parser.parse_known_args()
    if options.step == "key":
        print(key_parts())
        return
    if options.out is None:
        parser.error("the cache folder is required")
    options.out = options.out.resolve()  # record runs pytest from the repository root
    options.out.mkdir(parents=True, exist_ok=True)
    if options.step == "record":
        record(options.out, pytest_args)
    elif options.step == "compile":
        compile_all(options.out)
    elif options.step == "place":
        place(options.out)
    else:  # each in its own process: the interpreter's kernels are not the compiler's
        for step in ("record", "compile"):
            command = [sys.executable, __file__, str(options.out), "--step", step]
            env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
            subprocess.run(
                [*command, *pytest_args] if step == "record" else command, check=True, env=env
            )


if __name__ == "__main__":
    main()
