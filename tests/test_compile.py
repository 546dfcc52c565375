"""Compiled mode: one graph per path over the batch sweep, no graph breaks, eager's values."""

import threading
import warnings

import pytest
import torch
import torch._dynamo
import torch._inductor.config
from torch._dynamo.utils import counters
from torch.fx.experimental.proxy_tensor import make_fx

from eagle_fn import (
    DraftConfig,
    DraftOrganizer,
    MaskMode,
    MaxBatchWarning,
    build_verify_tree,
    is_valid_tree,
    organize_multilayer,
    organize_tree,
    select_top_k,
    verify_greedy,
)
from eagle_fn._compile import batch_shapes, compile_fn
from eagle_fn.layout import IS_VALID_TREE, valid_tree_core
from eagle_fn.profiling import OpCounter
from eagle_fn.verify import VERIFY_GREEDY, greedy_core
from helpers.asserts import assert_trees_equal, on
from helpers.drafts import draft_lists, multilayer
from helpers.threads import in_threads
from helpers.trees import agreeing_target

pytestmark = pytest.mark.compiled
MAX_BS = 8


@pytest.fixture
def compiled_env(monkeypatch, fresh_dynamo):
    monkeypatch.setenv("EAGLE_FN_COMPILE", "1")


def graphs():
    return counters["stats"]["unique_graphs"]


def assert_no_graph_breaks():
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])


def test_chain_paths_compile_once_over_the_batch_sweep(compiled_env, device):
    cfg = DraftConfig.chain(5)
    w = DraftOrganizer(cfg, max_bs=MAX_BS, device=device)
    assert w.compiled == {"chain", "chain_steps", "multilayer", "tree", "chain_verify", "verify"}
    gen = torch.Generator().manual_seed(0)
    for bs in [3, *range(MAX_BS + 1)]:  # bs 0 and 1 included: no specialization
        topk_p, topk_index = multilayer(5, bs, gen, device)
        assert_trees_equal(
            w.organize(topk_p, topk_index), organize_multilayer(cfg, topk_p, topk_index)
        )
    assert graphs() == 1
    # Beyond max_bs the general path has its own graph, also compiled once (and warns once).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for bs in range(MAX_BS + 1, MAX_BS + 6):
            topk_p, topk_index = multilayer(5, bs, gen, device)
            assert_trees_equal(
                w.organize(topk_p, topk_index), organize_multilayer(cfg, topk_p, topk_index)
            )
    assert [warning.category for warning in caught] == [MaxBatchWarning]
    assert graphs() == 2
    assert_no_graph_breaks()
    # The compiled chain graph only hands out views of the constants and the input.
    topk_p, topk_index = multilayer(5, 4, gen, device)
    with OpCounter() as counter:
        w.organize(topk_p, topk_index)
    assert counter.total == 0


def test_a_chain_draft_loop_on_buffer_columns_compiles_once(compiled_env, device):
    # An engine's draft model writes each step's token into a column of one preallocated
    # buffer: the entries keep that layout at every bs, bs 1 included, so one graph serves.
    cfg = DraftConfig.chain(3)
    w = DraftOrganizer(cfg, max_bs=MAX_BS, device=device)
    gen = torch.Generator().manual_seed(2)
    probs = torch.rand(MAX_BS, 4, generator=gen).to(device)
    tokens = torch.randint(0, 50, (MAX_BS, 4), generator=gen).to(device)
    for bs in [3, 1, 2, MAX_BS]:
        step = select_top_k(cfg, 0, probs[:bs, :1], tokens[:bs, :1])
        steps = [step]
        for i in (1, 2):
            step = select_top_k(cfg, i, probs[:bs, i : i + 1], tokens[:bs, i : i + 1], step.scores)
            steps.append(step)
        lists = [
            [getattr(s, f) for s in steps] for f in ("score_entry", "token_entry", "parents_entry")
        ]
        assert_trees_equal(w.organize_steps(*lists), organize_tree(cfg, *lists))
    assert graphs() == 1
    assert_no_graph_breaks()


def test_tree_path_compiles_once_over_the_batch_sweep(compiled_env, device):
    cfg = DraftConfig(4, 3, 8)
    w = DraftOrganizer(cfg, max_bs=MAX_BS, device=device)
    gen = torch.Generator().manual_seed(1)
    for bs in [5, *range(0, 2 * MAX_BS + 1, 3), 1]:
        lists = draft_lists(cfg, bs, gen, "ties", device=device)
        assert_trees_equal(w.organize_steps(*lists), organize_tree(cfg, *lists))
    assert graphs() == 1
    assert_no_graph_breaks()


def test_a_layout_dtype_grad_mode_or_setting_compiles_one_more_graph_each(compiled_env):
    # semantics.md §6: compiled graphs guard on strides, score dtype, grad mode and torch's
    # guarded settings; each new one costs one graph (any bs), with eager's values.
    cfg = DraftConfig(4, 3, 8)
    w = DraftOrganizer(cfg, max_bs=MAX_BS, device="cpu")
    gen = torch.Generator().manual_seed(4)

    def graphs_after(dtype=torch.float32, wide=False):
        for bs in (3, 5):
            scores, tokens, parents = draft_lists(cfg, bs, gen, dtype=dtype)
            if wide:  # each entry a slice of a wider buffer: same shape, other strides
                scores = [torch.cat([s, s], dim=-1)[..., : s.shape[-1]] for s in scores]
            lists = (scores, tokens, parents)
            assert_trees_equal(w.organize_steps(*lists), organize_tree(cfg, *lists))
        return graphs()

    assert graphs_after() == 1
    assert graphs_after(wide=True) == 2
    assert graphs_after(dtype=torch.float64) == 3
    with torch.no_grad():
        assert graphs_after() == 4
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(not deterministic)
    try:
        assert graphs_after() == 5
    finally:
        torch.use_deterministic_algorithms(deterministic)
    assert graphs_after() == 5  # back under the first graph's guards
    assert_no_graph_breaks()


def test_compiling_leaves_the_host_configuration_alone(compiled_env):
    dynamo_before = torch._dynamo.config.get_config_copy()
    inductor_before = torch._inductor.config.get_config_copy()
    w = DraftOrganizer(DraftConfig.chain(2), max_bs=4, device="cpu")
    w.organize(*multilayer(2, 3, torch.Generator().manual_seed(2)))
    assert torch._dynamo.config.get_config_copy() == dynamo_before
    assert torch._inductor.config.get_config_copy() == inductor_before


def assert_verify_equal(a, b):
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype
        assert x.shape == y.shape
        assert torch.equal(x.to(torch.int64), y.to(torch.int64))


@pytest.mark.parametrize("cfg", [DraftConfig.chain(4), DraftConfig(4, 3, 8)], ids=str)
def test_build_verify_compiles_once_per_mask_mode(compiled_env, cfg, device):
    # The torch backend: inductor's graphs (the kernels' compiled calls: test_kernels_verify).
    worker = DraftOrganizer(cfg, max_bs=MAX_BS, device=device, backend="torch")
    gen = torch.Generator().manual_seed(3)
    for expected, mode in enumerate(MaskMode, start=1):
        for bs in [5, 0, 1, 2, MAX_BS]:
            tree = on(organize_tree(cfg, *draft_lists(cfg, bs, gen)), device)
            bonus = torch.randint(0, 99, (bs,), generator=gen).to(device)
            seq_lens = torch.randint(0, 40, (bs,), generator=gen).to(device)
            got = worker.build_verify(tree, bonus, seq_lens, mask_mode=mode)
            assert_verify_equal(got, build_verify_tree(cfg, tree, bonus, seq_lens, mask_mode=mode))
        assert graphs() == expected, mode  # new sequence lengths never recompile FULL
    assert_no_graph_breaks()


def test_an_empty_batch_runs_eagerly(compiled_env, device):
    # torch 2.11's inductor launches its CUDA kernels for an empty unbacked batch with a
    # grid computation that divides by zero: compiled paths call the eager function at bs 0.
    cfg = DraftConfig(4, 3, 8)
    worker = DraftOrganizer(cfg, max_bs=MAX_BS, device=device, backend="torch")
    gen = torch.Generator().manual_seed(5)
    for bs, expected_graphs in [(0, 0), (2, 1), (0, 1)]:
        tree = on(organize_tree(cfg, *draft_lists(cfg, bs, gen)), device)
        rows = torch.zeros(bs, dtype=torch.int64, device=device)
        got = worker.build_verify(tree, rows, rows)
        assert_verify_equal(got, build_verify_tree(cfg, tree, rows, rows))
        assert graphs() == expected_graphs, bs


def test_threads_after_the_first_compile_share_its_graph(compiled_env):
    # Threads calling one after another, each its first call in that thread.
    cfg = DraftConfig.chain(3)
    worker = DraftOrganizer(cfg, max_bs=2, device="cpu")  # bs 3 takes the compiled general path
    gen = torch.Generator().manual_seed(7)
    results = []

    def organize():
        topk_p, topk_index = multilayer(3, 3, gen, "cpu")
        results.append((worker.organize(topk_p, topk_index), topk_p, topk_index))

    with pytest.warns(MaxBatchWarning):
        organize()
    for _ in range(3):
        thread = threading.Thread(target=organize)
        thread.start()
        thread.join()
    assert len(results) == 4
    for got, topk_p, topk_index in results:
        assert_trees_equal(got, organize_multilayer(cfg, topk_p, topk_index))
    assert graphs() == 1


def test_threads_making_their_first_call_at_once_share_one_graph(compiled_env):
    # Dynamo compiles for every thread that misses its cache: before plain compiled calls took
    # turns (eagle_fn._eager._PLAIN_CALLS), these 8 threads compiled 8 graphs, a whole limit.
    cfg = DraftConfig.chain(3)
    worker = DraftOrganizer(cfg, max_bs=8, device="cpu")
    start = threading.Barrier(8)
    results = []

    def organize(seed):
        topk_p, topk_index = multilayer(3, 3, torch.Generator().manual_seed(seed), "cpu")
        start.wait()
        results.append((worker.organize(topk_p, topk_index), topk_p, topk_index))

    in_threads(organize, 8)
    assert len(results) == 8
    for got, topk_p, topk_index in results:
        assert_trees_equal(got, organize_multilayer(cfg, topk_p, topk_index))
    assert graphs() == 1


@pytest.mark.parametrize("cfg", [DraftConfig.chain(2), DraftConfig(2, 2, 4)], ids=str)
@pytest.mark.parametrize("mode", ["fake", "symbolic"])
def test_a_fake_trace_through_compiled_paths_runs_them_eagerly(compiled_env, cfg, mode):
    # FX cannot trace a compiled function, and under a bare FakeTensorMode the compiled code
    # read the fake tensors' data pointers (a segfault on CPU): fake calls take the eager path.
    worker = DraftOrganizer(cfg, max_bs=MAX_BS, device="cpu")
    lists = draft_lists(cfg, 3, torch.Generator().manual_seed(6))
    flat = [t for entries in lists for t in entries]
    rows = torch.arange(3)

    def step(*flat):
        s = cfg.num_steps
        tree = worker.organize_steps(flat[:s], flat[s : 2 * s], flat[2 * s :])
        return (*tree, *worker.build_verify(tree, rows, rows))

    traced = make_fx(step, tracing_mode=mode, _allow_non_fake_inputs=True)(*flat)
    assert graphs() == 0  # nothing compiled while tracing
    assert_verify_equal(traced(*flat), step(*flat))


def test_greedy_verification_and_validity_compile_as_full_graphs(compiled_env, device):
    cfg = DraftConfig(4, 3, 8)
    # The contracts' batch dims, as the worker derives them for its own paths.
    shapes = VERIFY_GREEDY.batch_shapes(cfg)
    greedy = compile_fn(greedy_core, enabled=True, shapes=batch_shapes(greedy_core, shapes))
    shapes = IS_VALID_TREE.batch_shapes(cfg)
    valid = compile_fn(valid_tree_core, enabled=True, shapes=batch_shapes(valid_tree_core, shapes))
    gen = torch.Generator().manual_seed(4)
    for bs in [3, 0, 1, 2, 7]:
        tree = on(organize_tree(cfg, *draft_lists(cfg, bs, gen, "nan")), device)
        zeros = torch.zeros(bs, dtype=torch.int64, device=device)
        vt = build_verify_tree(cfg, tree, zeros, zeros)
        target = agreeing_target(on(vt, "cpu"), gen).to(device)
        got = greedy(
            cfg,
            vt.draft_tokens,
            vt.retrieve_index,
            vt.retrieve_next_token,
            vt.retrieve_next_sibling,
            target,
        )
        assert_verify_equal(got, verify_greedy(cfg, vt, target))
        assert torch.equal(
            valid(cfg, tree.parent_list, tree.top_scores_index), is_valid_tree(cfg, tree)
        )
    assert graphs() == 2
    assert_no_graph_breaks()
