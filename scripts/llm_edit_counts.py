#!/usr/bin/env python3
"""Count what became of a run's LLM replies, by operator: children evaluated, duplicates, and
rejections with each reason (e.g. how many SEARCH/REPLACE edits applied and why others did not).

    python scripts/llm_edit_counts.py populations/conv2d/<run>
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def counts(run: Path) -> dict[str, Counter]:
    by_operator: dict[str, Counter] = {}
    for line in (run / "candidates.jsonl").read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        operator = record.get("operator") or (record.get("candidate") or {}).get("operator", "")
        if not operator.startswith("llm_"):
            continue
        kind = record.get("kind", "?")
        key = f"rejected: {record.get('reason', '')}" if kind == "rejected" else kind
        by_operator.setdefault(operator, Counter())[key] += 1
    return by_operator


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not (Path(argv[0]) / "candidates.jsonl").is_file():
        print("usage: llm_edit_counts.py RUN_DIR (a run directory with candidates.jsonl)", file=sys.stderr)
        return 2
    for operator, tally in sorted(counts(Path(argv[0])).items()):
        print(f"{operator}: {sum(tally.values())} replies")
        for key, n in tally.most_common():
            print(f"  {n:4d}  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
