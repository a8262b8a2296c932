#!/usr/bin/env python3
"""Run on a GPU host: what pinning the runners (runner/cores.py) costs an honest kernel.

    python3 scripts/probe_pinning.py [--reps 6] [--benchmark quick] [SPEC ...]

SPEC is TASK:SEED (a seed of the task) or v4:CASE / v3:CASE (an adversarial suite's case, for
its legitimate kernels: ``ok_v4_prefix_sum_cub_blockscan``); by default the launch-bound and
host-heavy ones where the forty-seventh session saw pinned and unpinned readings differ once.
Each spec is judged ``reps`` rounds by two evaluators of its task in this one process, one with
its runners pinned and one without, in three arms a round, the order rotated each round so that
drift of the GPU or the host falls on all alike: pinned (the runner core kept awake by the
evaluator's SCHED_IDLE spinner, runner/keep_awake.py: the default), idle (the same pinned
evaluator with that spinner stopped for the judgement: the core left to idle) and unpinned.
(The unpinned runners inherit the evaluator's thread's cores, every core but the runner cores,
as they would in a run with pinning off.) Printed per spec: every judgement's speedup over the
naive seed, which term credited it and the runner's window cores; then the medians and each
pinned arm over the unpinned one, the ratios this probe exists for. Where the host cannot
be pinned (fewer than 4 cores a GPU) it says so and stops. A diagnostic: it changes nothing.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.runner import cores, keep_awake  # noqa: E402
from evo_fsr.types import Candidate, EvalResult, Status  # noqa: E402
from evo_fsr.verdict.evaluate import EvalConfig, Evaluator  # noqa: E402

DEFAULT_SPECS = ("prefix_sum:lookback", "v4:ok_v4_prefix_sum_cub_blockscan", "topk:radix_select", "sort:radix",
                 "monte_carlo:persistent", "relu:vectorized")


#: the arms, each judged once a round: pinned with the runner core kept awake by the evaluator's
#: spinner (the default), pinned with that spinner stopped for the judgement (the core left to
#: idle), and not pinned
ARMS = ("pinned", "idle", "unpinned")


@dataclass
class Readings:
    speedups: dict[str, list[float]] = field(default_factory=lambda: {arm: [] for arm in ARMS})

    def median(self, arm: str) -> float:
        values = self.speedups[arm]
        return statistics.median(values) if values else float("nan")


@contextmanager
def spinner_stopped(core: int) -> Iterator[None]:
    """The keep-awake spinner on ``core`` stopped (SIGSTOP) for the block, where one spins."""
    pid = keep_awake.spinner_pid(core)
    if pid is not None:
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 2.0           # a signal lands a little later: wait until it has
        while time.monotonic() < deadline and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
            time.sleep(0.001)
    try:
        yield
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)


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
    return f"x{result.geomean_speedup:.3f} [{credited}; cores {stages.get('window_cores_median', float('nan')):.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("specs", nargs="*", default=list(DEFAULT_SPECS))
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--benchmark", default="quick")
    args = parser.parse_args()
    resolved = [resolve(spec) for spec in args.specs]
    for name in (cores.PIN_ENV, keep_awake.KEEP_AWAKE_ENV):
        os.environ.pop(name, None)              # they would override the evaluators' configs
    if cores.host_plan() is None:
        print("probe_pinning: this host cannot be pinned (runner/cores.py: fewer than 4 cores a GPU); nothing to compare")
        return 1
    plan = cores.host_plan()
    print(f"# pinned runner core {plan.runner}; {args.reps} rounds of {', '.join(ARMS)} (pinned: the core kept awake "
          f"by the evaluator's spinner; idle: that spinner stopped), the order rotated each round; benchmark "
          f"{args.benchmark}; x = speedup over the naive seed")
    rows: list[tuple[str, Readings]] = []
    for task, label, source in resolved:
        evaluators = {pinned: Evaluator(task, EvalConfig(benchmark=args.benchmark, library=False, pin_runners=pinned))
                      for pinned in (True, False)}
        readings = Readings()
        try:
            for rep in range(args.reps):
                for arm in ARMS[rep % 3:] + ARMS[:rep % 3]:
                    with spinner_stopped(plan.runner[0]) if arm == "idle" else nullcontext():
                        result = evaluators[arm != "unpinned"].evaluate(Candidate(task=task, source=source, label=label))
                    if result.status is Status.OK:
                        readings.speedups[arm].append(result.geomean_speedup)
                    print(f"{label:40s} rep {rep} {arm:8s} {describe(result)}", flush=True)
        finally:
            for ev in evaluators.values():
                ev.close()
        rows.append((label, readings))
    print(f"\n{'spec':40s} {'pinned':>8s} {'idle':>8s} {'unpinned':>9s} {'pinned/unpinned':>16s} {'idle/unpinned':>14s}"
          "  (medians of OK judgements)")
    for label, readings in rows:
        p, i, u = (readings.median(arm) for arm in ARMS)
        over = [a / u if u == u and u > 0 else float("nan") for a in (p, i)]
        print(f"{label:40s} {p:8.3f} {i:8.3f} {u:9.3f} {over[0]:16.3f} {over[1]:14.3f}  "
              f"(n {' / '.join(str(len(readings.speedups[arm])) for arm in ARMS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
