"""Run on a GPU host: python3 scripts/probe_round_trip.py [ROUNDS] (gpu_checks.sh round_trip).

Where the spread of a launch-bound window's round trip lives.  The window of topk's quick shape
(an 18.5 us call in a ~0.9 ms window) has a spread of 63-93 us, nearly all of it in the runner's
round trip (``send`` less the runner's ``host_ms``: 250-320 us, spread 43-88 us; twenty-sixth
session, H200, probe_window_parts.py), and that spread is the standard error a forged claim hides
in on shapes timed one call to a window (SECURITY.md, known gaps).

This probe stamps every step of a ``call`` on one clock (CLOCK_MONOTONIC, which the trusted side
and the runner share): the trusted side before its SIGCONT, after writing the command, after
reading the reply; the runner (a patched copy of runner.py, probe only) when ``readline``
returned, before and after its ``host_ms`` span, and before writing its reply.  Parts:

  wake      SIGCONT + write .. the runner's readline returned (scheduler, the stopped process)
  parse     readline .. the runner's t0 (json, ctypes arguments, device_synchronize)
  host      the runner's host_ms (launches, events, synchronize)
  reply     the runner's t1 .. its reply written (json, event times)
  collect   reply written .. the trusted side has read it (its own wake-up)

Variants (every runner of the evaluator alike; honest radix_select, fresh evaluator each):
  select    as main is
  spin      the trusted side polls the reply pipe (select with no timeout) for up to 50 ms
  poll      + the runner polls its command pipe (non-blocking reads) instead of blocking
  early     + the runner continued (SIGCONT) as its window opens, before the trusted side loads
            the inputs and flushes the L2, so that it polls its pipe when the command comes
  nostop    + no SIGSTOP between commands (the runner spins between commands; never for real:
            SECURITY.md says why runners are stopped) -- the floor a quieter wake could reach
Each prints, per role, the medians and spreads (IQR / 1.349) of every part, of the window less
the runner's events (what the calibration's overhead and spread are taken from) and of the
window less the round trip (the trusted side's loads, flush and copy-out)."""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from evo_fsr.runner import harness
from probe_tools import polling_await, spread  # the scripts folder is the path's first entry
from evo_fsr.runner.protocol import RUNNER_FILES
from evo_fsr.types import Candidate
from evo_fsr.verdict import bench as benchmod
from evo_fsr.verdict import session as sessionmod
from evo_fsr.verdict.evaluate import Evaluator
from tests.adversarial import cases_v3 as v3
from tests.adversarial.test_adversarial_v2_gpu import config

ORIGINAL_DIR = harness.RUNNER_SCRIPT.parent
_send, _await, _stop, _timed = (harness.RunnerProcess.send, harness.RunnerProcess.await_reply,
                                harness.RunnerProcess._stop, benchmod.timed_batch)

STAMP_REPLY = '''    def reply(msg: dict[str, Any], data: dict[str, Any]) -> None:
        data = {**data, "probe_reply_s": time.monotonic(), "probe_recv_s": _RECV[0]}
'''
BLOCKING_LOOP = "    for line in commands:\n"
POLLING_LOOP = '''    os.set_blocking(cmd_fd, False)
    pending = b""

    def lines():
        nonlocal pending
        while True:
            while b"\\n" not in pending:
                try:
                    chunk = os.read(cmd_fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    return
                pending += chunk
            line, pending = pending.split(b"\\n", 1)
            yield line.decode()

    for line in lines():
'''


def patched_runner(poll: bool) -> Path:
    """A copy of the runner's files whose call replies carry the probe's stamps."""
    folder = Path(tempfile.mkdtemp(prefix="probe_runner_"))
    for name in RUNNER_FILES:
        shutil.copyfile(ORIGINAL_DIR / name, folder / name)
    text = (ORIGINAL_DIR / "runner.py").read_text()
    head = "    def reply(msg: dict[str, Any], data: dict[str, Any]) -> None:\n"
    assert head in text and BLOCKING_LOOP in text and "t0 = time.perf_counter()" in text
    text = text.replace(head, STAMP_REPLY)
    text = text.replace("import protocol  # noqa", "_RECV = [0.0]\nimport protocol  # noqa")
    loop = POLLING_LOOP if poll else BLOCKING_LOOP
    text = text.replace(BLOCKING_LOOP, loop + "        _RECV[0] = time.monotonic()\n")
    text = text.replace("t0 = time.perf_counter()", "t0 = time.perf_counter(); _t0 = time.monotonic()")
    text = text.replace('"host_ms": (t1 - t0) * 1e3}',
                        '"host_ms": (t1 - t0) * 1e3, "probe_t0_s": _t0, "probe_t1_s": _t0 + (t1 - t0)}')
    if poll:
        # the command pipe's fd is read directly; the file object over it is unused
        text = text.replace('    commands = os.fdopen(cmd_fd, "r")\n',
                            '    commands = os.fdopen(os.dup(cmd_fd), "r")\n')
    (folder / "runner.py").write_text(text)
    return folder / "runner.py"


rec: dict[str, list[float]] = {}
last: dict[str, float] = {}


def stamped_send(self, message, timeout_s):
    t_cont = time.monotonic()
    reply = _send(self, message, timeout_s)
    t_done = time.monotonic()
    if message.get("op") == "call" and "probe_recv_s" in reply:
        last.update(wake=reply["probe_recv_s"] - t_cont, parse=reply["probe_t0_s"] - reply["probe_recv_s"],
                    host=reply["probe_t1_s"] - reply["probe_t0_s"],
                    reply=reply["probe_reply_s"] - reply["probe_t1_s"],
                    collect=t_done - reply["probe_reply_s"], send=t_done - t_cont,
                    event=float(reply.get("event_ms", 0.0)) * 1e-3)
    return reply


spin_await = polling_await(_await)


ROLES: dict[int, str] = {}
EARLY = [False]


def timed(runner, slots, lib, *args, **kwargs):
    """Every timed window's parts, by role: the candidate, and the two naive runners (the twin
    timed in the candidate's place for the pool, the baseline interleaved), told apart by the
    order in which they were first timed (the twin's pool is taken first)."""
    if EARLY[0]:
        runner._continue()
    result = _timed(runner, slots, lib, *args, **kwargs)
    if result[1] is not None and last:
        role = "candidate" if lib == "candidate" else ROLES.setdefault(id(runner), f"naive#{len(ROLES) + 1}")
        parts = rec.setdefault(role, {})
        window = result[1].window_ms * 1e-3
        parts.setdefault("window", []).append(window)
        parts.setdefault("window-event", []).append(window - last["event"])
        parts.setdefault("window-send", []).append(window - last["send"])
        for key, value in last.items():
            parts.setdefault(key, []).append(value)
        last.clear()
    return result


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    harness.RunnerProcess.send = stamped_send
    benchmod.timed_batch = sessionmod.timed_batch = timed      # session.py imports it by name
    honest = v3.honest_source(next(c for c in v3.build_cases() if c.name.startswith("forges_within")))
    for _ in range(rounds):
        for variant in ("select", "spin", "poll", "early", "nostop"):
            EARLY[0] = variant == "early"
            harness.RUNNER_SCRIPT = patched_runner(poll=variant in ("poll", "early", "nostop"))
            harness.RunnerProcess.await_reply = _await if variant == "select" else spin_await
            harness.RunnerProcess._stop = (lambda self: None) if variant == "nostop" else _stop
            rec.clear()
            ROLES.clear()
            ev = Evaluator("topk", config(library=False, max_trials=30, min_trials=10, time_budget_s=2.0))
            try:
                result = ev.evaluate(Candidate(task="topk", source=honest, label="honest"))
            finally:
                ev.close()
            print(f"{variant}: {result.status.value} x{result.geomean_speedup or 0:.2f}")
            for role, parts in sorted(rec.items()):
                print(f"  {role}: {len(parts['window'])} windows; median us (spread us)")
                print("   " + "  ".join(f"{name} {np.median(parts[name]) * 1e6:.1f} ({spread(np.array(parts[name]) * 1e6):.1f})"
                                        for name in ("window-event", "window-send", "send", "wake", "parse", "host",
                                                     "reply", "collect") if len(parts.get(name, [])) >= 2))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
