"""A synthetic evaluator and compiler: the whole pipeline (engine, Ray pool, CLI) without a GPU.

Fitness comes from knob values: every knob set to the last value of its list is the optimum,
so selection pressure is measurable.  Markers in the source simulate failures:

    SYNTHETIC_COMPILE_ERROR   the synthetic compile fails (no GPU time)
    SYNTHETIC_WRONG           a wrong answer
    SYNTHETIC_EXIT            the evaluating process dies (os._exit), i.e. a dead worker
    SYNTHETIC_EXIT_ONCE:<path>  dies the first time (creates <path>), evaluates normally after
    SYNTHETIC_HANG            sleeps for an hour, i.e. a hung worker

Per-shape fitness (``SyntheticEvaluator(shapes=(label, ...))``, issue 12): each benchmark
shape prefers other knob values, so no one setting wins everywhere.  Shape ``j`` of ``n``
prefers each knob's value at the fraction ``1 - j / (n - 1)`` of its list (shape 0 the last
value, as without shapes; shape ``n - 1`` the first); its speedup is 1 plus, per knob, one
minus the distance from that fraction.  An assembled dispatch kernel (evo_fsr/dispatch.py)
runs, on each shape, the variant its dispatcher routes that shape to (the route comments
name the shape), times ``dispatch_slowdown``.

Results are labelled with the GPU name "synthetic (no GPU)": never mistaken for measurements.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Sequence

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
_VARIANT_RE = re.compile(r"^namespace evo_variant_(\d+) \{\n(.*?)\n\}  // namespace evo_variant_\1$", re.M | re.S)
_ROUTE_RE = re.compile(r"return evo_variant_(\d+)::launch_variant_\d+\([^)]*\);  // (\S+)")
_NEUTRALISED_RE = re.compile(r"//([ \t]*)variant (knob|constraint)\b")


def synthetic_speedup(source: str) -> float:
    """1.0 without knobs; each knob adds its position in its value list (last = best)."""
    score = 0.0
    for knob in parse_knobs(source).values():
        if knob.value in knob.choices and len(knob.choices) > 1:
            score += knob.choices.index(knob.value) / (len(knob.choices) - 1)
    return 1.0 + score


def synthetic_shape_speedups(source: str, shapes: Sequence[str]) -> dict[str, float]:
    """Speedup per shape label: shape ``j`` of ``n`` prefers the fraction ``1 - j / (n - 1)`` of
    every knob's list; an assembled dispatch kernel takes each shape's routed variant's figure."""
    variants = {int(i): _NEUTRALISED_RE.sub(r"//\1\2:", body) for i, body in _VARIANT_RE.findall(source)}
    if variants:
        routes = {label: int(i) for i, label in _ROUTE_RE.findall(source)}
        return {label: synthetic_shape_speedups(variants[routes.get(label, 0)], shapes)[label] for label in shapes}
    speedups = {}
    for j, label in enumerate(shapes):
        target = 1.0 - j / (len(shapes) - 1) if len(shapes) > 1 else 1.0
        score = 0.0
        for knob in parse_knobs(source).values():
            if knob.value in knob.choices and len(knob.choices) > 1:
                score += 1.0 - abs(knob.choices.index(knob.value) / (len(knob.choices) - 1) - target)
        speedups[label] = 1.0 + score
    return speedups


@dataclass
class SyntheticEvaluator:
    """Stands in for ``evaluate.Evaluator``: same ``evaluate(candidate, compiled)`` contract."""

    task_name: str = "conv2d"
    delay_s: float = 0.0
    shapes: tuple[str, ...] = ()          # benchmark shape labels, each preferring other knob values
    dispatch_slowdown: float = 1.0        # an assembled dispatch kernel's times are multiplied by this

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
        if self.shapes:
            slowdown = self.dispatch_slowdown if _VARIANT_RE.search(source) else 1.0
            speedups = {k: v / slowdown for k, v in synthetic_shape_speedups(source, self.shapes).items()}
        else:
            speedups = {"synthetic": synthetic_speedup(source)}
        timings = tuple(ShapeTiming(shape_label=label, median_ms=1.0 / speedup, baseline_median_ms=1.0,
                                    host_median_ms=1.0 / speedup, baseline_host_median_ms=1.0, trials=10,
                                    speed_of_light_ms=0.05) for label, speedup in speedups.items())
        summary = "synthetic: " + ", ".join(f"{speedup:.3f}x" if label == "synthetic" else f"{label} {speedup:.3f}x"
                                            for label, speedup in speedups.items())
        return EvalResult(candidate_id=candidate.id, task=candidate.task, status=Status.OK,
                          summary=summary, timings=timings, gpu_name=SYNTHETIC_GPU.name)


def synthetic_compile(candidate: Candidate, arch: str) -> CompileResult:
    """Fails on SYNTHETIC_COMPILE_ERROR, else 'compiles' to a few bytes."""
    if "SYNTHETIC_COMPILE_ERROR" in candidate.source:
        return CompileResult(ok=False, key=candidate.id, log="kernel.cu(1): error: synthetic compile error",
                             seconds=0.0, arch=arch)
    return CompileResult(ok=True, key=candidate.id, log="", seconds=0.0, arch=arch, binary=b"synthetic")


def synthetic_compile_failure(candidate: Candidate, compiled: CompileResult) -> EvalResult:
    return EvalResult(candidate_id=candidate.id, task=candidate.task, status=Status.COMPILE_ERROR,
                      summary="compile error", logs=(("compile", compiled.log),), gpu_name=SYNTHETIC_GPU.name)
