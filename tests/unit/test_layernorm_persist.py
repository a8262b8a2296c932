"""layernorm/regime's persistent cluster regime (CLUSTER_PERSIST 1), replayed on the CPU.

1. The host's plan (cluster size, chunk, two buffers of CLUSTER_SMEM_KB / 2) and each CTA's index
   math (register part, CPIECES bulk copies into buffer 0 or 1, the write pass): every column is
   read and written once, both buffers stay inside the launch's dynamic shared memory, 16-byte
   granular and 16-byte aligned.
2. The row schedule: nclusters = min(co-resident clusters, ceil(rows / CLUSTER_PERSIST_ROWS)),
   cluster cid takes rows cid, cid + nclusters, ...: every row once, by one cluster.
3. A discrete-event simulation of a cluster running the kernel's synchronisation (CTA barriers,
   reused mbarriers waited on by parity, asynchronous bulk copies landing at random moments, the
   double-buffered DSMEM states, the cluster barriers, the final arrive / wait before exit) under
   random interleavings: every read of a buffer sees the row it expects, every DSMEM read sees the
   peer's state of the same row while the peer is alive, nothing deadlocks. Mutated schedules
   (wrong parity, no barrier before re-filling a buffer, a single state slot, no final cluster
   barrier) are caught by the same checker, so the checks can fail.
"""
from __future__ import annotations

import itertools
import random
import re
from pathlib import Path

import numpy as np
import pytest

from evo_fsr.knobs import parse_knobs, set_knobs
from evo_fsr.tasks import get_task
from tests.gpu.test_families_b_gpu import COMBOS

from knob_checks import constraints, valid  # noqa: E402
from test_cluster_rows import _plan as _cluster_plan  # noqa: E402  (run_cluster's choice)

SRC = get_task("layernorm").seeds()["regime"]


def _define(name: str) -> int:
    m = re.search(rf"^#define {name} (\d+)", SRC, re.M)
    assert m, f"#define {name} missing from layernorm/regime.cu"
    return int(m.group(1))


CPIECES = _define("CPIECES")
PERSIST_ROWS = _define("CLUSTER_PERSIST_ROWS")
SHAPES = [(1, 1024), (4, 1024), (33, 1000), (2, 4100), (3, 65536), (256, 65536), (7, 262144), (5, 8196)]


# ---- 1. plan and index math -------------------------------------------------------------------

def _persist_plan(cols: int, kb: int, reg_floats: int) -> tuple[int, int, int] | None:
    """run_cluster_persist's choice: (cl, chunk, bytes a buffer), or None (falls back)."""
    return _cluster_plan(cols, kb, reg_floats, buffers=2)


def _cta_persist(cols: int, chunk: int, rank: int, t: int, reg: int, buf_bytes: int, b: int):
    """One CTA's columns for one row as layernorm_cluster_persist<4> indexes them: (register-part
    columns, bulk-copied columns, their shared-memory float slots in buffer b, write columns,
    shared-memory slots the pass-2 / write loops read)."""
    v = 4
    c0 = min(rank * chunk, cols)
    n = min(chunk, cols - c0)
    nv = n // v
    rv, rf = reg // v, reg * t
    ns = n - rf if n > rf else 0
    q = ns // 4
    stride = chunk - rf if chunk > rf else 0
    assert stride * 4 == buf_bytes and ns <= stride
    tid = np.arange(t)
    j = (np.arange(rv)[:, None] * t + tid[None, :]).ravel()
    j = j[j < nv]
    reg_cols = (c0 + j[:, None] * v + np.arange(v)[None, :]).ravel()
    copied, slots = [], []
    for p in range(CPIECES):
        u0, u1 = q * p // CPIECES, q * (p + 1) // CPIECES
        dst = b * stride + 4 * u0                      # floats from the start of dynamic smem
        src = c0 + rf + 4 * u0                         # columns of the row
        assert dst % 4 == 0 and src % 4 == 0 and (u1 - u0) * 16 % 16 == 0
        copied.append(np.arange(src, src + 4 * (u1 - u0)))
        slots.append(np.arange(dst, dst + 4 * (u1 - u0)))
    j = np.arange(rv * t, max(nv, rv * t))
    smem_read = (b * stride + (j[:, None] * v - rf) + np.arange(v)[None, :]).ravel()
    writes = np.concatenate([reg_cols, (c0 + j[:, None] * v + np.arange(v)[None, :]).ravel()])
    return reg_cols, np.concatenate(copied), np.concatenate(slots), writes, smem_read


def _knob_ints(name: str) -> list[int]:
    return [int(c) for c in parse_knobs(SRC)[name].choices]


def test_persist_knob_declared() -> None:
    knobs = parse_knobs(SRC)
    assert list(knobs["CLUSTER_PERSIST"].choices) == ["0", "1"]
    assert knobs["CLUSTER_PERSIST"].value == "0"


def test_long_rows_persist_plans() -> None:
    """The plans the header quotes (CLUSTER_SMEM_KB is the CTA's total: two buffers of half)."""
    assert _persist_plan(65536, 32, 0) == (16, 4096, 16384)
    assert _persist_plan(65536, 64, 0) == (8, 8192, 32768)
    assert _persist_plan(65536, 128, 0) == (4, 16384, 65536)
    assert _persist_plan(65536, 64, 16 * 256) == (8, 8192, 16384)
    assert _persist_plan(65536, 128, 16 * 256) == (4, 16384, 49152)
    assert _persist_plan(65536, 16, 0) is None        # falls back to one cluster a row (16 x 16 KB)
    assert _persist_plan(1000, 16, 0) == (2, 500, 2000)


def test_persist_plan_covers_every_column_once() -> None:
    checked = 0
    for kb, t, reg in itertools.product(_knob_ints("CLUSTER_SMEM_KB"), _knob_ints("CLUSTER_THREADS"),
                                        _knob_ints("CLUSTER_REG")):
        if kb == 0 or reg * t > 16384:
            continue
        for _, cols in SHAPES:
            assert cols % 4 == 0                       # the persistent path needs float4 rows
            plan = _persist_plan(cols, kb, reg * t)
            if plan is None:
                continue
            cl, chunk, buf = plan
            smem = 2 * buf
            assert smem <= kb * 1024 and buf % 16 == 0 and chunk % 4 == 0
            for b in (0, 1):
                reads, writes, all_slots = [], [], []
                for rank in range(cl):
                    reg_cols, copied, slots, wr, smem_read = _cta_persist(cols, chunk, rank, t, reg, buf, b)
                    reads += [reg_cols, copied]
                    writes.append(wr)
                    assert slots.size == 0 or (slots.min() >= b * buf // 4 and slots.max() < (b + 1) * buf // 4)
                    assert np.unique(slots).size == slots.size
                    assert np.array_equal(np.sort(slots), np.sort(smem_read))   # reads what landed
                    all_slots.append(slots)
                assert np.array_equal(np.sort(np.concatenate(reads)), np.arange(cols)), (kb, t, reg, cols, b)
                assert np.array_equal(np.sort(np.concatenate(writes)), np.arange(cols)), (kb, t, reg, cols, b)
            checked += 1
    assert checked > 50


def test_index_check_can_fail() -> None:
    """A buffer stride one float4 short makes buffer 1 overlap buffer 0: the slot check fires."""
    cl, chunk, buf = _persist_plan(65536, 64, 0)
    _, _, slots, _, _ = _cta_persist(65536, chunk, 0, 256, 0, buf, 1)
    assert slots.min() >= buf // 4
    assert not (slots - 4).min() >= buf // 4


# ---- 2. row schedule --------------------------------------------------------------------------

def _nclusters(rows: int, active: int) -> int:
    return min(active, -(-rows // PERSIST_ROWS))


def _rows_of(cid: int, rows: int, ncl: int) -> list[int]:
    """for (row = cid; row < rows; row += nclusters), with `last` = row >= rows - nclusters."""
    out, row = [], cid
    while row < rows:
        out.append(row)
        row += ncl
    return out


PAIRS = [(1, 50), (3, 50), (4, 1), (33, 50), (33, 5), (256, 49), (256, 33), (256, 64), (255, 64), (7, 2),
         (263, 50), (100, 100), (17, 3)]


@pytest.mark.parametrize("rows, active", PAIRS)
def test_every_row_once(rows: int, active: int) -> None:
    ncl = _nclusters(rows, active)
    assert 1 <= ncl <= rows and ncl <= active
    seen = []
    for cid in range(ncl):
        mine = _rows_of(cid, rows, ncl)
        assert mine, "a launched cluster without a row"
        lasts = [row >= rows - ncl for row in mine]
        assert lasts == [False] * (len(mine) - 1) + [True]          # `last` on its final row only
        for k, row in enumerate(mine[:-1]):
            assert mine[k + 1] == row + ncl                          # the prefetched row is the next
        seen += mine
    assert sorted(seen) == list(range(rows))


def test_validation_shape_runs_a_ragged_loop() -> None:
    """33 rows (task.yaml's 33 x 1000): 9 clusters when >= 9 fit, 33 % 9 != 0, up to 4 rows each
    (both buffers, both parities)."""
    ncl = _nclusters(33, 200)
    assert ncl == 9 and 33 % ncl != 0
    assert max(len(_rows_of(c, 33, ncl)) for c in range(ncl)) == 4


def test_row_schedule_check_can_fail() -> None:
    """Clusters stepping by nclusters + 1 miss rows: the coverage comparison catches it."""
    rows, ncl = 33, 9
    seen = sorted(r for cid in range(ncl) for r in range(cid, rows, ncl + 1))
    assert seen != list(range(rows))


# ---- 3. synchronisation, simulated ------------------------------------------------------------

class Violation(AssertionError):
    pass


def interleave(threads: dict, in_flight: list, land, rng: random.Random, ctas: int) -> None:  # type: ignore[type-arg]
    """Run the simulated threads (generators keyed (cta, warp), each yielding the condition it waits
    on) and land the asynchronous copies in ``in_flight`` (``land(i)``) in a random order: each CTA
    and the copy engine at its own speed this run, so that some race ahead of others. A state where
    nothing can move is a deadlock."""
    live = dict(threads)
    ready: dict = {key: (lambda: True) for key in live}  # type: ignore[type-arg]
    speed = [rng.choice((0.02, 1.0, 50.0)) for _ in range(ctas)]
    copy_speed = rng.choice((0.05, 1.0, 20.0))
    while live or in_flight:
        runnable = [key for key in live if ready[key]()]
        choices = [("t", key) for key in runnable] + [("c", i) for i in range(len(in_flight))]
        if not choices:
            raise Violation(f"deadlock: {sorted(live)} blocked")
        weights = [speed[what[0]] if kind == "t" else copy_speed for kind, what in choices]
        kind, what = rng.choices(choices, weights)[0]
        if kind == "c":
            land(what)
            continue
        try:
            ready[what] = next(live[what])
        except StopIteration:
            del live[what]


class ClusterSim:
    """One cluster of `cl` CTAs of `t` threads (thread 0 issues the copies and, standing for warp
    0, reads the DSMEM states) running layernorm_cluster_persist's synchronisation over `rows`
    (the cluster's rows). Bulk copies land at random moments; the scheduler interleaves threads at
    random. `mutation` breaks one rule: 'parity' (wait on parity k & 1), 'no_sync' (no
    __syncthreads before re-filling a buffer), 'one_slot' (a single DSMEM state), 'no_exit_barrier'
    (no cluster barrier before exit)."""

    def __init__(self, cl: int, t: int, rows: list[int], pieces: int, rng: random.Random, mutation: str = ""):
        self.cl, self.t, self.rows, self.pieces, self.rng, self.mutation = cl, t, rows, pieces, rng, mutation
        # per CTA: buffer tags [b][p] (None: never filled; ('flight', row); ('row', row))
        self.tag = [[[None] * pieces for _ in range(2)] for _ in range(cl)]
        self.phase = [[[0] * pieces for _ in range(2)] for _ in range(cl)]       # completed phases
        self.pending = [[[1] * pieces for _ in range(2)] for _ in range(cl)]     # arrivals left
        self.tx = [[[0] * pieces for _ in range(2)] for _ in range(cl)]          # copies in flight
        self.copies: list[tuple[int, int, int, int]] = []                        # (cta, b, p, row)
        self.part = [[None, None] for _ in range(cl)]
        self.exited = [0] * cl
        self.cta_bar = [[0, 0] for _ in range(cl)]                               # (arrived, generation)
        self.cl_arrivals = 0
        self.cl_phase = 0
        self.written: list[tuple[int, int]] = []
        self.threads = {(c, i): self._thread(c, i) for c in range(cl) for i in range(self.t)}
        self.blocked: dict[tuple[int, int], object] = {}

    # -- primitives (generators yield a predicate: the thread runs on once it holds) --
    def _issue(self, c: int, b: int, row: int) -> None:
        for p in range(self.pieces):
            self.pending[c][b][p] -= 1
            assert self.pending[c][b][p] == 0, "arrive.expect_tx on a phase already arrived on"
            self.tx[c][b][p] += 1
            self.tag[c][b][p] = ("flight", row)
            self.copies.append((c, b, p, row))

    def _land(self, i: int) -> None:
        c, b, p, row = self.copies.pop(i)
        if self.tag[c][b][p] != ("flight", row):
            raise Violation(f"CTA {c}: two copies in flight into buffer {b}")
        self.tag[c][b][p] = ("row", row)
        self.tx[c][b][p] -= 1
        if self.tx[c][b][p] == 0 and self.pending[c][b][p] == 0:
            self.phase[c][b][p] += 1
            self.pending[c][b][p] = 1

    def _read(self, c: int, b: int, row: int) -> None:
        for p in range(self.pieces):
            if self.tag[c][b][p] != ("row", row):
                raise Violation(f"CTA {c} reads buffer {b} for row {row}, holds {self.tag[c][b][p]}")

    def _syncthreads(self, c: int):
        bar = self.cta_bar[c]
        gen = bar[1]
        bar[0] += 1
        if bar[0] == self.t:
            bar[0], bar[1] = 0, gen + 1
        yield lambda: self.cta_bar[c][1] > gen

    def _cluster_arrive(self) -> int:
        """barrier.cluster.arrive: the phase this arrival belongs to (every thread waits on it
        before arriving again, so arrivals fill the phases in order)."""
        self.cl_arrivals += 1
        mine = (self.cl_arrivals - 1) // (self.cl * self.t)
        if self.cl_arrivals % (self.cl * self.t) == 0:
            self.cl_phase += 1
        return mine

    def _thread(self, c: int, tid: int):
        rows, mut = self.rows, self.mutation
        if tid == 0:
            self._issue(c, 0, rows[0])
        yield from self._syncthreads(c)
        arrived = None
        for k, row in enumerate(rows):
            b = k & 1
            last = k == len(rows) - 1
            if k > 0 and mut != "no_sync":
                yield from self._syncthreads(c)
            if tid == 0 and not last:
                self._issue(c, b ^ 1, rows[k + 1])
            parity = (k & 1) if mut == "parity" else ((k >> 1) & 1)
            for p in range(self.pieces):
                yield lambda p=p: self.phase[c][b][p] % 2 != parity            # try_wait.parity
                if self.tag[c][b][p] != ("row", row):
                    raise Violation(f"CTA {c} thread {tid}: wait returned, buffer {b} piece {p} holds "
                                    f"{self.tag[c][b][p]}, row {row} expected")
            yield from self._syncthreads(c)                                     # block_sum 1
            self._read(c, b, row)                                               # pass 2
            yield from self._syncthreads(c)                                     # block_sum 2
            slot = 0 if mut == "one_slot" else b
            if tid == 0:
                self.part[c][slot] = row
            ph = self._cluster_arrive()                                         # cluster.sync
            yield lambda ph=ph: self.cl_phase > ph
            if tid == 0:
                for peer in range(self.cl):
                    if self.exited[peer] == self.t:
                        raise Violation(f"CTA {c} reads the state of CTA {peer}, which has exited")
                    if self.part[peer][slot] != row:
                        raise Violation(f"CTA {c} reads CTA {peer}'s state of row {self.part[peer][slot]}, "
                                        f"row {row} expected")
                yield lambda: True                                              # the reads take time
            yield from self._syncthreads(c)
            if last and mut != "no_exit_barrier":
                arrived = self._cluster_arrive()
            self._read(c, b, row)                                               # write pass
            yield lambda: True
            self._read(c, b, row)
            if tid == 0:
                self.written.append((row, c))
        if arrived is not None:
            yield lambda: self.cl_phase > arrived
        self.exited[c] += 1

    def run(self) -> None:
        interleave(self.threads, self.copies, self._land, self.rng, self.cl)
        for c in range(self.cl):
            for b in range(2):
                assert all(x == 0 for x in self.tx[c][b])


def _simulate(cl: int, t: int, rows: list[int], seed: int, mutation: str = "") -> list[tuple[int, int]]:
    sim = ClusterSim(cl, t, rows, 2, random.Random(seed), mutation)
    sim.run()
    return sim.written


@pytest.mark.parametrize("rows, active", [(1, 50), (4, 1), (33, 50), (33, 5), (17, 3), (11, 2)])
def test_simulated_clusters_write_every_row_once(rows: int, active: int) -> None:
    ncl = _nclusters(rows, active)
    cl = 3
    for seed in range(12):
        written = []
        for cid in range(ncl):
            written += _simulate(cl, 3, _rows_of(cid, rows, ncl), seed * 1000 + cid)
        assert sorted(written) == sorted((r, c) for r in range(rows) for c in range(cl))


def test_simulated_cluster_many_rows() -> None:
    for seed in range(150):
        rng = random.Random(seed)
        n = rng.randint(1, 9)
        _simulate(rng.choice([2, 3, 4]), rng.choice([1, 2, 3]), list(range(0, 5 * n, 5)), seed)


@pytest.mark.parametrize("mutation", ["parity", "no_sync", "one_slot", "no_exit_barrier"])
def test_simulation_catches_broken_synchronisation(mutation: str) -> None:
    caught = 0
    for seed in range(300):
        try:
            _simulate(3, 3, list(range(6)), seed, mutation)
        except Violation:
            caught += 1
    assert caught > 0, f"the simulation never caught mutation {mutation!r}"


# ---- 4. the kernel's text still follows the replayed rules ---------------------------------------

def _persist_kernel() -> str:
    start = SRC.index("layernorm_cluster_persist(")
    return SRC[start:SRC.index("// ---- dispatch", start)]


def test_kernel_text_matches_the_replay() -> None:
    body = re.sub(r"//[^\n]*", "", _persist_kernel())
    assert "(unsigned)(k >> 1) & 1u" in body                              # parity of the j-th fill
    assert "bar[b * CPIECES + p]" in body                                 # one mbarrier set a buffer
    assert "issue(row + nclusters, b ^ 1)" in body and "issue(cid, 0)" in body
    assert re.search(r"if \(k > 0\) \{\s*asm volatile\(\"fence\.proxy\.async\.shared::cta;\"[^;]*;\s*"
                     r"__syncthreads\(\);", body)                           # before re-filling b ^ 1
    assert "part[b] = make_float4" in body and "cluster_row_total(cluster, &part[b]," in body   # slot b merged
    assert re.search(r"if \(last\) cluster\.barrier_arrive\(\);", body)
    assert re.search(r"\}\s*cluster\.barrier_wait\(\);\s*\}\s*$", body)   # after the loop, at exit
    host = SRC[SRC.index("static bool run_cluster_persist("):]
    assert "CLUSTER_SMEM_KB * 1024" in host and "kSmemMax / 2" in host
    assert "CLUSTER_PERSIST_ROWS - 1) / CLUSTER_PERSIST_ROWS" in host
    rows_fn = SRC[SRC.index("static void run_rows("):]
    assert rows_fn.index("run_cluster_persist<V>") < rows_fn.index("run_cluster<V>")   # then the fallback


# ---- 5. which validation shapes take the persistent path ----------------------------------------

#: the GPU suite's CLUSTER_PERSIST combinations with the cluster barriers (tests/gpu/test_families_b_gpu.py):
#: three that take the persistent path on the validation shapes, then the CLUSTER_TMA 0 and VEC 2 fallbacks
GPU_COMBOS = [c for c in COMBOS[("layernorm", "regime")]
              if c.get("CLUSTER_PERSIST") == "1" and c.get("CLUSTER_XCHG") == "0"]
#: the persistent path with the st.async exchange (CLUSTER_XCHG 1, tests/unit/test_cluster_exchange.py)
GPU_XCHG_COMBOS = [c for c in COMBOS[("layernorm", "regime")]
                   if c.get("CLUSTER_PERSIST") == "1" and c.get("CLUSTER_XCHG") == "1"]


def _path(rows: int, cols: int, k: dict[str, int], sms: int = 132) -> str:
    """launch()'s choice on 16-byte aligned buffers (the Evaluator's)."""
    if cols <= 32 * k["WARP_ITEMS"]:
        return "warp"
    v = next(w for w in (4, 2, 1) if w <= k["VEC"] and cols % w == 0)
    if cols <= k["THREADS"] * k["ITEMS"]:
        return "cached"
    if rows < 2 * sms and k["CLUSTER_SMEM_KB"] > 0:
        reg = k["CLUSTER_REG"] * k["CLUSTER_THREADS"]
        if (k["CLUSTER_PERSIST"] and k["CLUSTER_TMA"] and v == 4
                and _persist_plan(cols, k["CLUSTER_SMEM_KB"], reg) is not None):
            return "persist"
        if _cluster_plan(cols, k["CLUSTER_SMEM_KB"], reg) is not None:
            return "cluster"
    return "split/looped"


def test_gpu_combos_reach_the_persistent_path() -> None:
    assert len(GPU_COMBOS) == 5
    task = get_task("layernorm")
    rules = constraints(SRC)
    paths = []
    for values in GPU_COMBOS:
        changed = set_knobs(SRC, values)
        k = {name: int(knob.value) for name, knob in parse_knobs(changed).items()}
        assert valid(rules, {n: str(v) for n, v in k.items()}), values
        paths.append({(s.env["rows"], s.env["cols"]): _path(s.env["rows"], s.env["cols"], k)
                      for s in task.validation})
    for shape_paths in paths[:3]:
        assert shape_paths[(33, 1000)] == "persist" and shape_paths[(4, 1024)] == "persist"
    assert paths[0][(3, 65537)] == paths[2][(3, 65537)] == "cluster"   # cols % 4 != 0: the fallback
    assert paths[1][(3, 65537)] == "split/looped"                       # 16 KB: 16 chunks too long
    for shape_paths in paths[3:]:
        assert "persist" not in shape_paths.values() and "cluster" in shape_paths.values()
    defaults = {name: int(knob.value) for name, knob in parse_knobs(SRC).items()}
    assert _path(256, 65536, defaults) == "cluster"
    assert _path(256, 65536, {**defaults, "CLUSTER_PERSIST": 1}) == "persist"
    assert _path(256, 65536, {**defaults, "CLUSTER_PERSIST": 1, "CLUSTER_SMEM_KB": 16}) == "cluster"


def test_the_exchange_combo_reaches_the_persistent_path_with_both_buffers() -> None:
    assert len(GPU_XCHG_COMBOS) == 1
    k = {name: int(knob.value) for name, knob in parse_knobs(set_knobs(SRC, GPU_XCHG_COMBOS[0])).items()}
    assert k["CLUSTER_XCHG"] == 1
    assert _path(33, 1000, k) == "persist" and _path(4, 1024, k) == "persist"
    assert -(-33 // _nclusters(33, 132)) >= 2                        # two rows or more a cluster: both slot sets
