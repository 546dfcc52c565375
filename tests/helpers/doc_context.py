"""What the ``# given:`` blocks of docs/*.md take from their caller, built small and real.

One builder per page, by file name; a block takes the names its ``# given:`` line lists from
it. The values are what a draft loop and an engine hand over, from the torch functions, so a
fragment that misnames a function, a keyword or a field fails as it would in an engine.
"""

from typing import NamedTuple

import pytest
import torch

from eagle_fn import DraftConfig, DraftOrganizer, DraftStep, draw_uniforms, select_top_k

VOCAB = 16


class Drafted(NamedTuple):
    steps: list[DraftStep]
    inputs: list[tuple[torch.Tensor, torch.Tensor]]  # each step's topk_p, topk_index


def draft(cfg: DraftConfig, bs: int, device: torch.device) -> Drafted:
    """A seeded draft loop: each step's top-k of a softmax over ``VOCAB`` tokens."""
    generator = torch.Generator().manual_seed(0)
    drafted = Drafted([], [])
    for i in range(cfg.num_steps):
        rows = bs if i == 0 else bs * cfg.topk
        probs = torch.randn(rows, VOCAB, generator=generator).softmax(-1)  # [rows, V]
        topk_p, topk_index = (part.to(device) for part in probs.topk(cfg.topk, dim=-1))
        scores = drafted.steps[-1].scores if drafted.steps else None
        drafted.steps.append(select_top_k(cfg, i, topk_p, topk_index, scores))
        drafted.inputs.append((topk_p, topk_index))
    return drafted


def kernels_page() -> dict[str, object]:
    """docs/kernels.md: one draft round's inputs to every kernel, on the device the kernels
    run on (a GPU, else CPU tensors under the interpreter)."""
    from helpers import kernel_support  # skips without triton; the interpreter is already on

    problem = kernel_support.interpreter_problem()
    if problem is not None:
        pytest.skip(problem)
    device, bs = kernel_support.KERNEL_DEVICE, 2
    cfg = DraftConfig(topk=2, num_steps=3, num_draft_tokens=5)
    steps, inputs = draft(cfg, bs, device)
    i = cfg.num_steps - 1  # the select step shown is the last one
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(bs * cfg.num_draft_tokens, VOCAB, generator=generator)  # [bs * N, V]
    coins = draw_uniforms(bs, cfg.num_draft_tokens, generator=generator)
    return {
        "cfg": cfg,
        "i": i,
        "topk_p": inputs[i][0],
        "topk_index": inputs[i][1],
        "scores": steps[i - 1].scores,
        "score_list": [step.score_entry for step in steps],
        "token_list": [step.token_entry for step in steps],
        "parents_list": [step.parents_entry for step in steps],
        "bonus_tokens": torch.tensor([3, 4], device=device),
        "seq_lens": torch.tensor([5, 9], device=device),
        "target_predict": logits.argmax(-1).to(device),
        "probs": logits.softmax(-1).to(device),
        "uniforms": coins.uniforms.to(device),
        "final_uniforms": coins.final_uniforms.to(device),
    }


def sampling_page() -> dict[str, object]:
    """docs/sampling.md's engine: its organizer, a drafted tree, sampling settings per
    request and a stand-in target model, on the CPU."""
    cfg, bs, device = DraftConfig(topk=2, num_steps=3, num_draft_tokens=5), 2, torch.device("cpu")
    # Eager: EAGLE_FN_COMPILE's auto compiles the verify build on a CPU, over 15 s on 2 cores.
    organizer = DraftOrganizer(cfg, max_bs=4, device=device, compile=False)
    steps = draft(cfg, bs, device).steps
    lists = [[step.score_entry, step.token_entry, step.parents_entry] for step in steps]
    table = torch.randn(VOCAB, VOCAB, generator=torch.Generator().manual_seed(2))  # [V, V]

    def target_model(tokens, positions, tree_mask):
        """Logits after each node, from its own token alone (a real target attends to its
        ancestors through the mask and positions): ``[bs * N]`` each -> ``[bs * N, V]``."""
        assert positions.shape == tokens.shape
        assert tree_mask.numel() == tokens.numel() * cfg.num_draft_tokens  # QLEN
        return table[tokens]

    return {
        "cfg": cfg,
        "bs": bs,
        "organizer": organizer,
        "tree": organizer.organize_steps(*map(list, zip(*lists, strict=True))),
        "bonus_tokens": torch.tensor([3, 4]),
        "seq_lens": torch.tensor([5, 9]),
        "target_model": target_model,
        "temperature": torch.tensor([0.7, 0.0]),  # a sampled request and a greedy one
        "top_k": torch.tensor([8, 0]),
        "top_p": torch.tensor([0.9, 1.0]),
        "gen": torch.Generator().manual_seed(3),
    }


PAGES = {"kernels.md": kernels_page, "sampling.md": sampling_page}
