"""Sampling inputs: the target's per-request sampling distributions and the verification coins.

Randomness is an input of verification: :func:`draw_uniforms` draws its coins from a
``torch.Generator``, so :func:`~eagle_fn.verify_sampling` itself is deterministic.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
from torch import Tensor

from .arguments import as_device, require_int, require_type, show
from .contracts import FLOAT, Arg, Contract
from .types import exportable

UNIFORM_BITS = 23  # coins are midpoints of 2**23 equal bins: exact in float32, never 0 or 1
_ROWS = Arg("[bs, N, V] or [rows, V]", FLOAT)  # 2-D: rows = bs * N, checked beside
_OPTIONAL = (("top_k", Arg("[bs]")), ("top_p", Arg("[bs]", FLOAT)))


def _logits_contract(top_k: bool, top_p: bool) -> Contract:
    args = [("temperature", Arg("[bs]", FLOAT)), ("logits", _ROWS)]
    args += [arg for arg, given in zip(_OPTIONAL, (top_k, top_p), strict=True) if given]
    return Contract("target_probs_from_logits", tuple(args), config=False)


# The contract of target_probs_from_logits, by which of top_k and top_p are given.
LOGITS = {(k, p): _logits_contract(k, p) for k in (False, True) for p in (False, True)}


class Uniforms(NamedTuple):
    """The coins of one sampling verification.

    Attributes:
        uniforms: ``[bs, N]`` float32; ``uniforms[:, j]`` picks among node ``j``'s children.
        final_uniforms: ``[bs]`` float32, drawing the final token.
    """

    uniforms: Tensor
    final_uniforms: Tensor


exportable(Uniforms)


def draw_uniforms(
    bs: int,
    num_draft_tokens: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Uniforms:
    """Draws the coins for :func:`verify_sampling` from ``generator``, float32, in (0, 1).

    Each coin is the midpoint of one of ``2**23`` equal bins, so it is never exactly 0: a zero
    coin would accept a first child whose target probability is 0 (``0 <= 0``, target-only),
    which breaks the exact agreement of greedy rows with :func:`~eagle_fn.verify_greedy`. A
    coin is off a continuous uniform by at most ``2**-24`` (``torch.rand``'s float32 grid step
    is ``2**-24`` too), so acceptance probabilities are exact to that.
    Call it eagerly, before a compiled region: dynamo cannot trace a generator (docs/sampling.md).

    Args:
        bs, num_draft_tokens: the requests, and ``N``, the nodes per request.
        generator: the random source; when omitted, torch's default one for ``device``.
        device: where to draw; when omitted, the generator's device, else the CPU.

    Shapes: -> ``uniforms [bs, N]``, ``final_uniforms [bs]``.

    Example:
        >>> coins = draw_uniforms(2, 3, generator=torch.Generator().manual_seed(0))
        >>> coins.uniforms.shape, coins.final_uniforms.shape
        (torch.Size([2, 3]), torch.Size([2]))
        >>> bool(((coins.uniforms > 0) & (coins.uniforms < 1)).all())
        True
    """
    device = _check_coins(bs, num_draft_tokens, generator, device)
    bins = torch.randint(
        0, 2**UNIFORM_BITS, (bs, num_draft_tokens + 1), generator=generator, device=device
    )  # [bs, N + 1]
    coins = (2 * bins + 1).to(torch.float32) * 2.0 ** -(UNIFORM_BITS + 1)  # [bs, N + 1]
    # Fresh strides: at bs 1 contiguous() would keep the [1, N + 1] buffer's, and a graph
    # compiled with an unbacked bs guards on strides (one more graph for bs 1).
    fresh = torch.contiguous_format
    uniforms, final = coins[:, :-1], coins[:, -1]  # [bs, N], [bs]
    return Uniforms(uniforms.clone(memory_format=fresh), final.clone(memory_format=fresh))


def _check_coins(
    bs: int, num_draft_tokens: int, generator: torch.Generator | None, device: object
) -> torch.device:
    """Checks :func:`draw_uniforms`' arguments; returns where to draw."""
    where = "draw_uniforms"
    require_int(where, "bs", bs, 0)
    require_int(where, "num_draft_tokens", num_draft_tokens, 1)
    if generator is None:
        return as_device(where, "cpu" if device is None else device)
    require_type(where, "generator", generator, torch.Generator, "a torch.Generator or None")
    drawn_on = as_device(where, generator.device if device is None else device)
    if generator.device.type != drawn_on.type:
        raise ValueError(f"{where}: generator is on {generator.device}, device is {drawn_on}")
    return drawn_on


def target_probs_from_logits(
    logits: Tensor, temperature: Tensor, *, top_k: Tensor | None = None, top_p: Tensor | None = None
) -> Tensor:
    """The target's sampling distribution at every node, per request (docs/semantics.md §9).

    NaN logits count as ``-inf``, infinities stay. Temperature ``<= 0`` gives one-hot rows at
    the first largest logit (greedy rows verify exactly as :func:`~eagle_fn.verify_greedy`,
    docs/sampling.md); otherwise softmax, top-k, top-p, renormalized (a row with a ``+inf``
    or no finite logit: all zero). A positive temperature is taken into the computation's
    normal range (so never rounded to 0 or inf); a NaN one gives zero rows (unchecked: a
    sync).

    Args:
        logits: the target's logits at every node.
        temperature, top_k, top_p: per request: float, int64 (optional), float (optional).

    Shapes: ``logits [bs, N, V]`` or ``[bs * N, V]``, ``temperature, top_k, top_p [bs]`` ->
    ``logits``' shape; float32 (float64 for float64 logits). Flat logits cannot show a wrong
    ``bs``: N is their rows over it (docs/sampling.md); ``[bs, N, V]`` ones have it checked.

    Example:
        >>> logits = torch.tensor([[0.0, 1.0, 0.0], [2.0, float("nan"), 2.0]])
        >>> target_probs_from_logits(logits, torch.tensor([1.0, 0.0])).tolist()[1]
        [1.0, 0.0, 0.0]
        >>> target_probs_from_logits(logits, torch.ones(2), top_k=torch.tensor([1, 1])).tolist()[0]
        [0.0, 1.0, 0.0]
    """
    rows = _check_logits(logits, temperature, top_k, top_p)
    bs, vocab = temperature.shape[0], logits.shape[-1]
    x = logits.reshape(bs, rows, vocab).to(compute_dtype(logits.dtype))  # [bs, N, V]
    x = torch.where(torch.isnan(x), -math.inf, x)  # [bs, N, V]
    greedy, temps = _divisors(temperature, x.dtype)  # [bs, 1, 1] each
    # Shifted to the row's max before dividing: a tiny temperature cannot overflow to inf.
    shifted = x - x.amax(-1, keepdim=True)  # [bs, N, V] NaN where no logit is finite
    probs = torch.softmax(shifted / temps, dim=-1)  # [bs, N, V]
    probs = torch.where(probs > 0, probs, 0.0)  # [bs, N, V] NaN rows (no finite logit): 0
    if top_k is not None or top_p is not None:
        probs = _renormalize(probs * _top_k_top_p_mask(probs, top_k, top_p))  # [bs, N, V]
    onehot = torch.zeros_like(probs).scatter_(-1, x.argmax(-1, keepdim=True), 1.0)  # [bs, N, V]
    return torch.where(greedy, onehot, probs).reshape(logits.shape)  # [bs, N, V] or [bs * N, V]


def _divisors(temperature: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Which requests are greedy (temperature <= 0, before any rounding), and what divides
    their logits: 1 for those, else the temperature within ``dtype``'s normal range, so that
    one a float32 would round to 0 or inf still divides. Normal, not subnormal: a CPU that
    flushes subnormals would read the floor as 0. Shapes: ``[bs]`` -> ``[bs, 1, 1]`` each."""
    greedy = (temperature <= 0).view(-1, 1, 1)  # [bs, 1, 1]
    info = torch.finfo(dtype)
    temps = temperature.to(dtype).clamp(info.smallest_normal, info.max)  # [bs]
    return greedy, torch.where(greedy, 1.0, temps.view(-1, 1, 1))  # [bs, 1, 1] each


def _top_k_top_p_mask(probs: Tensor, top_k: Tensor | None, top_p: Tensor | None) -> Tensor:
    """Which probabilities top-k then top-p keep. ``[bs, N, V]`` bool."""
    bs, vocab = probs.shape[0], probs.shape[-1]
    ordered, order = probs.sort(dim=-1, descending=True, stable=True)  # [bs, N, V]
    keep = torch.ones_like(ordered, dtype=torch.bool)  # [bs, N, V] in sorted order
    if top_k is not None:
        k = top_k.view(bs, 1, 1)  # [bs, 1, 1]
        kth = ordered.gather(-1, (k - 1).clamp(0, vocab - 1).expand(-1, probs.shape[1], 1))
        keep = keep & ((k <= 0) | (k >= vocab) | (ordered >= kth))  # [bs, N, V]
    if top_p is not None:
        # In float64, where float32 would round more boundaries away: a preceding mass equal
        # to p in exact arithmetic falls where float64 rounds it.
        mass = _renormalize(ordered.double() * keep)  # [bs, N, V]
        running = torch.cumsum(mass, dim=-1)  # [bs, N, V]
        before = torch.cat([torch.zeros_like(running[..., :1]), running[..., :-1]], -1)
        p = top_p.double().view(bs, 1, 1)  # [bs, 1, 1]
        # The most probable token always stays: p <= 0 or NaN keeps it (and its ties).
        first = torch.arange(vocab, device=probs.device) == 0  # [V]
        cut = keep & ((before < p) | (p >= 1) | first)  # [bs, N, V] a prefix, never empty
        # Tokens tied with the last one kept stay too, as in SGLang (flashinfer's top-p keeps
        # every probability at or above a threshold): the vocabulary's order cannot matter.
        least = ordered.gather(-1, cut.sum(-1, keepdim=True) - 1)  # [bs, N, 1]
        keep = keep & (ordered >= least)  # [bs, N, V]
    return torch.zeros_like(keep).scatter_(-1, order, keep)  # [bs, N, V] in vocabulary order


def _renormalize(probs: Tensor) -> Tensor:
    total = probs.sum(-1, keepdim=True)  # [..., 1]
    return torch.where(total > 0, probs / torch.where(total > 0, total, 1.0), 0.0)  # [..., V]


def sample_from_row(row: Tensor, coin: Tensor) -> Tensor:
    """Inverse CDF over the positive entries of each row: the first index whose running sum
    (float64 ``cumsum``: sequential on a CPU) exceeds ``coin * total``; else the last positive
    index, else ``V-1``.

    Shapes: ``row [bs, V]``, ``coin [bs]`` -> ``[bs]`` int64.
    """
    vocab = row.shape[1]
    positive = row > 0  # [bs, V] NaN is not positive
    mass = torch.where(positive, row, 0.0).to(torch.float64)  # [bs, V]
    running = torch.cumsum(mass, dim=1)  # [bs, V]
    target = coin.to(torch.float64) * running[:, -1]  # [bs]
    hit = positive & (running > target.unsqueeze(1))  # [bs, V]
    last_positive = vocab - 1 - positive.flip(1).to(torch.uint8).argmax(1)  # [bs] V-1 if none
    return torch.where(hit.any(1), hit.to(torch.uint8).argmax(1), last_positive)  # [bs]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The arithmetic type of verification: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_logits(logits: Any, temperature: Any, top_k: Any, top_p: Any) -> int:
    """Checks the inputs of target_probs_from_logits; returns the rows per request."""
    contract = LOGITS[top_k is not None, top_p is not None]
    # The per-request tensors follow the logits: a message names the one elsewhere.
    site = {"device": logits.device, "device_label": "logits"} if isinstance(logits, Tensor) else {}
    contract(None, temperature, logits, *(v for v in (top_k, top_p) if v is not None), **site)
    bs, shape = temperature.shape[0], logits.shape
    if (len(shape) == 2 and (shape[0] % bs if bs else shape[0])) or shape[-1] < 1:
        raise ValueError(
            f"target_probs_from_logits: logits must have shape [bs, N, V] or [bs * N, V] with "
            f"bs = {bs} (the length of temperature) and V >= 1, got {show(shape)}"
        )
    return int(shape[1]) if len(shape) == 3 else (shape[0] // bs if bs else 0)
