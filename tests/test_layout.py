import warnings

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from eagle_fn import (
    DraftConfig,
    DraftOrganizer,
    DraftTree,
    MaskMode,
    MaxBatchWarning,
    VerifyTree,
    build_verify_tree,
    is_valid_tree,
    organize_tree,
    verify_greedy,
)
from eagle_fn.profiling import OpCounter
from helpers import reference
from helpers.asserts import (
    assert_layout_equals,
    assert_mask_allowed,
    assert_trees_equal,
    assert_verdict_equals,
)
from helpers.drafts import SEEDS, draft_configs, draft_lists, multilayer, organized_args
from helpers.trees import (
    BITPACKED_DTYPES,
    CROSS_ROW_TREE,
    FULL_EDGE_CASES,
    FULL_EDGE_CFG,
    MALFORMED_CFG,
    OVERLAPPING_FULL,
    SPEC_BONUS,
    SPEC_CFG,
    SPEC_SEQ_LENS,
    SPEC_TREE,
    assert_spec_layout,
    full_edge_inputs,
    full_edge_mask,
    malformed_case,
    malformed_tree,
    overlapping_full_inputs,
    spec_inputs,
)

I64 = torch.int64
META_TREE = DraftTree(*(t.to("meta") for t in SPEC_TREE))


def mask_values(mask):
    return mask.to(I64).tolist()


def test_spec_verify_example():
    vt = build_verify_tree(SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS)
    assert isinstance(vt, VerifyTree)
    assert_spec_layout(vt)
    assert vt.retrieve_index.tolist() == [list(range(8)), list(range(8, 16))]
    assert vt.draft_tokens.tolist() == [
        100,
        10,
        11,
        12,
        13,
        14,
        15,
        16,
        200,
        20,
        21,
        22,
        23,
        24,
        25,
        26,
    ]
    # Row 1, nodes 5, 6, 7 hang under nodes 1, 2, 3 (candidates 0, 1, 2): each sees the root,
    # its parent and itself.
    rows = vt.tree_mask.view(2, 8, 8)[1].int().tolist()
    assert rows[5] == [1, 1, 0, 0, 0, 1, 0, 0]
    assert rows[6] == [1, 0, 1, 0, 0, 0, 1, 0]
    assert rows[7] == [1, 0, 0, 1, 0, 0, 0, 1]
    assert rows[0] == [1, 0, 0, 0, 0, 0, 0, 0]
    packed = build_verify_tree(
        SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS, mask_mode=MaskMode.BITPACKED
    )
    assert packed.tree_mask.dtype == torch.uint8  # N = 8
    assert mask_values(packed.tree_mask)[8 + 5 : 8 + 8] == [0b100011, 0b1000101, 0b10001001]
    full = build_verify_tree(
        SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS, mask_mode=MaskMode.FULL
    )
    assert full.tree_mask.shape == (8 * (5 + 9) + 2 * 64,)
    # Row 0's block is 8 rows of 5 prefix columns and 8 tree columns.
    first_row = full.tree_mask[:13].int().tolist()
    assert first_row == [1] * 5 + [1, 0, 0, 0, 0, 0, 0, 0]


def check_against_reference(cfg, tree, seed, mode):
    bs = tree.top_scores_index.shape[0]
    gen = torch.Generator().manual_seed(seed)
    bonus = torch.randint(0, 1000, (bs,), generator=gen)
    seq_lens = torch.randint(0, 50, (bs,), generator=gen)
    vt = build_verify_tree(cfg, tree, bonus, seq_lens, mask_mode=mode)
    expected = reference.verify_tree(cfg, tree, bonus, seq_lens, mode.value)
    assert_layout_equals(vt, expected, cfg, bs, mode)
    return vt


@pytest.mark.parametrize("mode", list(MaskMode), ids=str)
@given(**organized_args(draft_configs(), 0, 8))
def test_organized_trees_match_reference(mode, cfg, bs, kind, seed):
    assume(mode is not MaskMode.BITPACKED or cfg.num_draft_tokens <= 32)
    tree = organize_tree(cfg, *draft_lists(cfg, bs, torch.Generator().manual_seed(seed), kind))
    check_against_reference(cfg, tree, seed, mode)
    assert is_valid_tree(cfg, tree).tolist() == [True] * bs


@pytest.mark.parametrize("mode", list(MaskMode), ids=str)
@given(cfg=draft_configs(), bs=st.integers(1, 6), seed=SEEDS)
def test_malformed_trees_match_reference(mode, cfg, bs, seed):
    assume(mode is not MaskMode.BITPACKED or cfg.num_draft_tokens <= 32)
    tree = malformed_tree(cfg, bs, torch.Generator().manual_seed(seed))
    check_against_reference(cfg, tree, seed, mode)
    assert is_valid_tree(cfg, tree).tolist() == reference.is_valid_tree(cfg, tree)


@given(**organized_args(draft_configs(), 1, 8))
def test_sglang_invariants_on_organized_trees(cfg, bs, kind, seed):
    tree = organize_tree(cfg, *draft_lists(cfg, bs, torch.Generator().manual_seed(seed), kind))
    seq_lens = torch.arange(bs) * 7
    vt = build_verify_tree(cfg, tree, torch.zeros(bs, dtype=I64), seq_lens)
    n = cfg.num_draft_tokens
    depth = vt.positions.view(bs, n) - seq_lens.unsqueeze(1)
    mask = vt.tree_mask.view(bs, n, n)
    assert (depth[:, 0] == 0).all()  # the root
    assert ((depth[:, 1:] >= 1) & (depth[:, 1:] <= cfg.num_steps)).all()
    assert mask.diagonal(dim1=1, dim2=2).all()  # every node sees itself
    assert not mask.triu(diagonal=1).any()  # ancestors come first: nothing above the diagonal
    assert torch.equal(mask.sum(-1) - 1, depth)  # a row sees exactly its ancestors


# 31 steps: N = 32, the widest chain whose BITPACKED mask the constants hold.
@pytest.mark.parametrize("num_steps", [*range(1, 9), 31])
@pytest.mark.parametrize("mode", list(MaskMode), ids=str)
def test_chain_constants_equal_the_general_path(num_steps, mode):
    assert_chain_path_equals_general(num_steps, mode)


# N = 33: the constants keep an empty BITPACKED placeholder; QLEN and FULL still take them.
@pytest.mark.parametrize("mode", [MaskMode.QLEN, MaskMode.FULL], ids=str)
def test_a_chain_too_wide_to_bitpack_takes_the_constants(mode):
    assert_chain_path_equals_general(32, mode)
    worker = DraftOrganizer(DraftConfig.chain(32), max_bs=2, device="cpu", compile=False)
    tree = worker.organize(*multilayer(32, 2, torch.Generator().manual_seed(0)))
    row = torch.zeros(2, dtype=I64)
    with pytest.raises(ValueError, match=r"at most 32 nodes, got num_draft_tokens = 33"):
        worker.build_verify(tree, row, row, mask_mode=MaskMode.BITPACKED)


def assert_chain_path_equals_general(num_steps, mode):
    cfg = DraftConfig.chain(num_steps)
    worker = DraftOrganizer(cfg, max_bs=6, device="cpu", compile=False)
    gen = torch.Generator().manual_seed(num_steps)
    for bs in (0, 1, 6, 9):  # 9 > max_bs takes the general path
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MaxBatchWarning)
            tree = worker.organize(*multilayer(num_steps, bs, gen))
        bonus = torch.randint(0, 1000, (bs,), generator=gen)
        seq_lens = torch.randint(0, 30, (bs,), generator=gen)
        fast = worker.build_verify(tree, bonus, seq_lens, mask_mode=mode)
        general = build_verify_tree(cfg, tree, bonus, seq_lens, mask_mode=mode)
        for name, a, b in zip(VerifyTree._fields, fast, general, strict=True):
            assert a.dtype == b.dtype, name
            assert a.shape == b.shape, name
            assert torch.equal(a.to(I64), b.to(I64)), name


@pytest.mark.parametrize(("mode", "ops"), [(MaskMode.QLEN, 2), (MaskMode.BITPACKED, 2)])
def test_chain_verify_computes_only_positions_and_tokens(mode, ops):
    cfg = DraftConfig.chain(5)
    worker = DraftOrganizer(cfg, max_bs=8, device="cpu", compile=False)
    tree = worker.organize(*multilayer(5, 8, torch.Generator().manual_seed(0)))
    args = (tree, torch.zeros(8, dtype=I64), torch.arange(8))
    worker.build_verify(*args, mask_mode=mode)  # warm: constants are built on first use
    with OpCounter() as counter:
        worker.build_verify(*args, mask_mode=mode)
    assert counter.total == ops
    assert dict(counter.ops) == {"aten.cat.default": 1, "aten.add.Tensor": 1}
    assert "aten.slice.Tensor" not in counter.views  # the warm call cut and kept the rows


def test_full_mask_takes_the_total_or_derives_it():
    given_sum = build_verify_tree(
        SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS, mask_mode=MaskMode.FULL, seq_lens_sum=14
    )
    derived = build_verify_tree(
        SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS, mask_mode=MaskMode.FULL
    )
    assert torch.equal(given_sum.tree_mask, derived.tree_mask)


@pytest.mark.parametrize("mode", [MaskMode.QLEN, MaskMode.BITPACKED], ids=str)
@pytest.mark.parametrize("seq_lens_sum", [-1, 2**70, 14.0, "14"])
def test_other_modes_neither_read_nor_check_seq_lens_sum(mode, seq_lens_sum):
    # README: seq_lens_sum sizes the FULL mask only; a value FULL would refuse passes here.
    args = (SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS)
    expected = build_verify_tree(*args, mask_mode=mode)
    got = build_verify_tree(*args, mask_mode=mode, seq_lens_sum=seq_lens_sum)
    assert_trees_equal(got, expected)
    worker = DraftOrganizer(SPEC_CFG, max_bs=4, device="cpu", compile=False)
    via_worker = worker.build_verify(*args[1:], mask_mode=mode, seq_lens_sum=seq_lens_sum)
    assert_trees_equal(via_worker, expected)


def test_a_chain_worker_lays_out_a_foreign_chain_tree_as_its_own_chain():
    # The worker's chain path reads only the tokens: a tree with other parents (every
    # candidate hung under the root) gets the chain's links, mask and positions, while
    # build_verify_tree follows the tree's own parents.
    cfg = DraftConfig.chain(3)
    tokens = torch.tensor([[7, 8, 9], [4, 5, 6]])
    foreign = DraftTree(torch.full((2, 3), -1), torch.tensor([[0, 1, 2]] * 2), tokens)
    bonus, seq_lens = torch.tensor([1, 2]), torch.tensor([5, 9])
    worker = DraftOrganizer(cfg, max_bs=4, device="cpu", compile=False)
    chain = worker.organize(torch.rand(2, 3), tokens)
    for mode in MaskMode:
        got = worker.build_verify(foreign, bonus, seq_lens, mask_mode=mode)
        as_chain = build_verify_tree(cfg, chain, bonus, seq_lens, mask_mode=mode)
        assert_trees_equal(got, as_chain)
    own = build_verify_tree(cfg, foreign, bonus, seq_lens)
    assert own.retrieve_next_token.tolist() == [[1, -1, -1, -1]] * 2
    assert (
        worker.build_verify(foreign, bonus, seq_lens).retrieve_next_token.tolist()
        == [[1, 2, 3, -1]] * 2
    )


@pytest.mark.parametrize("name", FULL_EDGE_CASES)
def test_full_mask_drops_cells_outside_its_length(name):
    # Huge and negative seq_lens, wrong seq_lens_sum: a cell whose int64 offset is outside
    # [0, total) is dropped, never clamped onto another cell. Literally, as the reference, and
    # through the worker's chain path.
    tree, bonus, seq_lens, seq_lens_sum = full_edge_inputs(name)
    args = (tree, bonus, seq_lens)
    options = {"mask_mode": MaskMode.FULL, "seq_lens_sum": seq_lens_sum}
    vt = build_verify_tree(FULL_EDGE_CFG, *args, **options)
    assert mask_values(vt.tree_mask) == full_edge_mask(name)
    expected = reference.verify_tree(FULL_EDGE_CFG, *args, "full", seq_lens_sum)
    assert_layout_equals(vt, expected, FULL_EDGE_CFG, bonus.shape[0], MaskMode.FULL)
    worker = DraftOrganizer(FULL_EDGE_CFG, max_bs=4, device="cpu", compile=False)
    assert torch.equal(worker.build_verify(*args, **options).tree_mask, vt.tree_mask)


@pytest.mark.parametrize("name", OVERLAPPING_FULL)
def test_full_mask_cells_of_overlapping_blocks_hold_a_value_written_to_them(name):
    # semantics.md: negative seq_lens can make blocks overlap; a shared cell holds one of
    # its values, which one unspecified (compiled code writes in another order than eager).
    cfg, tree, bonus, seq_lens, seq_lens_sum, allowed = overlapping_full_inputs(name)
    options = {"mask_mode": MaskMode.FULL, "seq_lens_sum": seq_lens_sum}
    assert_mask_allowed(build_verify_tree(cfg, tree, bonus, seq_lens, **options).tree_mask, allowed)
    worker = DraftOrganizer(cfg, max_bs=4, device="cpu", compile=False)
    assert_mask_allowed(worker.build_verify(tree, bonus, seq_lens, **options).tree_mask, allowed)


@pytest.mark.compiled
def test_compiled_full_mask_of_overlapping_blocks_holds_written_values(fresh_dynamo):
    # The case the worker review found: inductor's FULL mask differed from eager's.
    cfg, tree, bonus, seq_lens, seq_lens_sum, allowed = overlapping_full_inputs(
        "tree, three requests"
    )
    worker = DraftOrganizer(cfg, max_bs=4, device="cpu", compile=True)
    vt = worker.build_verify(
        tree, bonus, seq_lens, mask_mode=MaskMode.FULL, seq_lens_sum=seq_lens_sum
    )
    assert_mask_allowed(vt.tree_mask, allowed)


@pytest.mark.parametrize(("n", "dtype"), BITPACKED_DTYPES)
def test_bitpacked_width_follows_num_draft_tokens(n, dtype):
    cfg = DraftConfig(4, 4, n)
    tree = organize_tree(cfg, *draft_lists(cfg, 3, torch.Generator().manual_seed(n)))
    vt = check_against_reference(cfg, tree, n, MaskMode.BITPACKED)  # the bits, too
    assert vt.tree_mask.dtype == dtype
    assert vt.tree_mask.shape == (3 * n,)


def test_runs_on_device(device):
    # On each device, the loop reference's layouts (on a GPU, not merely the CPU's).
    args, moved = spec_inputs(), spec_inputs(device)
    for mode in MaskMode:
        vt = build_verify_tree(SPEC_CFG, *moved, mask_mode=mode)
        assert all(t.device == device for t in vt)
        expected = reference.verify_tree(SPEC_CFG, *args, mode.value)
        assert_layout_equals(vt, expected, SPEC_CFG, 2, mode)
    valid = is_valid_tree(SPEC_CFG, moved[0])
    assert valid.device == device
    assert valid.tolist() == reference.is_valid_tree(SPEC_CFG, args[0]) == [True, True]


BAD_TREE_DTYPE = DraftTree(
    SPEC_TREE.parent_list, SPEC_TREE.top_scores_index.int(), SPEC_TREE.draft_tokens
)
WIDE = DraftConfig(8, 5, 40)
BOUNDARY = DraftConfig(8, 3, 33)


def zero_call(cfg):
    """:func:`build_verify_tree`'s positional arguments for one request of ``cfg``, all 0."""
    width = cfg.num_draft_tokens - 1
    tree = DraftTree(*(torch.zeros(1, n, dtype=I64) for n in (cfg.parent_width, width, width)))
    return cfg, tree, torch.zeros(1, dtype=I64), torch.zeros(1, dtype=I64)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (
            (SPEC_CFG, tuple(SPEC_TREE), SPEC_BONUS, SPEC_SEQ_LENS),
            {},
            TypeError,
            r"build_verify_tree: tree must be a DraftTree, got tuple",
        ),
        (
            (SPEC_CFG, BAD_TREE_DTYPE, SPEC_BONUS, SPEC_SEQ_LENS),
            {},
            TypeError,
            r"tree.top_scores_index must be an int64 tensor, got torch.int32",
        ),
        (
            (DraftConfig(4, 3, 9), SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS),
            {},
            ValueError,
            r"tree.top_scores_index must have shape \[bs, N - 1\] = \[2, 8\], got \[2, 7\]",
        ),
        (
            (DraftConfig(4, 4, 8), SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS),
            {},
            ValueError,
            r"tree.parent_list must have shape \[bs, parent_width\] = \[2, 13\], got \[2, 9\]",
        ),
        (
            (SPEC_CFG, SPEC_TREE, SPEC_BONUS[:1], SPEC_SEQ_LENS),
            {},
            ValueError,
            r"bonus_tokens must have shape \[bs\] = \[2\], got \[1\]",
        ),
        (
            (SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS.int()),
            {},
            TypeError,
            r"seq_lens must be an int64 tensor, got torch.int32",
        ),
        (
            (SPEC_CFG, SPEC_TREE, SPEC_BONUS, [5, 9]),
            {},
            TypeError,
            r"seq_lens must be a torch.Tensor, got list",
        ),
        (
            (SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS),
            {"mask_mode": "qlen"},
            TypeError,
            r"mask_mode must be a MaskMode, got str",
        ),
        (
            (SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS),
            {"mask_mode": MaskMode.FULL, "seq_lens_sum": -1},
            ValueError,
            r"seq_lens_sum must be >= 0, got -1",
        ),
        (
            (SPEC_CFG, SPEC_TREE, SPEC_BONUS, -SPEC_SEQ_LENS),
            {"mask_mode": MaskMode.FULL},  # derived: the message names what it came from
            ValueError,
            r"sum\(seq_lens\) must be >= 0, got -14",
        ),
        (
            (SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS),
            {"mask_mode": MaskMode.FULL, "seq_lens_sum": 2**62},
            ValueError,
            r"seq_lens_sum = 4611686018427387904 makes the FULL mask N \* seq_lens_sum \+ bs \* N "
            r"\* N = 36893488147419103360 elements long, past int64",
        ),
        (
            # Exactly 2**63 elements: one past the largest int64 length, refused as well.
            (SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS),
            {"mask_mode": MaskMode.FULL, "seq_lens_sum": 2**60 - 16},
            ValueError,
            r"= 9223372036854775808 elements long, past int64",
        ),
        (
            (SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS),
            {"mask_mode": MaskMode.FULL, "seq_lens_sum": 14.0},
            TypeError,
            r"seq_lens_sum must be an int, got float",
        ),
        (
            (SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS),
            {"mask_mode": MaskMode.FULL, "seq_lens_sum": True},
            TypeError,
            r"seq_lens_sum must be an int, got bool",
        ),
        (
            (SPEC_CFG, SPEC_TREE, SPEC_BONUS.to("meta"), SPEC_SEQ_LENS),
            {},
            ValueError,
            r"bonus_tokens is on meta, expected cpu \(the device of the tree\)",
        ),
        (
            (SPEC_CFG, META_TREE, SPEC_BONUS.to("meta"), SPEC_SEQ_LENS.to("meta")),
            {"mask_mode": MaskMode.FULL},  # no values to sum: not a raw error from .item()
            ValueError,
            r"build_verify_tree: a FULL mask of meta tensors needs seq_lens_sum",
        ),
        *(
            (
                zero_call(cfg),
                {"mask_mode": MaskMode.BITPACKED},
                ValueError,
                "build_verify_tree: BITPACKED masks hold at most 32 nodes, got "
                f"num_draft_tokens = {cfg.num_draft_tokens}",
            )
            for cfg in (WIDE, BOUNDARY)  # N = 33: one node past the limit
        ),
    ],
)
def test_bad_inputs(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        build_verify_tree(*args, **kwargs)


def test_a_full_mask_of_meta_tensors_takes_its_length_from_seq_lens_sum():
    vt = build_verify_tree(
        SPEC_CFG,
        META_TREE,
        SPEC_BONUS.to("meta"),
        SPEC_SEQ_LENS.to("meta"),
        mask_mode=MaskMode.FULL,
        seq_lens_sum=int(SPEC_SEQ_LENS.sum()),
    )
    full = build_verify_tree(
        SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS, mask_mode=MaskMode.FULL
    )
    for meta, real in zip(vt, full, strict=True):
        assert (meta.device.type, meta.shape, meta.dtype) == ("meta", real.shape, real.dtype)


def test_is_valid_tree_bad_inputs():
    with pytest.raises(TypeError, match=r"is_valid_tree: cfg must be a DraftConfig, got NoneType"):
        is_valid_tree(None, SPEC_TREE)
    with pytest.raises(ValueError, match=r"is_valid_tree: tree.draft_tokens must have shape"):
        is_valid_tree(
            SPEC_CFG,
            DraftTree(
                SPEC_TREE.parent_list, SPEC_TREE.top_scores_index, SPEC_TREE.draft_tokens[:, :3]
            ),
        )


# SGLang's own malformed-tree cases (trees.MALFORMED_CASES) at seq_len 10: the depth of nodes
# 0..4 (positions - 10), their next_token and next_sibling links, and the tree's validity.
SGLANG_LAYOUTS = {
    "missing-direct-parent": ([0, 1, 1, 1, 1], [1, -1, -1, -1, -1], [-1, 2, -1, -1, -1], False),
    # 6 and 7 hang under 2, whose parent is missing: their walks stop at it.
    "missing-ancestor": ([0, 1, 1, 2, 2], [1, -1, 3, -1, -1], [-1, -1, -1, 4, -1], False),
    # 6 wants 8 and 8 wants 6: the walks stop after num_steps nodes.
    "cyclic-ancestors": ([0, 1, 1, 3, 3], [1, -1, -1, 4, 3], [-1, 2, -1, -1, -1], False),
    "self-parent": ([0, 1, 1, 3, 3], [1, -1, -1, 3, -1], [-1, 2, -1, 4, -1], False),
    "maximum-depth-chain": ([0, 1, 1, 2, 3], [1, 3, -1, 4, -1], [-1, 2, -1, -1, -1], True),
}


@pytest.mark.parametrize("name", list(SGLANG_LAYOUTS))
def test_sglang_malformed_cases(name):
    depth, next_token, next_sibling, valid = SGLANG_LAYOUTS[name]
    tree = malformed_case(name)
    bonus, seq_lens = torch.tensor([4]), torch.tensor([10])
    for mode in MaskMode:
        check_against_reference(MALFORMED_CFG, tree, 0, mode)
    vt = build_verify_tree(MALFORMED_CFG, tree, bonus, seq_lens)
    assert vt.positions.tolist() == [10 + d for d in depth]
    assert vt.retrieve_next_token.tolist() == [next_token]
    assert vt.retrieve_next_sibling.tolist() == [next_sibling]
    assert vt.retrieve_index.tolist() == [[0, 1, 2, 3, 4]]  # set even for unlinked nodes
    assert is_valid_tree(MALFORMED_CFG, tree).tolist() == [valid]
    # Greedy verification terminates whatever the target says, with the reference's verdict.
    for target in ([5, 7, 8, 6, 7], [7, 8, 6, 7, 8]):
        verdict = verify_greedy(MALFORMED_CFG, vt, torch.tensor(target))
        expected = reference.verify_greedy(MALFORMED_CFG, vt, torch.tensor(target))
        assert_verdict_equals(verdict, expected, MALFORMED_CFG, 1)


def test_a_chain_deeper_than_num_steps_is_cut_and_invalid():
    # Four levels on a three-step config: node 4's walk stops after num_steps nodes, short of
    # node 1, and the tree is not well formed (node 4 needs four hops to reach the root).
    tree = malformed_case("too-deep-chain")
    for mode in MaskMode:
        check_against_reference(MALFORMED_CFG, tree, 0, mode)
    vt = build_verify_tree(MALFORMED_CFG, tree, torch.tensor([4]), torch.tensor([10]))
    assert vt.positions.tolist() == [10, 11, 12, 13, 13]
    assert mask_values(vt.tree_mask.view(5, 5)[4]) == [1, 0, 1, 1, 1]
    assert is_valid_tree(MALFORMED_CFG, tree).tolist() == [False]
    assert reference.is_valid_tree(MALFORMED_CFG, tree) == [False]


def test_parent_lookup_never_crosses_into_the_next_request():
    # SGLang's kernel scanned one entry past row 0 and found candidate 4 in row 1; here the
    # node stays unlinked and row 1 is laid out exactly as it would be alone.
    tree = CROSS_ROW_TREE
    bonus, seq_lens = torch.tensor([4, 9]), torch.tensor([10, 20])
    for mode in MaskMode:
        check_against_reference(MALFORMED_CFG, tree, 1, mode)
    vt = build_verify_tree(MALFORMED_CFG, tree, bonus, seq_lens)
    assert vt.positions[:5].tolist() == [10, 11, 11, 12, 11]
    assert vt.retrieve_next_token[0].tolist() == [1, 3, -1, -1, -1]
    alone = build_verify_tree(
        MALFORMED_CFG, DraftTree(*(t[1:] for t in tree)), bonus[1:], seq_lens[1:]
    )
    assert torch.equal(vt.positions[5:], alone.positions)
    assert torch.equal(vt.tree_mask[25:], alone.tree_mask)
    assert torch.equal(vt.retrieve_next_token[1], alone.retrieve_next_token[0])
    assert torch.equal(vt.retrieve_next_sibling[1], alone.retrieve_next_sibling[0])
    assert is_valid_tree(MALFORMED_CFG, tree).tolist() == [False, False]


def test_general_qlen_build_runs_84_aten_ops():
    # docs/performance.md: the general verify build at k 4, S 4, N 16 (eager, QLEN).
    cfg = DraftConfig(4, 4, 16)
    tree = organize_tree(cfg, *draft_lists(cfg, 2, torch.Generator().manual_seed(0)))
    with OpCounter() as counter:
        build_verify_tree(cfg, tree, torch.tensor([1, 2]), torch.tensor([3, 4]))
    assert counter.total == 84


@pytest.mark.parametrize(("given", "ops"), [(True, 18), (False, 20)])
def test_chain_full_build_lays_out_the_prefixes(given, ops):
    # docs/performance.md: a FULL chain build runs 18 ATen ops given seq_lens_sum; deriving
    # it adds a sum and its host read.
    worker = DraftOrganizer(DraftConfig.chain(5), max_bs=8, device="cpu", compile=False)
    tree = worker.organize(*multilayer(5, 8, torch.Generator().manual_seed(0)))
    args = (tree, torch.zeros(8, dtype=I64), torch.arange(8))
    options = {"mask_mode": MaskMode.FULL, "seq_lens_sum": 28 if given else None}
    worker.build_verify(*args, **options)  # warm: constants are built on first use
    with OpCounter() as counter:
        worker.build_verify(*args, **options)
    assert counter.total == ops
    assert ("aten._local_scalar_dense.default" in counter.ops) is not given
