"""Task library: discovery and strict loading of ``tasks/<name>/``.

A task folder holds ``task.yaml`` (the contract), ``reference.py`` (a seeded input generator
and a float64 reference) and ``seeds/*.cu`` (``naive.cu`` is the baseline of every speedup).
The format is documented in tasks/README.md.  A bad task.yaml is rejected with a
``TaskError`` that names the file, the key and the problem.
"""
from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping

import numpy as np
import yaml

from . import shape_checks
from .formulas import Formula, FormulaError
from . import task_inputs

#: The built-in tasks: ``evo_fsr/_tasks`` in an installed wheel, ``<repo>/tasks`` in a checkout
#: (an editable install); ``$EVO_FSR_TASKS`` replaces them.
_PACKAGED_TASKS = Path(__file__).resolve().parent / "_tasks"
BUILTIN_TASKS_ROOT = _PACKAGED_TASKS if _PACKAGED_TASKS.is_dir() else Path(__file__).resolve().parent.parent / "tasks"
DEFAULT_TASKS_ROOT = Path(os.environ.get("EVO_FSR_TASKS", BUILTIN_TASKS_ROOT))
#: Extra task folders, searched before the built-in ones (``os.pathsep``-separated; the
#: ``--tasks-dir`` option of ``evo-fsr`` prepends to it).
TASKS_PATH_ENV = "EVO_FSR_TASKS_PATH"

#: dtype name -> (C type, bytes per element)
DTYPES: dict[str, tuple[str, int]] = {
    "float32": ("float", 4), "float64": ("double", 8), "float16": ("__half", 2),
    "bfloat16": ("__nv_bfloat16", 2), "int8": ("signed char", 1), "uint8": ("unsigned char", 1),
    "int32": ("int", 4), "uint32": ("unsigned int", 4), "int64": ("long long", 8),
}
SCALAR_DTYPES = ("int32", "int64", "float32", "float64")
ROLES = ("input", "output", "inout", "workspace", "scalar", "stream")

#: Precision policies and their default tolerances (norm-wise relative, element-wise rtol/atol).
PRECISION_POLICIES: dict[str, dict[str, float]] = {
    "fp32_strict": {"norm_rtol": 1e-5, "rtol": 1e-4, "atol": 1e-5},   # no TF32, no fp16 math
    "tf32": {"norm_rtol": 2e-3, "rtol": 1e-2, "atol": 1e-3},
    "fp16": {"norm_rtol": 5e-3, "rtol": 2e-2, "atol": 2e-3},
    "bf16": {"norm_rtol": 2e-2, "rtol": 5e-2, "atol": 1e-2},
    "exact": {"norm_rtol": 0.0, "rtol": 0.0, "atol": 0.0},            # integers, permutations
}
RESERVED_SHAPE_KEYS = ("case", "label")

_TOP_KEYS = {"name", "description", "precision", "tolerance", "signature", "derived", "validation",
             "benchmarks", "default_benchmark", "flops", "bytes", "notes",
             "distributions", "determinism", "timed_inputs"}
_ARG_KEYS = {"name", "role", "dtype", "shape", "value", "size"}


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
    validation_cases: tuple[str | None, ...] = ()  # the case each validation shape declares
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

    def describe_for_prompt(self) -> str:
        return f"{self.description.strip()}\nPrecision policy: {self.precision}.\nRequired entry point:\n{self.signature()};"


# ---------------------------------------------------------------------------------------
def _formula(file: Path, key: str, text: Any) -> Formula:
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise TaskError(file, key, f"expected a formula (string or number), got {type(text).__name__}")
    try:
        return Formula(text)
    except FormulaError as exc:
        raise TaskError(file, key, str(exc)) from None


def _parse_arg(file: Path, index: int, raw: Any) -> Arg:
    key = f"signature[{index}]"
    if not isinstance(raw, dict):
        raise TaskError(file, key, "each argument must be a mapping with name and role")
    unknown = set(raw) - _ARG_KEYS
    if unknown:
        raise TaskError(file, f"{key}.{sorted(unknown)[0]}", f"unknown key (allowed: {', '.join(sorted(_ARG_KEYS))})")
    name = raw.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise TaskError(file, f"{key}.name", "missing or not a C identifier")
    role = raw.get("role")
    if role not in ROLES:
        raise TaskError(file, f"{key}.role", f"{role!r} is not one of {', '.join(ROLES)}")
    if role == "stream":
        return Arg(name=name, role=role)
    dtype = raw.get("dtype")
    allowed = SCALAR_DTYPES if role == "scalar" else tuple(DTYPES)
    if dtype not in allowed:
        raise TaskError(file, f"{key}.dtype", f"{dtype!r} is not one of {', '.join(allowed)}")
    if role == "scalar":
        value = _formula(file, f"{key}.value", raw["value"]) if "value" in raw else Formula(name)
        return Arg(name=name, role=role, dtype=dtype, value=value)
    if role == "workspace":
        if "size" not in raw:
            raise TaskError(file, f"{key}.size", "a workspace needs a size formula (elements)")
        return Arg(name=name, role=role, dtype=dtype, shape=(_formula(file, f"{key}.size", raw["size"]),))
    shape = raw.get("shape")
    if not isinstance(shape, list) or not shape:
        raise TaskError(file, f"{key}.shape", "a buffer needs a non-empty list of dims")
    return Arg(name=name, role=role, dtype=dtype,
               shape=tuple(_formula(file, f"{key}.shape[{i}]", d) for i, d in enumerate(shape)))


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


def load_task(folder: Path | str) -> Task:
    """Load and check one task folder; raises ``TaskError`` naming file, key and problem."""
    root = Path(folder)
    file = root / "task.yaml"
    if not file.is_file():
        raise TaskError(file, "-", "no task.yaml in this folder")
    try:
        raw = yaml.safe_load(file.read_text())
    except yaml.YAMLError as exc:
        raise TaskError(file, "-", f"not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise TaskError(file, "-", "the top level must be a mapping")
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise TaskError(file, sorted(unknown)[0], f"unknown key (allowed: {', '.join(sorted(_TOP_KEYS))})")
    for required in ("name", "description", "precision", "signature", "validation", "benchmarks", "flops", "bytes"):
        if required not in raw:
            raise TaskError(file, required, "missing required key")
    name = raw["name"]
    if name != root.name:
        raise TaskError(file, "name", f"{name!r} must match the folder name {root.name!r}")
    precision = raw["precision"]
    if precision not in PRECISION_POLICIES:
        raise TaskError(file, "precision", f"{precision!r} is not one of {', '.join(PRECISION_POLICIES)}")
    tolerance = dict(PRECISION_POLICIES[precision])
    for tkey, tval in (raw.get("tolerance") or {}).items():
        if tkey not in tolerance:
            raise TaskError(file, f"tolerance.{tkey}", f"unknown (allowed: {', '.join(tolerance)})")
        if isinstance(tval, str):
            try:
                tval = float(tval)
            except ValueError:
                pass
        if isinstance(tval, bool) or not isinstance(tval, (int, float)) or tval < 0:
            raise TaskError(file, f"tolerance.{tkey}", "must be a non-negative number")
        tolerance[tkey] = float(tval)
    if not isinstance(raw["signature"], list) or not raw["signature"]:
        raise TaskError(file, "signature", "must be a non-empty list of arguments")
    args = tuple(_parse_arg(file, i, a) for i, a in enumerate(raw["signature"]))
    names = [a.name for a in args]
    if len(set(names)) != len(names):
        raise TaskError(file, "signature", "argument names must be unique")
    if [a.role for a in args].count("stream") != 1:
        raise TaskError(file, "signature", "exactly one argument must have role 'stream'")
    if not any(a.role in ("output", "inout") for a in args):
        raise TaskError(file, "signature", "at least one output or inout buffer is required")
    derived_raw = raw.get("derived") or {}
    if not isinstance(derived_raw, dict):
        raise TaskError(file, "derived", "must be a mapping of name to formula")
    derived = tuple((str(k), _formula(file, f"derived.{k}", v)) for k, v in derived_raw.items())
    if not isinstance(raw["validation"], list) or not raw["validation"]:
        raise TaskError(file, "validation", "must be a non-empty list of shapes")
    validation = tuple(_make_shape(file, f"validation[{i}]", s, derived, args)
                       for i, s in enumerate(raw["validation"]))
    if not isinstance(raw["benchmarks"], dict) or not raw["benchmarks"]:
        raise TaskError(file, "benchmarks", "must be a mapping of set name to a list of shapes")
    benchmarks = []
    for set_name, shapes in raw["benchmarks"].items():
        if not isinstance(shapes, list) or not shapes:
            raise TaskError(file, f"benchmarks.{set_name}", "must be a non-empty list of shapes")
        benchmarks.append((str(set_name), tuple(_make_shape(file, f"benchmarks.{set_name}[{i}]", s, derived, args)
                                                for i, s in enumerate(shapes))))
    default_benchmark = str(raw.get("default_benchmark", benchmarks[0][0]))
    if default_benchmark not in dict(benchmarks):
        raise TaskError(file, "default_benchmark", f"{default_benchmark!r} is not a benchmark set")
    flops = _formula(file, "flops", raw["flops"])
    nbytes = _formula(file, "bytes", raw["bytes"])
    for key, formula in (("flops", flops), ("bytes", nbytes)):
        for shape in validation + tuple(s for _, ss in benchmarks for s in ss):
            try:
                formula(shape.env)
            except (FormulaError, ZeroDivisionError) as exc:
                raise TaskError(file, key, f"{exc} (shape {shape.label})") from None
    if not (root / "reference.py").is_file():
        raise TaskError(root / "reference.py", "-", "missing: every task needs reference.py")
    if not (root / "seeds" / "naive.cu").is_file():
        raise TaskError(root / "seeds" / "naive.cu", "-", "missing: every task needs a naive seed")
    description = raw["description"]
    if not isinstance(description, str) or not description.strip():
        raise TaskError(file, "description", "must be a non-empty string")
    validation_cases = tuple(s.get("case") for s in raw["validation"])
    declared = [(f"validation[{i}]", c) for i, c in enumerate(validation_cases) if c is not None]
    declared += [(f"benchmarks.{set_name}[{i}]", s["case"]) for set_name, shapes in raw["benchmarks"].items()
                 for i, s in enumerate(shapes) if isinstance(s, Mapping) and "case" in s]
    distributions, determinism, timed_inputs = task_inputs.parse_input_keys(
        file, raw, precision, declared, TaskError)
    task = Task(name=name, root=root, description=description, precision=precision,
                tolerance=tuple(tolerance.items()), args=args, derived=derived,
                validation=validation, benchmarks=tuple(benchmarks),
                default_benchmark=default_benchmark, flops=flops, bytes=nbytes,
                notes=str(raw.get("notes", "")), distributions=distributions,
                determinism=determinism, timed_inputs=timed_inputs,
                validation_cases=tuple(None if c is None else str(c) for c in validation_cases))
    _check_distributions(task, file)
    return task


def _check_distributions(task: Task, file: Path) -> None:
    """Every distribution is a case make_inputs knows: tried on the smallest validation shape."""
    try:
        task.reference_module
    except TaskError:
        raise
    except Exception as exc:  # noqa: BLE001 - the task's own code: any failure is reported
        raise TaskError(task.root / "reference.py", "-", f"cannot be loaded: {type(exc).__name__}: {exc}") from None
    inputs = [a for a in task.args if a.role in ("input", "inout")]
    smallest = min(task.validation, key=lambda s: sum(a.numel(s.env) for a in inputs))
    for i, case in enumerate(task.distributions):
        try:
            task.make_inputs(smallest.env, np.random.default_rng(0), case)
        except TaskError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the task's own code is reported
            raise TaskError(file, f"distributions[{i}]",
                            f"make_inputs(case={case!r}) failed on shape {smallest.label}: "
                            f"{type(exc).__name__}: {exc}") from None


def task_roots() -> list[Path]:
    """Where tasks are looked up, first match wins: ``$EVO_FSR_TASKS_PATH`` entries, then the
    built-in tasks (or ``$EVO_FSR_TASKS``)."""
    extra = [Path(p).expanduser() for p in os.environ.get(TASKS_PATH_ENV, "").split(os.pathsep) if p.strip()]
    roots: list[Path] = []
    for root in (*extra, Path(os.environ.get("EVO_FSR_TASKS", BUILTIN_TASKS_ROOT))):
        if root not in roots:
            roots.append(root)
    return roots


def discover(root: Path | str | None = None) -> list[str]:
    """Names of the task folders (those with a task.yaml) under ``root``, or under every
    folder of ``task_roots()``."""
    bases = [Path(root)] if root else task_roots()
    return sorted({p.parent.name for base in bases for p in base.glob("*/task.yaml")})


def find_task_folder(name: str, root: Path | str | None = None) -> Path | None:
    """The folder of task ``name``: under ``root``, else the first of ``task_roots()`` that has it."""
    for base in [Path(root)] if root else task_roots():
        if (base / name / "task.yaml").is_file():
            return base / name
    return None


def get_task(name: str, root: Path | str | None = None) -> Task:
    folder = find_task_folder(name, root)
    if folder is None:
        bases = [Path(root)] if root else task_roots()
        known = ", ".join(discover(root)) or "none"
        raise TaskError(bases[0] / name / "task.yaml", "-",
                        f"no task named {name!r} (known: {known}; searched {', '.join(map(str, bases))})")
    return load_task(folder)
