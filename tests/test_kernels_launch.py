"""Cached eager launches: the first of a key through Triton, later ones straight to its launcher.

A stand-in kernel records both ways in: no GPU is needed to check which way a launch takes
and what it passes. That the keys are at least as fine as Triton's specialization is checked
against Triton's binder in test_kernels_aot.py; the kernels' own tests run through the cache
on a GPU.
"""

from helpers import kernel_support  # noqa: I001  (first: it turns on the interpreter before the kernels load)

import inspect

import pytest
import torch
from triton import knobs

import eagle_fn.kernels
from eagle_fn.kernels import _launch, _ops
from helpers import drafts
from helpers.asserts import assert_trees_equal

pytestmark = kernel_support.SKIP_WHEN_UNRUNNABLE


class Compiled:
    """A compiled kernel's launcher attributes; ``run`` records its calls."""

    def __init__(self, calls, function="function"):
        self.calls, self.function, self.packed_metadata = calls, function, "packed"

    def run(self, *args):
        self.calls.append(("direct", args))


class Kernel:
    """A ``JITFunction`` stand-in: ``kernel[grid](*args, **options)`` records the launch and
    returns what ``compile`` makes of the recorded calls."""

    arg_names = ("x", "n", "y", "BLOCK")

    def __init__(self, compile=Compiled):
        self.calls, self.pre_run_hooks, self.compile = [], [], compile

    def __getitem__(self, grid):
        def run(*args, **options):
            self.calls.append(("triton", (grid, args, options)))
            return self.compile(self.calls)

        return run


@pytest.fixture
def streams(monkeypatch):
    """The device indexes streams were asked for; each stream is ``100 + index``."""
    asked = []
    monkeypatch.setattr(_launch, "stream", lambda index: asked.append(index) or 100 + index)
    return asked


def launch_twice(kernel, *args, device=0, **options):
    cached = _launch.CachedLaunch(kernel)
    cached(3, device, args, **options)
    cached(3, device, args, **options)
    return cached


def test_the_first_launch_goes_through_triton_and_the_next_straight_to_its_kernel(streams):
    kernel, x = Kernel(), torch.zeros(4)
    launch_twice(kernel, x, 5, None, device=2, BLOCK=16, num_warps=1)
    first, second = kernel.calls
    assert first == ("triton", ((3,), (x, 5, None), {"BLOCK": 16, "num_warps": 1}))
    # Grid, stream, the compiled function and metadata, no launch metadata or hooks, then
    # every parameter in order: the positional ones, then those given by name.
    want = (3, 1, 1, 102, "function", "packed", None, None, None, x, 5, None, 16)
    assert second == ("direct", want)
    assert streams == [2]


@pytest.mark.parametrize(
    "change",
    [
        lambda args: (args[0].double(), *args[1:]),  # another dtype
        lambda args: (torch.zeros(6)[1:5], *args[1:]),  # 4 bytes past an aligned start
        lambda args: (args[0], 1, *args[2:]),  # an int equal to 1
        lambda args: (args[0], 32, *args[2:]),  # a multiple of 16
        lambda args: (args[0], 2**31, *args[2:]),  # past 32 bits
        lambda args: (*args[:2], False),  # another value of a bool
    ],
)
def test_a_launch_of_another_specialization_goes_through_triton(streams, change):
    kernel, args = Kernel(), (torch.zeros(4), 5, True)
    cached = launch_twice(kernel, *args, BLOCK=16)
    cached(3, 0, change(args), BLOCK=16)
    assert [way for way, _ in kernel.calls] == ["triton", "direct", "triton"]


def test_keys_differ_by_device_options_and_tritons_debug_setting(streams, monkeypatch):
    kernel, x = Kernel(), torch.zeros(4)
    cached = launch_twice(kernel, x, 5, None, BLOCK=16)
    cached(3, 1, (x, 5, None), BLOCK=16)
    cached(3, 0, (x, 5, None), BLOCK=32)
    monkeypatch.setattr(knobs.runtime, "debug", True)
    cached(3, 0, (x, 5, None), BLOCK=16)
    assert [way for way, _ in kernel.calls] == ["triton", "direct", "triton", "triton", "triton"]
    assert len(cached.compiled) == 4


def test_equal_keys_share_a_kernel_whatever_the_values(streams):
    # An int of the same classes, a float, another tensor: one compiled kernel serves them.
    kernel = Kernel()
    cached = _launch.CachedLaunch(kernel)
    for n, y in [(5, 0.5), (7, 2.0), (21, -1.0)]:
        cached(3, 0, (torch.zeros(4), n, y), BLOCK=16)
    assert [way for way, _ in kernel.calls] == ["triton", "direct", "direct"]


def hook(*args):
    return None


@pytest.mark.parametrize("where", ["launch_enter_hook", "launch_exit_hook", "pre_run_hooks"])
def test_hooked_launches_always_go_through_triton(streams, where):
    # Profilers hook launches; only Triton's own launch calls the hooks.
    kernel = Kernel()
    if where == "pre_run_hooks":
        kernel.pre_run_hooks.append(hook)
        launch_twice(kernel, torch.zeros(4), 5, None, BLOCK=16)
    else:
        getattr(knobs.runtime, where).add(hook)
        try:
            launch_twice(kernel, torch.zeros(4), 5, None, BLOCK=16)
        finally:
            getattr(knobs.runtime, where).remove(hook)
    assert [way for way, _ in kernel.calls] == ["triton", "triton"]


@pytest.mark.parametrize(
    ("kernel", "options"),
    [
        (Kernel(compile=lambda calls: None), {"BLOCK": 16}),  # Triton returned no kernel
        (Kernel(compile=lambda calls: object()), {"BLOCK": 16}),  # a future, say
        (Kernel(compile=lambda calls: Compiled(calls, function=None)), {"BLOCK": 16}),
        (Kernel(), {}),  # BLOCK left to a default: not among the options
    ],
    ids=["none", "no-launcher", "not-loaded", "defaulted"],
)
def test_a_launch_that_cannot_be_reused_always_goes_through_triton(streams, kernel, options):
    cached = launch_twice(kernel, torch.zeros(4), 5, None, **options)
    assert [way for way, _ in kernel.calls] == ["triton", "triton"]
    assert cached.compiled == {}


def test_at_most_max_keys_are_kept(streams, monkeypatch):
    monkeypatch.setattr(_launch, "MAX_KEYS", 2)
    kernel = Kernel()
    cached = _launch.CachedLaunch(kernel)
    for block in (16, 32, 64, 64, 16):
        cached(3, 0, (torch.zeros(4), 5, None), BLOCK=block)
    assert [way for way, _ in kernel.calls] == ["triton", "triton", "triton", "triton", "direct"]
    assert len(cached.compiled) == 2


def test_compiled_launches_on_cpu_tensors_skip_the_cache(monkeypatch):
    # A CPU launch of a compiled kernel only happens where a tool records launches
    # (tests/helpers/kernel_aot_variants.py): it reaches the kernel as it was called.
    kernel = Kernel()
    monkeypatch.setattr(_launch.CachedLaunch, "__call__", pytest.fail)
    launch = _ops.launcher(kernel)
    x = torch.zeros(4)
    launch(3, x, 5, None, BLOCK=16)
    assert kernel.calls == [("triton", ((3,), (x, 5, None), {"BLOCK": 16}))]


def test_the_direct_call_is_the_one_tritons_own_runner_makes():
    # CachedLaunch calls a compiled kernel's launcher as CompiledKernel's runner does (grid,
    # stream, function, packed metadata, launch metadata, the two hooks, then the arguments).
    # Without a GPU that launcher cannot run; this fails when a Triton release changes the call.
    from triton.compiler.compiler import CompiledKernel

    runner = " ".join(inspect.getsource(CompiledKernel.__getitem__).split())
    call = (
        "self.run(grid[0], grid[1], grid[2], stream, self.function, self.packed_metadata, "
        "launch_metadata, knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *args)"
    )
    assert call in runner
    assert isinstance(inspect.getattr_static(CompiledKernel, "run"), property)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_repeated_cuda_calls_reuse_their_compiled_kernel():
    cfg = eagle_fn.DraftConfig(topk=4, num_steps=4, num_draft_tokens=16)
    lists = drafts.draft_lists(cfg, 8, torch.Generator().manual_seed(0), device="cuda")
    want = eagle_fn.organize_tree(cfg, *lists)
    for _ in range(3):  # the first may compile; the later ones find it by their key
        assert_trees_equal(eagle_fn.kernels.organize_tree(cfg, *lists), want)
    assert eagle_fn.kernels.organize.launch.cached.compiled
