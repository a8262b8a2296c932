"""Run on a GPU host: python3 scripts/probe_slack.py [ROUNDS] (gpu_checks.sh launch_bound).

The slack forger on topk's launch-bound shapes: honest radix_select against forgers claiming 75 % and
50 % of their time (v3's two forgers), judged by an evaluator at launch_bound_factor 1 (the old counts) and at the default,
alternating; per shape: credited ms, trials, the pool's overhead and spread; and seconds per evaluation.
Twenty-sixth session, NVIDIA H200 (then with a 90 % forger): pool spread 81 us (factor 1) and 63 us
(factor 8), slack 40.5 us and 11.2 us; honest x76.2-77.1, 75 % x102.2-104.3, 90 % x84.2-86.8."""
import dataclasses, statistics, sys, time
from tests.adversarial import cases_v3 as v3
from tests.adversarial.test_adversarial_v2_gpu import config
from evo_fsr.types import Candidate
from evo_fsr.verdict.evaluate import Evaluator
from evo_fsr.verdict.profile import Calibration

cases = {c.name: c for c in v3.build_cases() if c.name.startswith("forges_")}
honest = v3.honest_source(next(iter(cases.values())))
runs = [("honest", honest), ("forge75", cases["forges_within_one_slack_on_an_unbatched_shape"].source),
        ("forge50", cases["forges_half_its_time_on_an_unbatched_shape"].source)]
evs = {f: Evaluator("topk", dataclasses.replace(config(library=False, max_trials=30, min_trials=10, time_budget_s=2.0), launch_bound_factor=f)) for f in (1, 8)}
rows = {}
try:
    for rnd in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        for f, ev in evs.items():
            for name, src in runs:
                t = time.perf_counter()
                r = ev.evaluate(Candidate(task="topk", source=src, label=name))
                s = time.perf_counter() - t
                rows.setdefault((f, name), []).append(r.geomean_speedup or 0.0)
                shapes = " ".join(f"{x.shape_label}:{x.median_ms*1e3:.1f}us/n{x.trials}" for x in r.timings)
                c = dict(r.counters)
                print(f"round {rnd} factor {f} {name:8s} {r.status.value:8s} x{r.geomean_speedup or 0:7.2f} {s:5.1f}s "
                      f"charged {c.get('charged_shapes')} retimed {c.get('retimed_shapes')} | {shapes}", flush=True)
        if rnd == 0:
            for f, ev in evs.items():
                for shape in ev.bench_shapes:
                    b = ev.bench.shape_bench(shape)
                    cal = Calibration.of(list(b.calibration))
                    ev_ms = statistics.median(c.event_ms for c in b.calibration)
                    print(f"  factor {f} {shape.label}: launch_bound {b.launch_bound} batch {b.batch} pool {cal.calls} "
                          f"event {ev_ms*1e3:.1f}us overhead {cal.overhead_ms*1e3:.1f}us spread {cal.spread_ms*1e3:.1f}us "
                          f"slack@{30*f} {cal.slack_ms(30*f)*1e3:.2f}us", flush=True)
    print("medians of geomean speedups (gain over honest):")
    for f in evs:
        h = statistics.median(rows[(f, "honest")])
        print(f"  factor {f}: " + ", ".join(f"{n} x{statistics.median(rows[(f, n)]):.2f} ({statistics.median(rows[(f, n)])/h:.2f})"
                                            for n, _ in runs))
finally:
    for ev in evs.values():
        ev.close()
