"""Seed families of issue 12, part c: matmul/simt_pipelined, matmul/simt_regstage and attention/flash_fp32.

For each family: integer knobs with the default among the declared values; ``// constraint:``
lines that parse and name only knobs; the default valid and at least 70 % of the combinations
valid (evo_fsr/knobs.py KnobSpace); the default and two seeded random valid combinations compile
for sm_90 through compile.py, the default with no register spill in any kernel (ptxas -v); for
every constraint a combination breaking it (and as few others as possible) stops at as many
``static_assert``s (constraint lines removed, so that nvcc is reached); launch() allocates nothing and enqueues on ``stream``.

No GPU here: correctness is checked by construction, with families_c_emulation.py restating the
kernels' index math (tiles, cp.async ring, split-K, online softmax) in float64 over the task's
validation shapes (those small enough to emulate in seconds; deep_k and N=1000 were emulated
when the seeds were written) and comparing with the reference; simt_regstage is not emulated
here (its index math was emulated in NumPy when it was written).  The GPU suite validates the
real kernels (tests/gpu: every seed of every task).
"""
from __future__ import annotations

import itertools
import random
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from evo_fsr.knobs import KnobSpace, parse_constraints, parse_knobs, set_knobs
from evo_fsr.tasks import get_task
from evo_fsr.verdict.compile import compile_source, nvcc_path

from knob_checks import CONSTRAINT_RE as _CONSTRAINT_RE, broken as _broken, combinations as _all_assignments  # noqa: E402
from knob_checks import defaults as _defaults, ints as _ints, launch_code  # noqa: E402

import families_c_emulation as emu  # tests/unit is on sys.path (pytest rootdir-less import)

FAMILIES = [("matmul", "simt_pipelined"), ("matmul", "simt_regstage"), ("attention", "flash_fp32")]
MIN_VALID_FRACTION = 0.7
RANDOM_COMBINATIONS = 2
SEED = 12
#: Emulated validation shapes: at most this many multiply-adds (the rest take minutes in NumPy).
EMULATION_WORK_LIMIT = 20_000_000



def _source(task: str, family: str) -> str:
    seeds = get_task(task).seeds()
    assert family in seeds, f"tasks/{task}/seeds/{family}.cu is missing"
    return seeds[family]


def _compile(task: str, source: str, *flags: str):
    return compile_source(source, get_task(task).header(), "sm_90", cache_dir=None, extra_flags=tuple(flags))


@pytest.mark.parametrize("task, family", FAMILIES)
def test_family_knobs_constraints_and_valid_fraction(task: str, family: str) -> None:
    source = _source(task, family)
    declared = parse_knobs(source)
    assert len(declared) >= 5, f"{task}/{family}: a family exposes several knobs"
    for knob in declared.values():
        assert knob.value in knob.choices, f"{task}/{family}: default {knob.name}={knob.value} not declared"
        assert all(re.fullmatch(r"\d+", choice) for choice in knob.choices), knob
    constraints = parse_constraints(source)
    assert len(constraints) == len(_CONSTRAINT_RE.findall(source)) >= 2
    for constraint in constraints:
        assert constraint.names <= set(declared), f"{constraint.text} names something other than a knob"
    assert _broken(constraints, _defaults(source)) == []
    combos = _all_assignments(source)
    valid = [v for v in combos if not _broken(constraints, v)]
    assert MIN_VALID_FRACTION * len(combos) <= len(valid) < len(combos), f"{len(valid)} of {len(combos)} valid"
    space = KnobSpace.of(source)
    exact = space.valid_fraction(sample=len(combos))     # exact: every assignment enumerated
    assert exact == pytest.approx(len(valid) / len(combos))


def _sample(source: str) -> list[dict[str, str]]:
    """The default, then RANDOM_COMBINATIONS other valid assignments drawn with a fixed seed."""
    space = KnobSpace.of(source)
    default = _defaults(source)
    others = [v for v in space.all_valid(limit=space.size) if v != default]
    return [default] + random.Random(f"{SEED}:{source.splitlines()[0]}").sample(others, RANDOM_COMBINATIONS)


def _violating_each(source: str) -> list[tuple[list[str], dict[str, str]]]:
    """For each constraint, an assignment breaking it and as few others as possible (the first
    such in declaration order), with the constraints it breaks."""
    constraints = parse_constraints(source)
    combos = [(v, _broken(constraints, v)) for v in _all_assignments(source)]
    picked = []
    for constraint in constraints:
        breaking = [(len(broken), i) for i, (_, broken) in enumerate(combos) if constraint.text in broken]
        assert breaking, f"no assignment breaks {constraint.text}"
        values, broken = combos[min(breaking)[1]]
        picked.append((broken, values))
    return picked


@pytest.mark.parametrize("task, family", FAMILIES)
def test_family_compiles_without_spills_and_static_asserts_match(task: str, family: str) -> None:
    if nvcc_path() is None:
        pytest.skip("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    source = _source(task, family)
    good = [set_knobs(source, values) for values in _sample(source)]
    bad = [(broken, values, _CONSTRAINT_RE.sub("// (constraint removed for this test)", set_knobs(source, values)))
           for broken, values in _violating_each(source)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        default = pool.submit(_compile, task, good[0], "-Xptxas", "-v")
        others = list(pool.map(lambda src: _compile(task, src), good[1:]))
        bad_results = list(pool.map(lambda item: _compile(task, item[2]), bad))
        default_result = default.result()
    for result in [default_result, *others]:
        assert result.ok and result.binary, f"{task}/{family} does not compile:\n{result.log}"
    resources = dict(default_result.resources)          # ptxas -v, parsed by the compile (verdict/ptxas.py)
    assert "registers" in resources, f"no ptxas report:\n{default_result.log}"
    assert resources.get("spill_stores_bytes", 0) == 0 and resources.get("spill_loads_bytes", 0) == 0, resources
    for (broken, values, _), result in zip(bad, bad_results):
        assert not result.ok, f"{task}/{family} {values} breaks {broken} yet compiles: no static_assert"
        failed = result.log.count("static assertion failed")
        assert failed >= len(broken), f"{task}/{family} {values} breaks {broken}:\n{result.log}"


@pytest.mark.parametrize("task, family", FAMILIES)
def test_family_launch_contract(task: str, family: str) -> None:
    """What nvcc cannot see: no allocation or synchronization, everything on the caller's stream."""
    code = launch_code(_source(task, family), f"{task}/{family}")
    assert re.findall(r"<<<([^<>]*)>>>", code), f"{task}/{family} launches no kernel"
    for call in re.findall(r"cudaMemsetAsync\(([^;]*)\);", code):
        assert re.search(r",\s*stream\s*\)?$", call.strip()), f"{task}/{family}: memset not on `stream`"
    assert "return (int)cudaGetLastError();" in code and 'extern "C" int launch(' in code


def _emulated_shapes(task: str, work) -> list[dict[str, int]]:
    shapes = [dict(s.env) for s in get_task(task).validation]
    kept = [s for s in shapes if work(s) <= EMULATION_WORK_LIMIT]
    assert len(kept) >= len(shapes) - 2, "most validation shapes are emulated"
    return kept


def _family_configs(task: str, family: str) -> list[dict[str, int]]:
    source = _source(task, family)
    return [_ints(v) for v in _sample(source)]


def test_matmul_index_math_over_validation_shapes() -> None:
    """Tiles cover C once per split, loads and zero-fill, the cp.async ring and split-K: the
    emulated kernel equals A @ B on every small validation shape, vector and general paths."""
    rng = np.random.default_rng(SEED)
    shapes = _emulated_shapes("matmul", lambda s: s["M"] * s["K"] * s["N"])
    assert {1} <= {s["M"] for s in shapes} and any(s["N"] % 4 for s in shapes)
    split_seen = False
    for knobs in _family_configs("matmul", "simt_pipelined"):
        for s in shapes:
            A = rng.standard_normal((s["M"], s["K"]))
            B = rng.standard_normal((s["K"], s["N"]))
            for vec in ([True, False] if s["N"] % 4 == 0 else [False]):
                for early in (True, False):
                    C, splits = emu.run_matmul(knobs, A, B, vec, early)
                    split_seen |= splits > 1
                    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12, err_msg=f"{knobs} {s}")
    assert split_seen, "no shape took the split-K path"


def test_matmul_rasterization_visits_every_tile_once() -> None:
    d = emu.mm_derive(_family_configs("matmul", "simt_pipelined")[0])
    group_line = re.search(r"^#define RASTER_GROUP (\d+)", _source("matmul", "simt_pipelined"), re.M)
    assert group_line, "RASTER_GROUP is defined"
    for group in sorted({1, 4, 8, int(group_line.group(1))}):
        d["RASTER_GROUP"] = group
        for tiles_m, tiles_n in itertools.product(range(1, 30), range(1, 10)):
            seen = {emu.mm_raster(d, pid, tiles_m, tiles_n) for pid in range(tiles_m * tiles_n)}
            assert seen == set(itertools.product(range(tiles_m), range(tiles_n)))


def test_attention_index_math_over_validation_shapes() -> None:
    """Q/K/V tiles and zero padding of the head dim, the K/V ring, masking of keys past N and the
    online softmax (shuffle butterflies included): the emulated kernel equals the reference."""
    task = get_task("attention")
    rng = np.random.default_rng(SEED)
    shapes = _emulated_shapes("attention", lambda s: s["B"] * s["N"] * s["N"] * s["d_model"])
    reference = task.reference
    for knobs in _family_configs("attention", "flash_fp32"):
        for s in shapes:
            B, N, D, heads = s["B"], s["N"], s["d_model"], s["heads"]
            Q, K, V = (rng.standard_normal((B, N, D)) for _ in range(3))
            Q *= 8.0                                   # scores of tens: the running max matters
            expected = reference({"Q": Q, "K": K, "V": V}, s)["out"]
            for vec in ([True, False] if (D // heads) % 4 == 0 else [False]):
                for early in (True, False):
                    out = emu.run_attention(knobs, Q, K, V, heads, vec, early)
                    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12, err_msg=f"{knobs} {s}")


def test_emulation_catches_a_broken_ring() -> None:
    """The emulation can fail: waiting for one cp.async group too few reads a stage before its
    copies land (NaN in the result), while the kernel's own wait count gives A @ B."""
    knobs = _family_configs("matmul", "simt_pipelined")[0]
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((70, 300)), rng.standard_normal((300, 40))
    C, _ = emu.run_matmul(knobs, A, B, False, False)
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)
    C_bad, _ = emu.run_matmul(knobs, A, B, False, False, wait_slack=1)
    assert not np.allclose(C_bad, A @ B, equal_nan=False)
