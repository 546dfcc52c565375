"""The demo and CLI, ``python -m eagle_fn``: organize drafts, decode speculatively, show costs."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import torch

import eagle_fn
from eagle_fn import DraftConfig, DraftOrganizer, DraftTree, build_verify_tree, organize_multilayer
from eagle_fn._modes import cpp_compiler_missing
from eagle_fn.arguments import as_device
from eagle_fn.profiling import count_kernels, count_ops, time_us
from eagle_fn.toy import (
    ToyModel,
    draft_tree,
    greedy_generate,
    sample_generate,
    speculative_generate,
    toy_models,
)

BS = 8


def show(title: str, tree: DraftTree, rows: int = 2) -> None:
    print(title)
    for name, tensor in zip(DraftTree._fields, tree, strict=True):
        print(f"  {name:17s} {list(tensor.shape)!s:9s} {tensor[:rows].tolist()}")


def models_on(device: torch.device) -> tuple[ToyModel, ToyModel]:
    target, draft = toy_models()
    return ToyModel(target.table.to(device)), ToyModel(draft.table.to(device))


def chain_demo(device: torch.device) -> None:
    """docs/semantics.md §7's chain: a multi-layer draft proposes one token per step."""
    worker = DraftOrganizer(DraftConfig.chain(3), max_bs=BS, device=device)
    topk_index = torch.tensor([[11, 0, 6], [5, 10, 3]], device=device)
    topk_p = torch.tensor([[0.9, 0.6, 0.7], [0.8, 0.5, 0.9]], device=device)
    show(
        "chain draft, topk=1, num_steps=3: organized from cached constants",
        worker.organize(topk_p, topk_index),
    )


def tree_demo(device: torch.device) -> None:
    """A tree drafted by the toy draft model, organized and laid out for verification."""
    cfg = DraftConfig(topk=4, num_steps=3, num_draft_tokens=8)
    worker = DraftOrganizer(cfg, max_bs=BS, device=device)
    _, draft = models_on(device)
    previous, last = torch.tensor([3, 17], device=device), torch.tensor([5, 9], device=device)
    tree = draft_tree(cfg, worker, draft, previous, last)
    show("\ntree draft, topk=4, num_steps=3, num_draft_tokens=8", tree)
    vt = worker.build_verify(tree, last, torch.tensor([12, 30], device=device))
    print("  verify tree of request 0 (node 0 is the bonus token):")
    for name, values in (
        ("positions", vt.positions[: cfg.num_draft_tokens]),
        ("retrieve_next_token", vt.retrieve_next_token[0]),
        ("retrieve_next_sibling", vt.retrieve_next_sibling[0]),
    ):
        print(f"    {name:21s} {values.tolist()}")


def speculative_demo(device: torch.device) -> None:
    """Speculative decoding of a toy target must emit exactly its greedy decoding."""
    target, draft = models_on(device)
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, target.vocab, (BS, 3), generator=gen).to(device)
    greedy = greedy_generate(target, prompts, 64)
    print(f"\nspeculative decoding, toy target/draft pair, bs={BS}, 64 new tokens each")
    print(f"  {'config':40s} {'mean accepted':>13s} {'rounds':>6s}  output")
    for cfg in (DraftConfig.chain(4), DraftConfig(4, 4, 16), DraftConfig(8, 5, 48)):
        run = speculative_generate(cfg, target, draft, prompts, 64)
        same = "== greedy" if torch.equal(run.tokens, greedy) else "DIFFERS FROM GREEDY"
        name = f"topk={cfg.topk} num_steps={cfg.num_steps} N={cfg.num_draft_tokens}"
        print(f"  {name:40s} {run.mean_accepted:13.2f} {run.accepted.shape[0]:6d}  {same}")


def sampling_demo(device: torch.device) -> None:
    """Sampled speculative decoding must emit the target's sampling distribution."""
    target, draft = models_on(device)
    bs, new, temperature = 4096, 3, 0.8  # many copies of one prompt: a distribution per position
    prompts = torch.tensor([[3, 17]], device=device).expand(bs, 2).contiguous()
    gen = torch.Generator(device=device).manual_seed(0)
    plain = sample_generate(target, prompts, new, temperature=temperature, generator=gen)
    print(f"\nsampled speculative decoding, T={temperature}, {bs} copies of one prompt")
    print(
        f"  {'config':30s} {'mean accepted':>13s}  total variation vs plain sampling, per position"
    )
    for cfg in (DraftConfig.chain(3), DraftConfig(4, 3, 10)):
        run = speculative_generate(
            cfg, target, draft, prompts, new, temperature=temperature, generator=gen
        )
        tv = [total_variation(run.tokens[:, i], plain[:, i], target.vocab) for i in range(new)]
        name = f"topk={cfg.topk} num_steps={cfg.num_steps} N={cfg.num_draft_tokens}"
        print(f"  {name:30s} {run.mean_accepted:13.2f}  " + "  ".join(f"{t:.3f}" for t in tv))
    again = sample_generate(target, prompts, new, temperature=temperature, generator=gen)
    chance = [total_variation(again[:, i], plain[:, i], target.vocab) for i in range(new)]
    print(
        f"  {'plain sampling, a second run':30s} {'':13s}  " + "  ".join(f"{t:.3f}" for t in chance)
    )
    mixed = torch.tensor([0.0, temperature] * 4, device=device)  # greedy and sampled requests
    run = speculative_generate(
        DraftConfig(4, 3, 10), target, draft, prompts[:8], 16, temperature=mixed, generator=gen
    )
    greedy = greedy_generate(target, prompts[:8], 16)
    same = torch.equal(run.tokens[0::2], greedy[0::2])
    print(f"  a mixed batch of greedy and sampled requests: greedy rows == greedy decoding: {same}")


def total_variation(a: torch.Tensor, b: torch.Tensor, vocab: int) -> float:
    """Half the L1 distance between the empirical distributions of two token samples."""
    pa = torch.bincount(a, minlength=vocab).double() / a.numel()
    pb = torch.bincount(b, minlength=vocab).double() / b.numel()
    return float((pa - pb).abs().sum() / 2)


def cost_table(device: torch.device) -> None:
    """µs/call and ATen ops/call of each path at bs 8 (and CUDA kernels/call on CUDA)."""
    chain = DraftConfig.chain(5)
    worker = DraftOrganizer(chain, max_bs=BS, device=device)
    gen = torch.Generator().manual_seed(1)
    topk_p = torch.rand(BS, 5, generator=gen).to(device)
    topk_index = torch.randint(0, 32000, (BS, 5), generator=gen).to(device)
    chain_tree = worker.organize(topk_p, topk_index)
    bonus = torch.zeros(BS, dtype=torch.int64, device=device)  # [bs]
    seq_lens = torch.full((BS,), 100, device=device)  # [bs]
    tree_cfg = DraftConfig(topk=4, num_steps=4, num_draft_tokens=16)
    tree_worker = DraftOrganizer(tree_cfg, max_bs=BS, device=device)
    _, draft = models_on(device)
    lasts = torch.randint(0, draft.vocab, (2, BS), generator=gen).to(device)
    tree = draft_tree(tree_cfg, tree_worker, draft, lasts[0], lasts[1])
    # The op counter counts eager ops: a compiled path's graph runs none it can see.
    how = ", compiled" if "verify" in tree_worker.compiled else ""
    rows: list[tuple[str, Callable[..., object], tuple[object, ...]]] = [
        ("organize chain S=5, fast path", worker.organize, (topk_p, topk_index)),
        ("organize chain S=5, general path", organize_multilayer, (chain, topk_p, topk_index)),
        ("build_verify chain, fast path", worker.build_verify, (chain_tree, bonus, seq_lens)),
        ("build_verify chain, general", build_verify_tree, (chain, chain_tree, bonus, seq_lens)),
        (f"build_verify tree k=4 S=4 N=16{how}", tree_worker.build_verify, (tree, bonus, seq_lens)),
    ]
    cuda = device.type == "cuda"
    compiled = ", ".join(sorted(tree_worker.compiled)) or "none"
    print(f"\ncost per call, bs={BS}, on {device}, torch {torch.__version__}")
    missing = not cuda and cpp_compiler_missing()
    why = "EAGLE_FN_COMPILE" + ("; no C++ compiler for inductor" if missing else "")
    print(f"  compiled paths of the tree worker: {compiled} ({why})")
    print(
        f"  {'path':40s} {'us/call':>9s} {'ATen ops/call':>14s}" + (" kernels/call" if cuda else "")
    )
    for name, fn, args in rows:
        kernels = f" {count_kernels(fn, *args):12d}" if cuda else ""
        print(f"  {name:40s} {time_us(fn, *args):9.1f} {count_ops(fn, *args):14d}{kernels}")


SECTIONS: dict[str, Callable[[torch.device], None]] = {
    "chain": chain_demo,
    "tree": tree_demo,
    "speculative": speculative_demo,
    "sampling": sampling_demo,
    "costs": cost_table,
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m eagle_fn",
        description="Demo of eagle_fn: EAGLE draft organization and verification in PyTorch.",
        epilog="EAGLE_FN_COMPILE (0, 1, auto) and EAGLE_FN_BACKEND (torch, triton, auto) apply.",
    )
    parser.add_argument("--version", action="version", version=f"eagle_fn {eagle_fn.__version__}")
    parser.add_argument(
        "--device", default="cpu", help="where to run, e.g. cpu or cuda (default cpu)"
    )
    # No choices=: with nargs="*", Python before 3.12 checks an empty list against them.
    parser.add_argument(
        "sections",
        nargs="*",
        metavar="SECTION",
        help=f"what to show, any of {', '.join(SECTIONS)} (default: all)",
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.sections if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section {unknown[0]!r} (choose from {', '.join(SECTIONS)})")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:  # the device and the settings, checked before any section runs: an error, no traceback
        device = as_device("python -m eagle_fn", args.device)
        if device.type not in ("cpu", "cuda"):
            raise ValueError(
                f"python -m eagle_fn: the demo runs on a cpu or cuda device, got {device}"
            )
        DraftOrganizer(DraftConfig(2, 2, 3), max_bs=1, device=device)  # reads both variables
    except (TypeError, ValueError, RuntimeError) as error:
        raise SystemExit(f"error: {error}") from None
    for name in args.sections or SECTIONS:
        SECTIONS[name](device)


if __name__ == "__main__":
    main()
