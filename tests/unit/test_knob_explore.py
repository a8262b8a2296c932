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

from evo_fsr.search import engine as engine_module
from evo_fsr.commands import evolve as evolve_command
from evo_fsr.search.engine import Engine, InlineBackend
from evo_fsr.knobs import ENUMERATION_LIMIT, KnobSpace, parse_knobs, set_knobs
from evo_fsr.operators import KNOB_EXPLORE, Offspring, Operator, Outcome, VariationContext, nearest_unseen_variant
from evo_fsr.search.population import Individual
from evo_fsr.search.steady import SteadyEngine
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
    """Returns the oldest submitted candidate at each poll: children stay in flight a while."""

    def poll(self, timeout_s: float) -> list[tuple[Candidate, object]]:
        if not self._queue:
            return []
        candidate = self._queue.pop(0)
        return [(candidate, self._evaluate(candidate))]


def synthetic_backend() -> InlineBackend:
    return InlineBackend(SyntheticEvaluator().evaluate, SYNTHETIC_GPU)


def make(tmp_path, config, task, kind=Engine, name="run", backend=None, resume=False):
    store = RunStore.open(tmp_path / name) if resume else RunStore.create(tmp_path / name, config.to_dict())
    backend = backend or synthetic_backend()
    engine = kind(config, task, backend, store, poll_interval_s=0.001)
    if resume:
        assert engine.restore()
    return engine, backend, store


def member(source: str, speedup: float = 1.0) -> Individual:
    return Individual("conv2d", source, fitness=(2.0, speedup))


def mark_seen(engine: Engine, sources: list[str]) -> None:
    evaluate = SyntheticEvaluator().evaluate
    for source in sources:
        engine.results[source_id(source)] = evaluate(Candidate("conv2d", source))


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


def test_the_engine_fallback_is_bounded_on_a_huge_knob_space(tmp_path, make_config, monkeypatch) -> None:
    engine, _, _ = make(tmp_path, make_config(pop=4, gens=1, seed=3), KnobTask(HUGE))
    engine.results = SeenEverything()
    engine.islands, engine.failures = [[member(HUGE), member(set_knobs(HUGE, {"K3": "2"}))]], [[]]
    examined = []
    real = engine_module.nearest_unseen_variant

    def counting(*args, **kwargs):
        found = real(*args, **kwargs)
        examined.append(found.examined)
        return found
    monkeypatch.setattr(engine_module, "nearest_unseen_variant", counting)
    start = time.monotonic()
    outcome = engine._vary_one(0, engine.islands[0], set(), operators=[(Stubborn(), 1.0)]).resolve()
    assert outcome.reason == "only already-seen variants found"     # nothing found, nothing proven
    assert sum(examined) == engine_module.KNOB_EXPLORE_LIMIT and not engine.exhausted
    assert not engine._out_of_variants(()) and time.monotonic() - start < 20


# -- the fallback in the engine -------------------------------------------------------------------
def test_fallback_finds_the_unseen_variant_at_distance_one(tmp_path, make_config) -> None:
    engine, _, _ = make(tmp_path, make_config(pop=4, gens=1, seed=3), KnobTask(SMALL))
    parent = member(SMALL)
    near = set_knobs(SMALL, {"C": "2"})
    far = [set_knobs(SMALL, {"A": "2", "B": "3"}), set_knobs(SMALL, {"A": "3", "B": "2", "C": "2"})]
    mark_seen(engine, [s for s in all_variants(SMALL) if s not in [near] + far])
    engine.islands, engine.failures = [[parent]], [[]]
    pending: set[str] = set()
    slot = engine._vary_one(0, engine.islands[0], pending, operators=[(Stubborn(), 1.0)])
    child = slot.resolve()
    assert isinstance(child, Offspring) and child.operator == KNOB_EXPLORE == "knob_explore"
    assert child.parents == (parent.id,) and source_id(child.source) == source_id(near)
    assert pending == {source_id(near)}
    second = engine._vary_one(0, engine.islands[0], pending, operators=[(Stubborn(), 1.0)]).resolve()
    assert isinstance(second, Offspring) and source_id(second.source) in {source_id(s) for s in far}
    assert distance(SMALL, second.source) == 2                       # the nearer of the two far ones
    assert not engine.exhausted


def test_fallback_tries_the_island_best_first_then_other_islands(tmp_path, make_config) -> None:
    engine, _, _ = make(tmp_path, make_config(pop=6, gens=1, seed=3, islands=2), KnobTask(SMALL))
    parent = member(TINY, 1.0)
    weak, strong = member(SMALL, 1.0), member(set_knobs(SMALL, {"A": "3"}), 3.0)
    away = member(OTHER, 0.5)
    mark_seen(engine, all_variants(TINY) + all_variants(SMALL) + [OTHER])
    engine.islands, engine.failures = [[parent], [away]], [[], []]
    child = engine._vary_one(0, engine.islands[0], set(), operators=[(Stubborn(), 1.0)]).resolve()
    assert isinstance(child, Offspring) and child.operator == KNOB_EXPLORE
    assert child.parents == (away.id,) and child.source == set_knobs(OTHER, {"X": "2"})   # the other island
    engine.islands[0] += [weak, strong]
    engine._exhausted_spaces.clear()                     # forget the proof: one variant becomes unseen
    engine.results.pop(source_id(set_knobs(SMALL, {"A": "3", "C": "2"})))
    child = engine._explore(0, [parent], set())          # the drawn parent's space is used up
    assert isinstance(child, Offspring) and child.parents == (strong.id,)   # then the island, best first
    assert source_id(child.source) == source_id(set_knobs(SMALL, {"A": "3", "C": "2"}))


MUTATE_ONLY = {"operators.knob_crossover": 0.0}


def test_a_big_knob_space_changes_nothing(tmp_path, make_config, conv2d, monkeypatch) -> None:
    """conv2d's seed has 972 knob combinations, far more than pop x gens: knob_mutate's random
    draws always find something new, so the fallback never runs and the run is the same without
    it, in both modes; and nothing ends early."""
    runs = {}
    for name, kind, mode in [("gen", Engine, "generational"), ("steady", SteadyEngine, "steady")]:
        config = make_config(pop=12, gens=5, seed=11, **{"evolution.mode": mode, **MUTATE_ONLY})
        engine, backend, store = make(tmp_path, config, conv2d, kind=kind, name=name)
        engine.run()
        runs[name] = (backend.submitted, [r["candidate"]["operator"] for r in evaluated(store)])
        assert engine.stop_reason is None and engine.result().stop_reason is None and not engine.exhausted
        assert engine.generation == 5 and KNOB_EXPLORE not in runs[name][1]
        assert all(e["evals"] >= 12 for e in engine.logbook)
    monkeypatch.setattr(Engine, "_explore", lambda self, *args: None)     # the behaviour before the fallback
    for name, kind, mode in [("gen", Engine, "generational"), ("steady", SteadyEngine, "steady")]:
        config = make_config(pop=12, gens=5, seed=11, **{"evolution.mode": mode, **MUTATE_ONLY})
        engine, backend, store = make(tmp_path, config, conv2d, kind=kind, name=f"{name}-without")
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
    monkeypatch.setattr(Engine, "_explore", lambda self, *args: None)
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
    engine, backend, store = make(tmp_path, config, KnobTask(SMALL), kind=SteadyEngine,
                                  backend=OneAtATime(SyntheticEvaluator().evaluate, SYNTHETIC_GPU))
    drained = []
    original = engine._drain_exhausted

    def spy() -> None:
        drained.append(engine.outstanding)
        original()
    engine._drain_exhausted = spy                        # type: ignore[method-assign]
    result = engine.run()
    everything = {source_id(s) for s in all_variants(SMALL)}
    assert len(backend.submitted) == len(set(backend.submitted)) == 18
    assert set(backend.submitted) == everything == {r["candidate"]["id"] for r in evaluated(store)}
    assert drained and drained[0] > 0                    # children were in flight when breeding stopped
    assert not backend._queue and engine.outstanding == 0
    last = engine.generation
    assert result.generation == last < config.gens and [e["gen"] for e in engine.logbook] == list(range(last + 1))
    assert sum(e["evals"] for e in engine.logbook) == 18
    snap = json.loads((store.snapshots_dir / f"gen-{last:04d}.json").read_text())
    assert snap["in_flight"] == [] and (store.root / "best.cu").is_file()
    line = ("knob space exhausted after 18 candidates: no unseen variant left and no LLM configured; "
            f"ending the run after epoch {last}")
    assert exhausted_lines(caplog) == [line] and result.stop_reason == line
    assert Counter(r["kind"] for r in store.records())["rejected"] <= 1

    caplog.clear()
    resumed, backend2, _ = make(tmp_path, config, KnobTask(SMALL), kind=SteadyEngine, resume=True)
    again = resumed.run()
    assert backend2.submitted == [] and again.generation == last and exhausted_lines(caplog) == [line]
    assert len(list(store.snapshots_dir.glob("gen-*.json"))) == last + 1


def test_an_llm_keeps_the_run_going(tmp_path, make_config) -> None:
    """With an LLM operator enabled a used-up knob space ends nothing: the LLM writes new kernels."""
    engine, _, _ = make(tmp_path, make_config(pop=4, gens=1, seed=3), KnobTask(TINY))
    parent = member(TINY)
    mark_seen(engine, all_variants(TINY))
    engine.islands, engine.failures = [[parent]], [[]]
    assert engine._out_of_variants(()) and engine.exhausted           # knob operators only: proven
    llm_engine, _, _ = make(tmp_path, make_config(pop=4, gens=1, seed=3), KnobTask(TINY), name="llm")
    llm_engine.operators = llm_engine.operators + [(engine_module.REGISTRY["llm_mutate"], 0.0)]
    mark_seen(llm_engine, all_variants(TINY))
    llm_engine.islands, llm_engine.failures = [[parent]], [[]]
    assert not llm_engine._out_of_variants(())
    outcome = llm_engine._vary_one(0, llm_engine.islands[0], set(), operators=[(Stubborn(), 1.0)]).resolve()
    assert outcome.reason == "only already-seen variants found" and not llm_engine.exhausted


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
