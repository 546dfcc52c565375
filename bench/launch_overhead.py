"""Where a fused stage's host time goes on a GPU: eagle_fn's Python, Triton's launch, or the rest.

Run from the repository root on a CUDA machine (``bench/gpu_check.sh`` does)::

    PYTHONPATH=src:bench python bench/launch_overhead.py

Issue 10 asks for at most 50 µs of eager host time per stage; the H200 run of 2026-11-30 gave
48-103 µs at bs 32, while the same calls with the launch stubbed out cost 11-19 µs of Python on
the 2-core development CPU. For each stage of the tree-path target case it prints, in host µs
per call (the loop timed with one synchronize at its end):

- ``public``: the ``eagle_fn.kernels`` function, checks and allocation included;
- ``uncached``: the same call launching through Triton's ``kernel[grid]`` every time, as
  before eagle_fn's cached launch (``public`` less this is what the cache saves);
- ``python``: the same call with the launch replaced by a no-op: eagle_fn's own host cost
  (checks, output allocation, argument lists), meaningful on a CPU too;
- ``jit``: ``kernel[grid](*args)``, Triton's own launch of the same arguments, alone;
- ``bind``: the part of that launch that binds the arguments and finds the cache key, the
  Python cost of each argument (Triton's ``JITFunction.run`` internals, built for this GPU, or
  for a Hopper GPU where there is none: this column needs no GPU, and Triton's interpreter
  need not be on);
- ``key``: what eagle_fn's cached launch (``eagle_fn.kernels._launch``, which ``public``
  goes through on CUDA) computes in place of ``bind`` to find its compiled kernel again
  (``launch_key``), and the lookup;
- ``compiled``: the compiled kernel that launch returned, called through Triton's runner
  (no argument binding or specialization; the cached launch also skips the runner's launch
  metadata), where this Triton has it;
- ``addresses``: the same call with each tensor passed as its data's address, an int, which
  Triton's launcher takes as it is; given a tensor it asks the tensor (``data_ptr``) and the
  CUDA driver (``cuPointerGetAttribute``) on every call. ``compiled`` less this is what
  the cached launch would save by passing addresses, before the Python that gathering them
  costs (docs/kernels.md);
- ``empty``: one ``torch.empty`` on the device, of the shape of the launch's first tensor
  argument.

A second table counts each stage's fresh outputs (as many as its op body allocates) and times
allocating them one ``new_empty`` each, as the kernels do, against one a dtype split into them:
on CUDA an allocation goes through the caching allocator (3.7 µs for one ``torch.empty`` on the
H200's host, 2026-12-04), so this says what carving the outputs from one block would save.
The last times ``public`` again after one ``torch.profiler`` session over every stage, as the
benchmark runs up to 2026-12-05 opened one per case to count kernels (they count graph nodes
now, ``bench/gpu.py``): Kineto keeps CUPTI attached after a session, and if its callbacks slow
every later launch, those runs' host figures paid for them.

Diagnostic only: nothing here checks values.
On a CPU (``--device cpu``, ``TRITON_INTERPRET=1``) only ``python``, ``bind``, ``key`` and the
second table mean anything: ``public`` and ``jit`` run the interpreter, about a second a call on
the development CPU, so they take 2 calls there by default (2000 on CUDA); ``python``, ``bind``
and ``key`` launch nothing and always take 2000.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from functools import partial
from types import FunctionType, ModuleType
from typing import Any, cast

import torch

import eagle_fn
from cases import TREE_TARGET
from eagle_fn import kernels
from eagle_fn.kernels import _ops, greedy, organize, selection, verify
from eagle_fn.kernels._launch import launch_key
from gpu import host_loops_us, synchronize_on
from inputs import agreeing_target, draft_lists, step_inputs, verify_inputs

MODULES = (organize, verify, greedy, selection)  # each calls the launchers it holds
UNLAUNCHED_CALLS = 2000  # python, bind and key: nothing launches, no interpreter runs


def default_calls(device: torch.device) -> int:
    """Timed calls per launching figure: few where the interpreter runs each launch."""
    return 2000 if device.type == "cuda" else 2


def per_call_us(fn: Callable[[], Any], device: torch.device, calls: int) -> float:
    """One loop of ``calls`` calls after up to 20 warm-up calls, timed as the benchmark's host
    figures are (bench/gpu.py: synchronized at its ends, the garbage collector off)."""
    sync = synchronize_on(device)
    return host_loops_us(fn, (), sync=sync, calls=calls, repeat=1, warmup=min(calls, 20))[0]


def captured_launch(stage: Callable[[], Any]) -> tuple[Any, Any, tuple[Any, ...], dict[str, Any]]:
    """The one launch a stage makes (its kernel, programs, arguments and options), recorded."""
    seen: list[tuple[Any, Any, tuple[Any, ...], dict[str, Any]]] = []

    def recorder(launch: Any) -> Callable[..., None]:
        def record(programs: Any, *args: Any, **options: Any) -> None:
            seen.append((launch.kernel, programs, args, options))
            launch(programs, *args, **options)

        return record

    with launchers_replaced(recorder):
        stage()
    (launch,) = seen
    return launch


@contextlib.contextmanager
def launchers_replaced(replacement: Callable[[Any], Callable[..., None]]) -> Iterator[None]:
    """Every kernel launcher of ``MODULES`` replaced by ``replacement(launcher)`` inside."""
    found = launchers(MODULES)
    for module, name, launch in found:
        setattr(module, name, replacement(launch))
    try:
        yield
    finally:
        for module, name, launch in found:
            setattr(module, name, launch)


def unlaunched(launch: Any) -> Callable[..., None]:
    """A launcher that launches nothing."""
    return lambda programs, *args, **options: None


def uncached(launch: Any) -> Callable[..., None]:
    """A launcher that launches through Triton on every call, as eagle_fn did before its
    cached launch: the tensors' device made current, then ``kernel[grid]``."""
    kernel = launch.kernel

    def run(programs: Any, *args: Any, **options: Any) -> None:
        device = next(arg.device for arg in args if isinstance(arg, torch.Tensor))
        guard = _ops.on_device(device) if device.type == "cuda" else contextlib.nullcontext()
        with guard:
            kernel[(programs,)](*args, **options)

    return run


def launchers(modules: tuple[ModuleType, ...]) -> list[tuple[ModuleType, str, Any]]:
    """The kernel launchers (``kernels._ops.launcher``'s closures) the modules hold, by name.

    Plain functions only: a compiled ``triton.jit`` function has a ``kernel`` attribute too,
    and one replaced by a recorder breaks the kernels that call it (Triton then refuses the
    plain function it finds among their dependencies).
    """
    return [
        (module, name, value)
        for module in modules
        for name, value in vars(module).items()
        if isinstance(value, FunctionType) and hasattr(value, "kernel")
    ]


def compiled_runner(
    kernel: Any,
    programs: int,
    args: tuple[Any, ...],
    options: dict[str, Any],
    addresses: bool = False,
) -> Callable[[], Any]:
    """A call of the compiled kernel Triton's launch returned, with every bound argument;
    ``addresses``: each tensor as its data's address."""
    compiled = kernel[(programs,)](*args, **options)
    names = kernel.arg_names
    bound = [*args, *(options[name] for name in names[len(args) :])]
    if addresses:
        bound = [arg.data_ptr() if isinstance(arg, torch.Tensor) else arg for arg in bound]
    runner = compiled[(programs, 1, 1)]
    return lambda: runner(*bound)


def bind_runner(kernel: Any, args: tuple[Any, ...], options: dict[str, Any]) -> Callable[[], Any]:
    """What ``JITFunction.run`` does per call before it launches: bind, specialize, key."""
    from triton.runtime.jit import compute_cache_key

    binder = triton_binder(kernel)
    keys: dict[Any, Any] = {}
    kwargs = {**options, "debug": False, "instrumentation_mode": ""}  # as run() adds them

    def bind() -> None:
        _, specialization, found = binder(*args, **kwargs)
        compute_cache_key(keys, specialization, found)

    return bind


def triton_binder(kernel: Any) -> Callable[..., tuple[Any, list[Any], dict[str, Any]]]:
    """Triton's own binder of ``kernel``'s arguments (parameters, specialization, options), as
    ``JITFunction.run`` makes it for this GPU, or for a Hopper GPU where there is none."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction, create_function_from_signature

    jit = kernel if isinstance(kernel, JITFunction) else JITFunction(kernel.fn)  # interpreted
    on_gpu = torch.cuda.is_available()
    target = driver.active.get_current_target() if on_gpu else GPUTarget("cuda", 90, 32)
    binder = create_function_from_signature(jit.signature, jit.params, make_backend(target))
    return cast(Callable[..., tuple[Any, list[Any], dict[str, Any]]], binder)


def key_runner(args: tuple[Any, ...], options: dict[str, Any]) -> Callable[[], Any]:
    """The lookup eagle_fn's cached launch makes per call: its key, then a dict."""
    cache = {launch_key(args, options): None}
    return lambda: cache[launch_key(args, options)]


def stages(device: torch.device) -> dict[str, Callable[[], Any]]:
    case = TREE_TARGET
    cfg = case.config
    lists = draft_lists(cfg, case.bs, device=device)
    tree, bonus, seq_lens = verify_inputs(case, device)
    vt = eagle_fn.build_verify_tree(cfg, tree, bonus, seq_lens)
    target = agreeing_target(case, vt)
    first = step_inputs(cfg, 0, case.bs, device=device)
    later = step_inputs(cfg, 1, case.bs, device=device)
    # Partials, not lambdas: allocations() reads their arguments.
    return {
        "organize_tree": partial(kernels.organize_tree, cfg, *lists),
        "build_verify_tree QLEN": partial(kernels.build_verify_tree, cfg, tree, bonus, seq_lens),
        "verify_greedy": partial(kernels.verify_greedy, cfg, vt, target),
        "select_top_k step 0": partial(kernels.select_top_k, cfg, 0, *first[:2]),
        "select_top_k step 1": partial(kernels.select_top_k, cfg, 1, *later[:2], later.scores),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, help="timed calls per figure but bind's")
    default = "cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--device", default=default, help="cpu needs TRITON_INTERPRET=1")
    options = parser.parse_args()
    device = torch.device(options.device)
    calls = options.calls or default_calls(device)
    print(f"bench/launch_overhead.py on {device}, bs {TREE_TARGET.bs}, {TREE_TARGET.config},")
    print(f"{calls} timed calls a figure, {UNLAUNCHED_CALLS} for python, bind and key")
    print(
        "| stage | args | public µs | uncached µs | python µs | jit µs | bind µs | key µs "
        "| compiled µs | addresses µs | empty µs |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    found = stages(device)
    public: dict[str, float] = {}
    for name, stage in found.items():
        try:
            line, public[name] = row(name, stage, device, calls)
            print(line)
        except Exception as error:  # one stage's failure keeps the others' rows (one GPU run)
            print(f"| {name} | failed: {type(error).__name__}: {error} |")
    print()
    print(allocations(found, device))
    print()
    try:  # last: Kineto may leave CUPTI attached, and every launch after it paying for that
        print(after_profiling({name: found[name] for name in public}, public, device, calls))
    except Exception as error:  # the tables above stay printed (one GPU run)
        print(f"after profiling: failed: {type(error).__name__}: {error}")


def allocations(found: dict[str, Callable[[], Any]], device: torch.device) -> str:
    """Each stage's fresh outputs (those whose memory none of its arguments holds) allocated
    as the kernels do, one ``new_empty`` each, against one ``new_empty`` per dtype split into
    them: what carving a stage's outputs from one block would save of its ``python`` figure
    (on CUDA an allocation goes through the caching allocator). Nothing launches."""
    lines = ["| stage | fresh outputs | one each µs | one a dtype µs |", "|---|---|---|---|"]
    for name, stage in found.items():
        try:
            outputs = fresh_outputs(stage)
            fns = allocators(outputs) if outputs else ()
            times = [f"{per_call_us(fn, device, UNLAUNCHED_CALLS):.1f}" for fn in fns] or ["–"] * 2
            lines.append(f"| {name} | {len(outputs)} | {' | '.join(times)} |")
        except Exception as error:  # one stage's failure keeps the others' rows (one GPU run)
            lines.append(f"| {name} | failed: {type(error).__name__}: {error} |")
    return "\n".join(lines)


def fresh_outputs(stage: Callable[[], Any]) -> list[torch.Tensor]:
    """The output tensors of ``stage()`` on memory of their own, one per block of memory."""
    held = {storage(t) for t in tensors_in(getattr(stage, "args", ()))}
    fresh: dict[int, torch.Tensor] = {}
    for t in tensors_in(stage()):
        fresh.setdefault(storage(t), t)  # the first tensor seen on each block
    return [t for key, t in fresh.items() if key not in held]


def storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors in ``value``, inside tuples (NamedTuples) and lists too."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in tensors_in(item)]
    return []


def allocators(outputs: list[torch.Tensor]) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """Calls allocating tensors of ``outputs``' shapes and dtypes: one ``new_empty`` each, and
    one a dtype, split and viewed into the shapes."""
    like = outputs[0]
    shapes = [(t.shape, t.dtype) for t in outputs]
    by_dtype: dict[torch.dtype, list[torch.Size]] = {}
    for shape, dtype in shapes:
        by_dtype.setdefault(dtype, []).append(shape)

    def one_each() -> list[torch.Tensor]:
        return [like.new_empty(shape, dtype=dtype) for shape, dtype in shapes]

    def one_a_dtype() -> list[torch.Tensor]:
        made = []
        for dtype, group in by_dtype.items():
            sizes = [shape.numel() for shape in group]
            parts = like.new_empty(sum(sizes), dtype=dtype).split(sizes)
            made += [part.view(shape) for part, shape in zip(parts, group, strict=True)]
        return made

    return one_each, one_a_dtype


def after_profiling(
    found: dict[str, Callable[[], Any]], before: dict[str, float], device: torch.device, calls: int
) -> str:
    """The ``public`` figures again after one ``torch.profiler`` session over every stage, as
    the benchmark runs' kernel counts opened one per case until 2026-12-05: a profiler that
    leaves CUPTI's callbacks on slows every later launch, and with them those runs' host
    figures, which then exceed these tables'."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities):
        for stage in found.values():
            stage()
        torch.cuda.synchronize(device) if device.type == "cuda" else None
    lines = ["| stage | public µs | public µs after a torch.profiler session |", "|---|---|---|"]
    for name, stage in found.items():
        lines.append(f"| {name} | {before[name]:.1f} | {per_call_us(stage, device, calls):.1f} |")
    return "\n".join(lines)


def row(name: str, stage: Callable[[], Any], device: torch.device, calls: int) -> tuple[str, float]:
    """One stage's line of the table, and its ``public`` figure."""
    kernel, programs, args, options = captured_launch(stage)
    public = per_call_us(stage, device, calls)
    with launchers_replaced(uncached):
        through_triton = per_call_us(stage, device, calls)
    with launchers_replaced(unlaunched):
        python = per_call_us(stage, device, UNLAUNCHED_CALLS)
    jit = per_call_us(lambda: kernel[(programs,)](*args, **options), device, calls)
    bind = per_call_us(bind_runner(kernel, args, options), device, UNLAUNCHED_CALLS)
    key = per_call_us(key_runner(args, options), device, UNLAUNCHED_CALLS)
    compiled = [
        figure_or_na(partial(compiled_runner, kernel, programs, args, options, raw), device, calls)
        for raw in (False, True)
    ]
    shape = next(a.shape for a in args if isinstance(a, torch.Tensor))
    empty = per_call_us(lambda: torch.empty(shape, device=device), device, calls)
    count = len(args) + len(options)
    figures = f"{public:.1f} | {through_triton:.1f} | {python:.1f} | {jit:.1f} | {bind:.1f}"
    figures += f" | {key:.1f} | {' | '.join(compiled)}"
    figures += f" | {empty:.1f}"
    return f"| {name} | {count} | {figures} |", public


def figure_or_na(make: Callable[[], Callable[[], Any]], device: torch.device, calls: int) -> str:
    """The µs a call of ``make()`` takes, or why there is no such call here: an interpreter,
    or a Triton without its API."""
    try:
        return f"{per_call_us(make(), device, calls):.1f}"
    except Exception as error:
        return f"n/a ({type(error).__name__})"


if __name__ == "__main__":
    main()
