#!/usr/bin/env python3
"""Where the trusted evaluator's time goes on one candidate: cProfile of ``Evaluator.evaluate``
(the second evaluation, after a warm-up one), sorted by cumulative and by own time.

    python scripts/profile_evaluator.py --task conv2d --seed implicit_gemm --trials 30 --top 40
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.tasks import get_task  # noqa: E402
from evo_fsr.types import Candidate  # noqa: E402
from evo_fsr.verdict.evaluate import EvalConfig, Evaluator  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="conv2d")
    parser.add_argument("--seed", default="implicit_gemm")
    parser.add_argument("--shapes", default=None)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    task = get_task(args.task)
    source = task.seeds()[args.seed]
    ev = Evaluator(task, EvalConfig(max_trials=args.trials, benchmark=args.shapes))
    first = ev.evaluate(Candidate(task=args.task, source=source, label=args.seed))
    print(f"warm-up: {first.status.value} {first.evaluate_seconds:.2f} s")
    profiler = cProfile.Profile()
    profiler.enable()
    result = ev.evaluate(Candidate(task=args.task, source=source + "\n// again\n", label=args.seed))
    profiler.disable()
    print(f"profiled: {result.status.value} {result.evaluate_seconds:.2f} s; stages "
          + ", ".join(f"{k} {v:.2f}" for k, v in result.stage_seconds))
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
