"""What a runner's threads spend of the host's CPU while it serves commands.

A runner runs only while it serves a command (harness.py stops its group between commands), and
an honest one serves with one thread: the runner's Python, which spins on its command pipe and in
the device synchronizes.  A candidate's library can start threads of its own, and one per core
kept spinning while its runner serves (suite v4, ``keeps_the_host_awake_through_its_windows``)
keeps every core of the host out of its idle states through the candidate's windows: the trusted
side's host steps inside them run faster than in the twin's and the baseline's windows, whose
overhead is the one subtracted, and that difference is credited to the candidate (x1.68 against
the honest seed's x1.43 on an H200).  ``ServingUsage.cores`` is the CPU the runner's process
took per second of serving; the timing stage sets a candidate aside when it is over
``EvalConfig.serving_cores_limit`` (timing_stage.py).

The CPU time is the process's, from ``/proc/<pid>/stat`` (every thread's, those gone included,
in clock ticks), or the sum of its live threads' ``schedstat`` (nanoseconds) where that is more.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


@dataclass(frozen=True)
class ServingUsage:
    """A runner's CPU seconds and its serving seconds (continued to stopped) over one span."""

    cpu_s: float
    serving_s: float

    @property
    def cores(self) -> float:
        """CPU seconds per serving second (0 when it has not served)."""
        return self.cpu_s / self.serving_s if self.serving_s > 0 else 0.0

    def describe(self) -> str:
        return f"{self.cores:.2f} cores ({self.cpu_s * 1e3:.0f} ms of CPU in {self.serving_s * 1e3:.0f} ms of serving)"


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds the process ``pid`` has used, user and system, all its threads; None when it
    is gone or ``/proc`` cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[-1].split()      # the name may hold ") "
        ticks_s = (int(fields[11]) + int(fields[12])) * _TICK_S    # utime, stime (fields 14 and 15)
    except (OSError, IndexError, ValueError):
        return None
    return max(ticks_s, _live_threads_s(pid))


def _live_threads_s(pid: int) -> float:
    """The sum of the live threads' time on a CPU (``schedstat``'s first field, ns)."""
    total_ns = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                total_ns += int(f.read().split()[0])
        except (OSError, IndexError, ValueError):
            continue                    # the thread is gone, or no schedstat on this kernel
    return total_ns * 1e-9


__all__ = ["ServingUsage", "process_cpu_s"]
