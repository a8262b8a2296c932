"""The trusted side of evaluate.py end to end on the CPU: a fake runner stands in for the GPU
process and answers the protocol from the task's reference (or with planted defects)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import evo_fsr.evaluate as evaluate
from evo_fsr.compile import CompileResult
from evo_fsr.evaluate import EvalConfig, Evaluator
from evo_fsr.tasks import get_task
from evo_fsr.types import Candidate, GpuInfo, Status

TASK = get_task("conv2d")
GPU = GpuInfo(name="Fake GPU", compute_capability="9.0", sm_count=132, shared_memory_per_block_bytes=49152,
              shared_memory_per_block_optin_bytes=232448, registers_per_block=65536, l2_cache_bytes=50 * 2**20,
              memory_bandwidth_gbps=3000.0, fp32_peak_tflops=60.0)
BINARY = CompileResult(ok=True, key="k", log="", seconds=0.0, arch="sm_90", binary=b"\x7fELF")


class FakeRunner:
    """Answers `run` and `time` like runner.py, computing outputs with the float64 reference."""

    defect = ""                 # "", "nan-output", "modify-input", "skip-timed", "escape"

    def __init__(self, workdir: Path, *args: Any, **kwargs: Any) -> None:
        self.workdir = workdir

    def _compute(self, folder: Path, shapes: dict[str, list[int]]) -> dict[str, np.ndarray]:
        inputs = {a.name: np.load(folder / f"{a.name}.npy") for a in TASK.args if a.role in ("input", "inout")}
        ref = TASK.reference(inputs, self._scalars)
        return {k: np.asarray(v, dtype=np.float32).reshape(shapes[k]) for k, v in ref.items()}

    def send(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        folder = self.workdir / msg["dir"]
        self._scalars = msg["scalars"]
        if msg["op"] == "run":
            outputs = self._compute(folder, msg["shapes"])
            for name, out in outputs.items():
                if self.defect == "nan-output":
                    out.reshape(-1)[-1] = np.nan
                np.save(folder / f"out_{name}.npy", out)
            for a in TASK.args:
                if a.role == "input":
                    x = np.load(folder / f"{a.name}.npy")
                    if self.defect == "modify-input":
                        x.reshape(-1)[0] += 1
                    np.save(folder / f"after_{a.name}.npy", x)
            return {"op": "run", "rc": 0, "last_error": 0}
        assert msg["op"] == "time"
        for index, sub in enumerate((folder, self.workdir / msg["alt_dir"])):
            for name, out in self._compute(sub, msg["shapes"]).items():
                if self.defect == "skip-timed":
                    out[:] = np.nan
                np.save(folder / f"snap{index}_{name}.npy", out)
        trials = msg["min_trials"]
        host_extra = 5.0 if self.defect == "escape" else 0.01
        return {"op": "time", "snapshots": {"0": trials - 2, "1": trials - 1},
                "event_ms": {"candidate": [0.5] * trials, "baseline": [2.0] * trials},
                "host_ms": {"candidate": [0.5 + host_extra] * trials, "baseline": [2.01] * trials}}

    def close(self) -> None:
        pass

    def log_text(self) -> str:
        return ""


@pytest.fixture
def evaluator(monkeypatch: pytest.MonkeyPatch) -> Evaluator:
    monkeypatch.setattr(evaluate, "RunnerProcess", FakeRunner)
    monkeypatch.setattr(FakeRunner, "defect", "")
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
    ("escape", Status.FLAGGED, "flagged:escaped-stream"),
])
def test_planted_defects_get_their_verdicts(evaluator: Evaluator, monkeypatch: pytest.MonkeyPatch,
                                            defect: str, status: Status, rejection: str) -> None:
    monkeypatch.setattr(FakeRunner, "defect", defect)
    result = _evaluate(evaluator)
    assert result.status is status, result.summary
    assert result.rejection == rejection
