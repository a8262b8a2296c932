"""The asynchronous steady-state loop: ``evolution.mode: steady``.

The generational loop (engine.py) waits for a whole generation before selecting, so the GPUs
idle while the next generation's first children compile and while its slowest candidates
finish.  Here no such barrier exists after generation 0 (built and evaluated exactly as in
the generational mode):

* ``in_flight`` children are kept submitted to the backend (0 = automatic: 4 x evaluator
  workers + 4, so the compiles of new children overlap GPU evaluation);
* each time a result arrives, its child enters its island by steady-state replacement
  (``selection.replace_worst``: add the child, remove the island's worst member, never one of
  its ``max(1, selection.elite)`` fittest; among equals the oldest goes), and one new child is
  bred for that island at once: same operators, same duplicate check against every evaluated
  and in-flight candidate, same rejection records.  LLM operators run in the executor, as in
  the generational mode; at most ``llm.concurrency`` LLM children are pending at once, and
  while that many are, the knob operators fill the remaining slots (so the GPUs keep
  working while the LLM writes; without knob operators the loop waits for the LLM).  An LLM
  child is submitted as soon as it is written, so the backend may briefly hold up to
  ``llm.concurrency`` more than ``in_flight``; breeding resumes once it is below again;
* an *epoch* of ``pop`` evaluated children (rejections and duplicates do not count; an epoch
  also ends after ``pop * EPOCH_ATTEMPT_FACTOR`` attempts, so variation that only produces
  rejected or already-seen children cannot loop forever) plays the role of a generation:
  logbook row, progress report, hall of fame, best.cu, snapshot, and a ring migration every
  ``migration.interval`` epochs.  ``gens`` counts epochs, so a run evaluates as many children
  as the generational mode;
* when the last epoch is complete no more children are bred, but those in flight (and LLM
  children already being written) are evaluated and enter the last epoch: nothing evaluated
  is lost, so the last epoch may hold up to ``in_flight`` more than ``pop`` children;
* knob slots fall back to the nearest unseen knob variant as in the generational mode
  (``Engine._explore``); once no member's knob space holds an unseen variant and no LLM
  operator is enabled, breeding stops the same way: the children in flight are evaluated, the
  current epoch is recorded (unless it has evaluated nothing) and the run ends with one log line.

Every candidate is recorded in candidates.jsonl with the epoch its result arrived in as its
"generation".  Each snapshot also lists the children in flight at that moment; ``--resume``
continues from the latest snapshot, submits those again (a result recorded after the snapshot
comes from the resume cache, with no GPU time) and breeds on.  A resumed steady run does not
reproduce the interrupted one bit for bit: which child is bred from which population depends
on the order in which results arrive, i.e. on timing.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .engine import Engine, Slot, backend_size
from ..operators import Offspring, Operator
from .population import Individual
from .selection import replace_worst
from ..types import Candidate, EvalResult

log = logging.getLogger(__name__)

#: An epoch ends after ``pop`` evaluations or after ``pop`` times this many attempts.
EPOCH_ATTEMPT_FACTOR = 4


def auto_in_flight(workers: int, pop: int | None = None) -> int:
    """Children kept submitted when ``evolution.in_flight`` is 0: per worker one evaluating and
    three compiling (an nvcc compile takes a few times as long as an evaluation on the quick
    sets), plus four so a worker never waits for a compile; at most ``pop`` (children bred from a
    population much older than themselves help no one), and at least one per worker."""
    wanted = 4 * max(1, workers) + 4
    return wanted if pop is None else max(max(1, workers), min(wanted, pop))


@dataclass
class _Flight:
    """A child submitted to the backend, waiting for its result."""

    island: int
    individual: Individual
    outcome: Offspring

    def to_dict(self) -> dict[str, Any]:
        return {"island": self.island, "individual": self.individual.to_dict(),
                "llm_call": self.outcome.llm_call, "replayed": self.outcome.replayed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "_Flight":
        ind = Individual.from_dict(data["individual"])
        outcome = Offspring(ind.source, ind.operator, ind.parents, llm_call=data.get("llm_call"),
                            replayed=bool(data.get("replayed", False)))
        return cls(int(data["island"]), ind, outcome)


@dataclass
class _Epoch:
    number: int
    start: float = field(default_factory=time.monotonic)
    stats: dict[str, int] = field(default_factory=lambda: {"evaluated": 0, "correct": 0,
                                                           "duplicates": 0, "rejected": 0})
    children: list[Individual] = field(default_factory=list)

    @property
    def attempts(self) -> int:
        return self.stats["evaluated"] + self.stats["duplicates"] + self.stats["rejected"]


class SteadyEngine(Engine):
    """``Engine`` with the steady-state loop after generation 0 (same constructor arguments)."""

    round_word = "epoch"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_flight = self.config.evolution.in_flight or auto_in_flight(backend_size(self.backend),
                                                                           self.config.pop)
        self.max_llm_pending = self.config.llm.concurrency if self.llm is not None else 0
        self._knob_operators: list[tuple[Operator, float]] = [
            (op, w) for op, w in self.operators if not op.needs_llm]
        self._flights: dict[str, _Flight] = {}        # submitted, by candidate id
        self._breeding: list[Slot] = []               # LLM children being written
        self._demand: deque[int] = deque()            # islands owed a child, oldest first
        self._saved: list[_Flight] = []               # in flight at the restored snapshot
        self._epoch = _Epoch(self.generation + 1)
        self._draining = False

    # -- public --------------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        """Children submitted to the backend and not yet returned."""
        return len(self._flights)

    @property
    def draining(self) -> bool:
        """True once the last epoch is complete: in-flight children finish, none are bred."""
        return self._draining

    # -- the loop ------------------------------------------------------------------------
    def _evolve(self) -> None:
        if self.generation >= self.config.gens:
            return
        self._epoch = _Epoch(self.generation + 1)
        self._draining = False
        log.info("steady-state: epochs %d..%d, %d in flight", self._epoch.number, self.config.gens, self.in_flight)
        saved, self._saved = self._saved, []
        for flight in saved:
            if flight.individual.id not in self.results and flight.individual.id not in self._flights:
                self._send(flight)
        if self._out_of_variants(self._flights):
            self._drain_exhausted()
        while True:
            self._top_up()
            self._resolve_breeding()
            if self._draining and not self._flights and not self._breeding:
                self._finish()
                return
            if self._flights:
                for candidate, result in self.backend.poll(self.poll_interval_s if self._breeding else 1.0):
                    self._returned(candidate, result)
            elif self._breeding:
                time.sleep(self.poll_interval_s)

    def _top_up(self) -> None:
        """Breed until ``in_flight`` children are submitted (or the last epoch is complete)."""
        while not self._draining and len(self._flights) < self.in_flight:
            llm_free = len(self._breeding) < self.max_llm_pending
            operators = self.operators if llm_free else self._knob_operators
            if not operators:           # only LLM operators, all busy: wait for a reply
                return
            island = self._next_island()
            slot = self._vary_one(island, self.islands[island], set(self._flights), operators)
            if self.exhausted:          # before _resolve: its rejection must not close the epoch
                self._drain_exhausted()
            if slot.future is not None:
                self._breeding.append(slot)
            else:
                self._resolve(slot)

    def _next_island(self) -> int:
        """The island owed a child longest, else the one with the fewest children under way."""
        if self._demand:
            return self._demand.popleft()
        load = [0] * len(self.islands)
        for island in [f.island for f in self._flights.values()] + [s.island for s in self._breeding]:
            load[island] += 1
        sizes = self.island_sizes
        return min(range(len(self.islands)), key=lambda i: (load[i] / sizes[i], i))

    def _resolve_breeding(self) -> None:
        ready: list[Slot] = []
        still: list[Slot] = []
        for slot in self._breeding:
            (ready if slot.ready else still).append(slot)
        self._breeding = still
        for slot in ready:
            self._resolve(slot)

    def _resolve(self, slot: Slot) -> None:
        """Admit a bred child: submit it, take its cached result, or record why not."""
        outcome = slot.resolve()
        epoch = self._epoch
        ind = self._admit(epoch.number, slot.island, outcome, {}, self._flights, epoch.stats)
        if ind is None or not isinstance(outcome, Offspring):
            self._demand.append(slot.island)           # breed another for this island
            self._maybe_close()
            return
        self._send(_Flight(slot.island, ind, outcome))

    def _send(self, flight: _Flight) -> None:
        cached = self._resume_cache.pop(flight.individual.id, None)
        if cached is not None:          # evaluated before an interruption: no GPU time again
            self._arrive(flight, cached, cached=True)
            return
        self._flights[flight.individual.id] = flight
        self.backend.submit(flight.individual.to_candidate())

    def _returned(self, candidate: Candidate, result: EvalResult) -> None:
        flight = self._flights.pop(candidate.id, None)
        if flight is None:
            log.warning("result for an unknown candidate %s ignored", candidate.id)
            return
        self._arrive(flight, result)

    def _arrive(self, flight: _Flight, result: EvalResult, cached: bool = False) -> None:
        """Record the result, let the child enter its island, owe the island a new child."""
        epoch, ind = self._epoch, flight.individual
        ind.generation = epoch.number
        self._accept(epoch.number, flight.island, ind, result, flight.outcome, epoch.stats, cached=cached)
        epoch.children.append(ind)
        replace_worst(self.islands[flight.island], ind, self.island_sizes[flight.island],
                      protect=max(1, self.config.selection.elite))
        if not ind.correct:             # parents for llm_repair: the island's recent failures
            failed = self.failures[flight.island]
            failed.append(ind)
            del failed[:-self.island_sizes[flight.island]]
        self._demand.append(flight.island)
        self._maybe_close()

    # -- epochs --------------------------------------------------------------------------
    def _maybe_close(self) -> None:
        epoch, pop = self._epoch, self.config.pop
        if self._draining or (epoch.stats["evaluated"] < pop and epoch.attempts < pop * EPOCH_ATTEMPT_FACTOR):
            return
        if epoch.stats["evaluated"] < pop:
            log.warning("epoch %d ends after %d attempts with only %d evaluated: variation keeps producing "
                        "rejected or already-seen children", epoch.number, epoch.attempts, epoch.stats["evaluated"])
        if epoch.number >= self.config.gens:
            self._draining = True
            log.info("epoch %d complete: waiting for %d in flight, breeding no more", epoch.number,
                     len(self._flights) + len(self._breeding))
            return
        self._close_epoch()
        if self._out_of_variants(self._flights):
            self._drain_exhausted()

    def _drain_exhausted(self) -> None:
        """No unseen variant is left: breed no more, let the children in flight arrive."""
        if not self._draining:
            self._draining = True
            log.info("epoch %d: no unseen knob variant left: waiting for %d in flight, breeding no more",
                     self._epoch.number, len(self._flights) + len(self._breeding))

    def _finish(self) -> None:
        """The drain is over: record the current epoch and end (an epoch that evaluated nothing
        because the knob space ran out at its start is not recorded)."""
        if not self.exhausted or self._epoch.stats["evaluated"]:
            self._close_epoch()
        if self.exhausted:
            self._announce_exhausted()

    def _close_epoch(self) -> None:
        epoch = self._epoch
        self._migrate(epoch.number)
        self._finish_generation(epoch.number, epoch.children, epoch.stats, epoch.start)
        self._epoch = _Epoch(epoch.number + 1)

    def _migrate(self, generation: int) -> bool:
        """The ring migration, then immigrants move to the end of their island: the newest."""
        residents = [{id(ind) for ind in island} for island in self.islands]
        if not super()._migrate(generation):
            return False
        for island, before in zip(self.islands, residents):
            island.sort(key=lambda ind, before=before: id(ind) not in before)   # stable
        return True

    # -- snapshots -----------------------------------------------------------------------
    def _snapshot_extra(self) -> dict[str, Any]:
        return {"mode": "steady", "in_flight": [flight.to_dict() for flight in self._flights.values()]}

    def _restore_extra(self, snap: dict[str, Any]) -> None:
        self._saved = [_Flight.from_dict(data) for data in snap.get("in_flight", [])]
