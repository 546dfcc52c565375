import copy
import pickle
import subprocess
import sys
import threading

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from eagle_fn import (
    DraftConfig,
    DraftOrganizer,
    _memo,
    build_verify_tree,
    chain,
    chain_constants,
    check_constants,
    organize_chain,
    organize_multilayer,
    organize_tree,
)
from helpers import reference
from helpers.asserts import assert_trees_equal
from helpers.drafts import draft_lists
from helpers.threads import in_threads


def pickle_round_trip(value):
    return pickle.loads(pickle.dumps(value))


@pytest.fixture
def fresh_cache(monkeypatch):
    """An empty memo for tests that corrupt constants or count builds."""
    monkeypatch.setattr(_memo, "_cache", {})


@pytest.mark.parametrize("num_steps", range(1, 9))
def test_chain_constant_values(num_steps, device):
    cfg = DraftConfig.chain(num_steps)
    c = chain_constants(cfg, max_bs=3, device=device)
    assert c.config == cfg
    assert c.max_bs == 3
    expected_parents = [list(range(-1, num_steps - 1))] * 3 if num_steps > 1 else [[]] * 3
    assert c.parents.shape == (3, cfg.parent_width)
    assert c.parents.tolist() == expected_parents
    assert c.score_indices.tolist() == [list(range(num_steps))] * 3
    for t in (c.parents, c.score_indices):
        assert t.dtype == torch.int64
        assert t.device == device
        # Real rows, not a stride-0 broadcast: kernels reading raw memory see every row.
        assert t.is_contiguous()
        assert t.stride(0) == t.shape[1] or t.numel() == 0


def test_same_arguments_return_the_same_objects():
    cfg = DraftConfig.chain(4)
    first = chain_constants(cfg, max_bs=8, device="cpu")
    assert chain_constants(DraftConfig.chain(4), max_bs=8, device=torch.device("cpu")) is first
    assert chain_constants(cfg, max_bs=8, device="cpu:0") is first
    assert chain_constants(cfg, max_bs=9, device="cpu") is not first
    assert chain_constants(DraftConfig.chain(5), max_bs=8, device="cpu") is not first
    elsewhere = chain_constants(cfg, max_bs=8, device="meta")  # the device is part of the key
    assert elsewhere is not first
    assert {elsewhere.parents.device.type, elsewhere.score_indices.device.type} == {"meta"}


@pytest.mark.parametrize("copier", [pickle_round_trip, copy.copy, copy.deepcopy])
def test_constants_pickle_and_copy_by_reference(fresh_cache, copier):
    # A copy with tensors of its own would sit outside the cache, where check_constants
    # never looks: unpickling and copying find (or build) the process's cached set instead.
    cfg, cpu = DraftConfig.chain(3), torch.device("cpu")
    for constants in (
        chain_constants(cfg, max_bs=4, device=cpu),
        chain.chain_verify_constants(cfg, max_bs=4, device=cpu),
    ):
        assert copier(constants) is constants


def test_unpickled_constants_are_the_other_processs_cached_ones():
    data = pickle.dumps(chain_constants(DraftConfig.chain(3), max_bs=4, device="cpu"))
    code = (
        "import pickle, sys, eagle_fn\n"
        "c = pickle.loads(sys.stdin.buffer.read())\n"
        "print(c is eagle_fn.chain_constants(eagle_fn.DraftConfig.chain(3), max_bs=4, "
        "device='cpu'), c.parents.tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, check=True)
    assert out.stdout.decode().split(maxsplit=1) == [
        "True",
        "[[-1, 0, 1], [-1, 0, 1], [-1, 0, 1], [-1, 0, 1]]\n",
    ]


def test_row_views_are_cut_on_first_use_and_kept(fresh_cache, monkeypatch):
    # Cutting every bs up front took seconds and about 300 MB of views at max_bs 65536.
    worker = DraftOrganizer(DraftConfig.chain(3), max_bs=65536, device="cpu", compile=False)
    c = chain_constants(DraftConfig.chain(3), max_bs=65536, device="cpu")
    assert c.rows == {}
    tokens = torch.zeros(5, 3, dtype=torch.int64)
    first = worker.organize(torch.zeros(5, 3), tokens)
    assert list(c.rows) == [5]
    with monkeypatch.context() as patch:  # a kept bs is looked up, not sliced again
        patch.setattr(chain.ChainConstants, "cut", lambda self, bs: pytest.fail("cut again"))
        again = organize_chain(c, tokens)
    assert again.parent_list is first.parent_list  # the kept view, not a new slice
    assert c.at(0)[0].shape == (0, 3)
    assert list(c.rows) == [5, 0]


@pytest.mark.parametrize("bs", [-1, 5])
def test_row_views_refuse_a_bs_outside_the_constants(bs):
    # Callers check bs first; this stops a slice that would silently return max_bs rows.
    c = chain_constants(DraftConfig.chain(3), max_bs=4, device="cpu")
    with pytest.raises(IndexError, match=rf"ChainConstants: bs = {bs} is outside 0..4"):
        c.at(bs)


class ArrivalCache(dict):
    """The memo's dict, noting each thread's first lookup: ``everyone_in`` is set once
    ``parties`` threads have looked the key up."""

    def __init__(self, parties):
        super().__init__()
        self.parties, self.threads, self.lock = parties, set(), threading.Lock()
        self.everyone_in = threading.Event()

    def get(self, key, default=None):
        with self.lock:
            self.threads.add(threading.get_ident())
            if len(self.threads) == self.parties:
                self.everyone_in.set()
        return super().get(key, default)


def test_concurrent_first_use_builds_once(monkeypatch):
    # The first build blocks until every thread has looked the key up, so that each one
    # races it for sure: a memo that lets a second thread build fails every time.
    cache, builds, errors, results = ArrivalCache(16), [], [], [None] * 16
    real_build = chain.ChainConstants

    def blocking_build(*args, **kwargs):
        builds.append(args)
        # The timeout only ends a hang: a memo that never looks the key up.
        assert cache.everyone_in.wait(timeout=60), "not every thread looked the key up"
        return real_build(*args, **kwargs)

    def use(i):
        try:
            results[i] = chain_constants(DraftConfig.chain(6), max_bs=32, device="cpu")
        except Exception as error:  # reported below: a thread's exception is lost otherwise
            errors.append(error)

    monkeypatch.setattr(_memo, "_cache", cache)
    monkeypatch.setattr(chain, "ChainConstants", blocking_build)
    in_threads(use, 16)
    assert errors == []
    assert len(builds) == 1
    assert all(r is results[0] for r in results)
    assert len({r.parents.data_ptr() for r in results}) == 1


def test_constants_first_built_in_inference_mode_serve_every_caller(fresh_cache):
    # Engines run under inference mode: cached inference tensors would have no version
    # counter (check() reads it) and could never meet autograd afterwards.
    cfg, tree_cfg = DraftConfig.chain(3), DraftConfig(2, 2, 4)
    scores, tokens, parents = draft_lists(tree_cfg, 2, torch.Generator().manual_seed(0))
    with torch.inference_mode():
        worker = DraftOrganizer(cfg, max_bs=4, device="cpu", compile=False)
        tree = worker.organize(torch.rand(2, 3), torch.tensor([[11, 0, 6], [5, 10, 3]]))
        worker.reconfigure(DraftConfig.chain(2))
        want = organize_tree(tree_cfg, scores, tokens, parents)  # caches the ranking's keys
    assert tree.parent_list.tolist() == [[-1, 0, 1]] * 2
    assert not chain_constants(cfg, max_bs=4, device="cpu").parents.is_inference()
    check_constants()
    with_grad = [s.clone().requires_grad_() for s in scores]  # the cached keys meet autograd
    got = organize_tree(tree_cfg, with_grad, tokens, parents)
    assert got.top_scores_index.tolist() == want.top_scores_index.tolist()


def test_a_capture_builds_capturable_values_uncached_and_refuses_the_rest(fresh_cache, monkeypatch):
    # No GPU here: the capture is simulated. Its kernels would be recorded, not run.
    monkeypatch.setattr(_memo, "_capturing", lambda: True)
    built = []
    first = _memo.memoized(("keys",), lambda: built.append(1) or len(built), capturable=True)
    second = _memo.memoized(("keys",), lambda: built.append(1) or len(built), capturable=True)
    assert (first, second) == (1, 2)  # built into each capture, never cached
    with pytest.raises(RuntimeError, match="'chain' was first needed during a CUDA graph"):
        chain_constants(DraftConfig.chain(3), max_bs=2, device="cpu")
    monkeypatch.setattr(_memo, "_capturing", lambda: False)
    cached = chain_constants(DraftConfig.chain(3), max_bs=2, device="cpu")
    monkeypatch.setattr(_memo, "_capturing", lambda: True)
    assert chain_constants(DraftConfig.chain(3), max_bs=2, device="cpu") is cached  # a hit


def test_chain_constants_are_built_outside_a_callers_compiled_region(fresh_dynamo):
    # docs/design.md: chain_constants reads torch's dispatch stack and a cache dynamo cannot
    # hash; a caller builds them outside and closes over them, as a worker does.
    cfg = DraftConfig.chain(3)
    built = chain_constants(cfg, max_bs=2, device="cpu")
    tokens = torch.tensor([[11, 0, 6], [5, 10, 3]])
    inside = torch.compile(
        lambda t: organize_chain(chain_constants(cfg, max_bs=2, device="cpu"), t),
        fullgraph=True,
        backend="eager",
    )
    with pytest.raises(torch._dynamo.exc.Unsupported):
        inside(tokens)
    outside = torch.compile(lambda t: organize_chain(built, t), fullgraph=True, backend="eager")
    assert_trees_equal(outside(tokens), organize_chain(built, tokens))


@pytest.mark.parametrize("real_first", [False, True])
def test_fake_tensor_traces_neither_read_nor_fill_the_cache(fresh_cache, real_first):
    # A trace under fake tensors (make_fx, torch.export, shape inference) must not cache fake
    # constants for real callers after it, nor meet the real ones cached before it.
    tree_cfg, chain_cfg = DraftConfig(2, 2, 4), DraftConfig.chain(3)
    lists = draft_lists(tree_cfg, 2, torch.Generator().manual_seed(0))
    chain_tokens = torch.tensor([[11, 0, 6], [5, 10, 3]])
    flat = [*(t for entries in lists for t in entries), chain_tokens]
    want = [*reference.organize_tree(tree_cfg, *lists), [[-1, 0, 1]] * 2, [[0, 1, 2]] * 2]

    def organize(*flat):
        scores, tokens, parents = flat[:2], flat[2:4], flat[4:6]
        chained = organize_chain(chain_constants(chain_cfg, max_bs=2, device="cpu"), flat[6])
        return *organize_tree(tree_cfg, scores, tokens, parents), *chained[:2]

    if real_first:
        assert [t.tolist() for t in organize(*flat)] == want
    for mode in ("fake", "symbolic"):
        traced = make_fx(organize, tracing_mode=mode)(*flat)
        assert [t.tolist() for t in traced(*flat)] == want
    got = organize(*flat)
    assert not any(isinstance(t, FakeTensor) for t in got)
    assert [t.tolist() for t in got] == want
    check_constants()


@pytest.mark.parametrize("trace", ["make_fx", "FakeTensorMode"])
def test_a_fake_trace_through_a_worker_keeps_no_fake_row_views(fresh_cache, trace):
    # The worker's constants are real (built with it), so a fake trace through it needs
    # allow_non_fake_inputs; the row views it cuts for a new bs must not be kept.
    cfg = DraftConfig.chain(2)
    w = DraftOrganizer(cfg, max_bs=4, device="cpu", compile=False)
    p, t = torch.rand(3, 2), torch.tensor([[4, 5], [6, 7], [8, 9]])
    bonus, seq_lens = torch.tensor([1, 2, 3]), torch.tensor([5, 6, 7])

    def step(p, t, bonus, seq_lens):
        return *w.organize(p, t), *w.build_verify(w.organize(p, t), bonus, seq_lens)

    if trace == "make_fx":
        make_fx(step, tracing_mode="fake", _allow_non_fake_inputs=True)(p, t, bonus, seq_lens)
    else:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            step(*(mode.from_tensor(x) for x in (p, t, bonus, seq_lens)))
    got = step(p, t, bonus, seq_lens)
    assert not any(isinstance(x, FakeTensor) for x in got)
    tree = organize_multilayer(cfg, p, t)
    want = (*tree, *build_verify_tree(cfg, tree, bonus, seq_lens))
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    check_constants()


def test_check_passes_on_untouched_constants(fresh_cache):
    chain_constants(DraftConfig.chain(3), max_bs=4, device="cpu").check()
    DraftOrganizer(DraftConfig.chain(3), max_bs=4, device="meta")  # no values to compare
    check_constants()


def test_check_catches_a_write_through_a_returned_view(fresh_cache):
    c = chain_constants(DraftConfig.chain(3), max_bs=4, device="cpu")
    tree = organize_chain(c, torch.zeros(2, 3, dtype=torch.int64))
    tree.parent_list[0, 0] = 7  # a caller that forgot the outputs are read-only
    with pytest.raises(RuntimeError, match=r"ChainConstants.parents was written in place"):
        c.check()
    with pytest.raises(RuntimeError, match="read-only"):
        check_constants()


def test_check_catches_a_returned_view_reshaped_in_place(fresh_cache):
    # The row views are handed out as they are, so an in-place reshape would reach every
    # later caller with that bs; like any in-place op it bumps the shared version counter.
    c = chain_constants(DraftConfig.chain(3), max_bs=4, device="cpu")
    organize_chain(c, torch.zeros(2, 3, dtype=torch.int64)).parent_list.unsqueeze_(0)
    with pytest.raises(RuntimeError, match=r"ChainConstants.parents was written in place"):
        c.check()


def test_check_catches_a_returned_view_rebound(fresh_cache):
    # .data = rebinds the very view every later caller with that bs gets, without a version
    # bump or a change to the constants themselves.
    c = chain_constants(DraftConfig.chain(3), max_bs=4, device="cpu")
    tree = organize_chain(c, torch.zeros(2, 3, dtype=torch.int64))
    tree.parent_list.data = torch.zeros_like(tree.parent_list)
    with pytest.raises(RuntimeError, match=r"ChainConstants.rows\[2\] no longer views"):
        c.check()


def test_check_reads_every_kept_view_strides_included(fresh_cache):
    # Kernels read raw memory: a view rebound to the same memory and shape with other
    # strides reads other cells. Every bs kept is checked, not only the first.
    c = chain_constants(DraftConfig.chain(3), max_bs=4, device="cpu")
    organize_chain(c, torch.zeros(1, 3, dtype=torch.int64))
    tree = organize_chain(c, torch.zeros(2, 3, dtype=torch.int64))
    tree.parent_list.data = c.parents.as_strided((2, 3), (1, 2))
    with pytest.raises(RuntimeError, match=r"ChainConstants.rows\[2\] no longer views"):
        c.check()


def test_check_catches_a_constant_rebound_to_other_strides(fresh_cache):
    # The same values, column-major, no version bump: only the strides tell.
    c = chain_constants(DraftConfig.chain(3), max_bs=4, device="cpu")
    c.parents.data = c.parents.t().contiguous().t()
    message = r"ChainConstants.parents changed layout to shape \[4, 3\], strides \[1, 4\]:"
    with pytest.raises(RuntimeError, match=message):
        c.check()


def test_a_value_built_in_a_capture_is_built_outside_inference_mode(monkeypatch):
    # As the cached ones are: the docstring's rule holds for capturable values too.
    monkeypatch.setattr(_memo, "_capturing", lambda: True)
    with torch.inference_mode():
        built = _memo.memoized(("mode",), torch.is_inference_mode_enabled, capturable=True)
    assert built is False


def test_check_catches_writes_that_bypass_the_version_counter(fresh_cache):
    # A raw-pointer kernel bumps no version counter; .data writes model it here.
    c = chain_constants(DraftConfig.chain(3), max_bs=4, device="cpu")
    c.score_indices.data[1, 2] = 0
    with pytest.raises(RuntimeError, match=r"ChainConstants.score_indices holds different values"):
        c.check()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"cfg": DraftConfig(2, 2, 3), "max_bs": 4, "device": "cpu"},
            ValueError,
            r"chain_constants: cfg must be a chain config \(topk == 1\), got topk = 2",
        ),
        (
            {"cfg": "chain", "max_bs": 4, "device": "cpu"},
            TypeError,
            r"cfg must be a DraftConfig, got str",
        ),
        (
            {"cfg": DraftConfig.chain(2), "max_bs": 0, "device": "cpu"},
            ValueError,
            r"max_bs must be >= 1, got 0",
        ),
        (
            {"cfg": DraftConfig.chain(2), "max_bs": 4.0, "device": "cpu"},
            TypeError,
            r"max_bs must be an int, got float",
        ),
        (
            {"cfg": DraftConfig.chain(2), "max_bs": True, "device": "cpu"},
            TypeError,
            r"max_bs must be an int, got bool",
        ),
        (
            {"cfg": DraftConfig.chain(2), "max_bs": 4, "device": 0},
            TypeError,
            r"device must be a torch.device or a str, got int",
        ),
        (
            {"cfg": DraftConfig.chain(2), "max_bs": 4, "device": "gpu"},
            ValueError,
            r"device 'gpu' is not a valid device",
        ),
        pytest.param(
            {"cfg": DraftConfig.chain(2), "max_bs": 4, "device": "cuda"},
            ValueError,
            r"device 'cuda' is not available",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available"),
        ),
    ],
)
def test_bad_arguments(kwargs, error, match):
    kwargs = dict(kwargs)  # the parametrize dict is shared: popping from it would change it
    cfg = kwargs.pop("cfg")
    with pytest.raises(error, match=match):
        chain_constants(cfg, **kwargs)
