"""The demo, ``python -m eagle_fn``: organize drafts, decode speculatively, show path costs."""

from __future__ import annotations

from collections.abc import Callable

import torch

from eagle_fn import DraftConfig, DraftOrganizer, DraftTree, build_verify_tree, organize_multilayer
from eagle_fn.profiling import count_ops, time_us
from eagle_fn.toy import draft_tree, greedy_generate, speculative_generate, toy_models

BS = 8


def show(title: str, tree: DraftTree, rows: int = 2) -> None:
    print(title)
    for name, tensor in zip(DraftTree._fields, tree, strict=True):
        print(f"  {name:17s} {list(tensor.shape)!s:9s} {tensor[:rows].tolist()}")


def chain_demo() -> None:
    """SPEC §7's chain: a multi-layer draft proposes one token per step."""
    worker = DraftOrganizer(DraftConfig.chain(3), max_bs=BS, device="cpu")
    topk_index = torch.tensor([[11, 0, 6], [5, 10, 3]])
    tree = worker.organize(torch.tensor([[0.9, 0.6, 0.7], [0.8, 0.5, 0.9]]), topk_index)
    show("chain draft, topk=1, num_steps=3: organized from cached constants", tree)


def tree_demo() -> None:
    """A tree drafted by the toy draft model, organized and laid out for verification."""
    cfg = DraftConfig(topk=4, num_steps=3, num_draft_tokens=8)
    worker = DraftOrganizer(cfg, max_bs=BS, device="cpu")
    _, draft = toy_models()
    previous, last = torch.tensor([3, 17]), torch.tensor([5, 9])
    tree = draft_tree(cfg, worker, draft, previous, last)
    show("\ntree draft, topk=4, num_steps=3, num_draft_tokens=8", tree)
    vt = worker.build_verify(tree, bonus_tokens=last, seq_lens=torch.tensor([12, 30]))
    print("  verify tree of request 0 (node 0 is the bonus token):")
    for name, values in (
        ("positions", vt.positions[: cfg.num_draft_tokens]),
        ("retrieve_next_token", vt.retrieve_next_token[0]),
        ("retrieve_next_sibling", vt.retrieve_next_sibling[0]),
    ):
        print(f"    {name:21s} {values.tolist()}")


def speculative_demo() -> None:
    """Speculative decoding of a toy target must emit exactly its greedy decoding."""
    target, draft = toy_models()
    prompts = torch.randint(0, target.vocab, (BS, 3), generator=torch.Generator().manual_seed(0))
    greedy = greedy_generate(target, prompts, 64)
    print(f"\nspeculative decoding, toy target/draft pair, bs={BS}, 64 new tokens each")
    print(f"  {'config':40s} {'mean accepted':>13s} {'rounds':>6s}  output")
    for cfg in (DraftConfig.chain(4), DraftConfig(4, 4, 16), DraftConfig(8, 5, 48)):
        run = speculative_generate(cfg, target, draft, prompts, 64)
        same = "== greedy" if torch.equal(run.tokens, greedy) else "DIFFERS FROM GREEDY"
        name = f"topk={cfg.topk} num_steps={cfg.num_steps} N={cfg.num_draft_tokens}"
        print(f"  {name:40s} {run.mean_accepted:13.2f} {run.accepted.shape[0]:6d}  {same}")


def cost_table() -> None:
    """µs/call and ATen ops/call of each path at bs 8."""
    chain = DraftConfig.chain(5)
    worker = DraftOrganizer(chain, max_bs=BS, device="cpu")
    gen = torch.Generator().manual_seed(1)
    topk_p = torch.rand(BS, 5, generator=gen)
    topk_index = torch.randint(0, 32000, (BS, 5), generator=gen)
    chain_tree = worker.organize(topk_p, topk_index)
    bonus, seq_lens = torch.zeros(BS, dtype=torch.int64), torch.full((BS,), 100)

    tree_cfg = DraftConfig(topk=4, num_steps=4, num_draft_tokens=16)
    tree_worker = DraftOrganizer(tree_cfg, max_bs=BS, device="cpu")
    _, draft = toy_models()
    lasts = torch.randint(0, draft.vocab, (2, BS), generator=gen)
    tree = draft_tree(tree_cfg, tree_worker, draft, lasts[0], lasts[1])

    rows: list[tuple[str, Callable[..., object], tuple[object, ...]]] = [
        ("organize chain S=5, fast path", worker.organize, (topk_p, topk_index)),
        ("organize chain S=5, general path", organize_multilayer, (chain, topk_p, topk_index)),
        ("build_verify chain, fast path", worker.build_verify, (chain_tree, bonus, seq_lens)),
        (
            "build_verify chain, general path",
            build_verify_tree,
            (chain, chain_tree, bonus, seq_lens),
        ),
        ("build_verify tree k=4 S=4 N=16", tree_worker.build_verify, (tree, bonus, seq_lens)),
    ]
    mode = "compiled" if worker.compiled else "eager"
    print(
        f"\ncost per call, bs={BS}, {mode} (EAGLE_FN_COMPILE=1 compiles), "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"  {'path':34s} {'us/call':>9s} {'ATen ops/call':>14s}")
    for name, fn, args in rows:
        print(f"  {name:34s} {time_us(fn, *args):9.1f} {count_ops(fn, *args):14d}")


def main() -> None:
    chain_demo()
    tree_demo()
    speculative_demo()
    cost_table()


if __name__ == "__main__":
    main()
