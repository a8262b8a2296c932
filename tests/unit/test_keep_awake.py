"""The trusted keep-awake spinner (runner/keep_awake.py): its core, its policy, its end."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from evo_fsr.runner import keep_awake


def test_the_environment_overrides_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(keep_awake.KEEP_AWAKE_ENV, raising=False)
    assert keep_awake.requested(True) and not keep_awake.requested(False)
    monkeypatch.setenv(keep_awake.KEEP_AWAKE_ENV, "0")
    assert not keep_awake.requested(True)
    monkeypatch.setenv(keep_awake.KEEP_AWAKE_ENV, "1")
    assert keep_awake.requested(False)
    monkeypatch.setenv(keep_awake.KEEP_AWAKE_ENV, "yes")      # not 0 or 1: the config decides
    assert not keep_awake.requested(False)


def test_a_held_core_spins_until_its_last_release() -> None:
    core = min(os.sched_getaffinity(0))
    assert keep_awake.hold(core) and keep_awake.hold(core)
    pid = keep_awake.spinner_pid(core)
    try:
        assert pid is not None
        assert os.sched_getaffinity(pid) == {core} and os.sched_getscheduler(pid) == os.SCHED_IDLE
        time.sleep(0.3)
        ticks = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[11])   # utime
        assert ticks > 0, "the spinner does not spin"
        keep_awake.release(core)
        assert keep_awake.spinner_pid(core) == pid
    finally:
        keep_awake.release(core)
    assert keep_awake.spinner_pid(core) is None


def test_the_spinner_ends_with_a_process_that_dies_without_releasing() -> None:
    """A process killed outright (no atexit, no release) leaves no spinner behind."""
    code = ("import os, sys; from evo_fsr.runner import keep_awake; core = min(os.sched_getaffinity(0)); "
            "assert keep_awake.hold(core); print(keep_awake.spinner_pid(core), flush=True); os._exit(0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    pid = int(out.stdout.strip())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid), f"spinner {pid} outlived its parent"


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
