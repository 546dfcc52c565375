"""The parts of scripts/triton_cache.py that need no compiler: how a launch is written down and
rebuilt, and how a moved cache is pointed at its new place."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch

from helpers.scripts import SCRIPTS, script

triton_cache = script("triton_cache")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("skip", [0, 1, 3])
def test_a_tensor_comes_back_with_its_dtype_and_alignment(dtype, skip):
    tensor = torch.zeros(8, dtype=dtype)[skip:]  # a view off the 16-byte grid unless skip is 0
    written = json.loads(json.dumps(triton_cache.encode(tensor)))
    rebuilt = triton_cache.decode(written)
    assert rebuilt.dtype == dtype
    assert rebuilt.data_ptr() % 16 == tensor.data_ptr() % 16


@pytest.mark.parametrize("value", [None, True, 0, 1, 16, 2**40, 0.5, "x"])
def test_other_arguments_come_back_as_they_are(value):
    # With their types: Triton specializes 1 and True apart, and keys a float apart from an int.
    rebuilt = triton_cache.decode(json.loads(json.dumps(triton_cache.encode(value))))
    assert (type(rebuilt), rebuilt) == (type(value), value)


def test_an_unknown_argument_is_refused():
    with pytest.raises(TypeError, match="of type object cannot be recorded"):
        triton_cache.encode(object())


def test_place_points_a_moved_entry_at_its_files_and_prunes(tmp_path):
    entry = tmp_path / "ABC"
    entry.mkdir()
    names = ("k.json", "k.cubin", "k.ptx", "k.ttir")
    for name in names:
        (entry / name).write_text(name)
    old = {name: f"/elsewhere/cache/ABC/{name}" for name in names}
    (entry / "__grp__k.json").write_text(json.dumps({"child_paths": old}))

    triton_cache.place(tmp_path, keep=(".json", ".cubin"))

    group = json.loads((entry / "__grp__k.json").read_text())["child_paths"]
    kept = {name: str((entry / name).resolve()) for name in ("k.json", "k.cubin")}
    assert group == kept
    assert sorted(p.name for p in entry.iterdir()) == ["__grp__k.json", "k.cubin", "k.json"]
    triton_cache.place(tmp_path)  # again, without pruning: nothing changes
    assert json.loads((entry / "__grp__k.json").read_text())["child_paths"] == kept


def test_a_launch_off_the_grid_comes_again_aligned(tmp_path):
    pytest.importorskip("triton", reason="the launches name eagle_fn's Triton kernels")
    kernel = "eagle_fn.kernels._kernels_verify:verify_greedy_kernel"
    tensor = {"dtype": "int64", "offset": 8}
    launches = [
        {"kernel": kernel, "args": [tensor, 3], "kwargs": {"K": 2}},
        {"kernel": kernel, "args": [{**tensor, "offset": 0}, 1], "kwargs": {}},
        {"kernel": "test_kernels_common:_widen_kernel", "args": [], "kwargs": {}},  # not ours
    ]
    (tmp_path / triton_cache.LAUNCHES).write_text(json.dumps(launches))

    rebuilt = list(triton_cache.recorded(tmp_path))

    offsets = [
        [a.data_ptr() % 16 for a in args if isinstance(a, torch.Tensor)] for _, args, _ in rebuilt
    ]
    assert offsets == [[8], [0], [0]]
    assert [(type(args[1]), args[1]) for _, args, _ in rebuilt] == [(int, 3), (int, 3), (int, 1)]
    assert [{k: (type(v), v) for k, v in kwargs.items()} for _, _, kwargs in rebuilt] == [
        {"K": (int, 2)},
        {"K": (int, 2)},
        {},
    ]
    assert all(k.fn.__name__ == "verify_greedy_kernel" for k, _, _ in rebuilt)


# key_parts reads Triton's launch options, which in Triton 3.9 warns that this variable is
# unset; setting it would change the key (Triton hashes it in).
@pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION is unset")
def test_the_key_line_names_triton_and_changes_with_a_hashed_variable(monkeypatch):
    triton = pytest.importorskip("triton", reason="the key is Triton's")
    monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION", raising=False)
    line = triton_cache.key_parts()
    digest = "[0-9a-f]{16}"
    shape = (
        rf"triton {re.escape(triton.__version__)} build {digest} ptxas {digest} options {digest}"
    )
    assert re.fullmatch(shape + r" env \{\}", line), line
    assert triton_cache.key_parts() == line
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    assert triton_cache.key_parts().endswith("env {'TRITON_DEFAULT_FP_FUSION': 'false'}")


def test_compiling_refuses_a_variable_triton_hashes(monkeypatch, tmp_path):
    pytest.importorskip("triton", reason="the variables are Triton's")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "before"))  # compile_all sets it
    monkeypatch.setattr(sys, "path", list(sys.path))  # and prepends to it
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    with pytest.raises(SystemExit, match=r"unset them first: \['TRITON_DEFAULT_FP_FUSION'\]"):
        triton_cache.compile_all(tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing compiled


SMALL_MODULE = '''import torch


def f(x):
    """Doc
    string."""
    y = torch.cat([x, x])  # [2n]
    z = x.view(
        -1,
    )  # [2n]
    if torch.where(x > 0, x, 0).any():
        w = "topk(" + "not code"  # [a comment of the body, not the header]
    return y, z, w


def g():
    return torch.zeros(3)
'''


def test_code_figures_count_a_small_tree(tmp_path):
    (tmp_path / "m.py").write_text(SMALL_MODULE)
    lengths, commented, missing = script("code_figures").measure(tmp_path)
    assert lengths == [(8, 10, "m.py:f"), (2, 2, "m.py:g")]  # the docstring's 2 lines apart
    assert commented == 2  # a comment on any line of a statement counts
    # a compound statement by its header; a call inside a string is not code
    assert missing == [
        "m.py:11: if torch.where(x > 0, x, 0).any():",
        "m.py:17: return torch.zeros(3)",
    ]


def test_validation_lines_count_a_small_tree(tmp_path):
    (tmp_path / "a.py").write_text(
        "def check_x(x):\n"
        '    """Doc."""\n'
        "    if x < 0:\n"
        "        # why\n"
        "        raise ValueError(x)\n"
        "\n\n"
        "def compute(x):\n"
        "    return x\n"
        "\n\n"
        'CONTRACT = contract(\n    "a",\n    "b",\n)\n'
    )
    (tmp_path / "sampling.py").write_text("def check_y():\n    return 1\n")
    (tmp_path / "config.py").write_text("def check_z():\n    return 1\n")  # not an input
    assert list(script("validation_lines").counted(str(tmp_path))) == [
        ("same entry points", "a.py", "function bodies", "check_x", 2),
        ("same entry points", "a.py", "declarations", "CONTRACT", 4),
        ("new entry points", "sampling.py", "function bodies", "check_y", 1),
    ]


@pytest.mark.parametrize("name", ["code_figures", "validation_lines"])
def test_the_counting_scripts_refuse_a_missing_directory_with_their_usage(name, tmp_path):
    path = str(SCRIPTS / f"{name}.py")
    bare = subprocess.run([sys.executable, path], capture_output=True, text=True)
    assert bare.returncode == 2
    assert bare.stderr.startswith("usage:")
    assert "the following arguments are required: src" in bare.stderr
    absent = subprocess.run(
        [sys.executable, path, str(tmp_path / "no")], capture_output=True, text=True
    )
    assert absent.returncode == 2
    assert absent.stderr.rstrip().endswith(f"{tmp_path / 'no'} is not a directory")


def test_the_counting_scripts_print_their_figures(tmp_path):
    (tmp_path / "m.py").write_text(SMALL_MODULE)
    run = [sys.executable, str(SCRIPTS / "code_figures.py"), str(tmp_path), "--missing"]
    printed = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert "tensor-producing statements with a # [shape] comment: 2/4 = 50%" in printed
    assert printed.rstrip().endswith("m.py:17: return torch.zeros(3)")
    (tmp_path / "a.py").write_text("def check_x(x):\n    return x\n")
    run = [sys.executable, str(SCRIPTS / "validation_lines.py"), str(tmp_path)]
    printed = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert "total, same entry points, function bodies: 1" in printed.splitlines()
