"""The run record, ``run.json`` in a run directory: what ran, where, and how it ended.

One entry per session (a first start and every ``--resume``), each with the resolved config,
the environment (GPU, driver, CUDA, nvcc, evo-fsr version and git sha, Python, Ray and torch
versions), the start time, and once it ends the end time and the outcome (completed, interrupted
or failed, with the best speedup).  Written atomically; a killed driver leaves the session
without an end, which reads as "did not finish".
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import platform
import shutil
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, TypeVar

from .. import __version__

log = logging.getLogger(__name__)

RECORD_NAME = "run.json"
T = TypeVar("T")


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    """stdout of ``cmd`` (stripped), or "" when it is missing, fails or hangs."""
    if not shutil.which(cmd[0]):
        return ""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def git_sha() -> str:
    """The commit of the evo_fsr source in use ("" outside a git checkout), '+dirty' if modified."""
    here = Path(__file__).resolve().parent
    sha = _run(["git", "rev-parse", "HEAD"], cwd=here)
    if sha and _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here):
        sha += "+dirty"
    return sha


def gpus_from_nvidia_smi() -> tuple[list[dict[str, str]], str, str]:
    """([{index, name, memory_total, uuid}], driver version, CUDA version of the driver)."""
    rows = _run(["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version,uuid",
                 "--format=csv,noheader"])
    gpus: list[dict[str, str]] = []
    driver = ""
    for line in filter(None, rows.splitlines()):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 5:
            gpus.append({"index": parts[0], "name": parts[1], "memory_total": parts[2], "uuid": parts[4]})
            driver = parts[3]
    cuda = ""
    for line in _run(["nvidia-smi"]).splitlines():
        if "CUDA Version:" in line:
            cuda = line.split("CUDA Version:")[1].split()[0].strip("|")
    return gpus, driver, cuda


def nvcc_release() -> str:
    for line in _run(["nvcc", "--version"]).splitlines():
        if "release" in line:
            return line.strip()
    return ""


def environment(gpu_info: Any = None) -> dict[str, Any]:
    """Where this process runs; ``gpu_info`` (a GpuInfo from the evaluator pool) when known."""
    gpus, driver, cuda = gpus_from_nvidia_smi()
    env: dict[str, Any] = {
        "evo_fsr_version": __version__, "git_sha": git_sha(),
        "python": platform.python_version(), "platform": platform.platform(), "host": socket.gethostname(),
        "gpus": gpus, "driver_version": driver, "cuda_driver_version": cuda, "nvcc": nvcc_release(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "packages": {name: _package_version(name) for name in ("ray", "torch", "deap", "numpy", "cupy-cuda12x",
                                                                "cupy-cuda13x", "openai")},
    }
    if gpu_info is not None:
        env["evaluator_gpu"] = gpu_info.describe() if hasattr(gpu_info, "describe") else str(gpu_info)
    return env


def read(root: Path | str) -> dict[str, Any]:
    """The record of a run directory ({"sessions": []} when there is none or it is unreadable)."""
    path = Path(root) / RECORD_NAME
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {"sessions": []}
    return data if isinstance(data, dict) and isinstance(data.get("sessions"), list) else {"sessions": []}


def _write(root: Path, data: dict[str, Any]) -> None:
    path = root / RECORD_NAME
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(path)


def start(root: Path | str, config: dict[str, Any], gpu_info: Any = None) -> dict[str, Any]:
    """Append a session with the config and the environment; returns the session entry."""
    data = read(root)
    session = {"started_utc": utc_now(), "config": config, "environment": environment(gpu_info)}
    data["sessions"].append(session)
    _write(Path(root), data)
    return session


def finish(root: Path | str, outcome: str, **details: Any) -> None:
    """Close the latest session with the end time, ``outcome`` and ``details`` (e.g. best_speedup)."""
    data = read(root)
    if not data["sessions"]:
        data["sessions"].append({"started_utc": None})
    data["sessions"][-1].update({"ended_utc": utc_now(), "outcome": outcome, **details})
    _write(Path(root), data)


def result_details(result: Any) -> dict[str, Any]:
    """What an EvolutionResult says about the end: best id and speedup, stop reason, counters."""
    best = getattr(result, "best", None)
    return {"best_id": getattr(best, "id", None), "best_speedup": getattr(best, "speedup", None),
            "stop_reason": getattr(result, "stop_reason", "") or "",
            "counters": dict(getattr(result, "counters", {}) or {})}


def recorded(store: Any, config: dict[str, Any], run: Callable[[], T], gpu_info: Any = None) -> T:
    """``run()`` between a session start and its end in ``store.root``/run.json: the outcome is
    completed, interrupted (Ctrl-C) or failed (with the error); exceptions propagate.
    A record that cannot be written is logged, never fatal to the run."""
    root = Path(store.root)
    try:
        start(root, config, gpu_info)
    except OSError as exc:
        log.warning("cannot write %s: %s", root / RECORD_NAME, exc)
    try:
        result = run()
    except KeyboardInterrupt:
        _safe_finish(root, "interrupted")
        raise
    except BaseException as exc:
        _safe_finish(root, "failed", error=f"{type(exc).__name__}: {exc}")
        raise
    _safe_finish(root, "completed", **result_details(result))
    return result


def _safe_finish(root: Path, outcome: str, **details: Any) -> None:
    try:
        finish(root, outcome, **details)
    except OSError as exc:
        log.warning("cannot write %s: %s", root / RECORD_NAME, exc)
