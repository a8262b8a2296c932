#!/usr/bin/env python3
"""Run on a GPU host: where a batched window's overhead goes, step by step, per role.

    python3 scripts/probe_window_stamps.py --cases replies_before_its_calls_are_done [--reps 2] [--out DIR]

monte_carlo 2^24 (the suites' quick shape, eight calls a window) spends ~1.4 ms a window on
273 us of calls (forty-first session, H200, ``probe_rounds.py``): 500-570 us of loads and flush
before the command, and ~560 us between the command and the copied outputs beyond the calls,
which is where the window's drift and spread live, and where the early replier's windows ran
40-70 us below its honest twin's.  This probe stamps every step of a window on the clock both
processes share (``time.perf_counter``: CLOCK_MONOTONIC on Linux), each as us from the window's
start:

  trusted   sent (loads issued, L2 flushed), posted (the command written), seen (the completion
            mark read), ended (the outputs copied: the window's end)
  runner    recv (its command line read), args (json and the calls' arguments done), t0 (its
            events start: a device synchronize after args), launched (every launch returned), marked (the mark enqueued),
            synced (its device-wide synchronize returned), t1 (its stream synchronize returned)
  GPU       event: the runner's claim (start .. end event), placed from t0 (the start event runs
            ~140 us after t0, when the GPU has changed contexts: probe_context_switch.py)

The runner is a patched copy of runner.py (probe only: stamps in its reply, nothing else
changed).  Each rep starts a fresh Evaluator with the adversarial suites' settings, judges the
cases and their honest twin, and prints, per role (candidate per job; the naive twin that took
the pool and the interleaved baseline, told apart by the order they were first timed), the
median and spread (IQR / 1.349) of every stamp and of the gaps between them.  A diagnostic: it
changes nothing in the verdict.
"""
from __future__ import annotations

import json
import math
import shutil
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.runner import harness  # noqa: E402
from evo_fsr.runner.protocol import RUNNER_FILES  # noqa: E402
from evo_fsr.types import Candidate  # noqa: E402
from evo_fsr.verdict import bench as benchmod  # noqa: E402
from evo_fsr.verdict import session as sessionmod  # noqa: E402
from evo_fsr.verdict import timed_window  # noqa: E402
from evo_fsr.verdict.evaluate import Evaluator  # noqa: E402
from tests.adversarial.test_adversarial_v2_gpu import config  # noqa: E402
from probe_rounds import case_args  # noqa: E402  (the scripts folder is the path's first entry)
from probe_tools import spread  # noqa: E402

#: (anchor in runner.py, what replaces it): the stamps of a call, returned in its reply
RUNNER_PATCHES = (
    ("    for line in commands:\n        msg = json.loads(line)\n",
     "    for line in commands:\n        _STAMPS['recv'] = time.perf_counter()\n        msg = json.loads(line)\n"),
    ("        calls = self._call_args(msg)\n        rt.device_synchronize()\n",
     "        calls = self._call_args(msg)\n        _STAMPS['args'] = time.perf_counter()\n        rt.device_synchronize()\n"),
    ("        rt.event_record(self.end, stream)\n        if rc == 0:\n",
     "        _STAMPS['launched'] = time.perf_counter()\n        rt.event_record(self.end, stream)\n        if rc == 0:\n"),
    ("            self.mark(msg, [msg[\"slot\"], *msg.get(\"more\", [])])\n        rt.device_synchronize()",
     "            self.mark(msg, [msg[\"slot\"], *msg.get(\"more\", [])])\n        _STAMPS['marked'] = time.perf_counter()\n"
     "        rt.device_synchronize(); _STAMPS['synced'] = time.perf_counter()"),
    ('"event_ms": event_ms, "event_all_ms": event_all_ms, "host_ms": (t1 - t0) * 1e3}',
     '"event_ms": event_ms, "event_all_ms": event_all_ms, "host_ms": (t1 - t0) * 1e3, '
     '"probe": {**_STAMPS, "t0": t0, "t1": t1}}'),
    ("_STARTED = time.perf_counter()", "_STARTED = time.perf_counter()\n_STAMPS: dict = {}"),
)
TRUSTED = ("sent", "posted", "seen", "ended")
RUNNER = ("recv", "args", "t0", "launched", "marked", "synced", "t1")
GAPS = (("sent", "start"), ("posted", "sent"), ("recv", "posted"), ("args", "recv"), ("t0", "args"), ("launched", "t0"),
        ("gpu_end", "t0"), ("marked", "launched"), ("synced", "gpu_end"), ("seen", "gpu_end"),
        ("ended", "seen"), ("t1", "synced"), ("ended", "start"))


def patched_runner() -> Path:
    """A copy of the runner's files whose call replies carry the probe's stamps."""
    folder = Path(tempfile.mkdtemp(prefix="probe_stamps_"))
    for name in RUNNER_FILES:
        shutil.copyfile(harness.RUNNER_SCRIPT.parent / name, folder / name)
    text = (harness.RUNNER_SCRIPT.parent / "runner.py").read_text()
    for anchor, replacement in RUNNER_PATCHES:
        if text.count(anchor) != 1:
            raise SystemExit(f"runner.py changed: the probe's anchor {anchor.strip()[:60]!r} is not there once")
        text = text.replace(anchor, replacement)
    (folder / "runner.py").write_text(text)
    return folder / "runner.py"


class Stamps:
    """The trusted side's stamps of the window being timed (timed_window's clock, the command's
    post and the mark's read), and every window's stamps by role once it closes."""

    def __init__(self) -> None:
        self.clock: list[float] = []
        self.posted = self.seen = 0.0
        self.by_role: dict[str, list[dict[str, float]]] = {}
        self.roles: dict[int, str] = {}

    def perf_counter(self) -> float:
        now = time.perf_counter()
        self.clock.append(now)
        return now

    def window(self, role: str, reply: dict[str, Any], times: Any) -> None:
        probe = reply.get("probe") if isinstance(reply, dict) else None
        if times is None or not probe or len(self.clock) < 3:
            return
        start = self.clock[0]
        ended = start + times.window_ms * 1e-3
        stamps = {"start": start, "sent": start + times.prep_ms * 1e-3, "posted": self.posted,
                  "seen": self.seen or float("nan"), "ended": ended,
                  **{k: float(probe[k]) for k in RUNNER if k in probe}}
        stamps["gpu_end"] = stamps["t0"] + float(reply["event_ms"]) * 1e-3
        self.by_role.setdefault(role, []).append({k: (v - start) * 1e6 for k, v in stamps.items()})


def install(stamps: Stamps, current: dict[str, str]) -> Callable[[], None]:
    """The patched runner, and the trusted side's stamps around every unchained window (the
    candidate's role named by ``current["job"]``); returns what undoes it."""
    real_batch, real_post, real_mark = timed_window.timed_batch, harness.RunnerProcess.post, harness.RunnerProcess.await_mark
    real_script = harness.RUNNER_SCRIPT

    def post(self: harness.RunnerProcess, message: dict[str, Any]) -> dict[str, Any]:
        command = real_post(self, message)
        stamps.posted = time.perf_counter()
        return command

    def await_mark(self: harness.RunnerProcess, key: int, timeout_s: float) -> int | None:
        digest = real_mark(self, key, timeout_s)
        stamps.seen = time.perf_counter() if digest is not None else 0.0
        return digest

    def batch(runner: harness.RunnerProcess, slots: list[Any], lib: str, *rest: Any, **kwargs: Any) -> Any:
        stamps.clock.clear()
        stamps.posted = stamps.seen = 0.0
        result = real_batch(runner, slots, lib, *rest, **kwargs)
        if kwargs.get("chain_seed") is None:
            role = (f"candidate {current['job']}" if lib == "candidate"
                    else stamps.roles.setdefault(id(runner), f"naive#{len(stamps.roles) + 1}"))
            stamps.window(role, result[0], result[1])
        return result

    def restore() -> None:
        timed_window.time = time
        shutil.rmtree(harness.RUNNER_SCRIPT.parent, ignore_errors=True)
        harness.RUNNER_SCRIPT = real_script
        harness.RunnerProcess.post, harness.RunnerProcess.await_mark = real_post, real_mark
        benchmod.timed_batch = sessionmod.timed_batch = real_batch

    harness.RUNNER_SCRIPT = patched_runner()
    timed_window.time = types.SimpleNamespace(perf_counter=stamps.perf_counter, monotonic=time.monotonic)
    harness.RunnerProcess.post, harness.RunnerProcess.await_mark = post, await_mark
    benchmod.timed_batch = sessionmod.timed_batch = batch
    return restore


def report(by_role: dict[str, list[dict[str, float]]]) -> None:
    """Per role, the median of every stamp and the median and spread of every gap."""
    print("# us from the window's start: median (spread); naive#1 took the pool, naive#2 the interleaved baseline")
    for role, rows in by_role.items():
        print(f"{role}: {len(rows)} windows")
        print("  stamps: " + "  ".join(f"{k} {statistics.median(xs):.0f}" for k in ("start", *TRUSTED, *RUNNER, "gpu_end")
                                       if (xs := finite(r.get(k) for r in rows))))
        print("  gaps:   " + "  ".join(f"{a}-{b} {statistics.median(xs):.0f} ({spread(xs):.0f})" for a, b in GAPS
                                       if (xs := finite(r[a] - r[b] if a in r and b in r else None for r in rows))))


def finite(values: Any) -> list[float]:
    """The values that were stamped (a window without its mark has no ``seen``)."""
    return [v for v in values if v is not None and math.isfinite(v)]


def main() -> int:
    args, task, jobs = case_args(__doc__ or "", reps=2, limit_s=200.0)

    stamps, current = Stamps(), {"job": ""}
    restore = install(stamps, current)
    began = time.monotonic()
    try:
        for rep in range(args.reps):
            if time.monotonic() - began > args.limit_s:
                print(f"# stopped before rep {rep}: {args.limit_s:.0f} s spent", flush=True)
                break
            stamps.roles.clear()
            evaluator = Evaluator(task, config(library=False))
            try:
                for name, source in jobs:
                    current["job"] = name
                    result = evaluator.evaluate(Candidate(task=task, source=source, label=name))
                    print(f"rep {rep} {name}: {result.status.value} x{result.geomean_speedup or 0:.2f}", flush=True)
            finally:
                evaluator.close()
    finally:
        restore()
    (args.out / "stamps.json").write_text(json.dumps(stamps.by_role))
    report(stamps.by_role)
    return 0


if __name__ == "__main__":
    sys.exit(main())
