"""A synthetic evaluator and compiler: the whole pipeline (engine, Ray pool, CLI) without a GPU.

Fitness comes from knob values: every knob set to the last value of its list is the optimum,
so selection pressure is measurable.  Markers in the source simulate failures:

    SYNTHETIC_COMPILE_ERROR   the synthetic compile fails (no GPU time)
    SYNTHETIC_WRONG           a wrong answer
    SYNTHETIC_EXIT            the evaluating process dies (os._exit), i.e. a dead worker
    SYNTHETIC_EXIT_ONCE:<path>  dies the first time (creates <path>), evaluates normally after
    SYNTHETIC_HANG            sleeps for an hour, i.e. a hung worker

Results are labelled with the GPU name "synthetic (no GPU)": never mistaken for measurements.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

from ..verdict.compile import CompileResult
from ..knobs import parse_knobs
from ..types import Candidate, EvalResult, GpuInfo, Mismatch, ShapeTiming, Status

SYNTHETIC_GPU = GpuInfo(name="synthetic (no GPU)", compute_capability="9.0", sm_count=132,
                        shared_memory_per_block_bytes=49152, shared_memory_per_block_optin_bytes=232448,
                        registers_per_block=65536, l2_cache_bytes=50 * 2**20, memory_bandwidth_gbps=3000.0,
                        fp32_peak_tflops=60.0)
#: A small kernel with the conv2d ABI and one knob: what a fake LLM endpoint can reply in tests.
SYNTHETIC_KERNEL = '''#include <cuda_runtime.h>
#define TILE 16 // knob: 8 16 32
__global__ void k(const float* x, const float* w, float* y) { y[threadIdx.x] = x[threadIdx.x] * w[0]; }
extern "C" int launch(const float* x, const float* w, float* y, int N, int C, int H, int W, int K, int R,
                      int S, int pad, int stride, cudaStream_t stream) {
    k<<<1, TILE, 0, stream>>>(x, w, y);
    return (int)cudaGetLastError();
}
'''
_EXIT_ONCE_RE = re.compile(r"SYNTHETIC_EXIT_ONCE:(\S+)")


def synthetic_speedup(source: str) -> float:
    """1.0 without knobs; each knob adds its position in its value list (last = best)."""
    score = 0.0
    for knob in parse_knobs(source).values():
        if knob.value in knob.choices and len(knob.choices) > 1:
            score += knob.choices.index(knob.value) / (len(knob.choices) - 1)
    return 1.0 + score


@dataclass
class SyntheticEvaluator:
    """Stands in for ``evaluate.Evaluator``: same ``evaluate(candidate, compiled)`` contract."""

    task_name: str = "conv2d"
    delay_s: float = 0.0

    @property
    def gpu_info(self) -> GpuInfo:
        return SYNTHETIC_GPU

    @property
    def arch(self) -> str:
        return SYNTHETIC_GPU.arch

    def evaluate(self, candidate: Candidate, compiled: CompileResult | None = None) -> EvalResult:
        source = candidate.source
        once = _EXIT_ONCE_RE.search(source)
        if once and not os.path.exists(once.group(1)):
            open(once.group(1), "w").close()
            os._exit(17)
        if "SYNTHETIC_EXIT" in source and not once:
            os._exit(17)
        if "SYNTHETIC_HANG" in source:
            time.sleep(3600)
        if self.delay_s:
            time.sleep(self.delay_s)
        if compiled is not None and not compiled.ok or "SYNTHETIC_COMPILE_ERROR" in source:
            return synthetic_compile_failure(candidate, synthetic_compile(candidate, self.arch))
        if "SYNTHETIC_WRONG" in source:
            return EvalResult(candidate_id=candidate.id, task=candidate.task, status=Status.WRONG,
                              summary="synthetic wrong answer", gpu_name=SYNTHETIC_GPU.name,
                              mismatch=Mismatch("synthetic", "y", (0, 0), 1.0, 2.0, "synthetic"))
        speedup = synthetic_speedup(source)
        timing = ShapeTiming(shape_label="synthetic", median_ms=1.0 / speedup, baseline_median_ms=1.0,
                             host_median_ms=1.0 / speedup, baseline_host_median_ms=1.0, trials=10,
                             speed_of_light_ms=0.05)
        return EvalResult(candidate_id=candidate.id, task=candidate.task, status=Status.OK,
                          summary=f"synthetic: {speedup:.3f}x", timings=(timing,), gpu_name=SYNTHETIC_GPU.name)


def synthetic_compile(candidate: Candidate, arch: str) -> CompileResult:
    """Fails on SYNTHETIC_COMPILE_ERROR, else 'compiles' to a few bytes."""
    if "SYNTHETIC_COMPILE_ERROR" in candidate.source:
        return CompileResult(ok=False, key=candidate.id, log="kernel.cu(1): error: synthetic compile error",
                             seconds=0.0, arch=arch)
    return CompileResult(ok=True, key=candidate.id, log="", seconds=0.0, arch=arch, binary=b"synthetic")


def synthetic_compile_failure(candidate: Candidate, compiled: CompileResult) -> EvalResult:
    return EvalResult(candidate_id=candidate.id, task=candidate.task, status=Status.COMPILE_ERROR,
                      summary="compile error", logs=(("compile", compiled.log),), gpu_name=SYNTHETIC_GPU.name)
