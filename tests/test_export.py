"""torch.export of an engine's step through eagle_fn: strict and non-strict, a dynamic batch,
equal to eager at another batch size, saved and loaded (docs/design.md, "Exporting")."""

import io

import pytest
import torch
from torch.export import Dim, export

from eagle_fn import (
    DraftConfig,
    DraftOrganizer,
    MaskMode,
    _modes,
    build_verify_tree,
    draw_uniforms,
    organize_tree,
    select_top_k,
    verify_greedy,
)
from helpers.drafts import draft_lists, multilayer, step_inputs

pytestmark = pytest.mark.compiled
TREE_CFG = DraftConfig(2, 3, 6)


class Round(torch.nn.Module):
    """Organize, lay out and verify greedily."""

    def __init__(self, mask_mode, given_sum):
        super().__init__()
        self.mask_mode, self.given_sum = mask_mode, given_sum

    def forward(self, s0, s1, s2, t0, t1, t2, p0, p1, p2, bonus, seq_lens, target):
        tree = organize_tree(TREE_CFG, [s0, s1, s2], [t0, t1, t2], [p0, p1, p2])
        total = seq_lens.sum().item() if self.given_sum else None
        vt = build_verify_tree(
            TREE_CFG, tree, bonus, seq_lens, mask_mode=self.mask_mode, seq_lens_sum=total
        )
        return (*tree, *vt, *verify_greedy(TREE_CFG, vt, target))


def round_inputs(bs, seed):
    gen = torch.Generator().manual_seed(seed)
    scores, tokens, parents = draft_lists(TREE_CFG, bs, gen)
    n = TREE_CFG.num_draft_tokens
    rest = [torch.randint(0, 99, (bs,), generator=gen), torch.randint(0, 40, (bs,), generator=gen)]
    return (*scores, *tokens, *parents, *rest, torch.randint(0, 1000, (bs * n,), generator=gen))


def dynamic_batch(inputs):
    bs = Dim("bs")
    # Every input's dim 0 is bs, or bs times its rows (k for later steps, N for the target).
    first = inputs[-3].shape[0]
    return [{0: bs if t.shape[0] == first else bs * (t.shape[0] // first)} for t in inputs]


def saved_and_loaded(program):
    saved = io.BytesIO()
    torch.export.save(program, saved)
    saved.seek(0)
    return torch.export.load(saved)


def assert_same(got, want):
    assert len(got) == len(want)
    for x, y in zip(got, want, strict=True):
        assert x.dtype == y.dtype
        assert torch.equal(x, y)


# A sum from .item() passed in: strict export's dynamo sees it as an int, whose sign the
# checks would guard on; strict callers leave seq_lens_sum None (derived in the graph).
ROUNDS = [(mode, False, strict) for mode in MaskMode for strict in (False, True)]
ROUNDS.append((MaskMode.FULL, True, False))


@pytest.mark.parametrize(
    ("mode", "given_sum", "strict"),
    ROUNDS,
    ids=[f"{m.name}{'-given' * g}-{'strict' if s else 'non-strict'}" for m, g, s in ROUNDS],
)
def test_a_round_exports_with_a_dynamic_batch(mode, given_sum, strict):
    module = Round(mode, given_sum)
    example = round_inputs(3, 0)
    program = export(module, example, dynamic_shapes=dynamic_batch(example), strict=strict)
    for bs, seed in [(5, 1), (1, 2), (3, 3)]:
        inputs = round_inputs(bs, seed)
        assert_same(program.module()(*inputs), module(*inputs))
    inputs = round_inputs(4, 4)
    assert_same(saved_and_loaded(program).module()(*inputs), module(*inputs))


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_a_chain_worker_exports_with_its_max_bs_as_the_batch_bound(strict):
    # The chain path serves bs <= max_bs: the exported batch dim needs that bound, and past
    # it the exported program refuses the batch (eager would take the general path).
    worker = DraftOrganizer(DraftConfig.chain(3), max_bs=8, device="cpu", compile=False)

    class Organize(torch.nn.Module):
        def forward(self, topk_p, topk_index):
            return tuple(worker.organize(topk_p, topk_index))

    bs = Dim("bs", max=8)
    example = multilayer(3, 3, torch.Generator().manual_seed(0))
    program = export(Organize(), example, dynamic_shapes=({0: bs}, {0: bs}), strict=strict)
    for size in (0, 1, 8):
        inputs = multilayer(3, size, torch.Generator().manual_seed(size))
        assert_same(program.module()(*inputs), Organize()(*inputs))


class Stages(torch.nn.Module):
    """Each public NamedTuple in and out: a draft step, a draft tree, a verify tree, a
    verdict and the coins."""

    def forward(self, step, tree, bonus, seq_lens, target, coins):
        vt = build_verify_tree(TREE_CFG, tree, bonus, seq_lens)
        return step, tree, vt, verify_greedy(TREE_CFG, vt, target), coins


def test_programs_with_eagle_fns_named_tuples_save_and_load():
    # torch.export.save refuses a NamedTuple without a serialized name: eagle_fn gives its own.
    gen = torch.Generator().manual_seed(0)
    step = select_top_k(TREE_CFG, 0, *step_inputs(TREE_CFG, 0, 2, gen)[:2])
    tree = organize_tree(TREE_CFG, *draft_lists(TREE_CFG, 2, gen))
    n = TREE_CFG.num_draft_tokens
    inputs = (step, tree, torch.tensor([7, 8]), torch.tensor([5, 3]))
    inputs += (torch.randint(0, 1000, (2 * n,), generator=gen), draw_uniforms(2, n, generator=gen))
    got = saved_and_loaded(export(Stages(), inputs)).module()(*inputs)
    want = Stages()(*inputs)
    assert [type(part) for part in got] == [type(part) for part in want]
    for part, expected in zip(got, want, strict=True):
        assert_same(part, expected)


@pytest.mark.skipif(bool(_modes.cpp_compiler_missing()), reason="AOTInductor needs a C++ compiler")
@pytest.mark.filterwarnings(
    "ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning"
)
def test_aot_inductor_compiles_an_exported_round(tmp_path):
    # About 20 s on the 2-core development CPU: one round, the QLEN mask, a dynamic batch.
    module = Round(MaskMode.QLEN, False)
    example = round_inputs(3, 0)
    program = export(module, example, dynamic_shapes=dynamic_batch(example), strict=False)
    package = torch._inductor.aoti_compile_and_package(
        program, package_path=str(tmp_path / "round.pt2")
    )
    runner = torch._inductor.aoti_load_package(package)
    for bs, seed in [(5, 1), (1, 2)]:
        inputs = round_inputs(bs, seed)
        assert_same(runner(*inputs), module(*inputs))
