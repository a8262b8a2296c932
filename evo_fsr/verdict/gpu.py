"""GpuInfo from the runner's probe: properties read off the device, bandwidth measured."""
from __future__ import annotations

from typing import Any, Mapping

from ..types import GpuInfo

#: Dense tensor-core fp16 rate per SM per clock (FLOP), by compute capability major version.
_TENSOR_FP16_FLOP_PER_SM_CLOCK = {7: 1024, 8: 2048, 9: 4096, 10: 8192, 12: 4096}


def gpu_info_from_probe(probe: Mapping[str, Any]) -> GpuInfo:
    major, minor = int(probe["compute_capability_major"]), int(probe["compute_capability_minor"])
    sms, clock_hz = int(probe["multiprocessor_count"]), float(probe["clock_rate_khz"]) * 1e3
    fp32 = sms * clock_hz * 128 * 2 / 1e12          # 128 FP32 lanes per SM, FMA = 2 FLOP
    tensor = sms * clock_hz * _TENSOR_FP16_FLOP_PER_SM_CLOCK.get(major, 0) / 1e12
    return GpuInfo(
        name=str(probe["name"]), compute_capability=f"{major}.{minor}", sm_count=sms,
        shared_memory_per_block_bytes=int(probe["max_shared_memory_per_block"]),
        shared_memory_per_block_optin_bytes=int(probe["max_shared_memory_per_block_optin"]),
        registers_per_block=int(probe["max_registers_per_block"]),
        l2_cache_bytes=int(probe["l2_cache_size"]),
        memory_bandwidth_gbps=float(probe["copy_bandwidth_gbps"]),
        fp32_peak_tflops=fp32, tensor_peak_tflops=tensor,
        extra=(("clock_mhz", f"{clock_hz / 1e6:.0f}"),),
    )
