"""Setup shared by the kernel tests: the interpreter switch, the device table, value pools.

Import this before anything imports ``eagle_fn.kernels``: without a GPU it turns on Triton's
interpreter (``TRITON_INTERPRET=1``), which Triton reads when the kernels are decorated. With
a GPU the kernels compile for real, and CPU tensors are skipped (they need the interpreter).
"""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("triton", reason="the kernel tests need triton (pip install triton)")

from triton.runtime.interpreter import InterpretedFunction

from eagle_fn.kernels import organize as _kernel_module
from helpers.kernel_probe import interpreter_problem

INTERPRETED = isinstance(_kernel_module._organize_tree_kernel, InterpretedFunction)
# A kernel test module's pytestmark: where this Triton's interpreter cannot run the kernels at
# all, their tests are skipped with the reason instead of failing on the interpreter.
SKIP_WHEN_UNRUNNABLE = pytest.mark.skipif(
    interpreter_problem() is not None, reason=str(interpreter_problem())
)
SRC = str(Path(__file__).resolve().parents[2] / "src")

KERNEL_DEVICES = [
    pytest.param(
        "cpu",
        marks=pytest.mark.skipif(
            not INTERPRETED, reason="CPU tensors need TRITON_INTERPRET=1 before the import"
        ),
    ),
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    ),
]

# Where the property-based kernel tests run: the GPU when there is one (CPU tensors need the
# interpreter, which is off there), else the interpreter on CPU tensors. Inputs are drawn on the
# CPU from seeded generators, then moved here.
KERNEL_DEVICE = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

SCORE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_BITS = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}


def resolved(device):
    """The device as tensors report it (``cuda`` -> ``cuda:0``)."""
    return torch.empty(0, device=device).device


def from_bits(bits, dtype):
    """Floats of ``dtype`` with the given integer bit patterns (a list of ints)."""
    return torch.tensor(bits, dtype=_BITS[dtype]).view(dtype)


def neighbours(value, ulps, dtype):
    """``value`` moved by ``ulps`` units in the last place of ``dtype`` (value >= 0)."""
    bits = torch.tensor([value], dtype=dtype).view(_BITS[dtype]).item()
    return from_bits([bits + ulps], dtype).item()


def hard_scores(draw_choice, width, dtype):
    """A row of ``width`` scores that stresses the ranking, as Python floats exact in dtype.

    ``draw_choice(n)`` picks an int in ``[0, n)``. Entries, repeats likely: zeros of both
    signs, the two smallest subnormals, one-ulp neighbours of 0.25/0.5/1, negative values,
    -inf, +inf and NaN.
    """
    low = [
        0.0,
        -0.0,
        neighbours(0.0, 1, dtype),
        neighbours(0.0, 2, dtype),
        -neighbours(0.0, 1, dtype),
        -0.5,
        -1.0,
        float("-inf"),
        float("nan"),
    ]
    high = [
        0.25,
        neighbours(0.25, 1, dtype),
        0.5,
        neighbours(0.5, -1, dtype),
        neighbours(0.5, 1, dtype),
        1.0,
        neighbours(1.0, -1, dtype),
        float("inf"),
    ]
    # Half the rows draw from the bottom of the order only, so that the cut between selected
    # and dropped falls among zeros, subnormals, negatives, NaN and -inf too.
    pool = low if draw_choice(2) else low + high
    return [pool[draw_choice(len(pool))] for _ in range(width)]


class NoLaunch:
    """Stands in for a kernel: launching it (``kernel[grid]``) fails the test."""

    def __getitem__(self, grid):
        raise AssertionError(f"a kernel was launched on grid {grid}")


# What a kernel called on CPU tensors says without the interpreter, on any machine.
NO_INTERPRETER = (
    "the Triton kernels cannot run here: Triton kernels run on CPU tensors only in "
    "interpreter mode; set TRITON_INTERPRET=1 before triton is first imported (before "
    "`import eagle_fn`)"
)


def without_interpreter(script):
    """Runs ``script`` in a Python process without TRITON_INTERPRET, so that the kernels are
    real Triton JIT functions, on this process's import path; returns its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([SRC, *sys.path])
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def refusals_without_interpreter(setup, *calls):
    """What each call expression raises (a ``ValueError``'s message, else "no error") after
    ``setup``, in a process without the interpreter (:func:`without_interpreter`)."""
    lines = [setup, f"calls = [{', '.join(f'lambda: {call}' for call in calls)}]"]
    lines += ["for call in calls:", "    try:", "        call()", "        print('no error')"]
    lines += ["    except ValueError as error:", "        print(error)"]
    return without_interpreter("\n".join(lines)).splitlines()


def checked_launch(module, check):
    """``module.launch`` calling ``check(args, options)`` first: a test that forces a path or a
    launch shape through module constants sees each launch take it."""
    real = module.launch

    def launch(programs, *args, **options):
        check(args, options)
        real(programs, *args, **options)

    return launch


# Elements after each guarded output: more than any row a kernel stores at once (64 nodes).
GUARD = 128


@contextlib.contextmanager
def guarded_outputs(module, allocator):
    """Kernel outputs that show a store past their end: ``module.allocator`` (a function that
    returns a tensor or a tuple of them) patched so that each output is the front of a buffer
    whose last ``GUARD`` elements hold a pattern; on exit, each pattern must be intact. The
    interpreter stores through raw pointers, so a stray store changes memory silently; on a
    GPU it corrupts whatever lies there."""
    allocate = getattr(module, allocator)
    guards = []

    def padded(out):
        buffer = torch.empty(out.numel() + GUARD, dtype=out.dtype, device=out.device)
        buffer[: out.numel()] = out.flatten()  # a FULL mask starts as ones
        # 0/1 alternating for bool, else 101, 102, ...: a stray row or word changes some.
        pattern = torch.arange(GUARD, device=out.device)
        pattern = pattern % 2 == 0 if out.dtype == torch.bool else pattern + 101
        buffer[out.numel() :] = pattern
        guards.append((buffer[out.numel() :], pattern.to(out.dtype)))
        return buffer[: out.numel()].view(out.shape)

    def guarded(*args):
        out = allocate(*args)
        return tuple(map(padded, out)) if isinstance(out, tuple) else padded(out)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, allocator, guarded)
        yield
    assert guards, f"{allocator} was not called"
    for i, (guard, pattern) in enumerate(guards):
        assert torch.equal(guard, pattern), f"a store past output {i} of {allocator}"
