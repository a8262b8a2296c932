"""Every timed window opens on a GPU that no other CUDA context is using.

A runner is stopped (SIGSTOP) once it has replied, so none of a candidate's threads runs while
anything else is timed.  Its GPU work is another matter: a thread can queue a kernel between the
runner's device-wide synchronize and the stop (a helper thread that waits for the call's stream,
or a patched synchronize), and that kernel goes on running while the baseline's windows are
timed.  Contexts of different processes time-slice the GPU, so such work slows the baseline's
windows by whole slices; the single-call floor under a batch-fusing kernel (profile.py) is the
candidate's window less the baseline's, and slowed baseline windows drive it to zero.

The gate: before a window opens, the evaluator times a tiny kernel of its own, launch to
synchronize, by the host clock.  Measured on an NVIDIA H200 (twenty-fifth session,
``scripts/probe_gpu_idle.py``): on an idle GPU 10-25 us (the most of 600: 0.16 ms); with another
process's kernel running, whether it fills the GPU or one block, or is a queue of 50 us kernels,
2.1 ms every time (the time slice); beside a process that runs a 0.13 ms copy and synchronizes,
0.19-0.38 ms.  A probe over ``BUSY_PROBE_MS`` reads "busy": ``PROBES`` fast probes in a row open
the window, and the gate waits (``PAUSE_S`` between rounds) up to its deadline, then raises
``GpuBusy``.

What a busy deadline means depends on who can be on the GPU.  Each evaluator has its GPU alone
(one Ray actor a GPU), and every trusted process synchronizes before it replies, so work left
running past the deadline is the candidate's: the session kills the candidate's runner (its
context and all its work go with it) and probes again (``session.py``): idle now, the candidate
is flagged; still busy, another process shares the GPU and no timing on it can be trusted.
Where GPUs are shared on purpose (the GPU test groups run nine at once), ``EVO_FSR_GPU_SHARED=1``
or ``EvalConfig.gpu_shared`` turns the gate off, and with it this protection.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Callable

log = logging.getLogger(__name__)

#: A probe (tiny kernel, launch to synchronize, host clock) slower than this reads "busy".
BUSY_PROBE_MS = 1.0
#: Fast probes in a row that open a window (a busy context holds the GPU for a whole time slice;
#: a probe that happens to land at a slice's end still waits for the next one's).
PROBES = 3
#: How long a window waits for another context's work to end before ``GpuBusy``.
IDLE_WAIT_S = 1.0
#: After the candidate's runner is killed: how long its context's teardown may keep the GPU.
ATTRIBUTION_WAIT_S = 1.0
PAUSE_S = 0.0005
SHARED_ENV = "EVO_FSR_GPU_SHARED"


class GpuBusy(Exception):
    """Other contexts' work kept the GPU for the whole wait."""

    def __init__(self, waited_s: float, probe_ms: float) -> None:
        super().__init__(f"the GPU stayed busy with another CUDA context's work for {waited_s:.2f} s "
                         f"(a tiny kernel took {probe_ms:.2f} ms, against under {BUSY_PROBE_MS:g} ms on an idle GPU)")
        self.waited_s = waited_s
        self.probe_ms = probe_ms


def shared_gpu(exc: GpuBusy, when: str) -> str:
    """The summary of a busy GPU that is not the candidate's doing (``crash:evaluator``)."""
    return (f"crash: {exc}, {when}: another process is using this GPU, and no timing on it can be trusted "
            f"({SHARED_ENV}=1 times anyway)")


def shared_from_env() -> bool:
    return os.environ.get(SHARED_ENV, "").lower() in ("1", "yes", "true", "on")


def wait_until_idle(probe_ms: Callable[[], float], wait_s: float, *, clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> int:
    """Return once ``PROBES`` probes in a row read idle, with the number of busy rounds before;
    raise ``GpuBusy`` once ``wait_s`` has passed without."""
    start = clock()
    busy = 0
    while True:
        slowest = 0.0
        for _ in range(PROBES):
            slowest = probe_ms()
            if slowest >= BUSY_PROBE_MS:
                break
        else:
            return busy
        busy += 1
        waited = clock() - start
        if waited >= wait_s:
            raise GpuBusy(waited, slowest)
        sleep(PAUSE_S)


class IdleGate:
    """``gate()`` before a timed window opens (timed_window.timed_batch); counts the windows that had to
    wait and the seconds they waited (the session reports both)."""

    def __init__(self, probe_ms: Callable[[], float], shared: bool = False, wait_s: float = IDLE_WAIT_S) -> None:
        self.probe_ms, self.shared, self.wait_s = probe_ms, shared, wait_s
        self.waits = 0
        self.waited_s = 0.0
        if shared:
            log.warning("GPU marked shared (%s=1 or eval.gpu_shared): timed windows open without checking that "
                        "no other context is using the GPU, so a candidate's GPU work left running after its "
                        "reply is not caught", SHARED_ENV)

    def __call__(self) -> None:
        if self.shared:
            return
        start = time.monotonic()
        if wait_until_idle(self.probe_ms, self.wait_s):
            self.waits += 1
            self.waited_s += time.monotonic() - start

    def idle_within(self, wait_s: float) -> bool:
        """Whether the GPU reads idle within ``wait_s`` (the session's attribution)."""
        try:
            wait_until_idle(self.probe_ms, wait_s)
        except GpuBusy:
            return False
        return True


__all__ = ["ATTRIBUTION_WAIT_S", "BUSY_PROBE_MS", "GpuBusy", "IDLE_WAIT_S", "IdleGate", "PROBES", "SHARED_ENV",
           "shared_from_env", "shared_gpu", "wait_until_idle"]
