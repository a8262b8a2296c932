"""Library-relative figures (issue 12): "x of library" next to the speedup over naive in the
evaluate table, the evolve progress line and summary, and best.cu's header."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from evo_fsr import report_lines
from evo_fsr.commands.evaluate import library_table
from evo_fsr.commands.evolve import main as evolve_main
from evo_fsr.backend.inline import InlineBackend
from evo_fsr.testing.synthetic import SYNTHETIC_GPU, SyntheticEvaluator
from evo_fsr.types import EvalResult, ShapeTiming, Status, geometric_mean


def _timing(label: str, kernel_ms: float, naive_ms: float, library_ms: float = 0.0) -> ShapeTiming:
    return ShapeTiming(shape_label=label, median_ms=kernel_ms, baseline_median_ms=naive_ms, host_median_ms=kernel_ms,
                       baseline_host_median_ms=naive_ms, trials=10, speed_of_light_ms=0.01, library_ms=library_ms)


def _result(*timings: ShapeTiming, status: Status = Status.OK) -> EvalResult:
    return EvalResult(candidate_id="c" * 16, task="conv2d", status=status, summary="", timings=timings, gpu_name="GPU X")


def test_speed_line_per_shape_and_geomean() -> None:
    result = _result(_timing("a", 1.0, 4.0, library_ms=0.5), _timing("b", 2.0, 4.0, library_ms=4.0))
    line = report_lines.speed_line(result)
    assert line.startswith(f"{geometric_mean([4.0, 2.0]):.3f}x over naive")
    assert f"{geometric_mean([0.5, 2.0]):.2f}x of library" in line and "2 shapes" in line
    assert report_lines.shape_cells(result.timings[0]) == "a 4.00x naive, 0.50x lib, 1% SOL"   # floor 0.01 ms
    assert report_lines.speed_cell(result) == f"{geometric_mean([4.0, 2.0]):.3f}x / 1.00x lib"
    assert report_lines.progress_best(2.83, result) == "2.83x (1.00x lib)"


def test_a_missing_library_figure_is_not_invented() -> None:
    partial = _result(_timing("a", 1.0, 4.0, library_ms=0.5), _timing("b", 2.0, 4.0))
    assert report_lines.geomean_of_library(partial) is None
    assert "library not measured" in report_lines.speed_line(partial)
    assert report_lines.shape_cells(partial.timings[1]).endswith("- lib, 0.5% SOL")
    no_floor = replace(partial.timings[1], speed_of_light_ms=0.0)
    assert report_lines.shape_cells(no_floor).endswith("- lib")
    # a library time measured by the caller fills the gap
    assert report_lines.geomean_of_library(partial, {"b": 4.0}) == pytest.approx(1.0)
    wrong = _result(_timing("a", 1.0, 4.0, library_ms=0.5), status=Status.WRONG)
    assert report_lines.speed_cell(wrong) == "-" and report_lines.progress_best(None, wrong) == "none correct"


def test_best_header_says_both() -> None:
    result = _result(_timing("conv2_x", 0.5, 2.0, library_ms=0.25))
    header = report_lines.best_header("conv2d", "c" * 16, result, "found in generation 3 by knob_mutate")
    assert "4.000x over naive, 0.50x of library" in header and "on GPU X" in header
    assert "conv2_x 4.00x naive, 0.50x lib, 2% SOL" in header and header.endswith("found in generation 3 by knob_mutate")


def test_evaluate_table_shows_library_columns() -> None:
    result = _result(_timing("conv2_x", 0.5, 2.0, library_ms=0.25), _timing("conv3_x", 1.0, 2.0))
    table = library_table(result, {"conv3_x": 2.0})          # conv3_x's library time measured by the caller
    rows = {line.split()[0]: line for line in table.splitlines()[1:-1]}
    assert "of library" in table.splitlines()[0]
    assert re.search(r"0\.2500\s+0\.50x", rows["conv2_x"]) and re.search(r"2\.0000\s+2\.00x", rows["conv3_x"])
    assert table.splitlines()[-1] == "  geomean: 2.828x over naive, 1.00x of library (geomean over 2 shapes)"
    without = library_table(_result(_timing("conv2_x", 0.5, 2.0)))
    assert "library not measured" in without


def _with_library(library_ms: float):  # type: ignore[no-untyped-def]
    """The synthetic backend, with a library time on every shape (as the evaluator will fill it)."""
    evaluator = SyntheticEvaluator("conv2d")

    def evaluate(candidate, compiled=None):  # type: ignore[no-untyped-def]
        result = evaluator.evaluate(candidate, compiled)
        return replace(result, timings=tuple(replace(t, library_ms=library_ms) for t in result.timings))

    return lambda config, task: InlineBackend(evaluate, SYNTHETIC_GPU)


def test_evolve_progress_summary_and_best_show_the_library(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert evolve_main(["--task", "conv2d", "--pop", "8", "--gens", "2", "--out", str(out)],
                       backend_factory=_with_library(0.5)) == 0
    printed = capsys.readouterr().out
    progress = [line for line in printed.splitlines() if line.startswith("gen")]
    best = float(re.search(r"best\s+([\d.]+)x", progress[-1]).group(1))
    assert f"({0.5 * best:.2f}x lib)" in progress[-1]             # library 0.5 ms, kernel 1/best ms
    rows = [line for line in printed.splitlines() if re.match(r"\s+1\s", line)]
    assert rows and re.search(r"[\d.]+x / [\d.]+x lib", rows[0])
    assert re.search(r"best: [\d.]+x over naive, [\d.]+x of library", printed)
    header = (out / "best.cu").read_text().split("#include")[0]
    assert "x over naive," in header and "x of library" in header and "x lib" in header
