"""The evaluator's verdict on one kernel, written for a model: status, per-shape times against
the naive seed, the library and the speed-of-light floor, ptxas resources, profiler metrics,
the first mismatch and the compiler log."""
from __future__ import annotations

from typing import Iterable, Mapping

from ..types import EvalResult, ShapeTiming
from .ncu import NcuProfile

MAX_LOG_CHARS = 3000
NOT_EVALUATED = "Not evaluated yet (its verdict is pending)."

#: ptxas resource keys (EvalResult.resources) and how they read.
RESOURCE_WORDS = (("registers", "registers per thread"), ("spill_stores_bytes", "B spill stores"),
                  ("spill_loads_bytes", "B spill loads"), ("shared_bytes", "B static shared memory per block"),
                  ("stack_bytes", "B stack frame"), ("constant_bytes", "B constant memory"))


def describe_resources(resources: Iterable[tuple[str, int]]) -> str:
    """One line from ptxas -v numbers (the kernel using the most of each), with a spill warning."""
    values = dict(resources)
    if not values:
        return ""
    parts = [f"{values[k]} {words}" for k, words in RESOURCE_WORDS if k in values]
    line = "Resources (ptxas -v): " + ", ".join(parts)
    if values.get("spill_stores_bytes", 0) or values.get("spill_loads_bytes", 0):
        line += ". Registers spill to local memory: reduce per-thread state or __launch_bounds__ pressure"
    return line


def _shape_line(t: ShapeTiming) -> str:
    flags = f"  [not credible: {'; '.join(t.flags)}]" if t.flags else ""
    library = ""
    if t.of_library is not None:
        library = f", library {t.library_ms:.4f} ms ({t.of_library:.2f}x of the library's speed)"
    return (f"  {t.shape_label}: {t.median_ms:.4f} ms (naive seed {t.baseline_median_ms:.4f} ms), "
            f"speedup {t.speedup:.2f}x, {100 * t.fraction_of_light:.1f}% of speed-of-light{library}{flags}")


def describe_feedback(result: EvalResult | None, *, log_chars: int = MAX_LOG_CHARS,
                      profile: NcuProfile | None = None, with_shapes: bool = True) -> str:
    """Compiler diagnostics, first mismatch, per-shape latency, speedup, % of speed-of-light,
    library ratio, resources and (for elites) profiler metrics."""
    if result is None:
        return NOT_EVALUATED
    lines = [f"Status: {result.status.value}. {result.summary}"]
    if result.rejection and result.rejection != result.status.value:
        lines.append(f"Rejection: {result.rejection}")
    if result.gpu_name:
        lines.append(f"Measured on: {result.gpu_name}")
    if result.geomean_speedup is not None:
        lines.append(f"Geometric-mean speedup over the naive seed: {result.geomean_speedup:.3f}x")
    if result.geomean_of_library is not None:
        lines.append(f"Geometric mean of library time / kernel time: {result.geomean_of_library:.3f}x")
    if result.timings and with_shapes:
        lines.append("Per benchmark shape:")
        lines += [_shape_line(t) for t in result.timings]
    resources = describe_resources(result.resources)
    if resources:
        lines.append(resources)
    if profile is not None:
        lines.append(profile.describe())
    if result.mismatch is not None:
        lines.append(f"First mismatch: {result.mismatch.describe()}")
    for stage in ("compile", "run"):
        text = result.log(stage).strip()
        if text:
            if len(text) > log_chars:
                text = text[:log_chars] + "\n[... truncated]"
            lines.append(f"{'Compiler diagnostics' if stage == 'compile' else 'Run log'}:\n{text}")
    return "\n".join(lines)


def describe_baseline(results: Mapping[str, EvalResult]) -> str:
    """Feedback for the naive seed before its own verdict arrives: it is the baseline of every
    speedup, and other kernels' timings already carry its per-shape times."""
    text = ("This is the task's naive seed: it is correct by construction and the baseline of every "
            "speedup (1.00x by definition).")
    times = baseline_times(results)
    if times:
        text += " Its measured times: " + ", ".join(f"{label} {ms:.4f} ms" for label, ms in times.items()) + "."
    else:
        text += " Its times are being measured now."
    return text


def baseline_times(results: Mapping[str, EvalResult]) -> dict[str, float]:
    """The naive seed's median ms per benchmark shape, from any evaluated kernel's timings."""
    for result in results.values():
        if result.timings:
            return {t.shape_label: t.baseline_median_ms for t in result.timings}
    return {}


def library_target(results: Mapping[str, EvalResult]) -> str:
    """The line that names the library's time as the target (0 ms = not measured)."""
    best: dict[str, float] = {}
    for result in results.values():
        for t in result.timings:
            if t.library_ms > 0:
                best.setdefault(t.shape_label, t.library_ms)
    if not best:
        return ("Target to beat: the vendor library (cuDNN/cuBLAS through PyTorch, same precision policy). "
                "Its time is not measured in this run (library_ms 0 = unknown), so aim for each shape's "
                "speed-of-light floor: the larger of its memory traffic / bandwidth and its arithmetic / peak.")
    return ("Target to beat: the vendor library (cuDNN/cuBLAS through PyTorch, same precision policy) takes "
            + ", ".join(f"{label} {ms:.4f} ms" for label, ms in best.items()) + ".")
