"""The kernel tests' own setup: on a machine without a GPU they really run, in the interpreter.

No skip mark here: the kernel modules skip where this Triton's interpreter cannot run the
kernels (helpers/kernel_probe.py), and these guards must run exactly then.
"""

from helpers import kernel_support  # noqa: I001  (first: it turns on the interpreter before the kernels load)
import os

import pytest
import torch
from triton.runtime.errors import InterpreterError

from eagle_fn import _backend
from eagle_fn.kernels import greedy as kgreedy
from eagle_fn.kernels import verify as kverify
from eagle_fn.kernels._ops import interpreted
from helpers.kernel_probe import NUMPY_INT_REFUSAL, is_numpy_int_refusal


def test_the_interpreter_is_on_without_a_gpu():
    # On a CPU-only machine every kernel test must really run.
    assert kernel_support.INTERPRETED or torch.cuda.is_available()


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the kernels run for real")
def test_interpreter_takes_effect_without_cuda():
    assert os.environ["TRITON_INTERPRET"] == "1"
    assert interpreted(kverify.verify_build_kernel)
    assert interpreted(kgreedy.verify_greedy_kernel)


def test_device_checks_go_by_how_the_kernels_were_decorated(monkeypatch):
    # Triton decided when eagle_fn.kernels was imported; the variable changed later is moot.
    decided = interpreted(kgreedy.verify_greedy_kernel)
    monkeypatch.setenv("TRITON_INTERPRET", "0" if decided else "1")
    assert _backend.interpreting() is decided


@pytest.mark.parametrize("late", ["set", "unset"])
def test_an_interpreter_switch_after_triton_loaded_is_refused_at_the_import(late):
    # Triton decorates its own jit helpers (tl.sum, ...) once, as triton.language is first
    # imported, perhaps by torch._dynamo long before. Kernels decorated the other way
    # imported silently and failed at their first launch calling a helper.
    switch = {
        "set": "import triton.language\nos.environ['TRITON_INTERPRET'] = '1'\n",
        "unset": "os.environ['TRITON_INTERPRET'] = '1'\nimport triton.language\n"
        "del os.environ['TRITON_INTERPRET']\n",
    }[late]
    script = (
        "import os\n"
        + switch
        + ("try:\n    import eagle_fn.kernels\nexcept ImportError as error:\n    print(error)\n")
    )
    refusal = kernel_support.without_interpreter(script)
    assert "TRITON_INTERPRET" in refusal
    assert "before triton is first imported" in refusal


def interpreter_error(cause):
    """An error as Triton 3.6's interpreter raises it: wrapped twice, ``raise ... from``."""
    inner = InterpreterError(repr(cause))
    inner.__cause__ = cause
    outer = InterpreterError(repr(inner))
    outer.__cause__ = inner
    return outer


@pytest.mark.parametrize(
    ("cause", "known"),
    [
        (TypeError(NUMPY_INT_REFUSAL), True),
        (TypeError("unsupported operand type(s) for +: 'int' and 'str'"), False),
        (NameError("name 'x' is not defined"), False),
        (ValueError(NUMPY_INT_REFUSAL), False),
    ],
)
def test_only_the_numpy_limit_may_skip_the_kernel_tests(cause, known):
    # Anything else is a kernel failure, which must fail the tests rather than skip them.
    assert is_numpy_int_refusal(interpreter_error(cause)) is known


def test_numpy_refusal_message_is_numpys():
    # The probe matches NumPy's text exactly, so it must be the text NumPy >= 2.4 raises.
    np = pytest.importorskip("numpy")
    if tuple(int(part) for part in np.__version__.split(".")[:2]) < (2, 4):
        pytest.skip("NumPy < 2.4 still converts a one-element array with int()")
    with pytest.raises(TypeError) as info:
        int(np.array([1]))
    assert str(info.value) == NUMPY_INT_REFUSAL
