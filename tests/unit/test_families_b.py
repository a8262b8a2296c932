"""Seed families of issue 13, part B (softmax, layernorm, cross_entropy, maxpool3d, prefix_sum,
histogram, monte_carlo, linear_regression): knob spaces, constraints and nvcc.

CPU checks, no GPU: every family declares knobs and ``// constraint:`` lines; the seed's own
values are valid; at least 70 % of the combinations are valid; each constraint is mirrored by a
``static_assert(..., "knob constraint: ...")`` that agrees with it on every combination; and a
stated sample compiles for sm_90 (the default values plus two random valid combinations per
family, seeded), while an invalid combination stops at the static_assert in nvcc.
"""
from __future__ import annotations

import itertools
import os
import random
import statistics
from concurrent.futures import ThreadPoolExecutor

import pytest

from evo_fsr.formulas import Formula
from evo_fsr.knobs import parse_knobs, set_knobs
from evo_fsr.tasks import get_task
from evo_fsr.verdict.compile import CompileResult, compile_source

from knob_checks import CONSTRAINT_RE as _CONSTRAINT_RE, assert_static_asserts_mirror  # noqa: E402
from knob_checks import c_to_formula as _c_to_formula, combinations as _combinations  # noqa: E402
from knob_checks import constraints as _constraints, valid as _valid  # noqa: E402

#: (task, seed file stem) of the families this module covers.
FAMILIES = [
    ("softmax", "regime"),
    ("layernorm", "regime"),
    ("cross_entropy", "tiled"),
    ("maxpool3d", "planes"),
    ("prefix_sum", "lookback"),
    ("histogram", "privatized"),
    ("monte_carlo", "persistent"),
    ("linear_regression", "gram"),
]
MIN_VALID_FRACTION = 0.7
RANDOM_VALID_PER_FAMILY = 2
SAMPLE_SEED = 13
#: Knobs whose every combination of values the family's compiled sample must hold (a random valid
#: combination for each one the default and the random draws miss): the code paths they select.
COVERED_KNOBS: dict[tuple[str, str], tuple[str, ...]] = {
    ("prefix_sum", "lookback"): ("LOAD", "CACHE"),
    ("cross_entropy", "tiled"): ("FIXED_C", "VEC", "FINISH"),
    ("maxpool3d", "planes"): ("REGIME",),
    ("linear_regression", "gram"): ("STAGES", "VEC", "SPLIT", "FINISH"),
    ("monte_carlo", "persistent"): ("VEC", "FINISH"),
    ("histogram", "privatized"): ("AGG", "FINISH"),
}

Compiled = dict[tuple[str, str], list[tuple[dict[str, str], CompileResult]]]



def _source(task: str, seed: str) -> str:
    return get_task(task).seeds()[seed]


def _compile(task: str, source: str) -> CompileResult:
    return compile_source(source, get_task(task).header(), "sm_90", cache_dir=None)


def _sample(task: str, seed: str) -> list[dict[str, str]]:
    """The seed's own values, then RANDOM_VALID_PER_FAMILY other valid combinations, then one
    valid combination for each joint value of the family's COVERED_KNOBS not yet in the sample."""
    source = _source(task, seed)
    knobs = parse_knobs(source)
    default = {name: knob.value for name, knob in knobs.items()}
    constraints = _constraints(source)
    others = [v for v in _combinations(source) if v != default and _valid(constraints, v)]
    rng = random.Random(f"{SAMPLE_SEED}:{task}:{seed}")
    sample = [default] + rng.sample(others, RANDOM_VALID_PER_FAMILY)
    covered = COVERED_KNOBS.get((task, seed), ())
    for wanted in itertools.product(*(knobs[name].choices for name in covered)):
        def has(values: dict[str, str]) -> bool:
            return all(values[name] == value for name, value in zip(covered, wanted))
        if not any(has(values) for values in sample):
            sample.append(rng.choice([values for values in others if has(values)]))
    return sample


@pytest.mark.parametrize("task, seed", FAMILIES)
def test_family_space_and_constraints(task: str, seed: str) -> None:
    source = _source(task, seed)
    knobs = parse_knobs(source)
    assert len(knobs) >= 3, f"{task}/{seed}: a family needs several knobs"
    assert all(len(k.choices) >= 2 and k.value in k.choices for k in knobs.values())
    constraints = _constraints(source)
    assert constraints, f"{task}/{seed} declares no constraint"
    for constraint in constraints:
        assert constraint.names <= set(knobs), f"{constraint.text}: names something other than a knob"
    combos = _combinations(source)
    valid = [v for v in combos if _valid(constraints, v)]
    assert _valid(constraints, {n: k.value for n, k in knobs.items()}), "the default values break a constraint"
    assert len(valid) / len(combos) >= MIN_VALID_FRACTION, f"{len(valid)}/{len(combos)} valid"
    assert len(valid) < len(combos), "a constraint that never excludes anything"


@pytest.mark.parametrize("task, seed", FAMILIES)
def test_static_asserts_mirror_constraints(task: str, seed: str) -> None:
    """Each constraint has a static_assert whose expression agrees with it on every combination."""
    assert_static_asserts_mirror(_source(task, seed))


def test_static_assert_mirror_check_can_fail() -> None:
    """The agreement check above catches a static_assert that drifted from its constraint."""
    env = {"THREADS": 512, "ITEMS": 16}
    assert bool(_c_to_formula("THREADS * ITEMS <= 8192")(env)) != bool(Formula("THREADS * ITEMS <= 4096")(env))
    assert _c_to_formula("COPIES <= THREADS / 32")({"COPIES": 8, "THREADS": 256}) == 1
    assert _c_to_formula("COPIES <= THREADS / 32")({"COPIES": 16, "THREADS": 256}) == 0


@pytest.fixture(scope="module")
def compiled(nvcc_available: bool) -> Compiled:
    """Every family's sample compiled once (in parallel) for the tests below."""
    if not nvcc_available:
        pytest.skip("nvcc not found: the family compile checks need the CUDA toolkit")
    jobs = [(task, seed, values) for task, seed in FAMILIES for values in _sample(task, seed)]
    with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
        results = list(pool.map(lambda job: _compile(job[0], set_knobs(_source(job[0], job[1]), job[2])), jobs))
    out: Compiled = {}
    for (task, seed, values), result in zip(jobs, results):
        out.setdefault((task, seed), []).append((values, result))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("task, seed", FAMILIES)
def test_family_sample_compiles(task: str, seed: str, compiled: Compiled) -> None:
    sample = compiled[(task, seed)]
    assert len(sample) >= 1 + RANDOM_VALID_PER_FAMILY
    for name in COVERED_KNOBS.get((task, seed), ()):
        assert {values[name] for values, _ in sample} == set(parse_knobs(_source(task, seed))[name].choices)
    failed = [(values, result.log[:600]) for values, result in sample if not result.ok]
    assert not failed, failed
    assert all(result.binary[:4] == b"\x7fELF" for _, result in sample)


@pytest.mark.slow
@pytest.mark.parametrize("task, seed", FAMILIES)
def test_invalid_combination_stops_at_static_assert(task: str, seed: str, nvcc_available: bool) -> None:
    if not nvcc_available:
        pytest.skip("nvcc not found")
    source = _source(task, seed)
    constraints = _constraints(source)
    invalid = [v for v in _combinations(source) if not _valid(constraints, v)]
    values = random.Random(f"{SAMPLE_SEED}:invalid:{task}").choice(invalid)
    bad = set_knobs(source, values)
    # Without the declared constraints, so that nvcc (not a pre-compile constraint check) rejects it.
    result = _compile(task, _CONSTRAINT_RE.sub("", bad))
    assert not result.ok, values
    assert "static assertion failed" in result.log and "knob constraint" in result.log, result.log[:600]


def test_gpu_test_combinations_are_valid() -> None:
    """The regime-forcing combinations of tests/gpu/test_families_b_gpu.py exist and are valid."""
    from tests.gpu.test_families_b_gpu import COMBOS
    assert set(FAMILIES) <= set(COMBOS)     # other families' modules check their own entries
    for (task, seed), combos in COMBOS.items():
        if (task, seed) not in FAMILIES:
            continue
        source = _source(task, seed)
        constraints = _constraints(source)
        for values in combos:
            changed = set_knobs(source, values)                 # raises on an unknown knob or value
            current = {name: knob.value for name, knob in parse_knobs(changed).items()}
            assert _valid(constraints, current), (task, values)


def _lr_split_ranges(n: int, grid: int, tr: int) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """linear_regression/gram SPLIT 1 as the kernel computes it: block b's rows [lo, end) and its
    tiles (first row, rows), for a grid of ``grid`` blocks and tiles of ``tr`` rows."""
    per = ((n + 3) // 4 + grid - 1) // grid * 4
    out = []
    for b in range(grid):
        lo = min(b * per, n)
        end = lo + per if n - lo > per else n
        mine = (end - lo + tr - 1) // tr
        tiles = [(lo + k * tr, min(tr, end - (lo + k * tr))) for k in range(mine)]
        out.append((lo, end, tiles))
    return out


@pytest.mark.parametrize("n", [10, 11, 17, 40, 257, 1000, 4099, 65537, 1000003, 4194304, 10000019])
@pytest.mark.parametrize("threads, rows_per_thread, bpsm", [(256, 2, 2), (128, 1, 4), (512, 4, 1)])
def test_linear_regression_split_ranges_cover_rows_once(n: int, threads: int, rows_per_thread: int, bpsm: int) -> None:
    """SPLIT 1: the blocks' ranges tile [0, n) in order, each starts at a multiple of 4 rows (the
    16-byte alignment of X and y is kept: 40 and 4 bytes a row), every tile has 1..TR rows, and
    every block but the last busy one gets the same number of rows."""
    tr = threads * rows_per_thread
    grid = max(1, min((n + tr - 1) // tr, 132 * bpsm, 4096))         # launch()'s grid
    ranges = _lr_split_ranges(n, grid, tr)
    covered = 0
    for lo, end, tiles in ranges:
        assert lo == covered and lo % 4 == 0 and end >= lo
        for r0, nr in tiles:
            assert r0 == covered and 1 <= nr <= tr and (r0 - lo) % tr == 0
            covered += nr
        assert covered == end
    assert covered == n
    sizes = [end - lo for lo, end, _ in ranges]
    busy = [size for size in sizes if size > 0]
    assert sizes[:len(busy)] == busy                                  # empty blocks only at the end
    assert len(set(busy[:-1])) <= 1 and busy[-1] <= busy[0]           # equal ranges, a shorter last
    assert len(sizes) - len(busy) <= 1


def test_linear_regression_transposed_reduction_mapping() -> None:
    """FINISH 1: replaying halve<32> .. halve<2> on 32 lanes of 64 values leaves lane l holding
    the warp sums of entries base(l) and base(l) + 1 as the kernel writes them."""
    import numpy as np
    rng = np.random.default_rng(13)
    acc = rng.integers(-1000, 1000, size=(32, 64)).astype(np.int64)   # exact sums
    want = acc.sum(axis=0)
    cur = acc.copy()
    for h in (32, 16, 8, 4, 2):
        o = h // 2
        nxt = cur.copy()
        for lane in range(32):
            up = bool(lane & o)
            partner = lane ^ o
            for i in range(h):
                lo, hi = cur[lane, i], cur[lane, i + h]
                got = cur[partner, i] if (partner & o) else cur[partner, i + h]   # partner's send
                nxt[lane, i] = (hi if up else lo) + got
        cur = nxt
    for lane in range(32):
        base = (((lane >> 4) & 1) * 32 + ((lane >> 3) & 1) * 16 + ((lane >> 2) & 1) * 8
                + ((lane >> 1) & 1) * 4 + (lane & 1) * 2)
        assert cur[lane, 0] == want[base] and cur[lane, 1] == want[base + 1]
    bases = sorted(b + k for lane in range(32) for k in (0, 1)
                   for b in [((lane >> 4) & 1) * 32 + ((lane >> 3) & 1) * 16 + ((lane >> 2) & 1) * 8
                             + ((lane >> 1) & 1) * 4 + (lane & 1) * 2])
    assert bases == list(range(64))


def _lr_queue_block(b: int, grid: int, stages: int, ntiles: int, counter: list[int]):
    """linear_regression/gram SPLIT 2, one block as the kernel runs it: its ring of tile numbers
    (``tile_at``), the grant taken a tile ahead (``granted``) and the shared counter (``take``).
    A generator: it yields before each atomic on the counter (the other blocks run between) and
    yields ("tile", t) for each tile it computes."""
    def take(t: int):
        if t >= ntiles:
            return t
        yield ("atomic", None)
        got = counter[0]
        counter[0] += 1
        return stages * grid + got

    if stages == 1:
        granted = [b, None]
        k = 0
        while True:
            t = granted[k & 1]
            if t >= ntiles:
                return
            nxt = yield from take(t)
            yield ("tile", t)
            granted[(k + 1) & 1] = nxt
            k += 1
    tile_at = [None] * stages
    for s in range(stages - 1):
        tile_at[s] = b + s * grid
    granted = [b + (stages - 1) * grid, None]
    cs, k = 0, 0
    while True:
        t = tile_at[cs]
        if t >= ntiles:
            return
        ns = stages - 1 if cs == 0 else cs - 1
        tn = granted[k & 1]
        tile_at[ns] = tn
        nxt = yield from take(tn)
        yield ("tile", t)
        granted[(k + 1) & 1] = nxt
        cs = 0 if cs == stages - 1 else cs + 1
        k += 1


@pytest.mark.parametrize("n", [10, 257, 4099, 65537, 1000003])
@pytest.mark.parametrize("threads, rows_per_thread, bpsm, stages", [(256, 2, 2, 2), (128, 1, 4, 1), (128, 4, 4, 4),
                                                                    (512, 2, 1, 3)])
def test_linear_regression_tile_queue_computes_every_tile_once(n: int, threads: int, rows_per_thread: int,
                                                               bpsm: int, stages: int) -> None:
    """SPLIT 2 under random interleavings of the blocks' atomics: every tile of [0, ntiles) is
    computed exactly once, each block's tiles grow (its loop stops at the first past the end), and
    blocks on a slow SM (scheduled less often) take fewer tiles."""
    tr = threads * rows_per_thread
    ntiles = (n + tr - 1) // tr
    grid = max(1, min(ntiles, 132 * bpsm, 4096))
    rng = random.Random(n * 31 + stages)
    for _ in range(3):
        counter = [0]
        blocks = {b: _lr_queue_block(b, grid, stages, ntiles, counter) for b in range(grid)}
        slow = set(rng.sample(range(grid), grid // 4))
        seen: dict[int, list[int]] = {b: [] for b in range(grid)}
        while blocks:
            b = rng.choice(list(blocks))
            if b in slow and rng.random() < 0.75:
                continue
            try:
                kind, t = next(blocks[b])
            except StopIteration:
                del blocks[b]
                continue
            if kind == "tile":
                seen[b].append(t)
        done = sorted(t for tiles in seen.values() for t in tiles)
        assert done == list(range(ntiles))
        assert all(tiles == sorted(tiles) for tiles in seen.values())
        assert counter[0] <= max(0, ntiles - stages * grid) + grid            # one take past the end a block
        if ntiles > 20 * grid and grid >= 8:
            fast = [len(seen[b]) for b in range(grid) if b not in slow]
            assert statistics.mean(len(seen[b]) for b in slow) < statistics.mean(fast)
