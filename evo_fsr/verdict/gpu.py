"""GpuInfo from the runner's probe: properties read off the device, bandwidth measured, the HBM
roof by datasheet where the part is recognised.

Also the two facts the trusted side can learn without starting a runner: whether a CUDA driver
is installed at all (``driver_missing``), and the GPU's free memory (``free_memory_bytes``).
"""
from __future__ import annotations

import ctypes
import logging
import shutil
import subprocess
from typing import Any, Mapping

from ..types import GpuInfo

log = logging.getLogger(__name__)

#: FP32 lanes (results of a 32-bit floating-point multiply-add per clock) per SM, by compute
#: capability.  Source: NVIDIA CUDA C++ Programming Guide, section "Arithmetic Instructions",
#: table "Throughput of Native Arithmetic Instructions (Number of Results per Clock Cycle per
#: Multiprocessor)", row "32-bit floating-point add, multiply, multiply-add": 64 for 6.0, 7.x
#: and 8.0; 128 for 5.x, 6.1, 6.2, 8.6, 8.7, 8.9, 9.0, 10.x and 12.x.
FP32_LANES_PER_SM: dict[tuple[int, int], int] = {
    (5, 0): 128, (5, 2): 128, (5, 3): 128,
    (6, 0): 64, (6, 1): 128, (6, 2): 128,
    (7, 0): 64, (7, 2): 64, (7, 5): 64,          # V100 (7.0), Xavier (7.2), Turing (7.5)
    (8, 0): 64,                                  # A100
    (8, 6): 128, (8, 7): 128, (8, 9): 128,       # GA10x, Orin, Ada
    (9, 0): 128,                                 # H100, H200
    (10, 0): 128, (10, 1): 128, (10, 3): 128,    # Blackwell B200, ...
    (12, 0): 128, (12, 1): 128,                  # Blackwell RTX
}
#: For a compute capability not in the table: the newest architectures have 128.
DEFAULT_FP32_LANES_PER_SM = 128

#: Dense tensor-core fp16 rate per SM per clock (FLOP), by compute capability major version.
_TENSOR_FP16_FLOP_PER_SM_CLOCK = {7: 1024, 8: 2048, 9: 4096, 10: 8192, 12: 4096}

#: HBM bandwidth by datasheet (GB/s, NVIDIA's product pages), by a fragment of the device name,
#: the first match winning (so "GH200" before "H200", "H100 NVL" before "H100").  The speed-of-
#: light floor takes the higher of this and the measured copy / 0.9 (verdict/profile.py), so a
#: part faster than its name suggests is never held to the lower figure.
DATASHEET_MEMORY_ROOF_GBPS: tuple[tuple[str, float], ...] = (
    ("GH200", 4900.0),          # 144 GB HBM3e (the 96 GB HBM3 part: 4000)
    ("H200", 4800.0),           # SXM and NVL
    ("H100 NVL", 3900.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),           # SXM5, "NVIDIA H100 80GB HBM3"
    ("H800", 3350.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100 80GB PCIe", 1935.0),
    ("A100-PCIE-80GB", 1935.0),
    ("A100", 1555.0),           # 40 GB
    ("GB200", 8000.0),
    ("B200", 8000.0),
    ("L40S", 864.0),
)

#: The CUDA driver library every CUDA program loads; its absence means no NVIDIA driver.
DRIVER_LIBRARY = "libcuda.so.1"


def fp32_lanes_per_sm(major: int, minor: int) -> int:
    """FP32 FMA lanes per SM of compute capability ``major.minor`` (``FP32_LANES_PER_SM``)."""
    lanes = FP32_LANES_PER_SM.get((major, minor))
    if lanes is None:
        log.warning("compute capability %d.%d is not in the FP32 throughput table; assuming %d lanes per SM",
                    major, minor, DEFAULT_FP32_LANES_PER_SM)
        return DEFAULT_FP32_LANES_PER_SM
    return lanes


def datasheet_memory_roof_gbps(name: str) -> float:
    """The datasheet HBM bandwidth of the part named ``name``, 0.0 when it is not in the table."""
    for fragment, gbps in DATASHEET_MEMORY_ROOF_GBPS:
        if fragment.lower() in name.lower():
            return gbps
    return 0.0


def gpu_info_from_probe(probe: Mapping[str, Any]) -> GpuInfo:
    major, minor = int(probe["compute_capability_major"]), int(probe["compute_capability_minor"])
    sms, clock_hz = int(probe["multiprocessor_count"]), float(probe["clock_rate_khz"]) * 1e3
    fp32 = sms * clock_hz * fp32_lanes_per_sm(major, minor) * 2 / 1e12     # FMA = 2 FLOP
    tensor = sms * clock_hz * _TENSOR_FP16_FLOP_PER_SM_CLOCK.get(major, 0) / 1e12
    return GpuInfo(
        name=str(probe["name"]), compute_capability=f"{major}.{minor}", sm_count=sms,
        shared_memory_per_block_bytes=int(probe["max_shared_memory_per_block"]),
        shared_memory_per_block_optin_bytes=int(probe["max_shared_memory_per_block_optin"]),
        registers_per_block=int(probe["max_registers_per_block"]),
        l2_cache_bytes=int(probe["l2_cache_size"]),
        memory_bandwidth_gbps=float(probe["copy_bandwidth_gbps"]),
        fp32_peak_tflops=fp32, tensor_peak_tflops=tensor,
        memory_roof_gbps=datasheet_memory_roof_gbps(str(probe["name"])),
        extra=(("clock_mhz", f"{clock_hz / 1e6:.0f}"),),
    )


def driver_missing(library: str = DRIVER_LIBRARY) -> str | None:
    """Why no CUDA driver can be used (its library does not load), or None when it loads."""
    try:
        ctypes.CDLL(library)
    except OSError as exc:
        return f"no NVIDIA driver is installed ({library} cannot be loaded: {str(exc).split(':')[-1].strip()})"
    return None


def free_memory_bytes(device: int = 0) -> int | None:
    """Free memory of GPU ``device`` as nvidia-smi reports it, or None when it cannot tell."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, f"--id={device}", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_free_memory(out.stdout) if out.returncode == 0 else None


def parse_free_memory(text: str) -> int | None:
    """Bytes from nvidia-smi's ``memory.free`` in MiB (``"81037"``), or None if unreadable."""
    first = text.strip().splitlines()[:1]
    try:
        return int(float(first[0].strip())) * 2**20 if first else None
    except ValueError:
        return None
