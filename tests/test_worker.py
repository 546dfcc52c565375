import copy
import functools
import inspect
import os
import pickle
import shutil
import subprocess
import sys
import threading
import time
import warnings

import pytest
import torch

from eagle_fn import (
    DraftConfig,
    DraftOrganizer,
    DraftTree,
    MaskMode,
    MaxBatchWarning,
    _backend,
    _memo,
    _modes,
    _paths,
    build_verify_tree,
    chain_constants,
    organize_multilayer,
    organize_tree,
)
from eagle_fn._backend import Backend
from eagle_fn._modes import compiled_paths
from eagle_fn.profiling import OpCounter
from eagle_fn.worker import PATHS
from helpers import reference
from helpers.asserts import assert_matches, assert_trees_equal
from helpers.drafts import draft_lists, multilayer
from helpers.threads import in_threads


def worker(cfg, max_bs=8, **kwargs):
    kwargs.setdefault("compile", False)
    return DraftOrganizer(cfg, max_bs=max_bs, device="cpu", **kwargs)


def test_attributes():
    w = worker(DraftConfig.chain(3), max_bs=4)
    assert w.config == DraftConfig.chain(3)
    assert w.max_bs == 4
    assert w.device == torch.device("cpu")
    assert w.compiled == set()
    assert w.backend is Backend.TORCH


@pytest.mark.parametrize("num_steps", [1, 3, 8])
@pytest.mark.parametrize("bs", [0, 1, 8])
def test_chain_within_max_bs_takes_the_fast_path(num_steps, bs):
    w = worker(DraftConfig.chain(num_steps))
    topk_p, topk_index = multilayer(num_steps, bs, torch.Generator().manual_seed(bs))
    with OpCounter() as counter:
        tree = w.organize(topk_p, topk_index)
    assert counter.total == 0
    assert tree.draft_tokens is topk_index
    assert_trees_equal(tree, organize_multilayer(w.config, topk_p, topk_index))


@pytest.mark.parametrize("num_steps", range(1, 9))
@pytest.mark.parametrize("bs", [9, 20])
def test_chain_beyond_max_bs_takes_the_general_path(num_steps, bs):
    w = worker(DraftConfig.chain(num_steps))
    topk_p, topk_index = multilayer(num_steps, bs, torch.Generator().manual_seed(bs))
    with OpCounter() as counter, pytest.warns(MaxBatchWarning):
        tree = w.organize(topk_p, topk_index)
    assert counter.total > 0
    assert tree.draft_tokens is not topk_index
    parents, indices, tokens = reference.organize_chain(num_steps, topk_index)
    assert_matches(tree.parent_list, parents, (bs, w.config.parent_width), torch.int64)
    assert_matches(tree.top_scores_index, indices, (bs, num_steps), torch.int64)
    assert_matches(tree.draft_tokens, tokens, (bs, num_steps), torch.int64)


@pytest.mark.parametrize("bs", [0, 3, 8, 11])
def test_organize_steps_on_a_chain(bs):
    cfg = DraftConfig.chain(5)
    lists = draft_lists(cfg, bs, torch.Generator().manual_seed(bs))
    w = worker(cfg)
    with OpCounter() as counter, warnings.catch_warnings():
        warnings.simplefilter("ignore", MaxBatchWarning)
        tree = w.organize_steps(*lists)
    # Within max_bs only the tokens are concatenated; beyond it organize_tree runs.
    assert (counter.total == 1) is (bs <= 8)
    assert_trees_equal(tree, organize_tree(cfg, *lists))


@pytest.mark.parametrize("bs", [0, 5, 12])
def test_organize_steps_on_a_tree(bs):
    cfg = DraftConfig(4, 3, 8)
    lists = draft_lists(cfg, bs, torch.Generator().manual_seed(bs))
    assert_trees_equal(worker(cfg).organize_steps(*lists), organize_tree(cfg, *lists))


def test_reconfigure_never_rebinds_constants():
    chain3, chain5, tree = DraftConfig.chain(3), DraftConfig.chain(5), DraftConfig(2, 3, 5)
    w = worker(chain3)
    ptr3 = chain_constants(chain3, max_bs=8, device="cpu").parents.data_ptr()
    idx3 = torch.zeros(2, 3, dtype=torch.int64)
    before = w.organize(torch.rand(2, 3), idx3).parent_list
    for cfg in (chain5, tree, chain3, chain5, chain3):
        w.reconfigure(cfg)
        assert w.config == cfg
    after = w.organize(torch.rand(2, 3), idx3).parent_list
    assert before.data_ptr() == after.data_ptr() == ptr3
    # Another worker with the same key shares the very same buffers.
    other = worker(chain3)
    assert other.organize(torch.rand(2, 3), idx3).parent_list.data_ptr() == ptr3


@pytest.mark.parametrize("copier", [pickle.dumps, copy.copy, copy.deepcopy])
def test_a_worker_is_not_pickled_or_copied(copier):
    # A compiled worker failed with PicklingError deep in its functions; an eager one pickled
    # into private copies of the shared constants, which check_constants never looks at.
    w = worker(DraftConfig.chain(3), max_bs=4)
    with pytest.raises(TypeError, match=r"^DraftOrganizer cannot be pickled or copied: .*process"):
        copier(w)


@pytest.mark.parametrize("name", ["config", "max_bs", "device", "backend", "compiled"])
def test_the_settings_are_read_only(name):
    # The constants and paths are built from them: an assignment that rebuilt nothing would
    # leave a chain(5) config over chain(3) constants, a tree of mismatched widths, no error.
    w = worker(DraftConfig.chain(3), max_bs=4)
    before = getattr(w, name)
    with pytest.raises(
        AttributeError,
        match=rf"^DraftOrganizer.{name} is read-only: DraftOrganizer was built from it$",
    ):
        setattr(w, name, DraftConfig.chain(5) if name == "config" else before)
    assert getattr(w, name) == before
    # Nor may a del clear the way for the assignment.
    with pytest.raises(AttributeError, match=rf"^DraftOrganizer.{name} is read-only"):
        delattr(w, name)
    assert getattr(w, name) == before
    w.reconfigure(DraftConfig.chain(5))  # the way to switch the config
    assert w.config == DraftConfig.chain(5)
    assert w.organize(torch.rand(2, 5), torch.zeros(2, 5, dtype=torch.int64)).parent_list.shape == (
        2,
        5,
    )


def test_a_failed_reconfigure_keeps_the_old_config(monkeypatch):
    w = worker(DraftConfig.chain(3), max_bs=13)
    monkeypatch.setattr(_memo, "_capturing", lambda: True)  # uncached constants now raise
    with pytest.raises(RuntimeError, match="first needed during a CUDA graph capture"):
        w.reconfigure(DraftConfig.chain(2))
    monkeypatch.undo()
    assert w.config == DraftConfig.chain(3)
    topk_p, topk_index = multilayer(3, 2, torch.Generator().manual_seed(0))
    tree = w.organize(topk_p, topk_index)
    assert_trees_equal(tree, organize_multilayer(DraftConfig.chain(3), topk_p, topk_index))


def test_a_call_runs_on_one_config_while_another_thread_reconfigures(monkeypatch):
    # A call read config, paths and constants apart, and a reconfigure stored them apart: a
    # tree's verify build, checked against its config, ran on the chain's constants after
    # another thread switched the worker (correct shapes, wrong links, no error).
    tree_cfg, chain_cfg = DraftConfig(2, 3, 4), DraftConfig.chain(3)  # both N = 4
    w = worker(tree_cfg)
    tree = organize_tree(tree_cfg, *draft_lists(tree_cfg, 2, torch.Generator().manual_seed(0)))
    args = (tree, torch.tensor([7, 8]), torch.tensor([5, 3]))
    checks, *rest = _paths.ROUTES["build_verify"]

    def checks_then_another_thread_reconfigures(*values, **site):
        checked = checks(*values, **site)
        other = threading.Thread(target=w.reconfigure, args=(chain_cfg,))
        other.start()
        other.join()
        return checked

    monkeypatch.setitem(
        _paths.ROUTES, "build_verify", (checks_then_another_thread_reconfigures, *rest)
    )
    got = w.build_verify(*args)
    assert w.config == chain_cfg
    want = build_verify_tree(tree_cfg, *args)
    for field, value, expected in zip(got._fields, got, want, strict=True):
        assert torch.equal(value, expected), field


def test_racing_reconfigures_leave_config_and_paths_agreeing():
    # Thread 1 is held after storing its config and before storing its paths and constants,
    # while thread 2 reconfigures. Without the lock thread 2 finished in between, and the worker
    # kept thread 2's config over thread 1's constants for every later call.
    w = worker(DraftConfig.chain(3), max_bs=4)
    code = DraftOrganizer.reconfigure.__code__
    lines, first = inspect.getsourcelines(DraftOrganizer.reconfigure)
    store = first + next(i for i, line in enumerate(lines) if "self._state = state" in line)
    held, release = threading.Event(), threading.Event()

    def hold_at_the_store(frame, event, arg):
        if frame.f_code is not code:
            return None

        def line(frame, event, arg):
            if event == "line" and frame.f_lineno == store:
                held.set()
                release.wait(timeout=60)
            return line

        return line

    def first_reconfigure():
        sys.settrace(hold_at_the_store)
        w.reconfigure(DraftConfig.chain(5))

    one = threading.Thread(target=first_reconfigure)
    one.start()
    try:
        assert held.wait(timeout=60)
        two = threading.Thread(target=w.reconfigure, args=(DraftConfig.chain(2),))
        two.start()
        two.join(timeout=0.5)  # with the lock it waits for thread 1, however long this lasts
        assert two.is_alive()
    finally:
        release.set()
    one.join(timeout=60)
    two.join(timeout=60)
    assert w.config == DraftConfig.chain(2)
    assert w._state[0] is w.config
    topk_p, topk_index = multilayer(2, 2, torch.Generator().manual_seed(0))
    got = w.organize(topk_p, topk_index)
    assert_trees_equal(got, organize_multilayer(w.config, topk_p, topk_index))


def test_threads_going_over_max_bs_at_once_warn_once():
    # The race (check, then set) shows with threads switching every microsecond: 9 of 200
    # workers warned twice before the claim (a review, 2026-12-05).
    topk_p, topk_index = multilayer(3, 3, torch.Generator().manual_seed(0))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(100):
            w = worker(DraftConfig.chain(3), max_bs=2)
            start = threading.Barrier(8)

            def organize(_, w=w, start=start):
                start.wait()
                w.organize(topk_p, topk_index)

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", MaxBatchWarning)
                in_threads(organize, 8)
            assert sum(issubclass(warning.category, MaxBatchWarning) for warning in caught) == 1
    finally:
        sys.setswitchinterval(interval)


def test_workers_differing_in_max_bs_share_the_general_paths_graphs():
    # max_bs bounds only the chain paths' batch: the general paths need no compile of their own.
    small, large = (worker(DraftConfig.chain(3), max_bs=m, compile=True) for m in (8, 16))
    for name, path in PATHS.items():
        shared = small._state[1][name] is large._state[1][name]
        assert shared is (path.constants is None), name


ALL_PATHS = {"chain", "chain_steps", "multilayer", "tree", "chain_verify", "verify"}


@pytest.mark.parametrize(
    ("env", "compile", "expected"),
    [
        (None, None, {"verify"}),  # unset = auto: on a CPU only the general verify build
        ("auto", None, {"verify"}),
        ("", None, {"verify"}),  # set but empty, as env files leave it: auto
        ("0", None, set()),
        ("1", None, ALL_PATHS),
        ("1", False, set()),  # the argument overrides the environment
        ("0", True, ALL_PATHS),
    ],
)
def test_compile_mode(monkeypatch, env, compile, expected):
    if env is not None:
        monkeypatch.setenv("EAGLE_FN_COMPILE", env)
    w = DraftOrganizer(DraftConfig.chain(2), max_bs=2, device="cpu", compile=compile)
    assert w.compiled == expected


@pytest.mark.parametrize(
    ("backend", "expected"),
    [(Backend.TORCH, {"tree", "verify"}), (Backend.TRITON, set())],
)
def test_auto_on_cuda_compiles_what_measured_faster(monkeypatch, backend, expected):
    # No GPU needed: the choice reads the device type. The Triton backend serves both paths
    # with one fused launch each, which compiling would not fuse further.
    monkeypatch.delenv("EAGLE_FN_COMPILE", raising=False)
    assert compiled_paths(None, torch.device("cuda"), PATHS, backend) == expected


@pytest.mark.parametrize(("env", "compile"), [("auto", None), ("1", None), ("0", True)])
def test_meta_workers_compile_nothing_and_refuse_a_request_when_built(monkeypatch, env, compile):
    # Inductor generates no code for meta tensors: a compiled meta worker failed inside
    # inductor at its first general-path call.
    monkeypatch.setenv("EAGLE_FN_COMPILE", env)
    cfg = DraftConfig(4, 3, 8)
    if env == "auto":
        worker = DraftOrganizer(cfg, max_bs=2, device="meta", compile=compile)
        assert worker.compiled == set()
        lists = draft_lists(cfg, 3, torch.Generator().manual_seed(0), device="meta")
        assert worker.organize_steps(*lists).parent_list.is_meta
        return
    with pytest.raises(
        ValueError, match=r"^DraftOrganizer: cannot compile on meta: .*compile=False"
    ):
        DraftOrganizer(cfg, max_bs=2, device="meta", compile=compile)


@pytest.mark.parametrize(("env", "compile"), [("auto", None), ("1", None), ("0", True)])
def test_no_cpp_compiler_means_eager_auto_and_an_early_error(monkeypatch, env, compile):
    # Inductor builds every CPU graph with a C++ compiler: without one, auto stays eager and
    # an explicit request fails when the worker is built, not at its first call.
    monkeypatch.setattr(_modes, "cpp_compiler_missing", lambda: "no g++ here")
    monkeypatch.setenv("EAGLE_FN_COMPILE", env)
    cfg = DraftConfig(4, 3, 8)
    if env == "auto":
        assert DraftOrganizer(cfg, max_bs=2, device="cpu", compile=compile).compiled == set()
        assert compiled_paths(None, torch.device("cuda"), PATHS, Backend.TORCH) == {
            "tree",
            "verify",
        }
        return
    with pytest.raises(RuntimeError, match=r"needs a C\+\+ compiler .*: no g\+\+ here; install"):
        DraftOrganizer(cfg, max_bs=2, device="cpu", compile=compile)


def test_the_cpp_compiler_probe_on_a_machine_without_one(tmp_path):
    # A PATH holding only this Python's folder hides the system's compilers from inductor.
    folder = os.path.dirname(sys.executable)
    if any(shutil.which(cxx, path=folder) for cxx in ("g++", "c++", "clang++")):
        pytest.skip(f"{folder} holds a C++ compiler")
    code = (
        "import torch, eagle_fn\n"
        "from eagle_fn._modes import cpp_compiler_missing\n"
        "cfg = eagle_fn.DraftConfig(4, 3, 8)\n"
        "w = eagle_fn.DraftOrganizer(cfg, max_bs=2, device='cpu')\n"
        "print(sorted(w.compiled), 'C++ compiler' in cpp_compiler_missing())\n"
    )
    env = {"PATH": folder, "HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "True"]


def failing_compiler(folder) -> str:
    """A C++ compiler that answers ``--version`` and fails every build."""
    stub = folder / "cxx"
    stub.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && exit 0\necho "no linker here" >&2\nexit 1\n'
    )
    stub.chmod(0o755)
    return str(stub)


@pytest.mark.skipif(sys.platform == "win32", reason="a shell-script compiler")
def test_a_cpp_compiler_that_cannot_build_counts_as_missing(tmp_path):
    # Inductor's own probe only runs --version: with this compiler auto compiled the verify
    # path and every call of it raised. Now auto stays eager, as with no compiler at all.
    stub = failing_compiler(tmp_path)
    code = (
        "import eagle_fn\n"
        "from eagle_fn._modes import cpp_compiler_missing\n"
        "w = eagle_fn.DraftOrganizer(eagle_fn.DraftConfig(4, 3, 8), max_bs=2, device='cpu')\n"
        "print(sorted(w.compiled))\n"
        "print(cpp_compiler_missing())\n"
    )
    env = {**os.environ, "CXX": stub, "EAGLE_FN_COMPILE": "auto"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "[]",
        f"{stub} answers --version but cannot build a shared library: no linker here",
    ]


def test_a_cpp_compiler_that_builds_is_not_missing(monkeypatch):
    import torch._inductor.cpp_builder as cpp_builder

    found = [cxx for cxx in ("g++", "c++", "clang++") if shutil.which(cxx)]
    if sys.platform == "win32" or not found:
        pytest.skip("no C++ compiler here")
    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", lambda: found[0])
    assert _modes._probe.__wrapped__() == ""


@pytest.mark.parametrize("value", ["yes", "true", "2", " ", "AUTO "])
def test_bad_environment_value_lists_the_allowed_ones(monkeypatch, value):
    monkeypatch.setenv("EAGLE_FN_COMPILE", value)
    with pytest.raises(
        ValueError, match=r"EAGLE_FN_COMPILE must be one of '0', '1', 'auto' or unset"
    ):
        DraftOrganizer(DraftConfig.chain(2), max_bs=2, device="cpu")


CHAIN = DraftConfig.chain(3)
META_TREE = DraftTree(*(torch.zeros(2, 3, dtype=torch.int64, device="meta"),) * 3)


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (
            lambda: DraftOrganizer(CHAIN, max_bs=0, device="cpu"),
            ValueError,
            r"DraftOrganizer: max_bs must be >= 1, got 0",
        ),
        (
            lambda: DraftOrganizer(CHAIN, max_bs=2, device=None),
            TypeError,
            r"DraftOrganizer: device must be a torch.device or a str, got NoneType",
        ),
        (
            lambda: DraftOrganizer(None, max_bs=2, device="cpu"),
            TypeError,
            r"DraftOrganizer: cfg must be a DraftConfig",
        ),
        (
            lambda: DraftOrganizer(CHAIN, max_bs=2, device="cpu", compile="yes"),
            TypeError,
            r"^DraftOrganizer: compile must be a bool or None, got str$",
        ),
        (  # an int is not a bool, though 1 == True
            lambda: DraftOrganizer(CHAIN, max_bs=2, device="cpu", compile=1),
            TypeError,
            r"^DraftOrganizer: compile must be a bool or None, got int$",
        ),
        (
            lambda: DraftOrganizer(CHAIN, max_bs=2, device="meta", backend="triton"),
            RuntimeError,
            r"^DraftOrganizer: backend 'triton' cannot run on meta: ",
        ),
        (
            lambda: DraftOrganizer(CHAIN, max_bs=2, device="cpu", backend=3),
            TypeError,
            r"^DraftOrganizer: backend must be a str, a Backend or None, got int$",
        ),
        (
            lambda: worker(CHAIN).reconfigure((1, 3, 4)),
            TypeError,
            r"DraftOrganizer.reconfigure: cfg must be a DraftConfig, got tuple",
        ),
        (
            lambda: worker(CHAIN).organize(torch.rand(2, 4), torch.zeros(2, 4, dtype=torch.int64)),
            ValueError,
            r"DraftOrganizer.organize: topk_index must have shape \[bs, num_steps\] = \[2, 3\], got \[2, 4\]",
        ),
        (
            lambda: worker(CHAIN).organize(torch.rand(2, 3), torch.zeros(2, 3)),
            TypeError,
            r"DraftOrganizer.organize: topk_index must be an int64 tensor, got torch.float32",
        ),
        (
            lambda: worker(CHAIN).organize(
                torch.rand(2, 3, device="meta"), torch.zeros(2, 3, dtype=torch.int64, device="meta")
            ),
            ValueError,
            r"DraftOrganizer.organize: topk_index is on meta, expected cpu \(the device of the worker\)",
        ),
        (
            lambda: worker(DraftConfig(2, 2, 3)).organize(
                torch.rand(2, 2), torch.zeros(2, 2, dtype=torch.int64)
            ),
            ValueError,
            r"needs a chain config",
        ),
        (  # the worker's device, though build_verify_tree's contract names the tree's
            lambda: worker(CHAIN).build_verify(META_TREE, torch.zeros(2), torch.zeros(2)),
            ValueError,
            r"^DraftOrganizer.build_verify: tree.top_scores_index is on meta, expected cpu \(the device of the worker\)$",
        ),
        (
            lambda: worker(CHAIN).organize_steps([], [], []),
            ValueError,
            r"DraftOrganizer.organize_steps: score_list must hold num_steps = 3 tensors, got 0",
        ),
        # Keywords meet the method's own signature: neither a misspelt option nor the checks'
        # own keywords (where=, device=) reach an internal function.
        *(
            (
                lambda kw=kw: worker(CHAIN).build_verify(None, None, None, **{kw: None}),
                TypeError,
                # Python 3.13 adds a suggestion: ". Did you mean 'mask_mode'?"
                rf"^DraftOrganizer.build_verify\(\) got an unexpected keyword argument '{kw}'"
                r"(\. Did you mean '\w+'\?)?$",
            )
            for kw in ("mask_mod", "where", "device", "device_label")
        ),
        (
            lambda: worker(CHAIN).build_verify(None, None, None, MaskMode.FULL),
            TypeError,
            r"^DraftOrganizer.build_verify\(\) takes 4 positional arguments but 5 were given$",
        ),
    ],
)
def test_bad_inputs(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_plain_calls_keep_their_branches_while_another_thread_compiles(
    another_thread_compiling, monkeypatch
):
    # The traced branches are for calls dynamo traces. Taken on is_compiling(), which another
    # thread's compile holds true (torch 2.13 and later), a plain call lost its kept rows and its
    # warning, and a FULL mask's negative sum(seq_lens) raised RuntimeError.
    monkeypatch.setattr(_memo, "_cache", {})  # constants with no rows kept yet
    cfg = DraftConfig.chain(3)
    w = worker(cfg, max_bs=4)
    first = w.organize(*multilayer(3, 2, torch.Generator().manual_seed(1)))
    again = w.organize(*multilayer(3, 2, torch.Generator().manual_seed(2)))
    assert again.parent_list is first.parent_list  # the kept row view
    assert list(chain_constants(cfg, max_bs=4, device="cpu").rows) == [2]
    with pytest.warns(MaxBatchWarning):
        w.organize(*multilayer(3, 6, torch.Generator().manual_seed(3)))
    rows = torch.tensor([-5, 1])
    with pytest.raises(ValueError, match=r"sum\(seq_lens\) must be >= 0, got -4"):
        build_verify_tree(cfg, first, rows, rows, mask_mode=MaskMode.FULL)


def test_a_batch_above_max_bs_warns_once_per_worker():
    cfg = DraftConfig.chain(3)
    w = worker(cfg, max_bs=4)
    big = multilayer(3, 6, torch.Generator().manual_seed(0))
    zeros = torch.zeros(6, dtype=torch.int64)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        w.organize(*big)
        w.build_verify(w.organize(*big), zeros, zeros)
    assert [type(s.message) for s in seen] == [MaxBatchWarning]
    assert "bs = 6 exceeds max_bs = 4" in str(seen[0].message)
    assert "max_bs >= 6" in str(seen[0].message)
    assert issubclass(MaxBatchWarning, UserWarning)
    with pytest.warns(MaxBatchWarning):  # another worker warns again
        worker(cfg, max_bs=4).organize(*big)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # within max_bs: silent
        w.organize(*multilayer(3, 4, torch.Generator().manual_seed(1)))


@pytest.mark.compiled
def test_a_batch_above_max_bs_inside_a_callers_compile_takes_the_general_path():
    # Dynamo cannot trace warnings.warn: the warning is left out, the values are not.
    torch._dynamo.reset()
    cfg = DraftConfig.chain(3)
    w = worker(cfg, max_bs=2)
    big = multilayer(3, 5, torch.Generator().manual_seed(0))
    got = torch.compile(w.organize, fullgraph=True)(*big)
    torch._dynamo.reset()
    assert_trees_equal(got, organize_multilayer(cfg, *big))


def test_tree_configs_never_warn():
    cfg = DraftConfig(4, 3, 8)
    lists = draft_lists(cfg, 12, torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        worker(cfg, max_bs=4).organize_steps(*lists)


@pytest.mark.parametrize("bs", [3, 11])
def test_organize_steps_takes_tuples_as_lists(bs):
    # A draft loop may hand its per-step entries as tuples (types.Tensors): both paths.
    cfg = DraftConfig.chain(4)
    lists = draft_lists(cfg, bs, torch.Generator().manual_seed(bs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaxBatchWarning)
        tree = worker(cfg).organize_steps(*(tuple(part) for part in lists))
    assert_trees_equal(tree, organize_tree(cfg, *lists))


def test_the_max_bs_warning_points_at_the_workers_caller():
    w = worker(DraftConfig.chain(3), max_bs=2)
    with pytest.warns(MaxBatchWarning) as seen:
        w.organize(*multilayer(3, 3, torch.Generator().manual_seed(0)))
    assert seen[0].filename == __file__


def test_auto_leaves_a_path_the_triton_backend_fuses_eager(monkeypatch):
    # On a CPU auto compiles only the general verify build, which Triton runs as one kernel.
    monkeypatch.delenv("EAGLE_FN_COMPILE", raising=False)
    monkeypatch.setattr(_backend, "triton_unavailable_reason", lambda device: None)  # any host
    cfg = DraftConfig(4, 3, 8)
    assert worker(cfg, compile=None, backend="torch").compiled == {"verify"}
    assert worker(cfg, compile=None, backend="triton").compiled == set()


@pytest.mark.parametrize("cfg", [DraftConfig.chain(3), DraftConfig(2, 2, 4)], ids=str)
def test_build_verify_passes_seq_lens_sum_on(cfg):
    # A seq_lens_sum that is not sum(seq_lens) sizes the FULL mask as build_verify_tree's does.
    lists = draft_lists(cfg, 2, torch.Generator().manual_seed(0))
    tree, bonus, seq_lens = organize_tree(cfg, *lists), torch.tensor([3, 4]), torch.tensor([5, 9])
    for wrong in (10, 20):
        options = {"mask_mode": MaskMode.FULL, "seq_lens_sum": wrong}
        got = worker(cfg).build_verify(tree, bonus, seq_lens, **options)
        assert_trees_equal(got, build_verify_tree(cfg, tree, bonus, seq_lens, **options))
    with pytest.raises(
        ValueError, match=r"^DraftOrganizer.build_verify: seq_lens_sum must be >= 0, got -1$"
    ):
        worker(cfg).build_verify(tree, bonus, seq_lens, mask_mode=MaskMode.FULL, seq_lens_sum=-1)


def test_threads_building_their_first_workers_at_once_probe_the_compiler_once(monkeypatch):
    # functools.cache alone let each racing first caller run the probe (g++ 8 times for 8).
    import torch._inductor.cpp_builder as cpp_builder

    asked = []
    start = threading.Barrier(8)

    def slow_probe():
        asked.append(threading.get_ident())
        time.sleep(0.05)  # the racers arrive while the first probe runs
        raise RuntimeError("no compiler")

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", slow_probe)
    monkeypatch.setattr(_modes, "_probe", functools.cache(_modes._probe.__wrapped__))
    found = []

    def first_call(_):
        start.wait()
        found.append(_modes.cpp_compiler_missing())

    in_threads(first_call, 8)
    assert found == ["no compiler"] * 8
    assert len(asked) == 1


def test_the_cpp_compiler_probe_names_a_failure_without_a_message(monkeypatch):
    # An error with no text still means no compiler; a torch without the probe leaves it be.
    import torch._inductor.cpp_builder as cpp_builder

    def no_compiler():
        raise RuntimeError

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", no_compiler)
    assert _modes._probe.__wrapped__() == "RuntimeError"
    monkeypatch.setitem(sys.modules, "torch._inductor.cpp_builder", None)  # import fails
    assert _modes._probe.__wrapped__() == ""


def test_compiled_paths_without_a_caller_name_start_with_the_argument():
    with pytest.raises(TypeError, match=r"^compile must be a bool or None, got str$"):
        compiled_paths("yes", torch.device("cpu"), PATHS, Backend.TORCH)


def test_auto_compiles_nothing_on_a_device_type_without_measurements(monkeypatch):
    monkeypatch.delenv("EAGLE_FN_COMPILE", raising=False)
    w = DraftOrganizer(DraftConfig(4, 3, 8), max_bs=2, device="meta")
    assert w.compiled == set()
