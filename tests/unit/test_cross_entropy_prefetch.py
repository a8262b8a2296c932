"""cross_entropy/tiled PREFETCH 1 and 2: CPU replays of the index, stage/parity and shared-memory
math, no GPU.

The integer expressions the kernel and the launch use (the warp's full chunks, the chunk it
resumes the ordinary loop at, the ring's shared-memory size and stage count, the register gates)
are read from tasks/cross_entropy/seeds/tiled.cu itself and evaluated here in Python, so an edit
that breaks them fails these tests; the control flow around them (the ring's stage/parity walk and
the register pipeline's loop) is replayed by hand, each against a model that catches a wrong
version (see the *_can_fail tests).
"""
from __future__ import annotations

import itertools
import random
import re

import pytest

from evo_fsr.knobs import parse_knobs
from evo_fsr.tasks import get_task

SEED = get_task("cross_entropy").seeds()["tiled"]
KNOBS = parse_knobs(SEED)
SMS = 132


# ---- the source's C integer expressions, evaluated in Python ----------------------------------

def _strip_group(e: str) -> str | None:
    """The inside of ``e`` when a single pair of parentheses wraps all of it."""
    if not (e.startswith("(") and e.endswith(")")):
        return None
    depth = 0
    for i, ch in enumerate(e):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(e) - 1:
            return None
    return e[1:-1]


def _py(e: str) -> str:
    """A C integer expression (non-negative operands, ?:, && ||, casts, calls) as Python."""
    e = e.strip()
    inner = _strip_group(e)
    if inner is not None:
        return f"({_py(inner)})"
    depth, q = 0, -1
    for i, ch in enumerate(e):                       # the top-level ternary, if any
        depth += ch == "("
        depth -= ch == ")"
        if ch == "?" and depth == 0:
            q = i
            break
    if q >= 0:
        depth, nested = 0, 0
        for i in range(q + 1, len(e)):
            ch = e[i]
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and ch == "?":
                nested += 1
            elif depth == 0 and ch == ":":
                if nested == 0:
                    return f"(({_py(e[q + 1:i])}) if ({_py(e[:q])}) else ({_py(e[i + 1:])}))"
                nested -= 1
        raise ValueError(f"unbalanced ?: in {e!r}")
    out, i = [], 0                                   # no top-level ternary: recurse into groups
    while i < len(e):
        if e[i] == "(":
            depth, j = 0, i
            while True:
                depth += e[j] == "("
                depth -= e[j] == ")"
                if depth == 0:
                    break
                j += 1
            out.append(f"({_py(e[i + 1:j])})")
            i = j + 1
        else:
            out.append(e[i])
            i += 1
    text = "".join(out)
    text = text.replace("&&", " and ").replace("||", " or ")
    text = re.sub(r"(?<![/])/(?![/])", "//", text)
    return text


def _clean(expr: str) -> str:
    expr = " ".join(expr.split())                                       # one line
    expr = re.sub(r"\((?:long long|int|unsigned)\)", "", expr)          # casts
    return re.sub(r"<CT>", "", expr)                                    # template arguments


def _macro(name: str) -> str:
    m = re.search(rf"^#define {name} (.+?)\s*(?://.*)?$", SEED, re.M)
    assert m, f"#define {name} not found"
    return _py(_clean(m.group(1)))


def _constexpr(name: str) -> tuple[str, str]:
    m = re.search(rf"constexpr \w+ {name}\(([^)]*)\)\s*\{{\s*return (.*?);\s*\}}", SEED, re.S)
    assert m, f"constexpr {name} not found"
    params = ", ".join(p.split()[-1] for p in m.group(1).split(",") if p.strip())
    return params, _py(_clean(m.group(2)))


def _statement(pattern: str) -> str:
    """The right-hand side of every ``pattern = EXPR;`` in the source (all the same)."""
    found = {m.group(1) for m in re.finditer(rf"{pattern}\s*=\s*(.*?);", SEED)}
    assert len(found) == 1, (pattern, found)
    return _py(_clean(found.pop()))


MACROS = ["NWARPS", "CHUNK_ROWS", "REG_CAP", "SM_SMEM_BYTES", "BLOCK_SMEM_MAX", "BLOCK_SMEM_RESERVED"]
FUNCTIONS = ["slice_floats", "ring_floats", "ring_block_bytes", "ring_stages", "ring_ok", "prefetch_fits"]


class Model:
    """The seed's macros and constexpr functions for one knob assignment and one C = CT."""

    def __init__(self, knobs: dict[str, int], ct: int) -> None:
        ns: dict = {"__builtins__": {}}
        ns.update(knobs)
        ns["CT"] = ct
        for name in MACROS:
            ns[name] = eval(_macro(name), ns)        # noqa: S307 - the repository's own source
        for name in FUNCTIONS:
            params, body = _constexpr(name)
            ns[name] = eval(f"lambda {params}: {body}", ns)   # noqa: S307
        self.ns = ns

    def __getattr__(self, name: str):
        return self.ns[name]


def knobs(**over: int) -> dict[str, int]:
    values = {name: int(k.value) for name, k in KNOBS.items()}
    values.update(over)
    return values


# ---- the warp's chunks: the pipelined/ring phase, then the ordinary loop ------------------------

FULL = _statement(r"const long long full")
MINE = _statement(r"const int mine")
RING_RETURN = _py(_clean(re.search(r"return (ch \+ \(long long\)mine \* stride);", SEED).group(1)))


def ring_chunks(n: int, chunk_rows: int, ch: int, stride: int) -> tuple[list[int], int]:
    """rows_ring's full chunks of a warp starting at ``ch``, and the chunk it returns."""
    ns = {"N": n, "CHUNK_ROWS": chunk_rows, "ch": ch, "stride": stride, "__builtins__": {}}
    full = eval(FULL, ns)                            # noqa: S307
    if ch >= full:
        return [], ch
    ns["full"] = full
    mine = eval(MINE, ns)                            # noqa: S307
    ns["mine"] = mine
    return [ch + k * stride for k in range(mine)], eval(RING_RETURN, ns)   # noqa: S307


def prefetched_chunks(n: int, chunk_rows: int, ch: int, stride: int) -> tuple[list[int], int]:
    """rows_prefetched's loop, replayed: (chunks computed in order, the chunk it returns); also
    checks that a chunk is computed only after its loads were issued, and issued once."""
    ns = {"N": n, "CHUNK_ROWS": chunk_rows, "__builtins__": {}}
    full = eval(FULL, ns)                            # noqa: S307
    if ch >= full:
        return [], ch
    issued, done = [ch], []
    while True:
        current = issued[-1]
        assert current == ch and current < full      # the registers hold chunk ch, a full one
        nxt = ch + stride
        if nxt < full:
            issued.append(nxt)
        done.append(ch)
        ch = nxt
        if ch >= full:
            assert issued == done
            return done, ch


def cover(n: int, threads: int, rows: int, grid: int, phase) -> list[int]:
    """Chunks each warp takes (phase, then the ordinary loop from where it returned), all warps."""
    nwarps, chunk_rows = threads // 32, 32 * rows
    nchunks = (n + chunk_rows - 1) // chunk_rows
    stride = grid * nwarps
    seen: list[int] = []
    for w in range(grid * nwarps):
        first, ch = phase(n, chunk_rows, w, stride)
        assert all(c * chunk_rows + chunk_rows <= n for c in first), "a pipelined chunk is partial"
        assert ch >= w and (ch - w) % stride == 0
        seen += first
        while ch < nchunks:
            seen.append(ch)
            ch += stride
    return seen


SHAPES = [1, 3, 17, 63, 64, 65, 128, 1000, 1003, 4099, 65537, 1000003, 3000017, 4194304]


@pytest.mark.parametrize("n", SHAPES)
@pytest.mark.parametrize("threads, rows, bpsm", [(256, 2, 4), (128, 1, 8), (512, 4, 2), (256, 4, 2)])
@pytest.mark.parametrize("phase", [ring_chunks, prefetched_chunks])
def test_every_chunk_taken_once(n: int, threads: int, rows: int, bpsm: int, phase) -> None:
    """The pipelined phase (full chunks only) plus the ordinary loop from where it stops take
    every chunk exactly once, over the launch's persistent grid."""
    chunk_rows = 32 * rows
    nwarps = threads // 32
    chunks = (n + chunk_rows - 1) // chunk_rows
    grid = max(1, min(SMS * bpsm, (chunks + nwarps - 1) // nwarps))     # grid_for
    seen = cover(n, threads, rows, grid, phase)
    assert sorted(seen) == list(range(chunks))


def test_chunk_cover_check_can_fail() -> None:
    """A phase that resumes one stride too early (re-taking its last chunk) is caught."""
    def off_by_one(n, chunk_rows, ch, stride):
        done, nxt = ring_chunks(n, chunk_rows, ch, stride)
        return done, nxt - stride if done else nxt
    seen = cover(1000003, 256, 2, 528, off_by_one)
    assert sorted(seen) != list(range((1000003 + 63) // 64))


def test_bulk_copies_aligned() -> None:
    """A ring chunk of C = CT rows starts a multiple of 128 bytes into logits and is a multiple
    of 16 bytes long (what cp.async.bulk needs, given a 16-byte-aligned logits)."""
    for rows, ct in itertools.product([1, 2, 4], range(2, 17)):
        m = Model(knobs(ROWS_PER_THREAD=rows), ct)
        ch_floats = m.CHUNK_ROWS * ct
        assert (ch_floats * 4) % 16 == 0
        assert all((c * ch_floats * 4) % 128 == 0 for c in (1, 7, 65535))


# ---- the ring: stages, mbarrier phases, waits ----------------------------------------------------

def ring_walk(mine: int, stages: int, parity_of=None):
    """rows_ring's stage/parity sequence for ``mine`` chunks: (stage, parity) per chunk k, and
    the chunks (re)issued into each stage after chunk k is read. ``parity_of`` overrides the
    kernel's rule (for the can-fail test)."""
    s, parity, waits, reissue = 0, 0, [], {}
    for k in range(mine):
        waits.append((s, parity if parity_of is None else parity_of(k, stages)))
        if k + stages < mine:
            reissue[k] = (s, k + stages)
        s += 1
        if s == stages:
            s, parity = 0, parity ^ 1
    prologue = [(k, k) for k in range(min(stages, mine))]               # (stage, chunk)
    return waits, reissue, prologue


def simulate_ring(mine: int, stages: int, rng: random.Random, parity_of=None) -> None:
    """One warp's ring against an mbarrier model (PTX: a phase completes when its one arrival
    and its expected bytes are in; try_wait.parity(p) succeeds once the phase of parity p has
    completed, i.e. while the current phase's parity differs from p). Copies land after random
    delays; a wait that succeeds must find the chunk it expects in the stage."""
    waits, reissue, prologue = ring_walk(mine, stages, parity_of)
    completed = [0] * stages                         # phases completed per stage barrier
    content = [None] * stages                        # the chunk a stage holds once landed
    inflight: dict[int, int] = {}                    # stage -> chunk of its outstanding copy
    for s, c in prologue:
        inflight[s] = c
    for k in range(mine):
        s, p = waits[k]
        # random other copies land first; the warp spins until stage s's phase of parity p is done
        for other in list(inflight):
            if other != s and rng.random() < 0.5:
                content[other] = inflight.pop(other)
                completed[other] += 1
        while (completed[s] & 1) == p:               # try_wait.parity(p) fails
            assert s in inflight, f"chunk {k}: waits on stage {s} with no copy in flight (hang)"
            content[s] = inflight.pop(s)
            completed[s] += 1
        assert content[s] == k, f"chunk {k} read stage {s} holding chunk {content[s]}"
        if k in reissue:
            st, c = reissue[k]
            assert st == s and st not in inflight, "a stage re-armed while a copy into it is in flight"
            inflight[st] = c
    assert not inflight, "copies still in flight when the ring returns"


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("mine", [1, 2, 3, 4, 5, 6, 7, 11, 31, 32])
def test_ring_parity_and_stages(stages: int, mine: int) -> None:
    rng = random.Random(f"{stages}:{mine}")
    for _ in range(20):
        simulate_ring(mine, stages, rng)


def test_ring_parity_check_can_fail() -> None:
    """Waiting with parity k & 1 (no per-stage phase count) reads a stage before its copy lands
    (or hangs) as soon as a stage is reused: the model catches it; so does a constant parity 0."""
    for wrong in (lambda k, stages: k & 1, lambda k, stages: 0):
        with pytest.raises(AssertionError):
            for seed in range(10):
                simulate_ring(9, 3, random.Random(seed), wrong)


# ---- shared memory and register gates, from the source's constexpr math ------------------------

def _space():
    for t, rows, bpsm, stages in itertools.product([128, 256, 512], [1, 2, 4], [2, 4, 8], [2, 3]):
        if t * bpsm <= 2048:
            yield knobs(THREADS=t, ROWS_PER_THREAD=rows, BLOCKS_PER_SM=bpsm, PIPE_STAGES=stages, PREFETCH=2)


def test_ring_shared_memory_fits() -> None:
    """Where a C = CT instantiation has the ring: a block of it fits (opted in), its stages lie in
    the warp's region, the fallback's skewed slice too, the warp regions and stages stay 16-byte
    aligned, the launch's dynamic size is within what the stage count was chosen for, and 3
    stages are used exactly where PIPE_STAGES 3 and BLOCKS_PER_SM blocks of 3 stages fit."""
    rings = 0
    for values in _space():
        for ct in range(2, 17):
            m = Model(values, ct)
            s = m.ring_stages()
            per_block = lambda k: m.ring_block_bytes(k) + m.BLOCK_SMEM_RESERVED   # noqa: E731
            fits3 = values["BLOCKS_PER_SM"] * per_block(3) <= m.SM_SMEM_BYTES
            assert s == (3 if values["PIPE_STAGES"] == 3 and fits3 else 2), (values, ct)
            if not m.ring_ok():
                continue
            rings += 1
            assert ct % 4 != 0
            region = m.ring_floats(s)
            ch = m.CHUNK_ROWS * ct
            assert s * ch <= region and m.slice_floats(ct) <= region
            assert region % 4 == 0 and ch % 4 == 0
            dynamic = m.NWARPS * region * 4                 # launch_rows' smem
            bars_and_sh = m.NWARPS * (s * 8 + 4) + 1       # + the bool `last`
            assert dynamic + bars_and_sh <= m.ring_block_bytes(s) <= m.BLOCK_SMEM_MAX
    assert rings > 100


def test_defaults_take_the_new_paths_at_c10() -> None:
    """At the default knobs (and C = 10, the benchmark) PREFETCH 1 and 2 are on: the register
    pipeline fits, the ring has 2 stages and 4 blocks of it fit an SM; C = 16 has no ring (its
    unskewed rows would conflict) and no pipeline at the defaults (ptxas spilled it)."""
    m = Model(knobs(PREFETCH=2), 10)
    assert m.prefetch_fits() and m.ring_ok() and m.ring_stages() == 2
    assert 4 * (m.ring_block_bytes(2) + m.BLOCK_SMEM_RESERVED) <= m.SM_SMEM_BYTES
    m16 = Model(knobs(PREFETCH=2), 16)
    assert not m16.ring_ok() and not m16.prefetch_fits()
    m3 = Model(knobs(PREFETCH=2, PIPE_STAGES=3, ROWS_PER_THREAD=1), 10)
    assert m3.ring_stages() == 3                          # 1 row a lane: 3 stages fit 4 blocks


def test_register_gates() -> None:
    """REG_CAP is __launch_bounds__' budget; the pipeline's prefetched registers stay within it
    and the ring is off at 32 registers except one row a lane with C <= 12."""
    for values in _space():
        m = Model(values, 10)
        want = min(255, 65536 // (values["THREADS"] * values["BLOCKS_PER_SM"]) // 8 * 8)
        assert m.REG_CAP == want
        for ct in range(2, 17):
            mc = Model(values, ct)
            pv = (8 * values["ROWS_PER_THREAD"] * ct + 31) // 32
            if mc.prefetch_fits():
                assert 4 * pv + values["ROWS_PER_THREAD"] + ct <= want - 21
            if mc.ring_ok() and want < 64:
                assert values["ROWS_PER_THREAD"] == 1 and ct <= 12


def test_translator_can_fail() -> None:
    """The C-to-Python reading of the source keeps ?: and precedence (a wrong reading is caught)."""
    assert eval(_py("3 > 2 ? 4 : 5") , {}) == 4                         # noqa: S307
    assert eval(_py("(1 == 3 && 2 > 1 ? 3 : 2) * 7 / 2"), {}) == 7      # noqa: S307
    assert eval(_py("(33 * 2 * 10 + 3) & ~3"), {}) == 660                # noqa: S307
    assert eval(_py("0 || (1 && 2 <= 1)"), {}) in (False, 0)            # noqa: S307


def test_knob_lines() -> None:
    assert KNOBS["PREFETCH"].choices == ("0", "1", "2") and KNOBS["PREFETCH"].value == "0"
    assert KNOBS["PIPE_STAGES"].choices == ("2", "3")
