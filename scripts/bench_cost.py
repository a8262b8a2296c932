#!/usr/bin/env python3
"""Cost per candidate of two versions of the evaluator on the same kernels, in one session.

Issue 11 asks that the redesigned verdict protocol be no slower per candidate than the one it
replaced, on conv2d's ResNet-50 set and one GPU.  Comparing two evolve runs would compare two
different populations (the seed families changed too), so this script fixes the candidates:
the naive seed and knob variants of the implicit-GEMM seed *as they were in the older
checkout*, plus the current implicit_gemm_v2 family's default, are written to files once and
given to both versions' ``scripts/evaluate.py``.

Rounds alternate the versions (old, new, old, new, ...), each round one process per version
with that version's own compile cache.  Round 1 pays for compiling; later rounds hit the cache,
so they measure the verdict itself.  Reported per version: the median of the per-candidate
``evaluate_seconds`` (wall time after compile, spawn to verdict, as each version records it),
the median ``compile_seconds`` of round 1, and each process's wall time divided by the number
of candidates (start-up, baseline and compile amortised over the candidates).

    python scripts/bench_cost.py --old .bench/before --task conv2d --variants 8 --rounds 3

``--old`` is a checkout of the older commit (e.g. ``git archive 062ac66 | tar -x -C DIR``).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evo_fsr.knobs import constraint_violation, parse_knobs, set_knobs  # noqa: E402


def _threads_ok(values: dict[str, str]) -> bool:
    """The old implicit_gemm seed's static_assert (32 <= threads <= 1024), checked before compile."""
    try:
        threads = (int(values["BLOCK_M"]) // int(values["THREAD_M"])) * (int(values["BLOCK_N"]) // int(values["THREAD_N"]))
    except (KeyError, ValueError, ZeroDivisionError):
        return True
    return 32 <= threads <= 1024


def knob_variants(source: str, count: int, seed: int) -> list[tuple[str, str]]:
    """``count`` distinct valid knob settings of ``source`` (its default first), as (label, source)."""
    knobs = parse_knobs(source)
    if not knobs:
        return [("default", source)]
    names = sorted(knobs)
    combos = [dict(zip(names, values)) for values in itertools.product(*(knobs[n].choices for n in names))]
    random.Random(seed).shuffle(combos)
    out = [("default", source)]
    for values in combos:
        if len(out) >= count:
            break
        varied = set_knobs(source, values)
        if varied == source or not _threads_ok(values) or constraint_violation(varied):
            continue
        out.append(("-".join(f"{k}{v}" for k, v in values.items()), varied))
    return out


def write_candidates(old_root: Path, new_root: Path, task: str, variants: int, folder: Path) -> list[Path]:
    paths = []
    old_seeds = old_root / "tasks" / task / "seeds"
    for seed in sorted(old_seeds.glob("*.cu")):
        n = variants if seed.stem != "naive" else 1
        for label, source in knob_variants(seed.read_text(), n, seed=11):
            path = folder / f"{seed.stem}__{label}.cu"
            path.write_text(source)
            paths.append(path)
    # the new family's default too: the candidates an evolve run now spends its time on
    for seed in sorted((new_root / "tasks" / task / "seeds").glob("*.cu")):
        if not (old_seeds / seed.name).exists():
            path = folder / f"{seed.stem}__default.cu"
            path.write_text(seed.read_text())
            paths.append(path)
    return paths


def run_version(root: Path, cache: Path, task: str, shapes: str | None, trials: int,
                files: list[Path], json_out: Path, log: Path, timeout_s: float) -> dict:
    cmd = [sys.executable, str(root / "scripts" / "evaluate.py"), "--task", task, "--no-library",
           "--trials", str(trials), "--json", str(json_out)]
    if shapes:
        cmd += ["--shapes", shapes]
    cmd += [str(f) for f in files]
    env = dict(os.environ, EVO_FSR_CACHE=str(cache), PYTHONPATH=str(root))
    env.pop("EVO_FSR_TASKS_PATH", None)
    started = time.perf_counter()
    with log.open("w") as fh:
        try:
            proc = subprocess.run(cmd, cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout_s)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = 124
    wall_s = time.perf_counter() - started
    results = json.loads(json_out.read_text()) if json_out.is_file() else []
    return {"exit": code, "wall_s": wall_s, "results": results}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=Path, required=True, help="checkout of the older version")
    parser.add_argument("--new", type=Path, default=ROOT, help="checkout of the newer version (default: this one)")
    parser.add_argument("--task", default="conv2d")
    parser.add_argument("--shapes", default=None, help="benchmark set (default: the task's default)")
    parser.add_argument("--variants", type=int, default=8, help="knob variants per old seed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=50, help="timed calls per shape, both versions")
    parser.add_argument("--also-new-trials", type=int, nargs="*", default=[],
                        help="also the newer version at these trial counts (e.g. its evolve default, 30)")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per process")
    parser.add_argument("--out", type=Path, default=None, help="folder for logs and JSON")
    args = parser.parse_args()
    for label, root in (("--old", args.old), ("--new", args.new)):
        if not (root / "scripts" / "evaluate.py").is_file():
            print(f"{label} {root}: not a checkout (no scripts/evaluate.py)", file=sys.stderr)
            return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_cost_"))
    out.mkdir(parents=True, exist_ok=True)
    folder = out / "candidates"
    folder.mkdir(exist_ok=True)
    files = write_candidates(args.old, args.new, args.task, args.variants, folder)
    print(f"{len(files)} candidates: {', '.join(f.stem for f in files)}", flush=True)
    versions = {"old": (args.old.resolve(), args.trials), "new": (args.new.resolve(), args.trials)}
    versions.update({f"new@{t}": (args.new.resolve(), t) for t in args.also_new_trials})
    caches = {name: Path(tempfile.mkdtemp(prefix=f"bench_cost_cache_{name}_")) for name in versions}
    rows: dict[str, list[dict]] = {name: [] for name in versions}
    for round_no in range(1, args.rounds + 1):
        for name, (root, trials) in versions.items():
            run = run_version(root, caches[name], args.task, args.shapes, trials, files,
                              out / f"{name}_r{round_no}.json", out / f"{name}_r{round_no}.log", args.timeout_s)
            run["round"] = round_no
            rows[name].append(run)
            ok = sum(1 for r in run["results"] if r.get("status") == "ok")
            ev = [float(r.get("evaluate_seconds", 0.0)) for r in run["results"]]
            print(f"round {round_no} {name}: exit {run['exit']}, {len(run['results'])} results ({ok} ok), "
                  f"wall {run['wall_s']:.1f} s, evaluate median {_median(ev):.2f} s", flush=True)
    print()
    print(f"| version | checkout | trials | candidates | verdicts (last round) | evaluate s/candidate, median "
          f"(rounds 2+) | compile s/candidate, median (round 1) | process wall s/candidate, median (rounds 2+) |")
    print("|---|---|---|---|---|---|---|---|")
    summary = {}
    for name, runs in rows.items():
        later = runs[1:] or runs
        evaluate = [float(r.get("evaluate_seconds", 0.0)) for run in later for r in run["results"]]
        compile_s = [float(r.get("compile_seconds", 0.0)) for r in runs[0]["results"]]
        wall = [run["wall_s"] / max(1, len(files)) for run in later]
        statuses: dict[str, int] = {}
        for r in runs[-1]["results"]:
            statuses[r.get("status", "?")] = statuses.get(r.get("status", "?"), 0) + 1
        summary[name] = {"evaluate_median_s": _median(evaluate), "compile_median_s": _median(compile_s),
                         "wall_per_candidate_median_s": _median(wall)}
        print(f"| {name} | {versions[name][0]} | {versions[name][1]} | {len(files)} | {statuses} | {_median(evaluate):.2f} | "
              f"{_median(compile_s):.2f} | {_median(wall):.2f} |")
    old = summary["old"]
    for name in (n for n in summary if n != "old"):
        new = summary[name]
        if old["evaluate_median_s"] > 0 and old["wall_per_candidate_median_s"] > 0:
            print(f"{name} / old: evaluate {new['evaluate_median_s'] / old['evaluate_median_s']:.2f}x, "
                  f"process wall per candidate {new['wall_per_candidate_median_s'] / old['wall_per_candidate_median_s']:.2f}x")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
