"""One kernel from several variants: each benchmark shape goes to its best variant, any other
shape to the best general one (issue 12, per-shape specialization).

Every variant is a complete candidate (it defines the task's ``launch``).  ``assemble`` writes
one ``.cu`` in which:

- the variants' ``#include`` lines are hoisted to the top (only ``<...>`` headers pass
  compile.py's check, so hoisting changes nothing but where they are read);
- each variant sits in its own ``namespace evo_variant_<i>``, with ``launch`` renamed to
  ``launch_variant_<i>`` by the preprocessor, so kernels, helpers and ``launch`` of different
  variants cannot collide; every macro a variant defines is ``#undef``-ed after it, so its knob
  values do not leak into the next; its knob and constraint comments are neutralised (the
  assembled kernel has no knobs of its own);
- the dispatcher ``launch`` compares the integer scalars of the signature (the shape's dims as
  the harness passes them) with each routed shape's values, in order, and calls that shape's
  variant; anything else goes to the general variant.

Two routed shapes whose integer scalars are all equal cannot be told apart: the first wins.
An assembled kernel is not a variant (its renaming would clash): ``choose_routes`` skips one,
``assemble`` refuses one.

    routes, general = choose_routes(task.benchmark(name), [(source, verdict), ...])
    source = assemble(task, routes, general)     # then judge it as any candidate
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .tasks import Arg, Shape, Task
from .types import EvalResult, Status, source_id

_INCLUDE_LINE_RE = re.compile(r"^[ \t]*#[ \t]*include[^\n]*$", re.M)
_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", re.M)
_MARKER_RE = re.compile(r"//([ \t]*)(knob|constraint):")
INT_SCALARS = ("int32", "int64")


class DispatchError(ValueError):
    """Variants or routes that cannot be assembled (no integer scalar to route on, ...)."""


@dataclass(frozen=True)
class Route:
    """A benchmark shape and the source of its best variant."""

    shape: Shape
    source: str


def assemble(task: Task, routes: Sequence[Route], general: str) -> str:
    """One ``.cu`` that sends each route's shape to its source and every other shape to ``general``."""
    scalars = [a for a in task.args if a.role == "scalar" and a.dtype in INT_SCALARS]
    if routes and not scalars:
        raise DispatchError(f"task {task.name}: the signature has no integer scalar to route shapes on")
    if any(variant_count(source) for source in [general, *(route.source for route in routes)]):
        raise DispatchError("a variant is itself an assembled dispatch kernel; assemble from its variants")
    variants: list[str] = []
    index: dict[str, int] = {}
    for source in [general, *(route.source for route in routes)]:
        key = source_id(source)
        if key not in index:
            index[key] = len(variants)
            variants.append(source)
    includes: list[str] = []
    bodies: list[str] = []
    for i, source in enumerate(variants):
        hoisted = [m.group(0).strip() for m in _INCLUDE_LINE_RE.finditer(source)]
        includes += [line for line in hoisted if line not in includes]
        bodies.append(_wrap(i, source))
    lines = ["// evo-fsr dispatch kernel: each benchmark shape goes to its best variant (evo_fsr/dispatch.py)",
             *includes, "", *bodies, _dispatcher(task, scalars, routes, index)]
    return "\n".join(lines) + "\n"


def choose_routes(shapes: Sequence[Shape], entries: Sequence[tuple[str, EvalResult]]) -> tuple[list[Route], str]:
    """From (source, verdict) pairs: each shape's fastest correct (status ok) variant, and the
    general one, the best geometric-mean speedup; shapes whose fastest is the general variant
    get no route of their own.  Raises DispatchError when no verdict is ok."""
    ok = [(source, result) for source, result in entries
          if result.status is Status.OK and result.timings and not variant_count(source)]
    if not ok:
        raise DispatchError("no correct (status ok) variant to assemble")
    general = max(ok, key=lambda entry: entry[1].fitness)[0]
    routes = []
    for shape in shapes:
        timed = [(t.median_ms, source) for source, result in ok for t in result.timings
                 if t.shape_label == shape.label and t.median_ms > 0]
        if timed:
            fastest = min(timed, key=lambda pair: pair[0])[1]
            if source_id(fastest) != source_id(general):
                routes.append(Route(shape, fastest))
    return routes, general


def variant_count(source: str) -> int:
    """How many variants an assembled source holds (0 for an ordinary kernel)."""
    return len(re.findall(r"^namespace evo_variant_\d+ \{", source, re.M))


def _wrap(i: int, source: str) -> str:
    body = _INCLUDE_LINE_RE.sub("", source)
    body = _MARKER_RE.sub(lambda m: f"//{m.group(1)}variant {m.group(2)}", body)
    macros = sorted(set(_DEFINE_RE.findall(body)))
    undefs = "\n".join(f"#undef {name}" for name in macros)
    return (f"// ---- variant {i} ----\n#define launch launch_variant_{i}\nnamespace evo_variant_{i} {{\n"
            f"{body.rstrip()}\n}}  // namespace evo_variant_{i}\n#undef launch\n{undefs}\n")


def _dispatcher(task: Task, scalars: list[Arg], routes: Sequence[Route], index: dict[str, int]) -> str:
    params = ", ".join(a.c_decl() for a in task.args)
    call_args = ", ".join(a.name for a in task.args)
    lines = [f'extern "C" int launch({params}) {{']
    for route in routes:
        values = {a.name: int(a.value(route.shape.env)) for a in scalars if a.value is not None}
        test = " && ".join(f"{name} == {value}" for name, value in values.items())
        i = index[source_id(route.source)]
        lines.append(f"    if ({test}) return evo_variant_{i}::launch_variant_{i}({call_args});"
                     f"  // {route.shape.label}")
    lines.append(f"    return evo_variant_0::launch_variant_0({call_args});  // general")
    lines.append("}")
    return "\n".join(lines)
