"""Run on a GPU host: python3 scripts/probe_chain.py [TASK ...] [--rounds R] [--benchmark NAME]
(gpu_checks.sh chain).

Every seed of the tasks with launch-bound shapes (topk, sort) judged by two evaluators of the same
process, alternating: one call a launch-bound window (``chain_windows`` off) and chained windows
(verdict/chain.py: chain.CHAIN_CALLS calls a window, each call's inputs drawn on the GPU from the
previous call's outputs).  Prints per seed and shape the status, the credited time a call, the
speedup over the naive seed, the term that set the credit, and the calls a window: an honest seed
must stay OK in both, its credit must not move much, and where it moves the chained credit is the
one that rests on a window bound that binds.
"""
from __future__ import annotations

import argparse
import statistics

from evo_fsr.tasks import get_task
from evo_fsr.types import Candidate
from evo_fsr.verdict.evaluate import EvalConfig, Evaluator


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tasks", nargs="*", default=["topk", "sort"])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--benchmark", default="quick")
    args = parser.parse_args()
    for name in args.tasks:
        task = get_task(name)
        modes = {"single": Evaluator(task, EvalConfig(benchmark=args.benchmark, library=False, chain_windows=False)),
                 "chained": Evaluator(task, EvalConfig(benchmark=args.benchmark, library=False))}
        credits: dict[tuple[str, str, str], list[float]] = {}
        try:
            for rnd in range(args.rounds):
                for seed, source in task.seeds().items():
                    for mode, ev in modes.items():
                        result = ev.evaluate(Candidate(task=name, source=source, label=seed))
                        print(f"round {rnd} {name}/{seed:16s} {mode:8s} {result.status.value:8s} "
                              f"x{result.geomean_speedup or 0:8.3f} {result.evaluate_seconds:5.1f}s", flush=True)
                        for t in result.timings:
                            credits.setdefault((seed, t.shape_label, mode), []).append(t.median_ms)
                            print(f"    {t.shape_label:12s} {t.median_ms * 1e3:9.2f} us a call, x{t.speedup:8.3f}, "
                                  f"by {t.credited_by:12s} trials {t.trials}", flush=True)
                        if result.status.value != "ok":
                            print(f"    {result.summary[:300]}")
        finally:
            for ev in modes.values():
                ev.close()
        print(f"{name}: median credit a call (us), single -> chained:")
        for seed, label in sorted({(s, l) for s, l, _ in credits}):
            single = credits.get((seed, label, "single"), [])
            chained = credits.get((seed, label, "chained"), [])
            if single and chained:
                a, b = statistics.median(single) * 1e3, statistics.median(chained) * 1e3
                print(f"  {seed:16s} {label:12s} {a:9.2f} -> {b:9.2f} ({b / a:5.2f}x)")


if __name__ == "__main__":
    main()
