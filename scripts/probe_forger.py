#!/usr/bin/env python3
"""How far a forger of its own times gets under each L2 flush, against its honest twin.

A case of the adversarial suite v2 (by default ``patches_cudaEventElapsedTime``: relu whose runner
reports 1 us per call, so only the trusted window bounds it) and the task's naive seed are
judged in fresh evaluators, ``--rounds`` times under each flush, the flushes taking turns:
``read``, the trusted flush (CupyMemory.flush_l2), and ``memset``, the evaluator's flush before
the twentieth session (the same buffer size, a memset, then a wait).  Per evaluation it prints the
speedup credited and, per shape, how the time was credited: rounds, whether the claims were set
aside (strict), the overhead subtracted and the median windows (per call).

    python3 scripts/probe_forger.py [--case NAME] [--rounds 5] [--flush read memset]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evo_fsr.types import Candidate, Status  # noqa: E402
from evo_fsr.verdict import memory as memory_module  # noqa: E402
from evo_fsr.verdict import profile  # noqa: E402
from evo_fsr.verdict.evaluate import EvalConfig, Evaluator  # noqa: E402
from tests.adversarial import cases_v2  # noqa: E402
from tests.adversarial.test_adversarial_v2_gpu import SETTINGS  # noqa: E402

from evo_fsr.testing.l2_probe import MemsetFlush  # noqa: E402

TRUSTED_FLUSH = memory_module.CupyMemory.flush_l2


def memset_flush(self: memory_module.CupyMemory) -> None:
    """The evaluator's flush before the twentieth session: a memset of four L2s, then a wait."""
    if not hasattr(self, "_memset_flush"):
        self._memset_flush = MemsetFlush(self._cupy)
    self._memset_flush()
    self.synchronize()


FLUSHES = {"read": TRUSTED_FLUSH, "memset": memset_flush}
seen: list[tuple[profile.ShapeCalls, list[profile.CallTimes]]] = []
_time_shape = profile.time_shape


def recording_time_shape(timing_round, pool, *args, **kwargs):  # type: ignore[no-untyped-def]
    calls = _time_shape(timing_round, pool, *args, **kwargs)
    seen.append((calls, list(pool)))
    return calls


def _us(calls, key, k: int) -> float:  # type: ignore[no-untyped-def]
    return statistics.median(key(c) for c in calls) / k * 1e3


def describe(calls: profile.ShapeCalls, pool: list[profile.CallTimes]) -> str:
    """Per call, in us: the candidate's claimed event time and trusted window; the pool's (twin,
    before any candidate code) window, event and overhead; the interleaved baseline's window and
    overhead; the overhead the credit used and the time credited."""
    k = calls.candidate[0].calls
    window, event = (lambda c: c.window_ms), (lambda c: c.event_ms)
    overhead = (lambda c: c.window_ms - c.event_ms)
    credited = profile.credited_ms(calls.candidate, calls.calibration, calls.strict) / k * 1e3
    return (f"rounds {calls.rounds} strict {int(calls.strict)} k {k} | cand ev {_us(calls.candidate, event, k):6.1f} "
            f"win {_us(calls.candidate, window, k):6.1f} | pool n{len(pool)} win {_us(pool, window, k):6.1f} "
            f"ev {_us(pool, event, k):6.1f} ovh {_us(pool, overhead, k):6.1f} | base win {_us(calls.baseline, window, k):6.1f} "
            f"ovh {_us(calls.baseline, overhead, k):6.1f} | used ovh {calls.calibration.overhead_ms / k * 1e3:6.1f} "
            f"spread {calls.calibration.spread_ms / k * 1e3:5.1f} -> window credit {credited:6.1f} us/call (x: after the ratio floor)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="patches_cudaEventElapsedTime")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--flush", nargs="+", default=["read", "memset"], choices=sorted(FLUSHES))
    args = parser.parse_args()
    case = next((c for c in cases_v2.build_cases() if c.name == args.case), None)
    if case is None:
        raise SystemExit(f"no case {args.case!r} in tests/adversarial/cases_v2.py")
    profile.time_shape = recording_time_shape
    names = {f.name for f in __import__("dataclasses").fields(EvalConfig)}
    cfg = EvalConfig(**{k: v for k, v in SETTINGS.items() if k in names})
    speedups: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for flush in args.flush:
            memory_module.CupyMemory.flush_l2 = FLUSHES[flush]
            ev = Evaluator(case.task, cfg)
            try:
                for label, source in (("forger", case.source), ("naive", cases_v2.honest_source(case))):
                    seen.clear()
                    result = ev.evaluate(Candidate(task=case.task, source=source, label=f"{label}:{r}"))
                    x = result.geomean_speedup if result.status is Status.OK else 0.0
                    speedups.setdefault((flush, label), []).append(x or 0.0)
                    print(f"round {r} flush {flush:6s} {label:6s} {result.status.value:8s} x{x or 0.0:5.2f}  "
                          + "; ".join(describe(c, p) for c, p in seen), flush=True)
            finally:
                ev.close()
    print("\nmedian speedup (all rounds):")
    for (flush, label), xs in speedups.items():
        print(f"  {flush:6s} {label:6s} median x{statistics.median(xs):.2f}  range {min(xs):.2f}-{max(xs):.2f}  n={len(xs)}")


if __name__ == "__main__":
    main()
