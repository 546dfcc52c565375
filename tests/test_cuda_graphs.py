"""CUDA graphs, for real: each eager path captured once, then replayed on new inputs copied into
its static buffers, equals the eager call on those inputs; and the memo's rule for a value first
needed inside a capture (docs/design.md, the chain fast path): refused, or built into the graph,
uncached."""

import pytest
import torch
from torch.utils import _pytree as pytree

from eagle_fn import (
    DraftConfig,
    DraftOrganizer,
    MaskMode,
    _memo,
    build_verify_tree,
    chain_constants,
    organize_tree,
    select_top_k,
    target_probs_from_logits,
    verify_greedy,
    verify_sampling,
)
from eagle_fn.profiling import Launches, count_launches
from helpers.asserts import on
from helpers.drafts import draft_lists, multilayer, step_inputs
from helpers.sampling_inputs import target_rows
from helpers.trees import agreeing_target

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

TREE, CHAIN, BS, VOCAB = DraftConfig(2, 3, 6), DraftConfig.chain(3), 3, 50
CUDA = torch.device("cuda", 0)


def tensors(tree):
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def warm(fn, inputs):
    """Two calls on a side stream, as torch's capture docs advise: lazy handles, the memo, the
    contracts' caches and (on the kernels) Triton's compiles come before the capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(*inputs)
    torch.cuda.current_stream().wait_stream(side)


def captured(fn, static):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*static)
    return graph, out


def replay_on(graph, static, fresh):
    """Copies ``fresh`` into the captured inputs ``static`` and replays ``graph``."""
    for dst, src in zip(tensors(static), tensors(fresh), strict=True):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()


def assert_equal_outputs(got, want):
    assert all(torch.equal(a, b) for a, b in zip(tensors(got), tensors(want), strict=True))


def assert_replays_equal_eager(fn, inputs_for):
    """Captures ``fn(*inputs_for(0))``, then for seeds 1 and 2 replays it on
    ``inputs_for(seed)`` and compares each output bit for bit with the eager call's."""
    static = inputs_for(0)
    warm(fn, static)
    graph, out = captured(fn, static)
    for seed in (1, 2):
        fresh = inputs_for(seed)
        replay_on(graph, static, fresh)
        assert_equal_outputs(out, fn(*fresh))


def gen(seed):
    return torch.Generator().manual_seed(seed)


def lists(cfg, seed):
    return draft_lists(cfg, BS, gen(seed), "ties", CUDA)


def verify_inputs(cfg, seed):
    """An organized tree, bonus tokens and seq_lens; the seq_lens sum is the same every seed,
    as a captured FULL mask's length is."""
    g = gen(seed)
    tree = organize_tree(cfg, *lists(cfg, seed))
    bonus = torch.randint(0, VOCAB, (BS,), generator=g)
    seq_lens = torch.tensor([4, 9, 13])[torch.randperm(BS, generator=g)]
    return tree, bonus.to(CUDA), seq_lens.to(CUDA)


def verify_tree(cfg, seed):
    """A verify tree on the CPU, its draft tokens folded into the vocabulary (drafts.py draws
    them from [0, 1000)), so that targets can agree with them."""
    vt = on(build_verify_tree(cfg, *verify_inputs(cfg, seed)), "cpu")
    return vt._replace(draft_tokens=vt.draft_tokens % VOCAB)


def sampling_inputs(cfg, seed):
    """Targets with heavy mass on each node's first child: the walks go deep."""
    g, n = gen(seed), cfg.num_draft_tokens
    vt = verify_tree(cfg, seed)
    q = target_rows(vt, VOCAB, g, "agree")
    coins, final = torch.rand(BS, n, generator=g), torch.rand(BS, generator=g)
    return on(vt, CUDA), q.to(CUDA), coins.to(CUDA), final.to(CUDA)


def assert_walks_go_deep(verify, inputs):
    """The replays compared accepted walks, not only rejections at the root."""
    for seed in (1, 2):
        assert verify(*inputs(seed)).num_accepted.max() >= 2


def kernel_module():
    return pytest.importorskip("eagle_fn.kernels", reason="the kernels need triton")


MODES = [MaskMode.QLEN, MaskMode.BITPACKED, MaskMode.FULL]


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("step", [0, 1])
def test_select_step(backend, step):
    select = kernel_module().select_top_k if backend == "triton" else select_top_k
    assert_replays_equal_eager(
        lambda *args: select(TREE, step, *args),
        lambda seed: [
            t for t in step_inputs(TREE, step, BS, gen(seed), "ties", CUDA) if t is not None
        ],
    )


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_organize_tree(backend):
    organize = kernel_module().organize_tree if backend == "triton" else organize_tree
    assert_replays_equal_eager(lambda *args: organize(TREE, *args), lambda s: lists(TREE, s))


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("mode", MODES, ids=str)
def test_build_verify_tree(backend, mode):
    build = kernel_module().build_verify_tree if backend == "triton" else build_verify_tree
    total = 4 + 9 + 13  # the FULL mask's length comes from the host: no sync in the capture
    keywords = {"mask_mode": mode, "seq_lens_sum": total if mode is MaskMode.FULL else None}
    assert_replays_equal_eager(
        lambda *args: build(TREE, *args, **keywords), lambda s: verify_inputs(TREE, s)
    )


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_verify_greedy(backend):
    verify = kernel_module().verify_greedy if backend == "triton" else verify_greedy

    def inputs(seed):
        vt = verify_tree(TREE, seed)
        return on(vt, CUDA), agreeing_target(vt, gen(seed)).to(CUDA)

    assert_replays_equal_eager(lambda *args: verify(TREE, *args), inputs)
    assert_walks_go_deep(lambda *args: verify(TREE, *args), inputs)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("cfg", [TREE, CHAIN], ids=["tree", "chain"])
def test_verify_sampling(backend, cfg):
    verify = kernel_module().verify_sampling if backend == "triton" else verify_sampling

    def inputs(seed):
        vt, q, coins, final = sampling_inputs(cfg, seed)
        if not cfg.is_chain:
            return vt, q, coins, final
        p = torch.softmax(torch.randn(q.shape, generator=gen(seed + 10)), dim=-1)
        return vt, q, coins, final, p.to(CUDA)

    def call(vt, q, coins, final, p=None):
        return verify(cfg, vt, q, coins, final, draft_probs=p)

    assert_replays_equal_eager(call, inputs)
    assert_walks_go_deep(call, inputs)


def test_target_probs_from_logits():
    def inputs(seed):
        g = gen(seed)
        logits = torch.randn(BS, TREE.num_draft_tokens, VOCAB, generator=g)
        temperature = torch.tensor([0.0, 0.7, 1.3])  # a greedy row among sampled ones
        top_k, top_p = torch.tensor([0, 5, 20]), torch.tensor([1.0, 0.9, 0.5])
        return [t.to(CUDA) for t in (logits, temperature, top_k, top_p)]

    def call(logits, temperature, top_k, top_p):
        return target_probs_from_logits(logits, temperature, top_k=top_k, top_p=top_p)

    assert_replays_equal_eager(call, inputs)


@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty")  # the chain paths run no kernel
@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("cfg", [TREE, CHAIN], ids=["tree", "chain"])
def test_worker_methods(backend, cfg):
    if backend == "triton":
        kernel_module()
    worker = DraftOrganizer(cfg, max_bs=4, device=CUDA, compile=False, backend=backend)
    assert_replays_equal_eager(worker.organize_steps, lambda s: lists(cfg, s))
    if cfg.is_chain:
        assert_replays_equal_eager(
            worker.organize, lambda s: multilayer(cfg.num_steps, BS, gen(s), CUDA)
        )
    for mode in MODES:
        total = 4 + 9 + 13 if mode is MaskMode.FULL else None

        def build(*args, mode=mode, total=total):
            return worker.build_verify(*args, mask_mode=mode, seq_lens_sum=total)

        assert_replays_equal_eager(build, lambda s: verify_inputs(cfg, s))


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(_memo, "_cache", {})


@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty")
def test_a_constant_first_needed_in_a_capture_is_refused(fresh_cache):
    # _memo's own capture check, not a stand-in: the tests on CPU replace it.
    message = "'chain' was first needed during a CUDA graph capture"
    with pytest.raises(RuntimeError, match=message), torch.cuda.graph(torch.cuda.CUDAGraph()):
        chain_constants(CHAIN, max_bs=2, device=CUDA)
    assert not _memo._cache  # nothing half-built was kept
    cached = chain_constants(CHAIN, max_bs=2, device=CUDA)  # outside a capture: built, kept
    with torch.cuda.graph(torch.cuda.CUDAGraph()):
        assert chain_constants(CHAIN, max_bs=2, device=CUDA) is cached  # a hit builds nothing


def test_rank_keys_first_needed_in_a_capture_are_built_into_the_graph(fresh_cache):
    # Warmed on a config of another width, so the organize kernels' lazy setup is done, but
    # TREE's ranking keys (width num_candidates) are first needed inside the capture.
    other = DraftConfig(2, 2, 4)
    warm(lambda *args: organize_tree(other, *args), lists(other, 0))
    key = ("rank_keys", TREE.num_candidates, CUDA)
    assert key not in _memo._cache

    def organize(*args):
        return organize_tree(TREE, *args)

    static, fresh = lists(TREE, 0), lists(TREE, 1)
    graph, out = captured(organize, static)
    assert key not in _memo._cache  # built into the graph, not cached
    replay_on(graph, static, fresh)
    assert_equal_outputs(out, organize(*fresh))
    assert key in _memo._cache  # the eager call caches them


def profiled(fn, *args):
    """Kernels and copies of one call as torch.profiler's device events show them."""
    fn(*args)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    copies = sum(name.startswith(("Memcpy", "Memset")) for name in names)
    return Launches(len(names) - copies, copies)


def counted_call(name):
    """A call of each kind count_launches must count as the profiler does: elementwise ops,
    copies and fills, tens of kernels with a copy among them, a fused Triton launch."""
    x = torch.arange(4096, device=CUDA, dtype=torch.float32)
    vt = verify_tree(TREE, 0)
    target = agreeing_target(vt, gen(0)).to(CUDA)
    calls = {
        "elementwise": (lambda t: (t + 1) * 2, (x,)),
        "copies": (lambda t: (t.clone(), t.zero_(), t.new_zeros(5)), (x.clone(),)),
        "a view": (lambda t: t[:8], (x,)),
        "organize_tree": (lambda *a: organize_tree(TREE, *a), lists(TREE, 0)),
        "verify_greedy": (lambda *a: verify_greedy(TREE, *a), (on(vt, CUDA), target)),
    }
    if name.startswith("triton"):
        kernels = kernel_module()
        calls[name] = (lambda *a: kernels.organize_tree(TREE, *a), lists(TREE, 0))
    return calls[name]


@pytest.mark.parametrize(
    "name",
    ["elementwise", "copies", "a view", "organize_tree", "verify_greedy", "triton organize_tree"],
)
def test_launch_counts_are_the_profilers(name):
    fn, args = counted_call(name)
    counted = count_launches(fn, *args)
    assert counted == profiled(fn, *args)
    if name == "elementwise":
        assert counted == Launches(2, 0)
    if name == "a view":
        assert counted == Launches(0, 0)
    if name == "copies":  # a same-device contiguous clone is a memcpy (Memcpy DtoD)
        assert counted.copies >= 1
