"""runner/host_usage.py: a process's CPU clock read from outside it, and the crowded-window rule."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import time

import pytest

from evo_fsr.runner.harness import RunnerProcess
from evo_fsr.runner.host_usage import (CROWDED_SHARE, STOP_CREDIT_MS, CpuClock, crowded, flagged_under,
                                       other_runs, others_share, serving_thread_ns, stop_credit_ms,
                                       window_cores)

BUSY = ("import threading, time\n"          # {s} s of the thread's own CPU, however busy the machine
        "def spin():\n"
        "    end = time.thread_time() + {s}\n"
        "    while time.thread_time() < end: pass\n"
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
        time.sleep(3.0)                                     # both started, the spin over, its thread gone
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


def test_flagged_under_is_the_limit_crowded_turns_at():
    """crowded(cores, limit) sets the windows aside exactly when more than CROWDED_SHARE of those
    read are over the limit (counted here), which is exactly when the limit is under
    flagged_under(cores): every window count round the quarter, every limit between and at the readings."""
    rng = random.Random(7)
    for n in range(1, 41):
        cores = [rng.choice([None, round(rng.uniform(0.8, 3.0), 2)]) for _ in range(n)]
        under = flagged_under(cores)
        read = sorted({c for c in cores if c is not None})
        if under is None:
            assert not read
            continue
        for limit in read + [r + 0.005 for r in read] + [read[0] - 0.01]:
            over = sum(c is not None and c > limit for c in cores)
            flagged = over > CROWDED_SHARE * sum(c is not None for c in cores)
            assert (crowded(cores, limit) is not None) == flagged == (limit < under), (cores, limit, under)
    assert flagged_under([None]) is None
    assert flagged_under([1.0] * 12 + [2.0] * 4) == 1.0 and flagged_under([1.0] * 11 + [2.0] * 5) == 2.0


SPINNER = ("import threading, time\n"
           "def spin():\n"
           "    while True: pass\n"
           "threading.Thread(target=spin, daemon=True).start()\n"
           "time.sleep(60)\n")


def _runner_of(proc: subprocess.Popen) -> RunnerProcess:
    """harness.RunnerProcess's stop, settle and CPU reads around a plain child (its own process
    group, as a runner's), without the sandbox and the pipes."""
    runner = object.__new__(RunnerProcess)
    runner.proc, runner.cpu, runner.unsettled = proc, CpuClock(proc.pid), 0
    runner._stopped = runner._settled = False
    return runner


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's process CPU clocks and /proc")
def test_a_thread_that_spins_through_short_windows_is_read_in_each_of_them():
    """Fails if the window's CPU is read while the runner runs: Linux brings another process's
    running threads up to date only at the scheduler's tick (every 1-4 ms) and at their context
    switches, so a thread spinning through 1 ms windows then reads no CPU in most of them on a
    250 Hz machine and several cores in the rest, and a spinner on short windows goes unflagged.
    Read at rest (harness.cpu_at_rest), every window reads its spin.  The trusted side sleeps
    through each window here, leaving the child a core."""
    proc = subprocess.Popen([sys.executable, "-c", SPINNER], start_new_session=True)
    runner = _runner_of(proc)
    try:
        time.sleep(0.3)                                   # the spinner started
        runner._stop()
        cores = []
        for _ in range(40):
            start, t0 = runner.cpu_at_rest(), time.perf_counter()
            runner._continue()
            time.sleep(1e-3)
            cpu_end = runner.cpu_at_rest()                # stops it for the read, continues it after
            cores.append(window_cores((cpu_end - start) * 1e-6, (time.perf_counter() - t0) * 1e3))
            runner._stop()
        read = sorted(c for c in cores if c is not None)
        assert len(read) == len(cores)
        assert read[len(read) // 5] > 0.3, read           # no window read as (nearly) idle
        assert read[len(read) // 2] < 2.0, read           # nor as many cores: one thread's time
    finally:
        proc.kill()
        proc.wait()


def test_the_wait_for_a_stop_counts_in_a_span_up_to_the_span_itself():
    assert stop_credit_ms(0.1) == STOP_CREDIT_MS and stop_credit_ms(3.0) == 3.0


def test_the_serving_threads_clock_leaves_out_the_other_threads():
    """``serving_thread_ns`` reads the main thread's CPU only: a second thread's spin shows in the
    process's clock and in ``others_share``, not in the main thread's.  Fails if it reads the
    process (or nothing)."""
    import threading

    from evo_fsr.runner.host_usage import others_share, serving_thread_ns

    pid = os.getpid()
    clock = CpuClock(pid)
    total0, serving0, t0 = clock.ns(), serving_thread_ns(pid), time.perf_counter()

    def spin() -> None:
        while time.perf_counter() - t0 < 0.3:
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    spinner.join()          # the main thread waits, asleep
    span_ms = (time.perf_counter() - t0) * 1e3
    total_ms, serving_ms = (clock.ns() - total0) * 1e-6, (serving_thread_ns(pid) - serving0) * 1e-6
    assert serving0 > 0 and 0.0 <= serving_ms < 0.5 * total_ms, (serving_ms, total_ms)
    share = others_share(total_ms, serving_ms, span_ms)
    assert share is not None and share > 0.5, share
    assert others_share(total_ms, -1.0, span_ms) is None and others_share(-1.0, serving_ms, span_ms) is None


WAKER = ("import threading, time\n"       # a thread that wakes every millisecond, at next to no CPU
         "def wake():\n"
         "    while True: time.sleep(1e-3)\n"
         "threading.Thread(target=wake, daemon=True).start()\n"
         "time.sleep(60)\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's /proc schedstat")
def test_other_runs_count_the_wake_ups_of_threads_but_the_serving_one():
    """Fails if the serving thread's runs are counted, or the wrong field is read (the CPU
    nanoseconds would read as millions, the wait as zero): a thread that sleeps a millisecond at a
    time is put on a CPU hundreds of times in half a second, while the serving thread, asleep,
    is not, and a process with no other thread reads none."""
    waker = subprocess.Popen([sys.executable, "-c", WAKER])
    alone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(1.0)                                     # both started
        first, lone = other_runs(waker.pid), other_runs(alone.pid)
        serving = serving_thread_ns(waker.pid)
        time.sleep(0.5)
        runs = other_runs(waker.pid) - first
        assert 100 < runs < 5000, runs                      # ~500 wake-ups, however slow the timer
        assert lone == other_runs(alone.pid) == 0
        assert serving_thread_ns(waker.pid) == serving      # the sleeping main thread did not run
    finally:
        for p in (waker, alone):
            p.kill()
            p.wait()
    assert other_runs(waker.pid) == -1


def test_others_share_is_the_runner_less_its_serving_thread():
    assert others_share(3.0, 1.0, 4.0) == pytest.approx(0.5)
    assert others_share(1.0, 1.2, 4.0) == 0.0               # clocks read a moment apart: never below 0
    assert others_share(-1.0, 1.0, 4.0) is None and others_share(1.0, -1.0, 4.0) is None
    assert others_share(1.0, 1.0, 0.0) is None
