"""The task model: a task's contract (signature, shapes, tolerances, input properties) as frozen
types, with the shape arithmetic.  Loading task.yaml and finding task folders is tasks.py's."""
from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping

from . import shape_checks, task_inputs
from .formulas import Formula, FormulaError

#: dtype name -> (C type, bytes per element)
DTYPES: dict[str, tuple[str, int]] = {
    "float32": ("float", 4), "float64": ("double", 8), "float16": ("__half", 2),
    "bfloat16": ("__nv_bfloat16", 2), "int8": ("signed char", 1), "uint8": ("unsigned char", 1),
    "int32": ("int", 4), "uint32": ("unsigned int", 4), "int64": ("long long", 8),
}
SCALAR_DTYPES = ("int32", "int64", "float32", "float64")
ROLES = ("input", "output", "inout", "workspace", "scalar", "stream")

#: Precision policies and their default tolerances (norm-wise relative, element-wise rtol/atol).
#: ``flush_floor_per_input``: an absolute error forgiven per input element, for tasks where
#: flushing subnormals to zero is legitimate (fp32 ``atomicAdd`` on global memory flushes
#: subnormal operands and results, PTX ``atom.add.f32``): a reduction over N inputs sets it to
#: FLT_MIN = 2^-126, so up to N * 2^-126 is forgiven - nothing at any normal magnitude.
#: ``scale_rtol``: with a task's ``error_scale(inputs, dims, xp)`` (reference.py, optional), the
#: absolute error forgiven per output element is ``scale_rtol`` times that element's scale: the
#: magnitude of the quantities it is computed from. An output that cancels (a cross-entropy row
#: whose label holds the row's maximum by far: lse - x_label ~ 1e-12 from terms ~100) errs by
#: ulps of the terms, not of the result, in any float computation; ~16 units of the policy's
#: roundoff. Without an ``error_scale`` it has no effect.
PRECISION_POLICIES: dict[str, dict[str, float]] = {
    "fp32_strict": {"norm_rtol": 1e-5, "rtol": 1e-4, "atol": 1e-5, "flush_floor_per_input": 0.0, "scale_rtol": 1e-6},  # no TF32/fp16
    "tf32": {"norm_rtol": 2e-3, "rtol": 1e-2, "atol": 1e-3, "flush_floor_per_input": 0.0, "scale_rtol": 8e-3},
    "fp16": {"norm_rtol": 5e-3, "rtol": 2e-2, "atol": 2e-3, "flush_floor_per_input": 0.0, "scale_rtol": 8e-3},
    "bf16": {"norm_rtol": 2e-2, "rtol": 5e-2, "atol": 1e-2, "flush_floor_per_input": 0.0, "scale_rtol": 6e-2},
    "exact": {"norm_rtol": 0.0, "rtol": 0.0, "atol": 0.0, "flush_floor_per_input": 0.0, "scale_rtol": 0.0},  # integers, permutations
}
RESERVED_SHAPE_KEYS = ("case", "label")


class TaskError(ValueError):
    """A task that cannot be loaded: ``file``, ``key`` and ``problem`` say where and what."""

    def __init__(self, file: Path | str, key: str, problem: str) -> None:
        self.file, self.key, self.problem = str(file), key, problem
        super().__init__(f"{file}: {key}: {problem}")


@dataclass(frozen=True)
class Arg:
    """One parameter of ``launch`` in declaration order."""

    name: str
    role: str                         # input | output | inout | workspace | scalar | stream
    dtype: str = ""                   # DTYPES key; empty for the stream
    shape: tuple[Formula, ...] = ()   # buffers: dims (formulas); workspace: one size formula
    value: Formula | None = None      # scalars: formula (default: the dim of the same name)

    @property
    def is_buffer(self) -> bool:
        return self.role in ("input", "output", "inout", "workspace")

    def c_decl(self) -> str:
        if self.role == "stream":
            return f"cudaStream_t {self.name}"
        ctype = DTYPES[self.dtype][0]
        if self.role == "scalar":
            return f"{ctype} {self.name}"
        const = "const " if self.role == "input" else ""
        return f"{const}{ctype}* {self.name}"

    def numel(self, dims: Mapping[str, Any]) -> int:
        return int(math.prod(int(f(dims)) for f in self.shape))

    def dims_of(self, dims: Mapping[str, Any]) -> tuple[int, ...]:
        return tuple(int(f(dims)) for f in self.shape)


@dataclass(frozen=True)
class Shape:
    """One problem size: its dims (after derived formulas), the generator case and a label."""

    dims: tuple[tuple[str, int | float], ...]
    case: str = "random"
    label: str = ""

    @property
    def env(self) -> dict[str, int | float]:
        return dict(self.dims)


@dataclass(frozen=True)
class Task:
    name: str
    root: Path
    description: str
    precision: str
    tolerance: tuple[tuple[str, float], ...]
    args: tuple[Arg, ...]
    derived: tuple[tuple[str, Formula], ...]
    validation: tuple[Shape, ...]
    benchmarks: tuple[tuple[str, tuple[Shape, ...]], ...]
    default_benchmark: str
    flops: Formula
    bytes: Formula
    notes: str = ""
    distributions: tuple[str, ...] = ("random",)   # make_inputs cases; the first is timed
    determinism: str = "bitwise"                   # bitwise | tolerance (task_inputs.py)
    timed_inputs: str = "mix"                      # mix | regenerate (task_inputs.py)
    bit_exact: bool = False                        # exact floats compared with their sign: -0.0 is not +0.0
    # PTX instructions a candidate may not use (prefix -> why), e.g. cos.approx where the task asks
    # for the accurate cosf (verdict/task_rules.py)
    forbidden_ptx: tuple[tuple[str, str], ...] = ()
    validation_cases: tuple[str | None, ...] = ()  # the case each validation shape declares
    # the seed whose runner takes the calibration windows of a chained shape (verdict/chain.py):
    # a fast one, whose calls are as long as a good candidate's ("": the naive seed)
    chain_twin: str = ""
    _module: list[ModuleType] = field(default_factory=list, compare=False, repr=False)

    # -- contract -----------------------------------------------------------------------
    def signature(self) -> str:
        """The C prototype every candidate must define (DESIGN.md section 3)."""
        return 'extern "C" int launch(' + ", ".join(a.c_decl() for a in self.args) + ")"

    def header(self) -> str:
        """Prepended to every compile: a candidate whose ``launch`` differs fails to compile."""
        includes = ["#include <cuda_runtime.h>"]
        dtypes = {a.dtype for a in self.args}
        if "float16" in dtypes:
            includes.append("#include <cuda_fp16.h>")
        if "bfloat16" in dtypes:
            includes.append("#include <cuda_bf16.h>")
        return "\n".join(includes) + "\n" + self.signature() + ";\n"

    @property
    def tol(self) -> dict[str, float]:
        return dict(self.tolerance)

    def benchmark(self, name: str | None = None) -> tuple[Shape, ...]:
        wanted = name or self.default_benchmark
        for set_name, shapes in self.benchmarks:
            if set_name == wanted:
                return shapes
        raise KeyError(f"task {self.name!r} has no benchmark set {wanted!r} "
                       f"(has: {', '.join(n for n, _ in self.benchmarks)})")

    def make_shape(self, values: Mapping[str, Any], where: str = "shape",
                   free_memory_bytes: int | None = None) -> Shape:
        """A Shape from user values: derived dims are computed, and the shape is checked
        (shape_checks.py: known dims, signs, no empty buffer, int32 ranges, and memory against
        ``free_memory_bytes`` when given); raises TaskError with one clear line."""
        shape_checks.check_values(self, values, where)
        shape = _make_shape(self.root / "task.yaml", where, values, self.derived, self.args,
                            self.precision)
        shape_checks.check_shape(self, shape, where, free_memory_bytes)
        return shape

    def parse_shape(self, text: str, free_memory_bytes: int | None = None) -> Shape:
        """A Shape from ``"N=32,C=64,..."`` (command line); raises TaskError on a bad value."""
        values: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise TaskError(self.root / "task.yaml", "--shape", f"{part!r} is not key=value")
            try:
                values[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else float(value)
            except ValueError:
                raise TaskError(self.root / "task.yaml", f"--shape {key}", f"{value!r} is not a number") from None
        needed = {n for a in self.args for f in (*a.shape, *([a.value] if a.value else []))
                  for n in f.names} - {name for name, _ in self.derived}
        missing = sorted(needed - set(values))
        if missing:
            raise TaskError(self.root / "task.yaml", "--shape", f"missing dims: {', '.join(missing)}")
        return self.make_shape(values, where="--shape", free_memory_bytes=free_memory_bytes)

    def validation_plan(self, seeds: int) -> tuple[tuple[Shape, str], ...]:
        """(shape, case) pairs to validate on: declared cases kept, every distribution on at
        least two shapes (one odd-sized), each shape at least ``seeds`` times (task_inputs.py)."""
        declared = self.validation_cases or tuple(None for _ in self.validation)
        buffers = [a for a in self.args if a.is_buffer and a.role != "workspace"]
        odd = [any(d > 1 and d % 2 for a in buffers for d in a.dims_of(s.env)) for s in self.validation]
        elements = [sum(a.numel(s.env) for a in buffers if a.role in ("input", "inout")) for s in self.validation]
        return task_inputs.validation_plan(self.validation, declared, self.distributions, odd, elements, seeds)

    def flops_of(self, shape: Shape) -> float:
        return float(self.flops(shape.env))

    def bytes_of(self, shape: Shape) -> float:
        return float(self.bytes(shape.env))

    # -- seeds and reference ------------------------------------------------------------
    def seeds(self) -> dict[str, str]:
        """Seed sources by file stem; ``naive`` first."""
        files = sorted((self.root / "seeds").glob("*.cu"), key=lambda p: (p.stem != "naive", p.stem))
        return {p.stem: p.read_text() for p in files}

    @property
    def baseline_source(self) -> str:
        return (self.root / "seeds" / "naive.cu").read_text()

    @property
    def chain_twin_source(self) -> str | None:
        """The ``chain_twin`` seed's source (None: none declared)."""
        return (self.root / "seeds" / f"{self.chain_twin}.cu").read_text() if self.chain_twin else None

    @property
    def reference_module(self) -> ModuleType:
        if not self._module:
            path = self.root / "reference.py"
            spec = importlib.util.spec_from_file_location(f"evo_fsr_task_{self.name}", path)
            assert spec and spec.loader
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            for needed in ("make_inputs", "reference"):
                if not callable(getattr(module, needed, None)):
                    raise TaskError(path, needed, "reference.py must define this function")
            self._module.append(module)
        return self._module[0]

    @property
    def make_inputs(self) -> Callable[..., dict[str, Any]]:
        return self.reference_module.make_inputs

    @property
    def reference(self) -> Callable[..., dict[str, Any]]:
        return self.reference_module.reference

    @property
    def custom_compare(self) -> Callable[..., Any] | None:
        return getattr(self.reference_module, "compare", None)

    @property
    def error_scale(self) -> Callable[..., dict[str, Any]] | None:
        """``error_scale(inputs, dims, xp)`` of reference.py, if defined: per output, an array
        broadcastable to it of the magnitudes each element is computed from (see ``scale_rtol``)."""
        return getattr(self.reference_module, "error_scale", None)

    def describe_for_prompt(self) -> str:
        return f"{self.description.strip()}\nPrecision policy: {self.precision}.\nRequired entry point:\n{self.signature()};"


def _formula(file: Path, key: str, text: Any) -> Formula:
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise TaskError(file, key, f"expected a formula (string or number), got {type(text).__name__}")
    try:
        return Formula(text)
    except FormulaError as exc:
        raise TaskError(file, key, str(exc)) from None


def _make_shape(file: Path, key: str, raw: Any, derived: tuple[tuple[str, Formula], ...],
                args: tuple[Arg, ...], precision: str = "") -> Shape:
    if not isinstance(raw, Mapping):
        raise TaskError(file, key, "a shape must be a mapping of dim names to numbers")
    dims: dict[str, int | float] = {}
    for name, value in raw.items():
        if name in RESERVED_SHAPE_KEYS:
            if not isinstance(value, str):
                raise TaskError(file, f"{key}.{name}", "must be a string")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TaskError(file, f"{key}.{name}", f"dims must be numbers, got {value!r}")
        dims[str(name)] = value
    for name, formula in derived:
        if name in dims:
            continue
        try:
            dims[name] = formula(dims)
        except (FormulaError, ZeroDivisionError, ValueError) as exc:
            raise TaskError(file, f"{key} (derived {name})", str(exc)) from None
    for arg in args:
        where = f"{key} (argument {arg.name})"
        try:
            if arg.is_buffer:
                sizes = [f(dims) for f in arg.shape]
                if any(int(s) != s or s < 0 for s in sizes):
                    raise TaskError(file, where, f"dims {sizes} must be non-negative integers")
            elif arg.value is not None:
                arg.value(dims)
        except FormulaError as exc:
            raise TaskError(file, where, str(exc)) from None
    label = raw.get("label") or ",".join(f"{k}={v}" for k, v in raw.items() if k not in RESERVED_SHAPE_KEYS)
    return Shape(dims=tuple(dims.items()), case=str(raw.get("case", "random")), label=str(label))
