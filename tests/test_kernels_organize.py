"""The fused organize and select kernels equal the torch functions bit for bit, in one op."""

from helpers import kernel_support  # noqa: I001  (first: it turns on the interpreter before the kernels load)
import contextlib
import math
from unittest import mock

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from torch._dynamo.utils import counters

from helpers.drafts import KINDS, configs, draft_lists, multilayer, step_inputs
from eagle_fn import DraftConfig, DraftOrganizer, _compile, kernels, organize_tree, select_top_k
from eagle_fn.kernels import _slots
from eagle_fn.kernels._ops import launcher
from eagle_fn.kernels import organize as kernel_organize
from eagle_fn.kernels import selection as kernel_selection
from eagle_fn.profiling import OpCounter
from helpers import reference
from helpers.asserts import assert_matches, assert_trees_equal
from helpers.layouts import aliased_fields, call_untouched, layout_cases, one_buffer_per_list
from helpers.profiles import examples
from helpers.kernel_support import (
    KERNEL_DEVICE,
    KERNEL_DEVICES,
    NO_INTERPRETER,
    SCORE_DTYPES,
    NoLaunch,
    checked_launch,
    hard_scores,
    refusals_without_interpreter,
    resolved,
)

pytestmark = kernel_support.SKIP_WHEN_UNRUNNABLE

# The interpreter runs a kernel in Python: keep the property tests to small drafts.
FEW = examples(25)
# Seeds of the torch generators that draw tokens and parents: hypothesis draws and shrinks
# them, where torch's global generator would differ on every run.
SEEDS = st.integers(0, 2**32 - 1)


@pytest.fixture(params=KERNEL_DEVICES)
def device(request):
    return torch.device(request.param)


def assert_steps_equal(actual, expected, device):
    for name, a in zip(actual._fields, actual, strict=True):
        assert a.device == resolved(device), name
    assert_trees_equal(actual, expected)


def assert_organize_matches(cfg, lists, device):
    tree = kernels.organize_tree(cfg, *lists)
    for field in tree:
        assert field.device == resolved(device)
    assert_trees_equal(tree, organize_tree(cfg, *lists))


# The organize kernel ranks a row by one of two algorithms, picked by its width: by counting
# pairs (rows of at most RANK_WIDTH, or past SELECT_WIDTH) or by a threshold. ``ranking_by``
# forces one for every width, so that the small rows hypothesis draws test each;
# test_each_width_ranks_by_its_path checks which one each width takes unforced.
PATHS = ("threshold", "pairs")


@contextlib.contextmanager
def ranking_by(path):
    rank, select = {"threshold": (0, kernel_organize.SELECT_WIDTH), "pairs": (0, 0)}[path]

    def takes_path(args, options):
        assert options["BY_RANK"] is (path == "pairs"), options

    launch = checked_launch(kernel_organize, takes_path)
    with mock.patch.multiple(kernel_organize, RANK_WIDTH=rank, SELECT_WIDTH=select, launch=launch):
        yield


def assert_follows_the_rule(cfg, lists, device, path=None):
    """The kernel selects as the loop reference of the rule. ``path`` forces a ranking."""
    with ranking_by(path) if path else contextlib.nullcontext():
        tree = kernels.organize_tree(cfg, *lists)
    parent_list, top, tokens = reference.organize_tree(cfg, *lists)
    assert tree.top_scores_index.tolist() == top
    assert tree.draft_tokens.tolist() == tokens
    assert tree.parent_list.tolist() == parent_list
    assert tree.top_scores_index.device == resolved(device)


# --- organize_tree -------------------------------------------------------------------------


def test_organize_by_hand(device):
    # organize_tree's docstring example: candidates .6 .4 | .3 .3 .36 .04; the best three are
    # flat 0, 1, 4.
    cfg = DraftConfig(topk=2, num_steps=2, num_draft_tokens=4)
    scores = [torch.tensor([[[0.6, 0.4]]]), torch.tensor([[[0.3, 0.3], [0.36, 0.04]]])]
    tokens = [torch.tensor([[7, 9]]), torch.tensor([[1, 2, 3, 4]])]
    parents = [torch.tensor([[-1, 0, 1]]), torch.tensor([[4, 2]])]
    lists = [[t.to(device) for t in step] for step in (scores, tokens, parents)]
    tree = kernels.organize_tree(cfg, *lists)
    assert tree.top_scores_index.tolist() == [[0, 1, 4]]
    assert tree.draft_tokens.tolist() == [[7, 9, 3]]
    assert tree.parent_list.tolist() == [[-1, 0, 1]]


@pytest.mark.parametrize("cfg", configs(), ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_organize_equals_torch_on_draft_loops(cfg, kind, device):
    gen = torch.Generator().manual_seed(cfg.num_candidates)
    for dtype in SCORE_DTYPES:
        assert_organize_matches(cfg, draft_lists(cfg, 3, gen, kind, device, dtype), device)


@st.composite
def organize_cases(draw):
    """(cfg, lists) with arbitrary scores, tokens and parent entries, any dtype mix."""
    k, steps = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    width = k + (steps - 1) * k * k
    n = steps + 1 if k == 1 else draw(st.integers(2, width + 1))
    cfg = DraftConfig(k, steps, n)
    bs, gen = draw(st.integers(0, 3)), torch.Generator().manual_seed(draw(SEEDS))
    mixed = draw(st.booleans())
    first = draw(st.sampled_from(SCORE_DTYPES))
    choose = lambda n: draw(st.integers(0, n - 1))  # noqa: E731
    score_list, token_list, parents_list = [], [], []
    for i in range(steps):
        dtype = draw(st.sampled_from(SCORE_DTYPES)) if mixed else first
        rows = 1 if i == 0 else k
        values = [hard_scores(choose, rows * k, dtype) for _ in range(bs)]
        score_list.append(torch.tensor(values, dtype=dtype).reshape(bs, rows, k))
        token_list.append(torch.randint(0, 1000, (bs, rows * k), generator=gen))
        parents_list.append(torch.randint(-1, width, (bs, k + (i == 0)), generator=gen))
    return cfg, (score_list, token_list, parents_list)


@FEW
@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("path", PATHS)
@given(case=organize_cases())
def test_organize_equals_torch_on_arbitrary_lists(case, path, device):
    cfg, lists = case
    with ranking_by(path):
        assert_organize_matches(cfg, [[t.to(device) for t in step] for step in lists], device)


# Every value the rule orders, repeats allowed: signed zeros and infinities, NaN of either
# sign, subnormals, and equal negative scores.
RULE_VALUES = (0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0**-24, -(2.0**-24), 2.0**-133)
RULE_VALUES += (float("inf"), float("-inf"), float("nan"), -float("nan"))


@st.composite
def rule_cases(draw):
    """(cfg, lists) of scores drawn from a few of RULE_VALUES, so that most rows tie."""
    k, steps = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    width = k + (steps - 1) * k * k
    cfg = DraftConfig(k, steps, steps + 1 if k == 1 else draw(st.integers(2, width + 1)))
    bs, dtype = draw(st.integers(1, 2)), draw(st.sampled_from(SCORE_DTYPES))
    values = st.sampled_from(draw(st.lists(st.sampled_from(RULE_VALUES), min_size=1)))
    score_list = [
        torch.tensor(draw(st.lists(values, min_size=bs * k, max_size=bs * k)), dtype=dtype)
    ]
    for _ in range(steps - 1):
        row = draw(st.lists(values, min_size=bs * k * k, max_size=bs * k * k))
        score_list.append(torch.tensor(row, dtype=dtype))
    score_list = [s.reshape(bs, -1, k) for s in score_list]  # [bs, 1 or k, k]
    gen = torch.Generator().manual_seed(draw(SEEDS))
    token_list = [torch.randint(0, 1000, (bs, s[0].numel()), generator=gen) for s in score_list]
    parents = [torch.randint(-1, width, (bs, k + (i == 0)), generator=gen) for i in range(steps)]
    return cfg, (score_list, token_list, parents)


@FEW
@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("path", PATHS)
@given(case=rule_cases())
def test_organize_follows_the_rule_on_ties_of_every_kind(case, path, device):
    cfg, lists = case
    assert_follows_the_rule(cfg, [[t.to(device) for t in step] for step in lists], device, path)


def by_hand_lists(scores, device, dtype):
    """k 2, S 2 lists with the given six scores, tokens 10 + g and the parents [-1, 0, 1]."""
    score_list = [torch.tensor([[scores[:2]]]), torch.tensor([[scores[2:4], scores[4:]]])]
    token_list = [torch.tensor([[10, 11]]), torch.tensor([[12, 13, 14, 15]])]
    parents_list = [torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1]])]
    scores = [s.to(device, dtype) for s in score_list]
    return scores, [t.to(device) for t in token_list], [p.to(device) for p in parents_list]


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", SCORE_DTYPES, ids=str)
@pytest.mark.parametrize(
    ("scores", "n", "expected"),
    [
        ([-0.0, 0.0, 0.0, -0.0, -0.0, 0.0], 4, [0, 1, 2]),  # +-0 tie: by index
        ([-0.0, -1.0, 0.0, -0.0, -2.0, 0.0], 4, [0, 2, 3]),  # the zeros beat the negatives
        ([0.5] * 6, 4, [0, 1, 2]),  # all equal
        ([0.5, 0.25, 0.5, 0.25, 0.5, 0.25], 6, [0, 1, 2, 3, 4]),  # the cut among equal 0.25s
        ([1.0, 0.5, 0.25, 0.5, 0.25, 0.125], 4, [0, 1, 3]),  # the cut right after a tie
        ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 7, [0, 1, 2, 3, 4, 5]),  # N - 1 == W: all of them
        ([NAN, -INF, -NAN, -INF, NAN, 1.0], 4, [0, 1, 5]),  # NaN is -inf: all tie but 1.0
        ([-1.0, -1.0, INF, -1.0, INF, INF], 5, [0, 2, 4, 5]),  # repeated +inf, equal negatives
        ([2.0**-24, 0.0, -(2.0**-24), 2.0**-24, 0.0, -0.0], 3, [0, 3]),  # subnormals in float16
    ],
)
def test_organize_by_hand_on_ties(scores, n, expected, dtype, path, device):
    cfg = DraftConfig(2, 2, n)
    with ranking_by(path):
        tree = kernels.organize_tree(cfg, *by_hand_lists(scores, device, dtype))
    assert tree.top_scores_index.tolist() == [expected]
    assert tree.draft_tokens.tolist() == [[10 + g for g in expected]]
    assert tree.parent_list.tolist() == [[-1, 0, 1]]


@pytest.mark.parametrize("path", PATHS)
def test_organize_selects_a_whole_block(path, device):
    # 16 candidates, 16 lanes, all selected: no padding lane below the threshold.
    cfg = DraftConfig.chain(16)
    scores = [torch.full((2, 1, 1), 0.5, device=device) for _ in range(16)]
    tokens = [torch.full((2, 1), i, device=device) for i in range(16)]
    parents = [torch.full((2, 2 if i == 0 else 1), i - 1, device=device) for i in range(16)]
    with ranking_by(path):
        tree = kernels.organize_tree(cfg, scores, tokens, parents)
    assert tree.top_scores_index.tolist() == [list(range(16))] * 2
    assert tree.draft_tokens.tolist() == [list(range(16))] * 2


@pytest.mark.parametrize(
    "cfg",
    [
        DraftConfig(8, 8, 64),
        DraftConfig(8, 8, 457),
        DraftConfig(16, 5, 300),
        DraftConfig(32, 3, 99),
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", SCORE_DTYPES, ids=str)
def test_organize_follows_the_rule_on_wide_rows(cfg, dtype, device):
    # 456, 1040 and 2080 candidates select by threshold (blocks of 512, 2048 and 4096; 4, 2
    # and 2 bits a round), on hard values that often tie below the cut.
    gen = torch.Generator().manual_seed(cfg.num_candidates)
    choose = lambda n: int(torch.randint(0, n, (), generator=gen))  # noqa: E731
    score_list, token_list, parents_list = [], [], []
    for i in range(cfg.num_steps):
        rows = 1 if i == 0 else cfg.topk
        values = [hard_scores(choose, rows * cfg.topk, dtype) for _ in range(2)]
        score_list.append(torch.tensor(values, dtype=dtype).reshape(2, rows, -1).to(device))
        token_list.append(torch.randint(0, 1000, (2, rows * cfg.topk), generator=gen))
        parents_list.append(torch.randint(-1, 9, (2, cfg.topk + (i == 0)), generator=gen))
    lists = (score_list, [t.to(device) for t in token_list], [p.to(device) for p in parents_list])
    assert_follows_the_rule(cfg, lists, device)


@pytest.mark.parametrize(
    ("steps", "by_rank", "width_block"),
    [(64, True, 64), (65, False, 128), (4096, False, 4096), (4097, True, 64)],
)
def test_each_width_ranks_by_its_path(steps, by_rank, width_block):
    # A chain of S steps has S candidates: rows of at most RANK_WIDTH (64) count pairs in one
    # tile, wider ones select by threshold in one block up to SELECT_WIDTH (4096), and past
    # it they count pairs again, tile by tile.
    widths = kernel_organize.RANK_WIDTH, kernel_organize.SELECT_WIDTH
    _, constants = kernel_organize._launch_plan(1, steps, steps + 1, False, widths)
    assert constants["W"] == steps
    assert constants["BY_RANK"] is by_rank
    assert constants["BLOCK"] == width_block


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("steps", [_slots.MAX_SLOTS, _slots.MAX_SLOTS + 1, 18])
def test_organize_reads_more_steps_than_slots(path, steps, device):
    # Past MAX_SLOTS steps the op concatenates the tail of each list into its last kernel
    # slot. 18 steps, 70 candidates: two tiles when counting pairs.
    cfg = DraftConfig(2, steps, steps + 2)
    gen = torch.Generator().manual_seed(steps)
    with ranking_by(path):
        assert_organize_matches(cfg, draft_lists(cfg, 2, gen, "ties", device), device)


def test_counting_pairs_carries_the_count_over_many_tiles(device):
    # 136 candidates, three 64-wide tiles: each tile writes after those the earlier tiles chose.
    cfg = DraftConfig(8, 3, 40)
    gen = torch.Generator().manual_seed(5)
    with ranking_by("pairs"):
        assert_organize_matches(cfg, draft_lists(cfg, 3, gen, "ties", device), device)


def test_organize_launch_takes_38_arguments(monkeypatch):
    # Triton's launcher binds and hashes every argument in Python on each call, None slots
    # included (docs/kernels.md): 8 slots a list, 3 lists, 3 outputs, 10 constants, warps.
    launches = []
    monkeypatch.setattr(kernel_organize, "launch", lambda *a, **k: launches.append((a, k)))
    cfg = DraftConfig(4, 4, 16)
    gen = torch.Generator().manual_seed(0)
    kernels.organize_tree(cfg, *draft_lists(cfg, 2, gen, device=KERNEL_DEVICE))
    ((args, options),) = launches
    assert args[0] == 2  # programs: one per request
    positional = args[1:]  # after the grid
    assert len(positional) + len(options) == 38
    assert sum(a is None for a in positional) == 13  # 4 + 4 + 5 unused slots


@pytest.mark.parametrize(("steps", "cats"), [(8, 0), (9, 2), (10, 3)])
def test_more_steps_than_slots_cost_a_cat_per_longer_list(monkeypatch, steps, cats):
    # docs/kernels.md: a list of more than 8 entries is passed with its tail concatenated into
    # the last slot; the parents pass parents_list[:-1], one entry fewer.
    monkeypatch.setattr(kernel_organize, "launch", lambda *a, **k: None)
    cfg = DraftConfig(2, steps, steps + 2)
    lists = [list(entries) for entries in draft_lists(cfg, 2, torch.Generator().manual_seed(0))]
    with OpCounter() as counter:  # the op body itself: through the op, its ops are hidden
        kernel_organize._organize_tree(*lists, cfg.topk, cfg.num_draft_tokens)
    assert counter.ops["aten.cat.default"] == cats


def test_organize_reads_strided_inputs(device):
    cfg = DraftConfig(3, 3, 8)
    gen = torch.Generator().manual_seed(3)
    scores, tokens, parents = draft_lists(cfg, 2, gen, "smooth", device)
    scores = [s.transpose(1, 2).contiguous().transpose(1, 2) for s in scores]  # column-major
    tokens = [torch.stack([t, t], dim=2)[:, :, 0] for t in tokens]  # row stride 2 * width
    assert not scores[1].is_contiguous()
    assert not tokens[1].is_contiguous()
    assert_organize_matches(cfg, (scores, tokens, parents), device)


# --- engine layouts -------------------------------------------------------------------------
# A serving engine hands over views: rows of [max_bs, ...] buffers, columns of per-step
# buffers, transposed or broadcast tensors. Each must give the contiguous call's values, from
# the kernel and the torch function alike, and leave every byte of the inputs' memory alone.

LAYOUT_CFGS = [DraftConfig(2, 3, 6), DraftConfig.chain(3)]
LAYOUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# What a DraftStep may hand back as a view of its inputs (docs/semantics.md §3).
STEP_VIEWS = {0: {"input_ids", "scores", "score_entry", "token_entry"}, 1: {"token_entry"}}


@pytest.mark.parametrize("cfg", LAYOUT_CFGS, ids=str)
@pytest.mark.parametrize("step", [0, 1])
@pytest.mark.parametrize("bs", [0, 1, 3])
def test_select_reads_engine_layouts(cfg, step, bs, device):
    gen = torch.Generator().manual_seed(bs)
    for dtype in LAYOUT_DTYPES:
        inputs = [
            t for t in step_inputs(cfg, step, bs, gen, "ties", device, dtype) if t is not None
        ]
        want = select_top_k(cfg, step, *inputs)
        expected = reference.select_top_k(cfg, step, *(t.cpu() for t in inputs))
        for name, value in zip(want._fields, want, strict=True):
            assert_matches(value, expected[name], value.shape)
        for layout, tensors in layout_cases(inputs):
            views = select_top_k(cfg, step, *tensors)
            assert aliased_fields(views, tensors) <= STEP_VIEWS[step], layout
            got = call_untouched(kernels.select_top_k, tensors, cfg, step, *tensors)
            assert_steps_equal(got, want, device)
            assert_same_views(got, views, tensors, layout)


def assert_same_views(got, want, inputs, layout):
    """The kernel hands back the torch function's views of ``inputs``: the same fields, each
    the same memory, shape and strides (a compiled consumer guards on the strides)."""
    assert aliased_fields(got, inputs) == aliased_fields(want, inputs), layout
    for name in aliased_fields(want, inputs):
        a, w = getattr(got, name), getattr(want, name)
        assert (a.data_ptr(), a.shape, a.stride()) == (w.data_ptr(), w.shape, w.stride()), name


@pytest.mark.parametrize("cfg", [*LAYOUT_CFGS, DraftConfig.chain(10)], ids=str)
@pytest.mark.parametrize("bs", [0, 1, 3])
def test_organize_reads_engine_layouts(cfg, bs, device):
    # chain(10) passes its last three steps in one slot (a cat); a step-0 parents entry is
    # the same in every row, so an engine may broadcast it (the "expanded" layout).
    gen = torch.Generator().manual_seed(bs)
    worker = DraftOrganizer(cfg, max_bs=4, device=device, backend="triton", compile=False)
    steps = cfg.num_steps
    for dtype in LAYOUT_DTYPES:
        lists = draft_lists(cfg, bs, gen, "ties", device, dtype)
        want = organize_tree(cfg, *lists)
        assert reference.as_lists(want) == reference.organize_tree(cfg, *lists)
        for layout, tensors in layout_cases([t for entries in lists for t in entries]):
            split = [tensors[i * steps : (i + 1) * steps] for i in range(3)]
            for organize in (kernels.organize_tree, organize_tree):
                got = call_untouched(organize, tensors, cfg, *split)
                assert_steps_equal(got, want, device)
                assert not aliased_fields(got, tensors), layout
            got = call_untouched(worker.organize_steps, tensors, *split)
            assert_steps_equal(got, want, device)
            assert not aliased_fields(got, tensors), layout


@pytest.mark.parametrize("cfg", [*LAYOUT_CFGS, DraftConfig(2, 9, 8)], ids=str)
@pytest.mark.parametrize("bs", [0, 1, 3])
def test_organize_reads_one_engine_buffer_per_list(cfg, bs, device):
    # An engine's draft loop writes each step's entries side by side into one preallocated
    # buffer per list, and the lists hold views of it (9 steps: the last slot is a cat).
    gen = torch.Generator().manual_seed(bs)
    worker = DraftOrganizer(cfg, max_bs=4, device=device, backend="triton", compile=False)
    lists = draft_lists(cfg, bs, gen, "ties", device, torch.bfloat16)
    want = organize_tree(cfg, *lists)
    buffers, views = one_buffer_per_list(lists)
    calls = [(kernels.organize_tree, cfg), (organize_tree, cfg), (worker.organize_steps,)]
    for organize, *config in calls:
        got = call_untouched(organize, buffers, *config, *views)
        assert_steps_equal(got, want, device)
        assert not aliased_fields(got, buffers), organize


@pytest.mark.filterwarnings("ignore::eagle_fn.MaxBatchWarning")
@pytest.mark.parametrize("bs", [0, 1, 3, 5])
def test_worker_organizes_engine_layouts(bs, device):
    # Within max_bs a chain takes the constants and hands topk_index back as the tokens
    # (docs/semantics.md §4); past it, the general path computes fresh tensors.
    cfg = DraftConfig.chain(3)
    worker = DraftOrganizer(cfg, max_bs=4, device=device, backend="triton", compile=False)
    gen = torch.Generator().manual_seed(bs)
    inputs = [t.to(device) for t in multilayer(3, bs, gen)]
    want = reference.organize_chain(3, inputs[1].cpu())
    views = {"draft_tokens"} if 0 < bs <= 4 else set()
    for layout, tensors in layout_cases(inputs):
        got = call_untouched(worker.organize, tensors, *tensors)
        assert reference.as_lists(got) == want, layout
        assert aliased_fields(got, tensors) == views, layout


# --- select_top_k ---------------------------------------------------------------------------


def test_select_by_hand(device):
    # expand = [[.30, .30], [.36, .04]]: .36 (position 2) first, then the tie at 0 over 1.
    cfg = DraftConfig(topk=2, num_steps=3, num_draft_tokens=5)
    p = torch.tensor([[0.5, 0.5], [0.9, 0.1]], device=device)
    index = torch.tensor([[1, 2], [3, 4]], device=device)
    out = kernels.select_top_k(cfg, 2, p, index, torch.tensor([[0.6, 0.4]], device=device))
    assert out.input_ids.tolist() == [3, 1]
    assert out.hidden_index.tolist() == [1, 0]
    assert out.parents_entry.tolist() == [[8, 6]]  # step 2 starts at flat index 2 + 4 = 6


@pytest.mark.parametrize("cfg", configs(), ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_select_equals_torch_on_draft_inputs(cfg, kind, device):
    gen = torch.Generator().manual_seed(cfg.num_candidates)
    for dtype in SCORE_DTYPES:
        for step in range(min(cfg.num_steps, 3)):
            inputs = step_inputs(cfg, step, 3, gen, kind, device, dtype)
            out = kernels.select_top_k(cfg, step, *inputs)
            assert_steps_equal(out, select_top_k(cfg, step, *inputs), device)


@st.composite
def select_cases(draw):
    """(cfg, step, topk_p, topk_index, scores) with hard values of either sign."""
    k, steps = draw(st.integers(1, 5)), draw(st.integers(2, 4))
    cfg = DraftConfig(k, steps, steps + 1 if k == 1 else 2)
    step, bs = draw(st.integers(1, steps - 1)), draw(st.integers(0, 3))
    p_dtype = draw(st.sampled_from(SCORE_DTYPES))
    s_dtype = draw(st.sampled_from(SCORE_DTYPES)) if draw(st.booleans()) else p_dtype
    choose = lambda n: draw(st.integers(0, n - 1))  # noqa: E731
    p = [hard_scores(choose, k, p_dtype) for _ in range(bs * k)]
    s = [hard_scores(choose, k, s_dtype) for _ in range(bs)]
    p = torch.tensor(p, dtype=p_dtype).reshape(bs * k, k)
    s = torch.tensor(s, dtype=s_dtype).reshape(bs, k)
    index = torch.randint(
        0, 1000, (bs * k, k), generator=torch.Generator().manual_seed(draw(SEEDS))
    )
    return cfg, step, p, index, s


def two_infs():
    """Found by the soak profile (2026-12-02): request 2's parent 2 scores -inf, and so do
    two of its children: their products are +inf twice."""
    p, scores = torch.zeros(15, 5, dtype=torch.float16), torch.zeros(3, 5, dtype=torch.float16)
    p[12, 2:4] = scores[2, 2] = -math.inf  # [bs * k, k] row 2 * 5 + 2, [bs, k]
    return DraftConfig(5, 2, 2), 1, p, torch.arange(75).view(15, 5), scores


@FEW
@pytest.mark.parametrize("device", KERNEL_DEVICES)
# The interpreter multiplies with NumPy, which warns on the -inf * 0 of these scores.
@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply:RuntimeWarning")
@given(case=select_cases())
@example(case=two_infs())
def test_select_equals_torch_on_hard_values(case, device):
    cfg, step, p, index, scores = case
    args = (p.to(device), index.to(device), scores.to(device))
    out = kernels.select_top_k(cfg, step, *args)
    assert_steps_equal(out, select_top_k(cfg, step, *args), device)
    expected = reference.select_top_k(cfg, step, p, index, scores)
    for name, values in expected.items():
        actual = getattr(out, name)
        assert_matches(actual, values, actual.shape)


@pytest.mark.parametrize("dtype", SCORE_DTYPES, ids=str)
def test_select_rounds_every_product_like_torch(dtype, device):
    # Random bit patterns of [0, 1) in each dtype: the products round exactly as ATen's.
    cfg = DraftConfig(8, 2, 9)
    gen = torch.Generator().manual_seed(8)
    p = torch.rand(4 * 8, 8, generator=gen, dtype=torch.float64).to(dtype).to(device)
    scores = torch.rand(4, 8, generator=gen, dtype=torch.float64).to(dtype).to(device) * 1e-3
    out = kernels.select_top_k(
        cfg, 1, p, torch.zeros(32, 8, dtype=torch.int64, device=device), scores
    )
    expand = scores.unsqueeze(2) * p.view(4, 8, 8)
    assert torch.equal(out.score_entry.view(torch.uint8), expand.view(torch.uint8))  # bits


@pytest.mark.parametrize("k", [9, 12])
@pytest.mark.parametrize("kind", ["ties", "nan"])
def test_select_ranks_across_tiles(k, kind, device):
    # k * k > 64 candidates: the ranking runs over several 64-wide tiles.
    cfg = DraftConfig(k, 2, 2)
    gen = torch.Generator().manual_seed(k)
    for dtype in (torch.bfloat16, torch.float64):
        inputs = step_inputs(cfg, 1, 2, gen, kind, device, dtype)
        assert_steps_equal(
            kernels.select_top_k(cfg, 1, *inputs), select_top_k(cfg, 1, *inputs), device
        )


# --- shared properties ---------------------------------------------------------------------


def test_batch_of_zero(device):
    cfg = DraftConfig(4, 3, 8)
    gen = torch.Generator().manual_seed(0)
    assert_organize_matches(cfg, draft_lists(cfg, 0, gen, "smooth", device), device)
    for step in range(2):
        inputs = step_inputs(cfg, step, 0, gen, "smooth", device)
        assert_steps_equal(
            kernels.select_top_k(cfg, step, *inputs), select_top_k(cfg, step, *inputs), device
        )


def op_cases(device):
    cfg = DraftConfig(4, 3, 8)
    gen = torch.Generator().manual_seed(1)
    scores, tokens, parents = draft_lists(cfg, 2, gen, "ties", device, torch.bfloat16)
    p, index, prev = step_inputs(cfg, 1, 2, gen, "ties", device)  # opcheck: NaN != NaN
    empty = [t[:0] for t in scores], [t[:0] for t in tokens], [t[:0] for t in parents]
    return [
        (kernel_organize.organize_tree_op, (scores, tokens, parents, 4, 8)),
        (kernel_organize.organize_tree_op, (*empty, 4, 8)),
        (kernel_selection.first_step_op, (index[:2], 4)),
        (kernel_selection.first_step_op, (index[:0], 4)),
        (kernel_selection.next_step_op, (p, index, prev, 4, 4)),
        (kernel_selection.next_step_op, (p[:0], index[:0], prev[:0], 4, 4)),
    ]


def test_opcheck_every_op(device):
    for op, args in op_cases(device):
        torch.library.opcheck(op, args)


def test_empty_batch_launches_nothing(device, monkeypatch):
    # docs/kernels.md: a batch of 0 launches nothing; the op returns its empty outputs.
    cfg = DraftConfig(4, 3, 8)
    for name in ("launch_first", "launch_next"):
        monkeypatch.setattr(kernel_selection, name, launcher(NoLaunch()))
    monkeypatch.setattr(kernel_organize, "launch", launcher(NoLaunch()))
    gen = torch.Generator().manual_seed(0)
    for bs, stopped in ((0, False), (1, True)):  # one request: the control, stopped
        lists = draft_lists(cfg, bs, gen, device=device)
        first = step_inputs(cfg, 0, bs, gen, device=device)[:2]
        later = step_inputs(cfg, 1, bs, gen, device=device)
        calls = [
            (kernels.organize_tree, organize_tree, (cfg, *lists)),
            (kernels.select_top_k, select_top_k, (cfg, 0, *first)),
            (kernels.select_top_k, select_top_k, (cfg, 1, *later)),
        ]
        for fused, torch_function, args in calls:
            if stopped:
                with pytest.raises(AssertionError, match=r"launched on grid \(1,\)"):
                    fused(*args)
            else:
                assert_trees_equal(fused(*args), torch_function(*args))


def test_each_public_call_dispatches_one_op(device):
    cfg = DraftConfig(4, 3, 8)
    gen = torch.Generator().manual_seed(2)
    lists = draft_lists(cfg, 2, gen, "smooth", device)
    first = step_inputs(cfg, 0, 2, gen, "smooth", device)[:2]
    later = step_inputs(cfg, 1, 2, gen, "smooth", device)
    calls = [
        ("organize_tree", lambda: kernels.organize_tree(cfg, *lists)),
        ("select_top_k_first", lambda: kernels.select_top_k(cfg, 0, *first)),
        ("select_top_k_next", lambda: kernels.select_top_k(cfg, 1, *later)),
    ]
    for name, call in calls:
        with OpCounter() as counter:
            call()
        assert dict(counter.ops) == {f"eagle_fn.{name}.default": 1}, name


ONE_STEP = DraftConfig(2, 1, 2)


@pytest.mark.parametrize(
    ("args", "error", "names"),
    [
        (("cfg", [], [], []), TypeError, "cfg"),  # not a DraftConfig
        ((DraftConfig(2, 2, 3), [], [], []), ValueError, "score_list"),  # too short
        (
            (ONE_STEP, [torch.zeros(1, 1, 2)], [torch.zeros(1, 2)], [torch.zeros(1, 3)]),
            TypeError,
            "token_list[0]",
        ),
        (
            (ONE_STEP, [torch.zeros(1, 2)], [torch.zeros(1, 2)], [torch.zeros(1, 3)]),
            ValueError,
            "score_list[0]",
        ),
    ],
    ids=["cfg", "length", "token dtype", "score rank"],
)
def test_organize_rejects_what_torch_rejects(args, error, names):
    with pytest.raises(error) as expected:
        organize_tree(*args)
    with pytest.raises(error) as actual:
        kernels.organize_tree(*args)
    assert str(actual.value) == str(expected.value)
    # A clear message: the entry point, then the offending argument.
    assert str(actual.value).startswith(f"organize_tree: {names} ")


@pytest.mark.parametrize(
    ("step", "shapes", "error", "names"),
    [
        (3, [(2, 2), (2, 2), None], ValueError, "step"),  # out of range
        (0, [(2, 3), (2, 2), None], ValueError, "topk_p"),  # not [bs, topk]
        (1, [(4, 2), (4, 2), None], ValueError, "scores"),  # missing
        (1, [(4, 2), (4, 2), (3, 2)], ValueError, "topk_p"),  # not [bs * topk, topk]
    ],
)
def test_select_rejects_what_torch_rejects(step, shapes, error, names):
    cfg = DraftConfig(2, 3, 4)
    p, index, scores = (None if s is None else torch.ones(s) for s in shapes)
    args = (cfg, step, p, index.long(), scores)
    with pytest.raises(error) as expected:
        select_top_k(*args)
    with pytest.raises(error) as actual:
        kernels.select_top_k(*args)
    assert str(actual.value) == str(expected.value)
    assert str(actual.value).startswith(f"select_top_k: {names} ")


@pytest.mark.compiled
def test_a_kernel_chain_loop_on_buffer_columns_compiles_once(fresh_dynamo):
    # An engine's chain draft loop reads each step from a column of one buffer. The kernel's
    # steps feed a compiled organize one graph for every bs, as the torch function's do: at
    # bs 1 its token_entry had been topk_index reshaped, strides (1, 1) for the column's
    # (W, 1), and the organize compiled a second graph for them.
    cfg = DraftConfig.chain(3)
    worker = DraftOrganizer(cfg, max_bs=8, device=KERNEL_DEVICE, backend="triton", compile=True)
    gen = torch.Generator().manual_seed(2)
    probs = torch.rand(8, 4, generator=gen).to(KERNEL_DEVICE)
    tokens = torch.randint(0, 50, (8, 4), generator=gen).to(KERNEL_DEVICE)
    for bs in (3, 1, 2):
        step = kernels.select_top_k(cfg, 0, probs[:bs, :1], tokens[:bs, :1])
        steps = [step]
        for i in (1, 2):
            column = probs[:bs, i : i + 1], tokens[:bs, i : i + 1]
            steps.append(step := kernels.select_top_k(cfg, i, *column, step.scores))
        lists = [
            [getattr(s, f) for s in steps] for f in ("score_entry", "token_entry", "parents_entry")
        ]
        assert_trees_equal(worker.organize_steps(*lists), organize_tree(cfg, *lists))
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]


@pytest.mark.compiled
def test_compiled_with_a_dynamic_batch_equals_eager(device):
    # The worker's compile: fullgraph, unbacked batch. One graph per function over every bs,
    # no breaks. The ops trace into the kernel launch on a GPU, and stay an opaque call under
    # the interpreter, whose kernels cannot run on the fake tensors tracing uses.
    cfg = DraftConfig(4, 3, 8)
    lists_of = cfg.num_steps
    organize = _compile.compile_fn(
        kernel_organize.tree_core,
        enabled=True,
        shapes={
            "score_list": _compile.Batch(3, length=lists_of),
            "token_list": _compile.Batch(2, length=lists_of),
            "parents_list": _compile.Batch(2, length=lists_of),
        },
    )
    rows = _compile.Batch(2, rows=cfg.topk)  # [bs * k, k]
    step = _compile.compile_fn(
        kernel_selection.next_step,
        enabled=True,
        shapes={"topk_p": rows, "topk_index": rows, "scores": _compile.Batch(2)},
    )
    gen = torch.Generator().manual_seed(4)
    torch._dynamo.reset()
    counters.clear()
    for batch in (2, 1, 0, 3):
        lists = draft_lists(cfg, batch, gen, "ties", device)
        assert_trees_equal(organize(cfg, *lists), organize_tree(cfg, *lists))
        inputs = step_inputs(cfg, 1, batch, gen, "nan", device)
        assert_steps_equal(step(cfg, 1, *inputs), select_top_k(cfg, 1, *inputs), device)
    assert counters["stats"]["unique_graphs"] == 2
    assert not counters["graph_break"]
    torch._dynamo.reset()


def test_cpu_tensors_need_the_interpreter():
    # docs/kernels.md: without the interpreter (a subprocess: this one has it on), CPU tensors
    # are refused before any launch.
    setup = (
        "import torch\n"
        "from eagle_fn import DraftConfig\n"
        "from eagle_fn.kernels import organize, selection\n"
        "from helpers.drafts import draft_lists, step_inputs\n"
        "cfg, gen = DraftConfig(2, 2, 4), torch.Generator().manual_seed(0)\n"
        "lists, step1 = draft_lists(cfg, 2, gen), step_inputs(cfg, 1, 2, gen)"
    )
    calls = "organize.organize_tree(cfg, *lists)", "selection.select_top_k(cfg, 1, *step1)"
    assert refusals_without_interpreter(setup, *calls) == [
        f"organize_tree: {NO_INTERPRETER}",
        f"select_top_k: {NO_INTERPRETER}",
    ]
