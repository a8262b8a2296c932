#!/usr/bin/env python3
"""Candidates per minute of the same evolve run on 1, 2, ... GPUs of this host; prints a table.

Each GPU count runs ``scripts/evolve.py`` once, back to back in this one invocation, with its
own run directory and its own empty compile cache (so no run profits from another's
compiles).  Candidates per minute = evaluated candidates (candidates.jsonl) / wall minutes of
the whole run, Ray start-up and generation 0 included; also given without generation 0
(steady state).  With ``--timeout-s`` a run still going is stopped with Ctrl-C (SIGINT) at that
time and reported as partial: the candidates its evaluators finished within the window, per
minute of the window (so runs of different GPU counts are compared over the same wall time).

    python scripts/bench_scaling.py --task conv2d --pop 32 --gens 10 --gpus 1 2 \\
        --mode steady -- --shapes quick --set eval.max_trials=20
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _records(run: Path) -> list[dict]:
    path = run / "candidates.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("kind") == "evaluated":
            out.append(rec)
    return out


def _finished_unix_s(record: dict) -> float:
    """When the evaluator finished a record's candidate (0 when not recorded: counted)."""
    result = record.get("result", {})
    started = float(result.get("started_unix_s") or 0.0)
    return started + float(result.get("evaluate_seconds", 0.0)) if started else 0.0


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _worker_usage(records: list[dict], run_start_unix_s: float) -> dict[str, float]:
    """Where the evaluators' time went: per worker, the share of its span spent evaluating, and
    the gaps between one candidate's end and the next one's start (waiting for work)."""
    by_worker: dict[str, list[tuple[float, float]]] = {}
    compile_s, evaluate_s = [], []
    for rec in records:
        result = rec.get("result", {})
        if rec.get("from_cache") or not result.get("started_unix_s"):
            continue
        start, seconds = float(result["started_unix_s"]), float(result.get("evaluate_seconds", 0.0))
        by_worker.setdefault(result.get("worker", "?"), []).append((start, seconds))
        compile_s.append(float(result.get("compile_seconds", 0.0)))
        evaluate_s.append(seconds)
    if not by_worker:
        return {}
    busy, span, gaps = 0.0, 0.0, []
    for runs in by_worker.values():
        runs.sort()
        busy += sum(seconds for _, seconds in runs)
        span += runs[-1][0] + runs[-1][1] - runs[0][0]
        gaps += [b[0] - (a[0] + a[1]) for a, b in zip(runs, runs[1:])]
    first = min(runs[0][0] for runs in by_worker.values())
    return {"workers": len(by_worker), "busy_share": busy / span if span > 0 else 0.0,
            "first_start_s": first - run_start_unix_s, "gap_median_s": _median(gaps),
            "gap_sum_s": sum(gaps), "evaluate_median_s": _median(evaluate_s),
            "compile_median_s": _median(compile_s),
            "flagged": sum(1 for rec in records if rec.get("result", {}).get("status") == "flagged")}


def _stage_medians(records: list[dict]) -> dict[str, float]:
    """Median seconds of each evaluation stage (``EvalResult.stage_seconds``) over the run."""
    stages: dict[str, list[float]] = {}
    for rec in records:
        for name, seconds in rec.get("result", {}).get("stage_seconds", ()):
            stages.setdefault(name, []).append(float(seconds))
    return {name: _median(values) for name, values in stages.items()}


def _gen0_seconds(run: Path) -> float | None:
    snap = run / "snapshots" / "gen-0000.json"
    if not snap.is_file():
        return None
    logbook = json.loads(snap.read_text()).get("logbook", [])
    return float(logbook[0]["seconds"]) if logbook else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="conv2d")
    parser.add_argument("--pop", type=int, default=32)
    parser.add_argument("--gens", type=int, default=10)
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--mode", default="generational", choices=["generational", "steady"])
    parser.add_argument("--out", type=Path, default=None, help="parent folder of the run directories")
    parser.add_argument("--timeout-s", type=float, default=None, help="per run")
    parser.add_argument("evolve_args", nargs="*", help="more evolve.py arguments, after --")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="evo-fsr-scaling-"))
    rows = []
    usage: list[tuple[int, dict[str, float]]] = []
    stage_rows: list[tuple[int, dict[str, float]]] = []
    for gpus in args.gpus:
        run = out / f"gpus{gpus}"
        cache = out / f"cache{gpus}"
        cmd = [sys.executable, str(ROOT / "scripts" / "evolve.py"), "--task", args.task, "--pop", str(args.pop),
               "--gens", str(args.gens), "--mode", args.mode, "--set", f"ray.num_gpus={gpus}", "--out", str(run),
               *args.evolve_args]
        print(f"=== {gpus} GPU(s): {' '.join(cmd[1:])}", flush=True)
        env = {**os.environ, "EVO_FSR_CACHE": str(cache)}
        start, start_unix_s = time.perf_counter(), time.time()
        partial = False
        proc = subprocess.Popen(cmd, env=env)
        try:
            proc.wait(timeout=args.timeout_s)
        except subprocess.TimeoutExpired:   # Ctrl-C: evolve stops cleanly (and shuts Ray down)
            partial = True
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        wall = time.perf_counter() - start
        records = _records(run)
        if partial:     # a window of --timeout-s seconds: the candidates evaluated within it
            cutoff = start_unix_s + float(args.timeout_s)
            records = [r for r in records if _finished_unix_s(r) <= cutoff]
            wall = float(args.timeout_s)
        gen0 = _gen0_seconds(run)
        after0 = [r for r in records if r.get("generation", 0) > 0]
        rate = len(records) / wall * 60 if wall > 0 else 0.0
        steady = len(after0) / (wall - gen0) * 60 if gen0 is not None and wall > gen0 else 0.0
        rows.append((gpus, len(records), wall, rate, steady, partial))
        usage.append((gpus, _worker_usage(records, start_unix_s)))
        stage_rows.append((gpus, _stage_medians(records)))
    base, base_steady = rows[0][3], rows[0][4]
    print(f"\ntask {args.task}, pop {args.pop}, gens {args.gens}, mode {args.mode}, extra: {' '.join(args.evolve_args)}")
    print(f"{'GPUs':>4} {'candidates':>10} {'seconds':>8} {'cand/min':>9} {'vs 1st':>7} "
          f"{'cand/min after gen 0':>21} {'vs 1st':>7}")
    for gpus, count, wall, rate, steady, partial in rows:
        print(f"{gpus:>4} {count:>10} {wall:>8.1f} {rate:>9.1f} {rate / base if base else 0:>6.2f}x "
              f"{steady:>21.1f} {steady / base_steady if base_steady else 0:>6.2f}x{'  (partial: timed out)' if partial else ''}")
    print(f"\n{'GPUs':>4} {'workers':>7} {'busy':>6} {'1st eval at s':>13} {'gap median s':>12} "
          f"{'gaps s':>7} {'evaluate median s':>17} {'compile median s':>16} {'flagged':>7}")
    for gpus, use in usage:
        if use:
            print(f"{gpus:>4} {use['workers']:>7.0f} {use['busy_share']:>6.1%} {use['first_start_s']:>13.1f} "
                  f"{use['gap_median_s']:>12.3f} {use['gap_sum_s']:>7.1f} {use['evaluate_median_s']:>17.3f} "
                  f"{use['compile_median_s']:>16.2f} {use['flagged']:>7.0f}")
    print("busy: evaluating, as a share of each worker's first start to last end; gaps: a worker's "
          "idle time between one candidate and the next")
    names = sorted({n for _, st in stage_rows for n, v in st.items() if v >= 0.002},
                   key=lambda n: -max(st.get(n, 0.0) for _, st in stage_rows))
    if names:
        print(f"\nmedian seconds per evaluation stage (stages of 2 ms or more)\n{'stage':<28}"
              + "".join(f"{f'{g} GPU(s)':>10}" for g, _ in stage_rows))
        for name in names:
            print(f"{name:<28}" + "".join(f"{st.get(name, 0.0):>10.3f}" for _, st in stage_rows))
    print(f"runs under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
