"""What the seed-family CPU tests (tests/unit/test_famil*.py) share: a family's source, its knob
space, its declared constraints and the static_assert lines that mirror them in nvcc."""
from __future__ import annotations

import itertools
import re

from evo_fsr.formulas import Formula
from evo_fsr.knobs import CONSTRAINT_RE, parse_constraints, parse_knobs
from evo_fsr.tasks import get_task

#: ``static_assert(EXPR, "knob constraint: TEXT");`` - the nvcc side of a declared constraint.
KNOB_ASSERT_RE = re.compile(r'static_assert\((?P<expr>[^;]*?),\s*"knob constraint: (?P<text>[^"]*)"\)\s*;')


def source(task: str, seed: str) -> str:
    seeds = get_task(task).seeds()
    assert seed in seeds, f"tasks/{task}/seeds/{seed}.cu is missing"
    return seeds[seed]


def constraints(src: str) -> list[Formula]:
    return list(parse_constraints(src))


def defaults(src: str) -> dict[str, str]:
    return {name: knob.value for name, knob in parse_knobs(src).items()}


def combinations(src: str) -> list[dict[str, str]]:
    """Every assignment of the declared knobs, valid or not."""
    declared = parse_knobs(src)
    names = list(declared)
    return [dict(zip(names, combo)) for combo in itertools.product(*(declared[n].choices for n in names))]


def ints(values: dict[str, str]) -> dict[str, int]:
    return {name: int(value) for name, value in values.items()}


def broken(rules: list[Formula] | tuple[Formula, ...], values: dict[str, str]) -> list[str]:
    """The constraints ``values`` breaks, by their text."""
    env = ints(values)
    return [c.text for c in rules if not c(env)]


def valid(rules: list[Formula] | tuple[Formula, ...], values: dict[str, str]) -> bool:
    return not broken(rules, values)


def without_constraints(src: str, marker: str = "") -> str:
    """The source with its ``// constraint:`` lines replaced, so that nvcc (not the pre-compile
    constraint check) is what rejects an invalid combination."""
    return CONSTRAINT_RE.sub(marker, src)


def c_to_formula(expr: str) -> Formula:
    """A static_assert's C expression in formulas.py syntax: integer / is //, (1 << X) is 2 ** X."""
    expr = re.sub(r"\(1 << (\w+)\)", r"2 ** \1", expr)
    return Formula(re.sub(r"(?<!/)/(?!/)", "//", expr))


def assert_static_asserts_mirror(src: str) -> None:
    """Each declared constraint has a static_assert whose expression agrees with it on every
    combination of the knobs, and no static_assert claims a constraint that is not declared."""
    asserts = {m["text"].strip(): c_to_formula(m["expr"]) for m in KNOB_ASSERT_RE.finditer(src)}
    declared = {c.text: c for c in parse_constraints(src)}
    assert set(asserts) == set(declared)
    for values in combinations(src):
        env = ints(values)
        for text, constraint in declared.items():
            assert bool(asserts[text](env)) == bool(constraint(env)), (text, values)


FORBIDDEN_IN_LAUNCH = ("cudaMalloc", "cudaFree", "cudaDeviceSynchronize", "cudaStreamSynchronize",
                       "cudaStreamCreate", "cudaMemset(", "cudaMemcpy(", "printf")


def launch_code(src: str, who: str, also_forbidden: tuple[str, ...] = ()) -> str:
    """The source without comments, after checking what nvcc cannot: no allocation or
    synchronization, and every ``<<<...>>>`` launch on the caller's ``stream``."""
    code = re.sub(r"//[^\n]*", "", src)
    for forbidden in FORBIDDEN_IN_LAUNCH + also_forbidden:
        assert forbidden not in code, f"{who} uses {forbidden}"
    launches = re.findall(r"<<<([^<>]*)>>>", code)
    for config in launches:
        assert re.search(r",\s*stream\s*$", config), f"{who}: launch <<<{config}>>> not on `stream`"
    return code
