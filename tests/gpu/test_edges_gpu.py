"""On a GPU: an assembled dispatch kernel is judged correct, the FP32 peak follows the table,
a shape needing more than the free memory is refused.  Run with `pytest -m gpu`."""
from __future__ import annotations

import numpy as np
import pytest

from evo_fsr.dispatch import Route, assemble
from evo_fsr.knobs import set_knobs
from evo_fsr.tasks import TaskError, get_task
from evo_fsr.types import Candidate, Status
from evo_fsr.verdict.evaluate import EvalConfig, Evaluator
from evo_fsr.verdict.gpu import FP32_LANES_PER_SM, free_memory_bytes

pytestmark = pytest.mark.gpu

QUICK = EvalConfig(benchmark="quick", max_trials=10, min_trials=5, time_budget_s=0.5, validation_timeout_s=10)


def test_dispatch_kernel_is_correct_on_every_shape() -> None:
    task = get_task("conv2d")
    seed = task.seeds()["implicit_gemm"]
    shapes = task.benchmark("quick")
    source = assemble(task, [Route(shapes[0], set_knobs(seed, {"BLOCK_M": "128", "THREAD_M": "8"})),
                             Route(shapes[1], set_knobs(seed, {"BLOCK_N": "32", "THREAD_N": "2"}))], seed)
    evaluator = Evaluator(task, QUICK)
    try:
        result = evaluator.evaluate(Candidate(task="conv2d", source=source, label="dispatch"))
    finally:
        evaluator.close()
    assert result.status is Status.OK, result.summary


def test_fp32_peak_uses_the_table() -> None:
    evaluator = Evaluator(get_task("relu"), QUICK)
    try:
        gpu = evaluator.gpu_info
    finally:
        evaluator.close()
    major, minor = (int(p) for p in gpu.compute_capability.split("."))
    lanes = FP32_LANES_PER_SM[(major, minor)]
    clock_hz = float(dict(gpu.extra)["clock_mhz"]) * 1e6
    assert gpu.fp32_peak_tflops == pytest.approx(gpu.sm_count * clock_hz * lanes * 2 / 1e12, rel=0.01)


def test_a_shape_larger_than_free_memory_is_refused() -> None:
    free = free_memory_bytes()
    assert free is not None and free > 0
    task = get_task("matmul")
    with pytest.raises(TaskError, match="GiB free"):
        task.parse_shape("M=16384,K=16384,N=16384", free_memory_bytes=2**30)
    assert task.parse_shape("M=1024,K=1024,N=1024", free_memory_bytes=free).env["M"] == 1024


def test_widening_keeps_float32_subnormals_on_the_gpu() -> None:
    """The GPU reference path widens float32 exactly: subnormals, signed zeros, inf and nan."""
    cp = pytest.importorskip("cupy")
    from evo_fsr.verdict.validate import widen
    bits = np.array([0, 0x80000000, 1, 0x807fffff, 0x00800000, 0x3f800000, 0x7f7fffff, 0x7f800000, 0xff800000,
                     0x7fc00000], dtype=np.uint32)
    rng = np.random.default_rng(5)
    values = np.concatenate([bits.view(np.float32), (rng.random(4096, dtype=np.float32) * np.float32(1e-41))])
    got = cp.asnumpy(widen(cp.asarray(values), cp))
    want = values.astype(np.float64)
    assert np.array_equal(got, want, equal_nan=True)
    assert float(cp.asnumpy(cp.sum(widen(cp.asarray(values[10:]), cp)))) == pytest.approx(float(want[10:].sum()))
