"""A tiny deterministic target/draft pair and a speculative decoding loop over the public API."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import NoneType
from typing import Any, NamedTuple, cast

import torch
from torch import Tensor

from .arguments import require_config, require_int, require_type, show
from .config import DraftConfig
from .contracts import FLOAT, Arg, contract, fields
from .probs import draw_uniforms, target_probs_from_logits
from .sampling import verify_sampling
from .toy_draft import draft_tree, sampled_chain
from .types import GreedyVerdict, VerifyTree
from .verify import verify_greedy
from .worker import DraftOrganizer


@dataclass(frozen=True, eq=False)
class ToyModel:
    """Next-token logits from a request's last two tokens: a seeded ``[V, V, V]`` table.

    Two tokens of context make a token's parent matter, as it does for a real model.
    """

    table: Tensor  # [V, V, V] logits[previous token, last token]

    @property
    def vocab(self) -> int:
        return self.table.shape[0]

    def logits(self, previous: Tensor, last: Tensor) -> Tensor:
        """``previous, last [...]`` -> ``[..., V]``."""
        return self.table[previous, last]


# The models and prompts of the generate functions (one model, or a target and a draft), all
# on the models' device; whether the vocabularies agree is checked beside.
_PROMPTS = Arg("[bs, context]")
_TARGET, _DRAFT = (fields(ToyModel, table=Arg(f"[{v}, {v}, {v}]", FLOAT)) for v in "VD")
GENERATE = {
    1: contract(
        "generate", config=False, device_label="the models", target=_TARGET, prompts=_PROMPTS
    ),
    2: contract(
        "generate",
        config=False,
        device_label="the models",
        target=_TARGET,
        draft=_DRAFT,
        prompts=_PROMPTS,
    ),
}
TEMPERATURES = contract("generate", config=False, prompts=_PROMPTS, temperature=Arg("[bs]", FLOAT))


def toy_models(vocab: int = 48, *, seed: int = 0, noise: float = 0.6) -> tuple[ToyModel, ToyModel]:
    """A target and a draft that agrees with it often but not always: the target's table
    plus ``noise`` times seeded Gaussian noise: float32 CPU tables, whatever torch's default
    dtype and device, so a seed always gives the same models."""
    gen = torch.Generator().manual_seed(seed)
    shape, f32 = (vocab, vocab, vocab), torch.float32
    target = torch.randn(shape, generator=gen, dtype=f32, device="cpu")  # [V, V, V]
    draft = target + noise * torch.randn(shape, generator=gen, dtype=f32, device="cpu")
    return ToyModel(target), ToyModel(draft)


class Generation(NamedTuple):
    """Generated tokens and how many drafts each verification round accepted."""

    tokens: Tensor  # [bs, max_new_tokens]
    accepted: Tensor  # [rounds, bs] accepted draft tokens per round (-1 once a request is done)

    @property
    def mean_accepted(self) -> float:
        """Mean accepted draft tokens per round, over the rounds each request took part in."""
        done = self.accepted >= 0
        return float(self.accepted[done].float().mean()) if done.any() else 0.0


def greedy_generate(target: ToyModel, prompts: Tensor, max_new_tokens: int) -> Tensor:
    """Plain greedy decoding of the target: ``prompts [bs, >= 2]`` -> ``[bs, max_new_tokens]``."""
    _check_generate("greedy_generate", (target,), prompts, max_new_tokens)
    return _decode(target, prompts, max_new_tokens, lambda logits: logits.argmax(-1))


def sample_generate(
    target: ToyModel,
    prompts: Tensor,
    max_new_tokens: int,
    *,
    temperature: float | Tensor,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Plain sampling from the target, one token per step: the distribution speculative
    sampling must reproduce. Temperature 0 (per request) is greedy decoding.

    Shapes: ``prompts [bs, >= 2]``, ``temperature`` a float or ``[bs]`` ->
    ``[bs, max_new_tokens]``.
    """
    _check_generate("sample_generate", (target,), prompts, max_new_tokens, generator)
    temps = _temperatures("sample_generate", temperature, prompts)

    def sample(logits: Tensor) -> Tensor:
        probs = target_probs_from_logits(logits, temps)  # [bs, V]
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)  # [bs]

    return _decode(target, prompts, max_new_tokens, sample)


def _decode(
    target: ToyModel, prompts: Tensor, max_new_tokens: int, pick: Callable[[Tensor], Tensor]
) -> Tensor:
    """One target step per token; ``pick`` turns the logits ``[bs, V]`` into tokens ``[bs]``."""
    previous, last = prompts[:, -2], prompts[:, -1]  # [bs] each
    out = prompts.new_empty(prompts.shape[0], max_new_tokens)  # [bs, max_new_tokens]
    for i in range(max_new_tokens):
        previous, last = last, pick(target.logits(previous, last))
        out[:, i] = last
    return out


def speculative_generate(
    cfg: DraftConfig,
    target: ToyModel,
    draft: ToyModel,
    prompts: Tensor,
    max_new_tokens: int,
    *,
    temperature: float | Tensor = 0.0,
    generator: torch.Generator | None = None,
) -> Generation:
    """Speculative decoding from the public functions only, greedy or sampled.

    Each round drafts, organizes with a :class:`DraftOrganizer`, lays out the verify tree, runs
    the target on every node and keeps what :func:`verify_greedy` accepts at an int or float
    ``temperature=0`` (the output equals :func:`greedy_generate`'s), else :func:`verify_sampling`
    with coins from ``generator`` (distributed as :func:`sample_generate`'s output). A float
    must be finite and >= 0; a ``[bs]`` tensor is not checked (that would sync): rows <= 0 greedy.

    Shapes: ``prompts [bs, >= 2]`` int64 -> ``tokens [bs, max_new_tokens]``.
    """
    temps = _check_speculative(cfg, target, draft, prompts, max_new_tokens, temperature, generator)
    bs = prompts.shape[0]
    worker = DraftOrganizer(cfg, max_bs=max(bs, 1), device=prompts.device)
    # A round commits up to num_steps + 1 tokens; one more column catches discarded writes.
    out = prompts.new_zeros(bs, max_new_tokens + cfg.num_steps + 1)  # [bs, T + S + 1]
    count = prompts.new_zeros(bs)  # [bs] tokens generated per request
    previous, last = prompts[:, -2], prompts[:, -1]
    seq_lens = prompts.new_full((bs,), prompts.shape[1])  # [bs]
    accepted = []
    while bool((count < max_new_tokens).any()):
        round_ = Round(cfg, worker, target, draft, previous, last, seq_lens)
        verdict = verify_round(round_, temps, generator)
        active = count < max_new_tokens  # [bs] finished requests keep their state
        accepted.append(torch.where(active, verdict.num_accepted, -1))  # [bs]
        committed = _committed(verdict.predicts, verdict.accept_index, active)  # [bs, S + 1]
        n_new = _append(out, committed, count)  # [bs]
        previous, last = _last_two(committed, n_new, previous, last)
        count, seq_lens = count + n_new, seq_lens + n_new
    rounds = torch.stack(accepted) if accepted else prompts.new_empty(0, bs)  # [rounds, bs]
    return Generation(out[:, :max_new_tokens], rounds)


class Round(NamedTuple):
    """One verification round's models and state."""

    cfg: DraftConfig
    worker: DraftOrganizer
    target: ToyModel
    draft: ToyModel
    previous: Tensor  # [bs]
    last: Tensor  # [bs]
    seq_lens: Tensor  # [bs]


def verify_round(
    r: Round, temps: Tensor | None, generator: torch.Generator | None
) -> GreedyVerdict:
    """Drafts, lays out and verifies one round: greedily when ``temps`` is None."""
    bs = r.last.shape[0]
    draft_probs = None
    if temps is not None and r.cfg.is_chain:
        tree, draft_probs = sampled_chain(r.cfg, r.worker, r.draft, r.previous, r.last, temps,
                                          generator)  # fmt: skip
    else:
        tree = draft_tree(r.cfg, r.worker, r.draft, r.previous, r.last)
    vt = r.worker.build_verify(tree, r.last, r.seq_lens)
    logits = _node_logits(r.target, vt, r.previous, bs)  # [bs, N, V]
    if temps is None:
        return verify_greedy(r.cfg, vt, logits.argmax(-1).flatten())  # target [bs * N]
    probs = target_probs_from_logits(logits, temps)  # [bs, N, V]
    coins = draw_uniforms(bs, r.cfg.num_draft_tokens, generator=generator, device=r.last.device)
    return verify_sampling(r.cfg, vt, probs, *coins, draft_probs=draft_probs)


def _node_logits(target: ToyModel, vt: VerifyTree, previous: Tensor, bs: int) -> Tensor:
    """The target's logits at every node, reading each node's previous token through the
    tree mask and positions the way attention would. ``-> [bs, N, V]``."""
    n = vt.retrieve_index.shape[1]
    tokens = vt.draft_tokens.view(bs, n)  # [bs, N]
    positions = vt.positions.view(bs, n)  # [bs, N]
    visible = vt.tree_mask.view(bs, n, n)  # [bs, N, N]
    # A node's previous token is the visible node one position earlier: its parent.
    parent = visible & (positions.unsqueeze(1) == positions.unsqueeze(2) - 1)  # [bs, N, N]
    parent_token = (parent * tokens.unsqueeze(1)).sum(-1)  # [bs, N]
    parent_token[:, 0] = previous  # the root's previous token is in the verified context
    return target.logits(parent_token, tokens)


def _committed(predicts: Tensor, accept_index: Tensor, active: Tensor) -> Tensor:
    """Tokens to commit per active request, in order: ``[bs, S + 1]``, -1 past the last."""
    picked = predicts[accept_index.clamp(min=0)]  # [bs, S + 1]
    return torch.where((accept_index >= 0) & active.unsqueeze(1), picked, -1)  # [bs, S + 1]


def _append(out: Tensor, committed: Tensor, count: Tensor) -> Tensor:
    """Writes each request's committed tokens after its ``count`` tokens; returns how many."""
    taken = committed >= 0  # [bs, S + 1]
    offsets = torch.arange(committed.shape[1], device=out.device)  # [S + 1]
    spare = out.shape[1] - 1  # no committed token ever lands in the last column
    out.scatter_(1, torch.where(taken, count.unsqueeze(1) + offsets, spare), committed)
    return taken.sum(1)


def _last_two(
    committed: Tensor, n_new: Tensor, previous: Tensor, last: Tensor
) -> tuple[Tensor, Tensor]:
    """The two-token context after appending ``n_new`` committed tokens."""

    def pick(i: Tensor) -> Tensor:
        return committed.gather(1, i.clamp(min=0).unsqueeze(1)).squeeze(1)  # [bs]

    new_last = torch.where(n_new >= 1, pick(n_new - 1), last)  # [bs]
    new_previous = torch.where(n_new >= 2, pick(n_new - 2), torch.where(n_new == 1, last, previous))
    return new_previous, new_last


def _check_generate(
    where: str, models: tuple[Any, ...], prompts: object, max_new_tokens: object, gen: object = None
) -> None:
    # A demo utility, off any hot path: it may read the prompts' values to check them.
    GENERATE[len(models)](None, *models, prompts, where=where)
    tokens, vocab = cast(Tensor, prompts), models[0].vocab
    if models[-1].vocab != vocab:
        raise ValueError(f"{where}: target and draft vocabularies differ")
    if tokens.shape[1] < 2:
        got = show(tokens.shape)
        raise ValueError(f"{where}: prompts must hold at least 2 tokens per request, got {got}")
    if not bool(((tokens >= 0) & (tokens < vocab)).all()):
        raise ValueError(f"{where}: prompts must hold token ids in [0, {vocab})")
    require_int(where, "max_new_tokens", max_new_tokens, 0)
    require_type(where, "generator", gen, (torch.Generator, NoneType), "a torch.Generator or None")


def _check_speculative(
    cfg: Any, target: Any, draft: Any, prompts: Any, tokens: Any, temperature: Any, gen: Any
) -> Tensor | None:
    """speculative_generate's checks; returns the per-request temperatures, None if greedy."""
    where = "speculative_generate"
    require_config(where, cfg)
    _check_generate(where, (target, draft), prompts, tokens, gen)
    if cfg.topk > draft.vocab:  # the draft keeps its top k tokens a step
        raise ValueError(f"{where}: topk = {cfg.topk} exceeds the vocabulary of {draft.vocab}")
    temps = _temperatures(where, temperature, prompts)  # a scalar passing it is an int or float
    return None if not isinstance(temperature, Tensor) and temperature == 0 else temps


def _temperatures(where: str, temperature: object, prompts: Tensor) -> Tensor:
    """Per-request temperatures ``[bs]`` from a float or a ``[bs]`` tensor."""
    if isinstance(temperature, Tensor):
        TEMPERATURES(None, prompts, temperature, where=where)
        return temperature
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool):
        raise TypeError(
            f"{where}: temperature must be a float or a [bs] tensor, "
            f"got {type(temperature).__name__}"
        )
    if not temperature >= 0 or temperature == float("inf"):
        raise ValueError(f"{where}: temperature must be finite and >= 0, got {temperature}")
    return prompts.new_full(prompts.shape[:1], float(temperature), dtype=torch.float32)  # [bs]
