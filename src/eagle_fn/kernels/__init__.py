"""Fused Triton kernels with the torch functions' signatures and outputs, one launch each.

Each public function checks its inputs exactly like its torch twin, then calls one registered
``torch.ops.eagle_fn`` operator that launches one kernel (after a fill, for FULL masks and
split sampling). Requires ``triton``; the rest of eagle_fn does not. On CPU tensors the
kernels run only under ``TRITON_INTERPRET=1``, set before triton is first imported
(docs/kernels.md).
"""

# mypy: disable-error-code="import-untyped, import-not-found"

try:
    import triton
except ImportError as error:
    # Installed but failing (its interpreter without NumPy, say) is not the same as absent.
    absent = isinstance(error, ModuleNotFoundError) and error.name == "triton"
    why = f"could not import triton ({type(error).__name__}: {error})"
    raise ImportError(
        f"eagle_fn.kernels {'needs the triton package (pip install triton)' if absent else why}; "
        "the torch functions of eagle_fn work without it"
    ) from error

from .. import _backend
from ._kernels_verify import verify_greedy_kernel
from ._ops import interpreted
from .greedy import greedy_core, verify_greedy
from .organize import organize_tree, tree_core
from .sampling import verify_sampling
from .selection import select_top_k
from .verify import build_verify_tree, verify_core

# Triton chose interpreter or compiler as it decorated the kernels: what device checks go by.
_backend.record_kernels(interpreted(verify_greedy_kernel))
# Its own jit helpers (tl.sum, ...) were decorated once, as triton.language was first imported
# (perhaps by torch._dynamo, long before): kernels decorated the other way would fail at their
# first launch.
_helper = getattr(getattr(triton.language, "standard", None), "sum", None)
if _helper is not None and interpreted(_helper) != interpreted(verify_greedy_kernel):
    raise ImportError(
        f"eagle_fn.kernels: {_backend.INTERPRET_VAR} changed after triton was imported, so "
        "Triton's own jit helpers and eagle_fn's kernels would run in different modes; set "
        "it in the environment before triton is first imported (before `import eagle_fn`)"
    )

# The public functions and three unchecked cores with the torch cores' parameters:
# greedy_core, tree_core and verify_core (the worker's triton paths call the last two).
__all__ = [
    "build_verify_tree",
    "greedy_core",
    "organize_tree",
    "select_top_k",
    "tree_core",
    "verify_core",
    "verify_greedy",
    "verify_sampling",
]
