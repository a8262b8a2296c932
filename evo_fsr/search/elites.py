"""Per-shape elites (issue 12, per-shape specialization): for every benchmark shape, the
correct candidates that ran fastest on it.

One knob setting cannot serve every shape: a variant built for one layer often loses on the
geometric mean over all of them, and the islands (ranked by that mean, in both modes) drop it.
``ShapeElites`` keeps, for each shape label, the ``size`` candidates with the best speedup on
that shape among every candidate with status ok (a flagged timing is not trusted), whatever
became of them on their island.  Two uses:

* parents (``Breeder``, ``selection.shape_elite_rate``, default 0.25): with that probability a
  child's first parent is a per-shape elite (a shape drawn uniformly, then one of its elites),
  so the search keeps improving each shape's specialist; only with two shapes or more (with
  one, its elite is just the best kernel, which the tournament already favours);
* the end of the run (specialize.py): each shape's best is routed to by one assembled kernel.

Why elites injected as parents rather than lexicase parent selection: lexicase picks
specialists among an island's *members*, but both replacement schemes (generational survivors
by tournament, steady ``replace_worst``) rank members by the geometric mean and drop those
specialists at the next replacement, so lexicase alone cannot keep them; an archive outside
the islands keeps each shape's best for the whole run, needs no per-shape figures on members,
and is exactly what the dispatcher is assembled from.

Measured with the synthetic evaluator (testing/synthetic.py: each shape prefers other knob
values), 8 seeds each, conv2d knob space, no LLM: the geometric mean over shapes of each
shape's best speedup (what the dispatcher gets) rose with the rate; the best single kernel
stayed the same at 0.25 (at 0.5 it fell once, 5.05 to 5.04, resnet50 pop 8):

    quick (2 shapes), pop 16, 6 generations:     rate 0 6.14, 0.25 6.53, 0.5 6.69
    quick, pop 16, 6 epochs (steady):            rate 0 6.26, 0.25 6.53, 0.5 6.82
    resnet50 (5 shapes), pop 32, 10 generations: rate 0 6.16, 0.25 6.37, 0.5 6.39
    resnet50, pop 8, 4 generations:              rate 0 5.91, 0.25 5.94, 0.5 5.97

The default, 0.25, takes most of that gain while three children in four still come from the
islands' own tournaments (real shapes may agree more than the synthetic ones do).

Ranking is by (speedup on the shape, then candidate id): the elites depend only on the set of
candidates offered, not on the order their results arrived in, so a resumed generational run
still breeds the same children.
"""
from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from ..dispatch import variant_count
from ..types import EvalResult, Status

if TYPE_CHECKING:
    from .population import Individual

log = logging.getLogger(__name__)


class ShapeElites:
    """For each benchmark shape label, the ``size`` fastest correct candidates on it."""

    def __init__(self, size: int = 1) -> None:
        if size < 1:
            raise ValueError("per-shape elites: size must be at least 1")
        self.size = size
        self._by_shape: dict[str, list[tuple[float, Individual]]] = {}

    def __len__(self) -> int:
        """Shapes with at least one elite."""
        return len(self._by_shape)

    @property
    def labels(self) -> list[str]:
        return sorted(self._by_shape)

    def on(self, label: str) -> list[tuple[float, Individual]]:
        """(speedup on the shape, individual), fastest first."""
        return list(self._by_shape.get(label, []))

    def best(self, label: str) -> Individual | None:
        entries = self._by_shape.get(label)
        return entries[0][1] if entries else None

    @property
    def individuals(self) -> list[Individual]:
        """Every elite once, by shape label then rank."""
        seen: dict[str, Individual] = {}
        for label in self.labels:
            for _, ind in self._by_shape[label]:
                seen.setdefault(ind.id, ind)
        return list(seen.values())

    def offer(self, ind: Individual, result: EvalResult) -> list[str]:
        """Consider a candidate on every shape it was timed on; returns the labels it became an
        elite of.  Only status ok counts: a wrong answer or a flagged timing is never an elite,
        nor is an assembled dispatch kernel (it is made of elites, not a variant of its own)."""
        if result.status is not Status.OK or variant_count(ind.source):
            return []
        joined = []
        for timing in result.timings:
            if timing.speedup > 0 and self._insert(timing.shape_label, timing.speedup, ind):
                joined.append(timing.shape_label)
        return joined

    def _insert(self, label: str, speedup: float, ind: Individual) -> bool:
        entries = [e for e in self._by_shape.get(label, []) if e[1].id != ind.id]
        entries.append((float(speedup), ind))
        entries.sort(key=lambda e: (-e[0], e[1].id))
        del entries[self.size:]
        self._by_shape[label] = entries
        return any(e[1] is ind for e in entries)

    def pick(self, rng: random.Random) -> Individual | None:
        """A shape drawn uniformly, then one of its elites (two draws from ``rng``); None when empty."""
        labels = self.labels
        if not labels:
            return None
        entries = self._by_shape[labels[rng.randrange(len(labels))]]
        return entries[rng.randrange(len(entries))][1]

    def rebuild(self, records: Iterable[Mapping[str, Any]], root: Path, last_generation: int) -> int:
        """From candidates.jsonl's evaluated records up to ``last_generation`` (a format-1
        snapshot, written before the per-shape elites); returns how many candidates were read."""
        from .population import Individual

        read = 0
        for rec in records:
            if rec.get("kind") != "evaluated" or rec.get("generation", last_generation + 1) > last_generation:
                continue
            try:
                result = EvalResult.from_dict(rec["result"])
                if result.status is not Status.OK:
                    continue
                source = (root / rec["kernel"]).read_text()
                self.offer(Individual.from_dict(dict(rec["candidate"], source=source)), result)
                read += 1
            except (OSError, KeyError, TypeError, ValueError) as exc:
                log.warning("per-shape elites: a recorded result is not used (%s)", exc)
        return read

    # -- snapshots ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {label: [{"speedup": speedup, "individual": ind.to_dict()} for speedup, ind in entries]
                for label, entries in sorted(self._by_shape.items())}

    def restore(self, data: Mapping[str, Any]) -> None:
        """The state of ``to_dict``; raises KeyError, TypeError or ValueError when malformed."""
        from .population import Individual      # population.py owns a ShapeElites: import late

        if not isinstance(data, Mapping):
            raise TypeError(f"per-shape elites must be an object, got {type(data).__name__}")
        restored: dict[str, list[tuple[float, Individual]]] = {}
        for label, entries in data.items():
            if not isinstance(entries, list):
                raise TypeError(f"per-shape elites of {label!r} must be a list")
            restored[str(label)] = [(float(e["speedup"]), Individual.from_dict(e["individual"])) for e in entries]
        self._by_shape = {}
        for label, entries in restored.items():
            for speedup, ind in entries:
                self._insert(label, speedup, ind)
