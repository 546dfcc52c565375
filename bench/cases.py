"""Benchmark cases: the frozen case dataclass, the grids, the report subset and the targets."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace

import pytest

from eagle_fn import DraftConfig

MAX_BS = 256  # every worker and constant set serves bs 1..MAX_BS
BATCH_SIZES = (1, 8, 64, 256)
NUM_STEPS = (1, 3, 5, 8)
TREE_TOPKS = (4, 8)


class Mode(enum.Enum):
    """How a worker path runs: eager functions or ``torch.compile``d graphs."""

    EAGER = "eager"
    COMPILED = "compiled"


@dataclass(frozen=True)
class Case:
    """One benchmark case: a batch size and a draft config, ``num_draft_tokens`` included.

    ``Case.grid`` picks ``num_draft_tokens`` by the grid rule: ``S + 1`` for a chain, and
    ``min(num_candidates + 1, topk * num_steps)`` for a tree, i.e. as many tokens as
    ``topk`` full-depth paths hold (k 4, S 4 gives N 16; k 8, S 8 gives N 64).
    """

    bs: int
    num_steps: int
    topk: int
    num_draft_tokens: int

    @classmethod
    def grid(cls, bs: int, num_steps: int, topk: int = 1) -> Case:
        if topk == 1:
            return cls(bs, num_steps, 1, num_steps + 1)
        candidates = DraftConfig(topk, num_steps, 2).num_candidates
        return cls(bs, num_steps, topk, min(candidates + 1, topk * num_steps))

    @property
    def config(self) -> DraftConfig:
        return DraftConfig(self.topk, self.num_steps, self.num_draft_tokens)

    @property
    def id(self) -> str:
        return f"bs{self.bs}-S{self.num_steps}-k{self.topk}-N{self.num_draft_tokens}"

    def at_bs(self, bs: int) -> Case:
        return replace(self, bs=bs)


def params(cases: Iterable[Case], *, report: Iterable[Case] = ()) -> list[object]:
    """``pytest.param`` per case, id ``case.id``; cases in ``report`` are marked ``report``."""
    compact = set(report)
    return [
        pytest.param(case, id=case.id, marks=[pytest.mark.report] if case in compact else [])
        for case in cases
    ]


def mode_params(
    cases_by_mode: dict[Mode, Iterable[Case]], *, report: Iterable[Case] = ()
) -> list[object]:
    """``pytest.param(mode, case)`` per mode and case, id ``<mode>-<case.id>``."""
    compact = set(report)
    return [
        pytest.param(
            mode,
            case,
            id=f"{mode.value}-{case.id}",
            marks=[pytest.mark.report] if case in compact else [],
        )
        for mode, cases in cases_by_mode.items()
        for case in cases
    ]


# The targets of docs/benchmarks.md, and each swept over bs (S 4 is off the grid).
CHAIN_TARGET = Case.grid(8, 5)  # bs 8, S 5, N 6
TREE_TARGET = Case(32, 4, 4, 16)  # bs 32, k 4, S 4, N 16
CHAIN_SWEEP = [CHAIN_TARGET.at_bs(bs) for bs in BATCH_SIZES]
TREE_SWEEP = [TREE_TARGET.at_bs(bs) for bs in (1, 8, 32, 64, 256)]
# Issue 10's large tree: each stage here should cost at most twice its TREE_TARGET time.
TREE_LARGE = Case.grid(256, 8, 8)  # bs 256, k 8, S 8, N 64
# Sampling verification's vocabularies, at TREE_TARGET: Llama 2's and Llama 3's.
VOCABS = (32000, 128256)

CHAIN = [Case.grid(bs, s) for s in NUM_STEPS for bs in BATCH_SIZES]
TREE = [Case.grid(bs, s, k) for k in TREE_TOPKS for s in NUM_STEPS for bs in BATCH_SIZES]
TREE += TREE_SWEEP
# select_top_k's cost at a step >= 1 does not depend on num_steps: S 2 has a step 0 and a step 1.
SELECT = [Case.grid(bs, 2, k) for k in (1, *TREE_TOPKS) for bs in BATCH_SIZES]
SELECT += [Case.grid(TREE_TARGET.bs, 2, TREE_TARGET.topk)]
# Compiling costs seconds: the compiled grid is the two target configs over bs.
WORKER_CHAIN = {Mode.EAGER: CHAIN, Mode.COMPILED: CHAIN_SWEEP}
WORKER_TREE = dict.fromkeys(Mode, tuple(TREE_TARGET.at_bs(bs) for bs in (1, 8, 32, 256)))

# The compact run of `python bench/run.py` (pytest -m report): the target configs over bs.
CHAIN_REPORT = CHAIN_SWEEP
TREE_REPORT = [*TREE_SWEEP, TREE_LARGE]
SELECT_REPORT = [Case.grid(bs, 2, 4) for bs in (*BATCH_SIZES, TREE_TARGET.bs)]
SELECT_REPORT += [Case.grid(TREE_LARGE.bs, 2, TREE_LARGE.topk)]
WORKER_TREE_REPORT = [TREE_TARGET.at_bs(bs) for bs in (8, 32)]
