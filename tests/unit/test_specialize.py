"""Per-shape specialization (issue 12): per-shape elites kept and restored, elite parents, and
the end-of-run dispatcher assembled, evaluated and written only when it wins (synthetic
evaluator, each shape preferring other knob values; InlineBackend)."""
from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from evo_fsr.backend.inline import InlineBackend
from evo_fsr.config import ConfigError
from evo_fsr.dispatch import variant_count
from evo_fsr.knobs import set_knobs
from evo_fsr.search.breeder import Breeder
from evo_fsr.search.elites import ShapeElites
from evo_fsr.search.loop import Evolution
from evo_fsr.search.population import Individual, Population
from evo_fsr.search.store import RunStore
from evo_fsr.testing.synthetic import SYNTHETIC_GPU, SyntheticEvaluator, synthetic_shape_speedups
from evo_fsr.types import Candidate, EvalResult, ShapeTiming, Status, geometric_mean

QUICK = ("conv2_x_b8", "conv4_x_b8")        # conv2d's quick set: the synthetic prefers other knobs on each


def verdict(speedups: dict[str, float], status: Status = Status.OK) -> EvalResult:
    timings = tuple(ShapeTiming(shape_label=k, median_ms=1.0 / v, baseline_median_ms=1.0, host_median_ms=1.0 / v,
                                baseline_host_median_ms=1.0, trials=10, speed_of_light_ms=0.01)
                    for k, v in speedups.items())
    return EvalResult(candidate_id="x", task="conv2d", status=status, summary="", timings=timings)


def member(conv2d, knobs: dict[str, str]) -> Individual:
    return Individual("conv2d", set_knobs(conv2d.seeds()["implicit_gemm"], knobs))


def run_engine(tmp_path: Path, make_config, conv2d, evaluate=None, name="run", **overrides):
    config = make_config(**{"pop": 8, "gens": 3, "seed": 1, "eval.benchmark": "quick", **overrides})
    store = RunStore.create(tmp_path / name, config.to_dict())
    backend = InlineBackend(evaluate or SyntheticEvaluator(shapes=QUICK).evaluate, SYNTHETIC_GPU)
    engine = Evolution(config, conv2d, backend, store)
    return engine, engine.run(), backend, store


def evaluated(store: RunStore) -> list[dict]:
    return [r for r in store.records() if r["kind"] == "evaluated"]


def per_shape_best(records: list[dict]) -> dict[str, float]:
    """Each shape's best speedup over every correct single kernel, from candidates.jsonl."""
    best: dict[str, float] = {}
    for rec in records:
        result = EvalResult.from_dict(rec["result"])
        if result.status is Status.OK and rec["candidate"]["operator"] != "dispatch":
            for t in result.timings:
                best[t.shape_label] = max(best.get(t.shape_label, 0.0), t.speedup)
    return best


# -- the elites ------------------------------------------------------------------------------
def test_elites_keep_each_shapes_fastest_correct_candidates(conv2d) -> None:
    a, b, c, d = (member(conv2d, {"BLOCK_M": m, "BLOCK_N": n}) for m, n in
                  [("32", "32"), ("64", "32"), ("128", "32"), ("128", "128")])
    offers = [(a, verdict({"s1": 2.0, "s2": 5.0})), (b, verdict({"s1": 3.0, "s2": 1.0})),
              (c, verdict({"s1": 9.0, "s2": 9.0}, Status.WRONG)),        # wrong: never an elite
              (d, verdict({"s1": 9.0, "s2": 9.0}, Status.FLAGGED))]      # timing not trusted
    elites = ShapeElites(size=2)
    joined = [elites.offer(ind, result) for ind, result in offers]
    assert joined == [["s1", "s2"], ["s1", "s2"], [], []]
    assert [(s, i.id) for s, i in elites.on("s1")] == [(3.0, b.id), (2.0, a.id)]
    assert [(s, i.id) for s, i in elites.on("s2")] == [(5.0, a.id), (1.0, b.id)]
    single = ShapeElites(size=1)
    for ind, result in reversed(offers):                  # any arrival order: the same elites
        single.offer(ind, result)
    assert single.best("s1").id == b.id and single.best("s2").id == a.id and len(single) == 2
    assert single.offer(replace_source(a), verdict({"s1": 4.0})) == ["s1"]
    assert single.best("s1").id != b.id and single.best("s2").id == a.id
    restored = ShapeElites(size=2)
    restored.restore(json.loads(json.dumps(elites.to_dict())))
    assert restored.to_dict() == elites.to_dict()
    picks = {restored.pick(random.Random(seed)).id for seed in range(40)}
    assert picks == {a.id, b.id}


def replace_source(ind: Individual) -> Individual:
    return Individual(ind.task, ind.source + "\n// another kernel\nstatic int unused_marker;\n")


def test_an_assembled_dispatch_kernel_is_never_an_elite(conv2d) -> None:
    from evo_fsr.dispatch import Route, assemble
    shapes = conv2d.benchmark("quick")
    a, b = member(conv2d, {"BLOCK_M": "32"}), member(conv2d, {"BLOCK_M": "128"})
    dispatch = Individual("conv2d", assemble(conv2d, [Route(shapes[0], a.source)], b.source))
    elites = ShapeElites()
    assert elites.offer(dispatch, verdict({"s1": 50.0})) == [] and len(elites) == 0


def test_the_synthetic_shapes_prefer_other_knobs_and_a_dispatcher_takes_each_routed_variant(conv2d) -> None:
    from evo_fsr.dispatch import Route, assemble
    top = {"BLOCK_M": "128", "BLOCK_N": "128", "BLOCK_K": "32", "THREAD_M": "8", "THREAD_N": "8", "MIN_BLOCKS": "4"}
    bottom = {"BLOCK_M": "32", "BLOCK_N": "32", "BLOCK_K": "8", "THREAD_M": "2", "THREAD_N": "2", "MIN_BLOCKS": "0"}
    high, low = member(conv2d, top).source, member(conv2d, bottom).source
    assert synthetic_shape_speedups(high, QUICK) == {QUICK[0]: 7.0, QUICK[1]: 1.0}
    assert synthetic_shape_speedups(low, QUICK) == {QUICK[0]: 1.0, QUICK[1]: 7.0}
    shapes = conv2d.benchmark("quick")
    both = assemble(conv2d, [Route(shapes[1], low)], high)
    assert synthetic_shape_speedups(both, QUICK) == {QUICK[0]: 7.0, QUICK[1]: 7.0}
    swapped = assemble(conv2d, [Route(shapes[0], low)], high)                # routes really matter
    assert synthetic_shape_speedups(swapped, QUICK) == {QUICK[0]: 1.0, QUICK[1]: 1.0}
    result = SyntheticEvaluator(shapes=QUICK, dispatch_slowdown=2.0).evaluate(Candidate("conv2d", both))
    assert result.status is Status.OK and result.geomean_speedup == pytest.approx(3.5)


# -- elite parents ---------------------------------------------------------------------------
def test_elite_parents_at_rate_one_and_no_draw_at_rate_zero(conv2d, make_config) -> None:
    island = [member(conv2d, {"BLOCK_M": m}) for m in ("32", "64")]
    for ind in island:
        ind.fitness.values = (2.0, 1.0)
    specialists = [member(conv2d, {"BLOCK_N": n, "THREAD_N": "8"}) for n in ("32", "128")]

    def population(with_elites: bool) -> Population:
        pop = Population([2], hall_of_fame=3)
        pop.islands[0] = list(island)
        if with_elites:
            pop.elites.offer(specialists[0], verdict({"s1": 9.0, "s2": 1.0}))
            pop.elites.offer(specialists[1], verdict({"s1": 1.0, "s2": 9.0}))
        return pop

    def firsts(rate: float, with_elites: bool, count: int = 12) -> list[tuple[str, ...]]:
        config = make_config(pop=4, **{"selection.shape_elite_rate": rate, "operators.knob_crossover": 0.0})
        breeder = Breeder(conv2d, config, rng=random.Random(5))
        return [breeder.breed(0, population(with_elites), set()).resolve().parents for _ in range(count)]

    elite_ids = {s.id for s in specialists}
    always = firsts(1.0, True)
    assert all(parents[0] in elite_ids for parents in always)
    assert {parents[0] for parents in always} == elite_ids                  # both shapes' elites
    assert not any(parents[0] in elite_ids for parents in firsts(0.0, True))
    assert firsts(0.0, True) == firsts(0.0, False) == firsts(1.0, False)    # no elites or rate 0: as before
    some = sum(parents[0] in elite_ids for parents in firsts(0.25, True, count=80))
    assert 8 <= some <= 32                                                  # about one in four


def test_the_new_selection_keys_are_checked(make_config) -> None:
    with pytest.raises(ConfigError, match="selection.shape_elite_rate"):
        make_config(**{"selection.shape_elite_rate": 1.5})
    with pytest.raises(ConfigError, match="selection.shape_elites"):
        make_config(**{"selection.shape_elites": 0})


# -- a run -----------------------------------------------------------------------------------
def test_a_run_keeps_each_shapes_best_and_resume_restores_them(tmp_path, make_config, conv2d) -> None:
    engine, _, _, store = run_engine(tmp_path, make_config, conv2d)
    best = per_shape_best(evaluated(store))
    assert set(best) == set(QUICK)
    for label in QUICK:
        speedup, elite = engine.population.elites.on(label)[0]
        assert speedup == best[label] and engine.results[elite.id].status is Status.OK
    snapshot = store.latest_snapshot()
    assert snapshot.format == 2 and snapshot.data["shape_elites"] == engine.population.elites.to_dict()

    def resumed(name: str) -> Evolution:
        backend = InlineBackend(SyntheticEvaluator(shapes=QUICK).evaluate, SYNTHETIC_GPU)
        other = Evolution(engine.config, conv2d, backend, RunStore.open(store.root))
        assert other.restore()
        return other

    assert resumed("v2").population.elites.to_dict() == engine.population.elites.to_dict()
    data = dict(snapshot.data, format=1)                 # written before the elites: rebuilt from records
    del data["shape_elites"]
    snapshot.path.write_text(json.dumps(data))
    assert resumed("v1").population.elites.to_dict() == engine.population.elites.to_dict()


@pytest.mark.parametrize("mode", ["generational", "steady"])
def test_the_dispatcher_is_assembled_evaluated_and_written_when_it_wins(tmp_path, make_config, conv2d,
                                                                        mode) -> None:
    engine, result, backend, store = run_engine(tmp_path, make_config, conv2d, **{"evolution.mode": mode})
    records = evaluated(store)
    dispatch = [r for r in records if r["candidate"]["operator"] == "dispatch"]
    assert len(dispatch) == 1 and backend.submitted[-1] == dispatch[0]["candidate"]["id"]
    verdict_ = EvalResult.from_dict(dispatch[0]["result"])
    best = per_shape_best(records)
    assert verdict_.status is Status.OK
    assert verdict_.geomean_speedup == pytest.approx(geometric_mean([best[label] for label in QUICK]))
    singles = [EvalResult.from_dict(r["result"]).geomean_speedup or 0.0 for r in records if r not in dispatch]
    assert verdict_.geomean_speedup > max(singles)
    parents = dispatch[0]["candidate"]["parents"]
    assert set(dispatch[0]["routes"].values()) <= set(parents) and len(parents) >= 2
    assert all(engine.results[p].status is Status.OK for p in parents)
    text = store.best_path.read_text()
    header, _, body = text.partition("// evo-fsr dispatch kernel")
    assert "per-shape dispatch:" in header and "(general)" in header and "found in" not in header
    assert variant_count(body) == len(parents)
    assert synthetic_shape_speedups(body, QUICK) == pytest.approx(best)
    assert (store.kernels_dir / f"{dispatch[0]['candidate']['id']}.cu").is_file()
    assert result.best is not None and result.best.operator == "dispatch"
    assert result.best_result == verdict_

    again = Evolution(engine.config, conv2d, InlineBackend(SyntheticEvaluator(shapes=QUICK).evaluate, SYNTHETIC_GPU),
                      RunStore.open(store.root))
    assert again.restore()
    store.best_path.unlink()
    finished = again.run()                               # a finished run: nothing evaluated twice
    assert again.backend.submitted == [] and finished.best.operator == "dispatch"
    assert store.best_path.read_text() == text
    assert len([r for r in evaluated(store) if r["candidate"]["operator"] == "dispatch"]) == 1


@pytest.mark.parametrize("how", ["slower", "wrong"])
def test_a_dispatcher_that_loses_or_is_wrong_is_recorded_but_not_written(tmp_path, make_config, conv2d,
                                                                          how) -> None:
    synthetic = SyntheticEvaluator(shapes=QUICK, dispatch_slowdown=10.0 if how == "slower" else 1.0)

    def evaluate(candidate: Candidate) -> EvalResult:
        result = synthetic.evaluate(candidate)
        if how == "wrong" and variant_count(candidate.source):
            return replace(result, status=Status.WRONG, summary="synthetic wrong answer")
        return result

    engine, result, backend, store = run_engine(tmp_path, make_config, conv2d, evaluate=evaluate)
    dispatch = [r for r in evaluated(store) if r["candidate"]["operator"] == "dispatch"]
    assert len(dispatch) == 1 and backend.submitted[-1] == dispatch[0]["candidate"]["id"]
    assert result.best is not None and result.best.operator != "dispatch"
    top = engine.results[result.best.id]
    text = store.best_path.read_text()
    assert variant_count(text) == 0 and result.best.source in text
    assert f"the per-shape dispatch {dispatch[0]['candidate']['id']} was evaluated and not written" in text
    assert ("not above" if how == "slower" else "wrong: synthetic wrong answer") in text
    assert top.geomean_speedup == max(EvalResult.from_dict(r["result"]).geomean_speedup or 0.0
                                      for r in evaluated(store) if r not in dispatch)


def test_one_shape_or_one_winner_everywhere_assembles_nothing(tmp_path, make_config, conv2d) -> None:
    _, result, _, store = run_engine(tmp_path, make_config, conv2d, evaluate=SyntheticEvaluator().evaluate)
    assert not [r for r in evaluated(store) if r["candidate"]["operator"] == "dispatch"]
    assert result.best.operator != "dispatch" and "per-shape dispatch" not in store.best_path.read_text()

    def same_everywhere(candidate: Candidate) -> EvalResult:        # every shape's fastest is the best
        single = SyntheticEvaluator().evaluate(candidate)
        return replace(single, timings=tuple(replace(single.timings[0], shape_label=label) for label in QUICK))
    _, result, _, store = run_engine(tmp_path, make_config, conv2d, evaluate=same_everywhere, name="same")
    assert not [r for r in evaluated(store) if r["candidate"]["operator"] == "dispatch"]
    assert result.best is not None and result.best.operator != "dispatch"


def test_the_users_own_shapes_are_routed_on(tmp_path, make_config, conv2d) -> None:
    from evo_fsr.commands.evolve import parse_shape
    from evo_fsr.search.specialize import run_shapes
    shapes = [parse_shape("N=2,C=8,H=16,W=16,K=8,R=3,S=3,pad=1,stride=1"),
              parse_shape("N=1,C=4,H=9,W=9,K=4,R=1,S=1,pad=0,stride=1,label=mine")]
    labels = ("N=2,C=8,H=16,W=16,K=8,R=3,S=3,pad=1,stride=1", "mine")
    evaluate = SyntheticEvaluator(shapes=labels).evaluate
    engine, result, _, store = run_engine(tmp_path, make_config, conv2d, evaluate=evaluate, **{"eval.shapes": shapes})
    assert tuple(s.label for s in run_shapes(engine)) == labels
    dispatch = [r for r in evaluated(store) if r["candidate"]["operator"] == "dispatch"]
    assert len(dispatch) == 1 and set(dispatch[0]["routes"]) <= set(labels) and dispatch[0]["routes"]
    best = per_shape_best(evaluated(store))
    assert result.best.operator == "dispatch"
    assert synthetic_shape_speedups(result.best.source, labels) == pytest.approx(best)
    assert "N == 1 && C == 4 && H == 9" in result.best.source or "N == 2 && C == 8" in result.best.source
