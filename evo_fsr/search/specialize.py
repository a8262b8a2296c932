"""The end of a run: one kernel that sends each benchmark shape to its best variant (issue 12,
per-shape specialization).

When the loop finishes (``Evolution.run``, not on an interruption), ``specialize``:

1. takes the per-shape elites (elites.py) and the hall of fame, and picks with
   ``dispatch.choose_routes`` each benchmark shape's fastest correct variant and the general
   one (the best geometric mean); when every shape's fastest is the general variant (or the
   run has one shape), there is nothing to assemble and best.cu stays as it is;
2. assembles the dispatcher (``dispatch.assemble``) and evaluates it through the backend as a
   normal candidate (operator ``dispatch``, parents: the variants), recorded in
   candidates.jsonl and kernels/ like any other; a resumed run that already evaluated the
   same dispatcher takes its recorded result;
3. writes best.cu from the dispatcher only when it is correct (status ok) and its geometric
   mean speedup is above the best single kernel's, and joins it to the hall of fame; otherwise
   best.cu is the best single kernel.  best.cu's header says which it is.

The benchmark shapes are the run's: ``eval.shapes`` when given, else the set ``eval.benchmark``
(the task's default when empty); their labels match the verdicts' per-shape timings.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence

from ..dispatch import DispatchError, Route, assemble, choose_routes, variant_count
from ..report_lines import best_header
from ..tasks import Shape, TaskError
from ..types import Candidate, EvalResult, Status
from .population import Individual

if TYPE_CHECKING:
    from .loop import Evolution

log = logging.getLogger(__name__)

DISPATCH_OPERATOR = "dispatch"


def run_shapes(loop: "Evolution") -> tuple[Shape, ...]:
    """The benchmark shapes the run's verdicts time (``eval.shapes``, else ``eval.benchmark``)."""
    config, task = loop.config, loop.task
    if config.eval.shapes:
        return tuple(task.make_shape(dict(raw), where=f"eval.shapes #{i + 1}")
                     for i, raw in enumerate(config.eval.shapes))
    return task.benchmark(config.eval.benchmark or None)


def specialize(loop: "Evolution") -> Individual | None:
    """Assemble, evaluate and record the per-shape dispatcher, then write best.cu from the better
    of it and the best single kernel.  Returns the dispatcher when it was written as best.cu."""
    top = loop.best_individual()
    if top is None or len(loop.population.elites.labels) < 2:
        return None               # nothing correct, or one shape: one kernel serves it
    try:
        shapes = run_shapes(loop)
    except (KeyError, TaskError) as exc:
        log.warning("per-shape dispatch skipped: the run's benchmark shapes are unknown (%s)", exc)
        return None
    variants = _variants(loop)
    ids = {ind.source: ind.id for ind in variants}
    entries = [(ind.source, loop.results[ind.id]) for ind in variants]
    try:
        routes, general = choose_routes(shapes, entries)
        if not routes:
            log.info("per-shape dispatch: every shape's fastest variant is the best overall; nothing to assemble")
            return None
        source = assemble(loop.task, routes, general)
    except DispatchError as exc:
        log.warning("per-shape dispatch skipped: %s", exc)
        return None
    parents = tuple(dict.fromkeys([ids[general], *(ids[r.source] for r in routes)]))
    dispatch = Individual(loop.task.name, source, parents=parents, operator=DISPATCH_OPERATOR,
                          generation=max(loop.generation, 0), label=DISPATCH_OPERATOR)
    result = _evaluate(loop, dispatch, routes, ids)
    dispatch.fitness.values = result.fitness
    best = loop.results[top.id]
    wins = result.status is Status.OK and (result.geomean_speedup or 0.0) > (best.geomean_speedup or 0.0)
    if wins:
        loop.population.hof.update([dispatch])
        write_best(loop, dispatch, describe_routes(routes, ids, ids[general]))
        log.info("per-shape dispatch %s written as best.cu: %.3fx over %.3fx", dispatch.id,
                 result.geomean_speedup or 0.0, best.geomean_speedup or 0.0)
        return dispatch
    why = (f"{result.geomean_speedup or 0.0:.3f}x, not above {best.geomean_speedup or 0.0:.3f}x"
           if result.status is Status.OK else f"{result.status.value}: {result.summary}")
    write_best(loop, top, f"a single kernel: the per-shape dispatch {dispatch.id} was evaluated and not "
                          f"written ({why})")
    log.info("per-shape dispatch %s not better than the best single kernel (%s)", dispatch.id, why)
    return None


def _variants(loop: "Evolution") -> list[Individual]:
    """Candidate variants: the per-shape elites and the hall of fame, once each, with a recorded
    result (never an assembled kernel: choose_routes skips those), by id: ties go to the same
    variant whatever order they were found in, so a resumed run assembles the same dispatcher."""
    chosen: dict[str, Individual] = {}
    for ind in [*loop.population.elites.individuals, *loop.population.hof]:
        if ind.id in loop.results and not variant_count(ind.source):
            chosen.setdefault(ind.id, ind)
    return [chosen[key] for key in sorted(chosen)]


def _evaluate(loop: "Evolution", dispatch: Individual, routes: Sequence[Route], ids: dict[str, str]) -> EvalResult:
    """The dispatcher's verdict: recorded before (a resumed run), else from the backend, recorded."""
    known = loop.results.get(dispatch.id)
    if known is not None:
        return known
    candidate = dispatch.to_candidate()
    loop.backend.submit(candidate)
    result = _wait_for(loop, candidate)
    loop.results[dispatch.id] = result
    kernel = loop.store.write_kernel(dispatch.source)
    loop.store.append({"kind": "evaluated", "generation": dispatch.generation, "island": 0,
                       "candidate": dispatch.to_dict(with_source=False),
                       "kernel": str(kernel.relative_to(loop.store.root)), "result": result.to_dict(),
                       "routes": {route.shape.label: ids[route.source] for route in routes}})
    return result


def _wait_for(loop: "Evolution", candidate: Candidate) -> EvalResult:
    while True:
        for done, result in loop.backend.poll(1.0):
            if done.id == candidate.id:
                return result
            log.warning("result for an unknown candidate %s ignored", done.id)


def describe_routes(routes: Sequence[Route], ids: dict[str, str], general_id: str) -> str:
    """``per-shape dispatch: conv2_x -> a1b2..., conv5_x -> c3d4...; any other shape -> e5f6... (general)``."""
    routed = ", ".join(f"{route.shape.label} -> {ids[route.source]}" for route in routes)
    return f"per-shape dispatch: {routed}; any other shape -> {general_id} (general)"


def write_best(loop: "Evolution", top: Individual, note: str = "") -> None:
    """best.cu with its header: what it is (a single kernel, or a dispatcher and its routes)."""
    result = loop.results[top.id]
    if top.operator == DISPATCH_OPERATOR:
        what = note or (f"per-shape dispatch of {len(top.parents)} variants: " + ", ".join(top.parents))
        found = f"{what}; assembled after {loop.word} {top.generation} and evaluated as one candidate"
    else:
        found = f"found in {loop.word} {top.generation} by {top.operator}"
        if note:
            found = f"{note}; {found}"
    loop.store.write_best(top.source, best_header(loop.task.name, top.id, result, f"{found}; run {loop.store.root}"))
