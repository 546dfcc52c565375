import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from eagle_fn import (
    DraftConfig,
    DraftTree,
    chain_constants,
    organize_chain,
    organize_multilayer,
    organize_tree,
    select_top_k,
)
from eagle_fn.profiling import OpCounter
from helpers import reference
from helpers.asserts import assert_matches, assert_trees_equal
from helpers.drafts import KINDS, configs, draft_configs, draft_lists, multilayer, probs, tokens
from helpers.layouts import aliased_fields, call_untouched, one_buffer_per_list

I64 = torch.int64


def spec_tree_steps():
    """semantics.md §7's tree (k=4, S=3, N=8, bs=2), produced by three select_top_k steps.

    Probabilities chosen by hand so the kept paths give semantics.md's parents entries; the
    expected values of every step are worked out in the comments.
    """
    cfg = DraftConfig(4, 3, 8)
    t = torch.tensor
    # Step 0: both rows keep paths scored .4, .3, .2, .1.
    p0 = t([[0.4, 0.3, 0.2, 0.1], [0.4, 0.3, 0.2, 0.1]])
    i0 = t([[10, 11, 12, 13], [20, 21, 22, 23]])
    # Step 1, children of each path; token = 100*(row+1) + 10*path + child.
    # row 0 expand: .2 .12 .06 .02 | .057 .03 .015 .003 | .04 .02 .01 .002 | .02 .01 .005 .001
    #   best four: positions 0, 1, 2, 4 -> parents entry 4 + [0, 1, 2, 4] = [4, 5, 6, 8]
    # row 1 expand: .2 .04 .02 .004 | .18 .03 .015 .003 | .1 .02 .01 .002 | .03 .01 .005 .001
    #   best four: positions 0, 4, 8, 1 -> [4, 8, 12, 5]
    p1 = t(
        [
            [0.5, 0.3, 0.15, 0.05],
            [0.19, 0.1, 0.05, 0.01],
            [0.2, 0.1, 0.05, 0.01],
            [0.2, 0.1, 0.05, 0.01],
            [0.5, 0.1, 0.05, 0.01],
            [0.6, 0.1, 0.05, 0.01],
            [0.5, 0.1, 0.05, 0.01],
            [0.3, 0.1, 0.05, 0.01],
        ]
    )
    i1 = t([[100 * (b + 1) + 10 * r + c for c in range(4)] for b in range(2) for r in range(4)])
    # Step 2 (kept scores row 0: .2 .12 .06 .057, row 1: .2 .18 .1 .04).
    # row 0 expand: .05 .04 .03 .02 | .054 .012 ... | .024 ... | .0228 ...
    #   best four: positions 4, 0, 1, 2 -> 20 + [4, 0, 1, 2] = [24, 20, 21, 22]
    # row 1 expand: .08 .04 .02 .01 | .09 .045 .018 .009 | .03 ... | .02 ...
    #   best four: positions 4, 0, 5, 1 -> [24, 20, 25, 21]
    p2 = t(
        [
            [0.25, 0.2, 0.15, 0.1],
            [0.45, 0.1, 0.05, 0.01],
            [0.4, 0.1, 0.05, 0.01],
            [0.4, 0.1, 0.05, 0.01],
            [0.4, 0.2, 0.1, 0.05],
            [0.5, 0.25, 0.1, 0.05],
            [0.3, 0.1, 0.05, 0.01],
            [0.5, 0.1, 0.05, 0.01],
        ]
    )
    i2 = t([[1000 * (b + 1) + 10 * r + c for c in range(4)] for b in range(2) for r in range(4)])
    return cfg, [(p0, i0), (p1, i1), (p2, i2)]


def test_spec_tree_example_end_to_end():
    cfg, inputs = spec_tree_steps()
    steps, scores = [], None
    for step, (p, i) in enumerate(inputs):
        steps.append(select_top_k(cfg, step, p, i, scores))
        scores = steps[-1].scores
    assert [s.parents_entry.tolist() for s in steps] == [
        [[-1, 0, 1, 2, 3], [-1, 0, 1, 2, 3]],
        [[4, 5, 6, 8], [4, 8, 12, 5]],
        [[24, 20, 21, 22], [24, 20, 25, 21]],
    ]
    # Kept tokens follow the kept positions; hidden rows are position // 4 + 4 * row.
    assert steps[1].input_ids.tolist() == [100, 101, 102, 110, 200, 210, 220, 201]
    assert steps[1].hidden_index.tolist() == [0, 0, 0, 1, 4, 5, 6, 4]
    assert steps[2].input_ids.tolist() == [1010, 1000, 1001, 1002, 2010, 2000, 2011, 2001]

    tree = organize_tree(
        cfg,
        [s.score_entry for s in steps],
        [s.token_entry for s in steps],
        [s.parents_entry for s in steps],
    )
    assert tree.parent_list.tolist() == [
        [-1, 0, 1, 2, 3, 4, 5, 6, 8],
        [-1, 0, 1, 2, 3, 4, 8, 12, 5],
    ]
    # Seven best of row 0: .4 .3 .2 .2(=.4*.5, an exact float32 tie) .12 .1 .06 -> 0..6.
    # Row 1: .4 .3 .2 .2 .18 .1 .1(=.2*.5, exact tie with index 3) -> 0 1 2 3 4 8 12.
    assert tree.top_scores_index.tolist() == [[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 8, 12]]
    # Tokens: step 0's four, then step 1 positions 0-2 (path 0) / positions 0, 4, 8.
    assert tree.draft_tokens.tolist() == [
        [10, 11, 12, 13, 100, 101, 102],
        [20, 21, 22, 23, 200, 210, 220],
    ]


SPEC_CHAIN_TOKENS = [[11, 0, 6], [5, 10, 3]]


def test_spec_chain_example_every_path():
    cfg = DraftConfig.chain(3)
    topk_index = torch.tensor(SPEC_CHAIN_TOKENS)
    topk_p = torch.tensor([[0.9, 0.5, 0.7], [0.2, 0.6, 0.1]])
    expected = ([[-1, 0, 1], [-1, 0, 1]], [[0, 1, 2], [0, 1, 2]], SPEC_CHAIN_TOKENS)
    chain = organize_chain(chain_constants(cfg, max_bs=4, device="cpu"), topk_index)
    general = organize_multilayer(cfg, topk_p, topk_index)
    for tree in (chain, general):
        assert isinstance(tree, DraftTree)
        assert reference.as_lists(tree) == expected
        assert all(t.dtype == I64 for t in tree)
    assert chain.draft_tokens is topk_index  # the fast path hands the tokens through


def test_spec_one_step_chain_has_an_empty_parent_list():
    cfg = DraftConfig.chain(1)
    topk_index = torch.tensor([[11], [5]])
    for tree in (
        organize_chain(chain_constants(cfg, max_bs=2, device="cpu"), topk_index),
        organize_multilayer(cfg, torch.rand(2, 1), topk_index),
        organize_tree(cfg, [torch.rand(2, 1, 1)], [topk_index], [torch.tensor([[-1, 0], [-1, 0]])]),
    ):
        assert tree.parent_list.shape == (2, 0)
        assert tree.parent_list.dtype == I64
        assert tree.top_scores_index.tolist() == [[0], [0]]


def check_organize(cfg, lists):
    score_list, token_list, parents_list = lists
    bs = score_list[0].shape[0]
    tree = organize_tree(cfg, score_list, token_list, parents_list)
    parents, top, toks = reference.organize_tree(cfg, score_list, token_list, parents_list)
    n = cfg.num_draft_tokens - 1
    assert_matches(tree.parent_list, parents, (bs, cfg.parent_width), I64)
    assert_matches(tree.top_scores_index, top, (bs, n), I64)
    assert_matches(tree.draft_tokens, toks, (bs, n), I64)
    return tree


def random_lists(cfg, bs, gen, kind):
    """Lists that no draft loop produced: arbitrary scores, tokens and parents."""
    k = cfg.topk
    score_list = [probs(bs, k, gen, kind).unsqueeze(1)]
    score_list += [probs(bs * k, k, gen, kind).view(bs, k, k) for _ in range(cfg.num_steps - 1)]
    token_list = [tokens(bs, k, gen)] + [tokens(bs, k * k, gen) for _ in range(cfg.num_steps - 1)]
    parents_list = [torch.randint(-1, 50, (bs, k + 1), generator=gen)]
    parents_list += [torch.randint(0, 50, (bs, k), generator=gen) for _ in range(cfg.num_steps - 1)]
    return score_list, token_list, parents_list


@pytest.mark.parametrize("cfg", configs(), ids=str)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bs", [0, 1, 7])
def test_matches_reference_table(cfg, kind, bs):
    gen = torch.Generator().manual_seed(bs + 100 * cfg.topk)
    check_organize(cfg, draft_lists(cfg, bs, gen, kind))
    check_organize(cfg, random_lists(cfg, bs, gen, kind))


@given(
    cfg=draft_configs(),
    bs=st.integers(0, 16),
    kind=st.sampled_from(KINDS),
    dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]),
    seed=st.integers(0, 2**31),
)
def test_matches_reference_hypothesis(cfg, bs, kind, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    check_organize(cfg, draft_lists(cfg, bs, gen, kind, dtype=dtype))


@given(cfg=draft_configs(), bs=st.integers(0, 16), seed=st.integers(0, 2**31))
def test_equals_plain_organization_without_ties(cfg, bs, seed):
    # Smooth float64 scores have no ties: the engines' cat/topk/sort/gather is then exact.
    gen = torch.Generator().manual_seed(seed)
    lists = draft_lists(cfg, bs, gen, "smooth", dtype=torch.float64)
    assert_trees_equal(
        organize_tree(cfg, *lists), DraftTree(*reference.plain_organize(cfg, *lists))
    )


@given(
    cfg=draft_configs(),
    bs=st.integers(1, 8),
    kind=st.sampled_from(["ties", "nan"]),
    seed=st.integers(0, 2**31),
)
def test_selection_is_closed_under_ancestors(cfg, bs, kind, seed):
    gen = torch.Generator().manual_seed(seed)
    tree = organize_tree(cfg, *draft_lists(cfg, bs, gen, kind))
    k = cfg.topk
    for row, selected in enumerate(tree.top_scores_index.tolist()):
        for g in selected:
            if g >= k:  # not a child of the root: its parent candidate must be selected too
                assert tree.parent_list[row, g // k].item() in selected


@pytest.mark.parametrize("num_steps", range(1, 9))
@pytest.mark.parametrize("bs", [0, 1, 5, 8])
def test_chain_fast_path_equals_general_path(num_steps, bs):
    cfg = DraftConfig.chain(num_steps)
    gen = torch.Generator().manual_seed(num_steps * 10 + bs)
    topk_p, topk_index = multilayer(num_steps, bs, gen)
    fast = organize_chain(chain_constants(cfg, max_bs=8, device="cpu"), topk_index)
    assert_trees_equal(fast, organize_multilayer(cfg, topk_p, topk_index))
    assert reference.as_lists(fast) == reference.organize_chain(num_steps, topk_index)
    # The per-step lists of a chain draft loop organize to the same tree as well.
    lists = draft_lists(cfg, bs, gen)
    looped = organize_tree(cfg, *lists)
    same_tokens = organize_chain(chain_constants(cfg, max_bs=8, device="cpu"), looped.draft_tokens)
    assert_trees_equal(same_tokens, looped)


def test_chain_fast_path_runs_no_ops():
    constants = chain_constants(DraftConfig.chain(5), max_bs=8, device="cpu")
    topk_index = torch.randint(0, 9, (8, 5))
    organize_chain(constants, topk_index)  # a bs's first call cuts its row views
    with OpCounter() as counter:
        tree = organize_chain(constants, topk_index)
    assert counter.total == 0
    assert dict(counter.views) == {}  # not even a slice: the first call's views are kept
    assert (tree.parent_list, tree.top_scores_index) == constants.rows[8]
    assert tree.parent_list.is_contiguous()
    assert tree.top_scores_index.is_contiguous()
    assert tree.parent_list.data_ptr() == constants.parents.data_ptr()


def test_general_paths_run_on_device(device):
    cfg = DraftConfig(4, 3, 8)
    gen = torch.Generator().manual_seed(3)
    lists = draft_lists(cfg, 5, gen)
    on_device = [[t.to(device) for t in part] for part in lists]
    # On each device, the loop reference's trees (on a GPU, not merely the CPU's).
    tree = organize_tree(cfg, *on_device)
    assert all(t.device == device for t in tree)
    assert reference.as_lists(tree) == reference.organize_tree(cfg, *lists)
    chain = DraftConfig.chain(3)
    topk_p, topk_index = multilayer(3, 5, gen, device=device)
    fast = organize_chain(chain_constants(chain, max_bs=5, device=device), topk_index)
    assert all(t.device == device for t in fast)
    assert reference.as_lists(fast) == reference.organize_chain(3, topk_index.cpu())
    assert_trees_equal(fast, organize_multilayer(chain, topk_p, topk_index))


@pytest.mark.parametrize("cfg", [DraftConfig(2, 3, 6), DraftConfig.chain(3)], ids=str)
@pytest.mark.parametrize("bs", [0, 1, 3])
def test_organize_reads_one_engine_buffer_per_list(cfg, bs):
    # An engine's draft loop writes each step's entries side by side into one preallocated
    # buffer per list (row stride past the entries, junk around them): views of it.
    lists = draft_lists(cfg, bs, torch.Generator().manual_seed(bs), "ties")
    buffers, views = one_buffer_per_list(lists)
    tree = call_untouched(organize_tree, buffers, cfg, *views)
    assert reference.as_lists(tree) == reference.organize_tree(cfg, *lists)
    assert not aliased_fields(tree, buffers)


TREE = DraftConfig(2, 2, 4)
GOOD = random_lists(TREE, 3, torch.Generator().manual_seed(0), "smooth")


def replace(part, index, value):
    lists = [list(p) for p in GOOD]
    lists[part][index] = value
    return lists


@pytest.mark.parametrize(
    ("lists", "error", "match"),
    [
        (
            (*GOOD[:2], [GOOD[2][0]]),
            ValueError,
            r"parents_list must hold num_steps = 2 tensors, got 1",
        ),
        (
            (tuple(GOOD[0]), GOOD[1], None),
            TypeError,
            r"parents_list must be a list of num_steps = 2 tensors, got NoneType",
        ),
        (
            replace(0, 0, GOOD[0][0][0]),
            ValueError,
            r"score_list\[0\] must have shape \[bs, 1, topk\] \(rank 3\), got shape \[1, 2\]",
        ),
        (
            replace(0, 1, GOOD[0][1][:2]),
            ValueError,
            r"score_list\[1\] must have shape \[bs, topk, topk\] = \[3, 2, 2\], got \[2, 2, 2\]",
        ),
        (
            replace(0, 1, GOOD[0][1].long()),
            TypeError,
            r"score_list\[1\] must be a floating-point tensor",
        ),
        (
            replace(1, 1, GOOD[1][1][:, :3]),
            ValueError,
            r"token_list\[1\] must have shape \[bs, topk \* topk\] = \[3, 4\], got \[3, 3\]",
        ),
        (
            replace(1, 0, GOOD[1][0].int()),
            TypeError,
            r"token_list\[0\] must be an int64 tensor, got torch.int32",
        ),
        (
            replace(2, 0, GOOD[2][0][:, :2]),
            ValueError,
            r"parents_list\[0\] must have shape \[bs, topk \+ 1\] = \[3, 3\], got \[3, 2\]",
        ),
        (
            replace(2, 1, GOOD[2][0]),  # a later step's entry is [bs, topk], not step 0's
            ValueError,
            r"parents_list\[1\] must have shape \[bs, topk\] = \[3, 2\], got \[3, 3\]",
        ),
        (replace(2, 1, "parents"), TypeError, r"parents_list\[1\] must be a torch.Tensor, got str"),
        (
            replace(2, 1, GOOD[2][1].to("meta")),
            ValueError,
            r"parents_list\[1\] is on meta, expected cpu \(the device of score_list\[0\]\)",
        ),
    ],
)
def test_organize_tree_bad_inputs(lists, error, match):
    with pytest.raises(error, match=match):
        organize_tree(TREE, *lists)


CHAIN = chain_constants(DraftConfig.chain(3), max_bs=4, device="cpu")


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (
            (DraftConfig.chain(3), torch.zeros(2, 3, dtype=I64)),
            TypeError,
            r"constants must be ChainConstants, got DraftConfig",
        ),
        (
            (CHAIN, torch.zeros(2, 4, dtype=I64)),
            ValueError,
            r"organize_chain: topk_index must have shape \[bs, num_steps\] = \[2, 3\], got \[2, 4\]",
        ),
        (
            (CHAIN, torch.zeros(3, dtype=I64)),
            ValueError,
            r"topk_index must have shape \[bs, num_steps\] \(rank 2\), got shape \[3\]",
        ),
        (
            (CHAIN, torch.zeros(2, 3)),
            TypeError,
            r"topk_index must be an int64 tensor, got torch.float32",
        ),
        (
            (CHAIN, torch.zeros(5, 3, dtype=I64)),
            ValueError,
            r"topk_index has bs = 5 rows, more than constants.max_bs = 4",
        ),
        (
            (CHAIN, torch.zeros(2, 3, dtype=I64, device="meta")),
            ValueError,
            r"topk_index is on meta, expected cpu",
        ),
        ((CHAIN, [[1, 2, 3]]), TypeError, r"topk_index must be a torch.Tensor, got list"),
    ],
)
def test_organize_chain_bad_inputs(args, error, match):
    with pytest.raises(error, match=match):
        organize_chain(*args)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (
            (DraftConfig(2, 2, 3), torch.rand(2, 2), torch.zeros(2, 2, dtype=I64)),
            ValueError,
            r"needs a chain config \(topk == 1\), got topk = 2",
        ),
        (
            (DraftConfig.chain(3), torch.rand(2, 2), torch.zeros(2, 3, dtype=I64)),
            ValueError,
            r"topk_p must have shape \[bs, num_steps\] = \[2, 3\], got \[2, 2\]",
        ),
        (
            (DraftConfig.chain(3), torch.rand(2, 3), torch.zeros(2, 2, dtype=I64)),
            ValueError,
            r"topk_index must have shape \[bs, num_steps\] = \[2, 3\], got \[2, 2\]",
        ),
        (
            (DraftConfig.chain(3), torch.rand(3, 3), torch.zeros(2, 3, dtype=I64)),
            ValueError,
            r"topk_p must have shape .* = \[2, 3\], got \[3, 3\]",
        ),
        (
            (DraftConfig.chain(3), torch.rand(2, 3).double().long(), torch.zeros(2, 3, dtype=I64)),
            TypeError,
            r"topk_p must be a floating-point tensor",
        ),
        (
            (3, torch.rand(2, 3), torch.zeros(2, 3, dtype=I64)),
            TypeError,
            r"cfg must be a DraftConfig, got int",
        ),
    ],
)
def test_organize_multilayer_bad_inputs(args, error, match):
    with pytest.raises(error, match=match):
        organize_multilayer(*args)


def test_organize_tree_runs_10_aten_ops():
    # docs/performance.md: the NaN/tie-safe selection runs 10 ATen ops at k 4, S 4, N 16:
    # cat/topk/sort/gather with a second topk in place of the sort, and the rank keys' four
    # elementwise passes (add, nan_to_num, abs, addcmul) more.
    cfg = DraftConfig(4, 4, 16)
    lists = draft_lists(cfg, 2, torch.Generator().manual_seed(0))
    organize_tree(cfg, *lists)  # warm: the ranking keys' constants are built on first use
    with OpCounter() as counter:
        organize_tree(cfg, *lists)
    assert dict(counter.ops) == {
        "aten.cat.default": 3,
        "aten.add.Tensor": 1,
        "aten.nan_to_num.default": 1,
        "aten.abs.default": 1,
        "aten.addcmul.default": 1,
        "aten.topk.default": 2,
        "aten.gather.default": 1,
    }
