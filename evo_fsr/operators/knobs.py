"""Knob mutation and knob crossover: new values within each knob's declared set, no LLM.

``nearest_unseen_variant`` is the engine's fallback when those random draws yield no variant
that is not already evaluated: the unseen assignment of a source's knob space nearest to its
current values.  Children it finds are recorded with the operator name ``KNOB_EXPLORE``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, MutableMapping, Sequence

from ..knobs import ENUMERATION_LIMIT, KnobSpace, constraint_violation, parse_knobs, set_knobs
from ..types import source_id
from .base import Offspring, Operator, Outcome, Rejected, VariationContext

if TYPE_CHECKING:
    from ..search.population import Individual


#: Draws an operator makes for a child whose knob values satisfy the source's constraints.
CONSTRAINT_TRIES = 32


def random_knob_variant(source: str, rng: random.Random) -> str | None:
    """The source with every knob set to a random allowed value that satisfies its knob
    constraints (None without knobs, or when ``CONSTRAINT_TRIES`` draws found none)."""
    knobs = parse_knobs(source)
    if not knobs:
        return None
    for _ in range(CONSTRAINT_TRIES):
        variant = set_knobs(source, {name: rng.choice(knob.choices) for name, knob in knobs.items()})
        if constraint_violation(variant) is None:
            return variant
    return None


def _within_constraints(draw: Callable[[], Outcome]) -> Outcome:
    """The first of up to ``CONSTRAINT_TRIES`` draws whose child satisfies its knob constraints;
    else the last draw, rejected with the violation (it never reaches nvcc)."""
    outcome = draw()
    for _ in range(CONSTRAINT_TRIES - 1):
        if not isinstance(outcome, Offspring) or constraint_violation(outcome.source) is None:
            return outcome
        outcome = draw()
    violation = constraint_violation(outcome.source) if isinstance(outcome, Offspring) else None
    if violation and isinstance(outcome, Offspring):
        return Rejected(outcome.operator, outcome.parents, violation)
    return outcome


#: Operator name of the children found by ``nearest_unseen_variant`` (not a configurable operator).
KNOB_EXPLORE = "knob_explore"


@dataclass(frozen=True)
class Exploration:
    """What ``nearest_unseen_variant`` found."""

    source: str | None      # the nearest unseen variant, or None
    examined: int           # variants whose id was checked
    exhausted: bool         # none found, and every variant of the space (the source too) is seen


def nearest_unseen_variant(source: str, seen: Callable[[str], bool], rng: random.Random,
                           limit: int = ENUMERATION_LIMIT,
                           ids: MutableMapping[tuple[str, ...], str] | None = None) -> Exploration:
    """The first variant of ``source``'s knob space, nearest first (``KnobSpace.nearest``), whose
    candidate id is not ``seen``; at most ``limit`` variants are examined.  ``ids`` memoises
    candidate ids by assignment (``KnobSpace.assignment``) for later searches of the same space
    (``KnobSpace.key``): rendering and hashing a source is most of the cost; it keeps at most
    ``ENUMERATION_LIMIT`` entries."""
    space = KnobSpace.of(source)
    ids = {} if ids is None else ids
    examined = 0
    for values in space.nearest(rng, limit):
        examined += 1
        full = space.assignment(values)
        candidate = ids.get(full)
        if candidate is None:
            candidate = source_id(space.render(values))
            if len(ids) < ENUMERATION_LIMIT:
                ids[full] = candidate
        if not seen(candidate):
            return Exploration(space.render(values), examined, exhausted=False)
    complete = space.size - 1 <= limit
    return Exploration(None, examined, exhausted=complete and seen(source_id(source)))


class KnobMutation(Operator):
    """Each knob changes with probability ``knob_mutation_rate``; at least one always changes."""

    name = "knob_mutate"

    def vary(self, parents: Sequence["Individual"], context: VariationContext,
             rng: random.Random | None = None) -> Outcome:
        rng = rng or random.Random()
        return _within_constraints(lambda: self._draw(parents, context, rng))

    def _draw(self, parents: Sequence["Individual"], context: VariationContext, rng: random.Random) -> Outcome:
        parent = parents[0]
        knobs = {n: k for n, k in parse_knobs(parent.source).items() if len(k.choices) > 1}
        if not knobs:
            return Rejected(self.name, (parent.id,), "parent has no knob with more than one value")
        names = list(knobs)
        changing = [n for n in names if rng.random() < context.knob_mutation_rate]
        if not changing:
            changing = [rng.choice(names)]
        values = {}
        for name in changing:
            knob = knobs[name]
            values[name] = rng.choice([c for c in knob.choices if c != knob.value] or list(knob.choices))
        return Offspring(set_knobs(parent.source, values), self.name, (parent.id,))


class KnobCrossover(Operator):
    """Uniform crossover of the knobs both parents share (same name, value allowed in A)."""

    name = "knob_crossover"
    arity = 2

    def vary(self, parents: Sequence["Individual"], context: VariationContext,
             rng: random.Random | None = None) -> Outcome:
        rng = rng or random.Random()
        return _within_constraints(lambda: self._draw(parents, context, rng))

    def _draw(self, parents: Sequence["Individual"], context: VariationContext, rng: random.Random) -> Outcome:
        a, b = parents[0], parents[1]
        knobs_a, knobs_b = parse_knobs(a.source), parse_knobs(b.source)
        shared = [n for n in knobs_a if n in knobs_b and knobs_b[n].value in knobs_a[n].choices
                  and knobs_b[n].value != knobs_a[n].value]
        if not shared:
            return Rejected(self.name, (a.id, b.id), "the parents share no knob with different values")
        values = {n: knobs_b[n].value for n in shared if rng.random() < 0.5}
        if not values:                              # take at least one knob from B
            pick = rng.choice(shared)
            values = {pick: knobs_b[pick].value}
        elif len(values) == len(shared) > 1:        # and keep at least one of A's
            del values[rng.choice(shared)]
        return Offspring(set_knobs(a.source, values), self.name, (a.id, b.id))
