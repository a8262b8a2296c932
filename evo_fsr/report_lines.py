"""How a verdict's speed is written for people: over the naive seed and relative to the library.

"x of library" is library ms / kernel ms (``ShapeTiming.of_library``): above 1 the kernel is
faster than the vendor library (cuDNN, cuBLAS, torch) timed in the same run; "-" where the
library was not measured.  The evolve progress line and summary, best.cu's header and
``scripts/evaluate.py``'s table all format through this module, so they say the same thing.
"""
from __future__ import annotations

from .types import EvalResult, ShapeTiming, geometric_mean


def ratio(value: float | None, digits: int = 2) -> str:
    """``1.23x``, or ``-`` when there is no figure."""
    return f"{value:.{digits}f}x" if value is not None and value > 0 else "-"


def of_library(timing: ShapeTiming, library_ms: float | None = None) -> float | None:
    """The kernel's speed relative to the library on one shape; ``library_ms`` (measured by the
    caller) stands in where the verdict carries none."""
    if timing.of_library is not None:
        return timing.of_library
    if library_ms and library_ms > 0 and timing.median_ms > 0:
        return library_ms / timing.median_ms
    return None


def geomean_of_library(result: EvalResult, library_ms: dict[str, float | None] | None = None) -> float | None:
    """Geometric mean over shapes of ``of_library``; None unless the result is correct and every
    shape has a library figure."""
    if not result.status.correct or not result.timings:
        return None
    ratios = [of_library(t, (library_ms or {}).get(t.shape_label)) for t in result.timings]
    if any(r is None for r in ratios):
        return None
    return geometric_mean([r for r in ratios if r is not None])


def speed_line(result: EvalResult, library_ms: dict[str, float | None] | None = None) -> str:
    """``3.860x over naive, 0.27x of library (geomean over 5 shapes)``."""
    naive = result.geomean_speedup
    if naive is None:
        return "no speed: not a correct verdict"
    lib = geomean_of_library(result, library_ms)
    lib_text = f"{ratio(lib)} of library" if lib is not None else "library not measured"
    count = len(result.timings)
    return f"{naive:.3f}x over naive, {lib_text} (geomean over {count} shape{'s' if count != 1 else ''})"


def shape_cells(timing: ShapeTiming, library_ms: float | None = None) -> str:
    """``conv2_x 4.30x naive, 0.25x lib, 61.2% SOL`` (no SOL where the floor is not known)."""
    cells = f"{timing.shape_label} {timing.speedup:.2f}x naive, {ratio(of_library(timing, library_ms))} lib"
    if timing.speed_of_light_ms > 0 and timing.median_ms > 0:
        cells += f", {100 * timing.fraction_of_light:.3g}% SOL"
    return cells


def speed_cell(result: EvalResult | None) -> str:
    """A summary table cell: ``3.860x / 0.27x lib`` (``-`` for a speed not earned)."""
    if result is None or result.geomean_speedup is None:
        return "-"
    return f"{result.geomean_speedup:.3f}x / {ratio(geomean_of_library(result))} lib"


def progress_best(speedup: float | None, result: EvalResult | None) -> str:
    """The progress line's best: ``3.86x (0.27x lib)``, or ``none correct``."""
    if speedup is None:
        return "none correct"
    lib = geomean_of_library(result) if result is not None else None
    return f"{speedup:.2f}x ({ratio(lib)} lib)"


def best_header(task: str, candidate_id: str, result: EvalResult, found: str) -> str:
    """best.cu's header comment (one line per item; ``found``: where and by what it was found)."""
    shapes = "; ".join(shape_cells(t) for t in result.timings)
    return (f"evo-fsr best kernel for task {task} (candidate {candidate_id})\n"
            f"{speed_line(result)} on {result.gpu_name or 'unknown GPU'}\n"
            f"per shape: {shapes}\n"
            f"{found}")
