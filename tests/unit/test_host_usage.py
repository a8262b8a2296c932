"""runner/host_usage.py: a process's CPU clock read from outside it, and the crowded-window rule."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from evo_fsr.runner.host_usage import CROWDED_SHARE, CpuClock, crowded, window_cores

BUSY = ("import threading, time\n"
        "def spin():\n"
        "    end = time.perf_counter() + {s}\n"
        "    while time.perf_counter() < end: pass\n"
        "t = threading.Thread(target=spin); t.start(); t.join()\n"
        "time.sleep(30)\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's process CPU clocks")
def test_the_clock_counts_a_thread_that_is_gone_and_not_a_sleeping_process():
    """Fails if the clock id is not the process's (say, a thread's, or the caller's own): a child
    whose thread spun 0.4 s and ended has used ~0.4 s, a sleeping child almost nothing, and the
    clock of a process that is gone reads -1."""
    busy = subprocess.Popen([sys.executable, "-c", BUSY.format(s=0.4)])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(1.5)                                     # both started, the spin over, its thread gone
        busy_s, idle_s = CpuClock(busy.pid).ns() * 1e-9, CpuClock(idle.pid).ns() * 1e-9
        assert 0.35 < busy_s < 1.2, busy_s                  # the spin, plus the interpreter's start
        assert 0.0 <= idle_s < 0.3 and busy_s - idle_s > 0.3, (idle_s, busy_s)
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()
    assert CpuClock(busy.pid).ns() == -1


def test_window_cores_and_crowded_shapes():
    assert window_cores(3.0, 2.0) == pytest.approx(1.5)
    assert window_cores(-1.0, 2.0) is None and window_cores(1.0, 0.0) is None
    honest = [1.0] * 12 + [2.0] * 3 + [None]               # a quarter over the limit at most: outliers
    assert 3 <= CROWDED_SHARE * 15
    assert crowded(honest, 1.5) is None
    spinner = [1.0] * 11 + [9.8] * 5
    why = crowded(spinner, 1.5)
    assert why is not None and "5 of 16 windows" in why and "most 9.80" in why
    assert crowded([None, None], 1.5) is None and crowded([], 1.5) is None
