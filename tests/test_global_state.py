"""torch's global settings change no output of the public functions (docs/semantics.md).

Serving engines call eagle_fn with a default device or dtype set, under autocast, with
deterministic algorithms on (whose NaN / max-int fill of ``empty`` also shows any output
element left unwritten), with one thread, a seeded global generator or subnormals flushed to
zero. Each test computes the outputs in the default state first, then again under one
setting, which it always restores.
"""

import contextlib
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.utils.deterministic
from torch.utils import _pytree as pytree

from eagle_fn import (
    DraftConfig,
    DraftOrganizer,
    MaskMode,
    _memo,
    build_verify_tree,
    chain_constants,
    draw_uniforms,
    is_valid_tree,
    organize_chain,
    organize_multilayer,
    organize_tree,
    select_top_k,
    target_probs_from_logits,
    verify_greedy,
    verify_sampling,
)
from eagle_fn.toy import speculative_generate, toy_models
from helpers.drafts import draft_lists, multilayer, step_inputs
from helpers.float_modes import flush_denormal

TREE, CHAIN = DraftConfig(2, 3, 6), DraftConfig.chain(3)
BS, VOCAB = 2, 7
_SRC = str(Path(__file__).resolve().parents[1] / "src")


@contextlib.contextmanager
def setting(get, put, value):
    """One of torch's settings at ``value`` for the block, then back to what ``get`` read."""
    previous = get()
    put(value)
    try:
        yield
    finally:
        put(previous)


def _put_device(device):
    # Back to no default device, not a "cpu" one: that would leave a device mode in place.
    torch.set_default_device(None if torch.device(device) == torch.device("cpu") else device)


def default_device(device):
    return setting(torch.get_default_device, _put_device, device)


def default_dtype(dtype):
    return setting(torch.get_default_dtype, torch.set_default_dtype, dtype)


@contextlib.contextmanager
def deterministic():
    """Deterministic algorithms, ``empty`` filled with NaN or the largest integer."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


@contextlib.contextmanager
def seeded():
    """The global generator reseeded; calls given a generator must not read it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234)
        yield


STATES = {
    "default_device_meta": lambda: default_device("meta"),
    "default_dtype_float64": lambda: default_dtype(torch.float64),
    "default_dtype_float16": lambda: default_dtype(torch.float16),
    "default_dtype_bfloat16": lambda: default_dtype(torch.bfloat16),
    "deterministic": deterministic,
    "autocast_bfloat16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "autocast_float16": lambda: torch.autocast("cpu", dtype=torch.float16),
    "one_thread": lambda: setting(torch.get_num_threads, torch.set_num_threads, 1),
    "seeded": seeded,
    "flush_denormal": flush_denormal,
}
# The kernels allocate their outputs with new_empty: the deterministic fill is the probe.
KERNEL_STATES = ("default_device_meta", "default_dtype_float64", "deterministic", "flush_denormal")


def torch_globals():
    """The settings above that torch can read back (not the flush of subnormals)."""
    return (
        torch.get_default_device(),
        torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
        torch.is_autocast_enabled("cpu"),
        torch.get_num_threads(),
        torch.get_rng_state().tolist(),
    )


@pytest.fixture(autouse=True)
def _globals_restored():
    # Each test must leave torch as it found it, failing or not: the settings' context
    # managers restore them, and this checks that they did.
    before = torch_globals()
    yield
    assert torch_globals() == before


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


@pytest.fixture(scope="module")
def inputs():
    gen = torch.Generator().manual_seed(1)
    lists, chain_lists = draft_lists(TREE, BS, gen, "ties"), draft_lists(CHAIN, BS, gen)
    bonus, seq_lens = torch.randint(0, VOCAB, (BS,), generator=gen), torch.tensor([3, 5])
    tree, chain = organize_tree(TREE, *lists), organize_tree(CHAIN, *chain_lists)

    def verify_tree(cfg, organized):
        vt = build_verify_tree(cfg, organized, bonus, seq_lens)
        return vt._replace(draft_tokens=vt.draft_tokens % VOCAB)  # siblings may share tokens

    def probs(cfg):
        logits = torch.randn(BS, cfg.num_draft_tokens, VOCAB, generator=gen)
        return target_probs_from_logits(logits, torch.full((BS,), 0.7))

    logits = torch.randn(BS, TREE.num_draft_tokens, VOCAB, generator=gen)
    logits[0, 1, 2] = float("nan")
    return {
        "step0": step_inputs(TREE, 0, BS, gen, "ties")[:2],
        "step1": step_inputs(TREE, 1, BS, gen, "nan"),
        "step1_half": step_inputs(TREE, 1, BS, gen, dtype=torch.float16),
        "lists": lists,
        "chain_lists": chain_lists,
        "multilayer": multilayer(CHAIN.num_steps, BS, gen),
        "tree": tree,
        "bonus": bonus,
        "seq_lens": seq_lens,
        "vt": verify_tree(TREE, tree),
        "chain_vt": verify_tree(CHAIN, chain),
        "logits": logits,
        "temperature": torch.tensor([0.0, 0.8]),
        "top_k": torch.tensor([3, 0]),
        "top_p": torch.tensor([0.9, 0.5]),
        "q": probs(TREE),
        "chain_q": probs(CHAIN),
        "chain_p": probs(CHAIN),
        "coins": draw_uniforms(BS, TREE.num_draft_tokens, generator=gen),
        "chain_coins": draw_uniforms(BS, CHAIN.num_draft_tokens, generator=gen),
        "models": toy_models(12, seed=3),
        "prompts": torch.tensor([[1, 2], [3, 4]]),
    }


def public_outputs(x):
    """The outputs of every public function on ``x``, with a fresh memo: cached constants are
    built under the setting being tested."""
    out = {
        "select_0": select_top_k(TREE, 0, *x["step0"]),
        "select_1": select_top_k(TREE, 1, *x["step1"]),
        "select_1_half": select_top_k(TREE, 1, *x["step1_half"]),
        "tree": organize_tree(TREE, *x["lists"]),
        "multilayer": organize_multilayer(CHAIN, *x["multilayer"]),
        "constants": chain_constants(CHAIN, max_bs=4, device="cpu"),
        "chain": organize_chain(chain_constants(CHAIN, max_bs=4, device="cpu"), x["multilayer"][1]),
        "valid": is_valid_tree(TREE, x["tree"]),
        "greedy": verify_greedy(TREE, x["vt"], x["logits"].argmax(-1).flatten()),
        "probs": target_probs_from_logits(x["logits"], x["temperature"]),
        "probs_top": target_probs_from_logits(
            x["logits"], x["temperature"], top_k=x["top_k"], top_p=x["top_p"]
        ),
        "probs_double": target_probs_from_logits(x["logits"].double(), x["temperature"]),
        "probs_bfloat16": target_probs_from_logits(x["logits"].bfloat16(), x["temperature"]),
        "coins": draw_uniforms(BS, 4, generator=torch.Generator().manual_seed(5)),
        "sampling": verify_sampling(TREE, x["vt"], x["q"], *x["coins"]),
        "sampling_draft": verify_sampling(
            CHAIN, x["chain_vt"], x["chain_q"], *x["chain_coins"], draft_probs=x["chain_p"]
        ),
        "toy_models": toy_models(5, seed=1),
    }
    for mode in MaskMode:
        out[f"verify_{mode.name}"] = build_verify_tree(
            TREE, x["tree"], x["bonus"], x["seq_lens"], mask_mode=mode
        )
    for cfg, lists in ((CHAIN, x["chain_lists"]), (TREE, x["lists"])):
        worker = DraftOrganizer(cfg, max_bs=4, device="cpu", compile=False)
        organized = worker.organize_steps(*lists)
        out[f"worker_{cfg.topk}"] = organized
        if cfg.is_chain:
            out["worker_organize"] = worker.organize(*x["multilayer"])
        for mode in MaskMode:
            out[f"worker_{cfg.topk}_{mode.name}"] = worker.build_verify(
                organized, x["bonus"], x["seq_lens"], mask_mode=mode
            )
    target, draft = x["models"]
    out["generate_greedy"] = speculative_generate(TREE, target, draft, x["prompts"], 4)
    out["generate_sampled"] = speculative_generate(
        TREE, target, draft, x["prompts"], 4, temperature=0.8,
        generator=torch.Generator().manual_seed(9),
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def expected(inputs):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EAGLE_FN_COMPILE", "0")  # speculative_generate's worker stays eager
        return public_outputs(inputs)


@pytest.mark.parametrize("state", STATES)
def test_public_functions_ignore_global_settings(state, inputs, expected, monkeypatch):
    monkeypatch.setenv("EAGLE_FN_COMPILE", "0")
    monkeypatch.setattr(_memo, "_cache", {})
    with STATES[state]():
        actual = public_outputs(inputs)
    assert_same(actual, expected)


def test_zero_scores_rank_by_index_when_the_cpu_flushes_subnormals(monkeypatch):
    # Candidate scores [1, 0, 0, 0, 0, 0]: the three best are 0 and the zeros of the lowest
    # indices, 1 and 2 (candidate 0's children come after the step-0 candidates).
    monkeypatch.setattr(_memo, "_cache", {})  # the rank keys built in that mode too
    cfg = DraftConfig(2, 2, 4)
    scores = [torch.tensor([[[1.0, 0.0]]]), torch.zeros(1, 2, 2)]
    tokens = [torch.tensor([[10, 11]]), torch.tensor([[12, 13, 14, 15]])]
    parents = [torch.tensor([[-1, 0, 1]]), torch.tensor([[2, 3]])]
    with flush_denormal():
        tree = organize_tree(cfg, scores, tokens, parents)
    assert tree.top_scores_index.tolist() == [[0, 1, 2]]
    assert is_valid_tree(cfg, tree).tolist() == [True]


def test_toy_models_are_float32_cpu_tables_whatever_the_defaults():
    expected = toy_models(4, seed=2)
    with default_device("meta"), default_dtype(torch.float64):
        actual = toy_models(4, seed=2)
    assert_same(actual, expected)


def test_draw_uniforms_without_a_generator_draws_from_torch_default_generator():
    # The default CPU generator seeded with 7 draws what a fresh one seeded with 7 does: on
    # the CPU and in float32 whatever the default device and dtype.
    expected = draw_uniforms(BS, 3, generator=torch.Generator().manual_seed(7))
    with torch.random.fork_rng(devices=[]), default_device("meta"), default_dtype(torch.float64):
        torch.manual_seed(7)
        actual = draw_uniforms(BS, 3)
    assert_same(actual, expected)


def test_module_tensors_ignore_the_default_device_and_dtype_at_import():
    # A module-level tensor made under a default CUDA device would initialize CUDA on import;
    # docs/semantics.md: a default dtype set before the import changes nothing either.
    code = (
        "import contextlib, sys, torch\n"
        "torch.set_default_device('meta')\n"
        "torch.set_default_dtype(torch.float64)\n"
        "import eagle_fn, eagle_fn.profiling, eagle_fn.toy\n"
        "with contextlib.suppress(ImportError):\n"
        "    import eagle_fn.kernels\n"
        "for name, module in list(sys.modules.items()):\n"
        "    if name.startswith('eagle_fn'):\n"
        "        for attr, value in vars(module).items():\n"
        "            if isinstance(value, torch.Tensor):\n"
        "                print(name, attr, value.dtype, value.device)\n"
    )
    env = {**os.environ, "PYTHONPATH": _SRC}
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    lines = run.stdout.splitlines()
    assert "eagle_fn._dynamic _SIZE_CARRIER torch.float32 cpu" in lines
    assert all(line.endswith(" cpu") and "float64" not in line for line in lines), lines


def kernel_outputs(kernels, x):
    out = {
        "select_1": kernels.select_top_k(TREE, 1, *x["step1"]),
        "tree": kernels.organize_tree(TREE, *x["lists"]),
        "greedy": kernels.verify_greedy(TREE, x["vt"], x["logits"].argmax(-1).flatten()),
        "sampling_draft": kernels.verify_sampling(
            CHAIN, x["chain_vt"], x["chain_q"], *x["chain_coins"], draft_probs=x["chain_p"]
        ),
    }
    for mode in MaskMode:
        out[f"verify_{mode.name}"] = kernels.build_verify_tree(
            TREE, x["tree"], x["bonus"], x["seq_lens"], mask_mode=mode
        )
    return out


@pytest.mark.parametrize("state", KERNEL_STATES)
def test_kernels_ignore_global_settings(state, inputs):
    from helpers import kernel_support  # skips without triton; turns on the interpreter

    # Compiled kernels on a GPU; on a CPU, the interpreter's (on from the import, unless the
    # kernels were already imported without it).
    device = kernel_support.KERNEL_DEVICE
    if device.type == "cpu" and not kernel_support.INTERPRETED:
        pytest.skip("CPU tensors need TRITON_INTERPRET=1 before the import")
    problem = kernel_support.interpreter_problem() if device.type == "cpu" else None
    if problem is not None:
        pytest.skip(str(problem))
    import eagle_fn.kernels as kernels

    inputs = pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), inputs)
    expected = kernel_outputs(kernels, inputs)
    with STATES[state]():
        actual = kernel_outputs(kernels, inputs)
    assert_same(actual, expected)
