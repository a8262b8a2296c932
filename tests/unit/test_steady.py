"""The asynchronous steady-state mode (evolution.mode: steady) against synthetic backends that
report several workers and complete candidates out of order."""
from __future__ import annotations

import dataclasses
import json
import random
import threading
import time
from collections import Counter

import pytest
import yaml

from evo_fsr.backend.inline import InlineBackend
from evo_fsr.commands.evolve import main
from evo_fsr.config import ConfigError, load_config
from evo_fsr.llm.client import LlmReply, LlmUsage
from evo_fsr.search import population as population_module
from evo_fsr.search.loop import Evolution
from evo_fsr.search.policies import EPOCH_ATTEMPT_FACTOR, auto_in_flight
from evo_fsr.search.population import Individual
from evo_fsr.search.selection import replace_worst
from evo_fsr.search.store import RunStore
from evo_fsr.testing.synthetic import SYNTHETIC_GPU, SYNTHETIC_KERNEL, SyntheticEvaluator
from evo_fsr.types import Candidate


class ShuffledBackend:
    """``size`` workers: each poll completes 0..size outstanding candidates, picked at random
    (out of submission order), or the oldest ones with ``shuffle=False``.  Records how many
    candidates were outstanding at each poll of the steady phase."""

    def __init__(self, size: int = 2, seed: int = 0, shuffle: bool = True, evaluate=None) -> None:
        self._evaluate = evaluate or SyntheticEvaluator().evaluate
        self.size, self.shuffle = size, shuffle
        self.rng = random.Random(seed)
        self.outstanding: list[Candidate] = []
        self.submitted: list[str] = []
        self.engine: Evolution | None = None
        self.steady_polls: list[tuple[int, int]] = []     # (last completed epoch, outstanding)
        self.drain_polls: list[int] = []                  # outstanding, once breeding has ended

    @property
    def gpu_info(self):
        return SYNTHETIC_GPU

    def submit(self, candidate: Candidate) -> None:
        self.outstanding.append(candidate)
        self.submitted.append(candidate.id)

    def poll(self, timeout_s: float):
        engine = self.engine
        if engine is not None and engine.generation >= 0:
            if engine.draining:
                self.drain_polls.append(len(self.outstanding))
            else:
                self.steady_polls.append((engine.generation, len(self.outstanding)))
        count = self.rng.randint(0, min(self.size, len(self.outstanding)))
        done = self.rng.sample(self.outstanding, count) if self.shuffle else self.outstanding[:count or 1]
        for candidate in done:
            self.outstanding.remove(candidate)
        return [(c, self._evaluate(c)) for c in done]

    def close(self) -> None:
        self.outstanding.clear()


def steady_config(make_config, **overrides):
    return make_config(**{"evolution.mode": "steady", **overrides})


def make_steady(tmp_path, config, task, name="run", backend=None, llm=None, reports=None, resume=False):
    store = RunStore.open(tmp_path / name) if resume else RunStore.create(tmp_path / name, config.to_dict())
    backend = backend if backend is not None else ShuffledBackend()
    engine = Evolution(config, task, backend, store, llm=llm,
                       on_generation=reports.append if reports is not None else None, poll_interval_s=0.001)
    if isinstance(backend, ShuffledBackend):
        backend.engine = engine
    if resume:
        assert engine.restore()
    return engine, backend, store


def evaluated_by_epoch(store: RunStore) -> Counter[int]:
    return Counter(r["generation"] for r in store.records() if r["kind"] == "evaluated")


def snapshot(store: RunStore, epoch: int) -> dict:
    return json.loads((store.snapshots_dir / f"gen-{epoch:04d}.json").read_text())


# -- the replacement rule -------------------------------------------------------------------------
def ind(name: str, speedup: float, tier: float = 2.0) -> Individual:
    return Individual("conv2d", f"// {name}\nint {name};", fitness=(tier, speedup))


def test_replacement_removes_the_worst_oldest_first_and_never_the_best() -> None:
    a, b, c = ind("a", 1.0), ind("b", 1.0), ind("c", 3.0)
    island = [a, b, c]
    assert replace_worst(island, ind("d", 2.0), capacity=3) == [a]          # a and b tie: the older goes
    assert [i.source for i in island] == [b.source, c.source, island[2].source]
    worse = ind("e", 0.5)
    assert replace_worst(island, worse, capacity=3) == [worse]              # a worse newcomer goes itself
    same = [ind("p", 1.0), ind("q", 1.0)]
    first = same[0]
    assert replace_worst(same, ind("r", 1.0), capacity=2)[0].source == "// q\nint q;"
    assert same[0] is first                                                 # all equal: the best (oldest) stays
    broken = [ind("x", 0.0, tier=0.0), ind("y", 1.0)]
    assert replace_worst(broken, ind("z", 2.0), capacity=2)[0].source.startswith("// x")
    elite = [ind("h", 5.0), ind("i", 4.0), ind("j", 1.0)]
    replace_worst(elite, ind("k", 3.0), capacity=3, protect=2)
    assert [i.speedup for i in elite] == [5.0, 4.0, 3.0]
    short = [ind("s", 1.0)]
    assert replace_worst(short, ind("t", 0.1), capacity=3) == [] and len(short) == 2   # below capacity: no removal


# -- the loop -------------------------------------------------------------------------------------
def test_steady_run_completes_epochs_of_pop_children(tmp_path, make_config, conv2d) -> None:
    reports = []
    config = steady_config(make_config, pop=12, gens=5, seed=1)
    engine, backend, store = make_steady(tmp_path, config, conv2d, backend=ShuffledBackend(size=2), reports=reports)
    assert engine.policy.limit == auto_in_flight(2) == 12
    result = engine.run()
    assert result.generation == 5 and [r.generation for r in reports] == list(range(6))
    assert [e["gen"] for e in engine.logbook] == list(range(6))
    counts = evaluated_by_epoch(store)
    assert counts[0] == engine.logbook[0]["evals"]
    assert all(counts[e] == 12 for e in range(1, 5))
    assert 12 <= counts[5] <= 12 + engine.policy.limit                  # the last epoch takes the in-flight drain
    assert [engine.logbook[e]["evals"] for e in range(1, 6)] == [counts[e] for e in range(1, 6)]
    assert sorted(counts) == list(range(6))
    # nothing submitted is lost: every submission came back and was recorded
    assert not backend.outstanding and len(backend.submitted) == sum(counts.values())
    assert all((store.snapshots_dir / f"gen-{e:04d}.json").is_file() for e in range(6))
    assert snapshot(store, 5)["policy"]["in_flight"] == [] and snapshot(store, 5)["mode"] == "steady"
    assert [len(island) for island in engine.population.islands] == engine.population.sizes
    assert (store.root / "best.cu").is_file()


def test_backend_always_has_in_flight_candidates(tmp_path, make_config, conv2d) -> None:
    config = steady_config(make_config, pop=16, gens=4, seed=2)
    engine, backend, _ = make_steady(tmp_path, config, conv2d, backend=ShuffledBackend(size=4, seed=5))
    assert engine.policy.limit == 16 == auto_in_flight(4, 16)          # 4 x 4 + 4, capped at pop
    engine.run()
    seen = [n for _, n in backend.steady_polls]
    # at every poll between epochs 0 and the last one the backend holds exactly in_flight candidates
    assert len(seen) > 16 and min(seen) == max(seen) == 16
    assert {epoch for epoch, _ in backend.steady_polls} == {0, 1, 2, 3}   # across every epoch boundary

    explicit = steady_config(make_config, pop=16, gens=2, seed=2, **{"evolution.in_flight": 3})
    engine2, backend2, _ = make_steady(tmp_path, explicit, conv2d, name="three", backend=ShuffledBackend(size=4))
    assert engine2.policy.limit == 3
    engine2.run()
    assert {n for _, n in backend2.steady_polls} == {3}


def test_generational_mode_idles_between_generations(tmp_path, make_config, conv2d) -> None:
    """The reason for the steady mode: a generation ends with nothing outstanding."""
    backend = ShuffledBackend(size=2)
    config = make_config(pop=12, gens=2, seed=1)
    engine = Evolution(config, conv2d, backend, RunStore.create(tmp_path / "gen", config.to_dict()),
                       poll_interval_s=0.001)
    backend.engine = engine
    engine.run()
    assert min(n for _, n in backend.steady_polls) <= 2 and min(backend.drain_polls) <= 1
    assert max(n for _, n in backend.steady_polls) == 12


def test_elitism_and_selection_pressure(tmp_path, make_config, conv2d, monkeypatch) -> None:
    real = population_module.replace_worst
    calls = []

    def spy(population, newcomer, capacity, protect=1):
        top = max(population + [newcomer], key=lambda i: i.fitness.wvalues)
        removed = real(population, newcomer, capacity, protect)
        assert any(member is top for member in population), "the island's best was removed"
        assert len(population) <= capacity
        calls.append(len(removed))
        return removed
    monkeypatch.setattr(population_module, "replace_worst", spy)
    config = steady_config(make_config, pop=16, gens=6, seed=1, islands=2)
    engine, _, _ = make_steady(tmp_path, config, conv2d, backend=ShuffledBackend(size=2, seed=3))
    result = engine.run()
    assert len(calls) >= 16 * 6 and all(n == 1 for n in calls)
    bests = [e["best"] for e in engine.logbook]
    assert bests == sorted(bests)
    population = engine.population.members
    mean_final = sum(i.speedup for i in population) / len(population)
    assert mean_final > engine.logbook.select("avg")[0] + 0.5
    assert result.best is not None and result.best.speedup >= 5.0
    assert engine.population.hof[0].id in {i.id for i in population}


def test_elitism_holds_when_every_fitness_ties(tmp_path, make_config, conv2d, monkeypatch) -> None:
    """All children equally fit: each replacement removes the oldest member except the island's
    best (among equals, its oldest), which stays for the whole run."""
    evaluator = SyntheticEvaluator()

    def flat(candidate):
        result = evaluator.evaluate(candidate)
        return dataclasses.replace(result, timings=tuple(dataclasses.replace(t, median_ms=0.5)
                                                         for t in result.timings))
    config = steady_config(make_config, pop=8, gens=3, seed=4, islands=1)
    engine, _, _ = make_steady(tmp_path, config, conv2d, backend=ShuffledBackend(size=2, evaluate=flat))
    engine.run()
    island = engine.population.islands[0]
    assert {i.speedup for i in island} == {2.0}
    first = snapshot(engine.store, 0)["population"]["islands"][0][0]["id"]
    assert island[0].id == first
    assert all(i.generation == 3 for i in island[1:])    # everyone else was replaced


def test_islands_migrate_every_interval_epochs(tmp_path, make_config, conv2d, monkeypatch) -> None:
    from deap import tools
    epochs = []
    real = tools.migRing

    def spy(populations, k, selection, replacement=None, migarray=None):
        epochs.append(engine.generation + 1)        # migration precedes the epoch's snapshot
        real(populations, k, selection, replacement=replacement, migarray=migarray)
    monkeypatch.setattr(tools, "migRing", spy)
    config = steady_config(make_config, pop=12, gens=4, islands=3, seed=2,
                           **{"migration.interval": 2, "migration.size": 1})
    engine, _, _ = make_steady(tmp_path, config, conv2d, backend=ShuffledBackend(size=2))
    engine.run()
    assert epochs == [2, 4] and [len(island) for island in engine.population.islands] == [4, 4, 4]


def test_duplicates_are_never_submitted(tmp_path, make_config, conv2d) -> None:
    config = steady_config(make_config, pop=16, gens=8, seed=4)
    engine, backend, store = make_steady(tmp_path, config, conv2d, backend=ShuffledBackend(size=4, seed=1))
    engine.run()
    assert len(backend.submitted) == len(set(backend.submitted)) > 16 * 8
    evaluated = [r["candidate"]["id"] for r in store.records() if r["kind"] == "evaluated"]
    assert len(evaluated) == len(set(evaluated)) == len(backend.submitted)
    rejected = [r for r in store.records() if r["kind"] == "rejected"]
    assert len(rejected) == engine.counters["rejected"]          # recorded, never submitted
    assert all(r["operator"] in ("knob_mutate", "knob_crossover", "knob_explore") and r["reason"] for r in rejected)
    assert all(r["generation"] in range(9) for r in rejected)
    explored = [r for r in store.records() if r["kind"] == "evaluated" and r["candidate"]["operator"] == "knob_explore"]
    assert explored          # random draws that found only seen variants: the nearest unseen one instead


class StubLlm:
    """Replies with ``reply(n)`` for the n-th call, after ``delay_s``."""

    def __init__(self, reply, delay_s: float = 0.0) -> None:
        self.reply, self.delay_s, self.calls = reply, delay_s, 0
        self._lock = threading.Lock()

    def complete(self, messages, *, operator):
        with self._lock:
            self.calls += 1
            n = self.calls
        time.sleep(self.delay_s)
        return LlmReply(text=self.reply(n), call_id=n, model="stub")

    @property
    def usage(self) -> LlmUsage:
        return LlmUsage(calls=self.calls)

    def describe(self) -> str:
        return "stub"


LLM_ONLY = {"llm.model": "stub", "operators.llm_mutate": 1.0, "operators.knob_mutate": 0.0,
            "operators.knob_crossover": 0.0, "operators.llm_crossover": 0.0, "operators.llm_repair": 0.0,
            "operators.llm_diff": 0.0}


def test_llm_duplicates_and_unusable_replies_are_recorded_and_the_run_ends(tmp_path, make_config, conv2d) -> None:
    copycat = StubLlm(lambda n: f"```cuda\n{SYNTHETIC_KERNEL}```")
    config = steady_config(make_config, pop=8, gens=2, seed=5, **LLM_ONLY)
    engine, backend, store = make_steady(tmp_path, config, conv2d, backend=ShuffledBackend(size=2), llm=copycat)
    engine.run()
    kernel_id = Candidate("conv2d", SYNTHETIC_KERNEL).id
    assert backend.submitted.count(kernel_id) == 1
    dups = [r for r in store.records() if r["kind"] == "duplicate"]
    assert len(dups) == engine.counters["duplicates"] == copycat.calls - 1 > 8
    assert {r["id"] for r in dups} == {kernel_id} and all(r["operator"] == "llm_mutate" for r in dups)
    assert [e["gen"] for e in engine.logbook] == [0, 1, 2]      # epochs end on attempts: no endless loop

    garbage = StubLlm(lambda n: "no code here")
    engine2, _, store2 = make_steady(tmp_path, config, conv2d, name="garbage", backend=ShuffledBackend(), llm=garbage)
    engine2.run()
    rejected = [r for r in store2.records() if r["kind"] == "rejected"]
    assert len(rejected) == garbage.calls and all("unusable reply" in r["reason"] for r in rejected)
    assert [e["gen"] for e in engine2.logbook] == [0, 1, 2]
    assert all(e["rejected"] >= 8 * EPOCH_ATTEMPT_FACTOR for e in list(engine2.logbook)[1:])


def test_slow_llm_children_do_not_starve_the_gpus(tmp_path, make_config, conv2d) -> None:
    """While llm.concurrency LLM children are being written, knob children keep the backend busy."""
    unique = StubLlm(lambda n: f"```cuda\n{SYNTHETIC_KERNEL}int llm_{n};\n```", delay_s=0.05)
    config = steady_config(make_config, pop=12, gens=3, seed=6,
                           **{"llm.model": "stub", "llm.concurrency": 2, "operators.llm_mutate": 0.5,
                              "operators.knob_mutate": 0.5, "operators.knob_crossover": 0.0,
                              "operators.llm_crossover": 0.0, "operators.llm_repair": 0.0})
    engine, backend, store = make_steady(tmp_path, config, conv2d, backend=ShuffledBackend(size=2), llm=unique)
    engine.run()
    seen = [n for _, n in backend.steady_polls]
    # never below in_flight; an LLM child that is ready while the backend is full goes in at once
    assert min(seen) == engine.policy.limit and max(seen) <= engine.policy.limit + 2
    operators = Counter(r["candidate"]["operator"] for r in store.records()
                        if r["kind"] == "evaluated" and r["generation"] > 0)
    assert operators["llm_mutate"] > 0 and operators["knob_mutate"] > 0
    assert len(backend.submitted) == len(set(backend.submitted))


# -- resume ---------------------------------------------------------------------------------------
def test_resume_continues_to_the_right_epoch(tmp_path, make_config, conv2d) -> None:
    part, _, store = make_steady(tmp_path, steady_config(make_config, pop=12, gens=2, seed=7), conv2d)
    part.run()
    before = {r["candidate"]["id"] for r in store.records() if r["kind"] == "evaluated"}
    reports = []
    resumed, backend, _ = make_steady(tmp_path, steady_config(make_config, pop=12, gens=4, seed=7), conv2d,
                                      resume=True, reports=reports)
    assert resumed.generation == 2
    result = resumed.run()
    assert result.generation == 4 and [r.generation for r in reports] == [3, 4]
    assert [e["gen"] for e in resumed.logbook] == [0, 1, 2, 3, 4]
    counts = evaluated_by_epoch(store)
    assert counts[3] == 12 and 12 <= counts[4] <= 12 + resumed.policy.limit
    assert not set(backend.submitted) & before                      # nothing evaluated twice


class Interrupting(ShuffledBackend):
    """Completes the oldest candidates first; Ctrl-C once ``after`` results arrived in epoch ``epoch``."""

    def __init__(self, epoch: int, after: int) -> None:
        super().__init__(size=2, shuffle=False)
        self.epoch, self.after, self.returned = epoch, after, 0

    def poll(self, timeout_s):
        done = super().poll(timeout_s)
        if self.engine is not None and self.engine.generation == self.epoch:
            self.returned += len(done)
            if self.returned > self.after:
                raise KeyboardInterrupt
        return done


def test_interrupted_steady_run_resumes_without_redoing_work(tmp_path, make_config, conv2d) -> None:
    config = steady_config(make_config, pop=12, gens=4, seed=9)
    killed, _, store = make_steady(tmp_path, config, conv2d, backend=Interrupting(epoch=2, after=3))
    with pytest.raises(KeyboardInterrupt):
        killed.run()
    saved = snapshot(store, 2)["policy"]["in_flight"]
    assert len(saved) > 0                        # children in flight at the snapshot are part of it
    done_before = {r["candidate"]["id"] for r in store.records() if r["kind"] == "evaluated"}
    resumed, backend, _ = make_steady(tmp_path, config, conv2d, resume=True)
    assert resumed.generation == 2
    resumed.run()
    assert resumed.generation == 4 and [e["gen"] for e in resumed.logbook] == [0, 1, 2, 3, 4]
    assert not set(backend.submitted) & done_before                  # no GPU time twice
    reused = [r["id"] for r in store.records() if r["kind"] == "reused"]
    assert reused and set(reused) <= done_before                     # recorded results taken again
    records = [r["candidate"]["id"] for r in store.records() if r["kind"] == "evaluated"]
    assert len(records) == len(set(records))                         # one evaluated record per candidate
    assert {f["individual"]["id"] for f in saved} <= set(records)    # every saved in-flight child got its result
    assert (store.snapshots_dir / "gen-0004.json").is_file()


# -- configuration and command line ---------------------------------------------------------------
def test_config_mode_and_in_flight(tmp_path) -> None:
    config = load_config(overrides={"task": "conv2d"})
    assert config.evolution.mode == "generational" and config.evolution.in_flight == 0
    path = tmp_path / "run.yaml"
    path.write_text("task: conv2d\nevolution:\n  mode: steady\n  in_flight: 5\n")
    config = load_config(path)
    assert (config.evolution.mode, config.evolution.in_flight) == ("steady", 5)
    assert config.to_dict()["evolution"] == {"mode": "steady", "in_flight": 5}
    path.write_text("task: conv2d\nevolution: {mode: fast}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == "evolution.mode" and "must be one of generational, steady" in str(info.value)
    with pytest.raises(ConfigError, match="evolution.in_flight: must be 0"):
        load_config(overrides={"task": "conv2d"}, sets=["evolution.in_flight=-1"])
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(overrides={"task": "conv2d"}, sets=["evolution.inflight=2"])


def synthetic(config, task):
    return InlineBackend(SyntheticEvaluator(task.name).evaluate, SYNTHETIC_GPU)


def test_cli_steady_mode_runs_and_resumes(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["--task", "conv2d", "--pop", "8", "--gens", "2", "--mode", "steady", "--out", str(out)],
                backend_factory=synthetic) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.startswith("epoch")]
    assert len(lines) == 3 and lines[-1].startswith("epoch   2/2") and "valid 100%" in lines[-1]
    assert "steady-state with 8 in flight" in captured.err           # InlineBackend: 1 worker -> 4 x 1 + 4
    assert yaml.safe_load((out / "config.yaml").read_text())["evolution"]["mode"] == "steady"
    assert main(["--resume", str(out), "--gens", "3", "--in-flight", "2"], backend_factory=synthetic) == 0
    captured = capsys.readouterr()
    assert "resuming" in captured.err and "after epoch 2" in captured.err and "epoch   3/3" in captured.out
    assert "steady-state with 2 in flight" in captured.err
    assert len(list((out / "snapshots").glob("gen-*.json"))) == 4
    assert main(["--resume", str(out), "--mode", "generational"], backend_factory=synthetic) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot change when resuming" in err and "evolution.mode" in err


@pytest.mark.parametrize("argv, words", [
    (["--mode", "fast"], "argument --mode: invalid choice: 'fast'"),
    (["--set", "evolution.mode=fast"], "evolution.mode: must be one of generational, steady, got 'fast'"),
    (["--mode", "steady", "--in-flight", "-2"], "evolution.in_flight: must be 0 (automatic) or more"),
])
def test_bad_mode_is_one_line_and_exit_code_2(tmp_path, capsys, argv, words) -> None:
    code = main(["--task", "conv2d", "--out", str(tmp_path / "run")] + argv, backend_factory=synthetic)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0] and err[0].startswith("evolve: error:")
    assert not (tmp_path / "run").exists()
