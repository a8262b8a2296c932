"""What the model is told about the task, once per run: the contract, the precision policy and
what it means, the benchmark shapes with their sizes, and how fitness is computed.

``TaskBrief`` is plain data built from a ``Task`` and the run's benchmark choice, so prompts
(and ``evo-fsr prompt``) need no GPU and no evaluator.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..tasks import Shape, Task
from ..types import GpuInfo, source_id
from ..verdict.roofline import speed_of_light_ms

#: What each precision policy allows, in the words a kernel writer needs.
PRECISION_MEANING: dict[str, str] = {
    "fp32_strict": ("compute in fp32 throughout: no TF32 tensor-core math (no mma/wmma on tf32, no "
                    "cuBLAS/cuDNN TF32 modes), no fp16/bf16 arithmetic, no approximate intrinsics that lose "
                    "accuracy (__expf, __fdividef, -use_fast_math); reordering sums and FMA are fine"),
    "tf32": "TF32 tensor cores are allowed (10-bit mantissa inputs, fp32 accumulation); fp16/bf16 inputs are not",
    "fp16": "fp16 arithmetic and fp16 tensor cores are allowed; accumulate in fp32 where sums are long",
    "bf16": "bf16 arithmetic and bf16 tensor cores are allowed; accumulate in fp32 where sums are long",
    "exact": "the output must equal the reference exactly (integers, orderings, permutations)",
}

FITNESS_TEXT = (
    "How fitness is computed: a kernel that fails to compile ranks below one that compiles but is "
    "incorrect (a wrong output on any validation or benchmark shape, a crash, a timeout, or a timing "
    "that is not credible), which ranks below every correct kernel. Correct kernels are ranked by "
    "the geometric mean, over the benchmark shapes, of speedup = naive seed time / kernel time "
    "(the naive seed is 1.00x), each the median over timed calls with the L2 cache flushed, "
    "interleaved with the naive seed (which runs in its own process). Every timed call gets fresh "
    "inputs and its outputs are checked. Work left running after launch() returns, on any stream "
    "or thread, is charged to the kernel. A slow shape costs as much as a fast one gains: do not "
    "specialise for one shape at the expense of the others.")


@dataclass(frozen=True)
class ShapeBrief:
    label: str
    dims: tuple[tuple[str, int | float], ...]
    gflop: float
    megabytes: float

    def describe(self, gpu: GpuInfo | None = None, precision: str = "fp32_strict") -> str:
        dims = " ".join(f"{k}={v}" for k, v in self.dims)
        floor = ""
        if gpu is not None:
            ms = speed_of_light_ms(self.gflop * 1e9, self.megabytes * 1e6, gpu, precision)
            floor = f" = {ms:.4f} ms on the target GPU"
        return (f"{self.label}: {dims} (speed-of-light floor: {self.gflop:.3g} GFLOP of arithmetic and "
                f"{self.megabytes:.3g} MB of memory traffic at least{floor})")


@dataclass(frozen=True)
class TaskBrief:
    name: str
    description: str
    signature: str
    precision: str
    tolerance: tuple[tuple[str, float], ...]
    benchmark: str                          # the set's name, or "custom"
    shapes: tuple[ShapeBrief, ...]
    validation: tuple[ShapeBrief, ...]
    baseline_id: str = ""                   # source id of the naive seed (the speedup baseline)
    notes: str = ""
    forbidden_ptx: tuple[tuple[str, str], ...] = ()     # the task's PTX rules (verdict/task_rules.py)

    @classmethod
    def from_task(cls, task: Task, benchmark: str | None = None, shapes: tuple[Shape, ...] = ()) -> "TaskBrief":
        chosen = shapes or task.benchmark(benchmark)

        def brief(shape: Shape, i: int) -> ShapeBrief:
            return ShapeBrief(shape.label or f"shape{i + 1}", tuple(shape.dims), task.flops_of(shape) / 1e9,
                              task.bytes_of(shape) / 1e6)

        try:
            baseline = source_id(task.baseline_source)
        except OSError:
            baseline = ""
        return cls(name=task.name, description=task.description.strip(), signature=task.signature() + ";",
                   precision=task.precision, tolerance=tuple(task.tolerance),
                   benchmark="custom" if shapes else (benchmark or task.default_benchmark),
                   shapes=tuple(brief(s, i) for i, s in enumerate(chosen)),
                   validation=tuple(brief(s, i) for i, s in enumerate(task.validation)),
                   baseline_id=baseline, notes=(task.notes or "").strip(), forbidden_ptx=tuple(task.forbidden_ptx))

    def precision_text(self) -> str:
        tol = dict(self.tolerance)
        meaning = PRECISION_MEANING.get(self.precision, "")
        if self.precision == "exact" or not any(tol.values()):
            check = "every output element must equal the float64 reference exactly"
        else:
            check = (f"outputs are checked against a float64 reference: element-wise |got - ref| <= "
                     f"{tol.get('atol', 0):g} * rms(ref) + {tol.get('rtol', 0):g} * |ref|, and norm-wise "
                     f"||got - ref|| / ||ref|| <= {tol.get('norm_rtol', 0):g}; NaN or Inf where the reference "
                     "is finite fails")
        return f"Precision policy: {self.precision}: {meaning}. {check[0].upper()}{check[1:]}."

    def shapes_text(self, gpu: GpuInfo | None = None) -> str:
        lines = [f"Benchmark shapes (set {self.benchmark}; fitness is measured on these):"]
        lines += [f"  {s.describe(gpu, self.precision)}" for s in self.shapes]
        if self.validation:
            odd = "; ".join(" ".join(f"{k}={v}" for k, v in s.dims) for s in self.validation[:3])
            lines.append(f"Correctness is checked on {len(self.validation)} validation shapes as well, with small "
                         f"and odd sizes that are multiples of no tile (e.g. {odd}), and on every benchmark shape.")
        return "\n".join(lines)

    def describe(self, gpu: GpuInfo | None = None) -> str:
        """The task section of the system prompt (speed-of-light times when the GPU is known)."""
        parts = [f"Task {self.name}:\n{self.description}", f"Required entry point:\n{self.signature}",
                 self.precision_text(), self.shapes_text(gpu), FITNESS_TEXT]
        if self.forbidden_ptx:
            parts.append("Refused before it runs (the generated PTX is read, inline asm included): "
                         + "; ".join(f"{prefix} ({why})" for prefix, why in self.forbidden_ptx) + ".")
        if self.notes:
            parts.append(f"Notes: {self.notes}")
        return "\n\n".join(parts)
