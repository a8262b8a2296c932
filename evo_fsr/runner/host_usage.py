"""What a runner's threads spend of the host's CPU inside its timed windows.

A runner runs only while it serves a command (harness.py stops its group between commands), and
an honest one serves with one thread: the runner's Python, which spins on its command pipe and
waits in the device synchronizes, through the whole of every window.  A candidate's library can start
threads of its own, and one per core kept spinning while its runner serves (suite v4,
``keeps_the_host_awake_through_its_windows``) keeps every core of the host out of its idle states
through the candidate's windows: the trusted side's host steps inside them run faster than in the
twin's and the baseline's windows, whose overhead is the one subtracted, and that difference is
credited to the candidate (x1.68 against the honest seed's x1.43 on an H200).

Each timed window reads the runner process's CPU clock at rest (every thread of it stopped,
``harness.RunnerProcess.cpu_at_rest``) just before the runner is woken for it and again just after
it closes, the runner stopped for that read and continued after it (``CallTimes.runner_cpu_ms``
and ``runner_span_ms``, timed_window.py), both outside the window's own clock.  At rest, because
Linux brings another process's running threads' time up to date only at the scheduler's tick and
at their context switches: read while it runs, a thread that spun through a 0.3 ms window read no
CPU in 92 % of such windows and ~13 cores in the rest (a 250 Hz CPU machine), so a spinner whose
windows are short next to the tick went unseen in most of them.  ``crowded`` is what the timing
stage sets a candidate aside for: more than ``CROWDED_SHARE`` of one shape's windows with more
than ``EvalConfig.window_cores_limit`` CPU seconds per second of that span.  Per window and per
shape, not over the runner's life: serving time a runner stretches at no CPU (a reply held back
after its calls' completion mark, slow untimed or outlying calls) would dilute a lifetime average,
and a shape whose median windows were all crowded would hide among other shapes.  For the same
reason the wait for the stop after a window counts at most ``stop_credit_ms`` of the span.

Beside it, the serving thread's own CPU over the same span (``serving_thread_ns``), so that what
the runner's other threads took is read apart (``others_share``; ``CallTimes.runner_serving_ms``,
the ``window_others_*`` stage figures) and judged as the total is, at ``EvalConfig.
window_others_limit`` (fiftieth session). Pinned (cores.py), a runner's threads share one core and
its total cannot pass one core, so a spinner of the candidate's shows in the others' share only;
an honest runner's others are the CUDA driver's threads and the harness's arm timer (0.003-0.06
of a core at the median on an H200, SECURITY.md).  Measured and not judged: how often those other
threads were put on a CPU (``other_runs``, schedstat's run count; the ``window_other_runs_*``
figures), the trace of a thread that wakes often for a moment, keeping a core out of deep idle at
next to no CPU.

The clock is the process's CPU clock (``clock_gettime`` on ``MAKE_PROCESS_CPUCLOCK(pid,
CPUCLOCK_SCHED)``: every thread's time, those gone included, in nanoseconds; Linux lets any
process read it, about 1 us a read).
"""
from __future__ import annotations

import ctypes
import os
import statistics
import time
from dataclasses import dataclass
from typing import Sequence

#: a shape's windows that may read over the limit (outliers: a driver thread's work in a window)
#: before the candidate is set aside; a spinner must be in more than half of them to move a median
CROWDED_SHARE = 0.25

#: the least of the wait for a runner's stop after a window that its span counts (the rest of the
#: wait counts up to the span's own length before it): an honest stop takes tens of microseconds
#: on a GPU host and up to ~1.6 ms on CI's two busy cores; a thread held in an uninterruptible
#: wait (an fsync) delays it at no CPU
STOP_CREDIT_MS = 0.5


@dataclass(frozen=True)
class RestCpu:
    """A runner's CPU clocks read at rest (``harness.RunnerProcess.rest_cpu``)."""
    total_ns: int            # every thread's (CpuClock; -1: not read)
    serving_ns: int          # the serving thread's (serving_thread_ns; -1: not read)
    at_s: float              # the trusted perf_counter just after the total was read: where a span
                             # read at its end stops (a span's start is taken after the whole reading)
    other_runs: int = -1     # the other threads' runs on a CPU so far (other_runs; -1: not read)


class CpuClock:
    """The CPU nanoseconds process ``pid`` has used so far, all its threads; -1 where the clock
    cannot be read (no ``/proc`` fallback: its user and system times come in 10 ms ticks, several
    times a short window, which would read an honest window as many cores or none)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED): ((~pid) << 3) | 2, a 32-bit clockid_t
        self.clock_id = ctypes.c_int32(((~pid) << 3) | 2).value

    def ns(self) -> int:
        try:
            return time.clock_gettime_ns(self.clock_id)
        except (OSError, AttributeError):     # gone, or no such clock on this platform
            return -1


def serving_thread_ns(pid: int) -> int:
    """The CPU nanoseconds the serving thread of runner ``pid`` (its main thread, tid ``pid``) has
    used so far, from ``/proc/<pid>/task/<pid>/schedstat`` (its first field, in nanoseconds, brought
    up to date at every context switch: exact for a thread at rest); -1 where it cannot be read.
    (A thread's own CPU clock cannot be read from another process.)"""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat", "rb") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return -1


def other_runs(pid: int) -> int:
    """How many times the threads of runner ``pid`` other than its serving thread (tid ``pid``) have
    been put on a CPU so far: the sum of their ``/proc/<pid>/task/<tid>/schedstat`` run counts (its
    third field, one per wake-up of a sleeping thread); -1 where the task list cannot be read.  A
    thread gone between two reads takes its runs with it (a difference is clamped at 0 by its reader)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return -1
    runs = 0
    for tid in tids:
        if tid == str(pid):
            continue
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                runs += int(f.read().split()[2])
        except (OSError, ValueError, IndexError):
            continue                # gone since the listing
    return runs


def others_share(runner_cpu_ms: float, serving_ms: float, span_ms: float) -> float | None:
    """The cores per second of a window's span that the runner's threads other than its serving
    thread took (None: not read)."""
    if runner_cpu_ms < 0 or serving_ms < 0 or span_ms <= 0:
        return None
    return max(0.0, runner_cpu_ms - serving_ms) / span_ms


def stop_credit_ms(span_ms: float) -> float:
    """How much of the wait for the runner's stop after a window counts in a span that ran
    ``span_ms`` up to the window's end: at most that span again, and at least ``STOP_CREDIT_MS``."""
    return max(STOP_CREDIT_MS, span_ms)


def window_cores(runner_cpu_ms: float, span_ms: float) -> float | None:
    """CPU seconds per second of a window's span (None: not read)."""
    return runner_cpu_ms / span_ms if runner_cpu_ms >= 0 and span_ms > 0 else None


def flagged_under(cores: Sequence[float | None]) -> float | None:
    """The limit under which these windows (one shape's ``window_cores``) set the candidate aside:
    more than ``CROWDED_SHARE`` of them read over any limit below it (None: nothing read).  The
    room an honest runner's windows leave under ``EvalConfig.window_cores_limit`` is read from it."""
    read = sorted((c for c in cores if c is not None), reverse=True)
    if not read:
        return None
    return read[int(CROWDED_SHARE * len(read))]     # more than the share over it: one past the share


def crowded(cores: Sequence[float | None], limit: float, what: str = "of the host's cores") -> str | None:
    """Why one shape's windows (their ``window_cores``, or their ``others_share``, ``what`` saying
    which) set the candidate aside at ``limit`` (``flagged_under``), or None."""
    under = flagged_under(cores)
    if under is None or limit >= under:
        return None
    read = [c for c in cores if c is not None]
    return (f"{sum(c > limit for c in read)} of {len(read)} windows took over {limit:g} {what} "
            f"(median {statistics.median(read):.2f}, most {max(read):.2f})")


__all__ = ["CROWDED_SHARE", "STOP_CREDIT_MS", "CpuClock", "RestCpu", "crowded", "flagged_under", "other_runs",
           "others_share", "serving_thread_ns", "stop_credit_ms", "window_cores"]
