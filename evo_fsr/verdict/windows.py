"""The order of a shape's timed windows: which trusted baseline windows sit between the
candidate's (``interleaving``), a round of them (``interleaved_windows``), and when a round has
enough (``enough_windows``: the time budget spent at the timed windows' own median)."""
from __future__ import annotations

import statistics
from typing import Callable, Iterator

from .profile import CallTimes


def interleaving(windows: int, every: int) -> Iterator[tuple[bool, bool]]:
    """Per timed window, whether a baseline window comes right before it and right after it: one
    every ``every`` windows, before and after alternately (the candidate's timing and the
    calibration share this pattern)."""
    for i in range(windows):
        turn = i % max(1, every) == 0
        first = (i // max(1, every)) % 2 == 0
        yield turn and first, turn and not first


def interleaved_windows(candidate: Callable[[], CallTimes], baseline: Callable[[], CallTimes], windows: int,
                        every: int, enough: Callable[[list[CallTimes], list[CallTimes]], bool] | None = None,
                        ) -> tuple[list[CallTimes], list[CallTimes]]:
    """``windows`` windows of ``candidate`` (the candidate's, or the twin's in its place) with one
    of ``baseline`` every ``every``, before and after alternately (``interleaving``); fewer where
    ``enough`` (asked after each candidate window and the baseline window that follows it, if
    any) says the windows so far are enough."""
    cand_calls: list[CallTimes] = []
    base_calls: list[CallTimes] = []
    for before, after in interleaving(windows, every):
        if before:
            base_calls.append(baseline())
        cand_calls.append(candidate())
        if after:
            base_calls.append(baseline())
        if enough is not None and enough(cand_calls, base_calls):
            break
    return cand_calls, base_calls


def enough_windows(least: int, budget_s: float, every: int) -> Callable[[list[CallTimes], list[CallTimes]], bool]:
    """When a shape's timing round may stop: after at least ``least`` candidate windows, once their
    number times the median window (the candidate's, plus the interleaved baseline's median over
    ``every``) has spent ``budget_s``.

    The count is set by the timed windows' own median, not by a window before them: a kernel that
    made its untimed warm-up slow (0.25 s) cut a launch-bound shape from 240 timed windows to 16,
    and the slack its forged claims may hide in (one standard error of the window) grew ~2.3x
    (red-team finding, thirtieth session).  To stop the round early now, over half of the windows
    so far must be slow, and then so is the median the candidate is credited from."""
    def enough(cand: list[CallTimes], base: list[CallTimes]) -> bool:
        if len(cand) < least:
            return False
        base_ms = statistics.median(b.window_ms for b in base) if base else 0.0
        per_window_s = (statistics.median(c.window_ms for c in cand) + base_ms / max(1, every)) / 1e3
        return len(cand) * per_window_s >= budget_s
    return enough
