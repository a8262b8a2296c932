"""The evolution loop in the generational mode against a synthetic in-process evaluator
(fitness from knob values)."""
from __future__ import annotations

import json

import pytest
from deap import tools

from evo_fsr.backend.inline import InlineBackend
from evo_fsr.search.loop import Evolution
from evo_fsr.llm.client import LlmReply, LlmUsage
from evo_fsr.search.population import Individual
from evo_fsr.search.store import RunStore
from evo_fsr.testing.synthetic import SYNTHETIC_GPU, SYNTHETIC_KERNEL, SyntheticEvaluator
from evo_fsr.types import Candidate


def make_engine(tmp_path, config, task, name="run", backend=None, llm=None, reports=None, resume=False):
    store = RunStore.open(tmp_path / name) if resume else RunStore.create(tmp_path / name, config.to_dict())
    backend = backend or InlineBackend(SyntheticEvaluator().evaluate, SYNTHETIC_GPU)
    engine = Evolution(config, task, backend, store, llm=llm,
                       on_generation=(reports.append if reports is not None else None))
    if resume:
        assert engine.restore()
    return engine, backend, store


def snapshot_ids(store: RunStore, generation: int) -> list[list[str]]:
    data = json.loads((store.snapshots_dir / f"gen-{generation:04d}.json").read_text())
    return [[ind["id"] for ind in island] for island in data["population"]["islands"]]


def test_selection_pressure_raises_fitness(tmp_path, make_config, conv2d) -> None:
    reports = []
    engine, backend, _ = make_engine(tmp_path, make_config(pop=16, gens=6, seed=1), conv2d, reports=reports)
    initial_mean = None
    result = engine.run()
    population = engine.population.members
    mean_final = sum(i.speedup for i in population) / len(population)
    initial_mean = engine.logbook.select("avg")[0]
    assert mean_final > initial_mean + 0.5
    assert result.best is not None and result.best.speedup >= 5.0
    assert [r.generation for r in reports] == list(range(7))


def test_elitism_keeps_the_best(tmp_path, make_config, conv2d) -> None:
    config = make_config(pop=12, gens=5, seed=3, islands=1)
    best_so_far = []

    def after_generation(report):
        island = engine.population.islands[0]
        best_so_far.append(max(i.fitness.values for i in island))
        elite = engine.population.hof[0]         # the elite is never lost (or an equal-fitness tie kept)
        assert elite.id in {i.id for i in island} or best_so_far[-1] == elite.fitness.values
    engine, _, _ = make_engine(tmp_path, config, conv2d)
    engine.on_generation = after_generation
    engine.run()
    assert best_so_far == sorted(best_so_far) and len(best_so_far) == 6
    assert [e["best"] for e in engine.logbook] == sorted(e["best"] for e in engine.logbook)


def test_islands_migrate_in_a_ring(tmp_path, make_config, conv2d, monkeypatch) -> None:
    calls = []
    original = tools.migRing

    def spy(populations, k, selection, replacement=None, migarray=None):
        emigrants = [[i.id for i in selection(deme, k)] for deme in populations]
        original(populations, k, selection, replacement=replacement, migarray=migarray)
        calls.append(emigrants)
        for i, sent in enumerate(emigrants):          # island i's best now live on island i+1
            receiver = {ind.id for ind in populations[(i + 1) % len(populations)]}
            assert set(sent) <= receiver
    monkeypatch.setattr(tools, "migRing", spy)
    config = make_config(pop=12, gens=4, islands=3, seed=2, **{"migration.interval": 2, "migration.size": 1})
    engine, _, _ = make_engine(tmp_path, config, conv2d)
    engine.run()
    assert len(calls) == 2 and all(len(c) == 3 for c in calls)
    assert [len(island) for island in engine.population.islands] == [4, 4, 4]


def test_duplicates_are_never_evaluated(tmp_path, make_config, conv2d) -> None:
    engine, backend, store = make_engine(tmp_path, make_config(pop=16, gens=8, seed=4), conv2d)
    engine.run()
    assert len(backend.submitted) == len(set(backend.submitted)) > 16
    evaluated = [r["candidate"]["id"] for r in store.records() if r["kind"] == "evaluated"]
    assert len(evaluated) == len(set(evaluated)) == len(backend.submitted)
    assert len(list(store.kernels_dir.glob("*.cu"))) == len(evaluated)


class CopyCatLlm:
    """Always replies with the same kernel (so every call after the first is a duplicate)."""

    def __init__(self, reply: str) -> None:
        self.reply, self.calls = reply, 0

    def complete(self, messages, *, operator):
        self.calls += 1
        return LlmReply(text=self.reply, call_id=self.calls, model="stub")

    @property
    def usage(self) -> LlmUsage:
        return LlmUsage(calls=self.calls)

    def describe(self) -> str:
        return "stub"


def test_llm_duplicates_and_unusable_replies_cost_no_gpu_time(tmp_path, make_config, conv2d) -> None:
    llm = CopyCatLlm(f"```cuda\n{SYNTHETIC_KERNEL}```")
    config = make_config(pop=8, gens=2, seed=5, **{"llm.model": "stub", "operators.llm_mutate": 1.0, "operators.knob_mutate": 0.0,
                                                   "operators.knob_crossover": 0.0, "operators.llm_crossover": 0.0, "operators.llm_diff": 0.0,
                                                   "operators.llm_repair": 0.0})
    engine, backend, store = make_engine(tmp_path, config, conv2d, llm=llm)
    engine.run()
    kernel_id = Candidate("conv2d", SYNTHETIC_KERNEL).id
    assert backend.submitted.count(kernel_id) == 1
    assert llm.calls > 3 and engine.counters["duplicates"] == llm.calls - 1
    dups = [r for r in store.records() if r["kind"] == "duplicate"]
    assert {r["id"] for r in dups} == {kernel_id} and all(r["operator"] == "llm_mutate" for r in dups)

    bad = CopyCatLlm("no code here")
    engine2, backend2, store2 = make_engine(tmp_path, config, conv2d, name="run2", llm=bad)
    engine2.run()
    rejected = [r for r in store2.records() if r["kind"] == "rejected"]
    assert len(rejected) == bad.calls and all("unusable reply" in r["reason"] for r in rejected)
    assert all(r["kind"] != "evaluated" or r["candidate"]["operator"] == "seed" or
               r["candidate"]["operator"] == "knob_variant" for r in store2.records())


def test_resume_reproduces_the_same_next_generation(tmp_path, make_config, conv2d) -> None:
    full, _, full_store = make_engine(tmp_path, make_config(pop=12, gens=4, seed=7), conv2d, name="full")
    full.run()
    part, _, part_store = make_engine(tmp_path, make_config(pop=12, gens=2, seed=7), conv2d, name="part")
    part.run()
    resumed, backend, _ = make_engine(tmp_path, make_config(pop=12, gens=4, seed=7), conv2d, name="part", resume=True)
    assert resumed.generation == 2
    resumed.run()
    for gen in (3, 4):
        assert snapshot_ids(part_store, gen) == snapshot_ids(full_store, gen)
    assert not set(backend.submitted) & set(part.results)        # nothing evaluated twice


class Interrupting(InlineBackend):
    """Returns at most ``after`` results in all, then raises ``error`` (Ctrl-C by default)."""

    def __init__(self, after: int, error: type[BaseException] = KeyboardInterrupt) -> None:
        super().__init__(SyntheticEvaluator().evaluate, SYNTHETIC_GPU)
        self.after, self.error = after, error
        self.waiting: list[Candidate] = []
        self.evaluated = 0

    def submit(self, candidate):
        super().submit(candidate)
        self.waiting.append(candidate)

    def poll(self, timeout_s):
        if self.evaluated >= self.after:
            raise self.error
        batch, self.waiting = self.waiting[: self.after - self.evaluated], self.waiting[self.after - self.evaluated:]
        self.evaluated += len(batch)
        return [(c, SyntheticEvaluator().evaluate(c)) for c in batch]


def test_interrupted_run_resumes_without_redoing_work(tmp_path, make_config, conv2d) -> None:
    full, _, full_store = make_engine(tmp_path, make_config(pop=12, gens=3, seed=9), conv2d, name="full")
    full.run()
    killed, backend, store = make_engine(tmp_path, make_config(pop=12, gens=3, seed=9), conv2d, name="cut",
                                         backend=Interrupting(after=30))
    with pytest.raises(KeyboardInterrupt):
        killed.run()
    done_before = {r["candidate"]["id"] for r in store.records() if r["kind"] == "evaluated"}
    resumed, backend2, _ = make_engine(tmp_path, make_config(pop=12, gens=3, seed=9), conv2d, name="cut", resume=True)
    assert resumed.generation < 3
    resumed.run()
    assert snapshot_ids(store, 3) == snapshot_ids(full_store, 3)
    assert not set(backend2.submitted) & done_before
    assert any(r["kind"] == "reused" for r in store.records())
    evaluated = [r["candidate"]["id"] for r in store.records() if r["kind"] == "evaluated"]
    assert len(evaluated) == len(set(evaluated))                 # one evaluated record per candidate


def test_population_members_pickle_without_creator() -> None:
    import pickle
    ind = Individual("conv2d", SYNTHETIC_KERNEL, parents=("a",), operator="llm_mutate", generation=3, fitness=(2.0, 1.5))
    back = pickle.loads(pickle.dumps(ind))
    assert back.id == ind.id and back.fitness.values == (2.0, 1.5) and back.parents == ("a",)
    assert back.knob_values == {"TILE": "16"}
