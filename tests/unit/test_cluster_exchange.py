"""CLUSTER_XCHG 1 of layernorm's and softmax's ``regime`` seeds: the cluster regimes' per-CTA states
exchanged by st.async into every CTA's own shared memory (an exchange mbarrier a CTA, relaxed cluster
barriers only) instead of DSMEM reads between release/acquire cluster barriers. CPU only:

1. the knob (declared 0 1, default 0, mirrored by a static_assert) and the knob spaces: at least 70 %
   of the combinations valid, counted exactly;
2. nvcc (skipped without it): every CLUSTER_XCHG 1 combination of the GPU suite's COMBOS, and the
   persistent layernorm kernel with CLUSTER_XCHG 1, compile for sm_90 without warnings; the PTX of
   the cluster kernels has st.async and only relaxed cluster arrives at CLUSTER_XCHG 1, and no st.async
   and release arrives at CLUSTER_XCHG 0;
3. the GPU suite's CLUSTER_XCHG 1 combinations send validation shapes into the cluster regime
   (launch()'s dispatch, replayed), with and without bulk copies and register parts;
4. a NumPy replay of the exchange's merge in float32: every destination CTA fills its slots in a random
   arrival order and merges them in slot order, which gives the bits of test_cluster_rows.py's
   reference merge (rank order) exactly; merging in arrival order instead does not (so the check can
   fail);
5. a discrete-event simulation of layernorm_cluster_persist's CLUSTER_XCHG 1 synchronisation (two slot
   sets, two reused mbarriers armed row by row, st.asyncs landing at random moments, the relaxed
   cluster barriers at start and exit): every wait returns with all slots of its row, no slot is
   overwritten while read, no st.async reaches an uninitialised or exited CTA or outlives its sender,
   nothing deadlocks; mutated protocols (one mbarrier for both slot sets, one slot set, no barrier
   before the first st.async, none before exit) are caught, so the checks can fail. The kernel texts
   are checked to follow the simulated order.
"""
from __future__ import annotations

import itertools
import random
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from math import prod
from pathlib import Path

import numpy as np
import pytest

from evo_fsr.knobs import KnobSpace, parse_knobs, set_knobs
from evo_fsr.tasks import get_task
from evo_fsr.verdict.compile import compile_source, nvcc_path
from tests.gpu.test_families_b_gpu import COMBOS

from knob_checks import constraints, valid  # noqa: E402
from test_cluster_rows import _butterfly, _chan, _plan  # noqa: E402  (the reference merge and plan)
from test_layernorm_persist import Violation, interleave  # noqa: E402  (the simulated scheduler)

TASKS = ("layernorm", "softmax")
SMS = 132                                   # an H100: rows < 2 * SMs take the cluster regimes


def _src(task: str) -> str:
    return get_task(task).seeds()["regime"]


def _xchg_combos(task: str) -> list[dict[str, str]]:
    return [c for c in COMBOS[(task, "regime")] if c.get("CLUSTER_XCHG") == "1" and c.get("CLUSTER_PERSIST") != "1"]


def _code(src: str) -> str:
    return re.sub(r"//[^\n]*", "", src)


# ---- 1. the knob and the knob spaces ----------------------------------------------------------------

@pytest.mark.parametrize("task", TASKS)
def test_xchg_knob_declared_with_default_on(task: str) -> None:
    src = _src(task)
    knob = parse_knobs(src)["CLUSTER_XCHG"]
    assert knob.choices == ("0", "1") and knob.value == "1"   # the default since the H100 timing
    assert 'static_assert(CLUSTER_XCHG == 0 || CLUSTER_XCHG == 1' in src


def _valid_count(src: str) -> tuple[int, int]:
    """(valid, total) combinations, exactly: the constraints name few knobs, so enumerate those and
    multiply by the others' choices."""
    space = KnobSpace.of(src)
    named = set().union(*(c.names for c in space.constraints)) if space.constraints else set()
    constrained = [k for k in space.knobs if k.name in named]
    free = prod(len(k.choices) for k in space.knobs if k.name not in named)
    ok = sum(1 for values in itertools.product(*(k.choices for k in constrained))
             if all(c({k.name: int(v) for k, v in zip(constrained, values)}) for c in space.constraints))
    return ok * free, prod(len(k.choices) for k in space.knobs)


@pytest.mark.parametrize("task", TASKS)
def test_valid_fraction_at_least_70_percent(task: str, capsys: pytest.CaptureFixture[str]) -> None:
    ok, total = _valid_count(_src(task))
    with capsys.disabled():
        print(f"\n{task}/regime: {ok} of {total} combinations valid ({ok / total:.1%})")
    assert ok / total >= 0.70
    # the count is the brute force's: a random sample agrees within a few percent
    space = KnobSpace.of(_src(task))
    sample = space.valid_fraction(random.Random(3), sample=4000)
    assert abs(sample - ok / total) < 0.03


def test_valid_count_can_fail() -> None:
    """A constraint that forbids CLUSTER_XCHG 1 halves the count: the counter sees constraints."""
    src = _src("softmax")
    ok, total = _valid_count(src)
    ok2, total2 = _valid_count(src + "\n// constraint: CLUSTER_XCHG == 0\n")
    assert total2 == total and ok2 * 2 == ok


# ---- 2. nvcc ----------------------------------------------------------------------------------------

def _compile_cases() -> list[tuple[str, dict[str, str]]]:
    cases = [(task, c) for task in TASKS for c in _xchg_combos(task)]
    cases += [(task, {"CLUSTER_XCHG": "1"}) for task in TASKS]                      # the defaults
    # layernorm's persistent kernel with the exchange (the GPU suite's CLUSTER_PERSIST entries, which
    # take the persistent path, plus the default shape of the long_rows plan)
    persist = [c for c in COMBOS[("layernorm", "regime")] if c.get("CLUSTER_PERSIST") == "1"][:3]
    cases += [("layernorm", {**c, "CLUSTER_XCHG": "1"}) for c in persist]
    cases += [("layernorm", {"CLUSTER_XCHG": "1", "CLUSTER_PERSIST": "1", "CLUSTER_SMEM_KB": "64",
                             "CLUSTER_REG": "16"})]
    return cases


def test_xchg_combinations_compile_for_sm90(nvcc_available: bool, tmp_path: Path) -> None:
    cases = _compile_cases()
    assert len(cases) >= 10
    for task, values in cases:                       # valid before nvcc sees them
        changed = set_knobs(_src(task), values)
        current = {name: knob.value for name, knob in parse_knobs(changed).items()}
        assert valid(constraints(changed), current), (task, values)
    if not nvcc_available:
        pytest.skip("nvcc not found")
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda case: compile_source(set_knobs(_src(case[0]), case[1]),
                                                            get_task(case[0]).header(), "sm_90",
                                                            cache_dir=tmp_path), cases))
    failed = [(case, r.log[-1500:]) for case, r in zip(cases, results) if not r.ok]
    assert not failed, failed
    warned = [(case, [line for line in r.log.splitlines() if "warning" in line.lower()])
              for case, r in zip(cases, results)]
    assert not [w for w in warned if w[1]], warned


def _ptx(task: str, values: dict[str, str]) -> dict[str, str]:
    """The cluster kernels' PTX bodies, by entry name."""
    nvcc = nvcc_path()
    assert nvcc
    with tempfile.TemporaryDirectory(prefix="xchg-ptx-") as work:
        d = Path(work)
        (d / "contract.h").write_text(get_task(task).header())
        (d / "k.cu").write_text(set_knobs(_src(task), values))
        run = subprocess.run([nvcc, "-arch=sm_90", "-std=c++17", "-O3", "-ptx", "-include", str(d / "contract.h"),
                              str(d / "k.cu"), "-o", str(d / "k.ptx")], capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        ptx = (d / "k.ptx").read_text()
    bodies = {}
    for part in re.split(r"(?=^\.visible \.entry |^\.entry )", ptx, flags=re.M):
        match = re.match(r"(?:\.visible )?\.entry (\w+)", part)
        if match and "cluster" in match.group(1):
            bodies[match.group(1)] = part
    return bodies


@pytest.mark.parametrize("task", TASKS)
def test_ptx_uses_st_async_and_only_relaxed_arrives(task: str, nvcc_available: bool) -> None:
    if not nvcc_available:
        pytest.skip("nvcc not found")
    extra = {"CLUSTER_PERSIST": "1"} if task == "layernorm" else {}
    on, off = _ptx(task, {"CLUSTER_XCHG": "1", **extra}), _ptx(task, {"CLUSTER_XCHG": "0", **extra})
    assert len(on) == len(off) >= 3                  # V = 1, 2, 4 (and layernorm's persistent kernel)
    for name, body in on.items():
        arrives = re.findall(r"barrier\.cluster\.arrive[.\w]*;", body)
        assert arrives and all(".relaxed" in a for a in arrives), (name, arrives)
        assert "st.async.shared::cluster.mbarrier::complete_tx::bytes" in body, name
        assert "fence.mbarrier_init.release.cluster" in body, name
        assert re.search(r"mbarrier\.try_wait\.parity\.(relaxed|acquire)\.cluster", body), name
        assert not re.search(r"\bmembar\.|fence\.sc\.|fence\.acq_rel\.", body), name
    for name, body in off.items():
        assert "st.async" not in body, name
        assert any(".relaxed" not in a for a in re.findall(r"barrier\.cluster\.arrive[.\w]*;", body)), name


# ---- 3. the GPU suite's combinations reach the cluster regime -------------------------------------------

def _dispatch(task: str, rows: int, cols: int, k: dict[str, int]) -> tuple[str, int, int, str]:
    """launch()'s choice on 16-byte aligned buffers, one cluster a row: (regime, cluster size, vector
    width, how the shared part is loaded: 'bulk', 'staged' or 'regs' when the chunk is all in registers)."""
    if cols <= 32 * k["WARP_ITEMS"]:
        return "warp", 0, 0, ""
    v = next(w for w in (4, 2, 1) if w <= k["VEC"] and cols % w == 0)
    if cols <= k["THREADS"] * k["ITEMS"]:
        return "cached", 0, v, ""
    if rows < 2 * SMS and k["CLUSTER_SMEM_KB"] > 0 and not k.get("CLUSTER_PERSIST"):
        reg = k["CLUSTER_REG"] * k["CLUSTER_THREADS"]
        plan = _plan(cols, k["CLUSTER_SMEM_KB"], reg)
        if plan is not None:
            cl, chunk, _ = plan
            load = "regs" if chunk <= reg else ("bulk" if k["CLUSTER_TMA"] and v == 4 else "staged")
            return "cluster", cl, v, load
    return "split/looped", 0, v, ""


@pytest.mark.parametrize("task", TASKS)
def test_gpu_combinations_send_validation_shapes_through_the_exchange(task: str) -> None:
    combos = _xchg_combos(task)
    assert 2 <= len(combos) <= 4
    src = _src(task)
    reached = []
    for values in combos:
        k = {name: int(knob.value) for name, knob in parse_knobs(set_knobs(src, values)).items()}
        assert k["CLUSTER_XCHG"] == 1 and k.get("CLUSTER_PERSIST", 0) == 0   # one cluster a row
        paths = [_dispatch(task, s.env["rows"], s.env["cols"], k) for s in get_task(task).validation]
        clusters = [p for p in paths if p[0] == "cluster"]
        assert len(clusters) >= 2, (values, paths)
        reached.append((k, clusters))
    # one with a register part and bulk copies, one with register-staged loads, float4 bulk copies and
    # a cluster of 16 (16 slots) somewhere
    assert any(k["CLUSTER_REG"] > 0 and k["CLUSTER_TMA"] == 1 for k, _ in reached)
    assert any(k["CLUSTER_TMA"] == 0 and any(p[3] == "staged" for p in c) for k, c in reached)
    assert any(p[3] == "bulk" and p[2] == 4 for _, c in reached for p in c)
    assert any(p[1] == 16 for _, c in reached for p in c)
    assert any(p[1] == 2 for _, c in reached for p in c)


def test_dispatch_replay_can_fail() -> None:
    """CLUSTER_SMEM_KB 0 switches the regime off: no validation shape reaches it."""
    k = {name: int(knob.value) for name, knob in parse_knobs(_src("softmax")).items()}
    k["CLUSTER_SMEM_KB"] = 0
    assert all(_dispatch("softmax", s.env["rows"], s.env["cols"], k)[0] != "cluster"
               for s in get_task("softmax").validation)


# ---- 4. the merge of the received slots, replayed in float32 ----------------------------------------

F0 = np.float32(0.0)
LN_EMPTY = (F0, F0, F0)
SM_EMPTY = (np.float32(-np.inf), F0)


def _ln_merge(a, b):
    """The kernels' butterfly step for layernorm (test_cluster_rows._chan), empty lanes (0, 0, 0)."""
    return _chan(a or LN_EMPTY, b or LN_EMPTY)


def _sm_merge(a, b):
    """softmax/regime.cu's merge() in float32, empty lanes (-inf, 0)."""
    a, b = a or SM_EMPTY, b or SM_EMPTY
    mx = np.maximum(a[0], b[0])
    ea = F0 if a[0] == -np.inf else a[1] * np.exp(a[0] - mx)
    eb = F0 if b[0] == -np.inf else b[1] * np.exp(b[0] - mx)
    return mx, ea + eb


def _states(task: str, x: np.ndarray, cl: int, chunk: int) -> list[tuple]:
    """Each rank's float32 state of its chunk (an empty chunk: the empty state)."""
    out = []
    for rank in range(cl):
        c0 = min(rank * chunk, x.size)
        part = x[c0:c0 + chunk].astype(np.float32)
        if task == "layernorm":
            n = np.float32(part.size)
            mean = (part.sum(dtype=np.float32) / n) if part.size else F0
            out.append((n, mean, ((part - mean) ** 2).sum(dtype=np.float32) if part.size else F0))
        else:
            m = part.max() if part.size else np.float32(-np.inf)
            out.append((m, np.exp(part - m).sum(dtype=np.float32) if part.size else F0))
    return out


def _bits(state) -> bytes:
    return np.array(state, dtype=np.float32).tobytes()


def _exchange(states: list[tuple], rng: np.random.Generator, merge, in_arrival_order: bool = False):
    """Every destination CTA's merged state: the cl st.asyncs land in a random order; slot q takes rank
    q's state (the kernel) or, mutated, the next free slot (arrival order)."""
    cl = len(states)
    merged = []
    for _dst in range(cl):
        slots: list[tuple | None] = [None] * cl
        arrived = 0
        for src in rng.permutation(cl):
            slots[arrived if in_arrival_order else src] = states[src]
            arrived += 1
        assert all(s is not None for s in slots)     # the mbarrier completed: every slot landed
        merged.append(_butterfly(slots, merge))      # lane q <- slot q, one butterfly, lane 0's result
    return merged


SHAPES = [1025, 4099, 8195, 65536, 65537, 262144, 262147]


@pytest.mark.parametrize("task", TASKS)
def test_slot_order_merge_matches_the_reference_bit_for_bit(task: str) -> None:
    rng = np.random.default_rng(17)
    merge = _ln_merge if task == "layernorm" else _sm_merge
    checked = 0
    differs = 0
    for cols, kb, reg in itertools.product(SHAPES, (16, 32, 64, 192), (0, 4096)):
        plan = _plan(cols, kb, reg)
        if plan is None:
            continue
        cl, chunk, _ = plan
        x = rng.standard_normal(cols) * 3.0 + (7.0 if task == "layernorm" else 0.0)
        states = _states(task, x, cl, chunk)
        reference = _butterfly(states, merge)       # test_cluster_rows's merge, rank order
        assert all(np.asarray(v).dtype == np.float32 for v in reference)
        for _ in range(4):
            for got in _exchange(states, rng, merge):
                assert _bits(got) == _bits(reference), (task, cols, kb, reg)
            differs += any(_bits(got) != _bits(reference)
                           for got in _exchange(states, rng, merge, in_arrival_order=True))
        if task == "layernorm":                     # and it is the row's statistics
            assert reference[0] == cols
            np.testing.assert_allclose(reference[1], x.mean(), rtol=1e-5)
            np.testing.assert_allclose(reference[2] / cols, x.var(), rtol=1e-4)
        else:
            assert reference[0] == np.float32(x.max())
            np.testing.assert_allclose(reference[1], np.exp(x - x.max()).sum(), rtol=1e-4)
        checked += 1
    assert checked >= 10
    assert differs > 0, "merging in arrival order never changed a bit: the comparison cannot fail"


# ---- 5. layernorm_cluster_persist's exchange, simulated -----------------------------------------------


class XchgSim:
    """One cluster of `cl` CTAs of `warps` warps running layernorm_cluster_persist's CLUSTER_XCHG 1
    synchronisation over `nrows` rows (k = 0, 1, ...): thread 0 (warp 0) initialises xbar[0..1] and
    every warp arrives (relaxed) on the cluster barrier; per row, the CTA barriers (top of the row,
    the block reductions), the wait on the cluster barrier before row 0's st.asyncs, warp 0 arming
    xbar[b] (arrive + expect_tx of cl) and sending cl st.asyncs into slot set b of every CTA (landing
    at random moments, each completing one unit on its destination's xbar[b]), every warp waiting on
    xbar[b] for parity (k >> 1) & 1 and reading set b, and on the last row the relaxed arrive that is
    waited on before exit. `mutation`: 'one_bar' (xbar[0] for every row, parity k & 1), 'one_set'
    (slot set 0 for every row), 'no_init_barrier', 'no_exit_barrier'."""

    def __init__(self, cl: int, warps: int, nrows: int, rng: random.Random, mutation: str = ""):
        self.cl, self.warps, self.nrows, self.rng, self.mutation = cl, warps, nrows, rng, mutation
        self.slot = [[[None] * cl for _ in range(2)] for _ in range(cl)]     # [cta][set][src] = row
        self.phase = [[0, 0] for _ in range(cl)]                             # completed phases
        self.pending = [[1, 1] for _ in range(cl)]
        self.tx = [[0, 0] for _ in range(cl)]
        self.inited = [False] * cl
        self.flight: list[tuple[int, int, int, int, int]] = []              # (src, dst, set, bar, row)
        self.reading: set[tuple[int, int, int]] = set()                     # (cta, set, warp)
        self.exited = [0] * cl
        self.cta_bar = [[0, 0] for _ in range(cl)]
        self.cl_arrivals = 0
        self.cl_phase = 0
        self.merged: list[tuple[int, int]] = []
        self.threads = {(c, w): self._warp(c, w) for c in range(cl) for w in range(warps)}

    def _syncthreads(self, c: int):
        bar = self.cta_bar[c]
        gen = bar[1]
        bar[0] += 1
        if bar[0] == self.warps:
            bar[0], bar[1] = 0, gen + 1
        yield lambda: self.cta_bar[c][1] > gen

    def _cluster_arrive(self) -> int:
        self.cl_arrivals += 1
        mine = (self.cl_arrivals - 1) // (self.cl * self.warps)
        if self.cl_arrivals % (self.cl * self.warps) == 0:
            self.cl_phase += 1
        return mine

    def _complete(self, c: int, i: int) -> None:
        if self.pending[c][i] == 0 and self.tx[c][i] == 0:
            self.phase[c][i] += 1
            self.pending[c][i] = 1

    def _land(self, n: int) -> None:
        src, dst, b, i, row = self.flight.pop(n)
        if self.exited[dst] == self.warps:
            raise Violation(f"st.async of CTA {src} into CTA {dst}, which has exited")
        if any(c == dst and s == b for c, s, _ in self.reading):
            raise Violation(f"CTA {src}'s row-{row} state lands in slot set {b} of CTA {dst} while it is read")
        self.slot[dst][b][src] = row
        self.tx[dst][i] -= 1
        assert -(2 ** 20 - 1) <= self.tx[dst][i]
        self._complete(dst, i)

    def _warp(self, c: int, w: int):
        mut, cl = self.mutation, self.cl
        if w == 0:
            self.inited[c] = True                                         # xchg_init(xbar, 2)
        start = self._cluster_arrive()                                    # relaxed, waited before row 0
        yield lambda: True
        done = None
        for k in range(self.nrows):
            b = 0 if mut == "one_set" else k & 1
            i = 0 if mut == "one_bar" else k & 1
            parity = (k & 1) if mut == "one_bar" else (k >> 1) & 1
            if k > 0:
                yield from self._syncthreads(c)                           # top of the row
            yield from self._syncthreads(c)                               # the block reductions
            if k == 0 and mut != "no_init_barrier":
                yield lambda: self.cl_phase > start                       # cluster_wait_aligned()
            if w == 0:                                                    # xchg_send
                if self.pending[c][i] != 1:
                    raise Violation(f"CTA {c} arms xbar[{i}] twice in one phase")
                self.pending[c][i] = 0
                self.tx[c][i] += cl
                self._complete(c, i)
                for q in range(cl):
                    if not self.inited[q]:
                        raise Violation(f"CTA {c} writes into CTA {q} before its mbarriers are initialised")
                    self.flight.append((c, q, b, i, k))
            yield lambda: self.phase[c][i] % 2 != parity                  # xchg_wait
            for q in range(cl):
                if self.slot[c][b][q] != k:
                    raise Violation(f"CTA {c} warp {w}: row {k}'s wait returned, slot {q} of set {b} "
                                    f"holds row {self.slot[c][b][q]}")
            self.reading.add((c, b, w))                                   # xchg_row_total reads
            yield lambda: True
            if any(self.slot[c][b][q] != k for q in range(cl)):
                raise Violation(f"CTA {c}: slot set {b} changed while read")
            self.reading.discard((c, b, w))
            if w == 0:
                self.merged.append((k, c))
            if k == self.nrows - 1 and mut != "no_exit_barrier":
                done = self._cluster_arrive()                             # if (last) arrive.relaxed
            yield lambda: True                                            # the write pass
        if done is not None:
            yield lambda: self.cl_phase > done                            # cluster.barrier_wait()
        self.exited[c] += 1
        if self.exited[c] == self.warps and any(f[0] == c for f in self.flight):
            raise Violation(f"CTA {c} exits with its st.async in flight")

    def run(self) -> None:
        interleave(self.threads, self.flight, self._land, self.rng, self.cl)


def test_simulated_exchange_is_safe() -> None:
    for seed in range(400):
        rng = random.Random(seed)
        cl, warps, nrows = rng.choice((2, 3, 4)), rng.choice((1, 2, 3)), rng.randint(1, 7)
        sim = XchgSim(cl, warps, nrows, rng)
        sim.run()
        assert sorted(sim.merged) == sorted((k, c) for k in range(nrows) for c in range(cl))
        assert all(p == 1 for row in sim.pending for p in row) and all(t == 0 for row in sim.tx for t in row)


@pytest.mark.parametrize("mutation", ["one_bar", "one_set", "no_init_barrier", "no_exit_barrier"])
def test_simulation_catches_a_broken_exchange(mutation: str) -> None:
    caught = 0
    for seed in range(400):
        rng = random.Random(seed)
        try:
            XchgSim(3, rng.choice((1, 2)), 6, rng, mutation).run()
        except Violation:
            caught += 1
    assert caught > 0, f"the simulation never caught mutation {mutation!r}"


def _kernel(src: str, name: str) -> str:
    start = src.index(f"{name}(")
    end = src.index("\n}\n", start)
    return _code(src[start:end])


def _xchg_branch(body: str) -> str:
    start = body.index("if constexpr (CLUSTER_XCHG != 0) {\n", body.index("xchg_init"))
    return body[start:body.index("} else {", start)]


def _in_order(text: str, steps: list[str]) -> bool:
    at = 0
    for step in steps:
        found = text.find(step, at)
        if found < 0:
            return False
        at = found + len(step)
    return True


def test_kernel_texts_follow_the_simulated_order() -> None:
    ln, sm = _src("layernorm"), _src("softmax")
    persist = _kernel(ln, "layernorm_cluster_persist")
    assert "if (tid == 0) xchg_init(xbar, 2);" in persist
    branch = _xchg_branch(persist)
    assert _in_order(branch, ["if (k == 0) cluster_wait_aligned();",
                              "if (tid < 32) xchg_send(xslot[b], &xbar[b], rank, cl,",
                              "xchg_wait(&xbar[b], (unsigned)(k >> 1) & 1u);",
                              "xchg_row_total(xslot[b], cl, cols, eps);",
                              "if (last) cluster_arrive_relaxed();", "chunk_write<V>"]), branch
    assert re.search(r"\}\s*cluster\.barrier_wait\(\);\s*$", persist)              # waited before exit
    assert re.search(r"if \(k > 0\) \{\s*asm volatile\(\"fence\.proxy\.async\.shared::cta;\"[^;]*;\s*"
                     r"__syncthreads\(\);", persist)                                 # top of every row
    for body, args in ((_kernel(ln, "layernorm_cluster"), "xslot, &xbar, rank, cl, make_float4(cnt, mean, m2"),
                       (_kernel(sm, "softmax_cluster"), "xslot, &xbar, rank, cl, make_float2(m, s)")):
        assert _in_order(body, ["if (tid == 0) xchg_init(&xbar", "cluster_arrive_relaxed();",
                                "cluster_wait_aligned();", f"if (tid < 32) xchg_send({args}",
                                "xchg_wait(&xbar", "xchg_row_total(xslot, cl", "cluster_arrive_relaxed();",
                                "cluster_wait_aligned();"]), body[-1500:]
    for src in (ln, sm):
        helpers = _code(src[src.index("void xchg_send("):])
        assert "expect_tx.shared::cta.b64 _, [%0], %1;" in helpers           # the arming, thread 0
        assert "if (lane < cl)" in helpers and "mapa.shared::cluster.u32" in helpers
        assert "(unsigned)cl * " in helpers
