"""Every seed of every task is correct on every input distribution its task allows (issue 11).

The task's validation shapes are replaced by its validation plan (each planned case pinned on
its shape), so this holds with any evaluator that validates ``task.validation``.
Run with `pytest -m gpu`.
"""
from __future__ import annotations

import dataclasses

import pytest

from evo_fsr.tasks import Shape, Task, discover, get_task
from evo_fsr.types import Candidate, Status
from evo_fsr.verdict.evaluate import EvalConfig, Evaluator

pytestmark = pytest.mark.gpu


def _planned(task: Task) -> Task:
    plan = task.validation_plan(1)
    shapes = tuple(Shape(dims=s.dims, case=c, label=f"{s.label}/{c}") for s, c in plan)
    return dataclasses.replace(task, validation=shapes, validation_cases=tuple(c for _, c in plan),
                               _module=[])


@pytest.mark.parametrize("task_name", discover())
def test_every_seed_passes_every_distribution(task_name: str) -> None:
    task = _planned(get_task(task_name))
    assert {s.case for s in task.validation} == set(task.distributions)
    sets = [name for name, _ in task.benchmarks]
    small = "quick" if "quick" in sets else ("paper" if "paper" in sets else "")
    ev = Evaluator(task, EvalConfig(benchmark=small, profile=False, validation_seeds=2, max_trials=5,
                                    min_trials=5, time_budget_s=0.2))
    try:
        for name, source in task.seeds().items():
            result = ev.evaluate(Candidate(task=task_name, source=source, label=name))
            assert result.status is Status.OK, f"{task_name}/{name}: {result.summary}"
    finally:
        ev.close()
