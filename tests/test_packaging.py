"""The source distribution is the tracked tree: its tests run from it, without bytecode."""

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return sorted(name for name in listed.stdout.decode().split("\0") if name)


def test_the_sdist_holds_every_tracked_file_and_no_bytecode(tmp_path):
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:  # the test extra asks for 77+
        pytest.skip(f"setuptools {setuptools.__version__} cannot build a PEP 639 license")
    files = tracked_files()
    tree = tmp_path / "tree"  # a copy: building writes egg-info beside the sources
    for name in files:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
    (tree / "tests" / "__pycache__").mkdir(exist_ok=True)
    (tree / "tests" / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"")
    build = "from setuptools import build_meta; build_meta.build_sdist('dist')"
    subprocess.run([sys.executable, "-c", build], cwd=tree, capture_output=True, check=True)
    (sdist,) = (tree / "dist").glob("eagle_fn-*.tar.gz")
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}
    assert [name for name in files if name not in members] == []
    assert [name for name in members if "__pycache__" in name or name.endswith(".pyc")] == []
    assert {"PKG-INFO", "tests/helpers/reference.py", "conftest.py"} <= members
