"""scripts/bench_search.py on the CPU (--synthetic): optimum, evolve and random search curves."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from evo_fsr.knobs import KnobSpace
from evo_fsr.tasks import get_task
from evo_fsr.testing.synthetic import synthetic_speedup
from evo_fsr.types import Candidate

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
