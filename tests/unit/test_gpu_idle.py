"""The idle gate before every timed window (evo_fsr/verdict/gpu_idle.py), on a scripted probe and
clock: each test fails if the gate opens on a busy GPU, waits on an idle one, or never gives up."""
from __future__ import annotations

import pytest

from evo_fsr.verdict import gpu_idle
from evo_fsr.verdict.gpu_idle import BUSY_PROBE_MS, PROBES, GpuBusy, IdleGate, wait_until_idle


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def scripted(values: list[float], then: float, clock: Clock, per_probe_s: float = 0.0):
    it = iter(values)

    def probe() -> float:
        clock.now += per_probe_s
        return next(it, then)
    return probe


def test_an_idle_gpu_opens_at_once_after_probes_in_a_row():
    clock = Clock()
    calls = []
    assert wait_until_idle(lambda: calls.append(1) or 0.02, 1.0, clock=clock, sleep=clock.sleep) == 0
    assert len(calls) == PROBES


def test_one_slow_probe_among_fast_ones_is_another_round():
    clock = Clock()
    probe = scripted([0.02, BUSY_PROBE_MS * 2.1], 0.02, clock)
    assert wait_until_idle(probe, 1.0, clock=clock, sleep=clock.sleep) == 1


def test_work_that_ends_within_the_wait_is_waited_out():
    clock = Clock()
    probe = scripted([2.1] * 40, 0.02, clock, per_probe_s=0.0021)     # ~0.1 s of another context's slices
    assert wait_until_idle(probe, 1.0, clock=clock, sleep=clock.sleep) == 40
    assert clock.now < 1.0


def test_work_that_outlasts_the_wait_raises():
    clock = Clock()
    probe = scripted([], 2.1, clock, per_probe_s=0.0021)
    with pytest.raises(GpuBusy) as caught:
        wait_until_idle(probe, 0.5, clock=clock, sleep=clock.sleep)
    assert 0.5 <= caught.value.waited_s < 0.52 and caught.value.probe_ms == 2.1
    assert "stayed busy" in str(caught.value)


def test_the_gate_counts_its_waits_and_a_shared_gpu_skips_it():
    probes = iter([2.1, 0.02, 0.02, 0.02])
    gate = IdleGate(lambda: next(probes, 0.02))
    gate()
    gate()
    assert gate.waits == 1 and gate.waited_s >= 0.0
    never = IdleGate(lambda: pytest.fail("a shared GPU is not probed"), shared=True)
    never()
    assert never.waits == 0


def test_idle_within_answers_without_raising():
    assert IdleGate(lambda: 0.02).idle_within(0.01)
    assert not IdleGate(lambda: 2.1).idle_within(0.01)


def test_the_shared_switch_reads_the_environment(monkeypatch):
    monkeypatch.setenv(gpu_idle.SHARED_ENV, "1")
    assert gpu_idle.shared_from_env()
    monkeypatch.setenv(gpu_idle.SHARED_ENV, "0")
    assert not gpu_idle.shared_from_env()
