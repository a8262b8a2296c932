"""DEAP individuals, declared statically (no runtime ``creator.create``).

An ``Individual`` carries one candidate kernel (source, knob values, parents, operator,
generation) and a ``Fitness`` whose values are ``EvalResult.fitness``: (tier, geomean speedup),
compared lexicographically, larger is better.  Workers never see these objects: they get a
plain ``Candidate`` from ``to_candidate()``.
"""
from __future__ import annotations

from typing import Any, Mapping

from deap import base

from ..knobs import parse_knobs
from ..types import Candidate, source_id


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
