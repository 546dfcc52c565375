"""The fused verify-build and greedy kernels against the torch functions, bit for bit.

Without CUDA the kernels run on CPU tensors in Triton's interpreter, which kernel_support
turns on before anything imports them.
"""

from helpers import kernel_support  # noqa: I001  (first: it turns on the interpreter before the kernels load)

import functools

import pytest
import torch
import torch._dynamo
import triton
import triton.language as tl
from hypothesis import assume, example, given
from hypothesis import strategies as st
from torch._dynamo.utils import counters

from helpers import reference
from helpers.drafts import SEEDS, draft_lists, organized_args
from eagle_fn import (
    DraftConfig,
    DraftOrganizer,
    DraftTree,
    MaskMode,
    VerifyTree,
    build_verify_tree,
    organize_tree,
    verify_greedy,
)
from eagle_fn import _memo
from eagle_fn._compile import batch_shapes, compile_fn
from eagle_fn.kernels import greedy as kgreedy
from eagle_fn.kernels import verify as kverify
from eagle_fn.kernels._kernels_build import _bisect
from eagle_fn.kernels._kernels_verify import verify_greedy_kernel
from eagle_fn.kernels._ops import launcher, power_of_2
from eagle_fn.layout import BUILD_VERIFY
from eagle_fn.profiling import OpCounter
from eagle_fn.verify import VERIFY_GREEDY
from helpers.asserts import (
    assert_layout_equals,
    assert_mask_allowed,
    assert_trees_equal,
    assert_verdict_equals,
    on,
)
from helpers.layouts import aliased_fields, call_untouched, layout_cases
from helpers.profiles import examples
from helpers.kernel_support import (
    KERNEL_DEVICE,
    KERNEL_DEVICES,
    NoLaunch,
    guarded_outputs,
    refusals_without_interpreter,
    resolved,
    NO_INTERPRETER,
)
from helpers.kernel_trees import EDGE_CFG, SMALL_CONFIGS, edge_tree, scrambled_links, sibling_ring
from helpers.trees import (
    BITPACKED_DTYPES,
    CROSS_ROW_TREE,
    FULL_EDGE_CASES,
    FULL_EDGE_CFG,
    MALFORMED_CASES,
    MALFORMED_CFG,
    OVERLAPPING_FULL,
    SPEC_BONUS,
    SPEC_CFG,
    SPEC_SEQ_LENS,
    SPEC_TREE,
    agreeing_target,
    assert_spec_layout,
    assert_spec_walk,
    chain_verify_tree,
    full_edge_inputs,
    full_edge_mask,
    malformed_case,
    malformed_tree,
    overlapping_full_inputs,
    spec_inputs,
    spec_target,
)

pytestmark = kernel_support.SKIP_WHEN_UNRUNNABLE

I64 = torch.int64
# The interpreter runs one program per request in Python (tens of ms each): small batches.
FEW = examples(40)
# Under the ci profile SMALL_CONFIGS gave N > 32 in 0 to 2 of a build test's 40 examples. The
# build kernel packs each node's children into an int64 from two int32 halves, so the wide
# trees are explicit examples: N = 32 (BITPACKED's widest, a child at bit 31 of the one half)
# and N = 40 (children in the upper half; BITPACKED's assume() skips it).
WIDE_BUILDS = [DraftConfig(4, 4, 32), DraftConfig(5, 5, 40)]


@pytest.fixture(params=KERNEL_DEVICES)
def device(request):
    return resolved(request.param)


def check_build(cfg, tree, bonus, seq_lens, mode, seq_lens_sum=None):
    """Kernel == torch function == the loop reference."""
    options = {"mask_mode": mode, "seq_lens_sum": seq_lens_sum}
    got = kverify.build_verify_tree(cfg, tree, bonus, seq_lens, **options)
    assert_trees_equal(got, build_verify_tree(cfg, tree, bonus, seq_lens, **options))
    cpu = on(tree, "cpu"), bonus.cpu(), seq_lens.cpu()
    expected = reference.verify_tree(cfg, *cpu, mode.value, seq_lens_sum)
    assert_layout_equals(got, expected, cfg, bonus.shape[0], mode)
    return got


def check_greedy(cfg, vt, target):
    got = kgreedy.verify_greedy(cfg, vt, target)
    assert_trees_equal(got, verify_greedy(cfg, vt, target))
    ref = reference.verify_greedy(cfg, on(vt, "cpu"), target.cpu())
    assert_verdict_equals(got, ref, cfg, vt.retrieve_index.shape[0])
    return got


def random_rows(bs, gen, device, high=50):
    bonus = torch.randint(0, 1000, (bs,), generator=gen).to(device)
    return bonus, torch.randint(0, high, (bs,), generator=gen).to(device)


def modes_for(cfg):
    return [m for m in MaskMode if m is not MaskMode.BITPACKED or cfg.num_draft_tokens <= 32]


# --- setup ---------------------------------------------------------------------------------


def test_ops_are_bound_to_module_names():
    assert kverify.VERIFY_BUILD_OP is torch.ops.eagle_fn.verify_build.default
    assert kgreedy.VERIFY_GREEDY_OP is torch.ops.eagle_fn.verify_greedy.default


# --- verify build ---------------------------------------------------------------------------


def test_spec_example(device):
    # semantics.md §7: positions and links of the worked tree, literally.
    tree, bonus, seq_lens = spec_inputs(device)
    vt = check_build(SPEC_CFG, tree, bonus, seq_lens, MaskMode.QLEN)
    assert vt.positions.device == device
    assert_spec_layout(vt)
    # Row 1, node 5 is candidate 4, in slot 1, whose parent is candidate 0 = node 1: it sees
    # the root, node 1 and itself, bits 0, 1 and 5.
    packed = check_build(SPEC_CFG, tree, bonus, seq_lens, MaskMode.BITPACKED)
    assert packed.tree_mask.dtype == torch.uint8
    assert packed.tree_mask.to(I64)[8 + 5].item() == 0b100011
    full = check_build(SPEC_CFG, tree, bonus, seq_lens, MaskMode.FULL)
    assert full.tree_mask.shape == (8 * (5 + 9) + 2 * 64,)
    assert full.tree_mask[:13].int().tolist() == [1] * 5 + [1, 0, 0, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("mode", list(MaskMode), ids=str)
@FEW
@given(**organized_args(SMALL_CONFIGS, 0, 3))
@example(cfg=WIDE_BUILDS[0], bs=2, kind="ties", seed=1)
@example(cfg=WIDE_BUILDS[1], bs=2, kind="nan", seed=2)
def test_build_matches_torch_on_organized_trees(mode, cfg, bs, kind, seed):
    # NaN and tied scores change which candidates organize_tree selects, not the layout rules.
    assume_mode(cfg, mode)
    gen = torch.Generator().manual_seed(seed)
    tree = on(organize_tree(cfg, *draft_lists(cfg, bs, gen, kind)), KERNEL_DEVICE)
    check_build(cfg, tree, *random_rows(bs, gen, KERNEL_DEVICE), mode)


@pytest.mark.parametrize("mode", list(MaskMode), ids=str)
@FEW
@given(cfg=SMALL_CONFIGS, bs=st.integers(1, 3), seed=SEEDS)
@example(cfg=WIDE_BUILDS[0], bs=2, seed=1)
@example(cfg=WIDE_BUILDS[1], bs=2, seed=2)
def test_build_matches_torch_on_malformed_trees(mode, cfg, bs, seed):
    assume_mode(cfg, mode)
    gen = torch.Generator().manual_seed(seed)
    tree = on(malformed_tree(cfg, bs, gen), KERNEL_DEVICE)
    check_build(cfg, tree, *random_rows(bs, gen, KERNEL_DEVICE), mode)


def assume_mode(cfg, mode):
    assume(mode is not MaskMode.BITPACKED or cfg.num_draft_tokens <= 32)


@pytest.mark.parametrize("name", list(MALFORMED_CASES))
def test_malformed_cases(name, device):
    tree, row = malformed_case(name, device), (torch.tensor([4]), torch.tensor([10]))
    for mode in MaskMode:
        check_build(MALFORMED_CFG, tree, *(t.to(device) for t in row), mode)


def test_parent_lookup_stays_in_its_row(device):
    # Row 0's candidate 6 wants candidate 4, which only row 1 selected: row 0's node stays
    # unlinked, row 1 is laid out as if alone.
    tree = on(CROSS_ROW_TREE, device)
    bonus, seq_lens = torch.tensor([4, 9], device=device), torch.tensor([10, 20], device=device)
    vt = check_build(MALFORMED_CFG, tree, bonus, seq_lens, MaskMode.QLEN)
    assert vt.positions[:5].tolist() == [10, 11, 11, 12, 11]
    assert vt.retrieve_next_token[0].tolist() == [1, 3, -1, -1, -1]


@triton.jit
def _bisect_probe(sel_ptr, wanted_ptr, found_ptr, n, BLOCK_N: tl.constexpr):  # noqa: N803
    node = tl.arange(0, BLOCK_N)
    sel = tl.load(sel_ptr + node, mask=node < n, other=0)
    wanted = tl.load(wanted_ptr + node, mask=node < n, other=-1)
    tl.store(found_ptr + node, _bisect(sel, wanted, n, BLOCK_N), mask=node < n)


@pytest.mark.parametrize("n", [5, 64, 2**16 + 3])
def test_parent_bisection_finds_every_node(n, device):
    # The lookup the build uses on ascending selections, alone: past 2**16 nodes (a 2**17
    # block) a bisection with too few halvings stops short of the top nodes.
    if n > 2**16 and device.type == "cuda":
        # The arithmetic does not depend on the device; one GPU program's 2**17-lane gathers
        # may not fit its shared memory.
        pytest.skip("2**17 lanes in one program: checked in the interpreter")
    gen = torch.Generator().manual_seed(n)
    sel = torch.sort(torch.randint(0, 2 * n, (n,), generator=gen, dtype=torch.int32)).values
    sel[0] = -5  # node 0 (the root) is never searched
    wanted = torch.randint(-1, 2 * n + 1, (n,), generator=gen, dtype=torch.int32)
    wanted[-4:] = sel[-4:]  # the top nodes, where a short bisection stops below
    found = torch.empty(n, dtype=torch.int32, device=device)
    _bisect_probe[(1,)](sel.to(device), wanted.to(device), found, n, BLOCK_N=power_of_2(n))
    first = {}
    for node in range(n - 1, 0, -1):
        first[int(sel[node])] = node
    assert found.tolist() == [first.get(int(w), n) for w in wanted]


@pytest.mark.parametrize(
    "cfg",
    [DraftConfig.chain(1), DraftConfig(2, 1, 3), DraftConfig(8, 8, 64), DraftConfig(4, 8, 100)],
    ids=str,
)
def test_build_wide_and_degenerate_configs(cfg, device):
    # A one-step draft (no parent table), N = 64 (several row tiles) and N = 100 > 64.
    gen = torch.Generator().manual_seed(cfg.num_draft_tokens)
    tree = on(organize_tree(cfg, *draft_lists(cfg, 2, gen, "ties")), device)
    for mode in modes_for(cfg):
        check_build(cfg, tree, *random_rows(2, gen, device), mode)
    check_build(
        cfg, on(malformed_tree(cfg, 2, gen), device), *random_rows(2, gen, device), MaskMode.QLEN
    )


@pytest.mark.parametrize(
    "cfg", [DraftConfig(3, 3, 12), DraftConfig(4, 3, 10), DraftConfig(8, 3, 72)], ids=str
)
def test_build_stores_nothing_past_its_mask(cfg, device):
    # The last request's mask rows end at the mask's end, in every layout and on each path:
    # QLEN as int32 words (N = 12, a multiple of 4 below its block of 16), cell by cell
    # (N = 10), and in row tiles past 64 nodes (N = 72, block 128).
    gen = torch.Generator().manual_seed(cfg.num_draft_tokens)
    tree = on(organize_tree(cfg, *draft_lists(cfg, 2, gen)), device)
    for mode in modes_for(cfg):
        with guarded_outputs(kverify, "_empty_mask"):
            check_build(cfg, tree, *random_rows(2, gen, device), mode)


@pytest.mark.parametrize("mode", [MaskMode.QLEN, MaskMode.FULL], ids=str)
def test_build_edges_of_the_64_bit_walk_words(mode, device):
    # The same candidate tree in ascending order (the parent search bisects) and descending
    # (it scans); both against torch and the loop reference.
    bonus, seq_lens = torch.tensor([3], device=device), torch.tensor([20], device=device)
    check_build(EDGE_CFG, on(edge_tree(ascending=False), device), bonus, seq_lens, mode)
    vt = check_build(EDGE_CFG, on(edge_tree(ascending=True), device), bonus, seq_lens, mode)
    assert vt.retrieve_next_token[0, 5].item() == 6
    siblings = vt.retrieve_next_sibling[0].tolist()
    assert [siblings[j] for j in (6, 31, 32, 63)] == [31, 32, 63, -1]
    # 63 sees 5, 4, 3, 2, 1 and the root; 62's walk stops after 33 of its 36 nodes; 51 spins
    # on 50 until the steps run out; 46 stops at 45, which has no parent.
    assert [vt.positions[j].item() - 20 for j in (63, 62, 51, 46)] == [6, 33, 33, 2]
    if mode is MaskMode.QLEN:
        row = vt.tree_mask.view(64, 64)[63]
        assert row.nonzero().flatten().tolist() == [0, 1, 2, 3, 4, 5, 63]


@pytest.mark.parametrize("mode", [MaskMode.QLEN, MaskMode.FULL], ids=str)
@pytest.mark.parametrize(
    "cfg",
    [DraftConfig(8, 2, 64), DraftConfig(3, 8, 64), DraftConfig(8, 8, 63), DraftConfig(4, 8, 65)],
    ids=str,
)
@pytest.mark.parametrize("seed", range(3))
def test_build_around_64_nodes(cfg, mode, seed, device):
    # N 64 fills the walk words and writes QLEN rows in 4-cell words; 63 writes single cells;
    # 65 walks row by row. Malformed selections ascending (bisected) and not (scanned).
    gen = torch.Generator().manual_seed(seed)
    tree = malformed_tree(cfg, 3, gen)
    ordered = tree.top_scores_index.sort(dim=1).values
    for selected in (ordered, ordered.flip(1)):
        shuffled = on(tree._replace(top_scores_index=selected), device)
        check_build(cfg, shuffled, *random_rows(3, gen, device), mode)
    organized = on(organize_tree(cfg, *draft_lists(cfg, 3, gen)), device)
    check_build(cfg, organized, *random_rows(3, gen, device), mode)


@pytest.mark.parametrize("seq_lens_sum", [0, 3, 14, 40])
def test_full_mask_with_any_seq_lens_sum(seq_lens_sum, device):
    # A wrong sum (SGLang trusts the caller) drops cells past the end or leaves extra True
    # cells at the end, exactly as the torch function does.
    tree, bonus, seq_lens = spec_inputs(device)
    check_build(SPEC_CFG, tree, bonus, seq_lens, MaskMode.FULL, seq_lens_sum=seq_lens_sum)


def test_full_mask_offsets_past_256_requests(device):
    # A request's FULL block starts after the seq_lens of every earlier one, summed 256 at a
    # time: requests 256 and later need the second chunk of the sum. A chain of 2 tokens.
    cfg, bs = DraftConfig.chain(1), 260
    gen = torch.Generator().manual_seed(bs)
    tree = on(organize_tree(cfg, *draft_lists(cfg, bs, gen)), device)
    check_build(cfg, tree, *random_rows(bs, gen, device, high=5), MaskMode.FULL)


@pytest.mark.parametrize("name", FULL_EDGE_CASES)
def test_full_mask_with_huge_and_negative_seq_lens(name, device):
    # Cells whose int64 offsets wrap or fall below 0 are dropped by both, as in the reference.
    tree, bonus, seq_lens, seq_lens_sum = full_edge_inputs(name, device)
    vt = check_build(FULL_EDGE_CFG, tree, bonus, seq_lens, MaskMode.FULL, seq_lens_sum=seq_lens_sum)
    assert vt.tree_mask.to(I64).tolist() == full_edge_mask(name)


@pytest.mark.parametrize("name", OVERLAPPING_FULL)
def test_full_mask_cells_of_overlapping_blocks_hold_a_value_written_to_them(name, device):
    # Programs write shared cells in no set order: each holds one of its values (semantics.md).
    cfg, tree, bonus, seq_lens, seq_lens_sum, allowed = overlapping_full_inputs(name, device)
    options = {"mask_mode": MaskMode.FULL, "seq_lens_sum": seq_lens_sum}
    vt = kverify.build_verify_tree(cfg, tree, bonus, seq_lens, **options)
    assert_mask_allowed(vt.tree_mask, allowed)


@pytest.mark.parametrize(("n", "dtype"), BITPACKED_DTYPES)
def test_bitpacked_dtypes(n, dtype, device):
    cfg = DraftConfig(4, 4, n)
    gen = torch.Generator().manual_seed(n)
    tree = on(organize_tree(cfg, *draft_lists(cfg, 2, gen)), device)
    vt = check_build(cfg, tree, *random_rows(2, gen, device), MaskMode.BITPACKED)
    assert vt.tree_mask.dtype == dtype
    # Bit 31 set in a uint32 row: the signed view the kernel writes through keeps the bits.
    if n == 32:
        assert (vt.tree_mask.to(I64) >= 2**31).any()


def column_major(t):
    """The same values in a non-contiguous (transposed) layout."""
    return t.t().contiguous().t()


def test_non_contiguous_inputs(device):
    # The op bodies make their inputs contiguous; a strided layout gives the same values.
    tree, bonus, seq_lens, vt, target = spec_ops_args(device)
    strided = DraftTree(*(column_major(t) for t in tree))
    assert not any(t.is_contiguous() for t in strided)
    for mode in MaskMode:
        check_build(SPEC_CFG, strided, bonus, seq_lens, mode)
    links = vt._replace(retrieve_next_token=column_major(vt.retrieve_next_token))
    links = links._replace(retrieve_next_sibling=column_major(vt.retrieve_next_sibling))
    check_greedy(SPEC_CFG, links, column_major(target.view(2, 8)))


# A serving engine hands over views: rows of [max_bs, ...] buffers, columns, transposed or
# broadcast tensors, links kept in larger buffers. Each gives the contiguous call's values,
# from the kernel and the torch function alike; no input's memory is written, and no output
# is a view of an input (every field is computed).
LAYOUT_CFGS = [DraftConfig(2, 3, 6), DraftConfig.chain(3)]


@pytest.mark.parametrize("cfg", LAYOUT_CFGS, ids=str)
@pytest.mark.parametrize("mode", list(MaskMode), ids=str)
@pytest.mark.parametrize("bs", [0, 1, 3])
def test_build_reads_engine_layouts(cfg, mode, bs, device):
    gen = torch.Generator().manual_seed(bs)
    tree = on(organize_tree(cfg, *draft_lists(cfg, bs, gen)), device)
    bonus = torch.randint(0, 1000, (bs,), generator=gen).to(device)
    seq_lens = torch.full((bs,), 7, device=device)  # equal rows: broadcast too
    worker = DraftOrganizer(cfg, max_bs=4, device=device, backend="triton", compile=False)
    for total in [None, 7 * bs] if mode is MaskMode.FULL else [None]:
        options = {"mask_mode": mode, "seq_lens_sum": total}
        want = build_verify_tree(cfg, tree, bonus, seq_lens, **options)
        cpu = on(tree, "cpu"), bonus.cpu(), seq_lens.cpu()
        assert_layout_equals(want, reference.verify_tree(cfg, *cpu, mode.value), cfg, bs, mode)
        for layout, tensors in layout_cases([*tree, bonus, seq_lens]):
            args = DraftTree(*tensors[:3]), *tensors[3:]
            for build in (kverify.build_verify_tree, build_verify_tree):
                got = call_untouched(build, tensors, cfg, *args, **options)
                assert_trees_equal(got, want)
                assert not aliased_fields(got, tensors), layout
            got = call_untouched(worker.build_verify, tensors, *args, **options)
            assert_trees_equal(got, want)
            assert not aliased_fields(got, tensors), layout


@pytest.mark.parametrize("cfg", LAYOUT_CFGS, ids=str)
@pytest.mark.parametrize("bs", [0, 1, 3])
def test_greedy_reads_engine_layouts(cfg, bs, device):
    # target_predict flat and [bs, N]; a chain's first-child and sibling links are the same
    # in every row, so they are broadcast too.
    gen = torch.Generator().manual_seed(bs)
    vt = build_verify_tree(
        cfg, organize_tree(cfg, *draft_lists(cfg, bs, gen)), *random_rows(bs, gen, "cpu")
    )
    target = agreeing_target(vt, gen)
    expected = reference.verify_greedy(cfg, vt, target)
    vt, target = on(vt, device), target.to(device)
    want = verify_greedy(cfg, vt, target)
    assert_verdict_equals(want, expected, cfg, bs)
    for shape in [(-1,), (bs, cfg.num_draft_tokens)]:
        inputs = [vt.draft_tokens, *vt.links, target.view(shape)]
        for layout, tensors in layout_cases(inputs):
            fields = (
                "draft_tokens",
                "retrieve_index",
                "retrieve_next_token",
                "retrieve_next_sibling",
            )
            strided = vt._replace(**dict(zip(fields, tensors, strict=False)))
            for verify in (kgreedy.verify_greedy, verify_greedy):
                got = call_untouched(verify, tensors, cfg, strided, tensors[-1])
                assert_trees_equal(got, want)
                assert not aliased_fields(got, tensors), layout


@pytest.mark.parametrize("cfg", LAYOUT_CFGS, ids=str)
@pytest.mark.parametrize("bs", [1, 3])
def test_greedy_reads_one_engine_buffer(cfg, bs, device):
    # An engine keeping the tokens, the three links and the target as rows of one
    # [5, max_bs, N] buffer: five views of one memory, junk in the rows past bs.
    gen = torch.Generator().manual_seed(bs)
    n = cfg.num_draft_tokens
    vt = build_verify_tree(
        cfg, organize_tree(cfg, *draft_lists(cfg, bs, gen)), *random_rows(bs, gen, "cpu")
    )
    target = agreeing_target(vt, gen)
    rows = [vt.draft_tokens.view(bs, n), *vt.links, target.view(bs, n)]
    buffer = torch.full((5, bs + 2, n), 10**6 + 7)
    buffer[:, :bs] = torch.stack(rows)
    views = list(buffer.to(device)[:, :bs].unbind(0))
    views[0] = views[0].flatten()  # draft_tokens [bs * N]
    links = dict(
        zip(
            ("retrieve_index", "retrieve_next_token", "retrieve_next_sibling"),
            views[1:4],
            strict=True,
        )
    )
    strided = on(vt, device)._replace(draft_tokens=views[0], **links)
    want = verify_greedy(cfg, on(vt, device), target.to(device))
    for verify in (kgreedy.verify_greedy, verify_greedy):
        got = call_untouched(verify, views, cfg, strided, views[4])
        assert_trees_equal(got, want)
        assert not aliased_fields(got, views)


def batch_of_zeros(cfg, bs, device):
    """(tree, rows, verify tree, target) of ``bs`` requests, for bonus and seq_lens alike."""
    tree = on(DraftTree(*(torch.zeros(bs, w, dtype=I64) for w in (9, 7, 7))), device)
    rows = torch.zeros(bs, dtype=I64, device=device)
    target = torch.zeros(bs * cfg.num_draft_tokens, dtype=I64, device=device)
    return tree, rows, build_verify_tree(cfg, tree, rows, rows), target


def test_empty_batch_launches_nothing(device, monkeypatch):
    cfg = DraftConfig(4, 3, 8)
    monkeypatch.setattr(kverify, "launch", launcher(NoLaunch()))
    monkeypatch.setattr(kgreedy, "launch", launcher(NoLaunch()))
    tree, rows, vt, target = batch_of_zeros(cfg, 0, device)
    for mode in MaskMode:
        check_build(cfg, tree, rows, rows, mode)
    check_greedy(cfg, vt, target)
    # The controls: with one request, the same patches do stop each kernel's launch.
    tree, rows, vt, target = batch_of_zeros(cfg, 1, device)
    launched = r"a kernel was launched on grid \(1,\)"
    with pytest.raises(AssertionError, match=launched):
        kverify.build_verify_tree(cfg, tree, rows, rows)
    with pytest.raises(AssertionError, match=launched):
        kgreedy.verify_greedy(cfg, vt, target)


# --- greedy verification --------------------------------------------------------------------


@pytest.mark.parametrize("accepted", range(5))
def test_greedy_chain_accepts_every_length(accepted, device):
    # Chain 50 -> 1 2 3 4; the target agrees with `accepted` drafts, then says 99.
    cfg, vt = chain_verify_tree([1, 2, 3, 4], device)
    target = torch.tensor([*[1, 2, 3, 4][:accepted], 99, 7, 7, 7, 7][:5], device=device)
    verdict = check_greedy(cfg, vt, target)
    assert verdict.num_accepted.tolist() == [accepted]
    assert verdict.accept_index.tolist() == [list(range(accepted + 1)) + [-1] * (4 - accepted)]


def test_greedy_walks_a_chain_past_a_million_node_step_pairs(device):
    # 1024 steps, 1025 nodes: blocks of 2048 nodes and 2048 accept slots, whose product is
    # over Triton's 2**20 elements a tensor; no such tile is built. 1000 drafts agree.
    tokens = [7 + i % 5 for i in range(1024)]
    cfg, vt = chain_verify_tree(tokens, device)
    target = torch.tensor([*tokens[:1000], 99, *tokens[1001:], 3], device=device)
    verdict = check_greedy(cfg, vt, target)
    assert verdict.num_accepted.tolist() == [1000]
    assert verdict.predicts[:1001].tolist() == target[:1001].tolist()


@FEW
@given(**organized_args(SMALL_CONFIGS, 0, 3))
def test_greedy_matches_torch_on_organized_trees(cfg, bs, kind, seed):
    gen = torch.Generator().manual_seed(seed)
    tree = organize_tree(cfg, *draft_lists(cfg, bs, gen, kind))
    vt = build_verify_tree(cfg, tree, *random_rows(bs, gen, "cpu"))
    deep = agreeing_target(vt, gen)  # deep walks, every branch
    check_greedy(cfg, on(vt, KERNEL_DEVICE), deep.to(KERNEL_DEVICE))
    other = torch.randint(0, 1000, (bs * cfg.num_draft_tokens,), generator=gen)
    check_greedy(cfg, on(vt, KERNEL_DEVICE), other.to(KERNEL_DEVICE))


@FEW
@given(cfg=SMALL_CONFIGS, bs=st.integers(1, 3), seed=SEEDS)
def test_greedy_matches_torch_on_malformed_trees(cfg, bs, seed):
    gen = torch.Generator().manual_seed(seed)
    vt = build_verify_tree(cfg, malformed_tree(cfg, bs, gen), *random_rows(bs, gen, "cpu"))
    target = agreeing_target(vt, gen, agree=0.9)
    check_greedy(cfg, on(vt, KERNEL_DEVICE), target.to(KERNEL_DEVICE))


@FEW
@given(cfg=SMALL_CONFIGS, bs=st.integers(1, 3), seed=SEEDS)
def test_greedy_bounded_walk_equals_pointer_doubling_on_cyclic_links(cfg, bs, seed):
    # Random links loop, point at themselves and leave [-1, N - 1] (ending their list); the
    # kernel walks each sibling list for at most N nodes, the torch path doubles pointers, the
    # reference hops one by one: same first match.
    gen = torch.Generator().manual_seed(seed)
    tree = organize_tree(cfg, *draft_lists(cfg, bs, gen))
    vt = scrambled_links(build_verify_tree(cfg, tree, *random_rows(bs, gen, "cpu")), gen)
    target = torch.randint(0, 3, (bs * cfg.num_draft_tokens,), generator=gen)
    check_greedy(cfg, on(vt, KERNEL_DEVICE), target.to(KERNEL_DEVICE))


@FEW
@given(cfg=SMALL_CONFIGS, bs=st.integers(1, 4), seed=SEEDS)
def test_greedy_matches_torch_with_any_retrieve_index(cfg, bs, seed):
    # Entries naming another row's node, or no node: both paths commit only within the
    # accepting request's own row.
    gen = torch.Generator().manual_seed(seed)
    tree = organize_tree(cfg, *draft_lists(cfg, bs, gen))
    vt = build_verify_tree(cfg, tree, *random_rows(bs, gen, "cpu"))
    vt = scrambled_links(vt, gen, scramble_index=True)
    target = torch.randint(0, 3, (bs * cfg.num_draft_tokens,), generator=gen)
    check_greedy(cfg, on(vt, KERNEL_DEVICE), target.to(KERNEL_DEVICE))


def test_greedy_stores_nothing_past_its_outputs(device):
    # The last request's rows end at their tensors' ends: N = 6 and S + 1 = 3 leave lanes
    # past both in their blocks (8 and 4). Deep walks, then links and retrieve_index entries
    # anywhere.
    cfg, bs = DraftConfig(2, 2, 6), 3
    gen = torch.Generator().manual_seed(6)
    tree = organize_tree(cfg, *draft_lists(cfg, bs, gen))
    vt = build_verify_tree(cfg, tree, *random_rows(bs, gen, "cpu"))
    for links in (vt, scrambled_links(vt, gen, scramble_index=True)):
        target = agreeing_target(links, gen)
        with guarded_outputs(kgreedy, "empty_verdict"):
            check_greedy(cfg, on(links, device), target.to(device))


@pytest.mark.parametrize("huge", [2**62, 2**63 - 1, -(2**62), -(2**63)])
def test_greedy_accepts_retrieve_index_entries_at_the_ends_of_int64(huge, device):
    # Row r's second node carries ``huge``, accepted (every token matches): an index times bs
    # would wrap into row 0's range, and committing at it would index far out of bounds.
    cfg, bs, n = DraftConfig.chain(1), 4, 2
    zeros = torch.zeros(bs * n, dtype=I64)
    index = torch.arange(bs * n).view(bs, n)
    index[:, 1] = huge
    links = torch.tensor([[1, -1]] * bs), torch.full((bs, n), -1)
    vt = VerifyTree(zeros, zeros, zeros, index, *links)
    got = check_greedy(cfg, on(vt, device), zeros.to(device))
    assert got.accept_index[:, 1].tolist() == [huge] * bs
    assert got.predicts.tolist() == [0] * (bs * n)


def test_greedy_clamps_target_reads_in_int64_past_2_to_the_31_nodes():
    # Every target read is clamped into the bs * N flat nodes; as an int32 product that bound
    # wrapped negative from 2**31 on and sent each read before the tensor (a kernel review).
    # No test can hold that many nodes, so one real request runs with bs claimed that large:
    # nothing else in the kernel reads bs.
    n, num_steps, dev = 16, 4, KERNEL_DEVICE
    tokens = torch.arange(n, device=dev) + 100
    links = torch.full((n,), -1, device=dev)
    links[:num_steps] = torch.arange(1, num_steps + 1)  # a chain 0 -> 1 -> .. -> 4
    target = tokens.roll(-1)  # each node's target is the next node's token: all accepted
    accept = torch.full((num_steps + 1,), -7, device=dev)
    count, predicts = torch.zeros(1, dtype=I64, device=dev), torch.full((n,), -7, device=dev)
    trees = (tokens, torch.arange(n, device=dev), links, torch.full((n,), -1, device=dev), target)
    launch = launcher(verify_greedy_kernel)
    launch(1, *trees, accept, count, predicts, n, num_steps, 2**27 + 1, BLOCK_N=n, BLOCK_S=8)
    assert accept.tolist() == [0, 1, 2, 3, 4]
    assert count.tolist() == [4]
    assert predicts.tolist() == [*target[:5].tolist(), *[0] * (n - 5)]


def test_greedy_wide_trees_and_foreign_rows(device):
    # N = 64 and N = 100 (BLOCK_N 128); then retrieve_index entries naming other rows' nodes.
    gen = torch.Generator().manual_seed(7)
    for cfg, bs in ((DraftConfig(8, 8, 64), 3), (DraftConfig(4, 8, 100), 2)):
        tree = organize_tree(cfg, *draft_lists(cfg, bs, gen, "ties"))
        vt = build_verify_tree(cfg, tree, *random_rows(bs, gen, "cpu"))
        check_greedy(cfg, on(vt, device), agreeing_target(vt, gen, agree=0.95).to(device))
    cfg, bs = DraftConfig(8, 8, 64), 17
    tree = organize_tree(cfg, *draft_lists(cfg, bs, gen))
    vt = build_verify_tree(cfg, tree, *random_rows(bs, gen, "cpu"))
    index = vt.retrieve_index.clone()
    index[0, :4] = torch.tensor([1087, 1086, 70, 5])  # row 0 names row 16's and row 1's nodes
    index[16, 0] = 3  # row 16's root is row 0's node 3: accepted, but not row 16's to commit
    vt = vt._replace(retrieve_index=index)
    target = agreeing_target(vt, gen, agree=0.95)
    got = check_greedy(cfg, on(vt, device), target.to(device))
    assert got.accept_index[16, 0].item() == 3
    assert got.predicts[3].item() == 0  # row 0 accepted only its root, flat node 1087


@pytest.mark.parametrize("n", [2, 5, 16, 33])
def test_greedy_first_match_needs_at_most_n_minus_1_hops(n, device):
    cfg = DraftConfig(n, 1, n)  # one level: the root's children
    target = torch.full((n,), 7, dtype=I64, device=device)
    # The match N - 1 hops down a ring through every node is found ...
    verdict = check_greedy(cfg, on(sibling_ring(n, n - 1), device), target)
    assert verdict.accept_index.tolist() == [[0, n - 1]]
    # ... and a ring without a match ends the walk.
    verdict = check_greedy(cfg, on(sibling_ring(n, -1), device), target)
    assert verdict.accept_index.tolist() == [[0, -1]]


def test_greedy_spec_tree_with_later_sibling(device):
    vt = build_verify_tree(SPEC_CFG, *spec_inputs(device))
    target = spec_target(device)
    verdict = check_greedy(SPEC_CFG, vt, target)
    assert_spec_walk(verdict)
    # Target given as [bs, N] gives the same verdict.
    assert_trees_equal(kgreedy.verify_greedy(SPEC_CFG, vt, target.view(2, 8)), verdict)


# --- op contracts ---------------------------------------------------------------------------


def spec_ops_args(device):
    tree, bonus, seq_lens = spec_inputs(device)
    vt = build_verify_tree(SPEC_CFG, tree, bonus, seq_lens)
    target = torch.arange(16, device=device)
    return tree, bonus, seq_lens, vt, target


@pytest.mark.parametrize("mode", list(MaskMode), ids=str)
def test_opcheck_verify_build(mode, device):
    tree, bonus, seq_lens, _, _ = spec_ops_args(device)
    total = 8 * 14 + 2 * 64 if mode is MaskMode.FULL else 0
    args = (*tree, bonus, seq_lens, 4, 3, kverify.mask_code(mode), total)
    torch.library.opcheck(kverify.VERIFY_BUILD_OP, args)


def test_opcheck_verify_greedy(device):
    _, _, _, vt, target = spec_ops_args(device)
    args = (vt.draft_tokens, vt.retrieve_index, vt.retrieve_next_token, vt.retrieve_next_sibling)
    torch.library.opcheck(kgreedy.VERIFY_GREEDY_OP, (*args, target, 3))


@pytest.mark.parametrize("mode", list(MaskMode), ids=str)
def test_one_op_per_call(mode, device):
    tree, bonus, seq_lens, vt, target = spec_ops_args(device)
    kverify.build_verify_tree(SPEC_CFG, tree, bonus, seq_lens, mask_mode=mode, seq_lens_sum=14)
    with OpCounter() as counter:
        kverify.build_verify_tree(SPEC_CFG, tree, bonus, seq_lens, mask_mode=mode, seq_lens_sum=14)
    assert dict(counter.ops) == {"eagle_fn.verify_build.default": 1}
    with OpCounter() as counter:
        kgreedy.verify_greedy(SPEC_CFG, vt, target)
    assert dict(counter.ops) == {"eagle_fn.verify_greedy.default": 1}


def test_cores_take_the_torch_cores_arguments(device):
    tree, bonus, seq_lens, vt, target = spec_ops_args(device)
    built = kverify.verify_core(SPEC_CFG, *tree, bonus, seq_lens, MaskMode.QLEN, 0)
    assert_trees_equal(built, build_verify_tree(SPEC_CFG, tree, bonus, seq_lens))
    links = (vt.draft_tokens, vt.retrieve_index, vt.retrieve_next_token, vt.retrieve_next_sibling)
    verdict = kgreedy.greedy_core(SPEC_CFG, *links, target)
    assert_trees_equal(verdict, verify_greedy(SPEC_CFG, vt, target))


@pytest.mark.compiled
@pytest.mark.parametrize("mode", list(MaskMode), ids=str)
def test_compiled_equals_eager(mode, device):
    # Under the interpreter the traced launch is the opaque op; on CUDA, Inductor compiles the
    # Triton kernel itself. Either way one graph, the same values.
    torch._dynamo.reset()
    tree, bonus, seq_lens, _, target = spec_ops_args(device)
    total = 8 * 14 + 2 * 64 if mode is MaskMode.FULL else 0

    def cycle(parents, selected, drafted, bonus, seq_lens, target):
        built = kverify.verify_core(
            SPEC_CFG, parents, selected, drafted, bonus, seq_lens, mode, total
        )
        links = (
            built.draft_tokens,
            built.retrieve_index,
            built.retrieve_next_token,
            built.retrieve_next_sibling,
        )
        return built, kgreedy.greedy_core(SPEC_CFG, *links, target)

    args = (*tree, bonus, seq_lens, target)
    compiled = torch.compile(cycle, fullgraph=True)
    for got, want in zip(compiled(*args), cycle(*args), strict=True):
        assert_trees_equal(got, want)


@pytest.mark.compiled
def test_compiled_with_the_workers_unbacked_batch(device):
    # The worker's compile: unbacked batch and FULL length, every other argument static. One
    # graph per layout (and one for greedy) over batch sizes 0..3, each equal to eager.
    torch._dynamo.reset()
    counters.clear()
    # Specs exactly as the worker derives them from the torch functions' contracts.
    rows = batch_shapes(kverify.verify_core, BUILD_VERIFY.batch_shapes(SPEC_CFG), ints=("total",))
    build = compile_fn(kverify.verify_core, enabled=True, shapes=rows)
    links = batch_shapes(kgreedy.greedy_core, VERIFY_GREEDY.batch_shapes(SPEC_CFG))
    assert len(rows) == 6  # every parameter the contracts name
    assert len(links) == 5
    greedy = compile_fn(kgreedy.greedy_core, enabled=True, shapes=links)
    gen = torch.Generator().manual_seed(0)
    for batch in (2, 0, 3, 1):
        tree = on(organize_tree(SPEC_CFG, *draft_lists(SPEC_CFG, batch, gen)), device)
        bonus, seq_lens = random_rows(batch, gen, device)
        for mode in MaskMode:
            length = 8 * int(seq_lens.sum()) + batch * 64 if mode is MaskMode.FULL else 0
            got = build(SPEC_CFG, *tree, bonus, seq_lens, mode, length)
            assert_trees_equal(
                got, kverify.verify_core(SPEC_CFG, *tree, bonus, seq_lens, mode, length)
            )
        target = agreeing_target(on(got, "cpu"), gen).to(device)
        args = (
            got.draft_tokens,
            got.retrieve_index,
            got.retrieve_next_token,
            got.retrieve_next_sibling,
            target,
        )
        assert_trees_equal(greedy(SPEC_CFG, *args), kgreedy.greedy_core(SPEC_CFG, *args))
    assert counters["stats"]["unique_graphs"] == len(MaskMode) + 1
    assert sum(counters["graph_break"].values()) == 0


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.compiled)])
def test_worker_triton_backend_takes_the_kernels(compiled, device, monkeypatch):
    # The worker's path table names the kernels' "tree_core" and "verify_core" on
    # eagle_fn.kernels: spies put there see each path call (compiled: a graph per mask mode,
    # each traced through the spy), once the memo no longer holds paths built without them.
    # A torch worker of the same config comes first: the memo keys its paths by backend.
    import eagle_fn.kernels

    assert eagle_fn.kernels.verify_core is kverify.verify_core
    calls = []
    for name in ("tree_core", "verify_core"):
        monkeypatch.setattr(eagle_fn.kernels, name, spy(getattr(eagle_fn.kernels, name), calls))
    monkeypatch.setattr(_memo, "_cache", {})
    torch._dynamo.reset()
    DraftOrganizer(SPEC_CFG, max_bs=4, device=device, compile=compiled, backend="torch")
    worker = DraftOrganizer(SPEC_CFG, max_bs=4, device=device, compile=compiled, backend="triton")
    lists = draft_lists(SPEC_CFG, 2, torch.Generator().manual_seed(0), device=device)
    with OpCounter() as counter:
        tree = worker.organize_steps(*lists)
    assert_trees_equal(tree, organize_tree(SPEC_CFG, *lists))
    assert calls == ["tree_core"]
    if not compiled:
        assert dict(counter.ops) == {"eagle_fn.organize_tree.default": 1}
    tree, bonus, seq_lens = spec_inputs(device)
    for mode in MaskMode:
        with OpCounter() as counter:
            got = worker.build_verify(tree, bonus, seq_lens, mask_mode=mode, seq_lens_sum=14)
        assert_trees_equal(got, build_verify_tree(SPEC_CFG, tree, bonus, seq_lens, mask_mode=mode))
        if not compiled:
            assert dict(counter.ops) == {"eagle_fn.verify_build.default": 1}
    assert calls == ["tree_core"] + ["verify_core"] * len(MaskMode)


def spy(fn, calls):
    """``fn``, noting its name in ``calls`` on each call (each trace, when compiled)."""

    @functools.wraps(fn)
    def noted(*args, **kwargs):
        calls.append(fn.__name__)
        return fn(*args, **kwargs)

    return noted


# --- bad inputs -----------------------------------------------------------------------------

VT = build_verify_tree(SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS)


def raised(fn, *args, **kwargs):
    """The exception ``fn`` raises: its type and message."""
    with pytest.raises((TypeError, ValueError)) as info:
        fn(*args, **kwargs)
    return type(info.value), str(info.value)


WIDE_TREE = DraftTree(*(torch.zeros(1, w, dtype=I64) for w in (33, 39, 39)))
ZERO = torch.zeros(1, dtype=I64)


@pytest.mark.parametrize(
    ("args", "kwargs", "names"),
    [
        ((SPEC_CFG, tuple(SPEC_TREE), SPEC_BONUS, SPEC_SEQ_LENS), {}, "tree"),
        ((SPEC_CFG, SPEC_TREE, SPEC_BONUS[:1], SPEC_SEQ_LENS), {}, "bonus_tokens"),
        ((SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS.int()), {}, "seq_lens"),
        ((SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS.to("meta")), {}, "seq_lens"),
        ((SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS), {"mask_mode": "qlen"}, "mask_mode"),
        (
            (SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS),
            {"mask_mode": MaskMode.FULL, "seq_lens_sum": -1},
            "seq_lens_sum",
        ),
        (
            (DraftConfig(8, 5, 40), WIDE_TREE, ZERO, ZERO),
            {"mask_mode": MaskMode.BITPACKED},
            "num_draft_tokens",
        ),
    ],
)
def test_build_bad_inputs_raise_as_torch(args, kwargs, names):
    # The same checks run first: same exception, same message, naming the argument.
    error, message = raised(build_verify_tree, *args, **kwargs)
    assert raised(kverify.build_verify_tree, *args, **kwargs) == (error, message)
    assert message.startswith("build_verify_tree: ")
    assert names in message


@pytest.mark.parametrize(
    ("args", "names"),
    [
        ((None, VT, torch.zeros(16, dtype=I64)), "cfg"),
        ((SPEC_CFG, tuple(VT), torch.zeros(16, dtype=I64)), "verify_tree"),
        ((SPEC_CFG, VT, torch.zeros(15, dtype=I64)), "target_predict"),
        ((SPEC_CFG, VT, torch.zeros(4, 4, dtype=I64)), "target_predict"),
        ((SPEC_CFG, VT, torch.zeros(16)), "target_predict"),
        (
            (SPEC_CFG, VT._replace(draft_tokens=VT.draft_tokens[:8]), torch.zeros(16, dtype=I64)),
            "draft_tokens",
        ),
        (
            (
                SPEC_CFG,
                VT._replace(retrieve_next_sibling=VT.retrieve_next_sibling.int()),
                torch.zeros(16, dtype=I64),
            ),
            "retrieve_next_sibling",
        ),
    ],
)
def test_greedy_bad_inputs_raise_as_torch(args, names):
    error, message = raised(verify_greedy, *args)
    assert raised(kgreedy.verify_greedy, *args) == (error, message)
    assert message.startswith("verify_greedy: ")
    assert names in message


def test_cpu_tensors_need_the_interpreter():
    # Without the interpreter (a subprocess: this one has it on), CPU tensors are refused.
    setup = (
        "import torch\n"
        "from eagle_fn import build_verify_tree\n"
        "from eagle_fn.kernels import greedy, verify\n"
        "from helpers.trees import SPEC_BONUS, SPEC_CFG, SPEC_SEQ_LENS, SPEC_TREE\n"
        "vt = build_verify_tree(SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS)"
    )
    calls = (
        "verify.build_verify_tree(SPEC_CFG, SPEC_TREE, SPEC_BONUS, SPEC_SEQ_LENS)",
        "greedy.verify_greedy(SPEC_CFG, vt, torch.zeros(16, dtype=torch.int64))",
    )
    assert refusals_without_interpreter(setup, *calls) == [
        f"build_verify_tree: {NO_INTERPRETER}",
        f"verify_greedy: {NO_INTERPRETER}",
    ]
