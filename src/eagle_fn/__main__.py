"""The demo, ``python -m eagle_fn``: organize a chain and a tree draft, show each path's cost."""

from __future__ import annotations

import torch

from eagle_fn import DraftConfig, DraftOrganizer, DraftTree, organize_multilayer, select_top_k
from eagle_fn.profiling import count_ops, time_us

BS = 8


def show_tree(title: str, tree: DraftTree, rows: int = 2) -> None:
    print(f"{title}")
    for name, tensor in zip(DraftTree._fields, tree, strict=True):
        print(f"  {name:17s} {list(tensor.shape)!s:9s} {tensor[:rows].tolist()}")


def chain_demo() -> tuple[DraftOrganizer, torch.Tensor, torch.Tensor]:
    """SPEC §7's chain: a multi-layer draft proposes one token per step."""
    worker = DraftOrganizer(DraftConfig.chain(3), max_bs=BS, device="cpu")
    topk_index = torch.tensor([[11, 0, 6], [5, 10, 3]])
    topk_p = torch.tensor([[0.9, 0.6, 0.7], [0.8, 0.5, 0.9]])
    show_tree(
        "chain draft, topk=1, num_steps=3 (fast path: cached constants)",
        worker.organize(topk_p, topk_index),
    )
    return worker, topk_p, topk_index


def draft_loop(cfg: DraftConfig, bs: int, seed: int) -> tuple[list[torch.Tensor], ...]:
    """A draft loop over a seeded stand-in for a draft model's per-step top-k."""
    gen = torch.Generator().manual_seed(seed)
    lists: tuple[list[torch.Tensor], ...] = ([], [], [])
    scores = None
    for step in range(cfg.num_steps):
        rows = bs if step == 0 else bs * cfg.topk
        logits = torch.randn(rows, 32, generator=gen)
        topk_p, topk_index = torch.softmax(logits, dim=1).topk(cfg.topk, dim=1)
        out = select_top_k(cfg, step, topk_p, topk_index, scores)
        scores = out.scores
        entries = (out.score_entry, out.token_entry, out.parents_entry)
        for kept, entry in zip(lists, entries, strict=True):
            kept.append(entry)
    return lists


def tree_demo() -> DraftTree:
    cfg = DraftConfig(topk=4, num_steps=3, num_draft_tokens=8)
    worker = DraftOrganizer(cfg, max_bs=BS, device="cpu")
    tree = worker.organize_steps(*draft_loop(cfg, bs=2, seed=0))
    show_tree("tree draft, topk=4, num_steps=3, num_draft_tokens=8 (general path)", tree)
    return tree


def cost_table() -> None:
    """µs/call and ATen ops/call of each path, at bs 8 and num_steps 5."""
    chain = DraftConfig.chain(5)
    worker = DraftOrganizer(chain, max_bs=BS, device="cpu")
    gen = torch.Generator().manual_seed(1)
    topk_p = torch.rand(BS, 5, generator=gen)
    topk_index = torch.randint(0, 32000, (BS, 5), generator=gen)
    tree_cfg = DraftConfig(topk=4, num_steps=4, num_draft_tokens=16)
    tree_worker = DraftOrganizer(tree_cfg, max_bs=BS, device="cpu")
    tree_lists = draft_loop(tree_cfg, bs=BS, seed=2)
    rows = [
        ("chain, fast path (worker)", worker.organize, (topk_p, topk_index)),
        ("chain, general path", organize_multilayer, (chain, topk_p, topk_index)),
        ("tree k=4 S=4 N=16 (worker)", tree_worker.organize_steps, tree_lists),
    ]
    mode = "compiled" if worker.compiled else "eager"
    print(
        f"\ncost per call, bs={BS}, {mode} (set EAGLE_FN_COMPILE=1 to compile), "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"  {'path':28s} {'us/call':>9s} {'ATen ops/call':>14s}")
    for name, fn, args in rows:
        print(f"  {name:28s} {time_us(fn, *args):9.1f} {count_ops(fn, *args):14d}")


def main() -> None:
    chain_demo()
    print()
    tree_demo()
    cost_table()


if __name__ == "__main__":
    main()
