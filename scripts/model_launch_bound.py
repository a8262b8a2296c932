#!/usr/bin/env python3
"""CPU model of the launch-bound forging gap (SECURITY.md, "Forging within one slack").

    python3 scripts/model_launch_bound.py [--seeds 200] [--pools 64,512] [--drifts-us 0,10,30]

A launch-bound shape (topk's quick shape on an H200: an 18.5 us call in windows of ~0.9 ms
overhead with a spread of 70 us per window, a naive baseline of 1.41 ms) is timed through the
evaluator's own ``profile.time_shape`` and ``profile.summarise``, as ``test_adversarial_v3_cpu``'s
``_forger_gain`` does, with two things varied:

    pool      the calibration pool's twin windows (the evaluator's: clean_calls x launch_bound_factor = 64)
    drift     how far the rounds' window overhead sits above the pool's (us), both roles alike

For each it prints a forger's median gain over the honest claim at several claimed fractions of
its time, and for the honest kernel the share of evaluations credited over 1.1x its call and the
95th percentile of its credit (a charged launch-bound shape is credited by the baseline's window
ratio, ~30x its call).  Noise is i.i.d. normal; the GPU's drift is neither, so this ranks designs
and does not predict a GPU's figures.  The thirtieth session's table is in SECURITY.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evo_fsr.verdict import profile  # noqa: E402
from evo_fsr.verdict.evaluate import EvalConfig  # noqa: E402
from evo_fsr.verdict.profile import CallTimes  # noqa: E402

CALL_MS, OVERHEAD_MS, SPREAD_MS, BASE_MS = 0.0185, 0.9, 0.070, 1.41
FRACTIONS = (0.15, 0.25, 0.35, 0.5, 0.75)


def windows(rng: np.random.Generator, n: int, claim_ms: float, call_ms: float, overhead_ms: float) -> list[CallTimes]:
    """``n`` windows around a real ``call_ms`` whose runner claims ``claim_ms``."""
    noise = rng.normal(0.0, SPREAD_MS, n)
    return [CallTimes(claim_ms, claim_ms, claim_ms + 0.01, overhead_ms + call_ms + float(e), 1) for e in noise]


def credited_ms(rng: np.random.Generator, pool: list[CallTimes], claim_ms: float, timed: int,
                drift_ms: float) -> float:
    cfg = EvalConfig()

    def timing_round() -> tuple[list[CallTimes], list[CallTimes]]:
        return (windows(rng, timed, claim_ms, CALL_MS, OVERHEAD_MS + drift_ms),
                windows(rng, timed // cfg.baseline_every, BASE_MS, BASE_MS, OVERHEAD_MS + drift_ms))

    shape = profile.time_shape(timing_round, pool)
    return profile.summarise("s", shape.candidate, shape.baseline, shape.calibration, BASE_MS, 0.0,
                             strict=shape.strict).median_ms


def row(pool_n: int, drift_ms: float, seeds: int) -> tuple[list[float], float, float]:
    cfg = EvalConfig()
    timed = cfg.max_trials * cfg.launch_bound_factor
    gains: dict[float, list[float]] = {f: [] for f in FRACTIONS}
    honest: list[float] = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        pool = windows(rng, pool_n, BASE_MS, BASE_MS, OVERHEAD_MS)
        h = credited_ms(rng, pool, CALL_MS, timed, drift_ms)
        honest.append(h / CALL_MS)
        for f in FRACTIONS:
            gains[f].append(h / credited_ms(rng, pool, f * CALL_MS, timed, drift_ms))
    over = sum(1 for c in honest if c > 1.1) / len(honest)
    return [statistics.median(gains[f]) for f in FRACTIONS], over, float(np.percentile(honest, 95))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--pools", default="64,512", help="calibration pool sizes, comma-separated")
    parser.add_argument("--drifts-us", default="0,10", help="the rounds' overhead above the pool's, us")
    args = parser.parse_args()
    print(f"{'pool':>5} {'drift':>7}  " + " ".join(f"{f:>6.0%}" for f in FRACTIONS)
          + "  honest >1.1x  honest p95")
    for drift_us in (float(d) for d in args.drifts_us.split(",")):
        for pool_n in (int(p) for p in args.pools.split(",")):
            gains, over, p95 = row(pool_n, drift_us / 1e3, args.seeds)
            print(f"{pool_n:>5} {drift_us:>5.0f}us  " + " ".join(f"x{g:5.2f}" for g in gains)
                  + f"  {over:>12.1%}  {p95:>9.2f}x", flush=True)


if __name__ == "__main__":
    main()
