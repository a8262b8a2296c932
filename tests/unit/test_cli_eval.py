"""scripts/evaluate.py and `evo-fsr tasks` as a user runs them (subprocesses, real nvcc)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_compile_only_works_without_a_gpu(tmp_path: Path, nvcc_available: bool) -> None:
    if not nvcc_available:
        pytest.skip("nvcc not found")
    bad = tmp_path / "bad.cu"
    bad.write_text("this is not CUDA\n")
    out = _run("scripts/evaluate.py", "--task", "conv2d", "--compile-only", "seed:naive", str(bad),
               env={"EVO_FSR_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 1
    assert "naive: ok (sm_" in out.stdout
    assert "bad.cu: COMPILE_ERROR" in out.stdout and "error" in out.stdout


def test_bad_input_gives_one_line_and_no_traceback(tmp_path: Path) -> None:
    for args in (["--task", "nope", "x.cu"], ["--task", "conv2d", str(tmp_path / "missing.cu")],
                 ["--task", "conv2d", "seed:nope"], ["--task", "conv2d", "--shape", "N=1", "seed:naive"],
                 ["--task", "conv2d", "--shapes", "nope", "seed:naive"],
                 ["--task", "prefix_sum", "seed:lookback@LOAD=9"], ["--task", "prefix_sum", "seed:lookback@FOO=1"],
                 ["--task", "prefix_sum", "seed:lookback@LOAD"], ["--task", "prefix_sum", "seed:naive@LOAD=1"],
                 ["--task", "prefix_sum", "seed:lookback@THREADS=512,ITEMS=32"]):
        out = _run("scripts/evaluate.py", *args)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.startswith("error: ") and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_no_gpu_gives_one_clear_line(tmp_path: Path) -> None:
    from tests.conftest import gpu_unavailable_reason
    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present: this checks the no-GPU message")
    out = _run("scripts/evaluate.py", "--task", "conv2d", "seed:naive", env={"EVO_FSR_CACHE": str(tmp_path)})
    assert out.returncode == 3
    assert "no usable CUDA GPU" in out.stderr and "Traceback" not in out.stderr


def test_tasks_listing() -> None:
    out = _run("-m", "evo_fsr.cli", "tasks")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "conv2d" in out.stdout and "resnet50 (5)" in out.stdout
    one = _run("-m", "evo_fsr.cli", "tasks", "conv2d")
    assert 'extern "C" int launch' in one.stdout and "benchmark set resnet50 (default)" in one.stdout


def test_knobs_set_on_the_command_line(tmp_path: Path, nvcc_available: bool) -> None:
    """``seed:NAME@KNOB=VALUE,...`` (and a file path with the same suffix) evaluates the source with
    those knobs set, labelled with them; a file whose own name holds an ``@`` is taken whole."""
    from evo_fsr.commands.evaluate import _load_source
    from evo_fsr.knobs import parse_knobs
    from evo_fsr.tasks import get_task

    seeds = get_task("prefix_sum").seeds()
    label, source = _load_source(seeds, "seed:lookback@LOAD=2,CACHE=1")
    knobs = parse_knobs(source)
    assert label == "lookback@LOAD=2,CACHE=1"
    assert (knobs["LOAD"].value, knobs["CACHE"].value) == ("2", "1")
    assert {n: k.value for n, k in knobs.items() if n not in ("LOAD", "CACHE")} == \
        {n: k.value for n, k in parse_knobs(seeds["lookback"]).items() if n not in ("LOAD", "CACHE")}
    plain = tmp_path / "k.cu"
    plain.write_text(seeds["lookback"])
    assert parse_knobs(_load_source(seeds, f"{plain}@ITEMS=8")[1])["ITEMS"].value == "8"
    odd = tmp_path / "k@ITEMS=8.cu"
    odd.write_text(seeds["lookback"])
    assert _load_source(seeds, str(odd)) == (odd.name, seeds["lookback"])
    if not nvcc_available:
        return
    out = _run("scripts/evaluate.py", "--task", "prefix_sum", "--compile-only", "seed:lookback@LOAD=1,ITEMS=8",
               env={"EVO_FSR_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "lookback@LOAD=1,ITEMS=8: ok (sm_" in out.stdout
