"""Compiles every Triton kernel for a Hopper GPU (sm_90) with Triton's real compiler; no GPU.

Run as a script: ``python tests/helpers/kernel_aot.py`` compiles the CI set, ``--all`` every variant;
``--registers`` prints ptxas's registers and spills for each instead of the checks below
(``--maxnreg 128``: with the sampling kernel's register cap at 128).
The script drops ``TRITON_INTERPRET``: the interpreter accepts Python the compiler rejects.

Each variant calls a public kernel's own launch code (its torch function's ``*_args`` check,
then the kernel core) on CPU tensors with the launch recorded instead of run
(:mod:`kernel_aot_variants`). The recorded launch is compiled as ``JITFunction.run`` compiles
it, with sm_90 in place of the current device: the same binder, so the same signature,
specialization (ints equal to 1, 16-divisible ints and pointers), constexprs and options
(``num_warps``, and FP fusion at Triton's default, on). One line per variant: its name, then
whether the PTX flushes subnormals (``.ftz``), uses approximate float division, reciprocals
or functions (``.approx``, ``div.full``), or lets a float product be fused into an add (an
``fma``, or an unrounded ``mul`` read by an unrounded ``add``/``sub``, which ptxas may fuse
with FP fusion on); each would make a result differ from torch's. The machine code is not
searched for FMAs: ptxas uses them for exact expansions (IEEE division) and ``HFMA2.MMA`` as
a move.
"""

import argparse
import os
import re
import sys

HOPPER = ("cuda", 90, 32)  # backend, compute capability, warp size
APPROX = re.compile(r"\.approx|div\.full")
FLOAT_OP = re.compile(  # a float fma/mul/add/sub, possibly predicated: op, modifiers, d, a...
    r"^\s*(?:@!?%\w+\s+)?(fma|mul|add|sub)((?:\.\w+)*?)\.b?f(?:16|32|64)(?:x2)?\s+([^,]+),([^;]*);",
    re.M,
)


def bind_for_hopper(kernel, args, kwargs):
    """``JITFunction.run``'s binding of a launch, for sm_90 (its internal
    ``create_function_from_signature``): the target, backend, bound arguments, their
    specialization (ints equal to 1, 16-divisible ints and pointers) and the options."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget(*HOPPER)
    backend = make_backend(target)
    bind = create_function_from_signature(kernel.signature, kernel.params, backend)
    return (target, backend, *bind(*args, **kwargs))


def compile_for_hopper(kernel, args, kwargs):
    """What ``kernel[grid](*args, **kwargs)`` compiles, for sm_90: ``JITFunction.run``'s steps,
    through :func:`bind_for_hopper` and its internal ``_pack_args`` (the same in Triton 3.6 and
    3.9; ``ASTSource``'s signature format is too)."""
    from triton.compiler import ASTSource, compile

    target, backend, bound, specialization, options = bind_for_hopper(kernel, args, kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(
        backend, kwargs, bound, specialization, options
    )
    source = ASTSource(kernel, signature, constexprs, attrs)
    return compile(source, target=target, options=options.__dict__)


def specialization(kernel, args, kwargs):
    """What decides whether a launch compiles anew, as text: the specialization and options
    :func:`bind_for_hopper` finds."""
    *_, specialized, options = bind_for_hopper(kernel, args, kwargs)
    return repr((specialized, sorted(options.items())))


def batch_keys():
    """One line a stage: how many compiles its launches take over ``BATCH_SIZES``."""
    import kernel_aot_variants as variants

    keys = {}
    for bs in variants.BATCH_SIZES:
        for stage, launcher in variants.batch_launchers(bs):
            for kernel, args, kwargs in variants.recorded_launches(launcher):
                keys.setdefault(stage, set()).add(specialization(kernel, args, kwargs))
    sizes = ", ".join(map(str, variants.BATCH_SIZES))
    return [f"{stage}: {len(found)} compile(s) over bs {sizes}" for stage, found in keys.items()]


def launch_keys():
    """One line a kernel, every kernel: over its CI variants' launches, each argument varied
    in turn (:func:`varied`), launches with equal ``CachedLaunch`` keys get equal
    specializations from Triton's binder, and how many of each there were; else one line
    that says what failed."""
    import kernel_aot_variants as variants

    from eagle_fn.kernels._launch import launch_key

    found = {}
    for _, launcher in variants.variants(everything=False):
        for kernel, args, kwargs in variants.recorded_launches(launcher):
            by_key = found.setdefault(kernel.fn.__name__, {})
            for changed in varied(args):
                special = specialization(kernel, changed, kwargs)
                if by_key.setdefault(launch_key(changed, kwargs), special) != special:
                    return [f"{kernel.fn.__name__}: one key, two specializations: {special}"]
    missed = [k.fn.__name__ for k in variants.entry_kernels() if k.fn.__name__ not in found]
    if missed:
        return [f"kernels no variant launches: {missed}"]
    return [
        f"{name}: {len(keys)} keys, {len(set(keys.values()))} specializations"
        for name, keys in sorted(found.items())
    ]


def varied(args):
    """``args``, then copies that differ in one argument: a tensor 8 bytes past a 16-byte
    boundary or reallocated, an int at each of Triton's class edges, a float or bool changed."""
    import torch

    ints = (1, 16, 17, -1, -16, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63)
    for i, arg in enumerate(args):
        if isinstance(arg, torch.Tensor):
            flat = arg.new_empty(arg.numel() + 16)
            offset = 8 // arg.element_size() or 1  # 8 bytes in (bool: 1 byte)
            changes = [flat[offset : offset + arg.numel()].view(arg.shape), arg.clone()]
        elif type(arg) is int:
            changes = list(ints)
        elif type(arg) in (float, bool):
            changes = [0.25, 1.0, 3.5] if type(arg) is float else [not arg]
        else:
            continue
        yield from ((*args[:i], change, *args[i + 1 :]) for change in changes)
    yield args


def op_kernels():
    """One line an op: the kernels torch finds behind it, whose source keys its caches."""
    from torch._library.triton import get_triton_kernels_for_op

    from eagle_fn.kernels import _ops

    names = sorted(op._schema.name for op in _ops._BODIES)
    found = {name: [k.fn.__name__ for k in get_triton_kernels_for_op(name)] for name in names}
    return [f"{name}: {', '.join(kernels)}" for name, kernels in found.items()]


def fusable(ptx):
    """Whether the PTX has a float FMA, or a product ptxas may fuse into an add: an unrounded
    ``mul`` whose result an unrounded ``add``/``sub`` reads (explicit ``.rn`` forbids it)."""
    products = set()
    for op, modifiers, result, sources in FLOAT_OP.findall(ptx):
        if op == "fma":
            return True
        if ".rn" in modifiers:
            continue
        if op == "mul":
            products.add(result.strip())
        elif products & {source.strip() for source in sources.split(",")}:
            return True
    return False


def report(name, compiled):
    """The variant's line: ``name: ftz=False approx=False fma=False`` when exact."""
    ptx = compiled.asm["ptx"]
    flags = {"ftz": ".ftz" in ptx, "approx": bool(APPROX.search(ptx)), "fma": fusable(ptx)}
    return f"{name}: " + " ".join(f"{key}={value}" for key, value in flags.items())


def registers(compiled):
    """``ptxas -v``'s resources for the PTX, for sm_90a: registers per thread, spill bytes."""
    import subprocess
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as ptx:
        ptx.write(compiled.asm["ptx"])
        ptx.flush()
        command = [get_ptxas(90).path, "-v", "--gpu-name", "sm_90a", ptx.name, "-o", os.devnull]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stderr
    used = re.search(r"Used (\d+) registers", out)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
    assert used, out
    assert spills, out
    return f"{used[1]} registers, spills {spills[1]} B stored {spills[2]} B loaded"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="every variant, not the CI set")
    parser.add_argument("-k", default="", help="only variants whose name contains this")
    parser.add_argument("--batch-keys", action="store_true", help="compiles per batch size")
    parser.add_argument("--op-kernels", action="store_true", help="the kernels torch finds")
    parser.add_argument("--launch-keys", action="store_true", help="launch keys against Triton")
    parser.add_argument("--registers", action="store_true", help="ptxas's registers, spills")
    parser.add_argument("--maxnreg", type=int, help="the sampling kernel's MAXNREG knob")
    options = parser.parse_args(argv)
    # Only here, never at import: pytest's --doctest-modules imports this file too, and the
    # kernel tests need the interpreter's kernels in their own process.
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton's default, said explicitly
    if options.maxnreg is not None:
        from eagle_fn.kernels import sampling

        sampling.MAXNREG = options.maxnreg
    listings = {"batch_keys": batch_keys, "op_kernels": op_kernels, "launch_keys": launch_keys}
    for option, listing in listings.items():
        if getattr(options, option):
            print("\n".join(listing()))
            return
    import kernel_aot_variants as variants

    launched = set()
    for name, launcher in variants.variants(everything=options.all):
        if options.k not in name:
            continue
        ((kernel, args, kwargs),) = variants.recorded_launches(launcher)  # one launch per call
        launched.add(kernel)
        compiled = compile_for_hopper(kernel, args, kwargs)
        if options.registers:
            print(f"{name} ({kwargs.get('num_warps', 4)} warps): {registers(compiled)}", flush=True)
        else:
            print(report(name, compiled), flush=True)
    missed = [k.fn.__name__ for k in variants.entry_kernels() if k not in launched]
    if missed and not options.k:
        sys.exit(f"kernels no variant launches: {missed}")


if __name__ == "__main__":
    main()
