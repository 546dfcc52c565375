"""torch's global settings change no output of the public functions (docs/semantics.md).

Serving engines call eagle_fn with a default device or dtype set, under autocast, with
deterministic algorithms on (whose NaN / max-int fill of ``empty`` also shows any output
element left unwritten), with one thread or a seeded global generator. Each test computes the
outputs in the default state first, then again under one setting, which it always restores.
"""

import contextlib
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import torch

from eagle_fn.toy import toy_models

_SRC = str(Path(__file__).resolve().parents[1] / "src")


@contextlib.contextmanager
def default_device(device):
    previous = torch.get_default_device()
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(None if previous == torch.device("cpu") else previous)


@contextlib.contextmanager
def default_dtype(dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def tensors(value, name="out"):
    """Every tensor in ``value`` (tuples, named tuples, dataclasses, dicts), by path."""
    if isinstance(value, torch.Tensor):
        return {name: value}
    if dataclasses.is_dataclass(value):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        value = dict(zip(getattr(value, "_fields", range(len(value))), value, strict=True))
    if isinstance(value, dict):
        return {k: t for key, v in value.items() for k, t in tensors(v, f"{name}.{key}").items()}
    return {}


def assert_same(actual, expected):
    actual, expected = tensors(actual), tensors(expected)
    assert actual.keys() == expected.keys()
    # Exact, NaN where NaN; dtype and device too.
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


def test_toy_models_are_float32_cpu_tables_whatever_the_defaults():
    expected = toy_models(4, seed=2)
    with default_device("meta"), default_dtype(torch.float64):
        actual = toy_models(4, seed=2)
    assert_same(actual, expected)


def test_module_tensors_ignore_the_default_device_at_import():
    # A module-level tensor made under a default CUDA device would initialize CUDA on import.
    code = (
        "import sys, torch\n"
        "torch.set_default_device('meta')\n"
        "import eagle_fn, eagle_fn.toy\n"
        "for name, module in list(sys.modules.items()):\n"
        "    if name.startswith('eagle_fn'):\n"
        "        for attr, value in vars(module).items():\n"
        "            if isinstance(value, torch.Tensor):\n"
        "                print(name, attr, value.device)\n"
    )
    env = {**os.environ, "PYTHONPATH": _SRC}
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    lines = run.stdout.splitlines()
    assert "eagle_fn._dynamic _SIZE_CARRIER cpu" in lines
    assert all(line.endswith(" cpu") for line in lines), lines
