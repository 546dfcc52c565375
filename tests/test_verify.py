import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from eagle_fn import (
    DraftConfig,
    DraftTree,
    GreedyVerdict,
    MaskMode,
    VerifyTree,
    build_verify_tree,
    organize_tree,
    verify_greedy,
)
from eagle_fn.profiling import OpCounter
from helpers import reference
from helpers.asserts import assert_verdict_equals, on
from helpers.drafts import SEEDS, draft_configs, draft_lists, organized_args
from helpers.kernel_trees import scrambled_links, sibling_ring
from helpers.trees import (
    SPEC_BONUS,
    SPEC_CFG,
    SPEC_SEQ_LENS,
    SPEC_TREE,
    agreeing_target,
    assert_spec_walk,
    chain_verify_tree,
    malformed_tree,
    spec_target,
)

I64 = torch.int64


@pytest.mark.parametrize("accepted", range(5))
def test_chain_accepts_every_length(accepted):
    # Draft 1 2 3 4 after bonus 50. The target agrees with the first `accepted` tokens and
    # then predicts 99 (node `accepted`'s own next token when all four agree).
    draft = [1, 2, 3, 4]
    cfg, vt = chain_verify_tree(draft)
    target = [*draft[:accepted], 99, 7, 7, 7, 7][:5]
    verdict = verify_greedy(cfg, vt, torch.tensor(target))
    assert isinstance(verdict, GreedyVerdict)
    assert verdict.num_accepted.tolist() == [accepted]
    assert verdict.accept_index.tolist() == [list(range(accepted + 1)) + [-1] * (4 - accepted)]
    # Commit the accepted drafts, then the target's own token after the last of them.
    committed = verdict.predicts[verdict.accept_index[0, : accepted + 1]].tolist()
    assert committed == [*draft[:accepted], 99]
    assert verdict.predicts.tolist()[accepted + 1 :] == [0] * (4 - accepted)


def test_tree_accepts_a_later_sibling():
    # semantics.md §7 tree; the target picks row 0's third sibling (see trees.spec_target).
    vt = build_verify_tree(SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS)
    verdict = verify_greedy(SPEC_CFG, vt, spec_target())
    assert_spec_walk(verdict)
    assert verdict.predicts[verdict.accept_index[0, :3]].tolist() == [10, 16, 77]
    assert verdict.predicts[verdict.accept_index[1, :3]].tolist() == [22, 26, 88]


def test_links_are_the_three_retrieve_fields_in_walk_order():
    vt = build_verify_tree(SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS)
    index, next_token, next_sibling = vt.links
    assert index is vt.retrieve_index
    assert next_token is vt.retrieve_next_token
    assert next_sibling is vt.retrieve_next_sibling


def test_first_matching_sibling_wins():
    # Two root children carry the same token: the lower node (first in sibling order) wins.
    cfg = DraftConfig(2, 1, 3)
    tree = DraftTree(torch.zeros(1, 0, dtype=I64), torch.tensor([[0, 1]]), torch.tensor([[5, 5]]))
    vt = build_verify_tree(cfg, tree, torch.tensor([1]), torch.tensor([0]))
    verdict = verify_greedy(cfg, vt, torch.tensor([5, 6, 7]))
    assert verdict.accept_index.tolist() == [[0, 1]]


def test_target_predict_as_matrix_or_flat():
    vt = build_verify_tree(SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS)
    target = torch.randint(0, 30, (2, 8), generator=torch.Generator().manual_seed(0))
    target[:, 0] = torch.tensor([10, 22])
    flat, matrix = (
        verify_greedy(SPEC_CFG, vt, target.flatten()),
        verify_greedy(SPEC_CFG, vt, target),
    )
    for a, b in zip(flat, matrix, strict=True):
        assert torch.equal(a, b)


def check_against_reference(cfg, vt, target):
    verdict = verify_greedy(cfg, vt, target)
    ref = reference.verify_greedy(cfg, vt, target)
    assert_verdict_equals(verdict, ref, cfg, vt.retrieve_index.shape[0])


@given(**organized_args(draft_configs(), 0, 8))
def test_matches_reference_on_organized_trees(cfg, bs, kind, seed):
    gen = torch.Generator().manual_seed(seed)
    tree = organize_tree(cfg, *draft_lists(cfg, bs, gen, kind))
    vt = build_verify_tree(
        cfg, tree, torch.randint(0, 1000, (bs,), generator=gen), torch.zeros(bs, dtype=I64)
    )
    # Make the walk possible: the target at each node often names one of its children.
    check_against_reference(cfg, vt, agreeing_target(vt, gen))


@given(cfg=draft_configs(), bs=st.integers(1, 6), seed=SEEDS)
def test_matches_reference_on_malformed_trees(cfg, bs, seed):
    gen = torch.Generator().manual_seed(seed)
    tree = malformed_tree(cfg, bs, gen)
    vt = build_verify_tree(
        cfg, tree, torch.randint(0, 1000, (bs,), generator=gen), torch.zeros(bs, dtype=I64)
    )
    check_against_reference(cfg, vt, agreeing_target(vt, gen, agree=0.9))


def test_cyclic_links_terminate():
    # Hand-made links: node 1 -> sibling 2 -> sibling 1 -> ... and node 1's child is itself.
    cfg = DraftConfig(2, 3, 4)
    vt = VerifyTree(
        draft_tokens=torch.tensor([0, 5, 6, 7]),
        positions=torch.zeros(4, dtype=I64),
        tree_mask=torch.ones(16, dtype=torch.bool),
        retrieve_index=torch.arange(4).view(1, 4),
        retrieve_next_token=torch.tensor([[1, 1, -1, -1]]),
        retrieve_next_sibling=torch.tensor([[-1, 2, 1, -1]]),
    )
    # The target wants 9 at the root: no node in the cycle matches, the walk stops.
    assert verify_greedy(cfg, vt, torch.tensor([9, 9, 9, 9])).num_accepted.tolist() == [0]
    # It wants 5 everywhere: node 1, whose first child is node 1 again, for all 3 levels.
    verdict = verify_greedy(cfg, vt, torch.tensor([5, 5, 5, 5]))
    assert verdict.accept_index.tolist() == [[0, 1, 1, 1]]
    check_against_reference(cfg, vt, torch.tensor([6, 6, 6, 6]))


@given(cfg=draft_configs(max_n=40), bs=st.integers(1, 5), seed=SEEDS)
def test_matches_reference_on_scrambled_links_and_retrieve_index(cfg, bs, seed):
    # Links with cycles, self-links and values outside [-1, N), a 3-token alphabet so that
    # matches are frequent, and retrieve_index entries naming other rows' nodes, no node, or
    # the ends of int64: the walk is bounded, reads the target clamped, commits only within
    # the accepting row and counts only non-negative entries.
    gen = torch.Generator().manual_seed(seed)
    tree = organize_tree(cfg, *draft_lists(cfg, bs, gen))
    vt = build_verify_tree(
        cfg, tree, torch.randint(0, 1000, (bs,), generator=gen), torch.zeros(bs, dtype=I64)
    )
    vt = scrambled_links(vt, gen, scramble_index=True)
    check_against_reference(
        cfg, vt, torch.randint(0, 3, (bs * cfg.num_draft_tokens,), generator=gen)
    )


@pytest.mark.parametrize("n", [2, 5, 16, 33, 64])
def test_first_match_needs_at_most_n_minus_1_hops(n):
    # A sibling ring through every node: the match N - 1 hops from the root's first child is
    # found (pointer doubling must reach that far), and a ring without a match ends the walk.
    cfg, target = DraftConfig(n, 1, n), torch.full((n,), 7, dtype=I64)
    assert verify_greedy(cfg, sibling_ring(n, n - 1), target).accept_index.tolist() == [[0, n - 1]]
    assert verify_greedy(cfg, sibling_ring(n, -1), target).accept_index.tolist() == [[0, -1]]


def test_runs_on_device(device):
    # On each device, the loop reference's verdict (on a GPU, not merely the CPU's).
    vt = build_verify_tree(SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS, mask_mode=MaskMode.QLEN)
    target = torch.arange(16)
    target[0] = 10
    verdict = verify_greedy(SPEC_CFG, on(vt, device), target.to(device))
    assert all(t.device == device for t in verdict)
    assert_verdict_equals(verdict, reference.verify_greedy(SPEC_CFG, vt, target), SPEC_CFG, 2)


VT = build_verify_tree(SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS)
TARGET = torch.zeros(16, dtype=I64)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((None, VT, TARGET), TypeError, r"verify_greedy: cfg must be a DraftConfig, got NoneType"),
        ((SPEC_CFG, tuple(VT), TARGET), TypeError, r"verify_tree must be a VerifyTree, got tuple"),
        (
            (SPEC_CFG, VT, TARGET[:15]),
            ValueError,
            r"target_predict must have shape \[bs \* N\] = \[16\] or \[bs, N\] = \[2, 8\], got \[15\]",
        ),
        (
            (SPEC_CFG, VT, TARGET.view(4, 4)),
            ValueError,
            r"target_predict must have shape .* got \[4, 4\]",
        ),
        (
            (SPEC_CFG, VT, TARGET.float()),
            TypeError,
            r"target_predict must be an int64 tensor, got torch.float32",
        ),
        ((SPEC_CFG, VT, [0] * 16), TypeError, r"target_predict must be a torch.Tensor, got list"),
        (
            (DraftConfig(4, 3, 9), VT, TARGET),
            ValueError,
            r"verify_tree.retrieve_index must have shape \[bs, N\] = \[2, 9\], got \[2, 8\]",
        ),
        (
            (SPEC_CFG, VT._replace(draft_tokens=VT.draft_tokens[:8]), TARGET),
            ValueError,
            r"verify_tree.draft_tokens must have shape \[bs \* N\] = \[16\], got \[8\]",
        ),
        (
            (SPEC_CFG, VT._replace(retrieve_next_sibling=VT.retrieve_next_sibling.int()), TARGET),
            TypeError,
            r"verify_tree.retrieve_next_sibling must be an int64 tensor",
        ),
        ((SPEC_CFG, VT, TARGET.to("meta")), ValueError, r"target_predict is on meta, expected cpu"),
    ],
)
def test_bad_inputs(args, error, match):
    with pytest.raises(error, match=match):
        verify_greedy(*args)


@pytest.mark.parametrize(
    ("cfg", "ops"), [(DraftConfig(4, 4, 16), 215), (DraftConfig.chain(5), 238)]
)
@pytest.mark.parametrize("bs", [1, 2, 32])
@pytest.mark.parametrize("agree", [0.0, 1.0])
def test_aten_ops_per_call(cfg, ops, bs, agree):
    # docs/performance.md: 215 ATen ops at k 4, S 4, N 16 and 238 on a chain of S 5, whatever
    # the batch or the values (no Python branch on tensor values): every draft rejected at
    # the root, or every first-child path accepted.
    gen = torch.Generator().manual_seed(bs)
    tree = organize_tree(cfg, *draft_lists(cfg, bs, gen))
    vt = build_verify_tree(cfg, tree, torch.arange(bs), torch.arange(bs) + 3)
    target = agreeing_target(vt, gen, agree)
    with OpCounter() as counter:
        verdict = verify_greedy(cfg, vt, target)
    assert counter.total == ops
    assert (verdict.num_accepted > 0).all().item() == (agree == 1.0)
