"""Sampling verification at real vocabulary sizes: the torch function, and the fused kernel as a
CUDA-graph replay where a GPU is at hand.

The kernel's target is at most twice the time to read the final rows once (``bs * V * 4``
bytes at the GPU's bandwidth); ``final_row_bytes`` is recorded beside each row for that ratio.
"""

import pytest
import torch

from cases import Case
from eagle_fn import build_verify_tree, draw_uniforms, organize_tree, verify_sampling
from eagle_fn.organize import DraftTree
from measure import record

VOCABS = (32000, 128256)
CASES = [Case.grid(bs, 3) for bs in (1, 8, 64)] + [Case.grid(bs, 4, 4) for bs in (1, 8, 64)]


def sampling_inputs(case, vocab, device="cpu"):
    """A verify tree, target rows (and draft rows for a chain) and coins for ``case``."""
    cfg, bs, n = case.config, case.bs, case.num_draft_tokens
    gen = torch.Generator().manual_seed(0)
    scores = [torch.rand(bs, 1 if i == 0 else cfg.topk, cfg.topk, generator=gen)
              for i in range(cfg.num_steps)]  # fmt: skip
    tokens = [torch.randint(0, vocab, (bs, cfg.topk if i == 0 else cfg.topk**2), generator=gen)
              for i in range(cfg.num_steps)]  # fmt: skip
    parents = [torch.arange(-1, cfg.topk).repeat(bs, 1)] + [
        torch.randint(0, cfg.topk**2, (bs, cfg.topk), generator=gen) + cfg.topk**2 * i + cfg.topk
        for i in range(cfg.num_steps - 1)
    ]
    tree: DraftTree = organize_tree(cfg, scores, tokens, parents)
    vt = build_verify_tree(cfg, tree, torch.zeros(bs, dtype=torch.int64), torch.full((bs,), 64))
    q = torch.softmax(torch.randn(bs, n, vocab, generator=gen), -1)  # [bs, N, V]
    p = torch.softmax(torch.randn(bs, n, vocab, generator=gen), -1) if cfg.topk == 1 else None
    coins = draw_uniforms(bs, n, generator=gen)
    moved = [t.to(device) for t in (q, *coins)]
    vt = type(vt)(*(t.to(device) for t in vt))
    return cfg, vt, moved, None if p is None else p.to(device)


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_verify_sampling_torch(benchmark, case, vocab):
    cfg, vt, (q, u, final), p = sampling_inputs(case, vocab)
    benchmark.extra_info.update(vocab=vocab, final_row_bytes=case.bs * vocab * 4)
    record(
        benchmark,
        "verify_sampling",
        case,
        lambda: verify_sampling(cfg, vt, q, u, final, draft_probs=p),
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the kernel bench needs a CUDA device")
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_verify_sampling_kernel_graph(benchmark, case, vocab):
    from eagle_fn.kernels import sampling as ksampling

    cfg, vt, (q, u, final), p = sampling_inputs(case, vocab, "cuda")

    def call():
        return ksampling.verify_sampling(cfg, vt, q, u, final, draft_probs=p)

    want = verify_sampling(cfg, vt, q, u, final, draft_probs=p)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        call()  # compiles the kernel outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = call()
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(got[:2], want[:2], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)

    def replay():
        graph.replay()
        torch.cuda.synchronize()

    benchmark.extra_info.update(vocab=vocab, final_row_bytes=case.bs * vocab * 4, graph=True)
    record(benchmark, "verify_sampling_kernel", case, replay)
