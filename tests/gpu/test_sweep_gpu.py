"""Every seed of every task through the benchmark sweep on a GPU (``pytest -m gpu``).

The evaluator suite validates seeds with ``profile=False``, which skips the sweep: every benchmark
shape run once with every other distribution the task allows. softmax's naive seed (a float running
sum over 262,144 columns) failed every large_magnitude and ties draw at long_rows while passing
validation; an honest seed rejected on a benchmark shape is a false reject, and the naive seed is
also every task's timing baseline.

It holds every benchmark shape's buffers with an input set per distribution: run it alone
(`scripts/gpu_checks.sh sweep`); next to the other groups it ran the GPU out of memory. All 21
tasks take about 9 minutes on an H100, so ``SWEEP_SHARD=i/n`` keeps every n-th task from the i-th
(1-based; `gpu_checks.sh sweep 1` and `sweep 2` are one device call each)."""
from __future__ import annotations

import pytest

from evo_fsr.tasks import discover, get_task
from evo_fsr.types import Candidate, Status
from evo_fsr.verdict.evaluate import EvalConfig, Evaluator
from tests.gpu.shard import shard

pytestmark = pytest.mark.gpu


# Timing kept to the minimum: what this test is after is the sweep, which runs every benchmark
# shape once with every other distribution the task allows, before any timing.
SWEEP = EvalConfig(max_trials=2, min_trials=1, min_windows=2, time_budget_s=0.05, clean_calls=2,
                   library=False, validation_seeds=1)


@pytest.mark.parametrize("task_name", shard(discover(), "SWEEP_SHARD"))
def test_every_seed_of_every_task_passes_the_benchmark_sweep(task_name: str) -> None:
    """OK, with every (benchmark shape, other distribution) pair run once."""
    task = get_task(task_name)
    shapes = task.benchmark(None)
    ev = Evaluator(task, SWEEP)
    try:
        for name, source in task.seeds().items():
            result = ev.evaluate(Candidate(task=task_name, source=source, label=name))
            assert result.status is Status.OK, f"{task_name}/{name}: {result.summary}"
            seconds = dict(result.stage_seconds)
            if "window_cores_median" in seconds:   # the room an honest runner leaves (runner/host_usage.py)
                print(f"window cores {task_name}/{name}: median {seconds['window_cores_median']:.2f}, most "
                      f"{seconds['window_cores_max']:.2f}, flagged under {seconds['window_cores_flagged_under']:.2f}")
            calls = dict(result.counters).get("sweep_calls", 0)
            # every benchmark shape with every distribution but its own timed one
            assert calls >= len(shapes) * (len(task.distributions) - 1), (task_name, name, calls)
    finally:
        ev.close()   # the benchmark shapes' buffers (a sweep input set per distribution) go back
