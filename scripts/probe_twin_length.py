"""Run on a GPU host: python3 scripts/probe_twin_length.py [ROUNDS] [--fast] (gpu_checks.sh twin_length).

Does a window's overhead depend on the length of the call inside it?  The calibration pool of a
shape is taken by the twin, a runner of the naive seed in the candidate's place.  On topk's
launch-bound shapes the naive call takes ~1.5 ms and the candidate's ~20 us, and in the thirty-
first session's round-trip probe (probe_round_trip.py, H200) the naive roles' windows less their
events sat -23 to +186 us above the candidate's in the same evaluation, with every host part of
them (the runner's parse and reply, the trusted side's wake-up, loads and copy-out) slower.  An
overhead estimate above the candidate's own lowers the window bound, and a forged claim then
passes unseen.

Evaluators of topk, alternating: one call a window (``chain_windows`` off: the naive seed is the
baseline and the twin); with ``--fast``, the same with the honest radix_select seed as baseline
and twin (a call as long as the candidate's); and the default, chained windows (verdict/chain.py:
CHAIN_CALLS calls a window, each call's inputs drawn from the previous call's outputs).  Each
judges the honest seed and the v3 forgers claiming 50 %, 20 % and 2 % of their time.  Per shape
it prints the candidate's median window less events, the pool's, the interleaved baseline
windows', the calibration's overhead and slack, and the credit term.
Thirty-first session, NVIDIA H200: naive twin x2.01 / x5.00 / x50.8 (gain over honest), fast
twin x2.01 / x5.11 (no 2 % arm); a pool taken on the candidate's own runner before its library
loads (branch wip/own-pool) x2.05 / x4.97 / x51.3.  Thirty-second session, H200: windows paired
with a spin twin's (since removed) x1.98 / x4.97 / x50.5: the twin's window less its claim sat
0-115 us above the candidate's, honest or forging."""
from __future__ import annotations

import statistics
import sys
import time

from evo_fsr.types import Candidate
from evo_fsr.verdict import profile
from evo_fsr.verdict.evaluate import Evaluator
from tests.adversarial import cases_v3 as v3
from tests.adversarial.test_adversarial_v2_gpu import config

_time_shape = profile.time_shape
seen: list[str] = []


def overhead_us(calls) -> float:
    return statistics.median(c.window_ms - c.event_ms for c in calls) * 1e3 if calls else float("nan")


def time_shape(timing_round, pool, fresh_pool=None, **kwargs):
    shape = _time_shape(timing_round, pool, fresh_pool, **kwargs)
    cal = shape.calibration
    seen.append(f"cand {overhead_us(shape.candidate):6.1f} pool {overhead_us(pool):6.1f} "
                f"base {overhead_us(shape.baseline):6.1f} | cal {cal.overhead_ms * 1e3:6.1f} "
                f"slack {cal.slack_ms(len(shape.candidate)) * 1e3:5.1f} | event "
                f"{statistics.median(c.event_ms for c in shape.candidate) * 1e3:6.1f} us, rounds {shape.rounds}"
                f"{' strict' if shape.strict else ''}, {shape.candidate[0].calls} calls a window")
    return shape


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 2
    profile.time_shape = time_shape
    cases = {c.name: c for c in v3.build_cases() if c.name.startswith("forges_")}
    honest = v3.honest_source(next(iter(cases.values())))
    fifth = cases["forges_a_fifth_of_its_time_on_an_unbatched_shape"].source
    runs = [("honest", honest), ("forge50", cases["forges_half_its_time_on_an_unbatched_shape"].source),
            ("forge20", fifth), ("forge2", fifth.replace("#define ADV_FRACTION 0.20f", "#define ADV_FRACTION 0.02f"))]
    settings = dict(library=False, max_trials=30, min_trials=10, time_budget_s=2.0)
    evaluators = {"single": Evaluator("topk", config(**settings, chain_windows=False))}
    if "--fast" in sys.argv:
        evaluators["fast twin"] = Evaluator("topk", config(**settings, baseline_source=honest, chain_windows=False))
    evaluators["chained"] = Evaluator("topk", config(**settings, chain_windows=True))
    speedups: dict[tuple[str, str], list[float]] = {}
    try:
        for rnd in range(rounds):
            for twin, ev in evaluators.items():
                for name, source in runs:
                    seen.clear()
                    start = time.perf_counter()
                    result = ev.evaluate(Candidate(task="topk", source=source, label=name))
                    seconds = time.perf_counter() - start
                    speedups.setdefault((twin, name), []).append(result.geomean_speedup or 0.0)
                    terms = ",".join(t.credited_by for t in result.timings)
                    print(f"round {rnd} {twin:10s} {name:8s} {result.status.value:8s} x{result.geomean_speedup or 0:7.3f} "
                          f"{seconds:5.1f}s credited by {terms}", flush=True)
                    for label, line in zip((t.shape_label for t in result.timings), seen):
                        print(f"    {label:12s} {line}", flush=True)
        print("medians of geomean speedups (gain over honest, same evaluator):")
        for twin in evaluators:
            h = statistics.median(speedups[(twin, "honest")])
            print(f"  {twin}: " + ", ".join(f"{n} x{statistics.median(speedups[(twin, n)]):.3f} "
                                            f"({statistics.median(speedups[(twin, n)]) / h:.2f})" for n, _ in runs))
    finally:
        for ev in evaluators.values():
            ev.close()


if __name__ == "__main__":
    main()
