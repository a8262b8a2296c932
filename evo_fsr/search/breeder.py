"""Breeding: select parents and apply an operator, giving one child per ``Slot``.

``Breeder.breed`` draws an operator by the configured probabilities, picks parents by
tournament on the island (``llm_repair`` takes one of the island's recent failures; without
any it becomes ``llm_mutate``; with probability ``selection.shape_elite_rate`` the first parent
is a per-shape elite instead, elites.py says why), and varies them.  Knob operators run here, on the breeder's
RNG; LLM operators run in a thread pool (``running``) so that LLM calls overlap GPU
evaluation, and their slot holds a future.  A knob child already evaluated or pending is
drawn again (``KNOB_ATTEMPTS`` times), then replaced by the nearest unseen knob variant
(``explore.KnobExplorer``).  ``seed_slots`` is generation 0: the task's seeds, random knob
variants of them and (with an LLM) LLM variants.

All randomness comes from ``rng``, used only in the loop's thread, so a generational run that
resumes with the saved RNG state breeds the same next generation.
"""
from __future__ import annotations

import logging
import random
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Mapping

from ..config import RunConfig
from ..llm.client import ChatClient
from ..operators import REGISTRY, Offspring, Operator, Outcome, Rejected, VariationContext, random_knob_variant
from ..tasks import Task
from ..types import EvalResult, GpuInfo
from . import llm_hooks
from .explore import KnobExplorer
from .population import Individual, Population
from .selection import Tournament

log = logging.getLogger(__name__)

KNOB_ATTEMPTS = 8          # draws per knob-operator slot to find an unseen source
INIT_ATTEMPTS_PER_SLOT = 20
Weighted = list[tuple[Operator, float]]


@dataclass
class Slot:
    """One child being bred for an island: an outcome now, or an LLM operator's future."""

    island: int
    outcome: Outcome | None = None
    future: Future[Outcome] | None = None
    label: str = ""                   # a seed's name

    @property
    def ready(self) -> bool:
        return self.future is None or self.future.done()

    def resolve(self) -> Outcome:
        """The outcome (waits for the future; an operator that raised becomes a rejection)."""
        if self.future is not None:
            try:
                return self.future.result()
            except Exception as exc:  # an operator bug must not end the run: it becomes a rejection
                log.exception("operator raised")
                return Rejected("unknown", (), f"operator raised {type(exc).__name__}: {exc}")
        assert self.outcome is not None
        return self.outcome


def usable_operators(config: RunConfig, llm: ChatClient | None) -> Weighted:
    """The operators with a positive probability that can run (LLM ones need an LLM)."""
    chosen = [(REGISTRY[name], w) for name, w in config.operators.weights().items()
              if w > 0 and (llm is not None or not REGISTRY[name].needs_llm)]
    if not chosen:
        raise ValueError("no usable operator: the knob operators have probability 0 and no LLM is configured")
    return chosen


class Breeder:
    """Selects parents and applies operators: one child per call to ``breed``."""

    def __init__(self, task: Task, config: RunConfig, *, llm: ChatClient | None = None,
                 results: Mapping[str, EvalResult] | None = None, gpu_info: GpuInfo | None = None,
                 rng: random.Random | None = None, operators: Weighted | None = None) -> None:
        self.task, self.config, self.llm = task, config, llm
        self.results: Mapping[str, EvalResult] = results if results is not None else {}
        self.gpu_info = gpu_info
        self.rng = rng or random.Random(config.seed)
        self.selector = Tournament(config.selection.tournament_size)
        self.shape_elite_rate = config.selection.shape_elite_rate
        self.operators = operators if operators is not None else usable_operators(config, llm)
        self.knob_operators = [(op, w) for op, w in self.operators if not op.needs_llm]
        self.explorer = KnobExplorer(task.name, llm_can_write=self.writes_kernels)
        self._executor: ThreadPoolExecutor | None = None
        self.brief = llm_hooks.task_brief(task, config.eval.benchmark) if llm is not None else None

    @property
    def writes_kernels(self) -> bool:
        """An LLM operator is enabled: it can always write a kernel outside every knob space."""
        return any(op.needs_llm for op, _ in self.operators)

    @property
    def exhausted(self) -> bool:
        """Proven: no member has an unseen knob variant and no LLM operator is enabled."""
        return self.explorer.exhausted

    @contextmanager
    def running(self) -> Iterator["Breeder"]:
        """The thread pool for LLM operators, for the duration of a run."""
        workers = self.config.llm.concurrency if self.llm is not None else 1
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evo-fsr-llm")
        try:
            yield self
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    # -- generation 0 --------------------------------------------------------------------
    def seed_slots(self, islands: int) -> list[Slot]:
        """The seeds, unseen random knob variants of the tunable ones and (with an LLM)
        ``init_llm_fraction`` of ``pop`` LLM variants, dealt over the islands in turn."""
        pop = self.config.pop
        seeds = [Individual(self.task.name, src, operator="seed", label=name)
                 for name, src in self.task.seeds().items()]
        slots = [Slot(i % islands, Offspring(s.source, "seed", ()), label=s.label) for i, s in enumerate(seeds)]
        mutate = self._llm_op("llm_mutate")
        n_llm = round(pop * self.config.operators.init_llm_fraction) if mutate else 0
        wanted = max(0, pop - len(seeds) - n_llm)
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
                slots.append(Slot(len(slots) % islands, Offspring(variant, "knob_variant", (parent.id,))))
                wanted -= 1
        for _ in range(n_llm):
            parent = seeds[self.rng.randrange(len(seeds))]
            slots.append(self._launch(len(slots) % islands, mutate, [parent]))
        return slots

    # -- later children ------------------------------------------------------------------
    def breed(self, island_index: int, population: Population, pending: set[str], llm: bool = True) -> Slot:
        """One child for the island.  ``pending``: ids bred or in flight but not yet evaluated
        (a knob child's id is added to it); ``llm=False`` draws among the knob operators only."""
        operators = self.operators if llm and llm_hooks.llm_usable(self.llm) else self.knob_operators
        island = population.islands[island_index]
        operator = self.rng.choices([op for op, _ in operators], weights=[w for _, w in operators])[0]
        if operator.wants_failed_parent:
            failed = population.failures[island_index]
            if failed:
                return self._launch(island_index, operator, [failed[self.rng.randrange(len(failed))]], population)
            operator = self._llm_op("llm_mutate") or operator
        if operator.needs_llm:
            parents = self._parents(island, operator.arity, population)
            return self._launch(island_index, operator, parents, population)

        def seen(candidate_id: str) -> bool:
            return candidate_id in self.results or candidate_id in pending

        outcome: Outcome = Rejected(operator.name, (), "no attempt")
        parents: list[Individual] = []
        for _ in range(KNOB_ATTEMPTS):
            parents = self._parents(island, operator.arity, population)
            outcome = operator.vary(parents, self._context(), self.rng)
            if isinstance(outcome, Offspring):
                child_id = Individual(self.task.name, outcome.source).id
                if not seen(child_id):
                    pending.add(child_id)
                    return Slot(island_index, outcome)
                outcome = Rejected(operator.name, outcome.parents, "only already-seen variants found")
        found = self.explorer.explore(island_index, parents[:1], population.islands, seen, self.rng)
        if isinstance(found, Offspring):
            pending.add(Individual(self.task.name, found.source).id)
        return Slot(island_index, found or outcome)

    def out_of_variants(self, population: Population, pending: set[str]) -> bool:
        """``exhausted``, checked now if not yet known (no randomness used)."""
        return self.explorer.check(population.members,
                                   lambda candidate_id: candidate_id in self.results or candidate_id in pending)

    # -- helpers -------------------------------------------------------------------------
    def _parents(self, island: list[Individual], arity: int, population: Population | None = None) -> list[Individual]:
        """Tournament winners on the island; with probability ``shape_elite_rate`` the first is a
        per-shape elite instead (no draw at all when the rate is 0 or the run times one shape)."""
        elite = None
        if self.shape_elite_rate > 0 and population is not None and len(population.elites) > 1 and \
                self.rng.random() < self.shape_elite_rate:
            elite = population.elites.pick(self.rng)
        chosen = ([elite] if elite else []) + self.selector.select(island, arity - (1 if elite else 0), self.rng)
        for _ in range(3):                            # prefer two different kernels for crossover
            if arity < 2 or len({p.id for p in chosen}) == arity:
                break
            chosen[1:] = self.selector.select(island, arity - 1, self.rng)
        return chosen

    def _llm_op(self, name: str) -> Operator | None:
        return REGISTRY[name] if self.llm is not None else None

    def _launch(self, island: int, operator: Operator | None, parents: list[Individual],
                population: Population | None = None) -> Slot:
        if operator is None or self._executor is None:
            raise RuntimeError("LLM operators run only inside Breeder.running()")
        return Slot(island, future=self._executor.submit(operator.vary, parents, self._context(population), None))

    def _context(self, population: Population | None = None) -> VariationContext:
        """What operators read; LLM operators also get the brief, the islands and the lineage."""
        return VariationContext(task_name=self.task.name, task_description=self.task.describe_for_prompt(),
                                gpu_info=self.gpu_info, llm=self.llm, results=self.results,
                                knob_mutation_rate=self.config.operators.knob_mutation_rate,
                                brief=self.brief, llm_settings=self.config.llm,
                                **llm_hooks.context_extras(population))
