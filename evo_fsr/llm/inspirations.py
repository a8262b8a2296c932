"""Context from the rest of the population: inspirations (top and diverse members of other
islands) and the parent's lineage.  Pure functions of the population; the RNG breaks ties."""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from ..types import EvalResult, normalise_source

if TYPE_CHECKING:
    from ..search.population import Individual

_TOKEN_RE = re.compile(r"[A-Za-z_]\w*|\d+")


def _tokens(source: str) -> frozenset[str]:
    return frozenset(_TOKEN_RE.findall(normalise_source(source)))


def distance(a: str, b: str) -> float:
    """1 - Jaccard similarity of two sources' identifier/number sets (0 = same vocabulary)."""
    ta, tb = _tokens(a), _tokens(b)
    union = ta | tb
    return 1.0 - len(ta & tb) / len(union) if union else 0.0


def choose_inspirations(members_by_island: Sequence[Sequence["Individual"]], parent: "Individual",
                        rng: random.Random, k: int) -> list["Individual"]:
    """Up to ``k`` correct kernels other than the parent: first the best of each other island
    (best island first), up to half of ``k`` rounded up; then the most different from the parent
    and from those already chosen.  With one island, its other members stand in."""
    if k <= 0:
        return []
    home = next((i for i, members in enumerate(members_by_island) if any(m.id == parent.id for m in members)), None)
    others = [members for i, members in enumerate(members_by_island) if i != home] or list(members_by_island)
    seen = {parent.id}
    pool: list[Individual] = []
    for members in others:
        for m in members:
            if m.id not in seen and m.correct:
                seen.add(m.id)
                pool.append(m)
    if not pool:
        return []
    chosen: list[Individual] = []
    best_per_island = []
    for members in others:
        ranked = sorted((m for m in members if m in pool), key=lambda m: m.fitness.values, reverse=True)
        if ranked:
            best_per_island.append(ranked[0])
    best_per_island.sort(key=lambda m: m.fitness.values, reverse=True)
    for m in best_per_island[:(k + 1) // 2]:
        chosen.append(m)
    while len(chosen) < k:
        rest = [m for m in pool if m not in chosen]
        if not rest:
            break
        rng.shuffle(rest)                        # ties go to a random member, reproducibly
        refs = [parent, *chosen]
        chosen.append(max(rest, key=lambda m: min(distance(m.source, r.source) for r in refs)))
    return chosen


@dataclass(frozen=True)
class LineageStep:
    id: str
    operator: str
    generation: int
    verdict: str                 # "1.84x", "wrong:tolerance", "not evaluated"

    def describe(self) -> str:
        return f"{self.id} (generation {self.generation}, by {self.operator}): {self.verdict}"


def lineage_of(parent: "Individual", individuals: Mapping[str, "Individual"],
               results: Mapping[str, EvalResult], depth: int) -> list[LineageStep]:
    """The parent and its first-parent ancestors, newest first, at most ``depth`` + 1 steps."""
    steps: list[LineageStep] = []
    current: Individual | None = parent
    seen: set[str] = set()
    while current is not None and current.id not in seen and len(steps) <= depth:
        seen.add(current.id)
        result = results.get(current.id)
        if result is None:
            verdict = "not evaluated"
        elif result.geomean_speedup is not None and result.rejection is None:
            verdict = f"{result.geomean_speedup:.2f}x"
        else:
            verdict = result.rejection or result.status.value
        steps.append(LineageStep(current.id, current.operator, current.generation, verdict))
        current = individuals.get(current.parents[0]) if current.parents else None
    return steps
