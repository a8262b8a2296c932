"""The evolution loop: one ask/tell loop for both modes, its behaviour set by a policy.

    run():
        while not finished:
            for candidate in ask():            # breed what the policy allows, admit the children
                backend.submit(candidate)
            for candidate, result in backend.poll(timeout):
                tell(candidate.id, result)     # fitness, record, the policy places the child

``ask`` asks the policy (policies.py) for children one at a time (the ``Breeder`` selects
parents and applies an operator), admits each bred child (a rejection or a duplicate of any
evaluated or in-flight candidate is recorded and costs no GPU time; a child whose result was
recorded before an interruption takes that result), and closes the round when the policy's
quota is met: hall of fame, ring migration every ``migration.interval`` rounds, logbook row,
snapshot, best.cu and a progress report.  Round 0 (the seeds) is the same in both modes.

A finished run ends with ``specialize`` (specialize.py): when the per-shape elites differ from
the best kernel, a dispatcher routing each benchmark shape to its best variant is assembled,
evaluated as one more candidate, and written as best.cu if it is correct and faster.

When no member has an unseen knob variant and no LLM operator is enabled, breeding stops; the
children in flight are evaluated, their round is recorded, and the run ends with one log line.

Resume (``restore``): the latest snapshot gives the population, the RNG state, the logbook and
the policy's state; every result recorded in candidates.jsonl is reused, so no candidate is
evaluated twice: results up to the snapshot are known, and results recorded after it are
taken by a re-bred child (generational: the same children are bred again) or, in the steady
mode, join their islands at once, as do the children in flight at the snapshot.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping

import numpy as np
from deap import tools

from ..backend.base import EvalBackend, backend_size
from ..config import RunConfig
from ..llm.client import ChatClient, LlmUsage
from ..operators import Rejected
from ..tasks import Task
from ..types import Candidate, EvalResult, Status
from . import llm_hooks
from .breeder import Breeder, Slot
from .policies import Policy, SeedRound, make_policy
from .population import Individual, Population
from .rounds import Child, EvolutionResult, GenerationReport, Round, offspring_of
from .specialize import specialize, write_best
from .store import RunStore, rng_from_json, rng_state_to_json

log = logging.getLogger(__name__)

LOGBOOK_HEADER = ["gen", "evals", "correct", "dups", "rejected", "best", "avg", "seconds"]


class Evolution:
    """One run of the search (generational or steady-state, by ``evolution.mode``)."""

    def __init__(self, config: RunConfig, task: Task, backend: EvalBackend, store: RunStore,
                 llm: ChatClient | None = None,
                 on_generation: Callable[[GenerationReport], None] | None = None,
                 poll_interval_s: float = 0.05, policy: Policy | None = None,
                 breeder: Breeder | None = None) -> None:
        self.config, self.task, self.backend, self.store, self.llm = config, task, backend, store, llm
        self.on_generation, self.poll_interval_s = on_generation, poll_interval_s
        self.results: dict[str, EvalResult] = {}          # every evaluated candidate, by id
        self.population = Population(Population.split(config.pop, config.island_count),
                                     config.selection.hall_of_fame, config.selection.shape_elites)
        self.breeder = breeder or Breeder(task, config, llm=llm, results=self.results, gpu_info=backend.gpu_info)
        self.policy = policy or make_policy(config, backend_size(backend))
        self.generation = -1                               # last completed round
        self.logbook = tools.Logbook()
        self.logbook.header = LOGBOOK_HEADER
        self.counters = {"evaluated": 0, "duplicates": 0, "rejected": 0}
        self.pending: set[str] = set()                     # bred or in flight, not yet evaluated
        self.finished = False
        self.stop_reason: str | None = None
        self._in_flight: dict[str, Child] = {}
        self._breeding: list[tuple[int, Slot]] = []        # (breeding order, slot), unresolved
        self._recorded: dict[str, tuple[dict[str, Any], EvalResult]] = {}   # recorded after the snapshot
        self._resend: list[Candidate] = []
        self._round: Round | None = None
        self._seed_round = SeedRound()
        self._order = 0

    # -- state a policy reads --------------------------------------------------------------
    @property
    def round(self) -> Round:
        assert self._round is not None
        return self._round

    @property
    def in_flight(self) -> Mapping[str, Child]:
        """Children submitted for evaluation, by candidate id."""
        return self._in_flight

    @property
    def breeding(self) -> list[Slot]:
        """Slots whose child is still being written (LLM operators)."""
        return [slot for _, slot in self._breeding]

    @property
    def outstanding(self) -> int:
        return len(self._in_flight) + len(self._breeding)

    @property
    def draining(self) -> bool:
        """No more children will be bred in this run (the last round's quota is met, or no
        unseen variant is left): those outstanding are evaluated, then the run ends."""
        if self.breeder.exhausted:
            return True
        return self._round is not None and self.round.number >= self.config.gens and \
            self._current().quota_met(self)

    @property
    def word(self) -> str:
        return self.policy.word

    def _current(self) -> Policy:
        return self._seed_round if self.round.number == 0 else self.policy

    # -- running ---------------------------------------------------------------------------
    def run(self) -> EvolutionResult:
        """Run (or continue) until round ``config.gens``; an interruption leaves the last snapshot."""
        with self.breeder.running():
            while not self.finished:
                batch = self.ask()
                for candidate in batch:
                    self.backend.submit(candidate)
                if self.finished:
                    break
                if self._in_flight:
                    for candidate, result in self.backend.poll(self.poll_interval_s if self._breeding else 1.0):
                        self.tell(candidate.id, result)
                elif self._breeding:
                    time.sleep(self.poll_interval_s)
                elif not batch:
                    raise RuntimeError(f"the evolution loop stalled in {self.word} {self.round.number}")
        if self.generation >= 0:
            specialize(self)          # each shape to its best variant, when that beats one kernel
        return self.result()

    def ask(self) -> list[Candidate]:
        """Breed what the policy allows now; returns the candidates to evaluate (``tell`` each
        one's result, then ``ask`` again).  Closes rounds whose quota is met."""
        if self._round is None:
            self._open()
        out, self._resend = self._resend, []
        while not self.finished:
            self._admit_ready(out)        # children written since: they may free places to breed
            self._breed(out)
            if not self._round_complete():
                break
            self._close_round()
        return out

    def _settle(self) -> None:
        """Close the round now if it is complete (a steady epoch ends at its ``pop``-th result)."""
        while not self.finished and self._round_complete():
            self._close_round()

    def tell(self, candidate_id: str, result: EvalResult) -> None:
        """The result of a candidate from ``ask``."""
        child = self._in_flight.pop(candidate_id, None)
        if child is None:
            log.warning("result for an unknown candidate %s ignored", candidate_id)
            return
        self._arrive(child, result)
        self._settle()

    def result(self) -> EvolutionResult:
        top = self.best_individual()
        return EvolutionResult(best=top, best_result=self.results.get(top.id) if top else None,
                               hall_of_fame=list(self.population.hof), generation=self.generation,
                               logbook=self.logbook, counters=dict(self.counters), stop_reason=self.stop_reason)

    def best_individual(self) -> Individual | None:
        for ind in self.population.hof:
            result = self.results.get(ind.id)
            if result is not None and result.status is Status.OK:
                return ind
        return None

    # -- rounds ----------------------------------------------------------------------------
    def _open(self) -> None:
        """The first round of this ``run``: the seeds, or the one after the restored snapshot."""
        if self.generation >= self.config.gens:
            self.finished = True
            return
        self._round = Round(self.generation + 1)
        if self.generation >= 0 and not self.policy.reproducible:
            self._rejoin()
        if self.generation >= 0:
            self.breeder.out_of_variants(self.population, self.pending)

    def _breed(self, out: list[Candidate]) -> None:
        policy = self._current()
        while not self.breeder.exhausted and not policy.quota_met(self):
            slot = policy.suggest(self)
            if slot is None:
                return
            self.round.bred += 1
            self._breeding.append((self._order, slot))
            self._order += 1
            self._admit_ready(out)

    def _round_complete(self) -> bool:
        if not (self.breeder.exhausted or self._current().quota_met(self)):
            return False
        if not self.outstanding:
            return True
        last = self.round.number >= self.config.gens
        return not self._current().barrier and not last and not self.breeder.exhausted

    def _close_round(self) -> None:
        r, policy = self.round, self._current()
        if r.stats["evaluated"] == 0 and self.breeder.exhausted:
            self._finish()            # the knob space ran out at this round's start: not recorded
            return
        policy.close(self)
        interval = self.config.migration.interval
        if r.number > 0 and interval and r.number % interval == 0 and \
                self.population.migrate(self.config.migration.size):
            log.info("%s %d: ring migration of %d per island", self.word, r.number, self.config.migration.size)
        for candidate_id, (_, result) in self._recorded.items():     # recorded, never re-bred
            self.results.setdefault(candidate_id, result)
        self._recorded.clear()
        self._record_round(r)
        ended = llm_hooks.llm_ended(self.llm)
        if r.number >= self.config.gens or self.breeder.exhausted or ended:
            self.stop_reason = self.stop_reason or ended
            self._finish()
            return
        self.breeder.out_of_variants(self.population, self.pending)
        self._round = Round(r.number + 1)

    def _finish(self) -> None:
        self.finished = True
        if self.breeder.exhausted:
            llm = "no LLM configured" if self.llm is None else "no LLM operator enabled"
            self.stop_reason = (f"knob space exhausted after {len(self.results)} candidates: no unseen variant "
                                f"left and {llm}; ending the run after {self.word} {self.generation}")
            log.warning("%s", self.stop_reason)

    # -- children --------------------------------------------------------------------------
    def _admit_ready(self, out: list[Candidate]) -> None:
        waiting = []
        for order, slot in self._breeding:
            if slot.ready:
                self._admit(order, slot, out)
            else:
                waiting.append((order, slot))
        self._breeding = waiting

    def _admit(self, order: int, slot: Slot, out: list[Candidate]) -> None:
        """Submit a bred child, give it its recorded result, or record why not."""
        outcome, r = slot.resolve(), self.round
        if isinstance(outcome, Rejected):
            r.stats["rejected"] += 1
            self.store.append({"kind": "rejected", "generation": r.number, "island": slot.island,
                               "operator": outcome.operator, "parents": list(outcome.parents),
                               "reason": outcome.reason, "llm_call": outcome.llm_call,
                               "reply_excerpt": outcome.reply_excerpt})
            log.info("%s %d: %s rejected: %s", self.word, r.number, outcome.operator, outcome.reason)
            self._current().on_miss(self, slot.island)
            return
        ind = Individual(self.task.name, outcome.source, parents=outcome.parents, operator=outcome.operator,
                         generation=r.number, label=slot.label)
        if ind.id in self.results or ind.id in self._in_flight:
            r.stats["duplicates"] += 1
            self.store.append({"kind": "duplicate", "generation": r.number, "island": slot.island, "id": ind.id,
                               "operator": outcome.operator, "parents": list(outcome.parents)})
            self._current().on_miss(self, slot.island)
            return
        self._send(Child(slot.island, ind, outcome, order), out)

    def _send(self, child: Child, out: list[Candidate]) -> None:
        self.pending.add(child.id)
        recorded = self._recorded.pop(child.id, None)
        if recorded is not None:          # evaluated before an interruption: no GPU time again
            self._arrive(child, recorded[1], reused=True)
            return
        self._in_flight[child.id] = child
        out.append(child.individual.to_candidate())

    def _arrive(self, child: Child, result: EvalResult, reused: bool = False) -> None:
        """Fitness, the record (candidates.jsonl, kernels/), the round's count, the policy."""
        r, ind = self.round, child.individual
        ind.generation = r.number
        ind.fitness.values = result.fitness
        self.results[ind.id] = result
        self.population.elites.offer(ind, result)
        self.pending.discard(ind.id)
        r.stats["evaluated"] += 1
        r.stats["correct"] += int(result.status.correct)
        r.children.append(child)
        if reused:     # already in candidates.jsonl as "evaluated": never a second such record
            self.store.append({"kind": "reused", "generation": r.number, "island": child.island, "id": ind.id})
        else:
            kernel = self.store.write_kernel(ind.source)
            record: dict[str, Any] = {"kind": "evaluated", "generation": r.number, "island": child.island,
                                      "candidate": ind.to_dict(with_source=False),
                                      "kernel": str(kernel.relative_to(self.store.root)),
                                      "result": result.to_dict()}
            if child.outcome.llm_call is not None:
                record.update(llm_call=child.outcome.llm_call, replayed=child.outcome.replayed,
                              **llm_hooks.after_child(self.llm, child.outcome, self.results, result))
            self.store.append(record)
        self._current().on_child(self, child)

    # -- records, snapshots and resume -----------------------------------------------------
    def _record_round(self, r: Round) -> None:
        offspring = [c.individual for c in r.children]
        self.population.update_hall_of_fame(offspring)
        for key in ("evaluated", "duplicates", "rejected"):
            self.counters[key] += r.stats[key]
        top = self.best_individual()
        seconds = time.monotonic() - r.start
        self.logbook.record(gen=r.number, evals=r.stats["evaluated"], correct=r.stats["correct"],
                            dups=r.stats["duplicates"], rejected=r.stats["rejected"],
                            best=top.speedup if top else None,
                            avg=float(np.mean([i.speedup for i in offspring] or [0.0])), seconds=round(seconds, 3))
        self.generation = r.number
        if top is not None:
            write_best(self, top)
        usage = self.llm.usage if self.llm is not None else LlmUsage()
        self.store.save_snapshot(r.number, {
            "mode": self.policy.name, "population": self.population.to_dict(),
            "rng": rng_state_to_json(self.breeder.rng), "logbook": [dict(entry) for entry in self.logbook],
            "counters": self.counters,
            "llm_usage": {"calls": usage.calls, "failed_calls": usage.failed_calls,
                          "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens},
            "policy": self.policy.snapshot(self), "shape_elites": self.population.elites.to_dict()})
        if self.on_generation is not None:
            self.on_generation(GenerationReport(
                generation=r.number, evaluated=r.stats["evaluated"], correct=r.stats["correct"],
                duplicates=r.stats["duplicates"], rejected=r.stats["rejected"],
                best_speedup=top.speedup if top else None, best_id=top.id if top else None,
                seconds=seconds, llm_calls=usage.calls, llm_tokens=usage.tokens))

    def restore(self) -> bool:
        """Continue from the store's latest snapshot; False when there is none (fresh start).
        A snapshot that does not fit this run raises ``StoreError`` naming the file."""
        snap = self.store.latest_snapshot()
        last = snap.generation if snap else -1
        for rec in self.store.records():
            if rec.get("kind") == "evaluated":
                result = EvalResult.from_dict(rec["result"])
                if rec["generation"] <= last:
                    self.results[result.candidate_id] = result
                else:
                    self._recorded[result.candidate_id] = (rec, result)
        if snap is None:
            return False
        data = snap.data
        if data["mode"] != self.policy.name:
            raise snap.error(f"written by a {data['mode']} run, but this run's evolution.mode is {self.policy.name}")
        try:
            self.population.restore(data["population"])
            self.breeder.rng = rng_from_json(data["rng"])
            for entry in data["logbook"]:
                self.logbook.record(**entry)
            self.counters.update(data["counters"])
            self.policy.restore(data["policy"])
            if snap.format >= 2:      # format 1 predates the per-shape elites: rebuilt from the records
                self.population.elites.restore(data["shape_elites"])
            else:
                self.population.elites.rebuild(self.store.records(), self.store.root, last)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise snap.error(f"does not fit this run's configuration ({type(exc).__name__}: {exc})") from None
        self.generation = last
        log.info("resumed %s after %s %d (%d evaluated, %d recorded past the snapshot)",
                 self.store.root, self.word, last, len(self.results), len(self._recorded))
        return True

    def _rejoin(self) -> None:
        """Steady mode after a restore: the children in flight at the snapshot are sent again
        (or take their recorded result), then every other result recorded after the snapshot
        joins its island as if it had just arrived."""
        for child in self.policy.take_saved():
            if child.id not in self.results and child.id not in self._in_flight:
                self._send(child, self._resend)
        for candidate_id, (rec, result) in list(self._recorded.items()):
            del self._recorded[candidate_id]
            try:
                data = dict(rec["candidate"], source=(self.store.root / rec["kernel"]).read_text())
                child = Child(int(rec["island"]) % len(self.population), Individual.from_dict(data),
                              offspring_of(Individual.from_dict(data), rec.get("llm_call"),
                                           bool(rec.get("replayed"))))
            except (OSError, KeyError, TypeError, ValueError) as exc:
                log.warning("recorded result of %s not reused: %s", candidate_id, exc)
                continue
            self.pending.add(child.id)
            self._arrive(child, result, reused=True)

