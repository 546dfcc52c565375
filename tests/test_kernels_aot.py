"""Every kernel compiles for a Hopper GPU with Triton's real compiler, into exact PTX.

No interpreter and no GPU: ``kernel_aot.py`` compiles in its own process, so this module runs
where the interpreter cannot run the kernels (Triton 3.6) as well. Skipped on a GPU machine,
whose kernel tests compile for real, to keep its short sessions for them.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import eagle_fn
from helpers import kernel_aot, kernel_aot_variants

EXACT = "ftz=False approx=False fma=False"


NOT_ON_A_GPU = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the kernel tests compile for this GPU; CI checks the PTX"
)


def run_kernel_aot(*options):
    """``kernel_aot.py`` in a clean process (no interpreter); its output lines."""
    pytest.importorskip("triton.backends.nvidia", reason="needs Triton's NVIDIA backend")
    package_root = str(Path(eagle_fn.__file__).parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, str(kernel_aot.__file__), *options]
    out = subprocess.run(command, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.splitlines()


@NOT_ON_A_GPU
def test_every_kernel_compiles_for_a_hopper_gpu():
    # The interpreter runs Python that Triton's compiler may reject (an early return in a
    # constexpr branch, say): compile each kernel for sm_90 for real, in a clean process.
    # One line per CI variant, in order, each without flushes, approximations or fusions.
    names = [name for name, _ in kernel_aot_variants.variants(everything=False)]
    assert run_kernel_aot() == [f"{name}: {EXACT}" for name in names]


@NOT_ON_A_GPU
def test_launch_keys_are_at_least_as_fine_as_tritons_specializations():
    # Eager CUDA launches reuse a compiled kernel found by their own key (kernels/_launch.py):
    # two launches with one key must get one specialization from Triton's binder, or the
    # reused kernel would be the wrong one. Each CI launch, each argument varied in turn.
    lines = run_kernel_aot("--launch-keys")
    assert len(lines) == 6, lines  # the two select kernels, organize, build, greedy, sampling
    for line in lines:
        found = re.fullmatch(r"\w+: (\d+) keys, (\d+) specializations", line)
        assert found, line
        keys, specializations = map(int, found.groups())
        assert keys >= specializations > 1, line  # not vacuous: variants Triton tells apart


@NOT_ON_A_GPU
def test_each_kernel_compiles_once_whatever_the_batch_size():
    # A serving loop's batch size changes every step; a kernel specialized on a batch-dependent
    # int (equal to 1, divisible by 16) would compile again, seconds each, mid-serving.
    sizes = ", ".join(map(str, kernel_aot_variants.BATCH_SIZES))
    stages = [stage for stage, _ in kernel_aot_variants.batch_launchers(1)]
    want = [f"{stage}: 1 compile(s) over bs {sizes}" for stage in stages]
    assert run_kernel_aot("--batch-keys") == want


@pytest.mark.parametrize(
    ("ptx", "fusable"),
    [
        ("mul.f32 %f3, %f1, %f2;\nadd.f32 %f4, %f3, %f1;", True),  # ptxas may fuse these
        ("mul.f64 %fd3, %fd1, %fd2;\nsub.f64 %fd4, %fd1, %fd3;", True),
        ("fma.rn.f32 %f4, %f1, %f2, %f3;", True),
        ("mul.rn.f32 %f3, %f1, %f2;\nadd.f32 %f4, %f3, %f1;", False),  # rounded: kept apart
        ("mul.f32 %f3, %f1, %f2;\nadd.f32 %f4, %f2, %f1;", False),  # the sum skips the product
        ("mul.lo.s32 %r3, %r1, %r2;\nadd.s32 %r4, %r3, %r1;", False),  # integers are exact
    ],
)
def test_the_fusion_check_finds_products_fused_into_adds(ptx, fusable):
    assert kernel_aot.fusable(ptx) is fusable


@NOT_ON_A_GPU
def test_torch_finds_each_ops_kernel_for_its_cache_keys():
    # torch.compile's on-disk caches hash the source of the kernels torch finds behind a
    # triton_op (docs/kernels.md); an op whose kernel it cannot find keeps stale entries.
    assert run_kernel_aot("--op-kernels") == [
        "eagle_fn::organize_tree: _organize_tree_kernel",
        "eagle_fn::select_top_k_first: _first_step_kernel",
        "eagle_fn::select_top_k_next: _next_step_kernel",
        "eagle_fn::verify_build: verify_build_kernel",
        "eagle_fn::verify_greedy: verify_greedy_kernel",
        "eagle_fn::verify_sampling: verify_sampling_kernel",
    ]


@NOT_ON_A_GPU
def test_registers_reads_ptxas_resources_for_each_variant():
    # One variant's line: registers per thread and spill bytes, as ptxas -v reports them.
    lines = run_kernel_aot("--registers", "-k", "organize k4 S4 N16 bs32 float32")
    assert len(lines) == 1
    assert re.fullmatch(
        r"organize k4 S4 N16 bs32 float32 \(4 warps\): \d+ registers, "
        r"spills \d+ B stored \d+ B loaded",
        lines[0],
    )


@NOT_ON_A_GPU
def test_the_register_cap_reaches_ptxas():
    # The interpreter ignores launch options, so test_a_register_cap_changes_no_value passes
    # whether or not MAXNREG reaches the launch; ptxas's count shows it does (uncapped, this
    # variant takes 220 registers with Triton 3.6.0 and 157 with 3.9.0).
    name = "verify sampling k4 S4 N16 bs32 V32000 float32"
    (line,) = run_kernel_aot("--registers", "--maxnreg", "96", "-k", name)
    used = re.search(r": (\d+) registers", line)
    assert used, line
    assert int(used[1]) <= 96
