"""Evaluator verdicts on real kernels (issue 2's done-when list).  Run with `pytest -m gpu`."""
from __future__ import annotations

import pytest

from evo_fsr.verdict.evaluate import EvalConfig, Evaluator
from evo_fsr.tasks import discover, get_task
from evo_fsr.types import Candidate, Status

from . import kernels

pytestmark = pytest.mark.gpu

QUICK = EvalConfig(benchmark="quick", max_trials=10, min_trials=5, time_budget_s=0.5, validation_timeout_s=10)


@pytest.fixture(scope="module")
def conv() -> Evaluator:
    return Evaluator("conv2d", QUICK)


def _eval(ev: Evaluator, source: str, label: str = ""):  # type: ignore[no-untyped-def]
    return ev.evaluate(Candidate(task="conv2d", source=source, label=label))


def test_naive_seed_is_correct_and_about_as_fast_as_itself(conv: Evaluator) -> None:
    result = _eval(conv, kernels.NAIVE)
    assert result.status is Status.OK, result.summary
    for t in result.timings:
        assert 0.8 < t.speedup < 1.25, t   # the same kernel against itself
        assert t.trials >= 5


def test_off_by_one_on_odd_shapes_is_wrong(conv: Evaluator) -> None:
    result = _eval(conv, kernels.OFF_BY_ONE)
    assert result.status is Status.WRONG
    assert result.mismatch is not None and "nan" in result.mismatch.reason


def test_kernel_that_writes_nothing_is_wrong(conv: Evaluator) -> None:
    result = _eval(conv, kernels.WRITES_NOTHING)
    assert result.status is Status.WRONG
    assert result.rejection == "wrong:unwritten-or-nonfinite"


def test_illegal_address_is_contained_then_next_candidate_is_fine(conv: Evaluator) -> None:
    result = _eval(conv, kernels.ILLEGAL_ADDRESS)
    assert result.status is Status.CRASH, result.summary
    assert _eval(conv, kernels.NAIVE).status is Status.OK


def test_infinite_loop_times_out_then_next_candidate_is_fine() -> None:
    ev = Evaluator("conv2d", EvalConfig(benchmark="quick", max_trials=5, min_trials=5, time_budget_s=0.2,
                                        validation_timeout_s=3))
    result = ev.evaluate(Candidate(task="conv2d", source=kernels.INFINITE_LOOP))
    assert result.status is Status.TIMEOUT, result.summary
    assert ev.evaluate(Candidate(task="conv2d", source=kernels.NAIVE)).status is Status.OK


def test_work_on_another_stream_is_charged(conv: Evaluator) -> None:
    result = _eval(conv, kernels.SIDE_STREAM)
    # the naive kernel on a side stream: its outputs are right, and its time is charged in full
    assert result.status is Status.OK, result.summary
    assert all(t.speedup < 1.25 for t in result.timings), [(t.shape_label, t.speedup) for t in result.timings]
    assert dict(result.counters).get("charged_shapes", 0) > 0


@pytest.mark.parametrize("task_name", discover())
def test_every_seed_of_every_task_is_correct(task_name: str) -> None:
    task = get_task(task_name)
    ev = Evaluator(task, EvalConfig(profile=False, validation_seeds=2))
    for name, source in task.seeds().items():
        result = ev.evaluate(Candidate(task=task_name, source=source, label=name))
        assert result.status is Status.OK, f"{task_name}/{name}: {result.summary}\n{result.log('run')[-2000:]}"
