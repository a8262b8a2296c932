"""Run on a GPU host: python3 scripts/probe_chain_first.py [REPS] (gpu_checks.sh chain_first).

Is the first candidate judged after a shape's calibration pool is taken credited differently?
In suite v3 on an H200 (thirty-third session) the 75 % forger, judged first by a fresh topk
evaluator, was credited its claim (x100.12 against the honest seed's x73.62, "events",
never charged) while the 50/20/2 % forgers after it were charged.  Each repetition here makes a
fresh chained evaluator of topk (suite v3's settings), judges the 75 % forger first, then the
honest radix_select seed, then the forger again, and prints per shape the pool's size, median
overhead and robust spread, the slack, and the candidate's median window less events, and
whether the pool was taken by the chain twin (task.yaml ``chain_twin``, bench.ShapeBench.fast_twin)
or by the naive seed's twin (the finding above: the naive twin's pool sat 100-300 us a window
above the fast kernels' own).  ``EVO_FSR_CHAIN_TWIN=naive``: the naive seed's twin.
python3 scripts/probe_chain_first.py [REPS]."""
from __future__ import annotations

import os
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


def us(values) -> float:
    return statistics.median(values) * 1e3 if values else float("nan")


def time_shape(timing_round, pool, fresh_pool=None, **kwargs):
    shape = _time_shape(timing_round, pool, fresh_pool, **kwargs)
    cal = shape.calibration
    over = [c.window_ms - c.event_ms for c in pool]
    q = statistics.quantiles(over, n=4) if len(over) >= 2 else [over[0]] * 3
    cand = [c.window_ms - c.event_ms for c in shape.candidate]
    seen.append(f"pool n={len(pool)} med {us(over):7.1f} iqr {(q[2] - q[0]) * 1e3:6.1f} min {min(over) * 1e3:7.1f} "
                f"max {max(over) * 1e3:7.1f} | cal {cal.overhead_ms * 1e3:7.1f} n={cal.calls} slack "
                f"{cal.slack_ms(len(shape.candidate)) * 1e3:6.1f} | cand n={len(cand)} w-e {us(cand):7.1f} "
                f"[{min(cand) * 1e3:7.1f},{max(cand) * 1e3:7.1f}] ev {us([c.event_ms for c in shape.candidate]):7.1f} "
                f"rounds {shape.rounds}{' strict' if shape.strict else ''} calls {shape.candidate[0].calls}")
    return shape


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    profile.time_shape = time_shape
    cases = {c.name: c for c in v3.build_cases() if c.name.startswith("forges_")}
    forger = cases["forges_within_one_slack_on_an_unbatched_shape"]
    honest = v3.honest_source(forger)
    for rep in range(reps):
        naive = os.environ.get("EVO_FSR_CHAIN_TWIN") == "naive"
        ev = Evaluator("topk", config(library=False, **({"chain_twin_source": ""} if naive else {})))
        try:
            for name, source in (("forge75", forger.source), ("honest", honest), ("forge75", forger.source)):
                seen.clear()
                start = time.perf_counter()
                result = ev.evaluate(Candidate(task="topk", source=source, label=name))
                terms = ",".join(t.credited_by for t in result.timings)
                twins = ",".join("fast" if ev.bench.shape_bench(s).fast_twin else "naive" for s in ev.bench_shapes)
                print(f"rep {rep} {name:8s} {result.status.value:6s} x{result.geomean_speedup or 0:7.2f} "
                      f"{time.perf_counter() - start:5.1f}s {terms} (pool twin: {twins})", flush=True)
                for label, line in zip((t.shape_label for t in result.timings), seen):
                    print(f"    {label:12s} {line}", flush=True)
        finally:
            ev.close()


if __name__ == "__main__":
    main()
