"""How many calls a timed window holds for a shape (a batch): enough that the calls take about as
long as the window's own overhead, so that its noise and slack are shared by them, but one call a
window for a launch-bound shape, whose calls a kernel could fuse (profile.py credits what the
windows measure; bench.py sizes each shape with these)."""
from __future__ import annotations

import math


#: A shape whose speed-of-light time is below this is launch-bound: one call of it leaves the GPU
#: mostly idle, so k calls fused into one launch cost about what one does (SECURITY.md, "work
#: fused across the calls of a batch").  Such a shape is timed one call to a window.
FUSABLE_FLOOR_MS = 0.005


def batch_size(overhead_ms: float, expected_ms: float, most: int, floor_ms: float = 0.0,
               fusable_floor_ms: float = FUSABLE_FLOOR_MS) -> int:
    """Launches per window for a shape: enough that the launches take about as long as the
    window's own overhead (``expected_ms``: a fast kernel's time, the library's or the
    speed-of-light floor; candidate-independent, so no candidate can choose its batch).  The
    overhead, its noise and the slack are then shared by ``k`` calls: a runner that forges its
    times hides at most slack / k per call.

    But a batch's k buffer sets all hold their inputs before its first launch, so a kernel can
    compute every call in the first and return at once from the others; where one call leaves
    the GPU idle that costs about one call (a 64K-element relu read 3.56x its honest twin,
    H100).  Ordering the calls on the GPU costs 245-280 us a call however it is done (two CUDA
    contexts time-slice; ``scripts/probe_batch_chain.py``), so a shape whose speed-of-light
    time (``floor_ms``, 0: unknown) is under ``fusable_floor_ms`` (``FUSABLE_FLOOR_MS``; 0 for a
    device whose floor means nothing, the CPU tests' fake) is not batched: there, fusing would pay
    up to k times, while a forger at one call a window hides one slack, a few us."""
    if most <= 1 or expected_ms <= 0 or overhead_ms <= expected_ms or 0 < floor_ms < fusable_floor_ms:
        return 1
    return max(1, min(most, math.ceil(overhead_ms / expected_ms)))


def sizing_call_ms(library_ms: float, seed_call_ms: float, floor_ms: float) -> float:
    """The call time ``batch_size`` shares a window's overhead between: the faster of the
    library's call and the naive seed's (both trusted, neither the candidate's) where the library
    was timed, else the speed-of-light floor.  The library alone sized monte_carlo's 2^24 by
    torch's 0.267 ms call while the seeds take 35-49 us (H200, fortieth session): three calls to
    a 0.744 ms overhead, so a runner forging its claims hid 8/3 times as much a call as at the
    eight calls the suite (library off, sized by the floor) judged it at."""
    if library_ms <= 0:
        return floor_ms
    return min(library_ms, seed_call_ms) if seed_call_ms > 0 else library_ms


__all__ = ["FUSABLE_FLOOR_MS", "batch_size", "sizing_call_ms"]
