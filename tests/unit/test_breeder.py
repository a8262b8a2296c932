"""Breeding (select parents, apply an operator) and the population, on their public API."""
from __future__ import annotations

import random

import pytest

from evo_fsr.llm.client import LlmReply, LlmUsage
from evo_fsr.operators import REGISTRY, Offspring
from evo_fsr.search.breeder import Breeder
from evo_fsr.search.population import Individual, Population
from evo_fsr.testing.synthetic import SYNTHETIC_KERNEL, SyntheticEvaluator
from evo_fsr.types import Candidate


class StubLlm:
    """Replies with a new kernel for each call."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages, *, operator):
        self.calls += 1
        return LlmReply(text=f"```cuda\n{SYNTHETIC_KERNEL}int call_{self.calls};\n```", call_id=self.calls,
                        model="stub")

    @property
    def usage(self) -> LlmUsage:
        return LlmUsage(calls=self.calls)

    def describe(self) -> str:
        return "stub"


def evaluated(source: str, speedup_bonus: float = 0.0) -> Individual:
    result = SyntheticEvaluator().evaluate(Candidate("conv2d", source))
    ind = Individual("conv2d", source)
    ind.fitness.values = (result.fitness[0], result.fitness[1] + speedup_bonus)
    return ind


def population_of(conv2d, config, breeder: Breeder | None = None) -> Population:
    """Islands filled from generation 0 without an LLM: the seeds and their knob variants."""
    breeder = breeder or Breeder(conv2d, config)
    population = Population(Population.split(config.pop, config.island_count), config.selection.hall_of_fame)
    for slot in breeder.seed_slots(len(population)):
        population.add(slot.island, evaluated(slot.resolve().source))
    return population


def test_seed_slots_are_the_seeds_then_unseen_knob_variants_dealt_over_the_islands(make_config, conv2d) -> None:
    config = make_config(pop=12, islands=2, seed=1)
    slots = Breeder(conv2d, config).seed_slots(2)
    outcomes = [slot.resolve() for slot in slots]
    seeds = conv2d.seeds()
    assert [s.label for s in slots[:len(seeds)]] == list(seeds) and len(slots) == 12
    assert [o.operator for o in outcomes] == ["seed"] * len(seeds) + ["knob_variant"] * (12 - len(seeds))
    assert len({Individual("conv2d", o.source).id for o in outcomes}) == 12          # all different
    assert [slot.island for slot in slots] == [i % 2 for i in range(12)]
    again = [s.resolve().source for s in Breeder(conv2d, config).seed_slots(2)]
    other = [s.resolve().source for s in Breeder(conv2d, make_config(pop=12, islands=2, seed=2)).seed_slots(2)]
    assert again == [o.source for o in outcomes] and other != again                  # the seed decides


def test_breed_draws_parents_from_the_island_and_never_a_seen_child(make_config, conv2d) -> None:
    config = make_config(pop=12, islands=2, seed=3)
    breeder = Breeder(conv2d, config, results={})
    population = population_of(conv2d, config, breeder)
    results = {ind.id: None for ind in population.members}
    breeder.results = results
    pending: set[str] = set()
    island_ids = [{ind.id for ind in island} for island in population.islands]
    for n in range(30):
        island = n % 2
        child = breeder.breed(island, population, pending).resolve()
        assert isinstance(child, Offspring) and child.operator in ("knob_mutate", "knob_crossover", "knob_explore")
        assert set(child.parents) <= island_ids[island]                      # this island's members
        child_id = Individual("conv2d", child.source).id
        assert child_id not in results and child_id in pending               # unseen, then claimed
    assert len(pending) == 30


def test_the_same_rng_state_breeds_the_same_children(make_config, conv2d) -> None:
    config = make_config(pop=12, islands=2, seed=3)
    runs = []
    for _ in range(2):
        breeder = Breeder(conv2d, config, rng=random.Random(9))
        population = population_of(conv2d, config, breeder)
        runs.append([breeder.breed(n % 2, population, set()).resolve().source for n in range(10)])
    assert runs[0] == runs[1]


def test_llm_operators_run_in_the_pool_and_can_be_left_out(make_config, conv2d) -> None:
    config = make_config(pop=12, islands=2, seed=4, **{"llm.model": "stub"})
    llm = StubLlm()
    breeder = Breeder(conv2d, config, llm=llm,
                      operators=[(REGISTRY["knob_mutate"], 1.0), (REGISTRY["llm_mutate"], 1000.0)])
    population = population_of(conv2d, config)
    with pytest.raises(RuntimeError, match="Breeder.running"):
        breeder.breed(0, population, set())                  # an LLM operator needs the thread pool
    with breeder.running():
        slot = breeder.breed(0, population, set())
        assert slot.future is not None
        child = slot.resolve()
        assert child.operator == "llm_mutate" and "call_1" in child.source
        knob_only = [breeder.breed(0, population, set(), llm=False) for _ in range(10)]
    assert all(s.future is None and s.resolve().operator.startswith("knob") for s in knob_only)
    assert llm.calls == 1


def test_repair_takes_a_failed_member_else_becomes_mutation(make_config, conv2d) -> None:
    config = make_config(pop=12, islands=2, seed=5, **{"llm.model": "stub"})
    breeder = Breeder(conv2d, config, llm=StubLlm(), operators=[(REGISTRY["llm_repair"], 1.0)])
    population = population_of(conv2d, config)
    failed = evaluated(SYNTHETIC_KERNEL + "// SYNTHETIC_WRONG\n")
    assert not failed.correct
    population.remember(1, failed)
    with breeder.running():
        repaired = breeder.breed(1, population, set()).resolve()
        mutated = breeder.breed(0, population, set()).resolve()       # island 0 has no failure
    assert repaired.operator == "llm_repair" and repaired.parents == (failed.id,)
    assert mutated.operator == "llm_mutate" and mutated.parents[0] in {i.id for i in population.islands[0]}


# -- the population ------------------------------------------------------------------------------
def member(name: str, speedup: float, tier: float = 2.0) -> Individual:
    return Individual("conv2d", f"// {name}\nint {name};", fitness=(tier, speedup))


def test_failures_are_the_islands_recent_failed_children() -> None:
    population = Population([2, 2], 5)
    for n in range(3):
        population.add(0, member(f"bad{n}", 0.0, tier=0.0))
    population.add(0, member("good", 1.0))
    assert [i.source.split()[1] for i in population.failures[0]] == ["bad1", "bad2"]   # at most the island size
    assert population.failures[1] == []


def test_migration_moves_each_islands_best_to_the_next_as_its_newest() -> None:
    population = Population([2, 2, 2], 5)
    for island, speeds in enumerate([(1.0, 5.0), (2.0, 3.0), (0.5, 4.0)]):
        for n, speed in enumerate(speeds):
            population.add(island, member(f"i{island}m{n}", speed))
    assert population.migrate(1)
    assert [[i.speedup for i in island] for island in population.islands] == [[5.0, 4.0], [3.0, 5.0], [4.0, 3.0]]
    assert not Population([4], 5).migrate(1)                           # one island: nothing to do


def test_population_round_trips_and_refuses_another_shape() -> None:
    population = Population([2, 2], 5)
    population.add(0, member("a", 1.0))
    population.add(1, member("b", 0.0, tier=0.0))
    population.update_hall_of_fame()
    copy = Population([2, 2], 5)
    copy.restore(population.to_dict())
    assert copy.to_dict() == population.to_dict() and copy.hof[0].id == population.hof[0].id
    with pytest.raises(ValueError, match="expected 3 islands"):
        Population([2, 2, 2], 5).restore(population.to_dict())
