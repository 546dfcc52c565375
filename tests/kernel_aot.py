"""Compiles every kernel for a Hopper GPU with Triton's real compiler; no GPU needed.

Run as a script (``python tests/kernel_aot.py``), which drops ``TRITON_INTERPRET``: the
interpreter accepts Python the compiler rejects. Prints one line per kernel variant: its name
and whether its PTX flushes subnormals (``.ftz``), which would break exact compares and products.
"""

import os
import sys

TYPES = {"float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32", "float64": "*fp64"}


def build(kernel, signature, constants):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {**signature, **dict.fromkeys(constants, "constexpr")}
    return triton.compile(ASTSource(kernel, signature, constants), target=GPUTarget("cuda", 90, 32))


def organize_variant(k, steps, n, dtype):
    from eagle_fn.kernels import organize

    signature, constants = {}, {}
    for prefix, kind, count in (
        ("s", TYPES[dtype], steps),
        ("t", "*i64", steps),
        ("p", "*i64", steps - 1),
    ):
        for j in range(16):
            if j < min(count, 16):
                signature[f"{prefix}{j}"] = kind
            else:
                constants[f"{prefix}{j}"] = None
    signature.update(parent_out="*i64", index_out="*i64", token_out="*i64")
    width = k + (steps - 1) * k * k
    constants.update(
        K=k,
        SLOTS=min(steps, 16),
        PARENT_SLOTS=min(steps - 1, 16),
        W=width,
        N1=n - 1,
        PW=k * (steps - 1) + 1 if steps > 1 else 0,
        WIDE=dtype == "float64",
        BLOCK=max(16, min(64, 1 << (width - 1).bit_length())),
    )
    return build(organize._organize_tree_kernel, signature, constants)


def next_step_variant(k, dtype):
    from eagle_fn.kernels import selection

    ptr = TYPES[dtype]
    signature = {
        "p_ptr": ptr,
        "index_ptr": "*i64",
        "scores_ptr": ptr,
        "ids_out": "*i64",
        "hidden_out": "*i64",
        "scores_out": ptr,
        "expand_out": ptr,
        "parents_out": "*i64",
        "offset": "i32",
    }
    constants = {"K": k, "WIDE": dtype == "float64", "BLOCK": max(16, min(64, k * k))}
    return build(selection._next_step_kernel, signature, constants)


def main():
    # Only here, never at import: pytest's --doctest-modules imports this file too, and the
    # kernel tests need the interpreter's kernels in their own process.
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from eagle_fn.kernels import selection

    variants = {
        "organize k4 S4 float32": lambda: organize_variant(4, 4, 16, "float32"),
        "organize k2 S1 bfloat16": lambda: organize_variant(2, 1, 2, "bfloat16"),
        "organize k8 S8 float16": lambda: organize_variant(8, 8, 64, "float16"),
        "organize k2 S18 float64": lambda: organize_variant(2, 18, 20, "float64"),
        "first step k4": lambda: build(
            selection._first_step_kernel,
            {"hidden_out": "*i64", "parents_out": "*i64"},
            {"K": 4, "BLOCK": 8},
        ),
        **{f"next step k4 {d}": (lambda d=d: next_step_variant(4, d)) for d in TYPES},
        "next step k16 float32": lambda: next_step_variant(16, "float32"),
    }
    for name, compile_variant in variants.items():
        ptx = compile_variant().asm["ptx"]
        print(f"{name}: ftz={'.ftz' in ptx}")


if __name__ == "__main__":
    sys.exit(main())
