"""Run on a GPU host: python3 scripts/probe_window_parts.py (gpu_checks.sh launch_bound).

Where a launch-bound window's overhead and its spread come from: topk's quick shape, the honest
radix_select seed judged by a fresh evaluator, and per timed window (every role: the candidate's,
the twin's, the baseline's) the L2 flush, the runner's round trip (``send``: SIGCONT, the pipe,
the Python runner, its reply, SIGSTOP), the runner's own ``host_ms`` inside it, and the rest.
Variant ``spin``: the trusted side polls the reply pipe instead of sleeping in ``select``.
Twenty-sixth session, NVIDIA H200: the round trip less host_ms was 250-320 us with a spread of
43-88 us, nearly all of the window's spread (63-93 us); the flush's spread 3.7-5.5 us."""
import sys
import time

import numpy as np

from evo_fsr.runner import harness
from probe_tools import polling_await, spread  # the scripts folder is the path's first entry
from evo_fsr.types import Candidate
from evo_fsr.verdict import bench as benchmod
from evo_fsr.verdict.evaluate import Evaluator
from evo_fsr.verdict.memory import CupyMemory
from tests.adversarial import cases_v3 as v3
from tests.adversarial.test_adversarial_v2_gpu import config

rec = {"flush": [], "send": [], "host": [], "window": []}
last = {}
_flush, _send, _timed, _await = (CupyMemory.flush_l2, harness.RunnerProcess.send, benchmod.timed_batch,
                                 harness.RunnerProcess.await_reply)


def flush(self):
    t = time.perf_counter(); _flush(self); last["flush"] = (time.perf_counter() - t) * 1e3


def send(self, message, timeout_s):
    t = time.perf_counter(); r = _send(self, message, timeout_s)
    if message.get("op") == "call":
        last["send"] = (time.perf_counter() - t) * 1e3; last["host"] = float(r.get("host_ms", 0))
    return r


def timed(*a, **k):
    r = _timed(*a, **k)
    if r[1] is not None:
        rec["window"].append(r[1].window_ms)
        for key in ("flush", "send", "host"):
            rec[key].append(last.get(key, 0.0))
    return r


spin_await = polling_await(_await)


CupyMemory.flush_l2, harness.RunnerProcess.send, benchmod.timed_batch = flush, send, timed


honest = v3.honest_source(next(c for c in v3.build_cases() if c.name.startswith("forges_within")))
for variant in ["select", "spin", "select", "spin"]:
    harness.RunnerProcess.await_reply = spin_await if variant == "spin" else _await
    for k in rec:
        rec[k].clear()
    ev = Evaluator("topk", config(library=False, max_trials=30, min_trials=10, time_budget_s=2.0))
    try:
        r = ev.evaluate(Candidate(task="topk", source=honest, label="honest"))
    finally:
        ev.close()
    f, s, h, w = (np.array(rec[k]) for k in ("flush", "send", "host", "window"))
    parts = {"window-host": w - h, "flush": f, "send": s, "runner host_ms": h, "send-host (ipc)": s - h,
             "rest": w - f - s}
    print(f"{variant}: {r.status.value} x{r.geomean_speedup or 0:.2f}, {len(w)} windows (all roles)")
    for name, x in parts.items():
        print(f"   {name:16s} median {np.median(x)*1e3:8.1f} us  spread {spread(list(x))*1e3:7.1f} us  "
              f"p90 {np.percentile(x, 90)*1e3:8.1f}")
    sys.stdout.flush()
