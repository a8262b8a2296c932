"""GPU descriptions for prompts when no GPU is probed (``evo-fsr prompt``): presets or a file.

Preset numbers come from NVIDIA datasheets (SXM parts), not measurements.  ``GpuInfo`` holds
a measured device-to-device copy bandwidth; for presets it is estimated as 90% of the
datasheet HBM figure (3.35 TB/s on H100, 4.8 TB/s on H200, verdict/profile.py COPY_EFFICIENCY),
and the datasheet figure itself is the roof the speed-of-light floor uses (``memory_roof_gbps``).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from ..types import GpuInfo

PRESETS: dict[str, GpuInfo] = {
    "h100": GpuInfo(name="NVIDIA H100 80GB HBM3 (preset: datasheet values, not measured)", compute_capability="9.0",
                    sm_count=132, shared_memory_per_block_bytes=49152,
                    shared_memory_per_block_optin_bytes=232448, registers_per_block=65536,
                    l2_cache_bytes=50 * 2**20, memory_bandwidth_gbps=3015.0, memory_roof_gbps=3350.0,
                    fp32_peak_tflops=66.9, tensor_peak_tflops=494.7),
    "h200": GpuInfo(name="NVIDIA H200 141GB HBM3e (preset: datasheet values, not measured)", compute_capability="9.0",
                    sm_count=132, shared_memory_per_block_bytes=49152,
                    shared_memory_per_block_optin_bytes=232448, registers_per_block=65536,
                    l2_cache_bytes=50 * 2**20, memory_bandwidth_gbps=4320.0, memory_roof_gbps=4800.0,
                    fp32_peak_tflops=66.9, tensor_peak_tflops=494.7),
}


class GpuFileError(ValueError):
    """A GPU description file that cannot be used (file and problem in the message)."""


def load_gpu_file(path: str | Path) -> GpuInfo:
    """A GpuInfo from a JSON or YAML mapping of its fields (as ``GpuInfo`` names them)."""
    file = Path(path)
    try:
        raw = yaml.safe_load(file.read_text())       # YAML reads JSON too
    except OSError as exc:
        raise GpuFileError(f"{file}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise GpuFileError(f"{file}: not JSON or YAML: {' '.join(str(exc).split())[:200]}") from None
    if not isinstance(raw, dict):
        raise GpuFileError(f"{file}: must be a mapping of GpuInfo fields")
    fields = {f.name: f for f in dataclasses.fields(GpuInfo)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise GpuFileError(f"{file}: {unknown[0]}: unknown key (allowed: {', '.join(fields)})")
    try:
        gpu = GpuInfo(**{k: (tuple(map(tuple, v)) if k == "extra" else v) for k, v in raw.items()})
    except TypeError as exc:
        raise GpuFileError(f"{file}: {exc}") from None
    for key in ("sm_count", "shared_memory_per_block_optin_bytes", "registers_per_block", "l2_cache_bytes"):
        if not isinstance(getattr(gpu, key), int):
            raise GpuFileError(f"{file}: {key}: must be an integer")
    return gpu

