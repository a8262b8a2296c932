"""Checks on a user's shape (``--shape``, ``eval.shapes``) before anything is allocated or run.

One clear line each (a ``TaskError`` naming the task file, the shape and the problem):

- every dim is one the task knows (``Z=3`` is an error) and no derived dim is contradicted;
- every dim has the sign the task's own shapes give it: positive unless one of them uses 0
  (conv2d's ``pad``), an integer where they are integers; checked before any derived formula
  divides by it (conv2d's ``stride=0``);
- no buffer is empty, and no output in particular;
- where the signature passes dims as ``int32``: element counts, byte sizes and scalar values
  fit in an int32 (a kernel indexing with ``int`` would overflow);
- the estimated GPU memory of a verdict on this shape fits in the free memory, when known.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

from .formulas import FormulaError

if TYPE_CHECKING:
    from .task_model import Shape, Task

INT32_MAX = 2**31 - 1
#: Device copies of each input the runner holds while timing: the rotated set, its source and
#: one snapshot of the inputs after a checked call.
INPUT_COPIES = 3
#: Device copies of each output: the buffer and the snapshots of the checked timed calls (2).
OUTPUT_COPIES = 3
#: The trusted side's reference on the GPU (CuPy, when present): inputs and outputs in float64.
REFERENCE_BYTES_PER_ELEMENT = 8
#: The runner's L2-flush buffer and scratch (probe copies), a fixed allowance.
FIXED_ALLOWANCE_BYTES = 1 << 30
_RESERVED = ("case", "label")


def known_dims(task: "Task") -> frozenset[str]:
    """Dims a shape of ``task`` may give: those its formulas read (buffer shapes, scalar values,
    derived dims, FLOPs, bytes), its derived dims and those its own shapes set."""
    names: set[str] = {name for name, _ in task.derived}
    for arg in task.args:
        for formula in (*arg.shape, *([arg.value] if arg.value is not None else [])):
            names |= formula.names
    for _, formula in task.derived:
        names |= formula.names
    names |= task.flops.names | task.bytes.names
    for shape in _own_shapes(task):
        names |= set(shape.env)
    return frozenset(names)


def check_values(task: "Task", values: Mapping[str, Any], where: str) -> None:
    """Dims as given: known, with the right sign (before any derived formula divides by them),
    derived ones consistent; then no input or output may be empty."""
    from .tasks import TaskError  # noqa: PLC0415 - tasks.py imports this module
    file = task.root / "task.yaml"
    known = known_dims(task)
    for name, value in values.items():
        if name in _RESERVED:
            continue
        if name not in known:
            raise TaskError(file, where, f"unknown dim {name}={value} (this task's dims: {', '.join(sorted(known))})")
    lowest = _lowest_own_values(task)
    for name, value in values.items():
        if name in _RESERVED or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue                                    # the loader reports non-numbers
        if not math.isfinite(value):
            raise TaskError(file, where, f"{name}={value}: must be a finite number")
        own = lowest.get(name)
        if own is None:
            continue
        low, integral = own
        if integral and value != int(value):
            raise TaskError(file, where, f"{name}={value}: must be an integer")
        if low > 0 and value <= 0:
            raise TaskError(file, where, f"{name}={value}: must be positive")
        if low == 0 and value < 0:
            raise TaskError(file, where, f"{name}={value}: must not be negative")
    env = {k: v for k, v in values.items() if k not in _RESERVED}
    for name, formula in task.derived:
        try:
            computed = formula(env)
        except ZeroDivisionError:
            zeros = [n for n in sorted(formula.names) if env.get(n) == 0]
            raise TaskError(file, where, f"derived {name} = {formula.text} divides by zero"
                            + (f" ({', '.join(f'{n}=0' for n in zeros)}: must be positive)" if zeros else "")) from None
        except (FormulaError, ValueError, TypeError):
            return                                      # a missing or non-numeric dim: reported by the loader
        if name in values and values[name] != computed:
            raise TaskError(file, where, f"{name}={values[name]} contradicts its formula {formula.text} = {computed} "
                                         "(leave derived dims out)")
        env[name] = computed
    for arg in task.args:
        if arg.role in ("input", "output", "inout"):
            try:
                dims = [f(env) for f in arg.shape]
            except (FormulaError, ZeroDivisionError, ValueError, TypeError):
                return                                  # reported by the loader
            if any(d <= 0 for d in dims):
                kind = "output" if arg.role in ("output", "inout") else "input"
                raise TaskError(file, where, f"{kind} {arg.name} would be empty (dims {dims})")


def check_shape(task: "Task", shape: "Shape", where: str, free_memory_bytes: int | None = None) -> None:
    """A complete shape: int32 ranges, and memory against ``free_memory_bytes`` when given."""
    from .tasks import DTYPES, TaskError  # noqa: PLC0415
    file = task.root / "task.yaml"
    env = shape.env
    int32 = any(a.role == "scalar" and a.dtype == "int32" for a in task.args)
    for arg in task.args:
        if arg.role == "scalar" and arg.value is not None and arg.dtype == "int32":
            value = arg.value(env)
            if not -2**31 <= value <= INT32_MAX:
                raise TaskError(file, where, f"scalar {arg.name} = {value} does not fit the signature's int32")
        if not arg.is_buffer:
            continue
        numel = arg.numel(env)
        nbytes = numel * DTYPES[arg.dtype][1]
        if int32 and numel > INT32_MAX:
            raise TaskError(file, where, f"{arg.name} has {numel:,} elements: more than int32 indexing allows "
                                         f"({INT32_MAX:,}); the signature passes dims as int32")
        if int32 and nbytes > INT32_MAX:
            raise TaskError(file, where, f"{arg.name} is {nbytes:,} bytes: byte offsets overflow int32 "
                                         f"({INT32_MAX:,}); the signature passes dims as int32")
    if free_memory_bytes is not None:
        need = estimated_memory_bytes(task, shape)
        if need > free_memory_bytes:
            raise TaskError(file, where, f"needs about {need / 2**30:.1f} GiB of GPU memory for its buffers, "
                                         f"the GPU has {free_memory_bytes / 2**30:.1f} GiB free")


def estimated_memory_bytes(task: "Task", shape: "Shape") -> int:
    """GPU memory a verdict on ``shape`` needs at its peak (timing): every buffer with the copies
    the runner keeps (``INPUT_COPIES``, ``OUTPUT_COPIES``), the float64 reference of inputs and
    outputs, and ``FIXED_ALLOWANCE_BYTES``."""
    from .tasks import DTYPES  # noqa: PLC0415
    total = FIXED_ALLOWANCE_BYTES
    for arg in task.args:
        if not arg.is_buffer:
            continue
        nbytes = arg.numel(shape.env) * DTYPES[arg.dtype][1]
        copies = {"input": INPUT_COPIES, "output": OUTPUT_COPIES, "inout": INPUT_COPIES + OUTPUT_COPIES - 1}
        total += nbytes * copies.get(arg.role, 1)
        if arg.role != "workspace":
            total += arg.numel(shape.env) * REFERENCE_BYTES_PER_ELEMENT
    return total


def _own_shapes(task: "Task") -> tuple["Shape", ...]:
    return task.validation + tuple(s for _, shapes in task.benchmarks for s in shapes)


def _lowest_own_values(task: "Task") -> dict[str, tuple[float, bool]]:
    """Per dim set in the task's own shapes (derived ones excluded): its lowest value, and
    whether every value is an integer."""
    derived = {name for name, _ in task.derived}
    out: dict[str, tuple[float, bool]] = {}
    for shape in _own_shapes(task):
        for name, value in shape.dims:
            if name in derived:
                continue
            low, integral = out.get(name, (value, True))
            out[name] = (min(low, value), integral and float(value).is_integer() and not isinstance(value, float))
    return out
