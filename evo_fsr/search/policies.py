"""How the loop breeds and replaces: a policy per mode, in the manner of Ray Tune's searchers.

The loop (loop.py) asks its policy for one child at a time (``suggest``: a bred ``Slot``, or
None for "not now"), tells it each evaluated child (``on_child``) and each slot that gave none
(``on_miss``: a rejection or a duplicate), asks whether the round's quota is met and, at the
round's end, lets it update the population (``close``).  A ``barrier`` policy's round ends only
when nothing is outstanding.

* ``SeedRound``: round 0, the same in both modes: the seeds, random knob variants and LLM
  variants (``Breeder.seed_slots``); at the end each island takes its children in breeding
  order (an island left empty gets one member drawn from the others).
* ``Generational`` (``evolution.mode: generational``): each round breeds every island's size
  in children, island by island, then waits for all of them (a barrier); at the end each
  island keeps its ``selection.elite`` best of members and children, and fills up by
  tournament.  Children enter the islands in breeding order, so with the same RNG state a
  resumed run breeds and selects the same next generation, whatever order results arrived in.
* ``SteadyState`` (``evolution.mode: steady``): no barrier.  ``in_flight`` children are kept
  submitted (``limit``, in the manner of Ray Tune's ``ConcurrencyLimiter``; 0 = automatic:
  ``auto_in_flight``); each arriving child enters its island by steady-state replacement
  (the worst goes, never one of the ``max(1, selection.elite)`` fittest) and the island is owed
  a new child.  At most ``llm.concurrency`` LLM children are written at once; meanwhile knob
  operators fill the free places.  A round (an *epoch*) is ``pop`` evaluated children, or
  ``pop * EPOCH_ATTEMPT_FACTOR`` attempts (so variation that only yields rejected or seen
  children cannot loop forever); children in flight at its end count towards the next one,
  except after the last epoch, which waits for them.  A resumed steady run does not reproduce
  the interrupted one bit for bit: arrival order depends on timing.
"""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections import deque
from typing import Any, Mapping, Protocol

from ..config import RunConfig
from .breeder import Breeder, Slot
from .population import Population
from .rounds import Child, Round

log = logging.getLogger(__name__)

#: A steady epoch ends after ``pop`` evaluations or after ``pop`` times this many attempts.
EPOCH_ATTEMPT_FACTOR = 4


class LoopState(Protocol):
    """What a policy reads of the loop."""

    config: RunConfig
    population: Population
    breeder: Breeder
    pending: set[str]

    @property
    def round(self) -> Round: ...

    @property
    def in_flight(self) -> Mapping[str, Child]: ...

    @property
    def breeding(self) -> list[Slot]: ...


class Policy(ABC):
    name = ""
    word = "generation"            # a round, in log lines and the progress line
    barrier = True                 # a round ends only when nothing is outstanding
    reproducible = True            # a resumed run breeds the same children again (they take their
                                   # recorded results); else recorded results rejoin at once

    @abstractmethod
    def suggest(self, loop: LoopState) -> Slot | None:
        """One child bred for this round now, or None (quota bred, or at the concurrency limit)."""

    @abstractmethod
    def quota_met(self, loop: LoopState) -> bool:
        """This round has bred (barrier) or evaluated what it should."""

    def on_child(self, loop: LoopState, child: Child) -> None:
        """An evaluated child arrived (or came from a recorded result)."""

    def on_miss(self, loop: LoopState, island: int) -> None:
        """A slot of ``island`` gave no child: rejected, or a duplicate."""

    @abstractmethod
    def close(self, loop: LoopState) -> None:
        """The round is over: update the population from its children."""

    def snapshot(self, loop: LoopState) -> dict[str, Any]:
        return {}

    def take_saved(self) -> list[Child]:
        """Children in flight at the restored snapshot (sent again on resume)."""
        return []

    def restore(self, data: Mapping[str, Any]) -> None:
        """The state of ``snapshot``; raises KeyError, TypeError or ValueError when malformed."""


class SeedRound(Policy):
    name = "seed"

    def __init__(self) -> None:
        self._slots: list[Slot] | None = None

    def suggest(self, loop: LoopState) -> Slot | None:
        if self._slots is None:
            self._slots = loop.breeder.seed_slots(len(loop.population))
        return self._slots.pop(0) if self._slots else None

    def quota_met(self, loop: LoopState) -> bool:
        return self._slots is not None and not self._slots

    def close(self, loop: LoopState) -> None:
        population = loop.population
        children = sorted(loop.round.children, key=lambda c: c.order)
        for child in children:
            population.add(child.island, child.individual)
        population.fill_empty([c.individual for c in children], loop.breeder.rng)


class Generational(Policy):
    name = "generational"

    def __init__(self) -> None:
        self._plan: list[int] = []            # islands still to breed for, this round
        self._planned = -1                    # the round the plan is for

    def suggest(self, loop: LoopState) -> Slot | None:
        if self._planned != loop.round.number:
            self._planned = loop.round.number
            self._plan = [i for i, size in enumerate(loop.population.sizes) for _ in range(size)]
        if not self._plan:
            return None
        return loop.breeder.breed(self._plan.pop(0), loop.population, loop.pending)

    def quota_met(self, loop: LoopState) -> bool:
        return self._planned == loop.round.number and not self._plan

    def close(self, loop: LoopState) -> None:
        children: list[list[Child]] = [[] for _ in loop.population.sizes]
        for child in sorted(loop.round.children, key=lambda c: c.order):
            children[child.island].append(child)
        for island, kids in enumerate(children):
            loop.population.select_survivors(island, [c.individual for c in kids], loop.config.selection.elite,
                                             loop.breeder.selector, loop.breeder.rng)


def auto_in_flight(workers: int, pop: int | None = None) -> int:
    """Children kept submitted when ``evolution.in_flight`` is 0: per worker one evaluating and
    three compiling (an nvcc compile takes a few times as long as an evaluation on the quick
    sets), plus four so a worker never waits for a compile; at most ``pop`` (children bred from a
    population much older than themselves help no one), and at least one per worker."""
    wanted = 4 * max(1, workers) + 4
    return wanted if pop is None else max(max(1, workers), min(wanted, pop))


class SteadyState(Policy):
    name = "steady"
    word = "epoch"
    barrier = False
    reproducible = False

    def __init__(self, config: RunConfig, workers: int) -> None:
        self.limit = config.evolution.in_flight or auto_in_flight(workers, config.pop)
        self.max_llm_pending = config.llm.concurrency
        self.pop = config.pop
        self.saved: list[Child] = []                 # in flight at the restored snapshot
        self._demand: deque[int] = deque()           # islands owed a child, oldest first
        self._warned = -1                            # the last epoch that ended on attempts

    def suggest(self, loop: LoopState) -> Slot | None:
        if len(loop.in_flight) >= self.limit:
            return None
        llm_free = len(loop.breeding) < self.max_llm_pending and loop.breeder.llm is not None
        if not llm_free and not loop.breeder.knob_operators:
            return None                              # only LLM operators, all busy: wait for a reply
        return loop.breeder.breed(self._next_island(loop), loop.population, loop.pending, llm=llm_free)

    def _next_island(self, loop: LoopState) -> int:
        """The island owed a child longest, else the one with the fewest children under way."""
        if self._demand:
            return self._demand.popleft()
        sizes = loop.population.sizes
        load = [0] * len(sizes)
        for island in [c.island for c in loop.in_flight.values()] + [s.island for s in loop.breeding]:
            load[island] += 1
        return min(range(len(sizes)), key=lambda i: (load[i] / sizes[i], i))

    def quota_met(self, loop: LoopState) -> bool:
        stats = loop.round.stats
        if stats["evaluated"] >= self.pop:
            return True
        if loop.round.attempts >= self.pop * EPOCH_ATTEMPT_FACTOR:
            if self._warned == loop.round.number:
                return True
            self._warned = loop.round.number
            log.warning("epoch %d ends after %d attempts with only %d evaluated: variation keeps producing "
                        "rejected or already-seen children", loop.round.number, loop.round.attempts,
                        stats["evaluated"])
            return True
        return False

    def on_child(self, loop: LoopState, child: Child) -> None:
        loop.population.replace_worst(child.island, child.individual,
                                      protect=max(1, loop.config.selection.elite))
        self._demand.append(child.island)

    def on_miss(self, loop: LoopState, island: int) -> None:
        self._demand.append(island)

    def close(self, loop: LoopState) -> None:
        """Nothing to do: children joined their islands as they arrived."""

    def snapshot(self, loop: LoopState) -> dict[str, Any]:
        return {"in_flight": [child.to_dict() for child in loop.in_flight.values()]}

    def restore(self, data: Mapping[str, Any]) -> None:
        self.saved = [Child.from_dict(item) for item in data["in_flight"]]

    def take_saved(self) -> list[Child]:
        saved, self.saved = self.saved, []
        return saved


def make_policy(config: RunConfig, workers: int) -> Policy:
    """The policy for ``evolution.mode``."""
    return SteadyState(config, workers) if config.evolution.mode == "steady" else Generational()
