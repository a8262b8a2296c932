"""Nsight Compute metrics for elite kernels, for the prompt (optional, off by default).

``llm.profile_elites: N`` asks for the top N kernels to be profiled once each: ``ncu_command``
wraps the command that runs a candidate (e.g. the runner on one benchmark shape) in
``ncu --csv``, ``profile`` runs it, and ``parse_ncu_csv`` reads the metrics below into an
``NcuProfile`` (averaged over the profiled kernel launches) that ``describe`` puts in the
prompt.

Cost (an estimate, NOT measured here; no GPU was used to write this module): collecting these
~15 metrics makes Nsight Compute replay each profiled launch about 10-40 times, plus several
seconds of tool start-up, so roughly 5-30 s of GPU time per profiled candidate on an H100 for
the conv2d shapes, while that GPU evaluates nothing else.  Profile elites only (a handful per
run), which is why it is off by default.
"""
from __future__ import annotations

import csv
import io
import subprocess
from dataclasses import dataclass
from typing import Sequence

#: metric -> short name in the prompt.
METRICS: dict[str, str] = {
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy %",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput %",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput %",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "L2 throughput %",
    "l1tex__throughput.avg.pct_of_peak_sustained_active": "L1/shared throughput %",
}
#: warp stall reasons, in warps per issued instruction (the larger, the more that reason stalls).
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"
STALLS = ("long_scoreboard", "short_scoreboard", "barrier", "mio_throttle", "math_pipe_throttle",
          "lg_throttle", "wait", "not_selected", "memory_throttle", "tex_throttle")


def all_metrics() -> list[str]:
    return [*METRICS, *(f"{STALL_PREFIX}{s}{STALL_SUFFIX}" for s in STALLS)]


@dataclass(frozen=True)
class NcuProfile:
    kernels: tuple[str, ...]                      # kernel names profiled
    metrics: tuple[tuple[str, float], ...]        # (short name, value) averaged over launches
    stalls: tuple[tuple[str, float], ...]         # (reason, warps per issue), largest first

    def describe(self, top_stalls: int = 4) -> str:
        values = ", ".join(f"{name} {value:.1f}" for name, value in self.metrics)
        stalls = ", ".join(f"{name} {value:.2f}" for name, value in self.stalls[:top_stalls])
        return (f"Nsight Compute ({', '.join(self.kernels)}): {values}"
                + (f"; top warp stall reasons (warps per issued instruction): {stalls}" if stalls else ""))


def ncu_command(target: Sequence[str], *, ncu: str = "ncu", launch_count: int = 3,
                kernel_regex: str = "") -> list[str]:
    """``ncu --csv`` around ``target`` (the argv that launches the candidate)."""
    cmd = [ncu, "--csv", "--metrics", ",".join(all_metrics()), "--launch-count", str(launch_count)]
    if kernel_regex:
        cmd += ["--kernel-name", f"regex:{kernel_regex}"]
    return cmd + list(target)


def profile(target: Sequence[str], *, timeout_s: float = 120.0, ncu: str = "ncu") -> NcuProfile | None:
    """Run ``target`` under Nsight Compute and parse its CSV; None when ncu fails or finds nothing."""
    try:
        out = subprocess.run(ncu_command(target, ncu=ncu), capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_ncu_csv(out.stdout) if out.returncode == 0 else None


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> NcuProfile | None:
    """The metrics of ``ncu --csv --metrics ...`` output (one row per kernel launch and metric,
    columns "Kernel Name", "Metric Name", "Metric Value"); lines before the header (the
    profiled program's own output, ``==PROF==`` lines) are skipped."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"') and "Metric Name" in ln), None)
    if start is None:
        return None
    sums: dict[str, list[float]] = {}
    kernels: list[str] = []
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        name, value = row.get("Metric Name", ""), _number(row.get("Metric Value", ""))
        if not name or value is None:
            continue
        kernel = (row.get("Kernel Name") or "").split("(")[0]
        if kernel and kernel not in kernels:
            kernels.append(kernel)
        sums.setdefault(name, []).append(value)
    if not sums:
        return None
    mean = {k: sum(v) / len(v) for k, v in sums.items()}
    metrics = tuple((short, mean[m]) for m, short in METRICS.items() if m in mean)
    stalls = sorted(((s.replace("_", " "), mean[f"{STALL_PREFIX}{s}{STALL_SUFFIX}"]) for s in STALLS
                     if f"{STALL_PREFIX}{s}{STALL_SUFFIX}" in mean), key=lambda p: -p[1])
    return NcuProfile(tuple(kernels), metrics, tuple(stalls))
