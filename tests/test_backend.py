"""EAGLE_FN_BACKEND and backend=: torch, triton or auto, resolved by device and availability."""

import os
import re
import subprocess
import sys
import warnings

import pytest
import torch

from eagle_fn import _backend
from eagle_fn._backend import Backend, backend_from_env, resolve_backend

CPU = torch.device("cpu")
CUDA = torch.device("cuda", 0)  # only its type is read: no GPU needed
KERNELS_IMPORT_ERROR = _backend.kernels_import_error


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("EAGLE_FN_BACKEND", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(_backend, "_decided", [])  # as before eagle_fn.kernels is imported
    # Resolution alone: importing the kernels here, with the variable just removed, would
    # decorate them in the other mode (KERNELS_IMPORT_ERROR, the real one, is tested below).
    monkeypatch.setattr(_backend, "kernels_import_error", lambda: None)


@pytest.fixture
def triton_installed(monkeypatch):
    monkeypatch.setattr(_backend, "triton_import_error", lambda: None)


@pytest.fixture
def triton_missing(monkeypatch):
    why = "the triton package is not installed (pip install triton)"  # import_error's, below
    monkeypatch.setattr(_backend, "triton_import_error", lambda: why)


@pytest.fixture
def triton_broken(monkeypatch):
    why = "triton is installed but does not import (OSError: libcuda.so.1: cannot open)"
    monkeypatch.setattr(_backend, "triton_import_error", lambda: why)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, Backend.AUTO),  # unset
        ("", Backend.AUTO),  # set but empty, as `EAGLE_FN_BACKEND= cmd` leaves it
        ("auto", Backend.AUTO),
        ("torch", Backend.TORCH),
        ("triton", Backend.TRITON),
    ],
)
def test_env_values(monkeypatch, raw, expected):
    if raw is not None:
        monkeypatch.setenv("EAGLE_FN_BACKEND", raw)
    assert backend_from_env() is expected


@pytest.mark.parametrize("raw", ["cuda", "Triton", "1", " torch"])
def test_invalid_env_value_lists_the_valid_ones(monkeypatch, raw):
    monkeypatch.setenv("EAGLE_FN_BACKEND", raw)
    with pytest.raises(ValueError, match="'torch', 'triton', 'auto'") as error:
        backend_from_env()
    assert repr(raw) in str(error.value)
    assert "EAGLE_FN_BACKEND" in str(error.value)


def test_invalid_argument_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"backend must be one of 'torch', 'triton', 'auto'"):
        resolve_backend("gpu", CPU)
    with pytest.raises(TypeError, match="backend must be a str, a Backend or None, got int"):
        resolve_backend(1, CPU)


@pytest.mark.usefixtures("triton_installed")
@pytest.mark.parametrize(
    ("backend", "device", "expected"),
    [
        ("auto", CUDA, Backend.TRITON),
        ("auto", CPU, Backend.TORCH),  # the interpreter is a test harness, never a default
        ("torch", CUDA, Backend.TORCH),
        ("torch", CPU, Backend.TORCH),
        ("triton", CUDA, Backend.TRITON),
        (Backend.TRITON, CUDA, Backend.TRITON),
        (Backend.AUTO, CUDA, Backend.TRITON),
    ],
)
def test_resolution_with_triton_installed(backend, device, expected):
    assert resolve_backend(backend, device) is expected


@pytest.mark.usefixtures("triton_installed")
def test_none_reads_the_environment(monkeypatch):
    assert resolve_backend(None, CUDA) is Backend.TRITON
    monkeypatch.setenv("EAGLE_FN_BACKEND", "torch")
    assert resolve_backend(None, CUDA) is Backend.TORCH
    monkeypatch.setenv("EAGLE_FN_BACKEND", "bogus")
    message = (
        "EAGLE_FN_BACKEND must be one of 'torch', 'triton', 'auto' or unset/empty, got 'bogus'"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        resolve_backend(None, CUDA)


@pytest.mark.usefixtures("triton_installed")
def test_explicit_triton_on_cpu_needs_the_interpreter(monkeypatch):
    with pytest.raises(RuntimeError, match=r"cannot run on cpu: .*TRITON_INTERPRET=1"):
        resolve_backend("triton", CPU)
    for on in ("1", "true", "ON", "yes", "Y"):  # Triton's own spellings of true
        monkeypatch.setenv("TRITON_INTERPRET", on)
        assert resolve_backend("triton", CPU) is Backend.TRITON
    for off in ("0", " 1", "1 "):  # Triton does not strip
        monkeypatch.setenv("TRITON_INTERPRET", off)
        with pytest.raises(RuntimeError, match="interpreter mode"):
            resolve_backend("triton", CPU)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    message = (
        "backend 'triton' cannot run on cpu: Triton kernels run on CPU tensors only in "
        "interpreter mode; set TRITON_INTERPRET=1 before triton is first imported (before "
        "`import eagle_fn`)"
    )
    with pytest.raises(RuntimeError, match=f"^{re.escape(message)}$"):
        resolve_backend("triton", CPU)


@pytest.mark.usefixtures("triton_installed")
def test_once_the_kernels_are_imported_their_decoration_decides(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    _backend.record_kernels(False)  # decorated for the compiler: the variable came too late
    with pytest.raises(RuntimeError, match="interpreter mode; set TRITON_INTERPRET=1 before"):
        resolve_backend("triton", CPU)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    _backend.record_kernels(True)
    assert resolve_backend("triton", CPU) is Backend.TRITON


@pytest.mark.usefixtures("triton_installed")
def test_kernels_that_do_not_import_send_auto_to_torch_and_refuse_triton(monkeypatch):
    # Importing eagle_fn.kernels raises ImportError where TRITON_INTERPRET changed after
    # triton was imported: backend='triton' says so as RuntimeError, as for its other reasons.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setitem(sys.modules, "eagle_fn.kernels", None)  # its import raises ImportError
    monkeypatch.setattr(_backend, "kernels_import_error", KERNELS_IMPORT_ERROR)
    assert resolve_backend("auto", CUDA) is Backend.TORCH
    with pytest.raises(
        RuntimeError, match=r"^backend 'triton' cannot run on cpu: .*eagle_fn\.kernels"
    ):
        resolve_backend("triton", CPU)


def test_a_late_triton_interpret_is_a_runtime_error_of_the_worker():
    # The real case: triton imported for its compiler, then TRITON_INTERPRET=1 set.
    code = (
        "import os, triton.language, torch\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "import eagle_fn\n"
        "try:\n"
        "    eagle_fn.DraftOrganizer(eagle_fn.DraftConfig.chain(2), max_bs=2, device='cpu',\n"
        "                            compile=False, backend='triton')\n"
        "except RuntimeError as error:\n"
        "    print(error)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(
        "DraftOrganizer: backend 'triton' cannot run on cpu: eagle_fn.kernels: TRITON_INTERPRET "
        "changed after triton was imported"
    )


@pytest.mark.usefixtures("triton_installed")
def test_explicit_triton_on_another_device_type_is_refused():
    with pytest.raises(RuntimeError, match="device type 'meta'"):
        resolve_backend("triton", torch.device("meta"))


@pytest.mark.usefixtures("triton_missing")
def test_without_triton_auto_is_torch_and_triton_is_refused(monkeypatch):
    assert resolve_backend("auto", CUDA) is Backend.TORCH
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(RuntimeError, match="triton package is not installed"):
        resolve_backend("triton", CPU)
    with pytest.raises(RuntimeError, match="triton package is not installed"):
        resolve_backend("triton", CUDA)


@pytest.mark.usefixtures("triton_broken")
def test_a_triton_that_does_not_import_sends_auto_to_torch_and_is_refused_by_name():
    assert resolve_backend("auto", CUDA) is Backend.TORCH
    assert not _backend.triton_available()
    with pytest.raises(RuntimeError, match=r"cannot run on cuda:0: triton is installed but does "):
        resolve_backend("triton", CUDA)


def test_import_error_says_whether_a_package_is_missing_or_broken(tmp_path, monkeypatch):
    missing = "eagle_fn_test_absent_package"
    assert _backend.import_error(missing) == (
        f"the {missing} package is not installed (pip install {missing})"
    )
    broken = "eagle_fn_test_broken_package"
    (tmp_path / broken).mkdir()
    (tmp_path / broken / "__init__.py").write_text("raise OSError('libcuda.so.1: cannot open')")
    monkeypatch.syspath_prepend(tmp_path)
    assert _backend.import_error(broken) == (
        f"{broken} is installed but does not import (OSError: libcuda.so.1: cannot open)"
    )
    assert broken not in sys.modules  # a failed import leaves nothing half-imported behind
    assert _backend.import_error("math") is None


def test_triton_availability_matches_an_import():
    try:
        import triton  # noqa: F401
    except ImportError:
        installed = False
    else:
        installed = True
    assert _backend.triton_available() is installed


@pytest.mark.compiled
def test_a_callers_compile_traces_the_device_check_without_warning(monkeypatch):
    # (Named without "kernel": a CPU inductor compile, not one of the GPU step's tests.)
    # The kernels check their device inside a caller's torch.compile, without the cached
    # triton_available: dynamo warns when it traces a functools cache wrapper (once per
    # process: forget earlier warnings first), and 2.11's cannot trace find_spec.
    monkeypatch.setattr(torch._dynamo.utils, "warn_once_cache", set())
    torch._dynamo.reset()

    def runnable(x):
        return x + (_backend.kernel_device_reason(x.device) is None)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = torch.compile(runnable, fullgraph=True)(torch.zeros(2))
    torch._dynamo.reset()
    assert out.tolist() == [0.0, 0.0]  # CPU tensors without the interpreter: a reason
    assert [str(w.message) for w in seen if "lru_cache" in str(w.message)] == []


def test_importing_eagle_fn_loads_neither_dynamo_nor_triton():
    # Seconds of import (torch._dynamo loads inductor and triton) for users who run eagerly:
    # the compile machinery and triton load when a worker or eagle_fn.kernels needs them.
    code = "import sys, eagle_fn\nprint(sorted({'torch._dynamo', 'triton'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_eagle_fn_imports_without_triton():
    # A subprocess where `import triton` fails, as on an install without it.
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, eagle_fn\n"
        "from eagle_fn._backend import resolve_backend\n"
        "print(resolve_backend('auto', torch.device('cuda')).value)\n"
        "try:\n"
        "    import eagle_fn.kernels\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "torch"
    assert lines[1].startswith("eagle_fn.kernels needs the triton package (pip install triton)")


def test_a_triton_that_fails_to_import_is_named_with_its_error(tmp_path):
    # Installed but broken, as Triton's interpreter is without NumPy: not "pip install triton".
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n"
    )
    code = "import eagle_fn.kernels\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 1
    assert (
        "ImportError: eagle_fn.kernels could not import triton (ModuleNotFoundError: No module "
        "named 'numpy'); the torch functions of eagle_fn work without it"
    ) in out.stderr
