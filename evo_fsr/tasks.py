"""Task library: discovery and strict loading of ``tasks/<name>/``.

A task folder holds ``task.yaml`` (the contract), ``reference.py`` (a seeded input generator
and a float64 reference) and ``seeds/*.cu`` (``naive.cu`` is the baseline of every speedup).
The format is documented in tasks/README.md.  A bad task.yaml is rejected with a
``TaskError`` that names the file, the key and the problem.  The types themselves (Task, Shape,
Arg, TaskError) live in task_model.py and are re-exported here.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import yaml

from . import task_inputs
from .formulas import Formula, FormulaError
from .task_model import (DTYPES, PRECISION_POLICIES, RESERVED_SHAPE_KEYS, ROLES, SCALAR_DTYPES,  # noqa: F401
                         Arg, Shape, Task, TaskError, _formula, _make_shape)

#: The built-in tasks: ``evo_fsr/_tasks`` in an installed wheel, ``<repo>/tasks`` in a checkout
#: (an editable install); ``$EVO_FSR_TASKS`` replaces them.
_PACKAGED_TASKS = Path(__file__).resolve().parent / "_tasks"
BUILTIN_TASKS_ROOT = _PACKAGED_TASKS if _PACKAGED_TASKS.is_dir() else Path(__file__).resolve().parent.parent / "tasks"
DEFAULT_TASKS_ROOT = Path(os.environ.get("EVO_FSR_TASKS", BUILTIN_TASKS_ROOT))
#: Extra task folders, searched before the built-in ones (``os.pathsep``-separated; the
#: ``--tasks-dir`` option of ``evo-fsr`` prepends to it).
TASKS_PATH_ENV = "EVO_FSR_TASKS_PATH"

_TOP_KEYS = {"name", "description", "precision", "tolerance", "signature", "derived", "validation",
             "benchmarks", "default_benchmark", "flops", "bytes", "notes",
             "distributions", "determinism", "timed_inputs", "bit_exact", "forbidden_ptx", "chain_twin"}
_ARG_KEYS = {"name", "role", "dtype", "shape", "value", "size"}


_PTX_PREFIX_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")


def _parse_forbidden_ptx(file: Path, raw: Any) -> tuple[tuple[str, str], ...]:
    """``forbidden_ptx``: a mapping of PTX instruction prefixes (``cos.approx``) to why the task
    forbids them (verdict/task_rules.py)."""
    if not isinstance(raw, Mapping):
        raise TaskError(file, "forbidden_ptx", f"must map PTX instruction prefixes to reasons, not {raw!r}")
    rules = []
    for prefix, why in raw.items():
        if not isinstance(prefix, str) or not _PTX_PREFIX_RE.match(prefix):
            raise TaskError(file, f"forbidden_ptx.{prefix}", "is not a PTX instruction prefix such as cos.approx")
        if not isinstance(why, str) or not why.strip():
            raise TaskError(file, f"forbidden_ptx.{prefix}", "needs a reason (a non-empty string)")
        rules.append((prefix, " ".join(why.split())))
    return tuple(rules)


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
    bit_exact = raw.get("bit_exact", False)
    if not isinstance(bit_exact, bool):
        raise TaskError(file, "bit_exact", f"{bit_exact!r} is not true or false")
    if bit_exact and precision != "exact":
        raise TaskError(file, "bit_exact", f"needs precision: exact (the task declares {precision!r})")
    forbidden_ptx = _parse_forbidden_ptx(file, raw.get("forbidden_ptx", {}))
    chain_twin = raw.get("chain_twin", "")
    if not isinstance(chain_twin, str) or (chain_twin and not (
            re.fullmatch(r"[A-Za-z0-9_]+", chain_twin) and (root / "seeds" / f"{chain_twin}.cu").is_file())):
        raise TaskError(file, "chain_twin", f"{chain_twin!r} is not a seed of this task (seeds/NAME.cu)")
    task = Task(name=name, root=root, description=description, precision=precision,
                tolerance=tuple(tolerance.items()), args=args, derived=derived,
                validation=validation, benchmarks=tuple(benchmarks),
                default_benchmark=default_benchmark, flops=flops, bytes=nbytes,
                notes=str(raw.get("notes", "")), distributions=distributions,
                determinism=determinism, timed_inputs=timed_inputs, bit_exact=bit_exact,
                forbidden_ptx=forbidden_ptx, chain_twin=chain_twin,
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
