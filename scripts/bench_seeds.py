#!/usr/bin/env python3
"""Benchmark every seed of the given tasks (default: all) on the GPU and print a table.

Per task and benchmark shape: the seed's median ms, the naive seed's (same process,
interleaved), speedup, speed-of-light time and fraction, and the library implementation
(torch) under the same precision.  Also the evaluation overhead per candidate: wall time of
an evaluation (compile excluded) minus the GPU time of its timed kernel calls, with the wall
seconds of each stage; ``--repeat N`` evaluates each seed N times in a row (as an evolve worker
does: the runner of the next candidate is started ahead) and reports the median.

    python scripts/bench_seeds.py [--tasks conv2d matmul] [--repeat 3] [--markdown out.md]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.verdict.evaluate import EvalConfig, Evaluator  # noqa: E402
from evo_fsr.tasks import discover, get_task  # noqa: E402
from evo_fsr.types import Candidate  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="*", default=None)
    parser.add_argument("--trials", type=int, default=50, help="max timed trials per shape")
    parser.add_argument("--budget-s", type=float, default=2.0, help="timing budget per shape (both kernels)")
    parser.add_argument("--validation-seeds", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="evaluations per seed (median overhead)")
    parser.add_argument("--markdown", type=Path, help="also write the table as markdown here")
    args = parser.parse_args()
    rows: list[list[str]] = []
    overheads: list[str] = []
    gpu_name = ""
    for name in args.tasks or discover():
        task = get_task(name)
        ev = Evaluator(task, EvalConfig(max_trials=args.trials, time_budget_s=args.budget_s,
                                        validation_seeds=args.validation_seeds))
        if not gpu_name:
            print(f"GPU: {ev.gpu_info.name}", flush=True)
        for seed, source in task.seeds().items():
            results = []
            for _ in range(max(1, args.repeat)):
                start = time.perf_counter()
                results.append(ev.evaluate(Candidate(task=name, source=source, label=seed)))
                wall = time.perf_counter() - start
            result = results[-1]
            gpu_name = result.gpu_name or ev.gpu_info.name
            if not result.timings:
                rows.append([name, seed, "-", result.status.value, "-", "-", "-", "-", "-", result.summary[:60]])
                print("  ".join(rows[-1]), flush=True)
                continue
            overheads.append(_overhead_line(f"{name}/{seed}", results, wall))
            print("  " + overheads[-1], flush=True)
            for t in result.timings:
                lib_ms = t.library_ms
                rows.append([name, seed, t.shape_label, result.status.value, f"{t.median_ms:.4f}",
                             f"{t.baseline_median_ms:.4f}", f"{t.speedup:.2f}x", f"{t.speed_of_light_ms:.4f}",
                             f"{100 * t.fraction_of_light:.1f}%", f"{lib_ms:.4f}" if lib_ms else "-"])
                print("  ".join(rows[-1]), flush=True)      # progress, in case the run is cut short
        ev.close()
    header = ["task", "seed", "shape", "status", "median ms", "naive ms", "speedup", "SOL ms", "% SOL", "torch ms"]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    print(f"GPU: {gpu_name}")
    for r in [header] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print("\nEvaluation overhead per candidate:")
    print("\n".join("  " + o for o in overheads))
    if args.markdown:
        lines = [f"GPU: {gpu_name}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines += ["", "Evaluation overhead per candidate:", ""] + [f"- {o}" for o in overheads]
        args.markdown.write_text("\n".join(lines) + "\n")
    return 0


def _overhead_line(label: str, results: list, wall_s: float) -> str:
    """Median over the evaluations: wall, timed GPU work, overhead, and the stages."""
    def median(key: str) -> float:
        return statistics.median(dict(r.stage_seconds).get(key, 0.0) for r in results)
    evaluate_s = statistics.median(r.evaluate_seconds for r in results)
    overhead_s = statistics.median(r.overhead_seconds or 0.0 for r in results)
    stages = sorted({k for r in results for k, _ in r.stage_seconds if k != "timed_gpu"})
    detail = ", ".join(f"{k} {median(k):.3f}" for k in stages)
    first = results[0].overhead_seconds or 0.0
    return (f"{label}: evaluation {evaluate_s:.2f} s = timed GPU work {median('timed_gpu'):.2f} s + overhead "
            f"{overhead_s:.2f} s (median of {len(results)}; the first, without a runner started ahead: "
            f"{first:.2f} s) [stages, s: {detail}] (compile {results[0].compile_seconds:.1f} s, "
            f"last wall incl. compile {wall_s:.2f} s)")


if __name__ == "__main__":
    sys.exit(main())
