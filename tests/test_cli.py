"""`python -m eagle_fn`: the README's demo command runs, and its options parse as documented."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import eagle_fn
from eagle_fn import _backend
from eagle_fn.__main__ import SECTIONS, main, parse_args


def test_no_section_means_every_section():
    assert parse_args([]).sections == []  # main() then runs all of SECTIONS
    assert parse_args(["tree", "chain"]).sections == ["tree", "chain"]


def test_an_unknown_section_is_refused_with_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["chain", "nonsense"])
    assert exit_.value.code == 2
    message = capsys.readouterr().err
    assert "unknown section 'nonsense'" in message
    assert ", ".join(SECTIONS) in message


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"eagle_fn {eagle_fn.__version__}"


@pytest.mark.parametrize(
    ("options", "env", "message"),
    [
        (["--device", "nowhere"], {}, "error: python -m eagle_fn: device 'nowhere'"),
        (
            ["--device", "meta"],
            {},
            "error: python -m eagle_fn: the demo runs on a cpu or cuda device, got meta",
        ),
        ([], {"EAGLE_FN_COMPILE": "yes"}, "error: EAGLE_FN_COMPILE must be one of"),
        (
            [],
            {"EAGLE_FN_BACKEND": "triton"},
            "error: DraftOrganizer: backend 'triton' cannot run on cpu",
        ),
    ],
)
def test_a_bad_device_or_setting_is_an_error_not_a_traceback(monkeypatch, options, env, message):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # triton on a CPU needs it
    monkeypatch.setattr(_backend, "_decided", [])  # as if no kernel were imported yet
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit_:
        main([*options, "chain"])
    assert str(exit_.value.code).startswith(message)


def test_one_section_prints_only_that_section(capsys):
    main(["chain"])
    out = capsys.readouterr().out
    assert out.startswith("chain draft, topk=1, num_steps=3")
    assert "[[-1, 0, 1], [-1, 0, 1]]" in out
    assert "tree draft" not in out


@pytest.mark.compiled  # the cost table compiles the paths auto compiles on this device
def test_the_readme_demo_command_runs_every_section():
    # As README.md runs it: a fresh interpreter, no arguments.
    src = str(Path(eagle_fn.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-m", "eagle_fn"], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for heading in ("chain draft", "tree draft", "speculative decoding", "sampled", "cost per"):
        assert heading in out.stdout
    equal = [line for line in out.stdout.splitlines() if line.endswith("  == greedy")]
    assert len(equal) == 3  # each toy config's speculative output equals greedy decoding
    assert "greedy rows == greedy decoding: True" in out.stdout
