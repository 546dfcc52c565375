"""DraftConfig: the shape of one EAGLE draft tree, a compile-time constant."""

from __future__ import annotations

from dataclasses import dataclass


def _require_int(name: str, value: object, minimum: int) -> None:
    # bool is an int subclass, but True is never a meaningful topk or step count.
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"DraftConfig.{name} must be an int >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class DraftConfig:
    """How many tokens the draft keeps per step, for how many steps, and how many it verifies.

    Args:
        topk: candidates kept per draft step (``k``); ``1`` makes the draft a chain.
        num_steps: draft model steps per decode round (``S``).
        num_draft_tokens: nodes of the verify tree including its root, the bonus token
            (``N``); ``N - 1`` draft candidates are selected.

    Example:
        >>> cfg = DraftConfig(topk=4, num_steps=3, num_draft_tokens=8)
        >>> cfg.num_candidates, cfg.parent_width, cfg.is_chain
        (36, 9, False)
        >>> DraftConfig.chain(3)
        DraftConfig(topk=1, num_steps=3, num_draft_tokens=4)
    """

    topk: int
    num_steps: int
    num_draft_tokens: int

    def __post_init__(self) -> None:
        _require_int("topk", self.topk, 1)
        _require_int("num_steps", self.num_steps, 1)
        _require_int("num_draft_tokens", self.num_draft_tokens, 2)
        if self.num_draft_tokens > self.num_candidates + 1:
            raise ValueError(
                f"DraftConfig.num_draft_tokens must be <= num_candidates + 1 = "
                f"{self.num_candidates + 1} for topk={self.topk}, num_steps={self.num_steps}, "
                f"got {self.num_draft_tokens}"
            )
        if self.topk == 1 and self.num_draft_tokens != self.num_steps + 1:
            raise ValueError(
                f"DraftConfig.num_draft_tokens must equal num_steps + 1 = {self.num_steps + 1} "
                f"when topk == 1 (a chain selects every candidate), got {self.num_draft_tokens}"
            )

    @classmethod
    def chain(cls, num_steps: int) -> DraftConfig:
        """The chain draft of ``num_steps`` steps: ``DraftConfig(1, num_steps, num_steps + 1)``."""
        _require_int("num_steps", num_steps, 1)
        return cls(1, num_steps, num_steps + 1)

    @property
    def num_candidates(self) -> int:
        """Flat candidate width: ``topk`` at step 0 plus ``topk**2`` per later step."""
        return self.topk + (self.num_steps - 1) * self.topk**2

    @property
    def parent_width(self) -> int:
        """Width of ``parent_list``: the parents entries of every step but the last."""
        return self.topk * (self.num_steps - 1) + 1 if self.num_steps > 1 else 0

    @property
    def is_chain(self) -> bool:
        """True when ``topk == 1``: one token per step and a constant organization."""
        return self.topk == 1
