"""Selection strategies as small swappable classes, driven by the engine's own RNG.

DEAP's ``tools.selTournament`` draws from the global ``random`` module; the engine needs its
own ``random.Random`` so that a resumed run reproduces the next generation exactly.
"""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, Protocol, Sequence, TypeVar

if TYPE_CHECKING:
    from .population import Individual

T = TypeVar("T", bound="Individual")


class Selection(Protocol):
    def select(self, individuals: Sequence[T], k: int, rng: random.Random) -> list[T]: ...


def _key(ind: "Individual") -> tuple[float, ...]:
    return ind.fitness.wvalues if ind.fitness.valid else (float("-inf"),)


class Tournament:
    """k tournaments of ``size`` aspirants drawn with replacement; the fittest of each wins."""

    def __init__(self, size: int = 3) -> None:
        if size < 1:
            raise ValueError("tournament size must be at least 1")
        self.size = size

    def select(self, individuals: Sequence[T], k: int, rng: random.Random) -> list[T]:
        if not individuals:
            return []
        chosen = []
        for _ in range(k):
            aspirants = [individuals[rng.randrange(len(individuals))] for _ in range(self.size)]
            chosen.append(max(aspirants, key=_key))
        return chosen


def best(individuals: Sequence[T], k: int) -> list[T]:
    """The k fittest (stable: earlier individuals win ties)."""
    return sorted(individuals, key=_key, reverse=True)[:k]


def worst(individuals: Sequence[T], k: int) -> list[T]:
    return sorted(individuals, key=_key)[:k]


def replace_worst(population: list[T], newcomer: T, capacity: int, protect: int = 1) -> list[T]:
    """Steady-state replacement: append ``newcomer``, then, while the population is above
    ``capacity``, remove its worst member that is not among its ``protect`` fittest (elitism:
    the current best is never removed).  Among equally bad members the oldest goes: members
    are kept in arrival order, newcomers at the end.  Returns the removed members (possibly
    ``newcomer`` itself, when it is the worst)."""
    population.append(newcomer)
    removed: list[T] = []
    while len(population) > max(capacity, protect, 1):
        kept = {id(ind) for ind in best(population, protect)}
        victims = [i for i, ind in enumerate(population) if id(ind) not in kept]
        if not victims:
            break
        victim = min(victims, key=lambda i: (_key(population[i]), i))
        removed.append(population.pop(victim))
    return removed
