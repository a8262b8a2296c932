"""Shared test setup: the repo on sys.path, and GPU tests skipped (with the reason) without a GPU."""
from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@functools.lru_cache(maxsize=None)
def gpu_unavailable_reason() -> str | None:
    """None when a CUDA GPU and the runtime are usable, else why not."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "no CUDA GPU on this machine (nvidia-smi not found); run `pytest -m gpu` on a GPU host"
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"nvidia-smi failed: {exc}"
    if out.returncode != 0 or "GPU" not in out.stdout:
        return "nvidia-smi lists no GPU"
    try:
        from evo_fsr.runner.cudart import Runtime
        rt = Runtime()
        rt.set_device(0)
    except Exception as exc:  # noqa: BLE001
        return f"CUDA runtime unusable: {exc}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or gpu_unavailable_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def nvcc_available() -> bool:
    from evo_fsr.verdict.compile import nvcc_path
    return nvcc_path() is not None
