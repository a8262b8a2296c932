"""Shared by the probe scripts (probe_scan.py, probe_gram.py): build a seed variant into a shared
library with the task's contract header, and time callables interleaved with the L2 flushed
before every call (CUDA events; medians in us).  ``spread`` (IQR / 1.349), the probes' one
robust spread.  And (probe_window_parts.py, probe_round_trip.py) the trusted side polling a
runner's reply pipe instead of sleeping in ``select``."""
from __future__ import annotations

import ctypes
import os
import select
import statistics
import time
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

#: a device function reading %globaltimer (ns), for the probes' per-block or per-tile traces
GTIMER = ("__device__ __forceinline__ unsigned long long gtimer() {\n"
          "    unsigned long long t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); return t;\n}\n")


def spread(xs) -> float:  # type: ignore[no-untyped-def]
    """The robust standard deviation of ``xs``: IQR / 1.349 (0 for fewer than two values), as
    profile.Calibration takes the overhead's."""
    xs = list(xs)
    if len(xs) < 2:
        return 0.0
    q = statistics.quantiles(xs, n=4)
    return (q[2] - q[0]) / 1.349


def build(task, source: str, folder: Path, name: str) -> ctypes.CDLL:  # type: ignore[no-untyped-def]
    header = folder / "contract.h"
    header.write_text(task.header())
    cu, so = folder / f"{name}.cu", folder / f"{name}.so"
    cu.write_text(source)
    done = subprocess.run(["nvcc", "-arch=sm_90", "-O3", "-shared", "-Xcompiler", "-fPIC", "-std=c++17",
                           "-include", str(header), str(cu), "-o", str(so)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"nvcc failed for {name}:\n{done.stderr[-2000:]}")
    lib = ctypes.CDLL(str(so))
    lib.launch.restype = ctypes.c_int
    return lib


def build_all(task, sources: dict[str, str], folder: Path) -> dict[str, ctypes.CDLL]:  # type: ignore[no-untyped-def]
    """Every variant built in parallel (nvcc is single-threaded), keyed as ``sources``."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        jobs = {name: pool.submit(build, task, source, folder, f"v{i}") for i, (name, source) in enumerate(sources.items())}
        return {name: job.result() for name, job in jobs.items()}


def flush_l2(flush, mode: str = "read") -> None:  # type: ignore[no-untyped-def]
    """Empty the L2 before a timed call: ``read``, the evaluator's own flush (a read pass that
    leaves clean lines: evo_fsr/verdict/l2_flush.empty_l2, on torch's stream); ``write``, a
    memset of ``flush`` (the evaluator's before the twentieth session: it leaves the L2 full of
    dirty lines that the next kernel's misses write back)."""
    if mode == "write":
        flush.zero_()
    elif mode == "read":
        import torch

        from evo_fsr.verdict.l2_flush import empty_l2

        empty_l2(torch.cuda.current_stream().cuda_stream)
    else:
        raise ValueError(f"flush mode {mode!r}: write or read")


def interleaved_medians_us(calls: dict[str, Callable[[], object]], reps: int, flush,  # type: ignore[no-untyped-def]
                           mode: str = "read") -> dict[str, float]:
    """Each round times every call once, in order, the L2 flushed (``flush_l2``) before each."""
    import torch

    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(reps):
        for name, call in calls.items():
            flush_l2(flush, mode)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def print_rows(label: str, shapes: list[int], rows: dict[str, list[str]]) -> None:
    """The table: one row a variant, one cell a shape (cells already formatted)."""
    width = min(48, max(len(label), *(len(name) for name in rows)))
    cell = max((len(c) for cells in rows.values() for c in cells), default=8)
    print(f"{label:<{width}} " + " | ".join(f"{f'n={n}':<{cell}}" for n in shapes))
    for name, cells in rows.items():
        print(f"{name[:width]:<{width}} " + " | ".join(cells))


def polling_await(original: Callable) -> Callable:  # type: ignore[type-arg]
    """``RunnerProcess.await_reply`` that first polls the reply pipe (``select`` with no timeout)
    for up to 50 ms, then falls back to ``original`` (which checks the reply as always)."""
    def await_reply(self, command, timeout_s):  # type: ignore[no-untyped-def]
        end = time.monotonic() + min(timeout_s, 0.05)
        while b"\n" not in self._buffer and time.monotonic() < end:
            ready, _, _ = select.select([self._reply_r], [], [], 0)
            if ready:
                chunk = os.read(self._reply_r, 1 << 16)
                if not chunk:
                    break
                self._buffer += chunk
        return original(self, command, timeout_s)
    return await_reply
