"""The population: DEAP individuals (declared statically, no runtime ``creator.create``) on
islands, with each island's recent failures, the hall of fame and ring migration.

An ``Individual`` carries one candidate kernel (source, knob values, parents, operator,
generation) and a ``Fitness`` whose values are ``EvalResult.fitness``: (tier, geomean speedup),
compared lexicographically, larger is better.  Workers never see these objects: they get a
plain ``Candidate`` from ``to_candidate()``.

``Population`` owns the islands (as OpenEvolve's database does, kept small): members join an
island (``add``, ``replace_worst``, ``replace_island``), failed children are remembered per
island for ``llm_repair`` (``failures``: the island's most recent failed children, at most the
island's size, in the order they joined), the hall of fame is updated at each round's end, and
``migrate`` moves each island's best to the next island (a ring), immigrants last (newest).
It also keeps the per-shape elites (``elites``, elites.py): each benchmark shape's fastest
correct candidates, whatever became of them on their islands.
"""
from __future__ import annotations

import logging
import random
from typing import Any, Iterable, Mapping, Sequence

from deap import base, tools

from ..knobs import parse_knobs
from ..types import Candidate, source_id
from .elites import ShapeElites
from .selection import Selection, best, replace_worst, worst

log = logging.getLogger(__name__)


class Fitness(base.Fitness):
    """(tier, geometric-mean speedup over the naive seed), both maximised."""

    weights = (1.0, 1.0)


class Individual:
    """One member of a population (picklable: a module-level class, not a creator type)."""

    __slots__ = ("task", "source", "parents", "operator", "generation", "label", "fitness", "_id")

    def __init__(self, task: str, source: str, *, parents: tuple[str, ...] = (), operator: str = "seed",
                 generation: int = 0, label: str = "",
                 fitness: tuple[float, float] | None = None) -> None:
        self.task = task
        self.source = source
        self.parents = tuple(parents)
        self.operator = operator
        self.generation = generation
        self.label = label
        self.fitness = Fitness()
        if fitness is not None:
            self.fitness.values = tuple(fitness)
        self._id = source_id(source)

    @property
    def id(self) -> str:
        return self._id

    @property
    def knob_values(self) -> dict[str, str]:
        return {name: knob.value for name, knob in parse_knobs(self.source).items()}

    @property
    def speedup(self) -> float:
        return self.fitness.values[1] if self.fitness.valid else 0.0

    @property
    def correct(self) -> bool:
        return self.fitness.valid and self.fitness.values[0] >= 2.0

    def to_candidate(self) -> Candidate:
        return Candidate(task=self.task, source=self.source, label=self.label or self.operator)

    def clone(self) -> "Individual":
        return Individual.from_dict(self.to_dict())

    def to_dict(self, with_source: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "task": self.task, "parents": list(self.parents),
                                "operator": self.operator, "generation": self.generation,
                                "label": self.label, "knobs": self.knob_values,
                                "fitness": list(self.fitness.values) if self.fitness.valid else None}
        if with_source:
            data["source"] = self.source
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Individual":
        fitness = data.get("fitness")
        return cls(task=data["task"], source=data["source"], parents=tuple(data.get("parents", ())),
                   operator=data.get("operator", "seed"), generation=int(data.get("generation", 0)),
                   label=data.get("label", ""), fitness=tuple(fitness) if fitness else None)

    def __getstate__(self) -> dict[str, Any]:
        return self.to_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        other = Individual.from_dict(state)
        for slot in Individual.__slots__:
            setattr(self, slot, getattr(other, slot))

    def __deepcopy__(self, memo: dict[int, Any]) -> "Individual":
        return self.clone()

    def __repr__(self) -> str:
        fit = self.fitness.values if self.fitness.valid else "invalid"
        return f"Individual({self.id}, {self.operator}, gen {self.generation}, fitness {fit})"


def same_kernel(a: Individual, b: Individual) -> bool:
    """HallOfFame similarity: identical normalised source."""
    return a.id == b.id


class Population:
    """Islands of individuals, each island's recent failures, the hall of fame and the
    per-shape elites."""

    def __init__(self, sizes: Sequence[int], hall_of_fame: int, shape_elites: int = 1) -> None:
        self.sizes = list(sizes)
        self.islands: list[list[Individual]] = [[] for _ in self.sizes]
        self.failures: list[list[Individual]] = [[] for _ in self.sizes]
        self.hof = tools.HallOfFame(hall_of_fame, similar=same_kernel)
        self.elites = ShapeElites(shape_elites)

    @staticmethod
    def split(pop: int, islands: int) -> list[int]:
        """``pop`` individuals over ``islands`` islands, the first ones one larger."""
        return [pop // islands + (1 if i < pop % islands else 0) for i in range(islands)]

    @property
    def members(self) -> list[Individual]:
        return [ind for island in self.islands for ind in island]

    def __len__(self) -> int:
        return len(self.islands)

    # -- joining ------------------------------------------------------------------------
    def add(self, island: int, ind: Individual) -> None:
        """``ind`` joins ``island`` (and its failures, when it failed)."""
        self.islands[island].append(ind)
        self.remember(island, ind)

    def remember(self, island: int, child: Individual) -> None:
        """Keep ``child`` among the island's recent failures when it is not correct."""
        if not child.correct:
            failed = self.failures[island]
            failed.append(child)
            del failed[:-self.sizes[island]]

    def replace_worst(self, island: int, child: Individual, protect: int) -> list[Individual]:
        """Steady-state replacement (``selection.replace_worst``) on one island."""
        self.remember(island, child)
        return replace_worst(self.islands[island], child, self.sizes[island], protect=protect)

    def select_survivors(self, island: int, children: Sequence[Individual], elite: int,
                         selector: Selection, rng: random.Random) -> None:
        """Generational replacement: the island becomes its ``elite`` best of members and
        ``children``, then tournament winners among them up to its size."""
        for child in children:
            self.remember(island, child)
        union = self.islands[island] + list(children)
        self.islands[island] = best(union, elite) + selector.select(union, self.sizes[island] - elite, rng)

    def fill_empty(self, everyone: Sequence[Individual], rng: random.Random) -> None:
        """An island left without members (too few seeds) gets one drawn from ``everyone``."""
        for island in self.islands:
            if not island and everyone:
                island.append(everyone[rng.randrange(len(everyone))])

    def update_hall_of_fame(self, newcomers: Iterable[Individual] = ()) -> None:
        self.hof.update(self.members + list(newcomers))

    def migrate(self, size: int) -> bool:
        """Ring migration of ``size`` per island (DEAP ``migRing``: each island's best replace
        the next island's worst); immigrants move to the end of their island (the newest).
        False when there is nothing to migrate."""
        if len(self.islands) < 2 or size < 1:
            return False
        residents = [{id(ind) for ind in island} for island in self.islands]
        tools.migRing(self.islands, size, best, replacement=worst)
        for island, before in zip(self.islands, residents):
            island.sort(key=lambda ind, before=before: id(ind) not in before)   # stable
        return True

    # -- snapshots ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"islands": [[ind.to_dict() for ind in island] for island in self.islands],
                "failures": [[ind.to_dict() for ind in island] for island in self.failures],
                "hall_of_fame": [ind.to_dict() for ind in self.hof]}

    def restore(self, data: Mapping[str, Any]) -> None:
        """The state of ``to_dict``; raises ValueError when it does not fit these islands."""
        islands, failures = data["islands"], data["failures"]
        if not isinstance(islands, list) or len(islands) != len(self.sizes) or \
                not isinstance(failures, list) or len(failures) != len(self.sizes):
            raise ValueError(f"expected {len(self.sizes)} islands and their failures")
        self.islands = [[Individual.from_dict(d) for d in island] for island in islands]
        self.failures = [[Individual.from_dict(d) for d in island] for island in failures]
        self.hof.clear()
        self.hof.update([Individual.from_dict(d) for d in data["hall_of_fame"]])
