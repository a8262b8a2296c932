"""The spin twin's paired windows (verdict/spin_twin.py, profile.paired_estimate): the credit of a
launch-bound shape from ``claim + window - paired window``, in the conditions an H200 showed in
the thirty-first session: an 18.5 us call in windows of ~0.8 ms whose overhead drifts, and a
calibration (the naive twin's pool and the interleaved baseline) that sits ~100 us above the
candidate's own windows."""
from __future__ import annotations

import statistics

import numpy as np
import pytest

from evo_fsr.tasks import get_task
from evo_fsr.verdict.profile import CallTimes, Calibration, credited_ms, paired_estimate, summarise
from evo_fsr.verdict.spin_twin import SPIN_SETTER, spin_source

CALL_MS = 0.0185


def _windows(claim_fraction: float, rng: np.random.Generator, n: int = 240, paired: bool = True,
             spread_ms: float = 0.03) -> list[CallTimes]:
    """A candidate whose real call takes CALL_MS and which claims ``claim_fraction`` of it; each
    window's overhead drifts (a slow walk of +-0.1 ms) plus per-window noise, and the spin twin's
    window right after it shares the drift, with noise of its own, around the claim."""
    drift = np.cumsum(rng.normal(0.0, 0.01, n))
    drift -= drift.mean()
    out = []
    for i in range(n):
        claim = claim_fraction * CALL_MS
        window = 0.8 + drift[i] + rng.normal(0.0, spread_ms) + CALL_MS
        twin = 0.8 + drift[i] + rng.normal(0.0, spread_ms) + claim
        out.append(CallTimes(event_ms=claim, event_all_ms=claim + 0.002, host_ms=0.2, window_ms=window,
                             paired_window_ms=twin if paired else 0.0))
    return out


def _biased_calibration(rng: np.random.Generator) -> Calibration:
    """The naive twin's pool as the H200 showed it: ~100 us over the candidate's windows less events."""
    pool = [CallTimes(event_ms=1.4, event_all_ms=1.402, host_ms=1.6, window_ms=1.4 + 0.9 + rng.normal(0.0, 0.05))
            for _ in range(64)]
    return Calibration.of(pool)


def test_a_paired_estimate_is_the_median_of_claim_plus_window_less_its_pair() -> None:
    calls = [CallTimes(0.01, 0.01, 0.1, 1.0, paired_window_ms=0.95), CallTimes(0.02, 0.02, 0.1, 1.1, paired_window_ms=1.0),
             CallTimes(0.01, 0.01, 0.1, 0.9, paired_window_ms=0.92)]
    estimate, slack = paired_estimate(calls)
    assert estimate == pytest.approx(statistics.median([0.06, 0.12, -0.01]))
    assert slack > 0.0
    assert paired_estimate(calls[:2] + [CallTimes(0.01, 0.01, 0.1, 0.9)]) is None      # one window unpaired


def test_forged_claims_are_credited_about_the_real_time_when_paired() -> None:
    """Fails if the paired estimate is not what the window term uses: with the biased calibration
    alone the 2 % forger is credited its claim (x50 on the H200), the 20 % one x5."""
    rng = np.random.default_rng(7)
    calibration = _biased_calibration(rng)
    for fraction in (0.02, 0.2, 0.5):
        unpaired = credited_ms(_windows(fraction, rng, paired=False), calibration)
        windows = _windows(fraction, rng)
        paired, (_, slack) = credited_ms(windows, calibration), paired_estimate(windows)
        assert unpaired < 1.05 * fraction * CALL_MS, (fraction, unpaired)    # the hole, as measured
        # what the pair leaves: a claim within about one standard error of the real time
        assert paired > CALL_MS - 3.0 * slack and slack < 0.3 * CALL_MS, (fraction, paired, slack)
        if fraction <= 0.2:
            assert paired > 0.7 * CALL_MS, (fraction, paired)


def test_an_honest_kernel_keeps_its_claims_when_paired() -> None:
    """Its windows and its pairs differ by the call less the claim, zero: the window term sits a
    standard error below the claim in most evaluations, so the claims are credited."""
    rng = np.random.default_rng(11)
    calibration = _biased_calibration(rng)
    credits = [credited_ms(_windows(1.0, rng), calibration) for _ in range(40)]
    assert sum(abs(c - CALL_MS) < 1e-9 for c in credits) >= 28                     # the claims held
    assert max(credits) < 2.0 * CALL_MS


def test_paired_strict_credit_takes_no_window_ratio() -> None:
    """A paired shape whose claims were set aside is credited the paired estimate, not the
    baseline scaled by the window ratio (for topk ~0.5 ms for an 18.5 us call: the naive seed's
    windows are ~2.2 ms)."""
    rng = np.random.default_rng(3)
    cand = _windows(0.02, rng)
    base = [CallTimes(1.4, 1.402, 1.6, 2.2 + rng.normal(0.0, 0.05)) for _ in range(80)]
    timing = summarise("s", cand, base, _biased_calibration(rng), 1.4, 0.0, strict=True)
    assert 0.6 * CALL_MS < timing.median_ms < 1.5 * CALL_MS, timing
    assert timing.credited_by == "window-strict"


def test_the_spin_source_takes_the_tasks_signature() -> None:
    task = get_task("topk")
    cuda, host = spin_source(task), spin_source(task, fake=True)
    assert task.signature() in cuda and "%%globaltimer" in cuda and SPIN_SETTER in cuda
    stream = next(a.name for a in task.args if a.role == "stream")
    assert f"0, {stream}>>>" in cuda
    assert "int launch(" in host and SPIN_SETTER in host and "void* a0" in host
