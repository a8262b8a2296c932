"""runner/host_usage.py: a process's CPU seconds read from /proc, and the serving share."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from evo_fsr.runner.host_usage import ServingUsage, process_cpu_s

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

BUSY = "import time\nend = time.perf_counter() + {s}\nwhile time.perf_counter() < end: pass\ntime.sleep(30)\n"


def test_a_busy_process_reads_its_cpu_seconds_and_a_sleeping_one_none():
    """Fails if the ticks are read from the wrong fields or scaled wrongly: a child that spins
    0.4 s and then sleeps has used ~0.4 s, and a sleeping child almost nothing."""
    busy = subprocess.Popen([sys.executable, "-c", BUSY.format(s=0.4)])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(1.5)                                     # both started, the spin over
        busy_s, idle_s = process_cpu_s(busy.pid), process_cpu_s(idle.pid)
        assert busy_s is not None and idle_s is not None
        assert 0.3 < busy_s < 1.0, busy_s                   # the spin, plus the interpreter's start
        assert idle_s < 0.25 < busy_s - idle_s, (idle_s, busy_s)
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()
    assert process_cpu_s(busy.pid) is None                  # gone


def test_serving_usage_cores():
    usage = ServingUsage(cpu_s=0.9, serving_s=0.6)
    assert usage.cores == pytest.approx(1.5)
    assert ServingUsage(0.1, 0.0).cores == 0.0
    assert "1.50 cores" in usage.describe() and "900 ms of CPU" in usage.describe()
