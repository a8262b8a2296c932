"""The speed-of-light floor: the least time a shape can take on this GPU, from its bytes over the
memory roof and its FLOPs over the peak of its precision.  A credit under it is
``flagged:under-floor`` (profile.summarise)."""
from __future__ import annotations

from ..types import GpuInfo

#: A device-to-device copy reaches about 90 % of the HBM roof (3.0 of 3.35 TB/s on an H100).
#: The floor's bandwidth is never below the measured copy over this.
COPY_EFFICIENCY = 0.9
#: For a GPU whose roof is not in the datasheet table (verdict/gpu.py): the lowest fraction of the
#: roof a copy was seen to reach, so that the floor's bandwidth is at or above the roof.  The
#: evaluator's probe copied at 4.07 TB/s on an H200 (4.8 TB/s roof: 85 %), and a read-only seed
#: (dot_product) ran at 4.52 TB/s there, which the old floor (copy / 0.9) flagged.
UNKNOWN_ROOF_COPY_EFFICIENCY = 0.8


def peak_tflops(gpu: GpuInfo, precision: str) -> float:
    if precision in ("tf32", "fp16", "bf16") and gpu.tensor_peak_tflops > 0:
        return gpu.tensor_peak_tflops * (1.0 if precision != "tf32" else 0.5)
    return gpu.fp32_peak_tflops


def memory_roof_gbps(gpu: GpuInfo) -> float:
    """The bandwidth no kernel can beat with the L2 flushed: the datasheet roof of a recognised
    part, or the measured copy over ``COPY_EFFICIENCY`` where that is higher (a faster part under
    a matching name); for a part not recognised, the copy over ``UNKNOWN_ROOF_COPY_EFFICIENCY``.
    An honest kernel that only reads can beat a copy by more than the copy misses the roof by,
    so the measured copy alone is not a roof (a floor too high flags honest kernels)."""
    copy_bound = gpu.memory_bandwidth_gbps / COPY_EFFICIENCY
    if gpu.memory_roof_gbps > 0:
        return max(gpu.memory_roof_gbps, copy_bound)
    return gpu.memory_bandwidth_gbps / UNKNOWN_ROOF_COPY_EFFICIENCY


def speed_of_light_ms(flops: float, nbytes: float, gpu: GpuInfo, precision: str) -> float:
    bandwidth = memory_roof_gbps(gpu) * 1e9
    memory_ms = nbytes / bandwidth * 1e3 if bandwidth > 0 else 0.0
    compute = peak_tflops(gpu, precision) * 1e12
    compute_ms = flops / compute * 1e3 if compute > 0 else 0.0
    return max(memory_ms, compute_ms)


__all__ = ["COPY_EFFICIENCY", "UNKNOWN_ROOF_COPY_EFFICIENCY", "memory_roof_gbps", "peak_tflops", "speed_of_light_ms"]
