"""The trusted side of evaluate.py end to end on the CPU: a fake runner stands in for the GPU
process and answers the protocol from the task's reference (or with planted defects)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import evo_fsr.verdict.evaluate as evaluate
import evo_fsr.runner.supply as runner_supply
from evo_fsr.verdict.compile import CompileResult
from evo_fsr.verdict.evaluate import EvalConfig, Evaluator
from evo_fsr.tasks import get_task
from evo_fsr.types import Candidate, GpuInfo, Status

TASK = get_task("conv2d")
GPU = GpuInfo(name="Fake GPU", compute_capability="9.0", sm_count=132, shared_memory_per_block_bytes=49152,
              shared_memory_per_block_optin_bytes=232448, registers_per_block=65536, l2_cache_bytes=50 * 2**20,
              memory_bandwidth_gbps=3000.0, fp32_peak_tflops=60.0)
BINARY = CompileResult(ok=True, key="k", log="", seconds=0.0, arch="sm_90", binary=b"\x7fELF")


class _FakeProc:
    @staticmethod
    def poll() -> None:
        return None


class FakeRunner:
    """Answers `run` and `time` like runner.py, computing outputs with the float64 reference."""

    defect = ""   # "", nan-output, modify-input, modify-input-timed, skip-timed, skip-all-timed, ignores-rotation, escape
    started: list["FakeRunner"] = []
    timed_by: list["FakeRunner"] = []                    # the runner of each time command, in order

    def __init__(self, workdir: Path, *args: Any, **kwargs: Any) -> None:
        self.workdir = workdir
        self.proc = _FakeProc()
        self.closed = False
        self.reaped = False
        self.readied = False
        self.startup_ms = {"imports": 40.0, "cuda": 250.0}
        self.started_after_timing_of = FakeRunner.timed_by[-1] if FakeRunner.timed_by else None
        FakeRunner.started.append(self)

    fail_start_of: int | None = None     # index in `started` of a runner whose start-up fails

    def ready(self) -> None:
        assert (self.workdir / "job.json").is_file()
        self.readied = True
        if FakeRunner.fail_start_of is not None and FakeRunner.started.index(self) == FakeRunner.fail_start_of:
            raise evaluate.RunnerDied("runner could not start: out of memory", 3)

    def _compute(self, inputs: dict[str, np.ndarray], shapes: dict[str, list[int]]) -> dict[str, np.ndarray]:
        ref = TASK.reference(inputs, self._scalars)
        return {k: np.asarray(v, dtype=np.float32).reshape(shapes[k]) for k, v in ref.items()}

    def send(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        assert not self.closed
        # a candidate's code runs only once the runners killed before it are gone (GPU memory freed)
        assert all(r.reaped for r in FakeRunner.started if r.closed), "a killed runner was not reaped"
        if msg["op"] == "time":          # no other runner of ours is starting while this one is timed
            assert all(r.readied for r in FakeRunner.started if r is not self and not r.closed)
            FakeRunner.timed_by.append(self)
        folder = self.workdir / msg["dir"]
        self._scalars = msg["scalars"]
        inputs = {a.name: np.load(folder / f"{a.name}.npy") for a in TASK.args if a.role in ("input", "inout")}
        if msg["op"] == "run":
            for name, out in self._compute(inputs, msg["shapes"]).items():
                if self.defect == "nan-output":
                    out.reshape(-1)[-1] = np.nan
                np.save(folder / f"out_{name}.npy", out)
            for name, x in inputs.items():
                if self.defect == "modify-input":
                    x.reshape(-1)[0] += 1
                np.save(folder / f"after_{name}.npy", x)
            return {"op": "run", "rc": 0, "last_error": 0}
        assert msg["op"] == "time"
        checks = msg["check_trials"]
        for order, trial in enumerate(checks):
            offsets = msg["rotations"][trial]
            rotated = {name: np.roll(inputs[name].reshape(-1), -off).reshape(inputs[name].shape)
                       for name, off in zip(inputs, offsets)}
            computed_from = inputs if self.defect == "ignores-rotation" else rotated   # a content cache
            for name, out in self._compute(computed_from, msg["shapes"]).items():
                if self.defect == "skip-all-timed" or (self.defect == "skip-timed" and order == 1):
                    out[:] = np.nan
                np.save(folder / f"snap{trial}_{name}.npy", out)
            if trial == msg["inputs_after_trial"]:
                for name, x in rotated.items():
                    if self.defect == "modify-input-timed":
                        x.reshape(-1)[3] = 42.0
                    np.save(folder / f"after{trial}_{name}.npy", x)
        trials = msg["min_trials"]
        host_extra = 5.0 if self.defect == "escape" else 0.01
        return {"op": "time", "snapshots": checks, "trials": trials,
                "event_ms": {"candidate": [0.5] * trials, "baseline": [2.0] * trials},
                "host_ms": {"candidate": [0.5 + host_extra] * trials, "baseline": [2.01] * trials},
                "phase_ms": {"upload": 1.0, "trials": 10.0}}

    def close(self, wait: bool = True) -> None:
        self.closed = True
        self.reaped = self.reaped or wait

    def reap(self) -> None:
        assert self.closed
        self.reaped = True


    def log_text(self, join_timeout_s: float = 1.0) -> str:
        return ""


@pytest.fixture
def evaluator(monkeypatch: pytest.MonkeyPatch) -> Evaluator:
    monkeypatch.setattr(runner_supply, "RunnerProcess", FakeRunner)
    monkeypatch.setattr(FakeRunner, "defect", "")
    monkeypatch.setattr(FakeRunner, "started", [])
    monkeypatch.setattr(FakeRunner, "timed_by", [])
    monkeypatch.setattr(FakeRunner, "fail_start_of", None)
    shape = TASK.parse_shape("N=2,C=4,H=9,W=7,K=5,R=3,S=3,pad=1,stride=1")
    ev = Evaluator(TASK, EvalConfig(shapes=(shape,), reference_device="cpu", min_trials=4, max_trials=4,
                                    validation_seed=7))
    ev._gpu, ev._baseline = GPU, BINARY
    return ev


def _evaluate(ev: Evaluator) -> Any:
    return ev.evaluate(Candidate(task="conv2d", source="// fake"), compiled=BINARY)


def test_correct_outputs_and_credible_times_are_ok(evaluator: Evaluator) -> None:
    result = _evaluate(evaluator)
    assert result.status is Status.OK, result.summary
    assert result.geomean_speedup == pytest.approx(4.0)
    assert dict(result.counters)["validation_launches"] == 2 * len(TASK.validation)
    assert "4x geomean" in result.summary


@pytest.mark.parametrize("defect, status, rejection", [
    ("nan-output", Status.WRONG, "wrong:unwritten-or-nonfinite"),
    ("modify-input", Status.WRONG, "wrong:input-modified"),
    ("skip-timed", Status.WRONG, "wrong:timed-calls"),
    ("skip-all-timed", Status.WRONG, "wrong:benchmark-shape"),
    ("ignores-rotation", Status.WRONG, "wrong:benchmark-shape"),
    ("modify-input-timed", Status.WRONG, "wrong:input-modified"),
    ("escape", Status.FLAGGED, "flagged:escaped-stream"),
])
def test_planted_defects_get_their_verdicts(evaluator: Evaluator, monkeypatch: pytest.MonkeyPatch,
                                            defect: str, status: Status, rejection: str) -> None:
    monkeypatch.setattr(FakeRunner, "defect", defect)
    result = _evaluate(evaluator)
    assert result.status is status, result.summary
    assert result.rejection == rejection


def test_timing_plan_gives_unseen_inputs_and_secret_checks(evaluator: Evaluator) -> None:
    shape = evaluator.bench_shapes[0]
    plan = evaluator.timing_plan(shape)
    assert plan is evaluator.timing_plan(shape)                     # fixed per evaluator
    assert len(plan.rotations) == evaluator.config.max_trials
    assert len(set(plan.rotations)) == len(plan.rotations)          # every timed call sees new inputs
    assert all(off > 0 for rotation in plan.rotations for off in rotation)
    assert len(plan.check_trials) == 2 and all(0 <= t < evaluator.config.min_trials for t in plan.check_trials)
    assert plan.inputs_after_trial in plan.check_trials
    other = Evaluator(TASK, evaluator.config)
    assert other.timing_plan(shape).rotations != plan.rotations      # secret: differs per evaluator
    inputs, _ = evaluator.checked_case(shape, plan.check_trials[0])
    base = evaluator.benchmark_inputs(shape)
    offset = plan.rotations[plan.check_trials[0]][0]
    assert np.array_equal(inputs["x"].reshape(-1), np.roll(base["x"].reshape(-1), -offset))


def test_next_runners_are_started_ahead_and_closed(evaluator: Evaluator) -> None:
    first = _evaluate(evaluator)
    assert first.status is Status.OK
    # the candidate's runner; the next one (none was ahead: started at once, awaited before the
    # timing); the one after it, started once the first candidate's timed calls were done
    assert len(FakeRunner.started) == 3
    runner0, runner1, runner2 = FakeRunner.started
    assert runner0.closed and not runner1.closed and not runner2.closed
    assert runner1.readied and runner1.started_after_timing_of is None
    assert runner2.started_after_timing_of is runner0
    _evaluate(evaluator)
    assert len(FakeRunner.started) == 4 and runner1.closed                 # the spare was used
    assert FakeRunner.timed_by == [runner0, runner1]
    assert FakeRunner.started[3].started_after_timing_of is runner1
    evaluator.close()
    assert all(r.closed for r in FakeRunner.started)
    stages = dict(first.stage_seconds)
    assert {"reap", "validate", "determinism", "timing", "timed_check", "timed_gpu", "quiet_reap",
            "quiet_ahead"} <= set(stages)
    assert stages["runner_start_cuda"] == pytest.approx(0.25)
    assert stages["timed_gpu"] == pytest.approx(4 * 2.5 / 1e3)
    assert first.overhead_seconds == pytest.approx(first.evaluate_seconds - stages["timed_gpu"])


def test_a_runner_started_ahead_that_fails_is_replaced(evaluator: Evaluator, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _evaluate(evaluator).status is Status.OK
    monkeypatch.setattr(FakeRunner, "fail_start_of", 1)          # the spare's start-up fails
    result = _evaluate(evaluator)
    assert result.status is Status.OK, result.summary           # not blamed on this candidate
    # the failed spare was discarded and the next runner ahead (started before) took its place
    assert FakeRunner.started[1].closed and FakeRunner.timed_by[-1] is FakeRunner.started[2]


def test_a_runner_ahead_starts_after_an_evaluation_without_timing(evaluator: Evaluator,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeRunner, "defect", "nan-output")
    assert _evaluate(evaluator).status is Status.WRONG
    assert FakeRunner.timed_by == []
    ahead = [r for r in FakeRunner.started if not r.closed]
    assert len(ahead) == 2                      # the next candidate's and the one after it
    monkeypatch.setattr(FakeRunner, "defect", "")
    assert _evaluate(evaluator).status is Status.OK
    assert FakeRunner.timed_by == [ahead[0]]
    assert len([r for r in FakeRunner.started if not r.closed]) == 2
