"""Task input properties (issue 11): distributions, validation plan, determinism, timed inputs.

``task.yaml`` keys parsed here (tasks/README.md documents them):

- ``distributions``: the input distributions the task's description allows, each a ``case``
  that ``reference.py``'s ``make_inputs(dims, rng, case)`` implements; the first is the one
  timed (benchmark) inputs are drawn from.  Validation draws from every one of them
  (:func:`validation_plan`).
- ``determinism``: ``bitwise`` (a re-run on the same inputs must give identical bits) or
  ``tolerance`` (within the task tolerance of the first run: float atomics, racy choice among
  tied indices).  Default: bitwise for ``exact`` precision, tolerance otherwise.
- ``timed_inputs``: ``mix`` (every buffer's elements are exchangeable under the benchmark
  distribution, so an element-wise random mix of two base sets is a valid fresh input),
  ``mix_rows`` (the buffers are linked row by row along a shared leading dimension, e.g. y built
  from X's rows or a from b: whole rows are mixed, with one mask and one rotation for every
  buffer) or ``regenerate`` (structured inputs: every timed call gets ``make_inputs`` with a
  fresh seed; costly on large shapes).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

DETERMINISM = ("bitwise", "tolerance")
TIMED_INPUTS = ("mix", "mix_rows", "regenerate")

#: A shape with fewer input elements than this only hosts a distribution when no larger one can
#: (a distribution on one element says nothing).
MIN_HOST_ELEMENTS = 8

S = TypeVar("S")


def parse_input_keys(file: Path, raw: dict[str, Any], precision: str,
                     declared_cases: Sequence[tuple[str, str]],
                     error: Callable[[Path, str, str], Exception]) -> tuple[tuple[str, ...], str, str]:
    """``(distributions, determinism, timed_inputs)`` from a task.yaml mapping.

    ``declared_cases`` lists ``(yaml key, case)`` of every shape that names a ``case:``; each
    must be one of the distributions.  Without ``distributions:`` the list is ``random``
    followed by the declared cases (for task folders older than the key).
    """
    if "distributions" in raw:
        dists = raw["distributions"]
        if not isinstance(dists, list) or not dists:
            raise error(file, "distributions", "must be a non-empty list of case names")
        for i, name in enumerate(dists):
            if not isinstance(name, str) or not name.isidentifier():
                raise error(file, f"distributions[{i}]", f"{name!r} is not a case name (an identifier)")
        if len(set(dists)) != len(dists):
            dup = next(d for d in dists if dists.count(d) > 1)
            raise error(file, "distributions", f"{dup!r} is listed twice")
        distributions = tuple(dists)
        for key, case in declared_cases:
            if case not in distributions:
                raise error(file, f"{key}.case", f"{case!r} is not one of the distributions "
                                                 f"({', '.join(distributions)})")
    else:
        distributions = tuple(dict.fromkeys(["random", *(case for _, case in declared_cases)]))
    determinism = raw.get("determinism", "bitwise" if precision == "exact" else "tolerance")
    if determinism not in DETERMINISM:
        raise error(file, "determinism", f"{determinism!r} is not one of {', '.join(DETERMINISM)}")
    timed = raw.get("timed_inputs", "mix")
    if timed not in TIMED_INPUTS:
        raise error(file, "timed_inputs", f"{timed!r} is not one of {', '.join(TIMED_INPUTS)}")
    return distributions, str(determinism), str(timed)


def validation_plan(shapes: Sequence[S], declared: Sequence[str | None], distributions: Sequence[str],
                    odd: Sequence[bool], elements: Sequence[int], seeds: int) -> tuple[tuple[S, str], ...]:
    """``(shape, case)`` pairs, in validation order, every shape at least ``seeds`` times.

    A shape with a declared case runs it ``seeds`` times.  The other shapes host the
    distributions: every distribution runs on at least two shapes, at least one of them
    odd-sized (where the task has such shapes), spread so that each shape hosts as few as
    possible; a shape hosting more distributions than ``seeds`` runs once per distribution.
    Remaining runs cycle through the distributions, the benchmark one first.  Deterministic.
    """
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    if not distributions:
        raise ValueError("a task needs at least one distribution")
    n = len(shapes)
    free = [i for i in range(n) if declared[i] is None]
    hosts_of: dict[int, list[str]] = {i: [] for i in free}
    big = [i for i in free if elements[i] >= MIN_HOST_ELEMENTS]
    candidates = big if len(big) >= 2 else free
    covered: dict[str, list[int]] = {d: [i for i in range(n) if declared[i] == d] for d in distributions}
    cursor = 0
    for dist in distributions:
        while True:
            on = covered[dist]
            need_odd = not any(odd[i] for i in on) and any(odd[i] for i in candidates if i not in on)
            if len(on) >= 2 and not need_odd:
                break
            pool = [i for i in candidates if i not in on and (odd[i] or not need_odd)]
            if not pool:
                break
            # fewest distributions hosted first, then even-sized ones (odd-sized shapes are kept
            # for distributions that still need one), then round-robin from the cursor
            pick = min(pool, key=lambda i: (len(hosts_of[i]), odd[i] and not need_odd,
                                            (candidates.index(i) - cursor) % len(candidates)))
            hosts_of[pick].append(dist)
            on.append(pick)
            cursor = candidates.index(pick) + 1
    plan: list[tuple[S, str]] = []
    cycle = 0
    for i, shape in enumerate(shapes):
        if declared[i] is not None:
            plan.extend((shape, declared[i]) for _ in range(seeds))
            continue
        cases = list(hosts_of[i])
        while len(cases) < seeds:
            unused = [d for d in distributions if d not in cases] or list(distributions)
            cases.append(unused[cycle % len(unused)])
            cycle += 1
        plan.extend((shape, case) for case in cases)
    return tuple(plan)
