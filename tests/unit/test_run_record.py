"""run.json: config and environment at the start of evolve, end time and outcome at the end."""
from __future__ import annotations

import json

import pytest

from evo_fsr import __version__
from evo_fsr.commands.evolve import main
from evo_fsr.search import run_record
from evo_fsr.backend.inline import InlineBackend
from evo_fsr.testing.synthetic import SYNTHETIC_GPU, SyntheticEvaluator


def synthetic(config, task):
    return InlineBackend(SyntheticEvaluator(task.name).evaluate, SYNTHETIC_GPU)


def test_evolve_records_start_environment_and_outcome_per_session(tmp_path) -> None:
    out = tmp_path / "run"
    assert main(["--task", "conv2d", "--pop", "8", "--gens", "1", "--out", str(out)], backend_factory=synthetic) == 0
    assert main(["--resume", str(out), "--gens", "2"], backend_factory=synthetic) == 0
    sessions = json.loads((out / "run.json").read_text())["sessions"]
    assert len(sessions) == 2
    first, second = sessions
    assert first["config"]["pop"] == 8 and first["config"]["gens"] == 1 and second["config"]["gens"] == 2
    env = first["environment"]
    assert env["evo_fsr_version"] == __version__ and "ray" in env["packages"] and "torch" in env["packages"]
    assert "synthetic (no GPU)" in env["evaluator_gpu"]
    for key in ("gpus", "driver_version", "cuda_driver_version", "nvcc", "git_sha", "python"):
        assert key in env
    for s in sessions:
        assert s["outcome"] == "completed" and s["ended_utc"] >= s["started_utc"]
        assert s["best_speedup"] > 1.0 and s["best_id"]


def test_interrupted_and_failed_runs_are_recorded(tmp_path) -> None:
    class Store:
        root = tmp_path

    def ctrl_c():
        raise KeyboardInterrupt

    def broken():
        raise RuntimeError("worker died")

    with pytest.raises(KeyboardInterrupt):
        run_record.recorded(Store(), {"pop": 4}, ctrl_c)
    with pytest.raises(RuntimeError):
        run_record.recorded(Store(), {"pop": 4}, broken)
    sessions = run_record.read(tmp_path)["sessions"]
    assert [s["outcome"] for s in sessions] == ["interrupted", "failed"]
    assert sessions[1]["error"] == "RuntimeError: worker died" and sessions[0]["config"] == {"pop": 4}


def test_unreadable_record_starts_afresh(tmp_path) -> None:
    (tmp_path / "run.json").write_text("{not json")
    assert run_record.read(tmp_path) == {"sessions": []}
    run_record.finish(tmp_path, "completed")
    assert run_record.read(tmp_path)["sessions"][0]["outcome"] == "completed"
