"""scripts/bench_vs_library.py's table from verdicts (the GPU measurement itself needs a GPU)."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from evo_fsr.tasks import TASKS_PATH_ENV, get_task
from evo_fsr.types import EvalResult, ShapeTiming, Status

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_vs_library.py"
spec = importlib.util.spec_from_file_location("bench_vs_library", SCRIPT)
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_vs_library"] = bench
spec.loader.exec_module(bench)


def _timing(label: str, kernel_ms: float, library_ms: float = 0.0) -> ShapeTiming:
    return ShapeTiming(shape_label=label, median_ms=kernel_ms, baseline_median_ms=4.0, host_median_ms=kernel_ms,
                       baseline_host_median_ms=4.0, trials=10, speed_of_light_ms=0.1, library_ms=library_ms)


def test_rows_and_ratios() -> None:
    result = EvalResult(candidate_id="c" * 16, task="conv2d", status=Status.OK, summary="",
                        timings=(_timing("conv2_x", 0.5, library_ms=0.25), _timing("conv3_x", 1.0)))
    rows = bench.rows_for("conv2d", "best.cu", result, {"conv3_x": 2.0})
    by_shape = {r[2]: dict(zip(bench.HEADER, r)) for r in rows}
    assert by_shape["conv2_x"]["vs naive"] == "8.00x" and by_shape["conv2_x"]["of library"] == "0.50x"
    assert by_shape["conv2_x"]["kernel % SOL"] == "20.0%" and by_shape["conv2_x"]["library % SOL"] == "40.0%"
    assert by_shape["conv3_x"]["library ms"] == "2.0000" and by_shape["conv3_x"]["of library"] == "2.00x"
    line = bench.geomean_line("conv2d", "best.cu", result, {"conv3_x": 2.0})
    assert "5.657x over naive" in line and "1.00x of library" in line
    text = bench.render(rows, "GPU X", [line], markdown=True)
    assert text.startswith("GPU: GPU X") and text.count("\n| conv2d |") == 2


def test_a_failed_verdict_is_one_row() -> None:
    result = EvalResult(candidate_id="c" * 16, task="conv2d", status=Status.COMPILE_ERROR, summary="compile error: x")
    rows = bench.rows_for("conv2d", "k.cu", result, {})
    assert len(rows) == 1 and rows[0][3] == "compile_error" and len(rows[0]) == len(bench.HEADER)


def test_kernel_specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task = get_task("conv2d")
    assert bench.resolve_kernel(task, None)[0] == "seed:implicit_gemm"
    assert [label for label, _ in bench.resolve_kernels(task, None)] == ["seed:implicit_gemm", "seed:implicit_gemm_v2"]
    assert [label for label, _ in bench.resolve_kernels(task, "seed:naive")] == ["seed:naive"]
    assert bench.resolve_kernel(get_task("relu"), None)[0] == "seed:vectorized"   # its family
    assert bench.resolve_kernel(get_task("topk"), None)[0] == "seed:radix_select"
    # a task with no family (every built-in one has one now): a user's copy of topk without it
    shutil.copytree(Path(__file__).resolve().parents[2] / "tasks" / "topk", tmp_path / "user" / "topk")
    (tmp_path / "user" / "topk" / "seeds" / "radix_select.cu").unlink()
    yaml_file = tmp_path / "user" / "topk" / "task.yaml"       # and the chain twin it names
    yaml_file.write_text("".join(line for line in yaml_file.read_text().splitlines(keepends=True)
                                 if not line.startswith("chain_twin:")))
    monkeypatch.setenv(TASKS_PATH_ENV, str(tmp_path / "user"))
    assert bench.resolve_kernel(get_task("topk"), None)[0] == "seed:naive"         # no family: naive
    monkeypatch.delenv(TASKS_PATH_ENV)
    (tmp_path / "best.cu").write_text("// best\n")
    assert bench.resolve_kernel(task, str(tmp_path)) == (str(tmp_path / "best.cu"), "// best\n")
    with pytest.raises(SystemExit, match="no such seed"):
        bench.resolve_kernel(task, "seed:nope")
    with pytest.raises(SystemExit, match="no such file"):
        bench.resolve_kernel(task, str(tmp_path / "missing.cu"))


def test_main_runs_the_table_end_to_end_on_a_fake_evaluator(tmp_path: Path, monkeypatch, capsys) -> None:
    """The script's flow (kernel specs, library times filled where the verdict has none, the
    markdown file) with the GPU parts replaced: an evaluator that reports fixed timings."""
    import evo_fsr.verdict.evaluate as evaluate_module
    from evo_fsr.testing.synthetic import SYNTHETIC_GPU

    class FakeEvaluator:
        def __init__(self, task, config) -> None:  # type: ignore[no-untyped-def]
            self.task, self.bench_shapes = task, task.benchmark(config.benchmark)
            self.closed = False

        gpu_info = SYNTHETIC_GPU

        def evaluate(self, candidate):  # type: ignore[no-untyped-def]
            timings = tuple(_timing(s.label, 0.5, library_ms=0.25 if i == 0 else 1.0)
                            for i, s in enumerate(self.bench_shapes))
            return EvalResult(candidate_id=candidate.id, task=candidate.task, status=Status.OK, summary="",
                              timings=timings, gpu_name=SYNTHETIC_GPU.name)

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr(evaluate_module, "Evaluator", FakeEvaluator)
    out = tmp_path / "table.md"
    assert bench.main(["--tasks", "conv2d", "--shapes", "quick", "--kernel", "conv2d=seed:naive",
                       "--markdown", str(out)]) == 0
    text = out.read_text()
    assert text.startswith(f"GPU: {SYNTHETIC_GPU.name}") and "| conv2d | seed:naive |" in text
    assert "0.50x" in text and "2.00x" in text          # 0.25 / 0.5 and 1.0 / 0.5
    assert "conv2d (seed:naive): geomean 8.000x over naive, 1.00x of library" in capsys.readouterr().out


def test_percent_of_copy() -> None:
    """bytes / kernel time against the measured copy: 1 GB in 1 ms is 1000 GB/s, half of 2000."""
    assert bench.of_copy(1e9, 1.0, 2000.0) == "50.0%"
    assert bench.of_copy(None, 1.0, 2000.0) == "-" and bench.of_copy(1e9, 1.0, 0.0) == "-"
    result = EvalResult(candidate_id="c" * 16, task="relu", status=Status.OK, summary="",
                        timings=(_timing("n", 0.5, library_ms=0.5),))
    row = dict(zip(bench.HEADER, bench.rows_for("relu", "k", result, {}, {"n": 9e8}, 3000.0)[0]))
    assert row["kernel % of copy"] == "60.0%"
