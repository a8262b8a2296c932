"""RunnerSupply.take: a runner that fails to start is the evaluator's failure, retried."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evo_fsr.runner import supply as supply_mod
from evo_fsr.runner.harness import RunnerDied


class FakeRunner:
    """Stands in for RunnerProcess: the first ``fails`` started ones die in start-up."""

    started = 0
    fails = 0
    closed = 0

    def __init__(self, workdir: Path, **_: Any) -> None:
        FakeRunner.started += 1
        self.number = FakeRunner.started
        self.workdir = workdir

    def ready(self) -> None:
        if self.number <= FakeRunner.fails:
            raise RunnerDied("runner could not start: cudaSetDevice failed: cudaErrorMemoryAllocation (2)", None)

    def close(self, wait: bool = True) -> None:
        FakeRunner.closed += 1


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[FakeRunner]:
    FakeRunner.started = FakeRunner.fails = FakeRunner.closed = 0
    monkeypatch.setattr(supply_mod, "RunnerProcess", FakeRunner)
    monkeypatch.setattr(supply_mod, "START_RETRY_PAUSE_S", (0.0, 0.0))
    return FakeRunner


def test_a_runner_that_fails_to_start_is_replaced(fake: type[FakeRunner]) -> None:
    fake.fails = 2
    supply = supply_mod.RunnerSupply("{}", prespawn=False)
    work, runner = supply.take()
    assert runner.number == 3 and fake.started == 3
    assert fake.closed == 2                       # the two that failed were discarded
    assert (work / "job.json").read_text() == "{}"
    supply.close()


def test_every_try_failing_raises_the_evaluators_error(fake: type[FakeRunner]) -> None:
    fake.fails = supply_mod.START_ATTEMPTS
    supply = supply_mod.RunnerSupply("{}", prespawn=False)
    with pytest.raises(supply_mod.RunnerStartFailed, match=f"in {supply_mod.START_ATTEMPTS} tries.*cudaSetDevice"):
        supply.take()
    assert fake.started == supply_mod.START_ATTEMPTS and fake.closed == supply_mod.START_ATTEMPTS


def test_a_failed_runner_ahead_is_replaced_by_a_fresh_one(fake: type[FakeRunner]) -> None:
    fake.fails = 1
    supply = supply_mod.RunnerSupply("{}", prespawn=True)
    supply.keep_ahead(1)                          # runner 1, which fails
    _, runner = supply.take()
    assert runner.number == 2 and fake.closed == 1
    supply.close()


@pytest.mark.skipif(not __import__("shutil").which("gcc"), reason="gcc is needed for host kernels")
def test_the_evaluator_reports_a_failed_start_as_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the fake device: every fresh candidate runner is killed in start-up, the baseline's
    is not; the verdict is crash:evaluator, after
    START_ATTEMPTS tries, and the candidate is not blamed."""
    from evo_fsr.runner.sandbox import kill_group
    from evo_fsr.tasks import get_task
    from evo_fsr.types import Candidate, Status
    from evo_fsr.verdict.evaluate import EvalConfig, Evaluator
    from tests.protocol import kernels

    task = get_task("relu")
    config = EvalConfig(device="fake", shapes=(task.make_shape({"n": 4099}, "bench"),), probe_bytes=1 << 20,
                        library=False, cache_dir=None, validation_seeds=1, profile=False, prespawn=False,
                        baseline_source=kernels.HONEST)
    monkeypatch.setattr(supply_mod, "START_RETRY_PAUSE_S", (0.0, 0.0))
    started: list[int] = []
    real_new = supply_mod.RunnerSupply._new

    def new_failing(self: supply_mod.RunnerSupply) -> Any:
        work, runner = real_new(self)
        started.append(runner.pid)
        kill_group(runner.proc)                   # dies before its start-up reply
        return work, runner

    ev = Evaluator(task, config)
    try:
        honest = ev.evaluate(Candidate("relu", kernels.HONEST))
        assert honest.status is Status.OK, honest.summary      # the setting itself works
        monkeypatch.setattr(supply_mod.RunnerSupply, "_new", new_failing)
        result = ev.evaluate(Candidate("relu", kernels.HONEST))
    finally:
        ev.close()
    assert len(started) == supply_mod.START_ATTEMPTS
    assert result.status is Status.CRASH and result.reason == "crash:evaluator", result.summary
    assert "could not start a runner" in result.summary and "had not run" in result.summary


def test_own_proc_keeps_the_runners_own_pid_and_no_other() -> None:
    """confine.own_proc: /proc in the read list becomes its non-process entries and the runner's
    own /proc/<pid>; every other pid directory is left out, and lists without /proc are kept."""
    import os

    from evo_fsr.runner.confine import own_proc

    read = ["/usr/lib/x.so", "/proc", "/sys"]
    narrowed = own_proc(read, os.getpid())
    assert narrowed[0] == "/usr/lib/x.so" and narrowed[-1] == "/sys" and "/proc" not in narrowed
    assert f"/proc/{os.getpid()}" in narrowed and "/proc/cpuinfo" in narrowed and "/proc/self" in narrowed
    pids = [p for p in narrowed if p.removeprefix("/proc/").isdigit()]
    assert pids == [f"/proc/{os.getpid()}"]
    assert own_proc(["/sys"], 1) == ["/sys"]
