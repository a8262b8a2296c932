"""The sort seed family (tasks/sort/seeds/radix.cu): knobs, constraints, nvcc, and a NumPy
emulation of its kernels (tests/unit/sort_radix_emulation.py) against the task's reference.

No GPU here. The emulation restates the kernels' index math (bitonic pairs; grid, tile ranges,
digit-major counts, per-digit scans over CTAs, warp-striped tiles, match-based stable ranks, shared-memory
slots, coalesced store, ping-pong parity) and checks that every pass writes each slot once; it is
run on every validation shape and on every distribution of task.yaml at several N, through both
regimes, at the default knobs, two sampled combinations and the GPU test's combinations, with a
grid of 132 SMs (H100) and of 3 SMs (several tiles per CTA). The GPU suite validates the real
kernel (tests/gpu/test_families_b_gpu.py COMBOS).
"""
from __future__ import annotations

import importlib.util
import random
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from evo_fsr.knobs import KnobSpace, parse_constraints, parse_knobs, set_knobs
from evo_fsr.tasks import get_task
from evo_fsr.verdict.compile import compile_source

from knob_checks import CONSTRAINT_RE as _CONSTRAINT_RE, assert_static_asserts_mirror, launch_code  # noqa: E402
from knob_checks import combinations as _combinations, ints as _ints  # noqa: E402

import sort_radix_emulation as emu  # tests/unit is on sys.path (rootdir-less import)

TASK, SEED = "sort", "radix"
MIN_VALID_FRACTION = 0.7
SAMPLE_SEED = 13
DISTRIBUTIONS = ["random", "duplicates", "special_values", "sorted", "reversed", "all_equal"]



def _source() -> str:
    return get_task(TASK).seeds()[SEED]


def _reference_module():
    path = Path(__file__).resolve().parents[2] / "tasks" / TASK / "reference.py"
    spec = importlib.util.spec_from_file_location("sort_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REF = _reference_module()


def _broken(values: dict[str, str]) -> list[str]:
    env = _ints(values)
    return [c.text for c in parse_constraints(_source()) if not c(env)]


def _defaults() -> dict[str, str]:
    return {name: knob.value for name, knob in parse_knobs(_source()).items()}


def _sample() -> list[dict[str, str]]:
    """The default, then two other valid combinations drawn with a fixed seed."""
    default = _defaults()
    others = [v for v in KnobSpace.of(_source()).all_valid() if v != default]
    return [default] + random.Random(f"{SAMPLE_SEED}:{TASK}:{SEED}").sample(others, 2)


def _gpu_combos() -> list[dict[str, str]]:
    from tests.gpu.test_families_b_gpu import COMBOS
    return [{**_defaults(), **values} for values in COMBOS[(TASK, SEED)]]


def _compile(source: str, *flags: str):
    return compile_source(source, get_task(TASK).header(), "sm_90", cache_dir=None, extra_flags=tuple(flags))


# ---------------------------------------------------------------- knobs and constraints

def test_knobs_constraints_and_valid_fraction() -> None:
    source = _source()
    knobs = parse_knobs(source)
    assert set(knobs) == {"RADIX_BITS", "THREADS", "ITEMS", "BLOCKS_PER_SM", "SMALL_N", "MATCH", "PDL"}
    for knob in knobs.values():
        assert knob.value in knob.choices and len(knob.choices) >= 2
        assert all(re.fullmatch(r"\d+", c) for c in knob.choices), knob
    constraints = parse_constraints(source)
    assert len(constraints) == len(_CONSTRAINT_RE.findall(source)) >= 2
    for c in constraints:
        assert c.names <= set(knobs), f"{c.text} names something other than a knob"
    assert _broken(_defaults()) == []
    combos = _combinations(source)
    valid = [v for v in combos if not _broken(v)]
    assert MIN_VALID_FRACTION * len(combos) <= len(valid) < len(combos), f"{len(valid)} of {len(combos)} valid"
    assert KnobSpace.of(source).valid_fraction() == pytest.approx(len(valid) / len(combos))


def test_static_asserts_mirror_constraints() -> None:
    assert_static_asserts_mirror(_source())


def test_gpu_combinations_are_valid_and_force_other_regimes() -> None:
    combos = _gpu_combos()
    assert len(combos) >= 2
    for values in combos:
        set_knobs(_source(), {k: v for k, v in values.items()})     # raises on unknown knob or value
        assert _broken(values) == [], values
    d = [emu.derive(_ints(v)) for v in combos]
    assert any(x["SMALL_N"] == 0 for x in d), "one combination sends N = 1 through the passes"
    assert any(x["PASSES"] % 2 for x in d), "one combination has an odd pass count"
    assert any(x["DIGITS_PER_THREAD"] > 1 for x in d), "one combination scans several digits per thread"
    assert any(x["PDL"] == 1 for x in d), "one combination launches with programmatic serialization"
    assert {x["MATCH"] for x in d} == {0, 1}, "both ways of finding a digit's lanes"


# ---------------------------------------------------------------- nvcc

def test_sample_compiles_and_default_does_not_spill(nvcc_available: bool) -> None:
    if not nvcc_available:
        pytest.skip("nvcc not found")
    source = _source()
    sample = _sample() + _gpu_combos()                 # the GPU test's combinations (PDL = 1) too
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda v: _compile(set_knobs(source, v), "-Xptxas", "-v"), sample))
    for values, result in zip(sample, results):
        assert result.ok and result.binary[:4] == b"\x7fELF", f"{values}:\n{result.log[:2000]}"
    resources = dict(results[0].resources)
    assert "registers" in resources, results[0].log
    assert resources.get("spill_stores_bytes", 0) == 0 and resources.get("spill_loads_bytes", 0) == 0, resources


def test_each_constraint_stops_at_its_static_assert(nvcc_available: bool) -> None:
    if not nvcc_available:
        pytest.skip("nvcc not found")
    source = _source()
    combos = [(v, _broken(v)) for v in _combinations(source)]
    jobs = []
    for constraint in parse_constraints(source):
        breaking = [(len(b), i) for i, (_, b) in enumerate(combos) if constraint.text in b]
        assert breaking, f"no combination breaks {constraint.text}"
        values, broken = combos[min(breaking)[1]]
        jobs.append((values, broken, _CONSTRAINT_RE.sub("// (constraint removed)", set_knobs(source, values))))
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda job: _compile(job[2]), jobs))
    for (values, broken, _), result in zip(jobs, results):
        assert not result.ok, f"{values} breaks {broken} yet compiles"
        assert result.log.count("static assertion failed") >= len(broken), result.log[:2000]
        assert "knob constraint" in result.log


def test_launch_contract() -> None:
    """No allocation or synchronization, every launch on `stream`."""
    code = launch_code(_source(), "sort/radix", also_forbidden=("cub::Device",))
    assert len(re.findall(r"<<<([^<>]*)>>>", code)) == 2    # small_sort, and launch_on's plain launch
    assert code.count("cudaLaunchKernelEx(") == 1 and "config.stream = stream;" in code
    passes = code[code.index("for (int pass = 0;"):]
    assert passes.count("launch_on(") == 3 and "launch_on(upsweep, G, THREADS, pass > 0," in passes
    assert "return (int)cudaGetLastError();" in code and 'extern "C" int launch(' in code


# ---------------------------------------------------------------- emulation

def _expected(x: np.ndarray) -> np.ndarray:
    return REF.reference({"x": x}, {"N": x.size})["y"]


def _check(knobs: dict[str, int], x: np.ndarray, **kw) -> None:
    y = emu.radix_sort(knobs, x, **kw)
    assert y.dtype == np.float32 and y.shape == x.shape
    assert np.array_equal(y.astype(np.float64), _expected(x)), (knobs, x.size, kw)


def test_key_transform_is_order_preserving_and_invertible() -> None:
    rng = np.random.default_rng(0)
    v = np.concatenate([REF.SPECIAL, rng.standard_normal(5000).astype(np.float32),
                        np.array([np.inf, -np.inf, 1e-45, -1e-45], np.float32)])
    keys = emu.to_key(v.view(np.uint32))
    order = np.argsort(keys, kind="stable")
    assert np.array_equal(v[order].astype(np.float64), np.sort(v.astype(np.float64)))
    assert np.array_equal(emu.from_key(keys), v.view(np.uint32))
    assert emu.to_key(np.array([0x80000000], np.uint32))[0] + 1 == emu.to_key(np.array([0], np.uint32))[0]


@pytest.mark.parametrize("sms", [132, 3])
def test_emulation_matches_reference_on_validation_shapes(sms: int) -> None:
    """The evaluator's validation plan (two seeds: every shape, every distribution on two shapes)."""
    configs = [_ints(v) for v in _sample() + _gpu_combos()]
    plan = get_task(TASK).validation_plan(2)
    assert {case for _, case in plan} == set(DISTRIBUTIONS)
    for number, (shape, case) in enumerate(plan):
        n = int(shape.env["N"])
        x = REF.make_inputs({"N": n}, np.random.default_rng(1000 + number), case)["x"]
        for knobs in configs:
            _check(knobs, x, sms=sms)
            if n <= knobs["SMALL_N"]:
                _check(knobs, x, sms=sms, force_radix=True)


def test_validation_shapes_carry_their_case() -> None:
    cases = {s.case for s in get_task(TASK).validation}
    assert {"duplicates", "reversed", "sorted", "special_values"} <= cases


@pytest.mark.parametrize("case", DISTRIBUTIONS)
def test_emulation_matches_reference_on_every_distribution(case: str) -> None:
    rng = np.random.default_rng(7)
    configs = [_ints(v) for v in _sample() + _gpu_combos()]
    for n in (1, 2, 31, 4096, 4097, 8193, 30011):
        x = REF.make_inputs({"N": n}, rng, case)["x"]
        for knobs in configs:
            _check(knobs, x, sms=3)
            _check(knobs, x, sms=132, force_radix=True)


def test_emulation_catches_an_unstable_scatter() -> None:
    """Ranking equal digits in reverse lane order breaks LSD: the emulation sees it."""
    knobs = _ints(_defaults())
    x = REF.make_inputs({"N": 20000}, np.random.default_rng(3), "random")["x"]
    _check(knobs, x, sms=3)
    bad = emu.radix_sort(knobs, x, sms=3, stable=False)
    assert not np.array_equal(bad.astype(np.float64), _expected(x))


def test_emulation_with_a_grid_wider_than_one_scan_chunk() -> None:
    """G > SCAN_THREADS: the per-digit scan carries across chunks (a GPU with many SMs, small tiles)."""
    knobs = {**_ints(_defaults()), "THREADS": 128, "ITEMS": 4, "BLOCKS_PER_SM": 4, "SMALL_N": 0}
    x = REF.make_inputs({"N": 300001}, np.random.default_rng(5), "special_values")["x"]
    tiles, G = emu.grid(emu.derive(knobs), x.size, 132)
    assert G > emu.SCAN_THREADS and tiles > G
    _check(knobs, x, sms=132)
