"""The report's figures, drawn with matplotlib (Agg, no display) and returned as base64 PNG.

matplotlib is optional (``pip install 'evo-fsr[report]'``): without it every figure is None and
the page shows its tables with a note in place of each figure.
"""
from __future__ import annotations

import base64
import io
import logging
from collections import Counter
from typing import Any

from .data import DUPLICATE, OPERATOR_REJECTED, CandidateRow, RunData

log = logging.getLogger(__name__)

DPI = 110
MAX_KNOB_PANELS = 12
OK_COLOUR = "#2ca02c"
#: verdicts other than ok: no greens, so only "ok" reads as good
BAD_COLOURS = ["#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
               "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2"]


def _pyplot() -> Any | None:
    try:
        import matplotlib  # noqa: PLC0415 - optional dependency
    except ImportError:
        return None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # noqa: PLC0415
    return plt


def available() -> bool:
    return _pyplot() is not None


def _png(fig: Any) -> str:
    plt = _pyplot()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _integer_ticks() -> Any:
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415 - matplotlib is imported lazily
    return MaxNLocator(integer=True)


def fitness_figure(data: RunData) -> str | None:
    """Best (solid) and median (dashed) speedup of each island's population per generation."""
    plt = _pyplot()
    if plt is None or not data.islands:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for island in sorted({p.island for p in data.islands}):
        points = sorted((p for p in data.islands if p.island == island), key=lambda p: p.generation)
        gens = [p.generation for p in points]
        line, = ax.plot(gens, [p.best for p in points], marker="o", ms=3, label=f"island {island} best")
        ax.plot(gens, [p.median for p in points], ls="--", color=line.get_color(), label=f"island {island} median")
    ax.set_xlabel("generation")
    ax.xaxis.set_major_locator(_integer_ticks())
    ax.set_ylabel("speedup over naive (0 = not correct)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("candidates evaluated per generation and island (no snapshots in the run directory)"
                 if data.islands_from_records else "population fitness per generation and island")
    return _png(fig)


def verdict_figure(data: RunData) -> str | None:
    """Stacked bars: how many candidates got which verdict in each generation."""
    plt = _pyplot()
    if plt is None or not data.verdicts_by_generation:
        return None
    gens = sorted(data.verdicts_by_generation)
    totals = data.verdict_totals()
    codes = sorted(totals, key=lambda c: (c != "ok", c in (OPERATOR_REJECTED, DUPLICATE), -totals[c], c))
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    bottom = [0] * len(gens)
    others = iter(BAD_COLOURS * (1 + len(codes) // len(BAD_COLOURS)))
    for code in codes:
        heights = [data.verdicts_by_generation[g].get(code, 0) for g in gens]
        color = OK_COLOUR if code == "ok" else next(others)
        ax.bar(gens, heights, bottom=bottom, label=f"{code} ({totals[code]})", color=color)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_xlabel("generation")
    ax.set_ylabel("candidates")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title("verdicts per generation")
    return _png(fig)


def shapes_figure(best: CandidateRow | None) -> str | None:
    """Per benchmark shape, relative to the naive seed (= 1): the best kernel, the library
    (when measured) and the speed-of-light bound, on a log axis."""
    plt = _pyplot()
    if plt is None or best is None or not best.result.timings:
        return None
    timings = best.result.timings
    series = [("best kernel", [t.speedup for t in timings], "#1f77b4"),
              ("library", [t.baseline_median_ms / t.library_ms if t.library_ms > 0 else 0.0 for t in timings],
               "#ff7f0e"),
              ("speed of light", [t.baseline_median_ms / t.speed_of_light_ms if t.speed_of_light_ms > 0 else 0.0
                                  for t in timings], "#7f7f7f")]
    series = [s for s in series if any(v > 0 for v in s[1])]
    fig, ax = plt.subplots(figsize=(7.5, 0.5 + 0.55 * len(timings) * len(series)))
    height = 0.8 / len(series)
    for i, (name, values, color) in enumerate(series):
        ys = [j + i * height for j in range(len(timings))]
        ax.barh(ys, [v if v > 0 else float("nan") for v in values], height=height, label=name, color=color)
        for y, v in zip(ys, values):
            if v > 0:
                ax.text(v, y, f" {v:.3g}x", va="center", fontsize=7)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_yticks([j + 0.4 - height / 2 for j in range(len(timings))], [t.shape_label for t in timings])
    ax.invert_yaxis()
    ax.set_xlabel("speed relative to the naive seed (naive = 1; log scale)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("best kernel per benchmark shape")
    return _png(fig)


def knob_figure(data: RunData) -> str | None:
    """One panel per knob: each explored value's candidates (dots) and their best speedup (bar)."""
    plt = _pyplot()
    table = data.knob_table()
    if plt is None or not table:
        return None
    names = list(table)[:MAX_KNOB_PANELS]
    cols = min(3, len(names))
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.2 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        values = sorted(table[name], key=_natural)
        for x, value in enumerate(values):
            speeds = table[name][value]
            ax.bar(x, max(speeds), color="#c6dbef")
            ax.scatter([x + (i % 7 - 3) * 0.04 for i in range(len(speeds))], speeds, s=6, color="#08519c")
        ax.set_xticks(range(len(values)), values, fontsize=7)
        ax.set_title(f"{name} ({sum(len(v) for v in table[name].values())} candidates)", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    fig.suptitle("knob values explored (speedup; 0 = not correct)", fontsize=9)
    fig.tight_layout()
    return _png(fig)


def _natural(value: str) -> tuple[int, float, str]:
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def operator_counts(data: RunData) -> Counter:
    return Counter(row.operator for row in data.candidates.values())
