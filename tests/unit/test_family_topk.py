"""topk/radix_select seed family (issue 13): knob space, constraints, nvcc, and a NumPy emulation.

CPU checks, no GPU: the family declares knobs and ``// constraint:`` lines; its own values are
valid; at least 70 % of the combinations are valid; each constraint is mirrored by a
``static_assert(..., "knob constraint: ...")`` that agrees with it on every combination; the
default and two seeded random valid combinations compile for sm_90 without register spills; an
invalid combination stops at the static_assert; launch() allocates nothing and runs on `stream`.

``emulate`` restates the kernel in NumPy: the order-preserving keys, the regime and chunk
arithmetic of launch() (cluster size, the 16-byte misalignment ``mis`` of x, the padded chunks),
the digit passes with their prefix filter, early stop and the top-down bin selection, the
gather's slot assignment in the kernel's (CTA rank, thread, iteration) order with the packed
(greater << 20 | tied) scan, and the bitonic network of CTA 0, stage by stage.  It is run on the
validation shapes and on extra shapes and distributions, for every misalignment, and compared
with reference.compare().  The GPU suite (tests/gpu/test_families_b_gpu.py) runs the real kernel.
"""
from __future__ import annotations

import random
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from evo_fsr.knobs import KnobSpace, parse_knobs, set_knobs
from evo_fsr.tasks import get_task
from evo_fsr.verdict.compile import compile_source

from knob_checks import CONSTRAINT_RE as _CONSTRAINT_RE, assert_static_asserts_mirror, launch_code  # noqa: E402
from knob_checks import combinations as _combinations, constraints as _constraints  # noqa: E402
from knob_checks import defaults as _defaults, valid as _valid  # noqa: E402

TASK, SEED_NAME = "topk", "radix_select"
MIN_VALID_FRACTION = 0.7
SAMPLE_SEED = 13
MAXK = 512
CACHE_MAX = 49152
SMEM_PER_BLOCK = 232448            # sm_90: 227 KB of shared memory per block, static + dynamic



def _source() -> str:
    seeds = get_task(TASK).seeds()
    assert SEED_NAME in seeds, f"tasks/{TASK}/seeds/{SEED_NAME}.cu is missing"
    return seeds[SEED_NAME]


def _sample(source: str) -> list[dict[str, str]]:
    default = _defaults(source)
    constraints = _constraints(source)
    others = [v for v in _combinations(source) if v != default and _valid(constraints, v)]
    return [default] + random.Random(f"{SAMPLE_SEED}:{TASK}:{SEED_NAME}").sample(others, 2)


def _compile(source: str):
    return compile_source(source, get_task(TASK).header(), "sm_90", cache_dir=None)


# --- knob space ------------------------------------------------------------------------------

def test_knobs_and_constraints() -> None:
    source = _source()
    knobs = parse_knobs(source)
    assert len(knobs) >= 5
    assert all(len(k.choices) >= 2 and k.value in k.choices for k in knobs.values())
    assert all(re.fullmatch(r"\d+", c) for k in knobs.values() for c in k.choices)
    constraints = _constraints(source)
    assert constraints
    for constraint in constraints:
        assert constraint.names <= set(knobs), constraint.text
    combos = _combinations(source)
    valid = [v for v in combos if _valid(constraints, v)]
    assert _valid(constraints, _defaults(source))
    assert MIN_VALID_FRACTION * len(combos) <= len(valid) < len(combos), f"{len(valid)}/{len(combos)}"
    assert KnobSpace.of(source).valid_fraction() == pytest.approx(len(valid) / len(combos))


def test_static_asserts_mirror_constraints() -> None:
    assert_static_asserts_mirror(_source())


def test_launch_contract() -> None:
    code = launch_code(_source(), "topk/radix_select", also_forbidden=("cub::Device",))
    assert re.findall(r"<<<([^<>]*)>>>", code)
    assert "config.stream = stream;" in code and code.count("cudaLaunchKernelEx(") == 1
    assert 'extern "C" int launch(const float* x, float* values, int* indices, int N, int K, cudaStream_t stream)' in code


def test_gpu_combinations_are_valid() -> None:
    from tests.gpu.test_families_b_gpu import COMBOS
    source = _source()
    constraints = _constraints(source)
    combos = COMBOS[(TASK, SEED_NAME)]
    assert len(combos) >= 2
    for values in combos:
        changed = set_knobs(source, values)
        assert _valid(constraints, _defaults(changed)), values


@pytest.fixture(scope="module")
def compiled(nvcc_available: bool):
    if not nvcc_available:
        pytest.skip("nvcc not found")
    source = _source()
    sample = _sample(source)
    widest = dict(sample[0], RADIX_BITS="11")            # the largest static shared memory
    constraints = _constraints(source)
    invalid = random.Random(f"{SAMPLE_SEED}:invalid").choice(
        [v for v in _combinations(source) if not _valid(constraints, v)])
    jobs = [set_knobs(source, v) for v in sample + [widest]]
    jobs.append(_CONSTRAINT_RE.sub("", set_knobs(source, invalid)))
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(_compile, jobs))
    return sample, results[:len(sample)], results[len(sample)], (invalid, results[-1])


@pytest.mark.slow
def test_sample_compiles_without_spills(compiled) -> None:
    sample, results, _, _ = compiled
    for values, result in zip(sample, results):
        assert result.ok and result.binary[:4] == b"\x7fELF", (values, result.log[:800])
        resources = dict(result.resources)
        assert resources.get("spill_stores_bytes", 0) == 0 and resources.get("spill_loads_bytes", 0) == 0, \
            (values, resources)


@pytest.mark.slow
def test_cached_chunk_fits_shared_memory(compiled) -> None:
    """The dynamic key cache (CACHE_MAX keys) plus the static shared memory fits a block."""
    _, _, widest, _ = compiled
    assert widest.ok, widest.log[:800]
    static = dict(widest.resources)["shared_bytes"]
    assert static + 4 * CACHE_MAX <= SMEM_PER_BLOCK, static
    assert f"#define CACHE_MAX {CACHE_MAX}" in _source()


@pytest.mark.slow
def test_invalid_combination_stops_at_static_assert(compiled) -> None:
    _, _, _, (values, result) = compiled
    assert not result.ok, values
    assert "static assertion failed" in result.log and "knob constraint" in result.log, result.log[:600]


# --- NumPy emulation of the kernel -----------------------------------------------------------

def to_key(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).copy()
    u[u == 0x80000000] = 0
    return np.where(u >> 31 != 0, ~u, u | np.uint32(0x80000000)).astype(np.uint32)


def from_key(k: np.ndarray) -> np.ndarray:
    k = k.astype(np.uint32)
    return np.where(k >> 31 != 0, k & np.uint32(0x7FFFFFFF), ~k).astype(np.uint32).view(np.float32)


def plan(n: int, k: int, knobs: dict[str, int], mis: int) -> dict:
    """launch(): regime, cluster size, chunk, caching."""
    padded = n + mis
    cl = 1 if n <= knobs["SINGLE_MAX"] else knobs["CLUSTER"]
    chunk = ((padded + cl - 1) // cl + 3) // 4 * 4
    return {"cl": cl, "chunk": chunk, "cached": bool(knobs["CACHE"]) and chunk <= CACHE_MAX,
            "k": min(k, n)}


def cta_positions(n: int, mis: int, rank: int, chunk: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Valid shared positions s of CTA `rank` and their global indices g0 + s; also vlo."""
    padded = n + mis
    p0 = rank * chunk
    vlo = max(mis - p0, 0)
    vhi = min(chunk, padded - p0)
    s = np.arange(vlo, max(vhi, vlo), dtype=np.int64)
    return s, (p0 - mis) + s, vlo


def bitonic_desc(v: np.ndarray) -> np.ndarray:
    """CTA 0's network: element t of P, keep_max = ((t & j) == 0) == ((t & kk) == 0)."""
    P = v.size
    t = np.arange(P)
    kk = 2
    while kk <= P:
        j = kk >> 1
        while j > 0:
            o = v[t ^ j]
            keep_max = ((t & j) == 0) == ((t & kk) == 0)
            v = np.where(keep_max, np.maximum(v, o), np.minimum(v, o))
            j >>= 1
        kk <<= 1
    return v


def emulate(x: np.ndarray, K: int, knobs: dict[str, int], mis: int = 0) -> dict[str, np.ndarray]:
    n = x.size
    p = plan(n, K, knobs, mis)
    k, cl, chunk = p["k"], p["cl"], p["chunk"]
    T, RB = knobs["THREADS"], knobs["RADIX_BITS"]
    keys = to_key(x).astype(np.int64)
    ctas = [cta_positions(n, mis, r, chunk) for r in range(cl)]
    owned = np.concatenate([g for _, g, _ in ctas])
    assert np.array_equal(np.sort(owned), np.arange(n)), "chunks do not cover x exactly once"
    assert all(s.size == 0 or s[-1] < chunk for s, _, _ in ctas)

    bins, npass = 1 << RB, (32 + RB - 1) // RB
    prefix, krem, shift = 0, k, 32
    for pas in range(npass):
        prev, shift = shift, max(32 - RB * (pas + 1), 0)
        mask = (1 << (prev - shift)) - 1
        hist = np.zeros(bins, dtype=np.int64)
        for _, g, _ in ctas:                      # per-CTA shared histograms, summed over DSMEM
            kk = keys[g]
            take = np.ones(kk.size, bool) if prev == 32 else (kk >> prev) == prefix
            hist += np.bincount((kk[take] >> shift) & mask, minlength=bins)
        # thread t owns bins BINS-1-(t*BPT+j); exclusive scan from the top: one bin qualifies
        above, hit = 0, []
        for r in range(bins):
            b, c = bins - 1 - r, int(hist[bins - 1 - r])
            if above < krem <= above + c:
                hit.append((b, krem - above, c))
            above += c
        assert len(hit) == 1, hit
        d, krem, count = hit[0]
        prefix = (prefix << (prev - shift)) | d
        if count == krem:
            break

    G = k - krem
    slots = np.zeros(k, dtype=np.uint64)
    written = np.zeros(k, dtype=bool)
    before_g = before_e = 0
    for s, g, vlo in ctas:
        # per-thread iteration order: thread (s - vlo) % T, its iteration (s - vlo) // T
        rel = s - vlo
        order = np.lexsort(((rel // T), (rel % T)))
        g_ord = g[order]
        hi = keys[g_ord] >> shift
        greater, tied = hi > prefix, hi == prefix
        ng, ne = int(greater.sum()), int(tied.sum())
        assert before_g + ng < (1 << 12) and before_e + ne < (1 << 20), "packed scan overflows"
        comp = (keys[g_ord].astype(np.uint64) << np.uint64(32)) | (0xFFFFFFFF - g_ord).astype(np.uint64)
        go = before_g + np.arange(ng)
        assert not written[go].any()
        slots[go], written[go] = comp[greater], True
        eo = before_e + np.arange(ne)
        keep = eo < krem
        assert not written[G + eo[keep]].any()
        slots[G + eo[keep]], written[G + eo[keep]] = comp[tied][keep], True
        before_g += ng
        before_e += ne
    assert before_g == G and before_e >= krem
    assert written.all(), "a slot was never written"
    P = 32
    while P < k:
        P <<= 1
    assert P <= T
    v = np.zeros(P, dtype=np.uint64)
    v[:k] = slots
    v = bitonic_desc(v)[:k]
    return {"values": from_key((v >> np.uint64(32)).astype(np.uint32)),
            "indices": (np.uint64(0xFFFFFFFF) - (v & np.uint64(0xFFFFFFFF))).astype(np.int32)}


def _reference_module():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "tasks" / "topk" / "reference.py"
    spec = importlib.util.spec_from_file_location("topk_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REF = _reference_module()


def _knob_sets() -> list[dict[str, int]]:
    from tests.gpu.test_families_b_gpu import COMBOS
    source = _source()
    sets = [_defaults(source)] + _sample(source)[1:]
    sets += [dict(_defaults(source), **c) for c in COMBOS[(TASK, SEED_NAME)]]
    return [{k: int(v) for k, v in s.items()} for s in sets]


def _verify(x: np.ndarray, K: int, knobs: dict[str, int], mis: int) -> None:
    dims = {"N": int(x.size), "K": int(K)}
    inputs = {"x": x}
    x_before = x.copy()
    out = emulate(x, K, knobs, mis)
    assert np.array_equal(x.view(np.uint32), x_before.view(np.uint32))
    bad = REF.compare(out, REF.reference(inputs, dims), inputs, dims, {})
    assert bad is None, (knobs, mis, dims, bad)


def test_keys_preserve_order_and_merge_zeros() -> None:
    rng = np.random.default_rng(0)
    vals = np.concatenate([rng.standard_normal(1000).astype(np.float32),
                           np.array([0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 3.4e38, -3.4e38,
                                     np.finfo(np.float32).max, -np.finfo(np.float32).max], np.float32)])
    keys = to_key(vals)
    a, b = np.meshgrid(np.arange(vals.size), np.arange(vals.size))
    assert np.array_equal(keys[a] > keys[b], vals[a] > vals[b])
    assert np.array_equal(keys[a] == keys[b], vals[a] == vals[b])
    assert keys.min() >= 0x00800000                      # no finite float maps to 0 (the padding)
    back = from_key(keys)
    assert np.array_equal(back, vals)                    # -0.0 comes back as +0.0, equal to it


def test_emulation_matches_reference_on_validation_shapes() -> None:
    task = get_task(TASK)
    rng = np.random.default_rng(SAMPLE_SEED)
    for knobs in _knob_sets():
        for shape in task.validation:
            env = dict(shape.env)
            for case in ([shape.case] if shape.case else []) + ["random", "sorted", "reversed", "all_negative"]:
                x = REF.make_inputs(env, rng, case)["x"]
                for mis in ((0, 3) if env["N"] > 5000 else (0, 1, 2, 3)):
                    _verify(x, env["K"], knobs, mis)


def test_emulation_matches_reference_on_edge_inputs() -> None:
    rng = np.random.default_rng(7)
    shapes = [(1, 1), (2, 2), (3, 1), (31, 31), (33, 32), (4095, 17), (4096, 512), (4097, 512),
              (32768, 512), (32769, 511), (49149, 64), (196605, 512), (262141, 2), (262144, 512)]
    tiny = np.float32(1e-45)
    for knobs in _knob_sets()[:4]:
        for n, k in shapes:
            for kind in ("equal", "zeros", "denormal", "ties", "ramp"):
                if kind == "equal":
                    x = np.full(n, np.float32(-2.5))
                elif kind == "zeros":
                    x = np.where(rng.random(n) < 0.5, np.float32(0.0), np.float32(-0.0)).astype(np.float32)
                elif kind == "denormal":
                    x = (rng.integers(-3, 3, n) * tiny).astype(np.float32)
                elif kind == "ties":
                    x = REF.make_inputs({"N": n}, rng, "ties")["x"]
                else:
                    x = np.arange(n, dtype=np.float32)[::-1].copy() - np.float32(n // 2)
                _verify(x, k, knobs, int(rng.integers(0, 4)))


def test_regimes_are_exercised() -> None:
    """Between the default and the GPU combinations every regime of launch() is reached on the
    validation shapes: one CTA cached / uncached, a cluster cached / uncached."""
    task = get_task(TASK)
    seen = set()
    for knobs in _knob_sets():
        for shape in task.validation:
            p = plan(shape.env["N"], shape.env["K"], knobs, 1)
            seen.add((p["cl"] > 1, p["cached"]))
    assert seen == {(False, True), (False, False), (True, True), (True, False)}, seen


def test_emulation_can_fail() -> None:
    """The check is not vacuous: compare() rejects the emulated output reversed, and an output
    whose tied slot repeats an index (what a wrong tie count in the gather would give)."""
    x = np.array([3, 1, 2, 2, 5, 2], np.float32)
    dims, inputs = {"N": 6, "K": 3}, {"x": x}
    expected = REF.reference(inputs, dims)
    out = emulate(x, 3, _knob_sets()[0])
    assert REF.compare(out, expected, inputs, dims, {}) is None
    assert REF.compare({"values": out["values"][::-1].copy(), "indices": out["indices"][::-1].copy()},
                       expected, inputs, dims, {}) is not None
    dup = out["indices"].copy()
    dup[2] = dup[1]
    assert REF.compare({"values": out["values"], "indices": dup}, expected, inputs, dims, {}) is not None
