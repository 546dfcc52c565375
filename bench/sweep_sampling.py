"""The fused sampling kernel's launch shapes on a GPU: replay time, equality, repeatability.

Run from the repository root on a CUDA machine (``bench/gpu_check.sh`` does)::

    PYTHONPATH=src:bench python bench/sweep_sampling.py

For each vocabulary of ``bench_sampling.py`` and each launch shape (split or single program per
request, blocks per program, or per load of a single program, programs, block width, warps,
register cap, the walk's prefetch, pipelined chunk loads) it prints the CUDA-graph replay µs,
back to back (the final rows stay in L2 where they fit: 16 MB at bs 32 and V 128256) and with
L2 flushed before each (``bench/gpu.py``; the rows come from DRAM, as in an engine and as issue
11's bound has them), whether the tokens equal the torch function's on the bench's inputs
(smooth rows: a False can be a rounding tie at a block boundary, not a bug) and whether 20
repeated calls agree with the first (a race between a row's programs would break that). Then,
per vocabulary, the fastest shape that was equal and stable, and the fastest in one launch, by
the flushed replay; the fill and an empty call (:func:`baselines`); the L2's size
(:func:`l2_size`); the default shape at bs 64, 128 and 256, and at bs 256 those two fastest
shapes too (:func:`at_scale`), where the final rows outweigh the fixed latency that dominates
bs 32; last, each kernel's own device time in the default shape (:func:`kernel_times`), the
replay less the launches.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from functools import partial
from typing import Any

import torch

import eagle_fn
from bench_sampling import sampling_inputs
from cases import TREE_TARGET, VOCABS
from eagle_fn.kernels import sampling as kernel
from gpu import device_us_per_call, flush_bytes, flushed_replay_us, graph_replay_us
from targets import dram_rate, read_us

# SPLIT, BLOCKS_PER_PROGRAM, PROGRAMS, BLOCK_V, NUM_WARPS, MAXNREG, PREFETCH_N, STAGES
SHAPES = [
    (False, 1, 1, 4096, 8, None, 0, 1),
    (False, 4, 1, 4096, 8, None, 0, 1),  # one launch, several blocks' loads in flight
    (False, 4, 1, 4096, 16, None, 0, 1),
    (False, 8, 1, 4096, 16, None, 0, 1),
    (True, 2, 512, 4096, 8, None, 0, 1),
    (True, 1, 1024, 4096, 8, None, 0, 1),
    (True, 4, 256, 4096, 8, None, 0, 1),
    (True, 2, 512, 4096, 4, None, 0, 1),
    (True, 2, 1024, 2048, 8, None, 0, 1),
    # 128 registers a thread: two 8-warp programs an SM instead of one. Triton 3.6 gives the
    # default shape 220 at V 32000 (159 at V 128256); at 128 the 8-warp split shapes spill
    # nothing, the other two about 0.5 KB a thread (docs/sampling.md).
    (False, 4, 1, 4096, 8, 128, 0, 1),
    (True, 2, 512, 4096, 8, 128, 0, 1),
    (True, 1, 1024, 4096, 8, 128, 0, 1),
    (True, 2, 512, 4096, 4, 128, 0, 1),
    # The walk's rows gathered before it (N 16: 256 loads at once), not one gather a level.
    (False, 4, 1, 4096, 8, 128, 64, 1),
    (True, 2, 512, 4096, 8, 128, 64, 1),
    (True, 2, 512, 4096, 4, 128, 64, 1),
    # One wave: at 128 registers an SM holds two 8-warp programs (264 on the H200's 132 SMs),
    # so 512 of them run in two waves, each paying a walk; 256 run in one (no spills, Triton
    # 3.6, sm_90; 4 blocks a program would spill 464 B).
    (True, 2, 256, 4096, 8, 128, 0, 1),
    (True, 2, 256, 4096, 8, 128, 64, 1),
    (True, 2, 256, 4096, 8, 128, 64, 2),
    # Chunk loads pipelined through shared memory: one program a request keeps 2 or 3 chunks
    # in flight (one launch, no counters); or 4 programs a request, 4 chunks each.
    (False, 2, 1, 4096, 8, 128, 64, 3),
    (False, 2, 1, 4096, 8, 128, 64, 4),
    (False, 1, 1, 4096, 8, 128, 64, 4),
    (False, 2, 1, 4096, 4, 128, 64, 3),
    (False, 2, 1, 4096, 16, 128, 64, 4),  # 96 KB in flight, no spills (Triton 3.6, sm_90)
    (False, 4, 1, 4096, 16, 128, 64, 3),  # 128 KB
    (True, 2, 128, 4096, 8, 128, 64, 3),
    # 32 warps: a request's one SM sums each chunk 8 or 16 entries a thread instead of 16 or
    # 32, and has more warps to wait on shared memory. 64 registers is all a 1024-thread
    # program has: no spills, 96 KB of shared memory (Triton 3.6, sm_90); 8 blocks at once
    # without the pipeline would spill 320 B.
    (False, 2, 1, 4096, 32, 64, 64, 4),
    (False, 1, 1, 8192, 32, 64, 64, 4),
]
KNOBS = (
    "SPLIT",
    "BLOCKS_PER_PROGRAM",
    "PROGRAMS",
    "BLOCK_V",
    "NUM_WARPS",
    "MAXNREG",
    "PREFETCH_N",
    "STAGES",
)


def set_shape(shape: tuple[object, ...]) -> None:
    """Sets the kernel module's launch knobs to ``shape``, in ``KNOBS`` order."""
    for name, value in zip(KNOBS, shape, strict=True):
        setattr(kernel, name, value)


REPEATS = 20
# A shape's replay µs: back to back, and with L2 flushed before each.
Times = tuple[float, float]
# Per vocabulary and label ("fastest", ONE): the quickest sound shape's times and the shape.
Best = dict[tuple[int, str], tuple[Times, tuple[object, ...]]]
# Batch sizes at_scale times, beside the table's 32. No compile of their own: the kernel does
# not specialize on its batch-dependent ints, so the table's variants serve them.
SCALES = (64, 128, 256)
ONE = "one launch"
NONE_SOUND = "no shape was equal and stable"


def main() -> None:
    device = torch.device("cuda")
    default = tuple(getattr(kernel, name) for name in KNOBS)
    columns = ["V", "split", "blocks/program", "programs", "BLOCK_V", "warps", "maxnreg"]
    columns += ["prefetch N", "stages"]
    columns += ["replay µs", "flushed µs", "equal", "stable"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    sound: list[tuple[int, tuple[object, ...], Times]] = []  # equal and stable rows
    for vocab in VOCABS:
        args = (TREE_TARGET.config, *sampling_inputs(TREE_TARGET, vocab, device))
        want = eagle_fn.verify_sampling(*args)
        for shape in SHAPES:
            cells = " | ".join(str(x) for x in shape)
            try:
                times, equal, stable = measure(shape, args, want)
            except Exception as error:  # one shape's failure keeps the others' rows (one GPU run)
                print(f"| {vocab} | {cells} | failed: {type(error).__name__}: {error} |")
                continue
            us = " | ".join(f"{t:.2f}" for t in times)
            print(f"| {vocab} | {cells} | {us} | {equal} | {stable} |", flush=True)
            if equal and stable:
                sound.append((vocab, shape, times))
    set_shape(default)
    print()
    best = fastest(sound)
    print("\n".join(describe(*key, *found) for key, found in best.items()) or NONE_SOUND)
    # kernel_times last: a profiler session may slow the launches after it.
    for extra in (baselines, l2_size, partial(at_scale, best=best), kernel_times):
        try:
            found = extra(device)  # a line, or lines printed as they come (a limit may cut)
            for line in [found] if isinstance(found, str) else found:
                print(line, flush=True)
        except Exception as error:  # one line's failure keeps the others (one GPU run)
            print(failure(getattr(extra, "func", extra).__name__, error))


def fastest(sound: list[tuple[int, tuple[object, ...], Times]]) -> Best:
    """Per vocabulary, the fastest shape whose tokens were equal and stable (``"fastest"``),
    and the fastest of those in one launch (``ONE``, ``SPLIT`` off), with its times: what the
    knobs' defaults are chosen from. Fastest with L2 flushed first, as an engine reads the
    rows; the first of equal times wins."""
    best: Best = {}
    for vocab in dict.fromkeys(v for v, _, _ in sound):
        rows = [(times, shape) for v, shape, times in sound if v == vocab]
        for label, found in (("fastest", rows), (ONE, [r for r in rows if not r[1][0]])):
            if found:
                best[vocab, label] = min(found, key=lambda row: row[0][1])
    return best


def describe(vocab: int, label: str, times: Times, shape: tuple[object, ...]) -> str:
    """One line of :func:`fastest`'s findings."""
    return f"V {vocab}, {label}: {replays(times)} at {knobs(shape)}"


def replays(times: Times) -> str:
    """Both replay times, the flushed one first."""
    return f"{times[1]:.2f} µs with L2 flushed first ({times[0]:.2f} µs without)"


def knobs(shape: tuple[object, ...]) -> str:
    """``shape`` as the knobs' assignments."""
    return ", ".join(f"{k}={v}" for k, v in zip(KNOBS, shape, strict=True))


def baselines(device: torch.device) -> str:
    """What a split launch spends beside its kernel, as replays of their own: the zero fill
    of its arrival counters (bs int32), and an empty captured call (each way's floor). One
    launch instead of two would save about their difference."""
    bs = TREE_TARGET.bs
    fill = timed(lambda: torch.zeros(bs, dtype=torch.int32, device=device), ())
    floor = timed(lambda: None, ())
    return (
        f"the arrival counters' zero fill alone: {replays(fill)}; an empty call: {replays(floor)}"
    )


def l2_size(device: torch.device) -> str:
    """The GPU's L2 and the write that evicts it before each flushed replay: where bs x V
    float32 rows fit in it, a plain replay reads them from L2."""
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    mib = 1 << 20
    return f"L2: {l2 / mib:.1f} MiB, overwritten with {flush_bytes(l2) / mib:.0f} MiB"


def timed(fn: Any, args: tuple[Any, ...]) -> Times:
    """``fn(*args)``'s replay µs, back to back and with L2 flushed before each."""
    return graph_replay_us(fn, args), flushed_replay_us(fn, args)


def at_scale(device: torch.device, best: Best | None = None) -> Iterator[str]:
    """Issue 11's bound as the batch grows: at each of ``SCALES`` and each vocabulary, the
    default shape's replays, equality and stability, and the rate at which it reads the final
    rows with L2 flushed first (``bs x V`` float32; at bs 256 and V 128256, 131 MB of 2.1 GB of
    target rows), against twice that read at the GPU's DRAM rate (:func:`gpu_rate`); at the
    largest batch, also the table's picks for that vocabulary (``best``, from :func:`fastest`)
    where they are not the default: the shape the defaults would change to, and the one-launch
    one. A case that fails (out of memory, say) gets its error and the others their lines."""
    default, rate = tuple(getattr(kernel, name) for name in KNOBS), gpu_rate(device)
    try:
        for vocab in VOCABS:
            for bs in SCALES:
                shapes = {"the default shape": default}
                for (v, label), (_, shape) in (best or {}).items():
                    if bs == max(SCALES) and v == vocab and shape not in shapes.values():
                        shapes[f"{label} ({knobs(shape)})"] = shape
                yield from scale_lines(TREE_TARGET.at_bs(bs), vocab, shapes, device, rate)
    finally:
        set_shape(default)


def gpu_rate(device: torch.device) -> float | None:
    """The DRAM read rate of ``device``'s GPU in bench/targets.py (None: not known, or no GPU)."""
    return dram_rate(torch.cuda.get_device_name(device)) if device.type == "cuda" else None


def scale_lines(
    case: Any,
    vocab: int,
    shapes: dict[str, tuple[object, ...]],
    device: torch.device,
    rate: float | None,
) -> Iterator[str]:
    """:func:`at_scale`'s lines for one batch and vocabulary, one a shape, each against twice
    reading the final rows at ``rate`` bytes/s where it is known."""
    where = f"bs {case.bs}, V {vocab}"
    try:
        args = (case.config, *sampling_inputs(case, vocab, device))
        want = eagle_fn.verify_sampling(*args)
    except Exception as error:
        yield failure(where, error)
        return
    rows = case.bs * vocab * 4  # bytes
    for label, shape in shapes.items():
        try:
            times, equal, stable = measure(shape, args, want)
        except Exception as error:
            yield failure(f"{where}, {label}", error)
            continue
        us = times[1]  # from DRAM, as the bound reads them
        read = f"the final rows read at {rows / us / 1e6:.2f} TB/s"
        if rate is None:
            read += "; no DRAM rate known for this GPU, no bound"
        else:
            bound = read_us(vocab, rate, case.bs)
            verdict = "within" if us <= bound else "over"
            read += f"; twice their read at {rate / 1e12:.1f} TB/s: {bound:.1f} µs, {verdict}"
        yield f"{where}, {label}: {replays(times)} (equal: {equal}, stable: {stable}), {read}"


def failure(where: str, error: Exception) -> str:
    """The line of a measurement that raised: the others' still come (one GPU run)."""
    return f"{where}: failed: {type(error).__name__}: {error}"


def kernel_times(device: torch.device) -> str:
    """The default shape's kernels at bs 32 and the largest vocabulary, each one's device µs
    a call (``torch.profiler``, eager calls), and their sum: what of its replay is the
    kernels' own work rather than launches and the gaps between them."""
    vocab = max(VOCABS)
    args = (TREE_TARGET.config, *sampling_inputs(TREE_TARGET, vocab, device))
    found = device_us_per_call(kernel.verify_sampling, args)
    cells = "; ".join(f"{name[:60]} {us:.2f}" for name, us in found.items())
    return (
        f"V {vocab}, the default shape, device µs a call: {cells}; in all {sum(found.values()):.2f}"
    )


def measure(
    shape: tuple[object, ...], args: tuple[Any, ...], want: Any
) -> tuple[Times, bool, bool]:
    """One shape's replay times, whether it equals ``want`` and whether it repeats itself."""
    set_shape(shape)
    got = kernel.verify_sampling(*args)
    equal = all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    stable = all(
        torch.equal(a, b)
        for _ in range(REPEATS)
        for a, b in zip(kernel.verify_sampling(*args), got, strict=True)
    )
    return timed(kernel.verify_sampling, args), equal, stable


if __name__ == "__main__":
    # No options: --help says what the sweep does instead of starting it.
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    main()
