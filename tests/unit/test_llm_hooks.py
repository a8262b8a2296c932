"""The loop's side of the LLM operators (search/llm_hooks.py): prompt material, the bandit's
credit and record fields, and the client's health."""
from __future__ import annotations

import random

from evo_fsr.config import load_config
from evo_fsr.llm import LlmHealth
from evo_fsr.operators import Offspring
from evo_fsr.search import llm_hooks
from evo_fsr.search.breeder import Breeder
from evo_fsr.search.population import Individual, Population
from evo_fsr.tasks import get_task
from evo_fsr.types import EvalResult, ShapeTiming, Status


class StubLlm:
    def __init__(self, health: LlmHealth | None = None) -> None:
        self.health = health or LlmHealth()
        self.credits: list[tuple[int, float]] = []

    def credit(self, call_id: int, gain: float) -> None:
        self.credits.append((call_id, gain))


def _ok(speedup: float) -> EvalResult:
    timing = ShapeTiming("s", 1.0 / speedup, 1.0, 1.0, 1.0, 10, 0.01)
    return EvalResult(candidate_id="x", task="conv2d", status=Status.OK, summary="", timings=(timing,))


def test_an_llm_child_credits_its_call_and_records_how_it_was_made() -> None:
    llm = StubLlm()
    child = Offspring("src", "llm_diff", ("p",), llm_call=7, edit="2 SEARCH/REPLACE block(s) applied", model="fast")
    fields = llm_hooks.after_child(llm, child, {"p": _ok(2.0)}, _ok(3.0))
    assert fields == {"edit": "2 SEARCH/REPLACE block(s) applied", "model": "fast"}
    assert len(llm.credits) == 1 and llm.credits[0][0] == 7 and llm.credits[0][1] > 0
    assert llm_hooks.after_child(llm, Offspring("src", "knob_mutation", ("p",)), {}, _ok(3.0)) == {}


def test_health_stops_the_llm_operators_or_ends_the_run() -> None:
    stopped = StubLlm(LlmHealth(stopped=True, reason="5 failed calls in a row"))
    assert not llm_hooks.llm_usable(stopped) and llm_hooks.llm_usable(StubLlm()) and not llm_hooks.llm_usable(None)
    assert llm_hooks.llm_ended(stopped) is None and "5 failed" in llm_hooks.warning(stopped)
    ended = StubLlm(LlmHealth(stopped=True, end_run=True, reason="endpoint refused"))
    assert llm_hooks.llm_ended(ended) == "endpoint refused" and llm_hooks.warning(StubLlm()) == ""


def test_a_stopped_llm_leaves_only_knob_operators_and_prompts_get_the_population() -> None:
    task = get_task("conv2d")
    config = load_config(overrides={"task": "conv2d", "pop": 4, "operators.llm_mutate": 1.0,
                                    "operators.llm_diff": 0.0, "operators.llm_crossover": 0.0,
                                    "operators.llm_repair": 0.0})
    llm = StubLlm(LlmHealth(stopped=True, reason="down"))
    breeder = Breeder(task, config, llm=llm, rng=random.Random(1))
    population = Population([4], hall_of_fame=4)
    for src in task.seeds().values():
        population.add(0, Individual(task.name, src, operator="seed"))
    with breeder.running():
        slot = breeder.breed(0, population, set())
    assert slot.future is None, "a stopped LLM must not be asked"
    context = breeder._context(population)
    assert context.brief is not None and context.islands and context.individuals
