"""The loop's small data types: a child under evaluation, a round, and what a run reports.

A *round* is a generation (generational mode) or an epoch of ``pop`` evaluated children
(steady mode); round 0 is the seeds.  Each closed round gives a logbook row, a progress
report, a snapshot and best.cu.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from deap import tools

from ..operators import Offspring
from ..types import EvalResult
from .population import Individual


@dataclass
class Child:
    """A bred child admitted for evaluation: its island and its place in breeding order."""

    island: int
    individual: Individual
    outcome: Offspring
    order: int = 0

    @property
    def id(self) -> str:
        return self.individual.id

    def to_dict(self) -> dict[str, Any]:
        return {"island": self.island, "individual": self.individual.to_dict(),
                "llm_call": self.outcome.llm_call, "replayed": self.outcome.replayed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Child":
        ind = Individual.from_dict(data["individual"])
        return cls(int(data["island"]), ind, offspring_of(ind, data.get("llm_call"), bool(data.get("replayed"))))


def offspring_of(ind: Individual, llm_call: int | None = None, replayed: bool = False) -> Offspring:
    return Offspring(ind.source, ind.operator, ind.parents, llm_call=llm_call, replayed=replayed)


@dataclass
class Round:
    """One generation or epoch in progress."""

    number: int
    start: float = field(default_factory=time.monotonic)
    stats: dict[str, int] = field(default_factory=lambda: {"evaluated": 0, "correct": 0,
                                                           "duplicates": 0, "rejected": 0})
    children: list[Child] = field(default_factory=list)     # evaluated, in arrival order
    bred: int = 0                                            # slots bred in this round

    @property
    def attempts(self) -> int:
        return self.stats["evaluated"] + self.stats["duplicates"] + self.stats["rejected"]


@dataclass(frozen=True)
class GenerationReport:
    generation: int
    evaluated: int
    correct: int
    duplicates: int
    rejected: int
    best_speedup: float | None        # best correct (status ok) candidate so far
    best_id: str | None
    seconds: float
    llm_calls: int
    llm_tokens: int

    @property
    def valid_share(self) -> float:
        return self.correct / self.evaluated if self.evaluated else 0.0

    @property
    def evals_per_minute(self) -> float:
        return 60.0 * self.evaluated / self.seconds if self.seconds > 0 else 0.0


@dataclass
class EvolutionResult:
    best: Individual | None
    best_result: EvalResult | None
    hall_of_fame: list[Individual]
    generation: int
    logbook: tools.Logbook
    counters: dict[str, int] = field(default_factory=dict)
    stop_reason: str | None = None      # why the run ended before ``gens`` (knob space exhausted)
