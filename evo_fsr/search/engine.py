"""The generational loop on DEAP: evaluate, select, vary; islands, ring migration, hall of fame.

Generation 0 is the task's seeds, random knob variants of them and (with an LLM) fresh LLM
variants.  Each later generation, on every island: pick an operator per offspring slot (by the
configured probabilities), pick parents by tournament, vary (LLM calls run in threads and
overlap GPU evaluation), drop duplicates of any candidate already seen (normalised source)
before they cost GPU time, evaluate, then keep the island's elites and fill it by tournament
from parents and offspring.  When ``KNOB_ATTEMPTS`` random draws of a knob operator yield no
unseen variant (only already-seen ones, or none at all), the slot takes the nearest unseen
knob variant (operator ``knob_explore``) of the parent, else of the island's other members
(best first), else of the other islands'; when no member's knob space holds an unseen variant
and no LLM operator is enabled, the run ends after the current generation, with one log line
saying so.  Every ``migration.interval`` generations each island's best replace the next
island's worst (a ring).  After each generation a snapshot (population, hall of fame, RNG
state, logbook) makes the run resumable; all randomness comes from one ``random.Random`` used
only in this thread, so a resumed run reproduces the next generation.

This is ``evolution.mode: generational``; ``steady.SteadyEngine`` subclasses ``Engine`` for
the asynchronous steady-state mode and reuses generation 0, variation, admission, recording
and the per-generation bookkeeping defined here.
"""
from __future__ import annotations

import logging
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Container, Protocol

import numpy as np
from deap import tools

from ..config import RunConfig
from ..llm.client import ChatClient, LlmUsage
from ..knobs import ENUMERATION_LIMIT, KnobSpace
from ..operators import (KNOB_EXPLORE, REGISTRY, Offspring, Operator, Outcome, Rejected, VariationContext,
                        nearest_unseen_variant, random_knob_variant)
from .population import Individual, same_kernel
from .selection import Tournament, best, worst
from .store import RunStore, rng_from_json, rng_state_to_json
from ..tasks import Task
from ..report_lines import best_header
from ..types import Candidate, EvalResult, GpuInfo, Status

log = logging.getLogger(__name__)

KNOB_ATTEMPTS = 8          # draws per knob-operator slot to find an unseen source
KNOB_EXPLORE_LIMIT = ENUMERATION_LIMIT   # knob variants examined per fallback search, all members together
INIT_ATTEMPTS_PER_SLOT = 20


class EvalBackend(Protocol):
    """Where candidates are evaluated: the Ray GPU pool, or an in-process evaluator in tests."""

    @property
    def gpu_info(self) -> GpuInfo | None: ...

    @property
    def size(self) -> int:
        """Evaluator workers running candidates at once (GPUs of the pool); 1 in-process."""
        ...

    def submit(self, candidate: Candidate) -> None: ...

    def poll(self, timeout_s: float) -> list[tuple[Candidate, EvalResult]]: ...

    def close(self) -> None: ...


def backend_size(backend: EvalBackend) -> int:
    """``backend.size``, or 1 for a backend that does not say (at least 1)."""
    return max(1, int(getattr(backend, "size", 1) or 1))


class InlineBackend:
    """Evaluates submitted candidates in this process, in submission order, at ``poll``."""

    def __init__(self, evaluate: Callable[[Candidate], EvalResult], gpu_info: GpuInfo | None = None) -> None:
        self._evaluate, self._gpu_info = evaluate, gpu_info
        self._queue: list[Candidate] = []
        self.submitted: list[str] = []          # candidate ids, for tests and accounting

    @property
    def gpu_info(self) -> GpuInfo | None:
        return self._gpu_info

    @property
    def size(self) -> int:
        return 1

    def submit(self, candidate: Candidate) -> None:
        self._queue.append(candidate)
        self.submitted.append(candidate.id)

    def poll(self, timeout_s: float) -> list[tuple[Candidate, EvalResult]]:
        queue, self._queue = self._queue, []
        return [(c, self._evaluate(c)) for c in queue]

    def close(self) -> None:
        self._queue.clear()


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


@dataclass
class Slot:
    """One child being bred for an island: an outcome now, or an LLM operator's future."""

    island: int
    outcome: Outcome | None = None
    future: Future[Outcome] | None = None

    @property
    def ready(self) -> bool:
        return self.future is None or self.future.done()

    def resolve(self) -> Outcome:
        """The outcome (waits for the future; an operator that raised becomes a rejection)."""
        if self.future is not None:
            return _outcome(self.future)
        assert self.outcome is not None
        return self.outcome


class Engine:
    round_word = "generation"        # a unit of progress, in log lines

    def __init__(self, config: RunConfig, task: Task, backend: EvalBackend, store: RunStore,
                 llm: ChatClient | None = None,
                 on_generation: Callable[[GenerationReport], None] | None = None,
                 poll_interval_s: float = 0.05) -> None:
        self.config, self.task, self.backend, self.store, self.llm = config, task, backend, store, llm
        self.on_generation = on_generation
        self.poll_interval_s = poll_interval_s
        self.rng = random.Random(config.seed)
        self.selector = Tournament(config.selection.tournament_size)
        self.generation = -1                              # last completed generation
        self.islands: list[list[Individual]] = []
        self.failures: list[list[Individual]] = []        # last generation's failed offspring, per island
        self.hof = tools.HallOfFame(config.selection.hall_of_fame, similar=same_kernel)
        self.logbook = tools.Logbook()
        self.logbook.header = ["gen", "evals", "correct", "dups", "rejected", "best", "avg", "seconds"]
        self.results: dict[str, EvalResult] = {}          # every evaluated candidate, by id
        self._resume_cache: dict[str, EvalResult] = {}    # evaluated after the last snapshot
        self.counters = {"evaluated": 0, "duplicates": 0, "rejected": 0}
        self._executor: ThreadPoolExecutor | None = None
        self.exhausted = False                            # proven: nothing unseen left to breed
        self.stop_reason: str | None = None
        self._exhausted_spaces: dict[str, int] = {}       # knob space key -> its variants, all seen
        self._space_keys: dict[str, str] = {}             # member id -> knob space key
        self._variant_ids: dict[str, dict[tuple[str, ...], str]] = {}   # space key -> assignment -> id
        weights = config.operators.weights()
        self.operators: list[tuple[Operator, float]] = [
            (REGISTRY[name], w) for name, w in weights.items()
            if w > 0 and (llm is not None or not REGISTRY[name].needs_llm)]
        if not self.operators:
            raise ValueError("no usable operator: the knob operators have probability 0 and no LLM is configured")

    # -- public --------------------------------------------------------------------------
    @property
    def island_sizes(self) -> list[int]:
        n, pop = self.config.island_count, self.config.pop
        return [pop // n + (1 if i < pop % n else 0) for i in range(n)]

    def run(self) -> EvolutionResult:
        """Run (or continue) until generation ``config.gens``; Ctrl-C leaves the last snapshot."""
        workers = self.config.llm.concurrency if self.llm is not None else 1
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evo-fsr-llm")
        try:
            if self.generation < 0:
                self._initialise()
            self._evolve()
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        return self.result()

    def result(self) -> EvolutionResult:
        top = self.best_individual()
        return EvolutionResult(best=top, best_result=self.results.get(top.id) if top else None,
                               hall_of_fame=list(self.hof), generation=self.generation,
                               logbook=self.logbook, counters=dict(self.counters), stop_reason=self.stop_reason)

    def best_individual(self) -> Individual | None:
        for ind in self.hof:
            result = self.results.get(ind.id)
            if result is not None and result.status is Status.OK:
                return ind
        return None

    def _evolve(self) -> None:
        """Everything after generation 0 (the steady-state mode replaces this loop)."""
        while self.generation < self.config.gens and not self._out_of_variants(()):
            self._step()
        if self.exhausted:
            self._announce_exhausted()

    def restore(self) -> bool:
        """Continue from the store's latest snapshot; False when there is none (fresh start)."""
        snap = self.store.latest_snapshot()
        records = list(self.store.records())
        last = snap["generation"] if snap else -1
        for rec in records:
            if rec.get("kind") != "evaluated":
                continue
            result = EvalResult.from_dict(rec["result"])
            (self.results if rec["generation"] <= last else self._resume_cache)[result.candidate_id] = result
        if snap is None:
            return False
        self.generation = last
        self.islands = [[Individual.from_dict(d) for d in island] for island in snap["islands"]]
        self.failures = [[Individual.from_dict(d) for d in island] for island in snap["failures"]]
        self.hof.update([Individual.from_dict(d) for d in snap["hall_of_fame"]])
        for entry in snap["logbook"]:
            self.logbook.record(**entry)
        self.rng = rng_from_json(snap["rng"])
        self.counters.update(snap.get("counters", {}))
        self._restore_extra(snap)
        log.info("resumed %s after generation %d (%d evaluated, %d cached past the snapshot)",
                 self.store.root, last, len(self.results), len(self._resume_cache))
        return True

    def _restore_extra(self, snap: dict[str, Any]) -> None:
        """Mode-specific state from a snapshot (see ``_snapshot_extra``)."""

    def _snapshot_extra(self) -> dict[str, Any]:
        """Mode-specific state saved with each snapshot (nothing for the generational mode)."""
        return {}

    # -- generations ---------------------------------------------------------------------
    def _initialise(self) -> None:
        start = time.monotonic()
        seeds = [Individual(self.task.name, src, operator="seed", label=name)
                 for name, src in self.task.seeds().items()]
        slots = [Slot(i % self.config.island_count, Offspring(s.source, "seed", ())) for i, s in enumerate(seeds)]
        labels = {s.id: s.label for s in seeds}
        n_llm = round(self.config.pop * self.config.operators.init_llm_fraction) if self._llm_op("llm_mutate") else 0
        wanted = max(0, self.config.pop - len(seeds) - n_llm)
        seen = {s.id for s in seeds}
        tunable = [s for s in seeds if s.knob_values]
        for _ in range(wanted * INIT_ATTEMPTS_PER_SLOT if tunable else 0):
            if wanted == 0:
                break
            parent = tunable[self.rng.randrange(len(tunable))]
            variant = random_knob_variant(parent.source, self.rng)
            child = Individual(self.task.name, variant or "", parents=(parent.id,))
            if variant and child.id not in seen:
                seen.add(child.id)
                slots.append(Slot(len(slots) % self.config.island_count,
                                   Offspring(variant, "knob_variant", (parent.id,))))
                wanted -= 1
        for i in range(n_llm):
            parent = seeds[self.rng.randrange(len(seeds))]
            slots.append(self._launch(len(slots) % self.config.island_count, self._llm_op("llm_mutate"), [parent]))
        offspring, stats = self._evaluate(0, slots, labels)
        self.islands = [[] for _ in self.island_sizes]
        for island, ind in offspring:
            self.islands[island].append(ind)
        everyone = [ind for _, ind in offspring]
        for i, size in enumerate(self.island_sizes):          # an island may start short: fill it
            while len(self.islands[i]) < min(size, 1) and everyone:
                self.islands[i].append(everyone[self.rng.randrange(len(everyone))])
        self.failures = [[ind for isl, ind in offspring if isl == i and not ind.correct]
                         for i in range(len(self.islands))]
        self._finish_generation(0, everyone, stats, start)

    def _step(self) -> None:
        start = time.monotonic()
        generation = self.generation + 1
        slots: list[Slot] = []
        pending: set[str] = set()
        for i, island in enumerate(self.islands):
            for _ in range(self.island_sizes[i]):
                if self.exhausted:          # nothing unseen left: evaluate what was bred
                    break
                slots.append(self._vary_one(i, island, pending))
        offspring, stats = self._evaluate(generation, slots, {})
        children: list[list[Individual]] = [[] for _ in self.islands]
        for island, ind in offspring:
            children[island].append(ind)
        for i, island in enumerate(self.islands):
            union = island + children[i]
            elite = self.config.selection.elite
            self.islands[i] = best(union, elite) + self.selector.select(union, self.island_sizes[i] - elite, self.rng)
        self.failures = [[ind for ind in kids if not ind.correct] for kids in children]
        self._migrate(generation)
        self._finish_generation(generation, [ind for _, ind in offspring], stats, start)

    def _migrate(self, generation: int) -> bool:
        """Ring migration when ``generation`` is a multiple of ``migration.interval``."""
        interval = self.config.migration.interval
        if len(self.islands) > 1 and interval and generation % interval == 0 and self.config.migration.size:
            tools.migRing(self.islands, self.config.migration.size, best, replacement=worst)
            log.info("generation %d: ring migration of %d per island", generation, self.config.migration.size)
            return True
        return False

    def _vary_one(self, island_index: int, island: list[Individual], pending: set[str],
                  operators: list[tuple[Operator, float]] | None = None) -> Slot:
        """One child for the island (``operators`` narrows the draw; default: all usable)."""
        operators = operators or self.operators
        names = [op for op, _ in operators]
        operator = self.rng.choices(names, weights=[w for _, w in operators])[0]
        if operator.wants_failed_parent:
            failed = self.failures[island_index] if island_index < len(self.failures) else []
            if failed:
                return self._launch(island_index, operator, [failed[self.rng.randrange(len(failed))]])
            operator = self._llm_op("llm_mutate") or operator
        if operator.needs_llm:
            return self._launch(island_index, operator, self._parents(island, operator.arity))
        outcome: Outcome = Rejected(operator.name, (), "no attempt")
        parents: list[Individual] = []
        for _ in range(KNOB_ATTEMPTS):
            parents = self._parents(island, operator.arity)
            outcome = operator.vary(parents, self._context(), self.rng)
            if isinstance(outcome, Offspring):
                child_id = Individual(self.task.name, outcome.source).id
                if child_id not in self.results and child_id not in pending:
                    pending.add(child_id)
                    return Slot(island_index, outcome)
                outcome = Rejected(operator.name, outcome.parents, "only already-seen variants found")
        return Slot(island_index, self._explore(island_index, parents[:1], pending) or outcome)

    # -- when random knob draws find nothing new -----------------------------------------
    @property
    def _writes_kernels(self) -> bool:
        """An LLM operator is enabled: it can always write a kernel outside every knob space."""
        return any(op.needs_llm for op, _ in self.operators)

    def _explore(self, island_index: int, first: list[Individual], pending: set[str]) -> Outcome | None:
        """The nearest unseen knob variant (``knob_explore``) of ``first``, else of the island's
        members best first, else of the other islands' members; None when there is none, or a
        rejection (and ``exhausted``) when provably none is left and no LLM operator is enabled."""
        order = list(first)
        for step in range(len(self.islands)):
            island = self.islands[(island_index + step) % len(self.islands)]
            order += best(island, len(island))
        salt = self.rng.getrandbits(64)          # one draw, whatever the search below examines
        child, proven = self._nearest_unseen(order, pending, salt)
        if child is not None:
            pending.add(Individual(self.task.name, child.source).id)
            return child
        if proven and not self._writes_kernels:
            self.exhausted = True
            return Rejected(KNOB_EXPLORE, tuple(p.id for p in first),
                            "every knob variant of every population member is already seen")
        return None

    def _out_of_variants(self, pending: Container[str]) -> bool:
        """``exhausted``, checked now if not yet known: no LLM operator is enabled and no member
        of any island has a knob variant that is neither evaluated nor in ``pending``.  Uses
        no engine randomness (a resumed generational run still reproduces the next one)."""
        if not self.exhausted and not self._writes_kernels:
            members = [ind for island in self.islands for ind in island]
            child, proven = self._nearest_unseen(members, pending, 0)
            self.exhausted = child is None and proven
        return self.exhausted

    def _nearest_unseen(self, members: list[Individual], pending: Container[str],
                        salt: int) -> tuple[Offspring | None, bool]:
        """The first members' nearest unseen knob variant, and whether the search proved that
        none is left (every member's knob space enumerated, nothing unseen).  At most
        ``KNOB_EXPLORE_LIMIT`` variants are examined in all; a space already proven exhausted
        is skipped but charged as if examined, and each space's ties are broken by its own RNG
        (salt and member id), so remembering proofs never changes which child is found."""
        def seen(candidate_id: str) -> bool:
            return candidate_id in self.results or candidate_id in pending

        budget, proven = KNOB_EXPLORE_LIMIT, True
        tried: set[str] = set()
        for member in members:
            space = self._space_key(member)
            if space in tried:
                continue
            tried.add(space)
            if space in self._exhausted_spaces:
                budget -= self._exhausted_spaces[space]
                continue
            if budget <= 0:
                return None, False
            found = nearest_unseen_variant(member.source, seen, random.Random(f"{salt}:{member.id}"), budget,
                                           ids=self._variant_ids.setdefault(space, {}))
            budget -= found.examined
            if found.source is not None:
                return Offspring(found.source, KNOB_EXPLORE, (member.id,)), False
            if found.exhausted:
                self._exhausted_spaces[space] = found.examined
            else:
                proven = False
        return None, proven

    def _space_key(self, member: Individual) -> str:
        key = self._space_keys.get(member.id)
        if key is None:
            key = self._space_keys[member.id] = KnobSpace.of(member.source).key()
        return key

    def _announce_exhausted(self) -> None:
        """Log (once per ``run``) and keep for the summary why the run ends here."""
        llm = "no LLM configured" if self.llm is None else "no LLM operator enabled"
        self.stop_reason = (f"knob space exhausted after {len(self.results)} candidates: no unseen variant "
                            f"left and {llm}; ending the run after {self.round_word} {self.generation}")
        log.warning("%s", self.stop_reason)

    def _parents(self, island: list[Individual], arity: int) -> list[Individual]:
        chosen = self.selector.select(island, arity, self.rng)
        for _ in range(3):                            # prefer two different kernels for crossover
            if arity < 2 or len({p.id for p in chosen}) == arity:
                break
            chosen[1:] = self.selector.select(island, arity - 1, self.rng)
        return chosen

    def _llm_op(self, name: str) -> Operator | None:
        return REGISTRY[name] if self.llm is not None else None

    def _launch(self, island: int, operator: Operator | None, parents: list[Individual]) -> Slot:
        assert operator is not None and self._executor is not None
        return Slot(island, future=self._executor.submit(operator.vary, parents, self._context(), None))

    def _context(self) -> VariationContext:
        return VariationContext(task_name=self.task.name, task_description=self.task.describe_for_prompt(),
                                gpu_info=self.backend.gpu_info, llm=self.llm, results=self.results,
                                knob_mutation_rate=self.config.operators.knob_mutation_rate)

    # -- evaluation ----------------------------------------------------------------------
    def _evaluate(self, generation: int, slots: list[Slot],
                  labels: dict[str, str]) -> tuple[list[tuple[int, Individual]], dict[str, int]]:
        """Resolve slots as their outcomes arrive, submit new candidates, collect results;
        returns (island, individual) in slot order, so the RNG sees a deterministic order."""
        stats = {"evaluated": 0, "correct": 0, "duplicates": 0, "rejected": 0}
        waiting = list(range(len(slots)))
        placed: dict[int, Individual] = {}
        in_flight: dict[str, int] = {}
        while waiting or in_flight:
            still = []
            for index in waiting:
                slot = slots[index]
                if not slot.ready:
                    still.append(index)
                    continue
                outcome = slot.resolve()
                ind = self._admit(generation, slot.island, outcome, labels, in_flight, stats)
                if ind is None:
                    continue
                cached = self._resume_cache.pop(ind.id, None)
                if cached is not None:      # evaluated before an interruption: no GPU time again
                    placed[index] = ind
                    self._accept(generation, slot.island, ind, cached, outcome, stats, cached=True)
                else:
                    in_flight[ind.id] = index
                    placed[index] = ind
                    self.backend.submit(ind.to_candidate())
            waiting = still
            if not in_flight:
                if waiting:
                    time.sleep(self.poll_interval_s)
                continue
            for candidate, result in self.backend.poll(self.poll_interval_s if waiting else 1.0):
                index = in_flight.pop(candidate.id, None)
                if index is None:
                    log.warning("result for an unknown candidate %s ignored", candidate.id)
                    continue
                outcome = slots[index].resolve()
                self._accept(generation, slots[index].island, placed[index], result, outcome, stats)
        done = [(slots[i].island, placed[i]) for i in sorted(placed) if placed[i].fitness.valid]
        return done, stats

    def _admit(self, generation: int, island: int, outcome: Outcome, labels: dict[str, str],
               in_flight: Container[str], stats: dict[str, int]) -> Individual | None:
        """The outcome as an individual to evaluate, or None (a rejection or a duplicate, recorded)."""
        if isinstance(outcome, Rejected):
            stats["rejected"] += 1
            self.store.append({"kind": "rejected", "generation": generation, "island": island,
                               "operator": outcome.operator, "parents": list(outcome.parents),
                               "reason": outcome.reason, "llm_call": outcome.llm_call,
                               "reply_excerpt": outcome.reply_excerpt})
            log.info("generation %d: %s rejected: %s", generation, outcome.operator, outcome.reason)
            return None
        ind = Individual(self.task.name, outcome.source, parents=outcome.parents, operator=outcome.operator,
                         generation=generation)
        ind.label = labels.get(ind.id, "")
        if ind.id in self.results or ind.id in in_flight:
            stats["duplicates"] += 1
            self.store.append({"kind": "duplicate", "generation": generation, "island": island, "id": ind.id,
                               "operator": outcome.operator, "parents": list(outcome.parents)})
            return None
        return ind

    def _accept(self, generation: int, island: int, ind: Individual, result: EvalResult, outcome: Outcome,
                stats: dict[str, int], cached: bool = False) -> None:
        """Give ``ind`` its fitness and record it (kernels/, candidates.jsonl, ``results``)."""
        ind.fitness.values = result.fitness
        self.results[ind.id] = result
        stats["evaluated"] += 1
        stats["correct"] += int(result.status.correct)
        kernel = self.store.write_kernel(ind.source)
        record: dict[str, Any] = {"kind": "evaluated", "generation": generation, "island": island,
                                  "candidate": ind.to_dict(with_source=False),
                                  "kernel": str(kernel.relative_to(self.store.root)),
                                  "result": result.to_dict()}
        if cached:
            record["from_cache"] = True
        if isinstance(outcome, Offspring) and outcome.llm_call is not None:
            record["llm_call"] = outcome.llm_call
            record["replayed"] = outcome.replayed
        self.store.append(record)

    def _finish_generation(self, generation: int, offspring: list[Individual], stats: dict[str, int],
                           start: float) -> None:
        population = [ind for island in self.islands for ind in island]
        self.hof.update(population + offspring)
        for key in ("evaluated", "duplicates", "rejected"):
            self.counters[key] += stats[key]
        speedups = [ind.speedup for ind in offspring] or [0.0]
        top = self.best_individual()
        seconds = time.monotonic() - start
        self.logbook.record(gen=generation, evals=stats["evaluated"], correct=stats["correct"],
                            dups=stats["duplicates"], rejected=stats["rejected"],
                            best=top.speedup if top else None, avg=float(np.mean(speedups)),
                            seconds=round(seconds, 3))
        self.generation = generation
        if top is not None:
            self._write_best(top)
        usage = self.llm.usage if self.llm is not None else LlmUsage()
        self.store.save_snapshot(generation, {
            "islands": [[ind.to_dict() for ind in island] for island in self.islands],
            "failures": [[ind.to_dict() for ind in island] for island in self.failures],
            "hall_of_fame": [ind.to_dict() for ind in self.hof],
            "rng": rng_state_to_json(self.rng),
            "logbook": [dict(entry) for entry in self.logbook],
            "counters": self.counters,
            "llm_usage": {"calls": usage.calls, "failed_calls": usage.failed_calls,
                          "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens},
            **self._snapshot_extra(),
        })
        if self.on_generation is not None:
            self.on_generation(GenerationReport(
                generation=generation, evaluated=stats["evaluated"], correct=stats["correct"],
                duplicates=stats["duplicates"], rejected=stats["rejected"],
                best_speedup=top.speedup if top else None, best_id=top.id if top else None,
                seconds=seconds, llm_calls=usage.calls, llm_tokens=usage.tokens))

    def _write_best(self, top: Individual) -> None:
        result = self.results[top.id]
        header = best_header(self.task.name, top.id, result,
                             f"found in generation {top.generation} by {top.operator}; run {self.store.root}")
        self.store.write_best(top.source, header)


def _outcome(future: Future[Outcome]) -> Outcome:
    try:
        return future.result()
    except Exception as exc:  # an operator bug must not end the run: it becomes a rejection
        log.exception("operator raised")
        return Rejected("unknown", (), f"operator raised {type(exc).__name__}: {exc}")


def saved_llm_usage(store: RunStore) -> LlmUsage | None:
    """LLM usage recorded in the latest snapshot (budgets continue across ``--resume``)."""
    snap = store.latest_snapshot()
    if not snap or "llm_usage" not in snap:
        return None
    return LlmUsage(**snap["llm_usage"])
