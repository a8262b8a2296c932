"""Frozen data types that cross process boundaries (engine <-> Ray worker <-> sandboxed runner).

Everything here is plain data: picklable, JSON-serialisable through ``to_dict``/``from_dict``,
and free of DEAP, Ray, OpenAI or CuPy objects.  Units are in the field names (``median_ms``).
"""
from __future__ import annotations

import enum
import hashlib
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping


class Status(str, enum.Enum):
    """Verdict of one evaluation.  Ordered by the fitness tier it earns (see ``TIER``)."""

    COMPILE_ERROR = "compile_error"   # nvcc failed, forbidden include, missing/wrong `launch`
    CRASH = "crash"                   # the candidate process died or a CUDA call failed
    TIMEOUT = "timeout"               # a launch or the whole candidate process ran too long
    WRONG = "wrong"                   # ran, but an output mismatched the float64 reference
    FLAGGED = "flagged"               # correct outputs, but the timing is not credible
    OK = "ok"                         # correct on every shape, timing credible

    @property
    def correct(self) -> bool:
        return self in (Status.OK, Status.FLAGGED)


#: Fitness tier per status: compile failure < incorrect (or not credible) < correct.
TIER: dict[Status, int] = {
    Status.COMPILE_ERROR: 0,
    Status.CRASH: 1,
    Status.TIMEOUT: 1,
    Status.WRONG: 1,
    Status.FLAGGED: 1,   # a time we cannot trust earns nothing over a wrong answer
    Status.OK: 2,
}


_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def geometric_mean(values: list[float]) -> float:
    """Geometric mean; 0.0 for an empty list or when any value is not positive."""
    if not values or min(values) <= 0:
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def normalise_source(source: str) -> str:
    """Source with comments and whitespace runs removed: duplicates that differ only in
    formatting normalise to the same text (knob comments vanish, knob values stay)."""
    text = _COMMENT_RE.sub(" ", source)
    return " ".join(text.split())


def source_id(source: str) -> str:
    """Stable 16-hex id of a candidate: hash of its normalised source."""
    return hashlib.sha256(normalise_source(source).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Candidate:
    """What a worker needs to evaluate a kernel: the task's name and one `.cu` source."""

    task: str
    source: str
    label: str = ""            # human hint (seed file name, operator), not used in the verdict

    @property
    def id(self) -> str:
        return source_id(self.source)


@dataclass(frozen=True)
class Mismatch:
    """The first output element that disagreed with the reference."""

    shape_label: str
    output: str                 # name of the output buffer (or "input:<name>" if an input changed)
    index: tuple[int, ...]
    got: float
    expected: float
    reason: str                 # e.g. "nan where reference is finite", "abs err 3e-2 > tol"

    def describe(self) -> str:
        idx = ",".join(str(i) for i in self.index)
        return (f"shape {self.shape_label}: {self.output}[{idx}] = {self.got!r}, "
                f"expected {self.expected!r} ({self.reason})")


@dataclass(frozen=True)
class ShapeTiming:
    """Timing of one benchmark shape, candidate and baseline interleaved in one process."""

    shape_label: str
    median_ms: float                    # candidate, CUDA events on the harness stream
    baseline_median_ms: float           # the task's naive seed, same process, interleaved
    host_median_ms: float               # candidate, host clock around a device-wide sync
    baseline_host_median_ms: float
    trials: int
    speed_of_light_ms: float            # max(bytes / bandwidth, flops / peak) on this GPU
    flags: tuple[str, ...] = ()         # reasons this timing is not credible
    library_ms: float = 0.0             # the vendor library (torch/cuDNN/cuBLAS) on this shape; 0: not measured
    credited_by: str = ""               # the term that set median_ms (profile.CREDIT_TERMS); "": not recorded

    @property
    def of_library(self) -> float | None:
        """The kernel's speed relative to the library (library ms / kernel ms; >1 = faster)."""
        return self.library_ms / self.median_ms if self.library_ms > 0 and self.median_ms > 0 else None

    @property
    def speedup(self) -> float:
        return self.baseline_median_ms / self.median_ms if self.median_ms > 0 else 0.0

    @property
    def fraction_of_light(self) -> float:
        """Speed-of-light time over measured time (1.0 = at the floor)."""
        return self.speed_of_light_ms / self.median_ms if self.median_ms > 0 else 0.0


@dataclass(frozen=True)
class EvalResult:
    """Verdict on one candidate: status, per-stage logs, per-shape timings, first mismatch."""

    candidate_id: str
    task: str
    status: Status
    summary: str                                    # one line for humans and for LLM feedback
    timings: tuple[ShapeTiming, ...] = ()
    mismatch: Mismatch | None = None
    logs: tuple[tuple[str, str], ...] = ()          # (stage, trimmed text): compile, run, ...
    gpu_name: str = ""
    compile_seconds: float = 0.0
    evaluate_seconds: float = 0.0                   # wall time after compile (spawn..verdict)
    counters: tuple[tuple[str, int], ...] = ()      # e.g. ("validation_launches", 24)
    stage_seconds: tuple[tuple[str, float], ...] = ()  # wall seconds per stage, e.g. ("validate", 0.21)
    worker: str = ""                                # which evaluator: "<host>:gpu<index>:<pid>"
    started_unix_s: float = 0.0                     # when that evaluator began this candidate
    reason: str = ""                                # rejection code set by the verdict (see ``rejection``)
    resources: tuple[tuple[str, int], ...] = ()     # ptxas -v: registers, spill_stores_bytes, shared_bytes, ...
    vendor_libraries: tuple[str, ...] = ()          # vendor libraries the candidate loaded (only with opt-in)

    @property
    def geomean_speedup(self) -> float | None:
        if not self.status.correct or not self.timings:
            return None
        return geometric_mean([t.speedup for t in self.timings])

    @property
    def geomean_of_library(self) -> float | None:
        """Geometric mean over shapes of library ms / kernel ms; None unless every shape has one."""
        if not self.status.correct or not self.timings:
            return None
        ratios = [t.of_library for t in self.timings]
        return geometric_mean([r for r in ratios if r is not None]) if all(r is not None for r in ratios) else None

    @property
    def fitness(self) -> tuple[float, float]:
        """(tier, geometric-mean speedup): compared lexicographically, larger is better."""
        tier = TIER[self.status]
        speed = self.geomean_speedup if self.status is Status.OK else None
        return (float(tier), float(speed or 0.0))

    @property
    def rejection(self) -> str | None:
        """Why a candidate earned nothing, as a short code for counters, or None when OK.

        e.g. ``compile_error``, ``crash``, ``timeout``, ``wrong:unwritten``, ``wrong:tolerance``,
        ``wrong:input-modified``, ``wrong:nondeterministic``, ``wrong:benchmark-shape``,
        ``flagged:escaped-stream``, ``flagged:under-floor``, ``wrong:timed-calls``,
        ``crash:sandbox-violation`` (seccomp killed it, or it forged runner replies).
        """
        if self.status is Status.OK:
            return None
        if self.reason:
            return self.reason
        if self.status is Status.FLAGGED:
            flags = [f.split(":", 1)[0] for t in self.timings for f in t.flags]
            return "flagged:" + (flags[0] if flags else "other")
        if self.status is Status.WRONG and self.mismatch is not None:
            reason = self.mismatch.reason
            if self.mismatch.output.startswith("input:"):
                return "wrong:input-modified"
            if "non-deterministic" in reason:
                return "wrong:nondeterministic"
            if "while timing" in self.summary:
                return "wrong:timed-calls"
            if "benchmark" in self.summary:
                return "wrong:benchmark-shape"
            if reason.startswith(("nan", "inf")):
                return "wrong:unwritten-or-nonfinite"
            return "wrong:tolerance"
        if self.status is Status.CRASH and ("SIGSYS" in self.summary or "protocol violation" in self.summary):
            return "crash:sandbox-violation"
        return self.status.value

    def log(self, stage: str) -> str:
        return "\n".join(text for name, text in self.logs if name == stage)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data["geomean_speedup"] = self.geomean_speedup
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EvalResult":
        mismatch = data.get("mismatch")
        return cls(
            candidate_id=data["candidate_id"],
            task=data["task"],
            status=Status(data["status"]),
            summary=data["summary"],
            timings=tuple(
                ShapeTiming(**{**t, "flags": tuple(t.get("flags", ()))}) for t in data.get("timings", ())
            ),
            mismatch=Mismatch(**{**mismatch, "index": tuple(mismatch["index"])}) if mismatch else None,
            logs=tuple((str(a), str(b)) for a, b in data.get("logs", ())),
            gpu_name=data.get("gpu_name", ""),
            compile_seconds=float(data.get("compile_seconds", 0.0)),
            evaluate_seconds=float(data.get("evaluate_seconds", 0.0)),
            counters=tuple((str(a), int(b)) for a, b in data.get("counters", ())),
            stage_seconds=tuple((str(a), float(b)) for a, b in data.get("stage_seconds", ())),
            worker=str(data.get("worker", "")),
            started_unix_s=float(data.get("started_unix_s", 0.0)),
            reason=str(data.get("reason", "")),
            resources=tuple((str(a), int(b)) for a, b in data.get("resources", ())),
            vendor_libraries=tuple(str(v) for v in data.get("vendor_libraries", ())),
        )

    @property
    def overhead_seconds(self) -> float | None:
        """Evaluation wall time not spent in timed kernel calls (compile excluded); None when
        the stages were not recorded."""
        stages = dict(self.stage_seconds)
        if not stages:
            return None
        return self.evaluate_seconds - stages.get("timed_gpu", 0.0)


@dataclass(frozen=True)
class GpuInfo:
    """Properties of the GPU a worker evaluates on (also fed to LLM prompts)."""

    name: str
    compute_capability: str          # "9.0"
    sm_count: int
    shared_memory_per_block_bytes: int
    shared_memory_per_block_optin_bytes: int
    registers_per_block: int
    l2_cache_bytes: int
    memory_bandwidth_gbps: float     # measured device-to-device copy, bytes read + written
    fp32_peak_tflops: float          # SMs x clock x 128 FMA x 2 (CUDA cores)
    tensor_peak_tflops: float = 0.0  # dense tf32 / fp16 tensor-core peak, used by non-strict policies
    memory_roof_gbps: float = 0.0    # datasheet HBM bandwidth of a recognised part; 0: not known
    extra: tuple[tuple[str, str], ...] = field(default=())

    @property
    def arch(self) -> str:
        return "sm_" + self.compute_capability.replace(".", "")

    def describe(self) -> str:
        return (f"{self.name} (compute capability {self.compute_capability}, {self.sm_count} SMs, "
                f"{self.shared_memory_per_block_optin_bytes // 1024} KiB shared memory per block opt-in, "
                f"{self.registers_per_block} registers per block, {self.l2_cache_bytes // 2**20} MiB L2, "
                f"~{self.memory_bandwidth_gbps:.0f} GB/s measured bandwidth, "
                + (f"{self.memory_roof_gbps:.0f} GB/s HBM roof by datasheet, " if self.memory_roof_gbps > 0 else "")
                + f"{self.fp32_peak_tflops:.1f} TFLOP/s fp32 peak)")
