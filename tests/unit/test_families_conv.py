"""conv2d's implicit_gemm_v2 seed family (issue 12): knob space, constraints and nvcc.

CPU checks, no GPU: the family's knobs are integers with the default declared; its
``// constraint:`` lines parse and name only knobs, and each is mirrored by a
``static_assert(..., "knob constraint: TEXT")``; the default satisfies them and at least 70 % of
the combinations are valid (evo_fsr/knobs.py's KnobSpace, exactly); the default and two seeded
random valid combinations compile for sm_90 through evo_fsr/verdict/compile.py; a combination
that breaks a constraint, with the constraint lines removed so that the source reaches nvcc,
stops at that static_assert; and launch() keeps the contract nvcc cannot see (no allocation or
synchronization, every launch on ``stream``, errors returned).  The index math is emulated
against the reference in test_conv_igemm_v2_emulation.py; correctness on a GPU is the GPU
suite's job.
"""
from __future__ import annotations

import random
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from evo_fsr.formulas import Formula
from evo_fsr.knobs import KnobSpace, parse_constraints, parse_knobs, set_knobs
from evo_fsr.tasks import get_task
from evo_fsr.verdict.compile import compile_source, nvcc_path

TASK = "conv2d"
FAMILY = "implicit_gemm_v2"
MIN_VALID_FRACTION = 0.7
RANDOM_COMBINATIONS = 2
SEED = 12

_CONSTRAINT_RE = re.compile(r"^[ \t]*//[ \t]*constraint:[ \t]*(?P<formula>[^\n]*?)[ \t]*$", re.M)


def _source() -> str:
    seeds = get_task(TASK).seeds()
    assert FAMILY in seeds, f"tasks/{TASK}/seeds/{FAMILY}.cu is missing"
    return seeds[FAMILY]


def _defaults(source: str) -> dict[str, str]:
    return {name: knob.value for name, knob in parse_knobs(source).items()}


def _compile(source: str):
    return compile_source(source, get_task(TASK).header(), "sm_90", cache_dir=None)


def test_knobs_constraints_and_valid_fraction() -> None:
    source = _source()
    declared = parse_knobs(source)
    assert {"BK", "STAGES", "SPLIT_K", "TM", "TN"} <= set(declared)
    for knob in declared.values():
        assert knob.value in knob.choices, f"default {knob.name}={knob.value} not declared"
        assert all(re.fullmatch(r"\d+", choice) for choice in knob.choices), knob
    assert int(declared["TM"].value) * int(declared["TN"].value) >= 64, "the default is an 8x8 register tile"
    assert {int(v) for v in declared["STAGES"].choices} == {2, 3, 4}
    constraints = [Formula(m["formula"]) for m in _CONSTRAINT_RE.finditer(source)]
    assert constraints and [c.text for c in parse_constraints(source)] == [c.text for c in constraints]
    for constraint in constraints:
        assert constraint.names <= set(declared), f"{constraint.text} names something other than a knob"
        assert f'"knob constraint: {constraint.text}"' in source, f"no static_assert mirrors {constraint.text}"
    space = KnobSpace.of(source)
    assert space.valid(_defaults(source))
    fraction = space.valid_fraction()
    total = 1
    for knob in declared.values():
        total *= len(knob.choices)
    valid = sum(1 for _ in space.all_valid(limit=total))
    assert fraction == pytest.approx(valid / total)
    assert MIN_VALID_FRACTION <= fraction < 1.0, f"{valid} of {total} combinations valid"


def _sample(source: str) -> list[dict[str, str]]:
    default = _defaults(source)
    space = KnobSpace.of(source)
    others = [v for v in space.all_valid() if v != default]
    return [default] + random.Random(SEED).sample(others, RANDOM_COMBINATIONS)


def _violating(source: str) -> list[tuple[str, dict[str, str]]]:
    """For each constraint, the first combination (declaration order) that breaks it alone."""
    constraints = parse_constraints(source)
    space = KnobSpace(knobs=KnobSpace.of(source).knobs, segments=KnobSpace.of(source).segments)
    picked = []
    for constraint in constraints:
        for values in space.all_valid():        # no constraints on this space: every combination
            env = {k: int(v) for k, v in values.items()}
            broken = [c.text for c in constraints if not c(env)]
            if broken == [constraint.text]:
                picked.append((constraint.text, values))
                break
        else:
            pytest.fail(f"no combination breaks {constraint.text} alone")
    return picked


def test_compiles_and_static_asserts_match_constraints() -> None:
    if nvcc_path() is None:
        pytest.skip("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    source = _source()
    good = [(values, set_knobs(source, values)) for values in _sample(source)]
    bad = [(text, values, _CONSTRAINT_RE.sub("// (constraint removed for this test)", set_knobs(source, values)))
           for text, values in _violating(source)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        good_results = list(pool.map(lambda item: _compile(item[1]), good))
        bad_results = list(pool.map(lambda item: _compile(item[2]), bad))
    for (values, _), result in zip(good, good_results):
        assert result.ok, f"{FAMILY} {values} does not compile:\n{result.log}"
        assert result.binary
    for (text, values, _), result in zip(bad, bad_results):
        assert not result.ok, f"{FAMILY} {values} breaks `{text}` yet compiles: no static_assert"
        assert "static assertion failed" in result.log and f"knob constraint: {text}" in result.log, result.log


def test_refused_before_nvcc_when_a_constraint_breaks() -> None:
    source = _source()
    text, values = _violating(source)[0]
    result = _compile(set_knobs(source, values))
    assert not result.ok and "knob constraint" in result.log and result.seconds == 0.0


def test_launch_contract() -> None:
    """What nvcc cannot see: no allocation, everything on the caller's stream, errors returned."""
    code = re.sub(r"//[^\n]*", "", _source())
    for forbidden in ("cudaMalloc", "cudaFree", "cudaDeviceSynchronize", "cudaStreamSynchronize",
                      "cudaStreamCreate", "cudaMemcpy", "printf"):
        assert forbidden not in code, f"{FAMILY} uses {forbidden}"
    launches = re.findall(r"<<<([^<>]*)>>>", code)
    assert len(launches) >= 2, "the GEMM kernel and the split-K reduction"
    for config in launches:
        assert re.search(r",\s*stream\s*$", config), f"launch <<<{config}>>> not on `stream`"
    assert "return (int)cudaGetLastError();" in code
    assert 'extern "C" int launch(' in code
    # The loads (load_tile) and the FFMA loop divide by compile-time tile constants only: no
    # `/` or `%` by a runtime extent (the old seed's gather divided by Q, P, R*S, S per element).
    body = code[code.index("auto load_tile"):code.index("cp_async_wait<0>();")]
    runtime = re.findall(r"[/%]\s*\(?\s*(?:C|H|W|K|R|S|P|Q|PQ|RS|HW|KD|M|stride|pad)\b", body)
    assert not runtime, f"division by a runtime extent in the main loop: {runtime}"
