"""Settings for the docstring examples in src/ (collected by ``--doctest-modules``).

The examples import what they use, so they run as ``python -m doctest`` runs them on an
installed eagle_fn: no names are injected here.
"""

import atexit
import os
import shutil
import tempfile

# Inductor's on-disk cache keys compiled graphs without eagle_fn's op bodies (opaque custom
# ops under the interpreter; on a GPU it hashes the kernels' source, not the Python around
# them), so a graph cached by another checkout or version could call an op this one changed
# or does not register: each test session compiles into a cache of its own, unless the caller
# chose one.
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="eagle_fn_inductor_")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)

import torch

# Without CUDA, Triton kernels (eagle_fn.kernels) run on CPU tensors in Triton's interpreter,
# which must be chosen before any kernel is decorated, that is before eagle_fn.kernels loads.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
