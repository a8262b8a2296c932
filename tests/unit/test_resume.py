"""Resume after a driver killed mid-round (SIGKILL), stopped by SIGTERM, or pointed at a
snapshot it cannot read: the evolve command in a child process, then ``--resume``."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evo_fsr.backend.inline import InlineBackend
from evo_fsr.commands.evolve import main
from evo_fsr.testing.synthetic import SYNTHETIC_GPU, SyntheticEvaluator

ROOT = Path(__file__).resolve().parents[2]
#: The evolve command with a backend that evaluates one candidate per poll, slowly (argv[1] s):
#: results trickle in, so a signal lands between two records of one round.
CHILD = """
import sys
from evo_fsr.backend.inline import InlineBackend
from evo_fsr.commands.evolve import main
from evo_fsr.testing.synthetic import SYNTHETIC_GPU, SyntheticEvaluator

class OneAtATime(InlineBackend):
    def __init__(self):
        self.evaluator = SyntheticEvaluator(delay_s=float(sys.argv[1]))
        super().__init__(self.evaluator.evaluate, SYNTHETIC_GPU)
        self.waiting = []
    def submit(self, candidate):
        super().submit(candidate)
        self.waiting.append(candidate)
    def poll(self, timeout_s):
        if not self.waiting:
            return []
        candidate = self.waiting.pop(0)
        return [(candidate, self.evaluator.evaluate(candidate))]

sys.exit(main(sys.argv[2:], backend_factory=lambda config, task: OneAtATime()))
"""
#: The same on the Ray pool: a local cluster started by the command, with one declared GPU.
RAY_CHILD = """
import functools, sys
from evo_fsr.backend.ray_pool import GpuPool
from evo_fsr.commands.evolve import main
from evo_fsr.testing.synthetic import SyntheticEvaluator

def pool(config, task):
    return GpuPool(functools.partial(SyntheticEvaluator, delay_s=float(sys.argv[1])), num_gpus=1).start()

sys.exit(main(sys.argv[2:], backend_factory=pool))
"""


def start(script: str, delay_s: float, argv: list[str], **env: str) -> subprocess.Popen:
    inherited = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}    # Ray's default, as a user has
    environment = {**inherited, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **env}
    return subprocess.Popen([sys.executable, "-c", script, str(delay_s), *argv], cwd=ROOT, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def records(out: Path) -> list[dict]:
    path = out / "candidates.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def evaluated_ids(out: Path) -> list[str]:
    return [r["candidate"]["id"] for r in records(out) if r["kind"] == "evaluated"]


def wait_for(child: subprocess.Popen, out: Path, evaluated: int, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while len(evaluated_ids(out)) < evaluated:
        assert child.poll() is None, f"the run ended early: {child.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.05)


class Recording(InlineBackend):
    """Evaluates in this process and keeps the ids it was given (``submitted``)."""

    def __init__(self) -> None:
        super().__init__(SyntheticEvaluator().evaluate, SYNTHETIC_GPU)


@pytest.mark.parametrize("mode", ["generational", "steady"])
def test_sigkill_mid_round_then_resume_evaluates_nothing_twice(tmp_path, capsys, mode) -> None:
    out = tmp_path / "run"
    pop = 8
    child = start(CHILD, 0.1, ["--task", "conv2d", "--pop", str(pop), "--gens", "2", "--mode", mode,
                               "--out", str(out)])
    try:
        wait_for(child, out, pop + 3)                  # round 0 done, round 1 under way
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        child.kill()
        child.communicate()
    before = evaluated_ids(out)
    assert pop + 3 <= len(before) < 2 * pop and not (out / "snapshots" / "gen-0001.json").exists()
    round_one = {r["candidate"]["id"] for r in records(out) if r["kind"] == "evaluated" and r["generation"] == 1}
    backends: list[Recording] = []

    def factory(config, task):
        backends.append(Recording())
        return backends[-1]
    assert main(["--resume", str(out)], backend_factory=factory) == 0
    assert f"resuming {out}" in capsys.readouterr().err
    assert not set(backends[0].submitted) & set(before)         # no recorded candidate evaluated again
    after = evaluated_ids(out)
    assert len(after) == len(set(after)) > len(before)           # one evaluated record per candidate
    reused = [r["id"] for r in records(out) if r["kind"] == "reused"]
    assert round_one and round_one == set(reused)                 # round 1's recorded results, taken again
    assert (out / "snapshots" / "gen-0002.json").is_file()


def test_sigterm_leaves_a_resumable_run_and_the_hint(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    child = start(CHILD, 0.05, ["--task", "conv2d", "--pop", "8", "--gens", "3", "--out", str(out)])
    try:
        wait_for(child, out, 10)
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode == 143
    assert err.strip().splitlines()[-1] == (f"terminated (SIGTERM) after generation 0; continue with: "
                                            f"python scripts/evolve.py --resume {out}")
    assert main(["--resume", str(out)], backend_factory=lambda c, t: Recording()) == 0
    assert len(evaluated_ids(out)) == len(set(evaluated_ids(out)))
    assert (out / "snapshots" / "gen-0003.json").is_file()


def test_sigterm_on_the_ray_pool_is_not_swallowed_and_ray_does_not_warn(tmp_path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "run"
    env = {"RAY_OVERRIDE_RESOURCES": json.dumps({"CPU": 1, "GPU": 1})}
    child = start(RAY_CHILD, 0.05, ["--task", "conv2d", "--pop", "8", "--gens", "20", "--out", str(out)], **env)
    try:
        wait_for(child, out, 10, limit_s=90)
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 143, err[-2000:]
    assert f"continue with: python scripts/evolve.py --resume {out}" in err
    assert "Token authentication" not in err


def test_a_snapshot_that_cannot_be_resumed_is_one_line_and_exit_code_2(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["--task", "conv2d", "--pop", "4", "--gens", "1", "--out", str(out)],
                backend_factory=lambda c, t: Recording()) == 0
    capsys.readouterr()
    snapshot = out / "snapshots" / "gen-0001.json"
    data = json.loads(snapshot.read_text())
    for broken, words in [({**data, "format": 7}, "snapshot format 7 is not supported"),
                          ({**data, "population": {"islands": [[{"no": "source"}]], "failures": [[]],
                                                   "hall_of_fame": []}}, "does not fit this run"),
                          ({**data, "mode": "steady"}, "written by a steady run")]:
        snapshot.write_text(json.dumps(broken))
        assert main(["--resume", str(out)], backend_factory=lambda c, t: Recording()) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"evolve: error: {snapshot}: ") and words in err[0]
        assert "Traceback" not in err[0] and err[0].endswith("cannot resume from it")
