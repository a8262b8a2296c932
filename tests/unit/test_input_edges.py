"""Issue 15, bad input at the edges: shapes, --seeds/--trials, the launch prototype in compile
diagnostics, the FP32 peak by compute capability, no CUDA driver (CLI checked from outside)."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from evo_fsr import shape_checks
from evo_fsr.commands.evaluate import build_parser, eval_config
from evo_fsr.tasks import TaskError, get_task
from evo_fsr.verdict import gpu
from evo_fsr.verdict.compile import compile_source

ROOT = Path(__file__).resolve().parents[2]
CONV = "N=1,C=3,H=8,W=8,K=4,R=3,S=3,pad=1,stride=1"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def _one_error_line(out: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert out.returncode == code, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    return lines[0]


# -- shapes, in the task layer -------------------------------------------------------------
@pytest.mark.parametrize("text, words", [
    (CONV + ",Z=3", ("unknown dim Z=3", "stride")),
    (CONV.replace("stride=1", "stride=0"), ("stride=0", "must be positive")),
    (CONV.replace("pad=1", "pad=-1"), ("pad=-1", "must not be negative")),
    (CONV.replace("N=1", "N=0"), ("N=0", "must be positive")),
    (CONV.replace("N=1", "N=1.5"), ("N=1.5", "integer")),
    (CONV.replace("N=1", "N=inf"), ("N=inf", "finite")),
    (CONV.replace("N=1", "N=nan"), ("N=nan", "finite")),
    (CONV.replace("H=8", "H=2").replace("pad=1", "pad=0"), ("output y would be empty",)),
    (CONV + ",P=3", ("P=3 contradicts", "leave derived dims out")),
    ("N=100000000,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,stride=1", ("x has", "int32")),
    ("N=1,C=1,H=30000,W=30000,K=1,R=1,S=1,pad=0,stride=1", ("bytes", "int32")),
])
def test_bad_shapes_are_refused_with_one_line(text: str, words: tuple[str, ...]) -> None:
    task = get_task("conv2d")
    with pytest.raises(TaskError) as caught:
        task.parse_shape(text)
    message = str(caught.value)
    assert "\n" not in message and "division" not in message
    for word in words:
        assert word in message, message


def test_good_shapes_pass_and_zero_is_allowed_where_the_task_uses_it() -> None:
    task = get_task("conv2d")
    shape = task.parse_shape(CONV.replace("pad=1", "pad=0"))
    assert shape.env["P"] == 6
    # every shape the tasks ship passes the user-shape checks (a check too strict would fail here)
    for name in ("conv2d", "matmul", "monte_carlo", "maxpool3d", "layernorm", "sort", "prefix_sum"):
        t = get_task(name)
        for own in t.validation + tuple(s for _, ss in t.benchmarks for s in ss):
            given = {k: v for k, v in own.dims if k not in dict(t.derived)}
            assert t.make_shape({**given, "case": own.case}).env == own.env


def test_only_real_dims_are_known() -> None:
    known = shape_checks.known_dims(get_task("layernorm"))
    assert {"rows", "cols"} <= known and "eps" not in known                    # eps is a constant
    with pytest.raises(TaskError, match="unknown dim eps"):
        get_task("layernorm").make_shape({"rows": 4, "cols": 8, "eps": 0.1})


def test_scalar_outside_int32_is_refused() -> None:
    task = get_task("matmul")
    with pytest.raises(TaskError, match="int32"):
        task.parse_shape("M=1,K=1,N=3000000000")


def test_memory_is_checked_against_the_free_figure() -> None:
    task = get_task("matmul")
    text = "M=8192,K=8192,N=8192"                  # 3 x 256 MiB buffers: x3 copies, float64 reference, 1 GiB
    need = shape_checks.estimated_memory_bytes(task, task.parse_shape(text))
    assert need == 3 * 2**28 * 3 + 3 * 2**29 + 2**30
    assert task.parse_shape(text, free_memory_bytes=need).env["M"] == 8192
    with pytest.raises(TaskError, match=r"needs about 4\.8 GiB of GPU memory.*1\.0 GiB free"):
        task.parse_shape(text, free_memory_bytes=2**30)


def test_evaluate_cli_messages_for_shapes_seeds_and_trials(tmp_path: Path) -> None:
    cases = [
        (["--shape", CONV.replace("stride=1", "stride=0")], "stride=0: must be positive"),
        (["--shape", CONV + ",Z=3"], "unknown dim Z=3"),
        (["--shape", "N=100000000,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,stride=1"], "int32"),
        (["--shape", CONV.replace("H=8", "H=1").replace("pad=1", "pad=0")], "output y would be empty"),
        (["--seeds", "0"], "--seeds 0: at least 1"),
        (["--trials", "0"], "--trials 0: at least 1"),
    ]
    for extra, words in cases:
        line = _one_error_line(_run("scripts/evaluate.py", "--task", "conv2d", "seed:naive", *extra))
        assert words in line, (extra, line)


def test_evaluate_cli_checks_memory_against_nvidia_smi(tmp_path: Path) -> None:
    """A fake nvidia-smi reporting 1024 MiB free: a shape needing more is refused before any GPU work."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 1024\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}"}
    out = _run("scripts/evaluate.py", "--task", "matmul", "seed:naive", "--shape", "M=8192,K=8192,N=8192", env=env)
    assert "1.0 GiB free" in _one_error_line(out)
    out = _run("scripts/evolve.py", "--task", "matmul", "--out", str(tmp_path / "run"),
               "--shape", "M=8192,K=8192,N=8192", env=env)
    assert out.returncode == 2 and "1.0 GiB free" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_trials_are_honoured_not_raised() -> None:
    args = build_parser().parse_args(["--task", "conv2d", "x.cu", "--trials", "3"])
    config = eval_config(args, ())
    assert config.max_trials == 3 and config.min_trials == 3
    args = build_parser().parse_args(["--task", "conv2d", "x.cu"])
    assert eval_config(args, ()).min_trials == 10


def test_evolve_shape_is_checked(tmp_path: Path) -> None:
    for shape, words in ((CONV.replace("stride=1", "stride=0"), "stride=0: must be positive"),
                         (CONV + ",Z=3", "unknown dim Z=3")):
        out = _run("scripts/evolve.py", "--task", "conv2d", "--out", str(tmp_path / "run"), "--shape", shape)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], out.stderr
    assert not (tmp_path / "run").exists()


# -- the launch prototype in compile diagnostics ---------------------------------------------
@pytest.mark.parametrize("definition", [
    'extern "C" int launch(const float* x, float* y, long n, cudaStream_t s) { return 0; }',   # wrong type
    'int launch(float* x, float* y, int n) { return 0; }',            # a C++ overload: no launch exported
])
def test_wrong_launch_signature_shows_the_expected_prototype(definition: str, nvcc_available: bool,
                                                             tmp_path: Path) -> None:
    if not nvcc_available:
        pytest.skip("nvcc not found")
    task = get_task("relu")
    result = compile_source("#include <cuda_runtime.h>\n" + definition + "\n", task.header(), cache_dir=tmp_path)
    assert not result.ok
    assert task.signature() + ";" in result.log


def test_other_compile_errors_get_no_prototype(nvcc_available: bool, tmp_path: Path) -> None:
    if not nvcc_available:
        pytest.skip("nvcc not found")
    task = get_task("relu")
    result = compile_source("this is not CUDA\n", task.header(), cache_dir=tmp_path)
    assert not result.ok and "expects exactly this entry point" not in result.log


def test_wrong_signature_from_the_cli(tmp_path: Path, nvcc_available: bool) -> None:
    if not nvcc_available:
        pytest.skip("nvcc not found")
    bad = tmp_path / "bad.cu"
    bad.write_text('#include <cuda_runtime.h>\nextern "C" int launch(float* x, int n) { return 0; }\n')
    out = _run("scripts/evaluate.py", "--task", "relu", "--compile-only", str(bad),
               env={"EVO_FSR_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 1
    assert 'expects exactly this entry point: extern "C" int launch(const float* x, float* y, int n' in out.stdout


# -- the FP32 peak ------------------------------------------------------------------------
def _probe(major: int, minor: int) -> dict[str, object]:
    return {"compute_capability_major": major, "compute_capability_minor": minor, "multiprocessor_count": 100,
            "clock_rate_khz": 1_000_000, "name": "test", "max_shared_memory_per_block": 49152,
            "max_shared_memory_per_block_optin": 232448, "max_registers_per_block": 65536,
            "l2_cache_size": 50 * 2**20, "copy_bandwidth_gbps": 3000.0}


@pytest.mark.parametrize("cc, lanes", [((7, 0), 64), ((8, 0), 64), ((8, 6), 128), ((8, 9), 128),
                                       ((9, 0), 128), ((10, 0), 128), ((12, 0), 128)])
def test_fp32_peak_by_compute_capability(cc: tuple[int, int], lanes: int) -> None:
    info = gpu.gpu_info_from_probe(_probe(*cc))
    assert info.fp32_peak_tflops == pytest.approx(100 * 1e9 * lanes * 2 / 1e12)   # 100 SMs at 1 GHz


def test_probe_carries_the_datasheet_roof() -> None:
    assert gpu.gpu_info_from_probe({**_probe(9, 0), "name": "NVIDIA H200"}).memory_roof_gbps == 4800.0
    assert gpu.gpu_info_from_probe(_probe(9, 0)).memory_roof_gbps == 0.0      # "test": not recognised


def test_fp32_table_documents_its_source() -> None:
    assert "Arithmetic Instructions" in (gpu.__doc__ or "") + open(gpu.__file__).read()
    assert gpu.fp32_lanes_per_sm(99, 0) == gpu.DEFAULT_FP32_LANES_PER_SM


# -- no CUDA driver ------------------------------------------------------------------------
def test_driver_missing_names_the_library() -> None:
    why = gpu.driver_missing("libevo_fsr_no_such_driver.so.1")
    assert why is not None and "no NVIDIA driver" in why and "libevo_fsr_no_such_driver.so.1" in why
    assert gpu.driver_missing("libc.so.6") is None


def test_no_driver_is_said_plainly(tmp_path: Path) -> None:
    if gpu.driver_missing() is None:
        pytest.skip("a CUDA driver is installed here: this checks the message on a machine without one")
    out = _run("scripts/evaluate.py", "--task", "relu", "seed:naive", env={"EVO_FSR_CACHE": str(tmp_path)})
    line = _one_error_line(out, code=3)
    assert "no NVIDIA driver is installed" in line and "insufficient" not in line and "--compile-only" in line


def test_free_memory_parsing() -> None:
    assert gpu.parse_free_memory("81037\n") == 81037 * 2**20
    assert gpu.parse_free_memory("[N/A]") is None and gpu.parse_free_memory("") is None


def test_evaluate_script_is_executable() -> None:
    for script in ("evaluate.py", "evolve.py"):
        assert os.access(ROOT / "scripts" / script, os.X_OK), script
