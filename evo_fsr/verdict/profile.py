"""Performance Profiler (trusted side): statistics and credibility flags from raw times.

The runner measures, interleaved in one process, the candidate and the task's naive seed:
CUDA events on the harness stream (L2 flushed before each trial) and a host clock around a
device-wide synchronize.  Here those raw times become a ``ShapeTiming``:
- medians (never means);
- ``escaped-stream`` flag: the host clock saw much more time than the harness-stream events
  (work launched on another stream or thread), compared with the baseline's own gap;
- ``under-floor`` flag: faster than the speed-of-light floor max(bytes/bandwidth, flops/peak).
"""
from __future__ import annotations

import statistics
from typing import Mapping, Sequence

from ..types import GpuInfo, ShapeTiming

#: Measured copy bandwidth is ~90 % of the HBM roof; the floor uses the roof.
COPY_EFFICIENCY = 0.9
#: Extra host time (beyond the baseline's own launch/sync gap) that flags escaped work.
ESCAPE_MIN_MS = 0.05
ESCAPE_FRACTION = 0.5


def peak_tflops(gpu: GpuInfo, precision: str) -> float:
    if precision in ("tf32", "fp16", "bf16") and gpu.tensor_peak_tflops > 0:
        return gpu.tensor_peak_tflops * (1.0 if precision != "tf32" else 0.5)
    return gpu.fp32_peak_tflops


def speed_of_light_ms(flops: float, nbytes: float, gpu: GpuInfo, precision: str) -> float:
    bandwidth = gpu.memory_bandwidth_gbps / COPY_EFFICIENCY * 1e9
    memory_ms = nbytes / bandwidth * 1e3 if bandwidth > 0 else 0.0
    compute = peak_tflops(gpu, precision) * 1e12
    compute_ms = flops / compute * 1e3 if compute > 0 else 0.0
    return max(memory_ms, compute_ms)


def summarise(shape_label: str, event_ms: Mapping[str, Sequence[float]], host_ms: Mapping[str, Sequence[float]],
              floor_ms: float, candidate: str = "candidate", baseline: str = "baseline") -> ShapeTiming:
    cand_event = statistics.median(event_ms[candidate])
    base_event = statistics.median(event_ms[baseline])
    cand_host = statistics.median(host_ms[candidate])
    base_host = statistics.median(host_ms[baseline])
    flags = []
    extra_ms = (cand_host - cand_event) - max(base_host - base_event, 0.0)
    if extra_ms > max(ESCAPE_MIN_MS, ESCAPE_FRACTION * cand_event):
        flags.append(f"escaped-stream: host clock {cand_host:.4g} ms vs stream events {cand_event:.4g} ms "
                     "(work outside the harness stream?)")
    if cand_event < floor_ms:
        flags.append(f"under-floor: {cand_event:.4g} ms is below the speed-of-light floor {floor_ms:.4g} ms")
    return ShapeTiming(shape_label=shape_label, median_ms=cand_event, baseline_median_ms=base_event,
                       host_median_ms=cand_host, baseline_host_median_ms=base_host,
                       trials=len(event_ms[candidate]), speed_of_light_ms=floor_ms, flags=tuple(flags))
