"""The launches :mod:`kernel_aot` compiles: each kernel over the variants its launchers make.

A variant is a name and a call of a public kernel's checks and core (``<torch function's
*_args>`` then ``eagle_fn.kernels.<module>.<core>``), as the public function makes it, on CPU
tensors built by the torch functions. :func:`recorded_launches` runs one with every kernel's
launch recorded instead of run, so the signature and constexprs come from the launch code
itself. ``ci`` marks the subset CI compiles; ``--all`` compiles every variant.
"""

import importlib
import pkgutil
from functools import partial

import torch

import eagle_fn
from eagle_fn import DraftConfig, MaskMode

BS = 32
SMALL, LARGE = DraftConfig(4, 4, 16), DraftConfig(8, 8, 64)  # the two sizes
CHAIN, ONE_STEP, DEEP = DraftConfig(1, 4, 5), DraftConfig(2, 1, 3), DraftConfig(2, 18, 20)
WIDE = DraftConfig(4, 8, 100)  # over 64 nodes: the verify build's row-tiled walk
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def variants(everything):
    """``(name, launcher)`` pairs: the CI subset, or with ``everything`` all of them."""
    for family in (select_variants, organize_variants, verify_variants, greedy_variants,
                   sampling_variants):  # fmt: skip
        for name, ci, launcher in family():
            if ci or everything:
                yield name, launcher


def recorded_launches(launcher):
    """The kernel launches ``launcher()`` makes, recorded instead of run: ``(kernel, args,
    kwargs)`` each, ``kwargs`` holding the constexprs and launch options."""
    launches = []
    kernels = package_kernels()

    def recorder(kernel):
        return lambda *args, grid, warmup, **kwargs: launches.append((kernel, args, kwargs))

    for kernel in kernels:
        kernel.run = recorder(kernel)  # JITFunction.__getitem__ launches through self.run
    try:
        launcher()
    finally:
        for kernel in kernels:
            del kernel.run
    return launches


def package_kernels():
    """Every ``@triton.jit`` function of ``eagle_fn.kernels``, helpers included."""
    from triton.runtime.jit import JITFunction

    package = importlib.import_module("eagle_fn.kernels")
    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, JITFunction):
                found[id(value)] = value
    return list(found.values())


def entry_kernels():
    """The ``@triton.jit`` functions no other one calls: the kernels launchers launch."""
    kernels = package_kernels()
    called = {name for k in kernels for name in k.fn.__code__.co_names}
    return [k for k in kernels if k.fn.__name__ not in called]


def label(cfg, bs=BS):
    return f"k{cfg.topk} S{cfg.num_steps} N{cfg.num_draft_tokens} bs{bs}"


def dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def draft_steps(cfg, bs, dtype):
    """The draft loop's steps on zero probabilities (the torch functions make the shapes)."""
    k = cfg.topk
    ids = torch.zeros(bs, k, dtype=torch.int64)  # [bs, k]
    steps = [eagle_fn.select_top_k(cfg, 0, torch.zeros(bs, k, dtype=dtype), ids)]
    for i in range(1, cfg.num_steps):
        p = torch.zeros(bs * k, k, dtype=dtype)  # [bs * k, k]
        steps.append(eagle_fn.select_top_k(cfg, i, p, ids.repeat(k, 1), steps[-1].scores))
    return steps


def draft_lists(cfg, bs, dtype):
    """``organize_tree``'s score, token and parent lists for a draft of zero probabilities."""
    steps = draft_steps(cfg, bs, dtype)
    fields = ("score_entry", "token_entry", "parents_entry")
    return [[getattr(step, field) for step in steps] for field in fields]


def verify_tree(cfg, bs=BS):
    """A draft tree, its ``seq_lens`` and its verify tree, built by the torch functions."""
    tree = eagle_fn.organize_tree(cfg, *draft_lists(cfg, bs, torch.float32))
    seq_lens = torch.full((bs,), 100, dtype=torch.int64)  # [bs]
    return tree, seq_lens, eagle_fn.build_verify_tree(cfg, tree, seq_lens, seq_lens)


def select_variants():
    def launch(cfg, step, dtype, p_dtype):
        from eagle_fn import selection
        from eagle_fn.kernels import selection as fused

        k = cfg.topk
        scores = draft_steps(cfg, BS, dtype)[step - 1].scores if step else None
        p = torch.zeros(BS * k if step else BS, k, dtype=p_dtype)  # [rows, k]
        ids = torch.zeros_like(p, dtype=torch.int64)  # [rows, k]
        fused.select_core(*selection.select_args(cfg, step, p, ids, scores))

    float32 = torch.float32
    yield f"select step 0 {label(SMALL)}", True, partial(launch, SMALL, 0, float32, float32)
    for cfg in (SMALL, LARGE, DraftConfig(16, 2, 32)):
        for dtype in DTYPES:
            ci = cfg is SMALL or dtype == torch.float32
            name = f"select step 1 {label(cfg)} {dtype_name(dtype)}"
            yield name, ci, partial(launch, cfg, 1, dtype, dtype)
    name = f"select step 1 {label(SMALL)} float32 scores, bfloat16 p"
    yield name, True, partial(launch, SMALL, 1, torch.float32, torch.bfloat16)


def organize_variants():
    def launch(cfg, dtype):
        from eagle_fn import organize
        from eagle_fn.kernels import organize as fused

        fused.tree_core(*organize.tree_args(cfg, *draft_lists(cfg, BS, dtype)))

    ci = {(SMALL, d) for d in DTYPES} | {(LARGE, torch.float16), (DEEP, torch.float64)}
    for cfg in (SMALL, LARGE, ONE_STEP, DEEP):
        for dtype in DTYPES:
            name = f"organize {label(cfg)} {dtype_name(dtype)}"
            yield name, (cfg, dtype) in ci, partial(launch, cfg, dtype)


def verify_variants():
    def launch(cfg, mode):
        from eagle_fn import layout
        from eagle_fn.kernels import verify as fused

        tree, seq_lens, _ = verify_tree(cfg)
        fused.verify_core(*layout.verify_args(cfg, tree, seq_lens, seq_lens, mask_mode=mode))

    configs = {
        MaskMode.QLEN: (SMALL, LARGE, CHAIN, ONE_STEP, WIDE),
        MaskMode.FULL: (SMALL, LARGE, CHAIN, ONE_STEP, WIDE),
        MaskMode.BITPACKED: (DraftConfig(2, 3, 8), SMALL, DraftConfig(8, 8, 32)),  # 8, 16, 32 bits
    }
    for mode, cfgs in configs.items():
        for cfg in cfgs:
            ci = cfg in (SMALL, LARGE) or cfg.num_draft_tokens == 32
            ci = ci or (cfg is WIDE and mode is MaskMode.QLEN)
            yield f"verify build {mode.name} {label(cfg)}", ci, partial(launch, cfg, mode)


def greedy_variants():
    def launch(cfg, bs):
        from eagle_fn import verify
        from eagle_fn.kernels import greedy as fused

        target = torch.zeros(bs * cfg.num_draft_tokens, dtype=torch.int64)  # [bs * N]
        fused.greedy_core(*verify.greedy_args(cfg, verify_tree(cfg, bs)[2], target))

    for cfg, bs in ((SMALL, BS), (LARGE, BS), (CHAIN, BS), (ONE_STEP, BS), (SMALL, 1)):
        yield f"verify greedy {label(cfg, bs)}", cfg in (SMALL, LARGE), partial(launch, cfg, bs)


def sampling_variants():
    def launch(cfg, vocab, dtype, p_dtype=None, coin_dtype=torch.float32, split=None, prefetch=0,
               stages=1):  # fmt: skip
        from eagle_fn import sampling
        from eagle_fn.kernels import sampling as fused

        rows = BS * cfg.num_draft_tokens
        q = torch.empty(rows, vocab, dtype=dtype)  # [bs * N, V] never read: only compiled
        p = None if p_dtype is None else torch.empty(rows, vocab, dtype=p_dtype)  # [bs * N, V]
        coins = torch.zeros(BS, cfg.num_draft_tokens, dtype=coin_dtype)  # [bs, N]
        final = torch.zeros(BS, dtype=coin_dtype)  # [bs]
        vt = verify_tree(cfg)[2]
        args = sampling.sampling_args(cfg, vt, q, coins, final, draft_probs=p)
        default = fused.SPLIT, fused.PREFETCH_N, fused.STAGES  # split=None: the default's
        fused.SPLIT = default[0] if split is None else split
        fused.PREFETCH_N, fused.STAGES = prefetch, stages
        try:
            fused.sampling_core(*args)
        finally:
            fused.SPLIT, fused.PREFETCH_N, fused.STAGES = default

    for dtype in DTYPES:  # target-only on a tree; with draft probabilities on a chain
        name = f"{label(SMALL)} V32000 {dtype_name(dtype)}"
        yield f"verify sampling {name}", True, partial(launch, SMALL, 32000, dtype)
        name = f"{label(CHAIN)} V32000 {dtype_name(dtype)}"
        yield f"verify sampling draft {name}", True, partial(launch, CHAIN, 32000, dtype, dtype)
    for vocab in (32000, 128256, 5):  # BLOCK_V: 4096, 4096, 8
        name = f"verify sampling {label(LARGE)} V{vocab} float32"
        yield name, vocab == 128256, partial(launch, LARGE, vocab, torch.float32)
    name = f"verify sampling draft {label(CHAIN)} V32000 bfloat16, float16 p, float64 coins"
    yield name, False, partial(launch, CHAIN, 32000, torch.bfloat16, torch.float16, torch.float64)
    for split in (True, False):  # both launch shapes, whichever SPLIT's default is
        shape = "split" if split else "single"
        name = f"verify sampling {shape} {label(LARGE)} V128256 float32"
        yield name, True, partial(launch, LARGE, 128256, torch.float32, split=split)
        name = f"verify sampling draft {shape} {label(CHAIN)} V32000 float32"
        yield name, False, partial(launch, CHAIN, 32000, torch.float32, torch.float32, split=split)
    # The walk's rows prefetched (PREFETCH_N): a [BLOCK_N, BLOCK_N] table, 2 warps wide at N 64.
    for cfg, vocab in ((SMALL, 128256), (LARGE, 128256)):
        name = f"verify sampling prefetched {label(cfg)} V{vocab} float32"
        yield name, True, partial(launch, cfg, vocab, torch.float32, prefetch=64)
    name = f"verify sampling draft prefetched {label(CHAIN)} V32000 float32"
    yield name, True, partial(launch, CHAIN, 32000, torch.float32, torch.float32, prefetch=64)
    # Chunk loads pipelined through shared memory (STAGES), one program a request.
    name = f"verify sampling single pipelined {label(SMALL)} V128256 float32"
    yield name, True, partial(launch, SMALL, 128256, torch.float32, split=False, stages=3)
    name = f"verify sampling draft single pipelined {label(CHAIN)} V32000 bfloat16"
    yield name, False, partial(launch, CHAIN, 32000, torch.bfloat16, torch.bfloat16, split=False,
                               stages=3)  # fmt: skip


# Batch sizes whose launches must share one compile: ints equal to 1, divisible by 16 or
# neither, each way Triton could specialize a batch-dependent int.
BATCH_SIZES = (1, 2, 3, 16, 17, 33)


def batch_launchers(bs):
    """``(stage, launcher)`` for every kernel at batch size ``bs``: what a serving loop
    launches as its batch changes. The sampling launches take 8 programs in all, so that
    their programs per request (4, 3 or 1) and chunks per program change with ``bs``."""
    from eagle_fn import layout, organize, sampling, selection, verify
    from eagle_fn.kernels import greedy, tree_core
    from eagle_fn.kernels import sampling as fused_sampling
    from eagle_fn.kernels import selection as fused_select
    from eagle_fn.kernels import verify as fused_verify

    cfg, k, n = SMALL, SMALL.topk, SMALL.num_draft_tokens
    vt = verify_tree(cfg, bs)[2]
    scores = draft_steps(cfg, bs, torch.float32)[0].scores
    p = torch.zeros(bs * k, k)  # [bs * k, k]
    ids = torch.zeros_like(p, dtype=torch.int64)  # [bs * k, k]
    q = torch.empty(bs * n, 32000)  # [bs * N, V] never read: only compiled
    coins = torch.zeros(bs, n), torch.zeros(bs)  # [bs, N], [bs]

    def sample(split):
        default = fused_sampling.SPLIT, fused_sampling.PROGRAMS
        fused_sampling.SPLIT, fused_sampling.PROGRAMS = split, 8
        try:
            fused_sampling.sampling_core(*sampling.sampling_args(cfg, vt, q, *coins))
        finally:
            fused_sampling.SPLIT, fused_sampling.PROGRAMS = default

    select_args = selection.select_args(cfg, 1, p, ids, scores)
    yield "select step 1", lambda: fused_select.select_core(*select_args)
    lists = draft_lists(cfg, bs, torch.float32)
    yield "organize", lambda: tree_core(*organize.tree_args(cfg, *lists))
    odd = DraftConfig(2, 2, 5)  # N = 5: the FULL mask's length bs * N * (seq_len + N) varies
    odd_tree, odd_lens, _ = verify_tree(odd, bs)
    args = layout.verify_args(odd, odd_tree, odd_lens, odd_lens + bs, mask_mode=MaskMode.FULL)
    yield "verify build FULL", lambda: fused_verify.verify_core(*args)
    target = torch.zeros(bs * n, dtype=torch.int64)  # [bs * N]
    yield "verify greedy", lambda: greedy.greedy_core(*verify.greedy_args(cfg, vt, target))
    yield "verify sampling split", partial(sample, True)
    yield "verify sampling single", partial(sample, False)
