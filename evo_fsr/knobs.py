"""Knobs: tunable ``#define``s a kernel declares, in the spirit of Triton's autotune configs.

    #define TILE_K 16   // knob: 8 16 32

A knob is a ``#define NAME VALUE`` whose trailing comment lists the allowed values.  Knob
operators (evo_fsr/operators/knobs.py) rewrite VALUE within that set; no LLM is needed.

A source's *knob space* (``KnobSpace``) is every assignment of allowed values to its knobs;
``KnobSpace.nearest`` walks it outward from the current values (Hamming distance 1, 2, ...),
examining at most ``ENUMERATION_LIMIT`` assignments so that a huge space cannot stall the caller.
"""
from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from itertools import combinations, product
from math import prod
from typing import Iterator, Mapping

from .types import source_id

#: At most this many assignments are enumerated in distance order; past that, random ones.
ENUMERATION_LIMIT = 20_000

_KNOB_RE = re.compile(
    r"^(?P<indent>[ \t]*)#define[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]+(?P<value>\S+)"
    r"(?P<gap>[ \t]*)//[ \t]*knob:[ \t]*(?P<choices>[^\n]*?)[ \t]*$",
    re.M,
)


@dataclass(frozen=True)
class Knob:
    name: str
    value: str
    choices: tuple[str, ...]


def parse_knobs(source: str) -> dict[str, Knob]:
    """All knobs of a source, by name, in order of appearance (first definition wins)."""
    knobs: dict[str, Knob] = {}
    for match in _KNOB_RE.finditer(source):
        name = match["name"]
        if name in knobs:
            continue
        choices = tuple(match["choices"].split())
        if choices:
            knobs[name] = Knob(name=name, value=match["value"], choices=choices)
    return knobs


def set_knobs(source: str, values: dict[str, str]) -> str:
    """Source with the given knobs set; unknown names or values outside a knob's set raise."""
    knobs = parse_knobs(source)
    for name, value in values.items():
        if name not in knobs:
            raise KeyError(f"no knob named {name!r}")
        if str(value) not in knobs[name].choices:
            raise ValueError(f"{value!r} is not an allowed value of knob {name} {knobs[name].choices}")

    done: set[str] = set()

    def _replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in values or name in done:
            return match[0]
        done.add(name)
        return (f"{match['indent']}#define {name} {values[name]}{match['gap'] or ' '}"
                f"// knob: {match['choices']}")

    return _KNOB_RE.sub(_replace, source)


@dataclass(frozen=True)
class KnobSpace:
    """A source as a template over its knob values: any assignment renders without re-parsing."""

    knobs: tuple[Knob, ...]
    segments: tuple[str, ...]          # the source around each knob's value (len(knobs) + 1 pieces)

    @classmethod
    def of(cls, source: str) -> "KnobSpace":
        spans: dict[str, tuple[int, int]] = {}
        for match in _KNOB_RE.finditer(source):
            if match["name"] not in spans and match["choices"].split():
                spans[match["name"]] = match.span("value")
        knobs = parse_knobs(source)
        order = sorted(spans, key=lambda name: spans[name][0])
        cuts = [0] + [i for name in order for i in spans[name]] + [len(source)]
        segments = tuple(source[cuts[i]:cuts[i + 1]] for i in range(0, len(cuts), 2))
        return cls(knobs=tuple(knobs[name] for name in order), segments=segments)

    @property
    def size(self) -> int:
        """Assignments in the space, the current one included (a current value outside the
        declared set counts as one more value of its knob)."""
        return prod(len(_alternatives(knob)) + 1 for knob in self.knobs)

    def render(self, values: Mapping[str, str]) -> str:
        """The source with ``values`` (by knob name) in place of the current ones."""
        parts = [self.segments[0]]
        for knob, after in zip(self.knobs, self.segments[1:]):
            parts += [values.get(knob.name, knob.value), after]
        return "".join(parts)

    def assignment(self, values: Mapping[str, str]) -> tuple[str, ...]:
        """Every knob's value, in source order, once ``values`` are set."""
        return tuple(values.get(knob.name, knob.value) for knob in self.knobs)

    def key(self) -> str:
        """Identity of the space: sources that differ only in (declared) knob values share it,
        and an assignment gives them the same candidate id."""
        skeleton = source_id(self.render({k.name: k.choices[0] for k in self.knobs if k.value in k.choices}))
        declared = ";".join(f"{knob.name}:{' '.join(knob.choices)}" for knob in self.knobs)
        return hashlib.sha256(f"{skeleton}|{declared}".encode()).hexdigest()[:16]

    def nearest(self, rng: random.Random, limit: int = ENUMERATION_LIMIT) -> Iterator[dict[str, str]]:
        """Assignments other than the current one, by Hamming distance from it (1 first), those
        at one distance in ``rng`` order; each yields only the knobs it changes.  At most
        ``limit`` are yielded: once a whole distance no longer fits, the rest of the budget goes
        to random assignments at that distance or more (possibly repeated)."""
        alternatives = {knob.name: _alternatives(knob) for knob in self.knobs}
        names = [name for name, alts in alternatives.items() if alts]
        sizes = _distance_sizes([len(alternatives[name]) for name in names])
        budget = limit
        for distance in range(1, len(names) + 1):
            if sizes[distance] > budget:
                yield from _sampled(names, alternatives, distance, budget, rng)
                return
            level = [dict(zip(chosen, values)) for chosen in combinations(names, distance)
                     for values in product(*(alternatives[name] for name in chosen))]
            rng.shuffle(level)
            yield from level
            budget -= len(level)


def _alternatives(knob: Knob) -> list[str]:
    return [choice for choice in knob.choices if choice != knob.value]


def _distance_sizes(counts: list[int]) -> list[int]:
    """Assignments at each Hamming distance 0..len(counts), given each knob's number of other
    values (elementary symmetric polynomials: no enumeration)."""
    sizes = [1] + [0] * len(counts)
    for count in counts:
        for distance in range(len(counts), 0, -1):
            sizes[distance] += sizes[distance - 1] * count
    return sizes


def _sampled(names: list[str], alternatives: Mapping[str, list[str]], distance: int, count: int,
             rng: random.Random) -> Iterator[dict[str, str]]:
    for _ in range(count):
        chosen = rng.sample(names, rng.randint(distance, len(names)))
        yield {name: rng.choice(alternatives[name]) for name in chosen}
