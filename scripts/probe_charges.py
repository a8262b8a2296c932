#!/usr/bin/env python3
"""Run on a GPU host: where an honest kernel's charged windows spend their extra time.

    python3 scripts/probe_charges.py [--task dot_product] [--seed persistent] [--reps 8] [--trials 20] [--out DIR]

One evaluator judges the task's seed ``reps`` times.  For every shape of every evaluation it
prints which term set the credit (``ShapeTiming.credited_by``: "events" when the runner's claims
held) and splits the windows of three roles into parts, medians in us per window:

    over     window - event: what a window costs beyond the launches (the calibration's overhead)
    prep     the inputs loaded into the buffer sets and the L2 flushed (trusted side)
    trip     the command's round trip less the runner's own host time: pipe, wake-up, reply
    out      the copy of the outputs, after the reply
    runner   host - event: inside the runner, around the launches (its synchronizes, ctypes)

for the candidate's windows, the baseline's interleaved with them, and the shape's calibration
pool (the twin in the candidate's place, before any candidate code ran).  A round charged although
the kernel is honest shows here as a candidate whose "over" sits above the pool's; the other
columns say in which part.  Every window is also written to DIR/charges_TASK.json (one line a
shape).  A diagnostic: it changes nothing in the verdict.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.types import Candidate  # noqa: E402
from evo_fsr.verdict import profile, session  # noqa: E402
from evo_fsr.verdict.evaluate import EvalConfig, Evaluator  # noqa: E402
from evo_fsr.verdict.profile import CallTimes  # noqa: E402


PARTS = ("over", "prep", "trip", "out", "runner")


def parts_us(calls: Sequence[CallTimes]) -> dict[str, float]:
    """Medians of the window's parts (``PARTS``, the module docstring), us per window."""
    parts = {"over": lambda c: c.window_ms - c.event_ms, "prep": lambda c: c.prep_ms,
             "trip": lambda c: c.send_ms - c.host_ms, "out": lambda c: c.window_ms - c.prep_ms - c.send_ms,
             "runner": lambda c: c.host_ms - c.event_ms}
    return {name: 1e3 * statistics.median(part(c) for c in calls) if calls else float("nan")
            for name, part in parts.items()}


def window_rows(calls: Sequence[CallTimes]) -> list[list[float]]:
    """Every window as [event, event_all, host, window, prep, send] ms (the JSON lines)."""
    return [[c.event_ms, c.event_all_ms, c.host_ms, c.window_ms, c.prep_ms, c.send_ms] for c in calls]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="dot_product")
    parser.add_argument("--seed", default="persistent")
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--fresh-pool", action="store_true",
                        help="EvalConfig.fresh_pool_retime: a shape charged twice is judged against a pool "
                             "taken with the candidate's runner killed")
    args = parser.parse_args()

    evaluator = Evaluator(args.task, EvalConfig(max_trials=args.trials, library=False,
                                                fresh_pool_retime=args.fresh_pool))
    source = evaluator.task.seeds()[args.seed]
    records: list[dict[str, Any]] = []
    real_summarise = profile.summarise

    def spy(shape_label: str, candidate: Sequence[CallTimes], baseline: Sequence[CallTimes], *rest: Any,
            **kwargs: Any) -> Any:
        timing = real_summarise(shape_label, candidate, baseline, *rest, **kwargs)
        shape = next(s for s in evaluator.bench_shapes if s.label == shape_label)
        pool = list(evaluator.bench.shape_bench(shape).calibration)
        if "single_floor_ms" in kwargs:     # the shape's final summarise (session.py; a first one sizes the floor)
            records.append({"shape": shape_label, "credited_by": timing.credited_by, "credit_ms": timing.median_ms,
                            "strict": bool(kwargs.get("strict", False)), "k": candidate[0].calls,
                            **{role: window_rows(calls) for role, calls in
                               (("candidate", candidate), ("baseline", baseline), ("pool", pool))}})
        return timing

    session.profile.summarise = spy     # session.py calls profile.summarise
    print(f"# {args.task} seed:{args.seed}, {args.reps} evaluations; medians per window, us, "
          f"{' / '.join(PARTS)}, for the candidate | the interleaved baseline | the pool")
    try:
        for rep in range(args.reps):
            records.clear()
            result = evaluator.evaluate(Candidate(task=args.task, source=source, label=args.seed))
            counters = dict(result.counters)
            print(f"rep {rep}: {result.status.value} x{result.geomean_speedup or 0:.3f} "
                  f"retimed {counters.get('retimed_shapes')} charged {counters.get('charged_shapes')} "
                  f"fresh pools {counters.get('fresh_pools', 0)}", flush=True)
            for timing in result.timings:
                rec = next((r for r in reversed(records) if r["shape"] == timing.shape_label), None)
                roles = "" if rec is None else " | ".join(
                    "/".join(f"{v:.0f}" for v in parts_us([CallTimes(*w[:4], calls=rec["k"], prep_ms=w[4], send_ms=w[5])
                                                           for w in rec[role]]).values())
                    for role in ("candidate", "baseline", "pool"))
                print(f"  {timing.shape_label:12s} {timing.credited_by:13s} {timing.median_ms * 1e3:8.1f} us a call, "
                      f"k={rec['k'] if rec else '?'}: {roles}", flush=True)
                if rec is not None:
                    rec["rep"] = rep
            with (args.out / f"charges_{args.task}.json").open("a") as out:
                for rec in records:
                    out.write(json.dumps(rec) + "\n")
    finally:
        session.profile.summarise = real_summarise
        evaluator.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
