"""Fresh timed inputs for every call, or fresh base sets for every window (``inputs.TimedInputs``).

Why.  Every timed call of a ``mix`` shape mixes two base sets drawn from the task's distribution.
Drawn once per evaluator, they make the values of every timed call come from one universe of 2n
values, which a kernel sees whole after a few calls: a sort that keeps a table from each value to
its rank in that universe sorts a later call by a lookup, a mark and a compaction, where an honest
radix sort makes four read-and-write passes (SECURITY.md, "The timed inputs come from a fixed
pool").  So, where that is affordable:

- ``device``: every timed call is a fresh draw (no base sets, no universe at all) of the task's own
  ``make_inputs`` run with the device's random generator (CuPy's
  ``default_rng``; NumPy functions in a generator dispatch to CuPy on CuPy arrays), only for
  ``timed_inputs: mix`` (elements i.i.d., so the checks below see the whole distribution), and only
  where a draw passes ``distribution_mismatch`` against the host's draw once, when the shape is
  first timed: the generator must give device arrays of the declared dtypes and shapes, whose
  quantiles, share of ties, order and finite share match the host's, and a draw takes at most
  ``DEVICE_REDRAW_MAX_MS``;
- ``host``: the two base sets redrawn by the host generator for every window, where one draw
  takes at most ``HOST_REDRAW_MAX_MS`` (the calls of one window, a batch of at most a few back to
  back, still mix one pair);
- ``fixed``: otherwise, the two base sets of the first draw (as before the thirty-fifth session),
  logged once.

Nothing here judges a kernel: every timed call is still checked against a reference of exactly
its inputs, so a draw from a slightly different distribution costs fairness, never soundness; the
checks keep it honest.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

import numpy as np

from ..tasks import Shape, Task

log = logging.getLogger(__name__)

#: a shape whose host draw takes longer keeps its base sets unless the device can draw them
HOST_REDRAW_MAX_MS = 5.0
#: a device draw slower than this (a generator that loops in Python, say) is not used per call
DEVICE_REDRAW_MAX_MS = 10.0
#: timed draws at most, the fastest counted (``_fastest_draw_ms``)
DRAW_TIMINGS = 3
#: elements of each buffer compared between a device draw and a host draw
CHECK_ELEMENTS = 1 << 20
#: quantiles compared, and how far apart they may lie as a share of the host's 1 %..99 % spread
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
QUANTILE_TOLERANCE = 0.1
#: largest difference allowed in the share of finite values, of distinct values and of
#: non-decreasing neighbours, over n compared elements: this plus four standard errors at worst
SHARE_TOLERANCE = 0.02
#: an integer edge value the host's draw holds at least this share of a typical value's count is a
#: hard edge (nothing may pass it); the share of integers that may pass a soft edge (a tail)
HARD_EDGE_SHARE = 0.01
TAIL_SHARE = 1e-3


def _host(x: Any) -> np.ndarray:
    """The first CHECK_ELEMENTS values, sliced before they leave the device (a benchmark input is
    up to 400 MB; the checks read 4 MB of it)."""
    head = x.reshape(-1)[:CHECK_ELEMENTS]
    return np.ascontiguousarray(head.get() if hasattr(head, "get") else np.asarray(head))


def _finite(values: np.ndarray) -> np.ndarray:
    return values[np.isfinite(values)] if values.dtype.kind == "f" else values


def _shares(values: np.ndarray) -> tuple[float, float, float]:
    """(finite, distinct, non-decreasing neighbours) as shares of the values."""
    n = max(values.size, 1)
    finite = _finite(values)
    ordered = float(np.mean(values[1:] >= values[:-1])) if values.size > 1 else 1.0
    return finite.size / n, len(np.unique(values)) / n, ordered


def distribution_mismatch(host: dict[str, Any], device: dict[str, Any]) -> str | None:
    """Why a device draw does not look like a host draw of the same inputs (None: it does)."""
    for name, want in host.items():
        if name not in device:
            continue
        a, b = _host(want), _host(device[name])
        if a.dtype != b.dtype or a.size != b.size:
            return f"{name}: {b.dtype} x {b.size}, the host draws {a.dtype} x {a.size}"
        allowed = SHARE_TOLERANCE + 4.0 * 0.5 / max(a.size, 1) ** 0.5
        for what, x, y in zip(("finite values", "distinct values", "non-decreasing neighbours"),
                              _shares(a), _shares(b)):
            if abs(x - y) > allowed:
                return f"{name}: {what} {y:.3f} of the draw, {x:.3f} of the host's"
        fa, fb = _finite(a).astype(np.float64), _finite(b).astype(np.float64)
        if fa.size == 0 or fb.size == 0:
            continue
        low, high = np.quantile(fa, [0.01, 0.99])
        spread = max(float(high - low), float(np.max(np.abs(fa))) * 1e-6, 1e-30)
        # integers: a quantile may also sit one value either side (the median of integers(0, 10)
        # is 4 in one draw and 5 in the next)
        allowed_shift = QUANTILE_TOLERANCE * spread + (1.0 if a.dtype.kind in "iu" else 0.0)
        for q, x, y in zip(QUANTILES, np.quantile(fa, QUANTILES), np.quantile(fb, QUANTILES)):
            if abs(x - y) > allowed_shift:
                return f"{name}: quantile {q} is {y:.6g} in the draw, {x:.6g} in the host's"
        if a.dtype.kind in "iu":
            problem = _integer_range_mismatch(fa, fb)
            if problem:
                return f"{name}: {problem}"
    return None


def _integer_range_mismatch(host: np.ndarray, draw: np.ndarray) -> str | None:
    """Integers outside the host draw's range.  Beyond a hard edge, one the host's draw reaches
    often (``integers(0, C)`` reaches C - 1 about n / C times), none may lie: a label of C or a
    bin of 256 would make an honest kernel fail.  Beyond a soft edge (a tail: a clipped normal's
    extremes differ from draw to draw) a few may, never below zero where the host has no negative
    value."""
    values, counts = np.unique(host, return_counts=True)
    typical = host.size / values.size
    outside = 0
    for beyond, edge_count in ((draw < values[0], counts[0]), (draw > values[-1], counts[-1])):
        if beyond.any() and edge_count >= HARD_EDGE_SHARE * typical:
            return (f"values {draw.min():.0f}..{draw.max():.0f} pass the host's hard edge "
                    f"({values[0]:.0f}..{values[-1]:.0f})")
        outside += int(np.count_nonzero(beyond))
    if values[0] >= 0 and draw.min() < 0:
        return f"a negative value ({draw.min():.0f}) where the host has none"
    if outside > TAIL_SHARE * draw.size:
        return (f"{outside} values outside the host's {values[0]:.0f}..{values[-1]:.0f} "
                f"(at most {TAIL_SHARE:.0e} of them may be)")
    return None


def _fastest_draw_ms(xp: Any, device_draw: Callable[[], dict[str, Any]]) -> float:
    """The fastest of up to ``DRAW_TIMINGS`` draws after the first (which compiles kernels),
    stopping at the first within ``DEVICE_REDRAW_MAX_MS``: a draw's cost, not one host stall's
    (a 1.4 ms draw once read 10.5 ms on an H200 and left a shape with fixed base sets)."""
    fastest_ms = float("inf")
    for _ in range(DRAW_TIMINGS):
        started = time.perf_counter()
        device_draw()
        if hasattr(xp, "cuda"):
            xp.cuda.get_current_stream().synchronize()
        fastest_ms = min(fastest_ms, (time.perf_counter() - started) * 1e3)
        if fastest_ms <= DEVICE_REDRAW_MAX_MS:
            break
    return fastest_ms


def choose_redraw(task: Task, shape: Shape, xp: Any, host_sample: dict[str, Any], host_ms: float,
                  device_draw: Callable[[], dict[str, Any]]) -> str:
    """``device``, ``host`` or ``fixed`` (the module's docstring) for one benchmark shape:
    ``host_sample`` and ``host_ms``, a host draw and its time; ``device_draw``, one draw by ``xp``'s
    generator (``inputs.make_case`` with ``xp``), which raises where it gives other arrays."""
    why = "the host's generator"
    if xp is not np and task.timed_inputs == "mix":
        try:
            problem = distribution_mismatch(host_sample, device_draw())
            device_ms = _fastest_draw_ms(xp, device_draw)
            if problem is None and device_ms <= DEVICE_REDRAW_MAX_MS:
                log.debug("%s %s: every timed call drawn on the device (%.2f ms a draw)", task.name,
                          shape.label, device_ms)
                return "device"
            why = (f"a device draw unlike the host's ({problem})" if problem
                   else f"a device draw takes {device_ms:.1f} ms")
        except Exception as exc:  # noqa: BLE001 - any failure: the host's generator
            why = f"no device draw ({type(exc).__name__}: {str(exc)[:200]})"
    if host_ms <= HOST_REDRAW_MAX_MS:
        return "host"
    # on a GPU a ``mix`` task should never get here (all 19 draw on the device on an H200): a
    # warning, since the universe attack of SECURITY.md is then open for this shape
    level = logging.WARNING if xp is not np and task.timed_inputs == "mix" else logging.INFO
    log.log(level, "%s %s: timed inputs mix two fixed base sets (%s; a host draw takes %.0f ms)", task.name,
            shape.label, why, host_ms)
    return "fixed"


__all__ = ["DEVICE_REDRAW_MAX_MS", "DRAW_TIMINGS", "HOST_REDRAW_MAX_MS", "choose_redraw", "distribution_mismatch"]
