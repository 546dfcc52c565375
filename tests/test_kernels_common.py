"""The kernels' shared machinery: exact float conversions, slot arguments, op registration."""

# ruff: noqa: N803  (Triton kernels name their compile-time constants in capitals)

from helpers import kernel_support  # noqa: I001  (first: it turns on the interpreter before the kernels load)

import inspect
import os
import subprocess
import sys
import typing

import pytest
import torch
import triton
import triton.language as tl

import eagle_fn
import eagle_fn.kernels
from eagle_fn.kernels import _floats, _ops, _slots
from helpers import valid_calls as v
from helpers.forking import free_in_a_forked_child
from helpers.asserts import assert_trees_equal
from helpers.interpreter_checks import memcheck, poisoned_allocations
from helpers.kernel_support import KERNEL_DEVICE, KERNEL_DEVICES

pytestmark = kernel_support.SKIP_WHEN_UNRUNNABLE

_INT = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


@triton.jit
def _widen_kernel(x_ptr, out_ptr, n, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, _floats.widen(x, WIDE), mask=offs < n)


@triton.jit
def _narrow_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, _floats.narrow(x, out_ptr.dtype.element_ty), mask=offs < n)


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, count_ptr, n, past, BLOCK: tl.constexpr):
    """Copies ``n + past`` elements and counts them atomically: ``past`` lanes too many."""
    offs = tl.arange(0, BLOCK)
    live = offs < n + past
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=live), mask=live)
    tl.atomic_add(count_ptr + offs, 1, mask=live)


@triton.jit
def _order_kernel(ticket_ptr, order_ptr, out_ptr, n):
    """Each program takes a ticket (when it ran), writes its id into its own slot of ``out``
    and, a stray write, -1 into the next program's."""
    pid = tl.program_id(0)
    tl.store(order_ptr + pid, tl.atomic_add(ticket_ptr, 1))
    tl.store(out_ptr + pid, pid)
    tl.store(out_ptr + pid + 1, -1, mask=pid + 1 < n)


def same_bits(actual, expected):
    """Equal bit for bit, except that any NaN equals any NaN (payloads may differ)."""
    same = actual.view(_INT.get(actual.dtype, torch.int64)) == expected.view(
        _INT.get(expected.dtype, torch.int64)
    )
    return bool((same | (actual.isnan() & expected.isnan())).all())


@pytest.fixture(params=KERNEL_DEVICES)
def device(request):
    return torch.device(request.param)


# The interpreter casts with NumPy, which warns on the NaN and overflowing patterns it rounds.
NUMPY_CASTS = pytest.mark.filterwarnings(
    "ignore:invalid value encountered in cast:RuntimeWarning",
    "ignore:overflow encountered in cast:RuntimeWarning",
)


@NUMPY_CASTS
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("wide", [False, True])
def test_widen_is_exact_on_every_16_bit_pattern(dtype, wide, device):
    x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype).to(device)
    out = torch.empty(x.shape, dtype=torch.float64 if wide else torch.float32, device=device)
    _widen_kernel[(x.numel() // 4096,)](x, out, x.numel(), WIDE=wide, BLOCK=4096)
    assert same_bits(out, x.to(out.dtype))


@NUMPY_CASTS
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_narrow_rounds_like_aten(dtype, device):
    # Every 16-bit value, its midpoints to the next one (ties go to even), one float32 ulp
    # either side of those, and random patterns: overflow, subnormals, NaN and inf included.
    wide = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype).float()
    shift = 16 if dtype is torch.bfloat16 else 13
    mid = wide.view(torch.int32) + (1 << (shift - 1)) if dtype is torch.bfloat16 else None
    gen = torch.Generator().manual_seed(0)
    samples = [
        wide,
        torch.randint(-(2**31), 2**31 - 1, (2**16,), generator=gen).view(torch.float32),
    ]
    if mid is not None:
        samples += [(mid + d).view(torch.float32) for d in (-1, 0, 1)]
    else:
        between = (wide[:-1].double() + wide[1:].double()) / 2  # exact midpoints in float32
        inf = torch.tensor(float("inf"))
        samples += [torch.nextafter(between.float(), to) for to in (-inf, between.float(), inf)]
    x = torch.cat(samples).to(device)
    out = torch.empty(x.shape, dtype=dtype, device=device)
    _narrow_kernel[(triton.cdiv(x.numel(), 4096),)](x, out, x.numel(), BLOCK=4096)
    assert same_bits(out, x.to(dtype))
    if dtype is torch.bfloat16:  # every NaN, of any sign or payload, as 0x7FC0 (ATen's CPU cast)
        assert set(out.view(torch.int16)[x.isnan()].tolist()) == {0x7FC0}


def test_slot_args_pad_and_fold_the_tail():
    steps = [torch.full((2, 3), i) for i in range(20)]
    slots = _slots.slot_args(steps[:3])
    assert len(slots) == _slots.MAX_SLOTS
    assert slots[3:] == [None] * (_slots.MAX_SLOTS - 3)
    folded = _slots.slot_args(steps)
    assert all(folded[i] is steps[i] for i in range(_slots.MAX_SLOTS - 1))  # no copies
    assert torch.equal(folded[-1], torch.cat(steps[_slots.MAX_SLOTS - 1 :], dim=1))


def test_block_sizes():
    assert [_ops.block(w) for w in (1, 16, 17, 52, 64, 65, 456)] == [16, 16, 32, 64, 64, 64, 64]


def test_ops_are_registered_in_the_eagle_fn_namespace():
    names = {"organize_tree", "select_top_k_first", "select_top_k_next"}
    for name in names:
        op = getattr(torch.ops.eagle_fn, name).default
        assert op.name() == f"eagle_fn::{name}"
    # Schemas hold tensors and flat ints only.
    schema = str(torch.ops.eagle_fn.organize_tree.default._schema)
    assert "Tensor[] score_list" in schema
    assert "SymInt topk" in schema


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_launch_makes_its_tensors_device_current(monkeypatch):
    # Triton launches on the current device. One GPU here: another device is made current by
    # pretending the current one is another index.
    device = torch.device("cuda:0")
    assert type(_ops.on_device(device)).__name__ == "nullcontext"
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    guard = _ops.on_device(device)
    assert isinstance(guard, torch.cuda.device)
    assert guard.idx == 0


@pytest.mark.parametrize(
    "name",
    ["build_verify_tree", "organize_tree", "select_top_k", "verify_greedy", "verify_sampling"],
)
def test_public_kernels_take_the_torch_signature_and_say_how_values_compare(name):
    fused, reference = getattr(eagle_fn.kernels, name), getattr(eagle_fn, name)
    assert inspect.signature(fused) == inspect.signature(reference, eval_str=True)
    assert typing.get_type_hints(fused) == typing.get_type_hints(reference)
    assert f":func:`eagle_fn.{name}` as one fused kernel" in fused.__doc__
    # Only the sampled final draw can differ, on a float64 tie (docs/sampling.md).
    tie = "ties the coin within rounding" in fused.__doc__
    assert tie == (name == "verify_sampling")
    assert "values (bit for bit" in fused.__doc__


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "match"),
    [
        ("build_verify_tree", (1, 2, 3, 4), {"where": "x"}, "keyword argument 'where'"),
        ("build_verify_tree", (1, 2, 3, 4), {"device": "meta"}, "keyword argument 'device'"),
        ("build_verify_tree", (1, 2, 3, 4, 5), {}, "takes 4 positional arguments but 5"),
        ("build_verify_tree", (1, 2), {}, "missing 2 required positional arguments"),
        ("organize_tree", (1, 2, 3, 4, 5), {}, "takes 4 positional arguments but 5"),
        ("verify_greedy", (1, 2, 3), {"device_label": "x"}, "keyword argument 'device_label'"),
        ("select_top_k", (1,), {}, "missing 3 required positional arguments"),
        ("select_top_k", (1, 2, 3, 4), {"step": 0}, "multiple values for argument 'step'"),
        ("verify_sampling", (1, 2, 3, 4, 5), {"draft": None}, "keyword argument 'draft'"),
        ("verify_sampling", (1, 2, 3, 4, 5, 1.0), {}, "takes 5 positional arguments but 6"),
    ],
)
def test_public_kernels_refuse_calls_their_torch_twin_refuses(name, args, kwargs, match):
    # The checks behind them take keywords of their own (where=, device=): never a caller's.
    # Python refuses the call by the public signature, with the torch function's own words,
    # before any check reads cfg.
    with pytest.raises(TypeError, match=rf"^{name}\(\) .*{match}") as torch_error:
        getattr(eagle_fn, name)(*args, **kwargs)
    with pytest.raises(TypeError) as kernel_error:
        getattr(eagle_fn.kernels, name)(*args, **kwargs)
    assert str(kernel_error.value) == str(torch_error.value)


@pytest.mark.compiled
def test_inputs_that_require_grad_reach_the_kernels_detached(fresh_dynamo):
    # No kernel has a derivative: eager and compiled (AOT autograd would ask for a formula),
    # outputs never require grad and equal the torch function's.
    cfg, gen = eagle_fn.DraftConfig(2, 2, 4), torch.Generator().manual_seed(0)
    topk_p, topk_index = torch.rand(4, 2, generator=gen), torch.randint(0, 9, (4, 2), generator=gen)
    scores = torch.rand(2, 2, generator=gen)
    # Drawn on the CPU, run where the kernels can (compiled kernels refuse CPU tensors).
    topk_p, topk_index, scores = (t.to(KERNEL_DEVICE) for t in (topk_p, topk_index, scores))
    want = eagle_fn.select_top_k(cfg, 1, topk_p, topk_index, scores)

    def select(p):
        return eagle_fn.kernels.select_top_k(cfg, 1, p, topk_index, scores)

    compiled = torch.compile(select, backend="aot_eager", fullgraph=True)
    for fn in (select, compiled):
        got = fn(topk_p.clone().requires_grad_())
        assert not any(t.requires_grad for t in got)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    # Step 0 computes no scores: both backends hand topk_p itself back, grad flag and all.
    first_p = topk_p[:2].clone().requires_grad_()
    for module in (eagle_fn, eagle_fn.kernels):
        step = module.select_top_k(cfg, 0, first_p, topk_index[:2])
        assert step.scores is first_p
        assert step.score_entry._base is first_p
        assert [t.requires_grad for t in step] == [False, False, True, True, False, False]


def test_a_launch_on_a_tensor_subclass_runs(device):
    # Only tracing's fake tensors skip an interpreted kernel: a real tensor of a subclass (an
    # nn.Parameter, say) holds data, and a skipped launch left its outputs new_empty garbage.
    x = torch.tensor([1.5, -2.0, 3.0], dtype=torch.bfloat16, device=device)
    out = torch.zeros(3, device=device)
    _ops.launcher(_widen_kernel)(1, torch.nn.Parameter(x, requires_grad=False), out, 3,
                                 WIDE=False, BLOCK=4)  # fmt: skip
    assert out.tolist() == [1.5, -2.0, 3.0]
    cfg, gen = eagle_fn.DraftConfig(2, 2, 4), torch.Generator().manual_seed(1)
    topk_p, scores = torch.rand(6, 2, generator=gen), torch.rand(3, 2, generator=gen)
    topk_index = torch.randint(0, 9, (6, 2), generator=gen)
    inputs = [t.to(device) for t in (topk_p, topk_index, scores)]
    want = eagle_fn.select_top_k(cfg, 1, *inputs)
    inputs[0], inputs[2] = torch.nn.Parameter(inputs[0]), torch.nn.Parameter(inputs[2])
    got = eagle_fn.kernels.select_top_k(cfg, 1, *inputs)
    assert all(torch.equal(a, b.detach()) for a, b in zip(got, want, strict=True))


def _copy_views(n):
    """Views of ``n`` elements at the front of larger buffers: a lane past a view's end
    reads or writes memory that is allocated, so the interpreter does not crash on it."""
    return (
        torch.arange(2 * n, dtype=torch.float32)[:n],
        torch.zeros(2 * n)[:n],
        torch.zeros(2 * n, dtype=torch.int32)[:n],
    )


@pytest.mark.skipif(not kernel_support.INTERPRETED, reason="checks the interpreter's memcheck")
def test_memcheck_counts_the_lanes_inside_the_arguments(memchecked):
    src, dst, count = _copy_views(5)
    _copy_kernel[(1,)](src, dst, count, 5, 0, BLOCK=8)
    assert torch.equal(dst, src)
    assert count.tolist() == [1] * 5
    assert memchecked.lanes == {"load": 5, "store": 5, "atomic": 5}
    assert memchecked.stray == []


@pytest.mark.skipif(not kernel_support.INTERPRETED, reason="checks the interpreter's memcheck")
def test_memcheck_names_each_access_one_past_its_argument(memchecked):
    src, dst, count = _copy_views(5)
    _copy_kernel[(1,)](src, dst, count, 5, 1, BLOCK=8)
    past = [src.data_ptr() + 20, dst.data_ptr() + 20, count.data_ptr() + 20]
    assert memchecked.stray == [
        ("_copy_kernel", "load", 4, past[0]),
        ("_copy_kernel", "store", 4, past[1]),
        ("_copy_kernel", "atomic", 4, past[2]),
    ]
    assert "_copy_kernel: a 4-byte load at" in memchecked.report()
    memchecked.stray.clear()  # seen: the fixture's own check passes


@pytest.mark.skipif(not kernel_support.INTERPRETED, reason="checks the interpreter's memcheck")
def test_memcheck_fails_the_block_on_a_stray_access(memchecked):
    src, dst, count = _copy_views(3)
    with pytest.raises(AssertionError, match="_copy_kernel: a 4-byte store at"), memcheck():
        _copy_kernel[(1,)](src, dst[:2], count, 2, 1, BLOCK=4)
    assert [kind for _, kind, _, _ in memchecked.stray] == ["store"]  # the fixture's own
    memchecked.stray.clear()


@pytest.mark.skipif(not kernel_support.INTERPRETED, reason="checks the interpreter's order")
def test_programs_run_evens_first_so_a_write_into_the_next_row_shows():
    ticket, order, out = (
        torch.zeros(1, dtype=torch.int32),
        torch.zeros(5, dtype=torch.int32),
        torch.zeros(5, dtype=torch.int32),
    )
    _order_kernel[(5,)](ticket, order, out, 5)
    assert order.tolist() == [0, 3, 1, 4, 2]  # programs 0, 2, 4, then 1, 3
    # In order 0..4 each program would overwrite the -1 its predecessor left.
    assert out.tolist() == [0, 1, -1, 3, -1]


@pytest.mark.skipif(not kernel_support.INTERPRETED, reason="checks the interpreter's poisoning")
def test_allocations_are_poisoned_so_that_an_unwritten_output_shows():
    like = torch.zeros(3, dtype=torch.int64)
    assert like.new_empty(2).tolist() == [2**63 - 1] * 2
    assert torch.empty(2).isnan().all()
    assert torch.empty(2, dtype=torch.bool).all()
    torch.use_deterministic_algorithms(False)  # a nested block restores what it found
    with poisoned_allocations():
        assert torch.empty(2).isnan().all()
    assert not torch.are_deterministic_algorithms_enabled()


def _named_calls():
    """(name, arguments by parameter name) for each public kernel function: small real inputs
    on the kernels' device, each keyword-only option set off its default in some call (the
    thresholds on a tree, ``draft_probs`` on a chain, the only kind that takes it)."""

    def on_device(value):
        if isinstance(value, torch.Tensor):
            return value.to(KERNEL_DEVICE)
        if isinstance(value, tuple):  # NamedTuples of tensors: trees and layouts
            return type(value)(*(on_device(item) for item in value))
        if isinstance(value, list):
            return [on_device(item) for item in value]
        return value

    def named(name, *args, **kwargs):
        bound = inspect.signature(getattr(eagle_fn, name)).bind(*args, **kwargs)
        return name, {key: on_device(value) for key, value in bound.arguments.items()}

    t, chain = torch.tensor, eagle_fn.DraftConfig.chain(2)
    chain_tree = eagle_fn.DraftTree(t([[-1, 0]]), t([[0, 1]]), t([[1, 2]]))
    chain_vt = eagle_fn.build_verify_tree(chain, chain_tree, t([0]), t([3]))
    chain_q = t([[0.1, 0.6, 0.2, 0.1], [0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 0.0, 1.0]])  # [N + 1, V]
    full, total = eagle_fn.MaskMode.FULL, int(v.SEQ_LENS.sum())
    return [
        named("select_top_k", v.TREE_CFG, 1, *v.STEP1),
        named("organize_tree", v.TREE_CFG, *v.LISTS),
        named("build_verify_tree", v.TREE_CFG, v.TREE, v.BONUS, v.SEQ_LENS, mask_mode=full,
              seq_lens_sum=total),
        named("verify_greedy", v.TREE_CFG, v.VT, v.TARGET),
        named("verify_sampling", v.TREE_CFG, v.VT, torch.softmax(v.LOGITS, -1), *v.COINS,
              threshold_single=0.5, threshold_acc=0.7),
        named("verify_sampling", chain, chain_vt, chain_q, t([[0.5, 0.4, 0.9]]), t([0.8]),
              draft_probs=chain_q.flip(0)),
    ]  # fmt: skip


NAMED_CALLS = _named_calls()


@pytest.mark.parametrize(("name", "named"), NAMED_CALLS, ids=[name for name, _ in NAMED_CALLS])
def test_public_kernels_take_every_argument_by_keyword_as_their_torch_twin(name, named):
    # The checks behind the public functions name their parameters their own way: Python
    # binds a call by the public signature, so by keyword it equals the positional call.
    fused, reference = getattr(eagle_fn.kernels, name), getattr(eagle_fn, name)
    params = inspect.signature(reference).parameters.values()
    positional = [named[p.name] for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    options = {
        p.name: named[p.name] for p in params if p.kind is p.KEYWORD_ONLY and p.name in named
    }
    want = reference(*positional, **options)
    assert_trees_equal(reference(**named), want)
    assert_trees_equal(fused(*positional, **options), want)
    assert_trees_equal(fused(**named), want)
    assert_trees_equal(fused(positional[0], **dict(list(named.items())[1:])), want)


def test_threads_launching_at_once_get_exact_values():
    # Triton's interpreter keeps the running launch's grid in module state: before the launch
    # lock (kernels._ops), threads launching at once raised InterpreterError or crashed the
    # process, hence a process of its own. On a GPU the compiled launches run as they are.
    script = (
        "from helpers import kernel_support\n"
        "from helpers.kernel_threads import racing_launches\n"
        "print(racing_launches())"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([kernel_support.SRC, *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "[]"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_a_kernel_launched_can_launch_too():
    assert free_in_a_forked_child(_ops, "_INTERPRETING")
