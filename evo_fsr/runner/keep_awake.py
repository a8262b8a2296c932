"""A trusted spinner on each pinned runner core, so that no candidate gains by keeping it awake.

Why: a pinned runner (``cores.py``) serves on one core, and between its commands that core is
idle, so it may fall into a deep idle state. Waking from it costs the first steps of the next
window (the runner's wake-up on the command, its first launches), and those steps are inside
the timed window. A candidate's own thread that spins a fifth of the time (SCHED_IDLE, so it
takes nothing from the serving thread) keeps that core shallow: its windows then run shorter
than the twin's that calibrated the window overhead, and a forged claim hides in the
difference (suite v4's ``keeps_one_core_awake_a_fifth_of_its_windows``: x1.67 against the
honest seed's x1.42 on an H200, pinned, forty-eighth session). The honest seeds paid the other
side of it: monte_carlo's persistent seed read 0.76x pinned of what it read unpinned in the
same process (``scripts/probe_pinning.py``).

So the evaluator keeps every runner core awake itself: one process of its own (not the
runner's, so no candidate can signal it, and confine.py refuses the candidate the scheduling,
priority and limit calls on another process) pinned to the core at ``SCHED_IDLE``, spinning.
Any runner thread takes the core from it at once, and every runner on that core (candidate,
baseline, twin) meets the same awake core, so a candidate's own spinner has nothing left to buy.
It costs the host that core's idle time while an evaluator holds it. One spinner a core and
process, shared by the evaluators that hold it (counted) and ended with the last one, or with
this process (it watches its parent). ``EvalConfig.keep_runner_cores_awake``, or
``EVO_FSR_KEEP_AWAKE=0``/``1``, turns it off or on.
"""
from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import threading

log = logging.getLogger(__name__)

KEEP_AWAKE_ENV = "EVO_FSR_KEEP_AWAKE"

# the spinner: on its core, at the lowest policy, until its parent is gone (a busy loop that
# asks the kernel for its parent: never idle, never holding anything)
_SPIN = """
import os, sys
parent, core = int(sys.argv[1]), int(sys.argv[2])
os.sched_setaffinity(0, {core})
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
print("awake", flush=True)
while os.getppid() == parent:
    pass
"""

_lock = threading.Lock()
_spinners: dict[int, subprocess.Popen[bytes]] = {}
_holders: dict[int, int] = {}


def requested(configured: bool) -> bool:
    """``EVO_FSR_KEEP_AWAKE`` where it is 0 or 1, else ``configured``."""
    return {"0": False, "1": True}.get(os.environ.get(KEEP_AWAKE_ENV, "").strip(), configured)


def _start(core: int) -> subprocess.Popen[bytes] | None:
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _SPIN, str(os.getpid()), str(core)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, close_fds=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"awake":         # it could not take its core or policy
        proc.kill()
        _, err = proc.communicate(timeout=10)
        log.warning("runner core %d not kept awake: %s", core, err.decode(errors="replace").strip()[-300:])
        return None
    log.info("runner core %d kept awake by a SCHED_IDLE spinner (pid %d)", core, proc.pid)
    return proc


def hold(core: int) -> bool:
    """Keep ``core`` awake (a spinner started on the first hold of this process); True once it
    spins. Every ``hold`` that returned True takes one ``release``."""
    with _lock:
        proc = _spinners.get(core)
        if proc is None or proc.poll() is not None:
            proc = _start(core)
            if proc is None:
                return False
            _spinners[core] = proc
        _holders[core] = _holders.get(core, 0) + 1
        return True


def release(core: int) -> None:
    """One holder of ``core`` less; the spinner ends with the last."""
    with _lock:
        left = _holders.get(core, 0) - 1
        if left > 0:
            _holders[core] = left
            return
        _holders.pop(core, None)
        proc = _spinners.pop(core, None)
    if proc is not None:
        _stop(proc)


def spinner_pid(core: int) -> int | None:
    """The pid of the spinner on ``core``, None where none spins (for tests and probes)."""
    with _lock:
        proc = _spinners.get(core)
        return proc.pid if proc is not None and proc.poll() is None else None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    try:
        proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        log.warning("keep-awake spinner %d did not end", proc.pid)


@atexit.register
def _stop_all() -> None:
    with _lock:
        procs = list(_spinners.values())
        _spinners.clear()
        _holders.clear()
    for proc in procs:
        _stop(proc)


__all__ = ["KEEP_AWAKE_ENV", "hold", "release", "requested", "spinner_pid"]
