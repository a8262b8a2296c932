"""Knobs: tunable ``#define``s a kernel declares, in the spirit of Triton's autotune configs.

    #define TILE_K 16   // knob: 8 16 32

A knob is a ``#define NAME VALUE`` whose trailing comment lists the allowed values.  Knob
operators (evo_fsr/operators/knobs.py) rewrite VALUE within that set; no LLM is needed.

A source's *knob space* (``KnobSpace``) is every assignment of allowed values to its knobs;
``KnobSpace.nearest`` walks it outward from the current values (Hamming distance 1, 2, ...),
examining at most ``ENUMERATION_LIMIT`` assignments so that a huge space cannot stall the caller.

A source may declare *knob constraints*, one per comment line, as formulas (evo_fsr/formulas.py)
over its knob values; every one must hold (be non-zero) for an assignment to be valid:

    // constraint: (BLOCK_M / THREAD_M) * (BLOCK_N / THREAD_N) <= 1024

``KnobSpace`` enumerates, samples and walks only valid assignments, and ``constraint_violation``
says why a source breaks one, so that an invalid combination never reaches nvcc.
"""
from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from itertools import combinations, product
from math import prod
from typing import Iterator, Mapping

from .formulas import Formula, FormulaError
from .types import source_id

#: At most this many assignments are enumerated in distance order; past that, random ones.
ENUMERATION_LIMIT = 20_000

_KNOB_RE = re.compile(
    r"^(?P<indent>[ \t]*)#define[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]+(?P<value>\S+)"
    r"(?P<gap>[ \t]*)//[ \t]*knob:[ \t]*(?P<choices>[^\n]*?)[ \t]*$",
    re.M,
)

CONSTRAINT_RE = re.compile(r"^[ \t]*//[ \t]*constraint:[ \t]*(?P<formula>[^\n]*?)[ \t]*$", re.M)


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


def parse_constraints(source: str) -> tuple[Formula, ...]:
    """The source's ``// constraint: FORMULA`` lines; one that does not parse raises FormulaError."""
    return tuple(Formula(match["formula"]) for match in CONSTRAINT_RE.finditer(source))


def _number(value: str) -> int | float | None:
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return None


def constraint_violation(source: str) -> str | None:
    """Why the source's knob values break one of its constraints (the first), or None.  Only
    constraints that can be checked count here, before nvcc: one that does not parse, or names
    something other than a numeric knob (an LLM's edit dropped the knob and kept the line), is
    left to the compiler and the source's own static_asserts rather than refusing the kernel.
    (KnobSpace stays strict: it enumerates nothing it cannot show valid.)"""
    try:
        constraints = parse_constraints(source)
    except FormulaError:
        return None
    if not constraints:
        return None
    env = {name: _number(knob.value) for name, knob in parse_knobs(source).items()}
    numbers = {k for k, v in env.items() if v is not None}
    return _violation(tuple(c for c in constraints if set(c.names) <= numbers), env)


def _violation(constraints: tuple[Formula, ...], env: Mapping[str, int | float | None]) -> str | None:
    numbers = {k: v for k, v in env.items() if v is not None}
    for constraint in constraints:
        try:
            if not constraint(numbers):
                values = ", ".join(f"{n}={numbers[n]}" for n in sorted(constraint.names))
                return f"knob constraint {constraint.text} does not hold ({values})"
        except (FormulaError, ZeroDivisionError, ValueError, OverflowError) as exc:
            return f"knob constraint {constraint.text} cannot be checked: {exc}"
    return None


@dataclass(frozen=True)
class KnobSpace:
    """A source as a template over its knob values: any assignment renders without re-parsing.
    Only assignments satisfying ``constraints`` count as members (``valid``)."""

    knobs: tuple[Knob, ...]
    segments: tuple[str, ...]          # the source around each knob's value (len(knobs) + 1 pieces)
    constraints: tuple[Formula, ...] = ()

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
        try:
            constraints = parse_constraints(source)
        except FormulaError:
            constraints = (Formula("0"),)       # unparsable: no assignment can be shown valid
        return cls(knobs=tuple(knobs[name] for name in order), segments=segments, constraints=constraints)

    def violation(self, values: Mapping[str, str]) -> str | None:
        """Why the assignment (``values`` over the current ones) breaks a constraint, or None."""
        if not self.constraints:
            return None
        env = {knob.name: _number(value) for knob, value in zip(self.knobs, self.assignment(values))}
        return _violation(self.constraints, env)

    def valid(self, values: Mapping[str, str]) -> bool:
        return self.violation(values) is None

    def all_valid(self, limit: int = ENUMERATION_LIMIT) -> Iterator[dict[str, str]]:
        """Every valid full assignment (each knob's declared values, in source order); raises
        ValueError when the space holds more than ``limit`` assignments."""
        total = prod(len(knob.choices) for knob in self.knobs)
        if total > limit:
            raise ValueError(f"knob space of {total} assignments is larger than the limit {limit}")
        names = [knob.name for knob in self.knobs]
        for values in product(*(knob.choices for knob in self.knobs)):
            assignment = dict(zip(names, values))
            if self.valid(assignment):
                yield assignment

    def sample_valid(self, rng: random.Random, count: int, max_draws: int | None = None) -> list[dict[str, str]]:
        """Up to ``count`` valid full assignments drawn uniformly (with repetition) from the declared
        values, by rejection; at most ``max_draws`` draws (default 100 x count)."""
        out: list[dict[str, str]] = []
        for _ in range(max_draws if max_draws is not None else 100 * count):
            if len(out) >= count:
                break
            assignment = {knob.name: rng.choice(knob.choices) for knob in self.knobs}
            if self.valid(assignment):
                out.append(assignment)
        return out

    def valid_fraction(self, rng: random.Random | None = None, sample: int = ENUMERATION_LIMIT) -> float:
        """Share of the declared assignments that are valid: exact when the space has at most
        ``sample`` assignments, else estimated from ``sample`` uniform draws."""
        total = prod(len(knob.choices) for knob in self.knobs)
        if total == 0:
            return 0.0
        if total <= sample:
            return sum(1 for _ in self.all_valid(limit=total)) / total
        rng = rng or random.Random(0)
        draws = [{knob.name: rng.choice(knob.choices) for knob in self.knobs} for _ in range(sample)]
        return sum(self.valid(d) for d in draws) / sample

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
        declared += "|" + ";".join(c.text for c in self.constraints)
        return hashlib.sha256(f"{skeleton}|{declared}".encode()).hexdigest()[:16]

    def nearest(self, rng: random.Random, limit: int = ENUMERATION_LIMIT) -> Iterator[dict[str, str]]:
        """Valid assignments other than the current one, by Hamming distance from it (1 first),
        those at one distance in ``rng`` order; each yields only the knobs it changes.  At most
        ``limit`` are considered (invalid ones are skipped, not yielded): once a whole distance
        no longer fits, the rest of the budget goes to random assignments at that distance or
        more (possibly repeated)."""
        for values in self._nearest_any(rng, limit):
            if self.valid(values):
                yield values

    def _nearest_any(self, rng: random.Random, limit: int) -> Iterator[dict[str, str]]:
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


def describe_space(source: str) -> str | None:
    """``5 knobs, 972 combinations, 89.5% valid under 3 constraints`` (None without knobs)."""
    space = KnobSpace.of(source)
    if not space.knobs:
        return None
    total = prod(len(knob.choices) for knob in space.knobs)
    exact = total <= ENUMERATION_LIMIT
    share = f"{100 * space.valid_fraction():.1f}% valid" + ("" if exact else " (sampled)")
    return (f"{len(space.knobs)} knobs, {total} combinations, {share} under "
            f"{len(space.constraints)} constraint{'s' if len(space.constraints) != 1 else ''}")


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
