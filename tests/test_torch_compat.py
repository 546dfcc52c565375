"""Torch-version compatibility of _compile: feature detection and the marking fallback.

The fallback (marked alias views, one code object per compile) is what torch without a
shapes spec gets; it is forced here, so it is tested on every torch the suite runs on.
"""

import importlib
import inspect
import os
import threading
import warnings

import pytest
import torch
import torch._dynamo
import torch._inductor.config
from torch._dynamo.utils import counters

from eagle_fn import (
    DraftConfig,
    MaskMode,
    _compile,
    _eager,
    build_verify_tree,
    chain_constants,
    organize_multilayer,
    organize_tree,
    verify_greedy,
)
from eagle_fn._backend import Backend
from eagle_fn._dynamic import isolated
from eagle_fn.chain import chain_core as _organize_chain
from eagle_fn.chain import chain_verify_constants
from eagle_fn.profiling import OpCounter
from eagle_fn.verify import greedy_core
from eagle_fn.worker import PATHS
from helpers.asserts import assert_trees_equal
from helpers.drafts import draft_lists, multilayer
from helpers.forking import free_in_a_forked_child
from helpers.trees import agreeing_target

pytestmark = pytest.mark.compiled
MAX_BS = 6
FALLBACK = _compile.TorchFeatures(spec_keyword=None, mark_unbacked=True)
# The detected features, and the fallback where this torch would not pick it by itself.
FEATURES = [pytest.param(None, id="detected")]
if _compile.torch_features() != FALLBACK:
    FEATURES.append(pytest.param(FALLBACK, id="fallback"))


def graphs():
    return counters["stats"]["unique_graphs"]


def assert_untouched(tensors):
    # mark_unbacked and friends store Python attributes on a tensor; none may reach the caller's.
    for t in tensors:
        assert vars(t) == {}, vars(t)


def assert_verify_equal(a, b):
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype
        assert x.shape == y.shape
        assert torch.equal(x.to(torch.int64), y.to(torch.int64))


def test_detected_features_are_what_torch_offers():
    features = _compile.torch_features()
    params = inspect.signature(torch.compile).parameters
    try:
        importlib.import_module("torch.fx.experimental.dynamic_spec")
        offered = [k for k in ("shapes_spec", "dynamic_shapes") if k in params]
    except ImportError:
        offered = []
    assert features.spec_keyword == (offered[0] if offered else None)
    # Every torch eagle_fn supports can compile one way or the other.
    assert features.spec_keyword is not None or features.mark_unbacked


# docs/torch-versions.md's table: (spec_keyword, mark_unbacked with a shape_id, its min/max)
# per tested release. The test reads the version; eagle_fn never does.
DETECTED = {
    "2.11": (None, True, False),
    "2.12": (None, True, True),
    "2.13": ("shapes_spec", True, True),
    "2.14": ("dynamic_shapes", True, True),
    "2.15": ("dynamic_shapes", True, True),
}


def test_each_tested_release_is_detected_as_documented():
    release = ".".join(torch.__version__.split(".")[:2])
    if release not in DETECTED:
        pytest.skip(f"torch {torch.__version__} is not in docs/torch-versions.md's table")
    mark = torch._dynamo.decorators.mark_unbacked
    bounds = {"min", "max"} <= set(inspect.signature(mark).parameters)
    assert (*_compile.torch_features(), bounds) == DETECTED[release]


@pytest.mark.parametrize("features", FEATURES)
def test_every_path_compiles_once_over_the_batch_sweep(fresh_dynamo, features):
    chain, tree_cfg = DraftConfig.chain(3), DraftConfig(2, 3, 5)
    dynamo_before = torch._dynamo.config.get_config_copy()
    inductor_before = torch._inductor.config.get_config_copy()
    every = frozenset(PATHS)
    chain_paths = _compile.path_functions(PATHS, chain, MAX_BS, every, Backend.TORCH, features)
    tree_paths = _compile.path_functions(PATHS, tree_cfg, MAX_BS, every, Backend.TORCH, features)
    constants = chain_constants(chain, max_bs=MAX_BS, device="cpu")
    verify_constants = chain_verify_constants(chain, max_bs=MAX_BS, device="cpu")
    gen = torch.Generator().manual_seed(0)
    full = MaskMode.FULL
    for bs in [3, *range(MAX_BS + 1)]:  # bs 0 and 1 included: no specialization
        topk_p, topk_index = multilayer(3, bs, gen)
        chain_tree = chain_paths["chain"](constants, topk_index)
        assert_trees_equal(chain_tree, organize_multilayer(chain, topk_p, topk_index))
        assert_trees_equal(
            tree_paths["multilayer"](chain, topk_p, topk_index),
            organize_multilayer(chain, topk_p, topk_index),
        )
        lists = draft_lists(tree_cfg, bs, gen, "ties")
        tree = tree_paths["tree"](tree_cfg, *lists)
        assert_trees_equal(tree, organize_tree(tree_cfg, *lists))
        bonus = torch.randint(0, 99, (bs,), generator=gen)
        seq_lens = torch.randint(0, 40, (bs,), generator=gen)
        n = 4  # the chain's N; FULL's length takes a new value nearly every call
        got = chain_paths["chain_verify"](
            verify_constants,
            topk_index,
            bonus,
            seq_lens,
            full,
            n * sum(seq_lens.tolist()) + bs * n * n,
        )
        assert_verify_equal(
            got, build_verify_tree(chain, chain_tree, bonus, seq_lens, mask_mode=full)
        )
        n = 5
        got = tree_paths["verify"](
            tree_cfg, *tree, bonus, seq_lens, full, n * sum(seq_lens.tolist()) + bs * n * n
        )
        assert_verify_equal(got, build_verify_tree(tree_cfg, tree, bonus, seq_lens, mask_mode=full))
        assert_untouched([topk_p, topk_index, bonus, seq_lens, *lists[0], *lists[1], *lists[2]])
    assert graphs() == 5  # chain, multilayer, tree, chain verify, verify
    assert sum(counters["graph_break"].values()) == 0
    assert torch._dynamo.config.get_config_copy() == dynamo_before
    assert torch._inductor.config.get_config_copy() == inductor_before
    # The compiled chain graph, marks included, only hands out views.
    with OpCounter() as counter:
        chain_paths["chain"](constants, topk_index)
    assert counter.total == 0, dict(counter.ops)
    # A batch of 1 runs the verify graph (inductor's code: no ATen op reaches the dispatcher);
    # only a batch of 0 runs the eager function.
    for bs, eager in [(1, False), (0, True)]:
        tree = organize_tree(tree_cfg, *draft_lists(tree_cfg, bs, gen))
        zeros = torch.zeros(bs, dtype=torch.int64)
        with OpCounter() as counter:
            tree_paths["verify"](tree_cfg, *tree, zeros, zeros, MaskMode.QLEN, 0)
        assert (counter.total > 0) == eager, (bs, dict(counter.ops))
    # Past max_bs the chain graph's bound refuses (the worker never sends such a batch): the
    # constants' max_bs rows would make a tree too short.
    with pytest.raises(Exception, match=rf"<= {MAX_BS}\b"):
        chain_paths["chain"](constants, multilayer(3, MAX_BS + 1, gen)[1])


@pytest.mark.parametrize("features", FEATURES)
@pytest.mark.parametrize("related", [True, False], ids=["rows", "own size"])
def test_flat_per_node_arguments_compile_once(fresh_dynamo, features, related):
    cfg = DraftConfig(4, 3, 8)
    # [bs * N]: tied to the batch (rows), or an independent size that the graph relates itself.
    n = cfg.num_draft_tokens
    per_node = _compile.Batch(1, rows=n) if related else _compile.Batch(1, size="bs * N")
    greedy = _compile.compile_fn(
        greedy_core,
        enabled=True,
        features=features,
        shapes={
            "draft_tokens": per_node,
            "retrieve_index": _compile.Batch(2),
            "retrieve_next_token": _compile.Batch(2),
            "retrieve_next_sibling": _compile.Batch(2),
            "target_predict": per_node,
        },
    )
    gen = torch.Generator().manual_seed(1)
    for bs in [3, 0, 1, 2, 7]:
        tree = organize_tree(cfg, *draft_lists(cfg, bs, gen, "nan"))
        zeros = torch.zeros(bs, dtype=torch.int64)
        vt = build_verify_tree(cfg, tree, zeros, zeros)
        target = agreeing_target(vt, gen)
        args = vt.draft_tokens, vt.retrieve_index, vt.retrieve_next_token, vt.retrieve_next_sibling
        assert_verify_equal(greedy(cfg, *args, target), verify_greedy(cfg, vt, target))
        assert_untouched([*args, target])
    assert graphs() == 1


def compiled_chain(features):
    """A two-step chain config, its constants and its organize compiled with ``features``."""
    cfg = DraftConfig.chain(2)
    constants = chain_constants(cfg, max_bs=MAX_BS, device="cpu")
    shapes = {"topk_index": _compile.Batch(2, max=MAX_BS)}
    chain = _compile.compile_fn(_organize_chain, enabled=True, shapes=shapes, features=features)
    return cfg, constants, chain


@pytest.mark.parametrize("features", FEATURES)
def test_dynamic_arguments_may_come_by_keyword(fresh_dynamo, features):
    cfg, constants, chain = compiled_chain(features)
    gen = torch.Generator().manual_seed(2)
    for bs in [2, 0, 1, MAX_BS]:
        topk_p, topk_index = multilayer(2, bs, gen)
        got = chain(constants=constants, topk_index=topk_index)
        assert_trees_equal(got, organize_multilayer(cfg, topk_p, topk_index))
        assert_untouched([topk_index])
    assert graphs() == 1


@pytest.mark.parametrize("features", FEATURES)
def test_a_compiled_path_runs_inside_a_callers_compile(fresh_dynamo, features):
    # The caller's compile traces the path's function; marking (the fallback) is eager-only.
    cfg, constants, chain = compiled_chain(features)
    caller = torch.compile(lambda index: chain(constants, index), fullgraph=True)
    topk_p, topk_index = multilayer(2, 3, torch.Generator().manual_seed(4))
    assert_trees_equal(caller(topk_index), organize_multilayer(cfg, topk_p, topk_index))
    assert_untouched([topk_index])


@pytest.mark.parametrize("features", FEATURES)
def test_each_compile_has_its_own_recompile_budget(fresh_dynamo, features):
    # More configs of one function than dynamo's default budget of 8 entries per code object,
    # and than an accumulated_recompile_limit (256 by default) that counts every entry on the
    # code, isolate_recompiles' regions too; the eager backend keeps it quick, the budget is
    # dynamo's whatever the backend.
    limit = torch._dynamo.config.recompile_limit
    shapes = {"topk_index": _compile.Batch(2, max=MAX_BS)}
    gen = torch.Generator().manual_seed(3)
    accumulated = torch._dynamo.config.patch(accumulated_recompile_limit=limit)
    with accumulated, warnings.catch_warnings():
        warnings.simplefilter("error")  # a refused compile would warn and run eagerly
        for steps in range(1, limit + 3):
            compile_one(features, shapes, steps, gen)
    assert graphs() == limit + 2


def compile_one(features, shapes, steps, gen):
    cfg = DraftConfig.chain(steps)
    chain = _compile.compile_fn(
        _organize_chain, enabled=True, shapes=shapes, features=features, backend="eager"
    )
    constants = chain_constants(cfg, max_bs=MAX_BS, device="cpu")
    topk_p, topk_index = multilayer(steps, 2, gen)
    assert_trees_equal(chain(constants, topk_index), organize_multilayer(cfg, topk_p, topk_index))


def _scaled(x):
    return x * 3


@pytest.mark.parametrize("another_thread", [False, True], ids=["alone", "another compiling"])
@pytest.mark.parametrize("features", FEATURES)
def test_past_the_recompile_limit_calls_run_eagerly_with_one_warning(
    fresh_dynamo, features, another_thread, request
):
    # A fullgraph compile raises once its function has recompile_limit graphs (each static
    # width below compiles one): the path runs eagerly instead, warning once. Torch 2.13 and later
    # hold is_compiling() true in every thread while one compiles: a call that took it for
    # its own trace went straight to dynamo, whose refusal then reached the caller.
    if another_thread:
        request.getfixturevalue("another_thread_compiling")
    limit = torch._dynamo.config.recompile_limit
    scaled = _compile.compile_fn(
        _scaled, enabled=True, shapes={"x": _compile.Batch(2)}, features=features, backend="eager"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for width in range(1, limit + 4):
            x = torch.arange(2 * width).view(2, width)
            assert torch.equal(scaled(x), x * 3)
    assert graphs() == limit
    messages = [str(w.message) for w in caught if "recompile limit" in str(w.message)]
    assert messages == [
        "eagle_fn: the compiled _scaled reached torch._dynamo's recompile limit (one graph per "
        "mask mode, dtype, input layout and torch global setting: grad mode, autocast, default "
        "dtype and device, ...); calls needing a new graph run eagerly"
    ]


@pytest.mark.parametrize("features", FEATURES)
def test_a_refused_call_does_not_ask_dynamo_again(fresh_dynamo, features, monkeypatch):
    # Dynamo's refusal costs milliseconds a call (guard failure reasons, a log record): a
    # call like one it refused runs eagerly at once; a width compiled before still runs its
    # graph, and a new width still asks.
    entered = []

    def counting(real):
        def compile_counted(*args):
            compiled = real(*args)

            def enter(x):
                entered.append(x.shape[1])
                return compiled(x)

            return enter

        return compile_counted

    for name in ("compile_with_spec", "compile_with_marks"):
        monkeypatch.setattr(_compile, name, counting(getattr(_compile, name)))
    limit = torch._dynamo.config.recompile_limit
    scaled = _compile.compile_fn(
        _scaled, enabled=True, shapes={"x": _compile.Batch(2)}, features=features, backend="eager"
    )
    refused, past = limit + 1, limit + 2
    widths = [*range(1, limit + 2), refused, refused, 1, past, past, refused]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for width in widths:
            x = torch.arange(2 * width).view(2, width)
            assert torch.equal(scaled(x), x * 3)
    assert entered == [*range(1, limit + 2), 1, past]
    assert graphs() == limit
    assert sum("recompile limit" in str(w.message) for w in caught) == 1


def test_a_refused_variant_is_its_tensors_layout_and_the_global_modes():
    # The wrapper alone, with a compiled function that always refuses: each call it is asked
    # is a variant it had not refused yet. An unbacked int's value is not part of a variant.
    limit_hit = importlib.import_module("torch._dynamo.exc").FailOnRecompileLimitHit
    asked = []

    def refusing(x, n):
        asked.append(n)
        raise limit_hit("recompile limit reached")

    def add(x, n):
        return x + n

    shapes = {"x": _compile.Batch(1), "n": _compile.UnbackedInt()}
    call = _eager.eager_when_needed(add, refusing, shapes)
    x = torch.ones(3)
    with pytest.warns(UserWarning, match="recompile limit"):
        assert call(x, 1).tolist() == [2, 2, 2]
    assert call(x, 2).tolist() == [3, 3, 3]  # the same variant: not asked
    assert call(torch.ones(5), n=4).tolist() == [5] * 5  # only the batch dim differs
    call(x.double(), 1)
    call(torch.ones(3, 2).t()[0], 1)  # a strided view
    call(x.requires_grad_(), 1)
    with torch.no_grad():
        call(x, 1)
    with torch.inference_mode():
        call(torch.ones(3), 1)
    with torch.autocast("cpu"):
        call(x, 1)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        call(x, 1)
    finally:
        torch.set_default_dtype(default)
    call(torch.ones(3, 2), 5)  # a new dim after the batch
    assert asked == [1, 1, 1, 1, 1, 1, 1, 1, 5]


def test_plain_calls_of_compiled_paths_take_turns():
    # torch 2.13-2.15 count a fullgraph call's compiled frames in one counter for the process:
    # overlapping calls reset each other's count, and the check after a call that ran raises
    # "found no compiled frames" without restoring the thread's dynamo settings.
    inside, release, seen = threading.Event(), threading.Event(), []

    def compiled(x):
        seen.append(("in", threading.get_ident()))
        if len(seen) == 1:
            inside.set()
            assert release.wait(timeout=60)
        seen.append(("out", threading.get_ident()))
        return x * 3

    call = _eager.eager_when_needed(_scaled, compiled, {"x": _compile.Batch(1)})
    first = threading.Thread(target=call, args=(torch.ones(2),))
    first.start()
    assert inside.wait(timeout=60)
    second = threading.Thread(target=call, args=(torch.ones(2),))
    second.start()
    second.join(timeout=0.5)  # it waits for the first call's turn, however long this lasts
    assert second.is_alive()
    release.set()
    first.join(timeout=60)
    second.join(timeout=60)
    assert [event for event, _ in seen] == ["in", "out", "in", "out"]
    assert seen[0][1] == seen[1][1] != seen[2][1] == seen[3][1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_a_plain_call_ran_can_call_too():
    assert free_in_a_forked_child(_eager, "_PLAIN_CALLS")


def test_only_the_recompile_limit_sends_a_call_to_the_eager_function():
    # The wrapper alone: a compiled call that fails for any other reason raises that error.
    limit_hit = importlib.import_module("torch._dynamo.exc").FailOnRecompileLimitHit
    shapes = {"x": _compile.Batch(1)}

    def refusing(x):
        raise limit_hit("recompile limit reached")

    def failing(x):
        raise ValueError("not a dynamo refusal")

    with pytest.warns(UserWarning, match="reached torch._dynamo's recompile limit"):
        assert _eager.eager_when_needed(_scaled, refusing, shapes)(torch.ones(2)).tolist() == [
            3,
            3,
        ]
    with pytest.raises(ValueError, match="not a dynamo refusal"):
        _eager.eager_when_needed(_scaled, failing, shapes)(torch.ones(2))


def test_the_recompile_limit_warning_names_the_workers_caller():
    # The stack the warning skips, as a worker builds it: the compiled call, _route, the method.
    limit_hit = importlib.import_module("torch._dynamo.exc").FailOnRecompileLimitHit

    def refusing(x):
        raise limit_hit("recompile limit reached")

    compiled = _eager.eager_when_needed(_scaled, refusing, {"x": _compile.Batch(1)})

    def route(x):
        return compiled(x)

    def method(x):
        return route(x)

    line = inspect.currentframe().f_lineno + 2
    with pytest.warns(UserWarning, match="recompile limit") as caught:
        method(torch.ones(2))
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)


def test_the_callers_options_are_left_as_they_were():
    # torch.compile pops its own entries (guard_filter_fn, use_aoti) out of the dict it is given.
    options = {"size_asserts": False, "guard_filter_fn": None}
    shapes = {"x": _compile.Batch(2)}
    _compile.compile_fn(_scaled, enabled=True, shapes=shapes, options=options)
    assert options == {"size_asserts": False, "guard_filter_fn": None}


def test_compiling_disabled_returns_the_function_itself():
    shapes = {"topk_index": _compile.Batch(2)}
    assert _compile.compile_fn(_organize_chain, enabled=False, shapes=shapes) is _organize_chain


@pytest.mark.parametrize(
    ("shapes", "features", "error", "match"),
    [
        (
            {"tokens": _compile.Batch(2)},
            None,
            ValueError,
            r"shapes names \['tokens'\] that are not parameters of chain_core",
        ),
        (
            {"topk_index": _compile.Batch(2, max=4), "constants": _compile.Batch(2, max=8)},
            None,
            ValueError,
            r"the arguments of chain_core sized .bs. give different max: \[4, 8\]",
        ),
        (
            {"topk_index": _compile.Batch(2)},
            _compile.TorchFeatures(None, mark_unbacked=False),
            RuntimeError,
            r"neither a shapes spec .* nor torch._dynamo.decorators.mark_unbacked",
        ),
    ],
    ids=["unknown name", "two bounds", "no feature"],
)
def test_bad_descriptions_raise(shapes, features, error, match):
    with pytest.raises(error, match=match):
        _compile.compile_fn(_organize_chain, enabled=True, shapes=shapes, features=features)


def test_unbacked_int_is_non_negative():
    with pytest.raises(ValueError, match=r"UnbackedInt\.min must be >= 0, got -1"):
        _compile.UnbackedInt(min=-1)


def test_an_isolated_copy_has_its_own_code_and_keeps_every_default():
    def add(a, b=2, *, c=3):
        return a + b + c

    copy = isolated(add, "renamed")
    assert copy.__code__ is not add.__code__
    assert copy.__code__.co_name == "renamed"
    assert copy.__name__ == "add"
    assert (copy(1), copy(1, 5), copy(1, c=10)) == (6, 9, 13)
