"""Run a KernelBench problem with torch (CPU) to learn what its task looks like.

- every distinct input axis size gets a dim name (``x_0``); a size that also appears in the
  constructor arguments or in a parameter's shape, or is 1, stays fixed (it is tied to the
  weights or broadcasts); the others are scaled down to small odd sizes, and a dim whose scaling
  breaks the Model is fixed too;
- the output's axes become formulas over the dims (a dim, a constant, ``d + c``, ``(d + c) // s``
  or ``d1 * d2``), fitted on the KernelBench shape and two probes and checked on every
  validation shape;
- the Model's float parameters and buffers become inputs of the kernel (the reference loads
  them back into the Model), so the kernel computes the same function.

Not convertible (``Unconvertible`` with the reason): several outputs, a non-float or non-float32
input or output, an input modified in place, a non-deterministic output, a non-tensor input.
"""
from __future__ import annotations

import copy
import importlib.util
import itertools
import logging
from typing import Any, Callable

from .problem import Problem
from .spec import TaskSpec, TensorSpec

log = logging.getLogger(__name__)

PROBE_A = (5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43)
PROBE_B = (9, 15, 21, 25, 27, 33, 35, 39, 45, 49, 51, 55)
MEDIUM = (33, 65, 97, 129, 67, 99, 131, 71, 101, 137, 73, 103)
MAX_PROBE_NUMEL = 1 << 24


class Unconvertible(ValueError):
    """A problem evo-fsr cannot express as a task; the message is the reason."""


def _torch() -> Any:
    try:
        import torch  # noqa: PLC0415 - optional dependency (extra `kernelbench`)
    except ImportError:
        raise Unconvertible("torch is not installed: pip install 'evo-fsr[kernelbench]'") from None
    return torch


def load_module(problem: Problem) -> Any:
    spec = importlib.util.spec_from_file_location(f"evo_fsr_kb_probe_{problem.task_name}", problem.path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's file: report, do not crash
        raise Unconvertible(f"importing the file failed: {type(exc).__name__}: {exc}") from None
    return module


def _ints(value: Any) -> set[int]:
    if isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, (list, tuple)):
        return set().union(*(_ints(v) for v in value)) if value else set()
    return set()


def derive_spec(problem: Problem, init_seed: int = 0) -> TaskSpec:
    """The task of ``problem``; raises Unconvertible with the reason."""
    if problem.issue:
        raise Unconvertible(problem.issue)
    torch = _torch()
    module = load_module(problem)
    try:
        torch.manual_seed(init_seed)
        init = list(module.get_init_inputs())
        model = module.Model(*init)
        torch.manual_seed(init_seed)
        originals = list(module.get_inputs())
    except Exception as exc:  # noqa: BLE001
        raise Unconvertible(f"building the Model or its inputs failed: {type(exc).__name__}: {exc}") from None
    names = problem.forward_params
    if len(originals) != len(names):
        raise Unconvertible(f"get_inputs() returns {len(originals)} values but forward takes {len(names)}")
    for name, value in zip(names, originals):
        if not isinstance(value, torch.Tensor):
            raise Unconvertible(f"non-tensor input {name!r} ({type(value).__name__}): only tensors are supported")
        if not value.is_floating_point():
            raise Unconvertible(f"non-float input {name!r} ({value.dtype})")
        if value.dtype != torch.float32:
            raise Unconvertible(f"input {name!r} is {value.dtype}: only float32 problems are supported")
    state = {k: v for k, v in model.state_dict().items() if torch.is_tensor(v) and v.is_floating_point()}
    taken = set(names)
    params: list[TensorSpec] = []
    for key, value in state.items():
        if value.dtype != torch.float32:
            raise Unconvertible(f"Model parameter {key!r} is {value.dtype}: only float32 problems are supported")
        pname = "p_" + "".join(c if c.isalnum() else "_" for c in key)
        while pname in taken:
            pname += "_"
        taken.add(pname)
        params.append(TensorSpec(pname, tuple(str(s) for s in value.shape), "param", key=key))

    # dims: one name per distinct input axis size
    dim_of: dict[int, str] = {}
    original: dict[str, int] = {}
    for name, value in zip(names, originals):
        for axis, size in enumerate(value.shape):
            if int(size) not in dim_of:
                dim_of[int(size)] = f"{name}_{axis}"
                original[f"{name}_{axis}"] = int(size)
    tied = _ints(init) | {int(s) for v in state.values() for s in v.shape} | {0, 1}
    scalable = [d for d, size in original.items() if size not in tied]

    def shapes_at(values: dict[str, int]) -> list[tuple[int, ...]]:
        return [tuple(values.get(dim_of[int(s)], int(s)) for s in value.shape) for value in originals]

    model64 = copy.deepcopy(model).double()
    uniform = [bool(v.numel()) and float(v.min()) >= 0.0 for v in originals]

    def run(values: dict[str, int]) -> Any:
        shapes = shapes_at(values)
        if sum(_prod(s) for s in shapes) > MAX_PROBE_NUMEL:
            raise Unconvertible("probe too large")
        gen = torch.Generator().manual_seed(1234)
        args = [(torch.rand if u else torch.randn)(s, generator=gen, dtype=torch.float64) for s, u in zip(shapes, uniform)]
        with torch.no_grad():
            return model64(*args), args

    def works(values: dict[str, int]) -> bool:
        try:
            out, _ = run(values)
            return isinstance(out, torch.Tensor)
        except Exception:  # noqa: BLE001 - a shape the Model does not accept
            return False

    def probe(pool: tuple[int, ...], dims: list[str]) -> dict[str, int]:
        return {d: pool[i % len(pool)] for i, d in enumerate(dims)}

    # scale what can be scaled (fix, one at a time, the dims whose scaling breaks the Model)
    while scalable and not (works(probe(PROBE_A, scalable)) and works(probe(PROBE_B, scalable))):
        for d in scalable:
            rest = [x for x in scalable if x != d]
            if not rest or (works(probe(PROBE_A, rest)) and works(probe(PROBE_B, rest))):
                scalable = rest
                break
        else:
            scalable = []

    out_shape = _original_output(torch, model, originals)
    points = [(dict(original), out_shape)]
    for pool in (PROBE_A, PROBE_B):
        values = probe(pool, scalable)
        out, _ = run(values) if scalable else (None, None)
        if out is not None:
            points.append(({**original, **values}, tuple(out.shape)))
    formulas = tuple(_fit_axis(axis, points, scalable) for axis in range(len(out_shape)))

    # in place? deterministic? (on the first probe, or the KernelBench shape when nothing scales)
    check_values = probe(PROBE_A, scalable) if scalable else {}
    _check_pure(torch, model64, shapes_at(check_values), uniform, names)

    validation: list[tuple[str, tuple[tuple[str, int], ...]]] = []
    for label, values in (("small_odd", probe(PROBE_A, scalable)), ("small_odd_b", probe(PROBE_B, scalable)),
                          ("ones", {d: 1 for d in scalable}),
                          ("medium_odd", {d: min(m, original[d]) | 1 for d, m in zip(scalable, MEDIUM)})):
        if not scalable and validation:
            break
        try:
            out, _ = run(values)
        except Unconvertible:
            continue
        except Exception:  # noqa: BLE001 - e.g. a kernel larger than the ones-shape: leave it out
            continue
        env = {**original, **values}
        if tuple(out.shape) != tuple(_eval(f, env) for f in formulas):
            continue
        entry = tuple(sorted(values.items(), key=lambda kv: scalable.index(kv[0])))
        if entry not in [v for _, v in validation]:
            validation.append((label, entry))
    if not validation:
        validation.append(("kernelbench", tuple((d, original[d]) for d in scalable)))
    inputs = tuple(TensorSpec(name, tuple(dim_of[int(s)] if dim_of[int(s)] in scalable else str(int(s))
                                          for s in value.shape), "input", "uniform" if u else "normal")
                   for name, value, u in zip(names, originals, uniform))
    output_name = "out" if "out" not in taken else "output_"
    return TaskSpec(problem=problem, inputs=inputs + tuple(params),
                    output=TensorSpec(output_name, formulas, "output"),
                    dims=tuple((d, original[d]) for d in scalable), validation=tuple(validation),
                    init_seed=init_seed)


def _prod(shape: tuple[int, ...]) -> int:
    total = 1
    for s in shape:
        total *= s
    return total


def _original_output(torch: Any, model: Any, originals: list[Any]) -> tuple[int, ...]:
    """The output shape at the KernelBench sizes: on the meta device when the Model allows it,
    else by running it; several outputs and non-float outputs are refused here."""
    out = None
    try:
        meta = copy.deepcopy(model).to("meta")
        with torch.no_grad():
            out = meta(*[t.to("meta") for t in originals])
    except Exception:  # noqa: BLE001 - not every op has a meta kernel
        try:
            with torch.no_grad():
                out = model(*[t.clone() for t in originals])
        except Exception as exc:  # noqa: BLE001
            raise Unconvertible(f"running the Model failed: {type(exc).__name__}: {exc}") from None
    if isinstance(out, (tuple, list)):
        raise Unconvertible(f"several outputs (forward returns {len(out)} values)")
    if not isinstance(out, torch.Tensor):
        raise Unconvertible(f"forward returns {type(out).__name__}, not a tensor")
    if not out.is_floating_point():
        raise Unconvertible(f"non-float output ({out.dtype})")
    if out.dtype != torch.float32:
        raise Unconvertible(f"the output is {out.dtype}: only float32 problems are supported")
    return tuple(int(s) for s in out.shape)


def _check_pure(torch: Any, model64: Any, shapes: list[tuple[int, ...]], uniform: list[bool],
                names: tuple[str, ...]) -> None:
    gen = torch.Generator().manual_seed(99)
    args = [(torch.rand if u else torch.randn)(s, generator=gen, dtype=torch.float64) for s, u in zip(shapes, uniform)]
    kept = [a.clone() for a in args]
    with torch.no_grad():
        first = model64(*args)
        for name, a, k in zip(names, args, kept):
            if not torch.equal(a, k):
                raise Unconvertible(f"in-place: forward modifies its input {name!r}")
        second = model64(*[k.clone() for k in kept])
    if not torch.equal(torch.nan_to_num(first), torch.nan_to_num(second)):
        raise Unconvertible("non-deterministic output (two runs on the same inputs differ: dropout or random ops?)")


def _eval(formula: str, env: dict[str, int]) -> int:
    from ..formulas import Formula  # noqa: PLC0415
    return int(Formula(formula)(env))


def _fit_axis(axis: int, points: list[tuple[dict[str, int], tuple[int, ...]]], scalable: list[str]) -> str:
    """A formula for output axis ``axis`` that holds at every point (dims -> output shape)."""
    values = [out[axis] for _, out in points]
    if len(set(values)) == 1 and (len(points) > 1 or not scalable):
        return str(values[0])
    candidates: list[tuple[str, Callable[[dict[str, int]], int]]] = []
    for d in scalable:
        candidates.append((d, lambda env, d=d: env[d]))
    for d in scalable:
        for c in range(-16, 17):
            if c:
                candidates.append((f"{d} {'+' if c > 0 else '-'} {abs(c)}", lambda env, d=d, c=c: env[d] + c))
        for s, c in itertools.product((2, 3, 4), range(-16, 17)):
            text = f"({d} {'+' if c >= 0 else '-'} {abs(c)}) // {s}"
            candidates.append((text, lambda env, d=d, c=c, s=s: (env[d] + c) // s))
    for d1, d2 in itertools.combinations(scalable, 2):
        candidates.append((f"{d1} * {d2}", lambda env, d1=d1, d2=d2: env[d1] * env[d2]))
    for text, fn in candidates:
        if all(fn(env) == out[axis] for env, out in points):
            return text
    if len(set(values)) == 1:
        return str(values[0])
    raise Unconvertible(f"cannot express the output's axis {axis} ({', '.join(map(str, values))} at the probed "
                        f"shapes) as a formula of the input dims")
