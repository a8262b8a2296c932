"""The evolve command with an injected synthetic backend (no Ray, no GPU)."""
from __future__ import annotations

import json

import pytest
import yaml

from evo_fsr.commands.evolve import main, parse_shape
from evo_fsr.config import ConfigError
from evo_fsr.backend.inline import InlineBackend
from evo_fsr.testing.synthetic import SYNTHETIC_GPU, SyntheticEvaluator


def synthetic(config, task):
    return InlineBackend(SyntheticEvaluator(task.name).evaluate, SYNTHETIC_GPU)


def test_evolve_runs_and_reports(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["--task", "conv2d", "--pop", "8", "--gens", "3", "--out", str(out)], backend_factory=synthetic) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.startswith("gen")]
    assert len(lines) == 4 and "best" in lines[-1] and "valid 100%" in lines[-1] and "/min" in lines[-1]
    assert "knob operators only" in captured.err
    assert "rank" in captured.out and f"-> {out / 'best.cu'}" in captured.out
    assert (out / "best.cu").read_text().startswith("// evo-fsr best kernel for task conv2d")
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["pop"] == 8 and saved["gens"] == 3 and saved["task"] == "conv2d"
    assert len(list((out / "snapshots").glob("gen-*.json"))) == 4


def test_resume_continues_and_refuses_to_change_the_population(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["--task", "conv2d", "--pop", "8", "--gens", "1", "--out", str(out)], backend_factory=synthetic) == 0
    assert main(["--resume", str(out), "--gens", "3"], backend_factory=synthetic) == 0
    captured = capsys.readouterr()
    assert "resuming" in captured.err and "gen   3/3" in captured.out
    assert len(list((out / "snapshots").glob("gen-*.json"))) == 4
    assert main(["--resume", str(out), "--pop", "16"], backend_factory=synthetic) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot change when resuming" in err and "pop" in err


def test_llm_endpoint_from_flags(tmp_path, capsys, fake_openai) -> None:
    out = tmp_path / "run"
    code = main(["--task", "conv2d", "--pop", "8", "--gens", "1", "--out", str(out), "--llm-model", "m",
                 "--llm-base-url", fake_openai.base_url, "--set", "llm.concurrency=2"], backend_factory=synthetic)
    assert code == 0
    calls = [json.loads(line) for line in (out / "llm" / "calls.jsonl").read_text().splitlines()]
    assert calls and len(calls) == len(fake_openai.requests) and all(c["origin"] == "model" for c in calls)
    assert "llm 0 calls" not in capsys.readouterr().out
    # replaying the run needs no endpoint and labels every reply as replayed
    replayed = tmp_path / "replayed"
    fake_openai.close()
    code = main(["--task", "conv2d", "--pop", "8", "--gens", "1", "--out", str(replayed),
                 "--set", f"llm.replay_from={out}"], backend_factory=synthetic)
    assert code == 0
    again = [json.loads(line) for line in (replayed / "llm" / "calls.jsonl").read_text().splitlines()]
    assert again and all(c["origin"] == "replay" and c["model"] == "replay:m" for c in again)
    first = [json.loads(line)["candidate"]["id"] for line in (out / "candidates.jsonl").read_text().splitlines()
             if '"evaluated"' in line]
    second = [json.loads(line)["candidate"]["id"] for line in (replayed / "candidates.jsonl").read_text().splitlines()
              if '"evaluated"' in line]
    assert sorted(first) == sorted(second)


@pytest.mark.parametrize("argv, words", [
    (["--task", "conv2d", "--set", "pop=lots"], "pop: must be an integer"),
    (["--task", "conv2d", "--shapes", "nope"], "no benchmark set 'nope'"),
    (["--task", "conv2d", "--shape", "N=1,C=x"], "is not a number"),
    (["--task", "conv2d", "--shape", "N=1,C=1"], "eval.shapes"),
    (["--task", "no_such_task"], "no task named"),
    (["--pop", "8"], "--task is required"),
    (["--task", "conv2d", "--bogus"], "unrecognized arguments"),
    (["--task", "conv2d", "--config", "/nonexistent.yaml"], "cannot read"),
])
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys, argv, words) -> None:
    code = main(argv + ["--out", str(tmp_path / "run")], backend_factory=synthetic)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0] and err[0].startswith("evolve: error:")


def test_user_shapes_are_checked_against_the_task(tmp_path) -> None:
    assert parse_shape("N=8,C=64,label=mine") == {"N": 8, "C": 64, "label": "mine"}
    with pytest.raises(ConfigError):
        parse_shape("N")
    ok = "N=1,C=3,H=8,W=8,K=4,R=3,S=3,pad=1,stride=1"
    assert main(["--task", "conv2d", "--pop", "4", "--gens", "0", "--shape", ok, "--out", str(tmp_path / "r")],
                backend_factory=synthetic) == 0


def test_ctrl_c_leaves_a_resumable_run(tmp_path, capsys) -> None:
    class CtrlC(InlineBackend):
        def poll(self, timeout_s):
            if len(self.submitted) > 10:
                raise KeyboardInterrupt
            return super().poll(timeout_s)

    out = tmp_path / "run"
    code = main(["--task", "conv2d", "--pop", "8", "--gens", "3", "--out", str(out)],
                backend_factory=lambda c, t: CtrlC(SyntheticEvaluator().evaluate, SYNTHETIC_GPU))
    assert code == 130 and f"--resume {out}" in capsys.readouterr().err
    assert main(["--resume", str(out)], backend_factory=synthetic) == 0
    assert (out / "snapshots" / "gen-0003.json").is_file()


def test_eval_settings_take_verdicts_defaults_and_reach_the_evaluator(monkeypatch) -> None:
    """One source of truth: the run's eval keys default to verdict's EvalConfig, and what a run
    sets reaches both the evaluator's EvalConfig and the compile tasks."""
    pytest.importorskip("ray")
    import dataclasses

    from evo_fsr.backend import ray_pool
    from evo_fsr.commands.evolve import gpu_backend
    from evo_fsr.config import EvalSettings, load_config
    from evo_fsr.tasks import get_task
    from evo_fsr.verdict.evaluate import EvalConfig

    shared = [f.name for f in dataclasses.fields(EvalSettings) if f.name not in ("benchmark", "shapes")]
    assert shared and all(getattr(EvalSettings(), name) == getattr(EvalConfig(), name) for name in shared)

    class FakePool:
        def __init__(self, factory, **options) -> None:
            self.factory, self.options = factory, options

        def start(self):
            return self
    monkeypatch.setattr(ray_pool, "connect", lambda address=None: False)
    monkeypatch.setattr(ray_pool, "GpuPool", FakePool)
    config = load_config(overrides={"task": "conv2d"},
                         sets=["eval.compile_timeout_s=77", "eval.max_trials=9", "eval.validation_seeds=3"])
    pool = gpu_backend(config, get_task("conv2d"))
    eval_config = pool.factory.eval_config
    assert (eval_config.compile_timeout_s, eval_config.max_trials, eval_config.validation_seeds) == (77.0, 9, 3)
    assert pool.options["compile_fn"].timeout_s == 77.0
