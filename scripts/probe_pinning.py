#!/usr/bin/env python3
"""Run on a GPU host: what pinning the runners (runner/cores.py) costs an honest kernel.

    python3 scripts/probe_pinning.py [--reps 6] [--benchmark quick] [SPEC ...]

SPEC is TASK:SEED (a seed of the task) or v4:CASE / v3:CASE (an adversarial suite's case, for
its legitimate kernels: ``ok_v4_prefix_sum_cub_blockscan``); by default the launch-bound and
host-heavy ones where the forty-seventh session saw pinned and unpinned readings differ once.
Each spec is judged ``reps`` times by two evaluators of its task in this one process, one with
its runners pinned and one without, alternating (pinned first in even rounds, unpinned first in
odd ones), so that drift of the GPU or the host falls on both alike. (The unpinned runners
inherit the evaluator's thread's cores, every core but the runner cores, as they would in a run
with pinning off.) Printed per spec: every
judgement's speedup over the naive seed, which term credited it and the runner's window cores;
then the medians and pinned / unpinned, the ratio this probe exists for. Where the host cannot
be pinned (fewer than 4 cores a GPU) it says so and stops. A diagnostic: it changes nothing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.runner import cores  # noqa: E402
from evo_fsr.types import Candidate, EvalResult, Status  # noqa: E402
from evo_fsr.verdict.evaluate import EvalConfig, Evaluator  # noqa: E402

DEFAULT_SPECS = ("prefix_sum:lookback", "v4:ok_v4_prefix_sum_cub_blockscan", "topk:radix_select", "sort:radix",
                 "monte_carlo:persistent", "relu:vectorized")


@dataclass
class Readings:
    speedups: dict[bool, list[float]] = field(default_factory=lambda: {True: [], False: []})

    def median(self, pinned: bool) -> float:
        values = self.speedups[pinned]
        return statistics.median(values) if values else float("nan")


def resolve(spec: str) -> tuple[str, str, str]:
    """(task, label, source) of a spec (the module docstring); SystemExit naming what is wrong."""
    kind, _, name = spec.partition(":")
    if not name:
        raise SystemExit(f"probe_pinning: {spec!r}: expected TASK:SEED, v3:CASE or v4:CASE")
    if kind in ("v3", "v4"):
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from adversarial import cases_v3, cases_v4  # noqa: PLC0415 - only for case specs
        suite = cases_v4 if kind == "v4" else cases_v3
        case = next((c for c in suite.build_cases() if c.name == name), None)
        if case is None:
            raise SystemExit(f"probe_pinning: {spec!r}: no case of that name in suite {kind}")
        return case.task, spec, case.source
    from evo_fsr.tasks import TaskError, get_task  # noqa: PLC0415
    try:
        seeds = get_task(kind).seeds()
    except TaskError as exc:
        raise SystemExit(f"probe_pinning: {spec!r}: {exc}") from None
    if name not in seeds:
        raise SystemExit(f"probe_pinning: {spec!r}: task {kind} has no seed {name} (it has {', '.join(sorted(seeds))})")
    return kind, spec, seeds[name]


def describe(result: EvalResult) -> str:
    if result.status is not Status.OK:
        return f"{result.status.value} ({result.rejection})"
    stages = dict(result.stage_seconds)
    credited = ",".join(sorted({t.credited_by for t in result.timings}))
    return (f"x{result.geomean_speedup:.3f} [{credited}; cores {stages.get('window_cores_median', float('nan')):.2f}, "
            f"others {stages.get('window_others_median', float('nan')):.3f}, "
            f"other runs/ms {stages.get('window_other_runs_per_ms_median', float('nan')):.2f}]")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("specs", nargs="*", default=list(DEFAULT_SPECS))
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--benchmark", default="quick")
    args = parser.parse_args()
    resolved = [resolve(spec) for spec in args.specs]
    os.environ.pop(cores.PIN_ENV, None)         # it would override both evaluators' configs
    if cores.host_plan() is None:
        print("probe_pinning: this host cannot be pinned (runner/cores.py: fewer than 4 cores a GPU); nothing to compare")
        return 1
    print(f"# pinned runner core {cores.host_plan().runner}; {args.reps} judgements each way, alternating; "
          f"benchmark {args.benchmark}; x = speedup over the naive seed")
    rows: list[tuple[str, Readings]] = []
    for task, label, source in resolved:
        evaluators = {pinned: Evaluator(task, EvalConfig(benchmark=args.benchmark, library=False, pin_runners=pinned))
                      for pinned in (True, False)}
        readings = Readings()
        try:
            for rep in range(args.reps):
                order = (True, False) if rep % 2 == 0 else (False, True)
                for pinned in order:
                    result = evaluators[pinned].evaluate(Candidate(task=task, source=source, label=label))
                    if result.status is Status.OK:
                        readings.speedups[pinned].append(result.geomean_speedup)
                    print(f"{label:40s} rep {rep} {'pinned  ' if pinned else 'unpinned'} {describe(result)}", flush=True)
        finally:
            for ev in evaluators.values():
                ev.close()
        rows.append((label, readings))
    print(f"\n{'spec':40s} {'pinned':>9s} {'unpinned':>9s} {'pinned/unpinned':>16s}  (medians of OK judgements)")
    for label, readings in rows:
        p, u = readings.median(True), readings.median(False)
        print(f"{label:40s} {p:9.3f} {u:9.3f} {p / u if u == u and u > 0 else float('nan'):16.3f}  "
              f"(n {len(readings.speedups[True])} / {len(readings.speedups[False])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
