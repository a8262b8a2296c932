#!/usr/bin/env python3
"""Candidates per minute of the same evolve run on 1, 2, ... GPUs of this host; prints a table.

Each GPU count runs ``scripts/evolve.py`` once, back to back in this one invocation, with its
own run directory and its own empty compile cache (so no run profits from another's
compiles).  Candidates per minute = evaluated candidates (candidates.jsonl) / wall minutes of
the whole run, Ray start-up and generation 0 included; also given without generation 0
(steady state).  A run cut short by ``--timeout-s`` is reported as partial.

    python scripts/bench_scaling.py --task conv2d --pop 32 --gens 10 --gpus 1 2 \\
        --mode steady -- --shapes quick --set eval.max_trials=20
"""
from __future__ import annotations

import argparse
import json
import os
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
    for gpus in args.gpus:
        run = out / f"gpus{gpus}"
        cache = out / f"cache{gpus}"
        cmd = [sys.executable, str(ROOT / "scripts" / "evolve.py"), "--task", args.task, "--pop", str(args.pop),
               "--gens", str(args.gens), "--mode", args.mode, "--set", f"ray.num_gpus={gpus}", "--out", str(run),
               *args.evolve_args]
        print(f"=== {gpus} GPU(s): {' '.join(cmd[1:])}", flush=True)
        env = {**os.environ, "EVO_FSR_CACHE": str(cache)}
        start = time.perf_counter()
        partial = False
        try:
            subprocess.run(cmd, env=env, timeout=args.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            partial = True
        wall = time.perf_counter() - start
        records = _records(run)
        gen0 = _gen0_seconds(run)
        after0 = [r for r in records if r.get("generation", 0) > 0]
        rate = len(records) / wall * 60 if wall > 0 else 0.0
        steady = len(after0) / (wall - gen0) * 60 if gen0 is not None and wall > gen0 else 0.0
        rows.append((gpus, len(records), wall, rate, steady, partial))
    base, base_steady = rows[0][3], rows[0][4]
    print(f"\ntask {args.task}, pop {args.pop}, gens {args.gens}, mode {args.mode}, extra: {' '.join(args.evolve_args)}")
    print(f"{'GPUs':>4} {'candidates':>10} {'seconds':>8} {'cand/min':>9} {'vs 1st':>7} "
          f"{'cand/min after gen 0':>21} {'vs 1st':>7}")
    for gpus, count, wall, rate, steady, partial in rows:
        print(f"{gpus:>4} {count:>10} {wall:>8.1f} {rate:>9.1f} {rate / base if base else 0:>6.2f}x "
              f"{steady:>21.1f} {steady / base_steady if base_steady else 0:>6.2f}x{'  (partial: timed out)' if partial else ''}")
    print(f"runs under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
