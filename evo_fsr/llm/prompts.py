"""Prompt building: template files (evo_fsr/llm/prompts/*.txt) filled with the task, the GPU
and the evaluator's feedback on the parents.  Templates use ``string.Template`` ($name) so the
braces of C++ code need no escaping."""
from __future__ import annotations

import functools
import string
from importlib import resources

from ..types import EvalResult, GpuInfo

MAX_LOG_CHARS = 3000
Messages = list[dict[str, str]]


@functools.lru_cache(maxsize=None)
def template(name: str) -> string.Template:
    text = resources.files("evo_fsr.llm").joinpath("prompts", f"{name}.txt").read_text(encoding="utf-8")
    return string.Template(text)


def describe_gpu(gpu: GpuInfo | None) -> str:
    return gpu.describe() if gpu else "unknown (not probed yet); write portable code for sm_80 and newer"


def describe_feedback(result: EvalResult | None) -> str:
    """Compiler diagnostics, first mismatch, per-shape latency, speedup and % of speed-of-light."""
    if result is None:
        return "Not evaluated yet."
    lines = [f"Status: {result.status.value}. {result.summary}"]
    if result.gpu_name:
        lines.append(f"Measured on: {result.gpu_name}")
    if result.geomean_speedup is not None:
        lines.append(f"Geometric-mean speedup over the naive baseline: {result.geomean_speedup:.3f}x")
    if result.timings:
        lines.append("Per benchmark shape:")
        for t in result.timings:
            flags = f"  [not credible: {'; '.join(t.flags)}]" if t.flags else ""
            lines.append(f"  {t.shape_label}: {t.median_ms:.4f} ms (baseline {t.baseline_median_ms:.4f} ms), "
                         f"speedup {t.speedup:.2f}x, {100 * t.fraction_of_light:.1f}% of speed-of-light{flags}")
    if result.mismatch is not None:
        lines.append(f"First mismatch: {result.mismatch.describe()}")
    for stage in ("compile", "run"):
        text = result.log(stage).strip()
        if text:
            if len(text) > MAX_LOG_CHARS:
                text = text[:MAX_LOG_CHARS] + "\n[... truncated]"
            lines.append(f"{'Compiler diagnostics' if stage == 'compile' else 'Run log'}:\n{text}")
    return "\n".join(lines)


def _messages(task_description: str, gpu: GpuInfo | None, user: str) -> Messages:
    system = template("system").substitute(task=task_description.strip(), gpu=describe_gpu(gpu))
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def mutate_prompt(task_description: str, gpu: GpuInfo | None, source: str,
                  result: EvalResult | None) -> Messages:
    user = template("mutate").substitute(source=source.strip(), feedback=describe_feedback(result))
    return _messages(task_description, gpu, user)


def crossover_prompt(task_description: str, gpu: GpuInfo | None, source_a: str, result_a: EvalResult | None,
                     source_b: str, result_b: EvalResult | None) -> Messages:
    user = template("crossover").substitute(source_a=source_a.strip(), feedback_a=describe_feedback(result_a),
                                            source_b=source_b.strip(), feedback_b=describe_feedback(result_b))
    return _messages(task_description, gpu, user)


def repair_prompt(task_description: str, gpu: GpuInfo | None, source: str, result: EvalResult | None) -> Messages:
    user = template("repair").substitute(source=source.strip(), feedback=describe_feedback(result))
    return _messages(task_description, gpu, user)
