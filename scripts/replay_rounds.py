#!/usr/bin/env python3
"""Replay timing rounds recorded on a GPU (``probe_rounds.py``'s rounds.json) through the current
credit rules, on any machine: per job, how often the first round was charged, how often the
claims were set aside, and the speedups credited.

    python3 scripts/replay_rounds.py RUN/rounds.json [more.json ...]   # .json or .json.gz

A replay that needed a round the recording lacks (the recording's rules charged less) served
the last recorded one again; such speedups are marked ``?`` and are estimates.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.verdict.replay import Replayed, load, replay  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recordings", nargs="+", type=Path)
    args = parser.parse_args()
    by_job: dict[str, list[Replayed]] = defaultdict(list)
    for path in args.recordings:
        try:
            lines = load(path)
        except (OSError, json.JSONDecodeError) as e:
            print(f"error: {path}: {e}", file=sys.stderr)
            return 2
        for record in lines:
            try:
                by_job[record["job"]].append(replay(record))
            except (KeyError, IndexError, TypeError, ValueError) as e:
                print(f"error: {path}: a line that is not a probe_rounds.py record ({e!r})", file=sys.stderr)
                return 2
    print(f"{'job':44s} {'n':>3s} {'charged 1st':>11s} {'set aside':>9s} {'median x':>8s}  speedups")
    for job, rows in by_job.items():
        speedups = " ".join(f"{r.speedup:.2f}{'?' if r.reused else ''}" for r in sorted(rows, key=lambda r: r.rep))
        print(f"{job:44s} {len(rows):3d} {sum(r.charged_first for r in rows):11d} {sum(r.strict for r in rows):9d} "
              f"{statistics.median(r.speedup for r in rows):8.2f}  {speedups}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
