"""When random knob draws find only already-seen variants: the nearest unseen knob variant
(``knob_explore``), and the clean early end of a run whose knob spaces are used up."""
from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass
from itertools import islice, product
from typing import Sequence

from evo_fsr.backend.inline import InlineBackend
from evo_fsr.commands import evolve as evolve_command
from evo_fsr.knobs import ENUMERATION_LIMIT, KnobSpace, parse_knobs, set_knobs
from evo_fsr.operators import (KNOB_EXPLORE, REGISTRY, Offspring, Operator, Outcome, VariationContext,
                               nearest_unseen_variant)
from evo_fsr.search import explore as explore_module
from evo_fsr.search.breeder import Breeder
from evo_fsr.search.explore import KNOB_EXPLORE_LIMIT, KnobExplorer
from evo_fsr.search.loop import Evolution
from evo_fsr.search.population import Individual, Population
from evo_fsr.search.store import RunStore
from evo_fsr.testing.synthetic import SYNTHETIC_GPU, SyntheticEvaluator
from evo_fsr.types import Candidate, source_id

TINY = """#define A 1 // knob: 1 2 3
#define B 1 // knob: 1 2
__global__ void k() {}
"""                                                     # 6 combinations
SMALL = """#define A 1 // knob: 1 2 3
#define B 1 // knob: 1 2 3
#define C 1 // knob: 1 2
__global__ void k() {}
"""                                                     # 18 combinations
OTHER = """#define X 1 // knob: 1 2
__global__ void other() {}
"""
HUGE = "".join(f"#define K{i} 0 // knob: 0 1 2 3\n" for i in range(12)) + "__global__ void k() {}\n"   # 4**12


@dataclass
class KnobTask:
    """Just what the engine reads of a task: one seed with the given knobs."""

    source: str
    name: str = "conv2d"

    def seeds(self) -> dict[str, str]:
        return {"only": self.source}

    def describe_for_prompt(self) -> str:
        return "a test task"


class Stubborn(Operator):
    """A knob operator whose every draw is the parent itself: random draws always miss."""

    name = "stubborn"

    def vary(self, parents: Sequence[Individual], context: VariationContext,
             rng: random.Random | None = None) -> Outcome:
        return Offspring(parents[0].source, self.name, (parents[0].id,))


class OneAtATime(InlineBackend):
    """Returns the oldest submitted candidate at each poll: children stay in flight a while.
    Records how many were outstanding at each poll once the engine stopped breeding."""

    def __init__(self) -> None:
        super().__init__(SyntheticEvaluator().evaluate, SYNTHETIC_GPU)
        self.waiting: list[Candidate] = []
        self.engine: Evolution | None = None
        self.outstanding_when_exhausted: list[int] = []

    def submit(self, candidate: Candidate) -> None:
        super().submit(candidate)
        self.waiting.append(candidate)

    def poll(self, timeout_s: float) -> list[tuple[Candidate, object]]:
        if self.engine is not None and self.engine.breeder.exhausted:
            self.outstanding_when_exhausted.append(len(self.waiting))
        if not self.waiting:
            return []
        candidate = self.waiting.pop(0)
        return [(candidate, SyntheticEvaluator().evaluate(candidate))]


def synthetic_backend() -> InlineBackend:
    return InlineBackend(SyntheticEvaluator().evaluate, SYNTHETIC_GPU)


def make(tmp_path, config, task, name="run", backend=None, resume=False):
    store = RunStore.open(tmp_path / name) if resume else RunStore.create(tmp_path / name, config.to_dict())
    backend = backend or synthetic_backend()
    engine = Evolution(config, task, backend, store, poll_interval_s=0.001)
    if resume:
        assert engine.restore()
    return engine, backend, store


def member(source: str, speedup: float = 1.0) -> Individual:
    return Individual("conv2d", source, fitness=(2.0, speedup))


def seen_results(sources: list[str]) -> dict:
    evaluate = SyntheticEvaluator().evaluate
    return {source_id(s): evaluate(Candidate("conv2d", s)) for s in sources}


def breeder_on(config, task, islands: list[list[Individual]], results, operators=None) -> tuple[Breeder, Population]:
    """A breeder whose operators are ``operators`` (default: one that always draws a seen child)."""
    population = Population([max(2, len(i)) for i in islands], 4)
    population.islands = islands
    breeder = Breeder(task, config, results=results, operators=operators or [(Stubborn(), 1.0)])
    return breeder, population


def all_variants(source: str) -> list[str]:
    space = KnobSpace.of(source)
    names = [k.name for k in space.knobs]
    out = [source] + [space.render(dict(zip(names, values))) for values in product(*(k.choices for k in space.knobs))]
    return list({source_id(s): s for s in out}.values())


def distance(a: str, b: str) -> int:
    ka, kb = parse_knobs(a), parse_knobs(b)
    return sum(ka[n].value != kb[n].value for n in ka)


def evaluated(store: RunStore) -> list[dict]:
    return [r for r in store.records() if r["kind"] == "evaluated"]


def exhausted_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "knob space exhausted" in r.getMessage()
            or "already seen" in r.getMessage() and r.levelno >= logging.WARNING]


# -- the knob space -------------------------------------------------------------------------------
def test_knob_space_walks_outward_by_hamming_distance() -> None:
    space = KnobSpace.of(SMALL)
    assert space.size == 18 and space.render({}) == SMALL
    order = list(space.nearest(random.Random(1)))
    rendered = [space.render(values) for values in order]
    assert len(set(rendered)) == len(rendered) == 17 and SMALL not in rendered
    distances = [len(values) for values in order]
    assert distances == sorted(distances) and distances.count(1) == 5 and distances[-1] == 3
    assert [distance(SMALL, s) for s in rendered] == distances
    assert order == list(space.nearest(random.Random(1)))            # deterministic given the rng
    assert any(list(space.nearest(random.Random(seed)))[:5] != order[:5] for seed in range(2, 6))  # ties: rng order
    assert space.render({"B": "3"}) == set_knobs(SMALL, {"B": "3"})
    assert KnobSpace.of(set_knobs(SMALL, {"A": "3", "C": "2"})).key() == space.key()
    assert KnobSpace.of(SMALL.replace("1 2 3\n#define B", "1 2 4\n#define B")).key() != space.key()


def test_enumeration_is_capped_on_a_huge_knob_space() -> None:
    space = KnobSpace.of(HUGE)
    assert space.size == 4 ** 12
    start = time.monotonic()
    order = list(islice(space.nearest(random.Random(0)), ENUMERATION_LIMIT + 1))
    assert len(order) == ENUMERATION_LIMIT                           # not 16M
    distances = [len(values) for values in order]
    exact = 12 * 3 + 66 * 9 + 220 * 27                               # distances 1..3 fit the budget
    assert distances[:exact] == sorted(distances[:exact]) and distances[exact - 1] == 3
    assert min(distances[exact:]) >= 4                               # then random ones, farther out
    assert len(list(islice(space.nearest(random.Random(0), limit=50), 51))) == 50
    found = nearest_unseen_variant(HUGE, lambda _: True, random.Random(0))
    assert (found.source, found.examined, found.exhausted) == (None, ENUMERATION_LIMIT, False)
    wide = "".join(f"#define W{i} 0 // knob: 0 1\n" for i in range(40))   # C(40, 20) at distance 20
    assert len(list(islice(KnobSpace.of(wide).nearest(random.Random(0), limit=1000), 1001))) == 1000
    assert time.monotonic() - start < 20


class SeenEverything(dict):
    """``results`` that claim every candidate id (a huge space that is 'all seen')."""

    def __contains__(self, key: object) -> bool:
        return True


def test_the_breeder_fallback_is_bounded_on_a_huge_knob_space(make_config, monkeypatch) -> None:
    breeder, population = breeder_on(make_config(pop=4, gens=1, seed=3), KnobTask(HUGE),
                                     [[member(HUGE), member(set_knobs(HUGE, {"K3": "2"}))]], SeenEverything())
    examined = []
    real = explore_module.nearest_unseen_variant

    def counting(*args, **kwargs):
        found = real(*args, **kwargs)
        examined.append(found.examined)
        return found
    monkeypatch.setattr(explore_module, "nearest_unseen_variant", counting)
    start = time.monotonic()
    outcome = breeder.breed(0, population, set()).resolve()
    assert outcome.reason == "only already-seen variants found"     # nothing found, nothing proven
    assert sum(examined) == KNOB_EXPLORE_LIMIT and not breeder.exhausted
    assert not breeder.out_of_variants(population, set()) and time.monotonic() - start < 20


# -- the fallback in the breeder ------------------------------------------------------------------
def test_fallback_finds_the_unseen_variant_at_distance_one(make_config) -> None:
    parent = member(SMALL)
    near = set_knobs(SMALL, {"C": "2"})
    far = [set_knobs(SMALL, {"A": "2", "B": "3"}), set_knobs(SMALL, {"A": "3", "B": "2", "C": "2"})]
    results = seen_results([s for s in all_variants(SMALL) if s not in [near] + far])
    breeder, population = breeder_on(make_config(pop=4, gens=1, seed=3), KnobTask(SMALL), [[parent]], results)
    pending: set[str] = set()
    child = breeder.breed(0, population, pending).resolve()
    assert isinstance(child, Offspring) and child.operator == KNOB_EXPLORE == "knob_explore"
    assert child.parents == (parent.id,) and source_id(child.source) == source_id(near)
    assert pending == {source_id(near)}
    second = breeder.breed(0, population, pending).resolve()
    assert isinstance(second, Offspring) and source_id(second.source) in {source_id(s) for s in far}
    assert distance(SMALL, second.source) == 2                       # the nearer of the two far ones
    assert not breeder.exhausted


def test_fallback_tries_the_island_best_first_then_other_islands(make_config) -> None:
    config = make_config(pop=6, gens=1, seed=3, islands=2)
    parent = member(TINY, 1.0)
    weak, strong = member(SMALL, 1.0), member(set_knobs(SMALL, {"A": "3"}), 3.0)
    away = member(OTHER, 0.5)
    results = seen_results(all_variants(TINY) + all_variants(SMALL) + [OTHER])
    breeder, population = breeder_on(config, KnobTask(SMALL), [[parent], [away]], results)
    child = breeder.breed(0, population, set()).resolve()
    assert isinstance(child, Offspring) and child.operator == KNOB_EXPLORE
    assert child.parents == (away.id,) and child.source == set_knobs(OTHER, {"X": "2"})   # the other island
    population.islands[0] += [weak, strong]
    del results[source_id(set_knobs(SMALL, {"A": "3", "C": "2"}))]   # one variant becomes unseen
    explorer = KnobExplorer("conv2d", llm_can_write=False)          # a fresh one: no proofs remembered
    child = explorer.explore(0, [parent], population.islands, results.__contains__, random.Random(0))
    assert isinstance(child, Offspring) and child.parents == (strong.id,)   # the drawn parent's space is used
    assert source_id(child.source) == source_id(set_knobs(SMALL, {"A": "3", "C": "2"}))   # up: the island, best first


MUTATE_ONLY = {"operators.knob_crossover": 0.0}


def test_a_big_knob_space_changes_nothing(tmp_path, make_config, conv2d, monkeypatch) -> None:
    """conv2d's seed has 972 knob combinations, far more than pop x gens: knob_mutate's random
    draws always find something new, so the fallback never runs and the run is the same without
    it, in both modes; and nothing ends early."""
    runs = {}
    for mode in ("generational", "steady"):
        config = make_config(pop=12, gens=5, seed=11, **{"evolution.mode": mode, **MUTATE_ONLY})
        engine, backend, store = make(tmp_path, config, conv2d, name=mode)
        engine.run()
        runs[mode] = (backend.submitted, [r["candidate"]["operator"] for r in evaluated(store)])
        assert engine.stop_reason is None and engine.result().stop_reason is None and not engine.breeder.exhausted
        assert engine.generation == 5 and KNOB_EXPLORE not in runs[mode][1]
        assert all(e["evals"] >= 12 for e in engine.logbook)
    monkeypatch.setattr(KnobExplorer, "explore", lambda self, *args: None)     # the behaviour before the fallback
    for mode in ("generational", "steady"):
        name = mode
        config = make_config(pop=12, gens=5, seed=11, **{"evolution.mode": mode, **MUTATE_ONLY})
        engine, backend, store = make(tmp_path, config, conv2d, name=f"{name}-without")
        engine.run()
        assert (backend.submitted, [r["candidate"]["operator"] for r in evaluated(store)]) == runs[name]


def test_crossover_misses_in_a_big_space_are_filled_not_lost(tmp_path, make_config, conv2d, monkeypatch) -> None:
    """knob_crossover of two similar parents has few children, often all seen, even in a big
    space: those slots were rejections (a short generation); now each is a knob_explore child."""
    config = make_config(pop=12, gens=5, seed=3)
    engine, _, store = make(tmp_path, config, conv2d)
    engine.run()
    assert [e["evals"] for e in engine.logbook][1:] == [12] * 5 and engine.counters["rejected"] == 0
    assert engine.stop_reason is None and engine.generation == 5
    explored = [r for r in evaluated(store) if r["candidate"]["operator"] == KNOB_EXPLORE]
    assert explored and all(len(r["candidate"]["parents"]) == 1 for r in explored)
    monkeypatch.setattr(KnobExplorer, "explore", lambda self, *args: None)
    before, _, _ = make(tmp_path, config, conv2d, name="without")
    before.run()
    assert before.counters["rejected"] > 0 and sum(e["evals"] for e in before.logbook) < 12 * 6


# -- the end of a run with nothing unseen left ----------------------------------------------------
def test_exhausted_knob_space_ends_a_generational_run_early(tmp_path, make_config, caplog) -> None:
    caplog.set_level(logging.INFO, logger="evo_fsr")
    config = make_config(pop=4, gens=10, seed=2)
    engine, backend, store = make(tmp_path, config, KnobTask(TINY))
    result = engine.run()
    everything = {source_id(s) for s in all_variants(TINY)}
    assert len(backend.submitted) == len(set(backend.submitted)) == 6          # every variant, once
    assert set(backend.submitted) == everything == {r["candidate"]["id"] for r in evaluated(store)}
    assert result.generation == engine.generation == 1 < config.gens
    assert [e["gen"] for e in engine.logbook] == [0, 1] and sum(e["evals"] for e in engine.logbook) == 6
    assert (store.snapshots_dir / "gen-0001.json").is_file() and not (store.snapshots_dir / "gen-0002.json").exists()
    assert (store.root / "best.cu").is_file()
    line = ("knob space exhausted after 6 candidates: no unseen variant left and no LLM configured; "
            "ending the run after generation 1")
    assert exhausted_lines(caplog) == [line] and result.stop_reason == line
    assert Counter(r["kind"] for r in store.records())["rejected"] <= 1
    assert {r["candidate"]["operator"] for r in evaluated(store)} <= {"seed", "knob_variant", "knob_mutate",
                                                                      "knob_crossover", KNOB_EXPLORE}

    caplog.clear()                                       # a resumed exhausted run ends at once
    resumed, backend2, _ = make(tmp_path, make_config(pop=4, gens=20, seed=2), KnobTask(TINY), resume=True)
    again = resumed.run()
    assert backend2.submitted == [] and again.generation == 1 and again.stop_reason == line
    assert exhausted_lines(caplog) == [line]
    assert not (store.snapshots_dir / "gen-0002.json").exists()


def test_exhausted_knob_space_ends_a_steady_run_early(tmp_path, make_config, caplog) -> None:
    caplog.set_level(logging.INFO, logger="evo_fsr")
    config = make_config(pop=4, gens=20, seed=5, **{"evolution.mode": "steady", "evolution.in_flight": 3})
    engine, backend, store = make(tmp_path, config, KnobTask(SMALL), backend=OneAtATime())
    backend.engine = engine
    result = engine.run()
    everything = {source_id(s) for s in all_variants(SMALL)}
    assert len(backend.submitted) == len(set(backend.submitted)) == 18
    assert set(backend.submitted) == everything == {r["candidate"]["id"] for r in evaluated(store)}
    drained = backend.outstanding_when_exhausted
    assert drained and drained[0] > 0                    # children were in flight when breeding stopped
    assert not backend.waiting and engine.outstanding == 0
    last = engine.generation
    assert result.generation == last < config.gens and [e["gen"] for e in engine.logbook] == list(range(last + 1))
    assert sum(e["evals"] for e in engine.logbook) == 18
    snap = json.loads((store.snapshots_dir / f"gen-{last:04d}.json").read_text())
    assert snap["policy"]["in_flight"] == [] and (store.root / "best.cu").is_file()
    line = ("knob space exhausted after 18 candidates: no unseen variant left and no LLM configured; "
            f"ending the run after epoch {last}")
    assert exhausted_lines(caplog) == [line] and result.stop_reason == line
    assert Counter(r["kind"] for r in store.records())["rejected"] <= 1

    caplog.clear()
    resumed, backend2, _ = make(tmp_path, config, KnobTask(SMALL), resume=True)
    again = resumed.run()
    assert backend2.submitted == [] and again.generation == last and exhausted_lines(caplog) == [line]
    assert len(list(store.snapshots_dir.glob("gen-*.json"))) == last + 1


def test_an_llm_keeps_the_run_going(make_config) -> None:
    """With an LLM operator enabled a used-up knob space ends nothing: the LLM writes new kernels."""
    config, parent = make_config(pop=4, gens=1, seed=3), member(TINY)
    knobs_only, population = breeder_on(config, KnobTask(TINY), [[parent]], seen_results(all_variants(TINY)))
    assert knobs_only.out_of_variants(population, set()) and knobs_only.exhausted   # knob operators only: proven
    with_llm, population = breeder_on(config, KnobTask(TINY), [[parent]], seen_results(all_variants(TINY)),
                                      operators=[(Stubborn(), 1.0), (REGISTRY["llm_mutate"], 0.0)])
    assert with_llm.writes_kernels and not with_llm.out_of_variants(population, set())
    outcome = with_llm.breed(0, population, set()).resolve()
    assert outcome.reason == "only already-seen variants found" and not with_llm.exhausted


def test_cli_summary_says_the_run_ended_early(tmp_path, capsys, caplog, monkeypatch) -> None:
    monkeypatch.setattr(evolve_command, "get_task", lambda name: KnobTask(TINY))
    out = tmp_path / "run"
    argv = ["--task", "conv2d", "--pop", "4", "--gens", "10", "--out", str(out)]
    assert evolve_command.main(argv, backend_factory=lambda c, t: synthetic_backend()) == 0
    captured = capsys.readouterr()
    assert len(exhausted_lines(caplog)) == 1              # the warning (stderr outside pytest)
    assert "ended early: knob space exhausted after 6 candidates" in captured.out
    assert "ending the run after generation 1" in captured.out
    assert evolve_command.main(["--resume", str(out), "--gens", "20"],
                               backend_factory=lambda c, t: synthetic_backend()) == 0
    captured = capsys.readouterr()
    assert "ended early: knob space exhausted after 6 candidates" in captured.out
    assert "gen " not in captured.out.split("rank")[0]                   # no generation ran
