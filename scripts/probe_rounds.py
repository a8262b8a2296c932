#!/usr/bin/env python3
"""Run on a GPU host: every timing round of adversarial cases and their honest twins, in fresh evaluators.

    python3 scripts/probe_rounds.py --cases replies_before_its_calls_are_done forges_only_in_the_first_round \
        [--reps 6] [--limit-s 280] [--out DIR]

Each rep starts a fresh Evaluator with the adversarial suites' settings (quick benchmark, ten
trials, library off: test_adversarial_v2_gpu.SETTINGS) on the cases' task, judges every case and
then the honest equivalent, and records every round ``profile.time_shape`` took: the candidate's
windows, the baseline's interleaved with them and the shape's calibration pool (taken when the
evaluator started).  It prints, per shape and round, medians per window in us:

    claim    the candidate's events (what its runner says its calls took)
    bound    the candidate's window less the charge test's overhead (profile.own_share_calibration)
    over     window - event of the pool | of the interleaved baseline | of the candidate

A forger whose claims escape shows a pool overhead above the interleaved baseline's: the window
was calibrated on conditions that no longer hold.  Every round is written to DIR/rounds.json (one
line a shape and evaluation), which ``scripts/replay_rounds.py`` replays through the current
credit rules on any machine (evo_fsr/verdict/replay.py).  A diagnostic: it changes
nothing in the verdict.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.types import Candidate  # noqa: E402
from evo_fsr.verdict import profile  # noqa: E402
from evo_fsr.verdict.replay import window_row, windows  # noqa: E402
from evo_fsr.verdict.evaluate import Evaluator  # noqa: E402
from evo_fsr.verdict.profile import CallTimes  # noqa: E402
from tests.adversarial import cases_v3, cases_v4  # noqa: E402
from tests.adversarial.cases_v2_blocks import honest_source  # noqa: E402
from tests.adversarial.test_adversarial_v2_gpu import config  # noqa: E402


def over_us(calls: Sequence[CallTimes]) -> float:
    return 1e3 * statistics.median(c.window_ms - c.event_ms for c in calls) if calls else float("nan")


def case_jobs(parser: argparse.ArgumentParser, names: Sequence[str]) -> tuple[str, list[tuple[str, str]]]:
    """The task of v3/v4 adversarial cases named ``names`` (one task for all, else a usage error)
    and what to judge: each case's source by its name, then the honest twin of the first."""
    known = {c.name: c for c in cases_v3.build_cases() + cases_v4.build_cases()}
    missing = [n for n in names if n not in known]
    if missing:
        parser.error(f"unknown case(s): {', '.join(missing)}")
    cases = [known[n] for n in names]
    tasks = {c.task for c in cases}
    if len(tasks) != 1:
        parser.error(f"the cases must share one task, not {sorted(tasks)}")
    return cases[0].task, [(c.name, c.source) for c in cases] + [("honest", honest_source(cases[0]))]


def case_args(doc: str, reps: int, limit_s: float) -> tuple[argparse.Namespace, str, list[tuple[str, str]]]:
    """A probe's command line over adversarial cases (--cases, --reps, --limit-s, --out), and
    ``case_jobs`` of its cases."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", required=True, help="names of v3/v4 adversarial cases, one task")
    parser.add_argument("--reps", type=int, default=reps)
    parser.add_argument("--limit-s", type=float, default=limit_s, help="no new rep starts after this")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    return (args, *case_jobs(parser, args.cases))


def main() -> int:
    args, task, jobs = case_args(__doc__ or "", reps=6, limit_s=280.0)

    real_time_shape = profile.time_shape
    record: list[dict[str, Any]] = []

    def spy(timing_round: profile.Round, pool: Sequence[CallTimes], *rest: Any, **kwargs: Any) -> profile.ShapeCalls:
        rounds: list[dict[str, Any]] = []

        def recorded() -> tuple[list[CallTimes], list[CallTimes]]:
            candidate, baseline = timing_round()
            rounds.append({"candidate": [window_row(c) for c in candidate],
                           "baseline": [window_row(c) for c in baseline]})
            return candidate, baseline

        timed = real_time_shape(recorded, pool, *rest, **kwargs)
        record.append({"pool": [window_row(c) for c in pool], "rounds": rounds, "strict": timed.strict,
                       "mix_interleaved": kwargs.get("mix_interleaved", True)})
        return timed

    profile.time_shape = spy
    start = time.monotonic()
    out = args.out / "rounds.json"
    print(f"# {task}: {', '.join(n for n, _ in jobs)}; per round, us a window: claim / bound; "
          "over of pool | baseline | candidate", flush=True)
    try:
        for rep in range(args.reps):
            if time.monotonic() - start > args.limit_s:
                print(f"# stopped before rep {rep}: {args.limit_s:.0f} s spent", flush=True)
                break
            evaluator = Evaluator(task, config(library=False))
            try:
                for name, source in jobs:
                    record.clear()
                    result = evaluator.evaluate(Candidate(task=task, source=source, label=name))
                    labels = [t.shape_label for t in result.timings]
                    print(f"rep {rep} {name}: {result.status.value} x{result.geomean_speedup or 0:.2f} "
                          f"credited by {[t.credited_by for t in result.timings]}", flush=True)
                    for label, rec in zip(labels, record):
                        pool = windows(rec["pool"])
                        for i, rnd in enumerate(rec["rounds"]):
                            cand, base = windows(rnd["candidate"]), windows(rnd["baseline"])
                            # the charge test's calibration (a chained shape's is the pool's alone)
                            calibration = profile.own_share_calibration(pool, base if rec["mix_interleaved"] else [])
                            claim = 1e3 * statistics.median(c.event_ms for c in cand)
                            bound = 1e3 * (statistics.median(c.window_ms for c in cand) - calibration.overhead_ms)
                            print(f"  {label} round {i + 1}, k={cand[0].calls}, {len(cand)} windows: "
                                  f"{claim:.0f} / {bound:.0f}; {over_us(pool):.0f} | {over_us(base):.0f} | "
                                  f"{over_us(cand):.0f} (pool spread {1e3 * calibration.spread_ms:.0f})", flush=True)
                        with out.open("a") as f:
                            f.write(json.dumps({"rep": rep, "job": name, "shape": label,
                                                "speedup": result.geomean_speedup, **rec}) + "\n")
            finally:
                evaluator.close()
    finally:
        profile.time_shape = real_time_shape
    return 0


if __name__ == "__main__":
    sys.exit(main())
