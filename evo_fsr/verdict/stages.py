"""A candidate's verdict as a session reaches it, the clock and counters of its stages, and the
exception that ends a session early with a verdict (``Stop``)."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Iterator

from ..types import Mismatch, ShapeTiming, Status


@dataclass(frozen=True)
class Verdict:
    status: Status
    summary: str
    reason: str = ""                       # rejection code (EvalResult.reason)
    mismatch: Mismatch | None = None
    timings: tuple[ShapeTiming, ...] = ()


@dataclass
class Stages:
    """What a session records besides its verdict: wall seconds per stage, counters, logs."""

    seconds: dict[str, float] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    logs: list[tuple[str, str]] = field(default_factory=list)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n


class Stop(Exception):
    """Raised inside a stage: the session ends with ``verdict``."""

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict
