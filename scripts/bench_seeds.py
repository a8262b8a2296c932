#!/usr/bin/env python3
"""Benchmark every seed of the given tasks (default: all) on the GPU and print a table.

Per task and benchmark shape: the seed's median ms, the naive seed's (same process,
interleaved), speedup, speed-of-light time and fraction, and the library implementation
(torch) under the same precision.  Also the evaluation overhead per candidate: wall time of
an evaluation minus the GPU time of its timed launches.

    python scripts/bench_seeds.py [--tasks conv2d matmul] [--markdown out.md]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.evaluate import EvalConfig, Evaluator  # noqa: E402
from evo_fsr.library import library_median_ms  # noqa: E402
from evo_fsr.tasks import discover, get_task  # noqa: E402
from evo_fsr.types import Candidate  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="*", default=None)
    parser.add_argument("--trials", type=int, default=50, help="max timed trials per shape")
    parser.add_argument("--budget-s", type=float, default=2.0, help="timing budget per shape (both kernels)")
    parser.add_argument("--validation-seeds", type=int, default=2)
    parser.add_argument("--markdown", type=Path, help="also write the table as markdown here")
    args = parser.parse_args()
    rows: list[list[str]] = []
    overheads: list[str] = []
    gpu_name = ""
    for name in args.tasks or discover():
        task = get_task(name)
        ev = Evaluator(task, EvalConfig(max_trials=args.trials, time_budget_s=args.budget_s,
                                        validation_seeds=args.validation_seeds))
        lib = {}
        for shape in ev.bench_shapes:
            inputs, expected = ev.benchmark_case(shape)
            lib[shape.label] = library_median_ms(task, shape, inputs, expected)
        if not gpu_name:
            print(f"GPU: {ev.gpu_info.name}", flush=True)
        for seed, source in task.seeds().items():
            start = time.perf_counter()
            result = ev.evaluate(Candidate(task=name, source=source, label=seed))
            wall = time.perf_counter() - start
            gpu_name = result.gpu_name or ev.gpu_info.name
            if not result.timings:
                rows.append([name, seed, "-", result.status.value, "-", "-", "-", "-", "-", result.summary[:60]])
                print("  ".join(rows[-1]), flush=True)
                continue
            gpu_s = sum((t.median_ms + t.baseline_median_ms) * (t.trials + ev.config.warmup + 1) for t in result.timings) / 1e3
            overheads.append(f"{name}/{seed}: evaluation {result.evaluate_seconds:.2f} s, of which timed GPU work "
                             f"~{gpu_s:.2f} s: overhead {result.evaluate_seconds - gpu_s:.2f} s "
                             f"(compile {result.compile_seconds:.1f} s{' cached' if result.compile_seconds == 0 else ''}, "
                             f"wall incl. compile {wall:.2f} s)")
            for t in result.timings:
                lib_ms = lib.get(t.shape_label)
                rows.append([name, seed, t.shape_label, result.status.value, f"{t.median_ms:.4f}",
                             f"{t.baseline_median_ms:.4f}", f"{t.speedup:.2f}x", f"{t.speed_of_light_ms:.4f}",
                             f"{100 * t.fraction_of_light:.1f}%", f"{lib_ms:.4f}" if lib_ms else "-"])
                print("  ".join(rows[-1]), flush=True)      # progress, in case the run is cut short
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


if __name__ == "__main__":
    sys.exit(main())
