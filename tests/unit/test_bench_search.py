"""scripts/bench_search.py on the CPU (--synthetic): optimum, evolve and random search curves."""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evo_fsr.knobs import KnobSpace
from evo_fsr.tasks import get_task
from evo_fsr.testing.synthetic import SyntheticEvaluator, synthetic_speedup
from evo_fsr.types import Candidate, EvalResult

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_search.py"
spec = importlib.util.spec_from_file_location("bench_search", SCRIPT)
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_search"] = bench           # its dataclasses look their module up
spec.loader.exec_module(bench)


def test_best_after_checkpoints() -> None:
    assert bench.best_after([1.0, 3.0, 2.0, 5.0], [1, 2, 4, 5]) == [1.0, 3.0, 5.0, None]


def test_each_candidate_is_evaluated_once() -> None:
    seen: list[str] = []
    handed: list[object] = []

    def evaluate(candidate, compiled=None):  # type: ignore[no-untyped-def]
        seen.append(candidate.id)
        handed.append(compiled)
        return candidate.id

    cached = bench.CachedEvaluator(evaluate, compile_fn=lambda source: f"binary of {source}")
    cached.prefetch(["a"], workers=2)
    for source in ("a", "b", "a", "a"):
        cached(Candidate("conv2d", source))
    assert cached.calls == 4 and len(seen) == 2
    assert handed == ["binary of a", None]          # the prefetched binary is handed over once


def test_synthetic_run_reports_the_true_optimum_and_both_curves(tmp_path: Path) -> None:
    source = get_task("conv2d").seeds()["implicit_gemm"]
    space = KnobSpace.of(source)
    truth = max(synthetic_speedup(space.render(v)) for v in space.all_valid())
    out = subprocess.run([sys.executable, str(SCRIPT), "--synthetic", "--checkpoints", "16", "48", "--pop", "8",
                          "--repeats", "2", "--markdown", str(tmp_path / "t.md")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"optimum: {truth:.3f}x over naive (exhaustive: all {sum(1 for _ in space.all_valid())} valid" in text
    rows = {int(m.group(1)): m for m in re.finditer(
        r"^\| (\d+) \| ([\d.]+)x \((\d+)%\) \| ([\d.]+)x \((\d+)%\) \|$", text, re.M)}
    assert sorted(rows) == [16, 48]
    for n, row in rows.items():
        for value in (float(row.group(2)), float(row.group(4))):
            assert 1.0 < value <= truth + 1e-9
    assert float(rows[48].group(2)) >= float(rows[16].group(2))      # more evaluations never lose ground
    assert (tmp_path / "t.md").read_text().strip() == text.strip()


def test_sampled_optimum_says_how_large(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--synthetic", "--checkpoints", "8", "--pop", "4",
                          "--exhaustive-limit", "10", "--sample", "25"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "best of a uniform random sample of 25 valid combinations (of 870)" in out.stdout


# -- --results and --deadline-s: a run split over several invocations -------------------------
#: Small enough to be quick, large enough that evolve and random search need verdicts of their own.
SMALL = ["--synthetic", "--checkpoints", "8", "16", "--pop", "4", "--repeats", "2",
         "--exhaustive-limit", "10", "--sample", "12"]
PARTIAL = "partial: run the same command again to continue"


@pytest.fixture
def evaluated(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Ids handed to the synthetic evaluator, in order: the evaluations that really ran."""
    seen: list[str] = []
    original = SyntheticEvaluator.evaluate

    def counting(self, candidate, compiled=None):  # type: ignore[no-untyped-def]
        seen.append(candidate.id)
        return original(self, candidate, compiled)

    monkeypatch.setattr(SyntheticEvaluator, "evaluate", counting)
    return seen


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = bench.main(argv)
    return code, capsys.readouterr().out


def stored_ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def test_a_rerun_with_every_verdict_stored_evaluates_nothing(tmp_path: Path, evaluated: list[str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, plain = run_main(SMALL, capsys)
    assert code == 0 and len(evaluated) > 12          # evolve and random search went past the optimum's sample
    results = tmp_path / "r.jsonl"
    evaluated.clear()
    code, first = run_main(SMALL + ["--results", str(results)], capsys)
    assert code == 0 and first == plain
    assert stored_ids(results) == evaluated          # one line per evaluation, in order, none twice
    evaluated.clear()
    code, again = run_main(SMALL + ["--results", str(results)], capsys)
    assert code == 0 and evaluated == []
    assert again == first and "| 16 |" in again


@pytest.mark.parametrize("allowed", [3, 20])         # stopped in the optimum's pass / in evolve
def test_a_deadline_stops_with_code_3_and_keeps_every_verdict(
        allowed: int, tmp_path: Path, evaluated: list[str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    code, uninterrupted = run_main(SMALL, capsys)
    total = len(evaluated)
    assert code == 0 and total > allowed
    evaluated.clear()
    monkeypatch.setattr(bench, "_now", lambda: float(len(evaluated)))    # one second per evaluation
    results = tmp_path / "r.jsonl"
    code, out = run_main(SMALL + ["--results", str(results), "--deadline-s", str(allowed - 0.5)], capsys)
    assert code == bench.PARTIAL_EXIT
    assert f"{allowed} distinct candidates stored" in out and PARTIAL in out and "| 16 |" not in out
    assert len(evaluated) == allowed and stored_ids(results) == evaluated
    evaluated.clear()
    code, rest = run_main(SMALL + ["--results", str(results)], capsys)
    assert code == 0 and rest == uninterrupted
    assert len(evaluated) == total - allowed and not set(evaluated) & set(stored_ids(results)[:allowed])


def test_invocations_with_a_deadline_add_up_to_the_uninterrupted_run(
        tmp_path: Path, evaluated: list[str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    code, uninterrupted = run_main(SMALL, capsys)
    total = len(evaluated)
    evaluated.clear()
    monkeypatch.setattr(bench, "_now", lambda: float(len(evaluated)))
    argv = SMALL + ["--results", str(tmp_path / "r.jsonl"), "--deadline-s", "6.5"]    # 7 evaluations each
    codes = []
    while not codes or codes[-1] != 0:
        code, out = run_main(argv, capsys)
        codes.append(code)
        assert len(codes) <= total // 7 + 2, "no progress"
    assert codes[:-1] == [bench.PARTIAL_EXIT] * (len(codes) - 1) and len(codes) == -(-total // 7)
    assert out == uninterrupted and len(evaluated) == total == len(stored_ids(tmp_path / "r.jsonl"))


def test_a_torn_last_line_is_skipped_and_evaluated_again(
        tmp_path: Path, evaluated: list[str], capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    results = tmp_path / "r.jsonl"
    code, first = run_main(SMALL + ["--results", str(results)], capsys)
    ids = stored_ids(results)
    text = results.read_text()
    results.write_text(text[:-40])                    # killed while writing the last line
    evaluated.clear()
    with caplog.at_level(logging.WARNING):
        code, again = run_main(SMALL + ["--results", str(results)], capsys)
    assert code == 0 and again == first
    assert evaluated == ids[-1:]
    assert "torn last line" in caplog.text
    assert stored_ids(results) == ids                 # the torn line was cut, its verdict appended whole


def test_lines_of_another_run_are_ignored(tmp_path: Path, evaluated: list[str],
                                          capsys: pytest.CaptureFixture[str],
                                          caplog: pytest.LogCaptureFixture) -> None:
    results = tmp_path / "r.jsonl"
    code, first = run_main(SMALL + ["--results", str(results)], capsys)
    lines = results.read_text().splitlines()
    other = {**json.loads(lines[0]), "family": "direct"}
    results.write_text("\n".join([json.dumps(other)] + lines[1:]) + "\n")
    evaluated.clear()
    with caplog.at_level(logging.WARNING):
        code, again = run_main(SMALL + ["--results", str(results)], capsys)
    assert code == 0 and again == first
    assert evaluated == [other["id"]]                 # its verdict was not taken from the other run's line
    assert "ignored 1 line(s) of another run" in caplog.text


def test_stored_verdicts_come_back_equal(tmp_path: Path) -> None:
    source = get_task("conv2d").seeds()["implicit_gemm"]
    synthetic = SyntheticEvaluator("conv2d", shapes=("small", "large"))
    verdicts = [synthetic.evaluate(Candidate("conv2d", text)) for text in (source, source + "\nint SYNTHETIC_WRONG;")]
    key = {"task": "conv2d", "family": "implicit_gemm", "shapes": "quick", "gpu": "synthetic (no GPU)"}
    stored = bench.ResultsFile(tmp_path / "r.jsonl", key)
    for verdict in verdicts:
        stored.append(verdict.candidate_id, verdict)
    loaded = bench.ResultsFile(tmp_path / "r.jsonl", key).load()
    assert list(loaded.values()) == verdicts
    assert [bench.score(v) for v in loaded.values()] == [bench.score(v) for v in verdicts]
    assert bench.score(verdicts[0]) > 1.0 and isinstance(loaded[verdicts[0].candidate_id], EvalResult)
    assert bench.ResultsFile(tmp_path / "r.jsonl", {**key, "shapes": "full"}).load() == {}


def test_a_deadline_needs_a_results_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(SMALL + ["--deadline-s", "60"]) == 2
    assert "--deadline-s needs --results" in capsys.readouterr().err


def test_a_rerun_in_another_process_makes_the_same_choices(tmp_path: Path) -> None:
    """Seeded searches, whatever the string hash seed: the second process finds every verdict it
    asks for in the file (a deadline of 0 would stop it at the first new evaluation)."""
    argv = [sys.executable, str(SCRIPT)] + SMALL + ["--results", str(tmp_path / "r.jsonl")]
    runs = [subprocess.run(argv + extra, cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHONHASHSEED": seed})
            for seed, extra in (("1", []), ("2", ["--deadline-s", "0"]))]
    assert [r.returncode for r in runs] == [0, 0], runs[1].stdout + runs[1].stderr
    assert runs[1].stdout == runs[0].stdout and "| 16 |" in runs[0].stdout
