#!/usr/bin/env python3
"""A kernel against the vendor library, per task and shape, in one process on one GPU.

    python scripts/bench_vs_library.py [--tasks conv2d matmul attention]
        [--kernel conv2d=populations/conv2d/RUN] [--kernel matmul=best.cu] [--kernel attention=seed:naive]
        [--shapes SET] [--trials 50] [--markdown out.md]

Per task and benchmark shape: the kernel's median ms, the naive seed's (interleaved with it in
one runner process, as every verdict), the library's (torch: cuDNN / cuBLAS, timed in this process
under the task's precision policy, TF32 off for fp32_strict, in the kernel's batch: as many calls
after one flush as the verdict times the kernel to a window; evo_fsr/verdict/library.py), the
speed-of-light floor, and the ratios: speedup over naive, "x of library" (library ms / kernel ms,
above 1 = faster than the library) and the share of speed-of-light reached by the kernel and by
the library, and the kernel's bytes per second as a share of the measured device-to-device copy
(the task's bytes model; issue 13's target for bandwidth-bound tasks is 90 %), and which term set
the kernel's credited time ("events" for an honest kernel whose claims held; "window",
"window-strict", "window-ratio" or "single-call" where a bound of profile.py took over).  Then the
geomeans per task, with how many shapes were timed again (retimed_shapes), had their claims set
aside (charged_shapes) or had their single-call floor retaken (single_retimed).

A kernel is a ``.cu`` file, a run directory (its ``best.cu``) or ``seed:NAME``; by default each
task's seed families (each seed with knobs), else its naive seed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.knobs import parse_knobs  # noqa: E402
from evo_fsr.report_lines import geomean_of_library, of_library, ratio  # noqa: E402
from evo_fsr.tasks import Task, get_task  # noqa: E402
from evo_fsr.types import EvalResult  # noqa: E402

DEFAULT_TASKS = ("conv2d", "matmul", "attention")
HEADER = ["task", "kernel", "shape", "status", "kernel ms", "naive ms", "library ms", "SOL ms",
          "vs naive", "of library", "kernel % SOL", "library % SOL", "kernel % of copy", "credited by"]


def resolve_kernels(task: Task, spec: str | None) -> list[tuple[str, str]]:
    """(label, source) of each kernel to time: the spec's one, or with none every seed family of
    the task (each seed with knobs: conv2d has two), else its naive seed."""
    if spec is not None:
        return [resolve_kernel(task, spec)]
    families = [(f"seed:{name}", src) for name, src in task.seeds().items() if name != "naive" and parse_knobs(src)]
    return families or [resolve_kernel(task, "seed:naive")]


def resolve_kernel(task: Task, spec: str | None) -> tuple[str, str]:
    """(label, source) of a kernel spec: a .cu file, a run directory's best.cu, or seed:NAME;
    None: the task's first seed family (see resolve_kernels for all of them)."""
    seeds = task.seeds()
    if spec is None:
        return resolve_kernels(task, None)[0]
    if spec.startswith("seed:"):
        if spec[5:] not in seeds:
            raise SystemExit(f"error: {spec}: task {task.name} has no such seed (has: {', '.join(seeds)})")
        return spec, seeds[spec[5:]]
    path = Path(spec)
    if path.is_dir():
        path = path / "best.cu"
    if not path.is_file():
        raise SystemExit(f"error: {spec}: no such file (a .cu file, a run directory with best.cu, or seed:NAME)")
    return str(path), path.read_text()


def of_copy(nbytes: float | None, kernel_ms: float, copy_gbps: float) -> str:
    """The kernel's bytes moved per second as a share of the measured device-to-device copy
    (issue 13's bandwidth target is 90 % of it); "-" where either is unknown."""
    if not nbytes or kernel_ms <= 0 or copy_gbps <= 0:
        return "-"
    return f"{100 * nbytes / (kernel_ms * 1e-3) / (copy_gbps * 1e9):.1f}%"


def rows_for(task: str, label: str, result: EvalResult, library_ms: dict[str, float | None],
             bytes_by_shape: dict[str, float] | None = None, copy_gbps: float = 0.0) -> list[list[str]]:
    """Table rows of one verdict; ``library_ms`` stands in where the verdict carries no library time;
    ``bytes_by_shape`` (the task's bytes model per shape label) and ``copy_gbps`` (the evaluator's
    measured copy) give the "% of copy" cell."""
    if not result.timings:
        return [[task, label, "-", result.status.value, "-", "-", "-", "-", "-", "-", "-", "-", result.summary[:60], "-"]]
    rows = []
    for t in result.timings:
        lib = t.library_ms if t.library_ms > 0 else library_ms.get(t.shape_label)
        rows.append([task, label, t.shape_label, result.status.value, f"{t.median_ms:.4f}",
                     f"{t.baseline_median_ms:.4f}", f"{lib:.4f}" if lib else "-", f"{t.speed_of_light_ms:.4f}",
                     ratio(t.speedup), ratio(of_library(t, lib)), f"{100 * t.fraction_of_light:.1f}%",
                     f"{100 * t.speed_of_light_ms / lib:.1f}%" if lib else "-",
                     of_copy((bytes_by_shape or {}).get(t.shape_label), t.median_ms, copy_gbps),
                     t.credited_by or "-"])
    return rows


def geomean_line(task: str, label: str, result: EvalResult, library_ms: dict[str, float | None]) -> str:
    naive = result.geomean_speedup
    lib = geomean_of_library(result, library_ms)
    counters = dict(result.counters)
    retimed = {name: counters.get(name, 0) for name in ("retimed_shapes", "charged_shapes", "single_retimed")}
    return (f"{task} ({label}): geomean {ratio(naive, 3)} over naive, "
            f"{ratio(lib)} of library" + ("" if lib is not None else " (library not measured on every shape)")
            + "; " + ", ".join(f"{name} {count}" for name, count in retimed.items()))


def render(rows: Sequence[Sequence[str]], gpu: str, geomeans: Sequence[str], markdown: bool) -> str:
    if markdown:
        lines = [f"GPU: {gpu}", "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines + [""] + [f"- {g}" for g in geomeans])
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    lines = [f"GPU: {gpu}"] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [HEADER, *rows]]
    return "\n".join(lines + [""] + geomeans)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS))
    p.add_argument("--kernel", action="append", default=[], metavar="TASK=SPEC",
                   help="the kernel for a task: a .cu file, a run directory, or seed:NAME (repeatable)")
    p.add_argument("--shapes", help="benchmark set (default: each task's default)")
    p.add_argument("--trials", type=int, default=50, help="max timed trials per shape")
    p.add_argument("--markdown", type=Path, help="also write the table as markdown here")
    args = p.parse_args(argv)
    specs = dict(item.split("=", 1) for item in args.kernel if "=" in item)
    from evo_fsr.verdict.evaluate import EvalConfig, Evaluator  # noqa: PLC0415 - GPU side
    from evo_fsr.types import Candidate  # noqa: PLC0415
    rows: list[list[str]] = []
    geomeans: list[str] = []
    gpu = ""
    for name in args.tasks:
        task = get_task(name)
        evaluator = Evaluator(task, EvalConfig(benchmark=args.shapes, max_trials=args.trials))
        try:
            gpu = gpu or f"{evaluator.gpu_info.name} (measured copy {evaluator.gpu_info.memory_bandwidth_gbps:.0f} GB/s)"
            for label, source in resolve_kernels(task, specs.get(name)):
                # the evaluator times the library in the same run (ShapeTiming.library_ms)
                result = evaluator.evaluate(Candidate(task=name, source=source, label=label))
                library_ms: dict[str, float | None] = {}
                these = rows_for(name, label, result, library_ms,
                                 {s.label: task.bytes_of(s) for s in evaluator.bench_shapes},
                                 evaluator.gpu_info.memory_bandwidth_gbps)
                rows += these
                geomeans.append(geomean_line(name, label, result, library_ms))
                print("\n".join("  ".join(r) for r in these), flush=True)             # progress
        finally:
            evaluator.close()
    print(render(rows, gpu, geomeans, markdown=False))
    if args.markdown:
        args.markdown.write_text(render(rows, gpu, geomeans, markdown=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
