"""Knob constraints (issue 12): declared in seed sources, checked with formulas.py, so that an
invalid combination is never produced by the knob operators nor sent to nvcc."""
from __future__ import annotations

import ast
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evo_fsr.formulas import Formula
from evo_fsr.knobs import KnobSpace, constraint_violation, describe_space, parse_constraints, set_knobs
from evo_fsr.operators.base import Offspring, Rejected, VariationContext
from evo_fsr.operators.knobs import KnobCrossover, KnobMutation, nearest_unseen_variant, random_knob_variant
from evo_fsr.search.population import Individual
from evo_fsr.tasks import discover, get_task
from evo_fsr.verdict.compile import compile_source

TOY = """#define A 2   // knob: 1 2 4 8
#define B 4   // knob: 1 2 4 8
// constraint: A * B <= 8
// constraint: A <= B
"""
#: Families whose constraints are checked against nvcc (task, seed).
FAMILIES = [(task, seed) for task in discover() for seed, source in get_task(task).seeds().items()
            if parse_constraints(source)]
MIN_VALID_FRACTION = 0.7          # issue 12: at least 70 % of a family's combinations valid
COMPILED_PER_FAMILY = 4          # at least; the extremes of each constraint come first


def _extreme_sample(space: KnobSpace, rng: random.Random, count: int) -> list[dict[str, str]]:
    """Valid assignments at the extremes of every quantity a constraint compares (the least and
    the most threads, shared memory, ...), where a constraint missing or too loose compared with
    nvcc's static_asserts shows first; then random valid ones, up to ``count`` at least."""
    try:
        valid = list(space.all_valid())
    except ValueError:                                     # a space too large to enumerate
        valid = space.sample_valid(rng, 5000)
    env = lambda v: {k: int(x) for k, x in v.items()}  # noqa: E731
    picked: list[dict[str, str]] = []
    for constraint in space.constraints:
        tree = ast.parse(constraint.text, mode="eval").body
        sides = [tree.left, *tree.comparators] if isinstance(tree, ast.Compare) else [tree]
        for side in sides:
            quantity = Formula(ast.unparse(side))
            if not quantity.names:
                continue
            for pick in (min, max):
                best = pick(valid, key=lambda v: quantity(env(v)))
                if best not in picked:
                    picked.append(best)
    return picked + space.sample_valid(rng, max(0, count - len(picked)))


def _valid_by_hand(values: dict[str, str]) -> bool:
    a, b = int(values["A"]), int(values["B"])
    return a * b <= 8 and a <= b


def test_constraints_parse_and_filter_the_space() -> None:
    space = KnobSpace.of(TOY)
    assert [c.text for c in space.constraints] == ["A * B <= 8", "A <= B"]
    every = [dict(zip("AB", (a, b))) for a in "1248" for b in "1248"]
    expected = [v for v in every if _valid_by_hand(v)]
    assert list(space.all_valid()) == expected
    assert space.valid_fraction() == pytest.approx(len(expected) / 16)
    assert constraint_violation(TOY) is None                          # the current values are valid
    assert "A * B <= 8" in constraint_violation(set_knobs(TOY, {"A": "8", "B": "8"}))


def test_nearest_and_samples_yield_only_valid_assignments() -> None:
    space = KnobSpace.of(TOY)
    rng = random.Random(1)
    walked = list(space.nearest(rng))
    assert walked and all(_valid_by_hand({**{"A": "2", "B": "4"}, **v}) for v in walked)
    assert len(walked) == sum(1 for v in space.all_valid()) - 1       # every valid one but the current
    sampled = space.sample_valid(rng, 50)
    assert len(sampled) == 50 and all(_valid_by_hand(v) for v in sampled)


def test_operators_never_produce_an_invalid_child() -> None:
    rng = random.Random(3)
    context = VariationContext(task_name="toy", task_description="toy", knob_mutation_rate=0.9)
    parent = Individual("toy", TOY)
    other = Individual("toy", set_knobs(TOY, {"A": "1", "B": "8"}))
    children = [KnobMutation().vary([parent], context, rng) for _ in range(200)]
    children += [KnobCrossover().vary([parent, other], context, rng) for _ in range(200)]
    children += [Offspring(v, "random", ()) for v in (random_knob_variant(TOY, rng) for _ in range(200)) if v]
    made = [c for c in children if isinstance(c, Offspring)]
    assert len(made) > 300
    assert all(constraint_violation(c.source) is None for c in made)
    assert all("constraint" in c.reason for c in children if isinstance(c, Rejected))
    found = nearest_unseen_variant(TOY, lambda _id: False, rng)
    assert found.source is not None and constraint_violation(found.source) is None


def test_an_invalid_combination_never_reaches_nvcc(tmp_path: Path) -> None:
    source = get_task("matmul").seeds()["tiled"]
    bad = set_knobs(source, {"BLOCK_M": "32", "THREAD_M": "8", "BLOCK_N": "32", "THREAD_N": "8"})
    result = compile_source(bad, get_task("matmul").header(), cache_dir=tmp_path)
    assert not result.ok and result.seconds == 0.0 and "knob constraint" in result.log


def test_an_unparsable_or_stale_constraint_is_left_to_the_compiler_but_enumerates_nothing() -> None:
    """An LLM's edit may drop a knob and keep its constraint line: the kernel is not refused for
    that (nvcc and its static_asserts judge it), but the tuner cannot show any assignment valid."""
    broken = TOY + "// constraint: A <<< B\n"
    stale = TOY + "// constraint: GONE_KNOB <= 4\n"
    assert constraint_violation(broken) is None and constraint_violation(stale) is None
    assert list(KnobSpace.of(broken).all_valid()) == []


@pytest.mark.parametrize("task_name, seed", FAMILIES)
def test_family_constraints_match_nvcc(task_name: str, seed: str, nvcc_available: bool, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A sample of a family's valid combinations all compile for sm_90 (nvcc's static_asserts
    agree), the seed's own values are valid, and the valid fraction meets issue 12's bar."""
    task = get_task(task_name)
    source = task.seeds()[seed]
    space = KnobSpace.of(source)
    assert constraint_violation(source) is None
    for constraint in space.constraints:
        assert constraint.names <= {k.name for k in space.knobs}, constraint.text
    fraction = space.valid_fraction()
    with capsys.disabled():
        print(f"\n{task_name}/{seed}: {describe_space(source)}")
    assert fraction >= MIN_VALID_FRACTION
    if not nvcc_available:
        pytest.skip("nvcc not found")
    sample = _extreme_sample(space, random.Random(7), COMPILED_PER_FAMILY)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda v: compile_source(space.render(v), task.header(), "sm_90",
                                                         cache_dir=tmp_path), sample))
    failed = [(v, r.log[:300]) for v, r in zip(sample, results) if not r.ok]
    assert not failed, failed


def test_families_are_discovered() -> None:
    assert ("conv2d", "implicit_gemm") in FAMILIES and ("matmul", "tiled") in FAMILIES
