"""scripts/bench_scaling.py's accounting of where the evaluators' time went."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_scaling.py"
spec = importlib.util.spec_from_file_location("bench_scaling", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def _record(worker: str, start: float, seconds: float, status: str = "ok") -> dict:
    return {"kind": "evaluated", "result": {"worker": worker, "started_unix_s": start, "evaluate_seconds": seconds,
                                            "compile_seconds": 1.0, "status": status,
                                            "stage_seconds": [["validate", seconds / 2]]}}


def test_busy_share_gaps_and_first_start() -> None:
    records = [_record("a", 110.0, 1.0), _record("a", 111.5, 1.0),       # a: 2 s busy of 2.5, gap 0.5
               _record("b", 110.0, 2.5, "flagged")]                       # b: 2.5 s busy of 2.5
    use = bench._worker_usage(records, run_start_unix_s=100.0)
    assert use["workers"] == 2 and use["first_start_s"] == pytest.approx(10.0)
    assert use["busy_share"] == pytest.approx(4.5 / 5.0)
    assert use["gap_sum_s"] == pytest.approx(0.5) and use["flagged"] == 1
    assert bench._stage_medians(records)["validate"] == pytest.approx(0.5)


def test_a_window_counts_what_finished_inside_it() -> None:
    assert bench._finished_unix_s(_record("a", 110.0, 1.5)) == pytest.approx(111.5)
    assert bench._finished_unix_s({"result": {}}) == 0.0
