"""Timing rounds recorded on a GPU, replayed through the credit rules of ``profile`` on any machine.

``scripts/probe_rounds.py`` writes one JSON line per shape and judgement: the shape's calibration
pool and every round ``profile.time_shape`` took (the candidate's windows and the baseline's
interleaved with them), each window as ``[event, event_all, host, window, prep, send, calls]``
(ms; ``window_row``).  ``replay`` runs a line through the current ``time_shape`` and ``summarise``,
so that a change to how windows are credited can be judged on real windows, the GPU's drift and
noise included, before a GPU is at hand.  A round the rules ask for that was not recorded (the
recording's rules charged less) is served the last recorded one again: ``Replayed.reused`` says
so, and such a replay is an estimate.
"""
from __future__ import annotations

import gzip
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import profile
from .profile import CallTimes


def window_row(c: CallTimes) -> list[float]:
    """One window as recorded: [event, event_all, host, window, prep, send, calls]."""
    return [c.event_ms, c.event_all_ms, c.host_ms, c.window_ms, c.prep_ms, c.send_ms, c.calls]


def windows(rows: Sequence[Sequence[float]]) -> list[CallTimes]:
    """The windows of recorded rows (``window_row``)."""
    return [CallTimes(r[0], r[1], r[2], r[3], calls=int(r[6]), prep_ms=r[4], send_ms=r[5]) for r in rows]


@dataclass(frozen=True)
class Replayed:
    """One recorded shape judged again by the current rules."""

    job: str                    # what was judged (a case's name, or "honest")
    rep: int                    # which fresh evaluator
    charged_first: bool         # the first round was charged
    strict: bool                # charged in both rounds: the claims set aside
    speedup: float              # the baseline's credit over the candidate's
    reused: bool                # a round was asked for that was not recorded (an estimate)


def replay(record: dict[str, Any]) -> Replayed:
    """A recorded line (``probe_rounds.py``) through ``profile.time_shape`` and ``summarise``; the
    baseline's clean time is its interleaved events (no clean windows are recorded)."""
    rounds = [(windows(r["candidate"]), windows(r["baseline"])) for r in record["rounds"]]
    if not rounds:
        raise ValueError(f"{record.get('job')}: a recorded shape with no rounds")
    served = 0

    def next_round() -> tuple[list[CallTimes], list[CallTimes]]:
        nonlocal served
        served += 1
        return rounds[min(served, len(rounds)) - 1]

    timed = profile.time_shape(next_round, windows(record["pool"]), mix_interleaved=record.get("mix_interleaved", True))
    k = timed.candidate[0].calls
    clean_ms = statistics.median(c.event_ms for c in timed.baseline) / k
    shape = profile.summarise(record.get("shape", "?"), timed.candidate, timed.baseline, timed.calibration,
                              clean_ms, 0.0, strict=timed.strict)
    # time_shape takes a second round exactly when the first is charged
    return Replayed(job=record["job"], rep=int(record["rep"]), charged_first=timed.rounds > 1,
                    strict=timed.strict, speedup=shape.speedup, reused=served > len(rounds))


def load(path: Path) -> list[dict[str, Any]]:
    """Every line of a ``probe_rounds.py`` recording (gzip-compressed where its name ends in .gz)."""
    with (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as f:
        return [json.loads(line) for line in f if line.strip()]
