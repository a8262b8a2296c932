"""The thread-block-cluster regimes of layernorm's and softmax's ``regime`` seeds (issue 13), replayed
in NumPy: the host's plan (cluster size, chunk, dynamic shared memory) and each CTA's index math
(register part, shared-memory part by bulk-copy pieces or by staged loads, the write pass) for
every knob value of the regime, on the tasks' long-row shapes. Every column is read exactly once
and written exactly once, shared-memory offsets stay inside the launch's allocation, bulk copies
are 16-byte granular, and the per-chunk states merged like the kernels give the reference."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from evo_fsr.knobs import parse_knobs
from evo_fsr.tasks import get_task

CPIECES = 4
SHAPES = [(2, 1025), (3, 4099), (3, 65537), (2, 65536), (1, 262144), (2, 262147), (5, 8195)]


def _knob_values(task: str) -> dict[str, list[int]]:
    knobs = parse_knobs(get_task(task).seeds()["regime"])
    return {name: [int(v) for v in knobs[name].choices] for name in
            ("CLUSTER_SMEM_KB", "CLUSTER_THREADS", "CLUSTER_REG", "CLUSTER_TMA")}


def _plan(cols: int, kb: int, reg_floats: int, buffers: int = 1) -> tuple[int, int, int] | None:
    """run_cluster's choice: (cl, chunk, dynamic shared bytes), or None (regime does not apply).
    ``buffers`` 2: layernorm's run_cluster_persist, whose two chunk buffers share the CTA's
    CLUSTER_SMEM_KB (the bytes returned are one buffer's)."""
    for cl in (2, 4, 8, 16):
        chunk = -(-cols // cl)
        chunk = -(-chunk // 4) * 4
        smem = (chunk - reg_floats) * 4 if chunk > reg_floats else 0
        if smem <= kb * 1024 // buffers:
            return cl, chunk, smem
    return None


def _vec_cols(c0: int, j: np.ndarray, v: int) -> np.ndarray:
    """The columns of vectors j (a vector is v floats)."""
    return (c0 + j[:, None] * v + np.arange(v)[None, :]).ravel()


def _cta(cols: int, chunk: int, rank: int, v: int, t: int, reg: int, tma: int, smem_bytes: int):
    """Columns one CTA reads (register part, shared part) and writes, as the kernel indexes them."""
    c0 = min(rank * chunk, cols)
    n = min(chunk, cols - c0)
    nv = n // v
    rv, rf = reg // v, reg * t
    ns = nv * v - rf if nv * v > rf else 0
    tid = np.arange(t)
    reads, writes, smem_slots = [], [], []
    j = (np.arange(rv)[:, None] * t + tid[None, :]).ravel()   # register part: vector i * T + tid
    j = j[j < nv]
    reads.append(_vec_cols(c0, j, v))
    writes.append(_vec_cols(c0, j, v))
    if tma and v == 4:                                        # bulk copies of the shared part
        if ns > 0:
            assert ns % 4 == 0 and (c0 + rf) % 4 == 0
            q = ns // 4
            for p in range(CPIECES):
                u0, u1 = q * p // CPIECES, q * (p + 1) // CPIECES
                reads.append(np.arange(c0 + rf + 4 * u0, c0 + rf + 4 * u1))
                smem_slots.append(np.arange(4 * u0, 4 * u1))
    else:                                                     # staged loads of the shared part
        u = 16 // v
        base = np.arange(rv * t, max(nv, rv * t), u * t)[:, None] + tid[None, :]
        j = (base[:, :, None] + np.arange(u)[None, None, :] * t).ravel()
        j = j[(j < nv) & (base[:, :, None] < nv).repeat(u, axis=2).ravel()]
        reads.append(_vec_cols(c0, j, v))
        smem_slots.append(_vec_cols(-rf, j, v))
    j = np.arange(rv * t, max(nv, rv * t))                    # write pass of the shared part
    writes.append(_vec_cols(c0, j, v))
    slots = np.concatenate(smem_slots) if smem_slots else np.zeros(0, dtype=np.int64)
    wslots = _vec_cols(-rf, j, v)
    assert slots.size == 0 or (slots.min() >= 0 and (slots.max() + 1) * 4 <= smem_bytes)
    assert wslots.size == 0 or (wslots.min() >= 0 and (wslots.max() + 1) * 4 <= smem_bytes)
    assert np.unique(slots).size == slots.size
    assert np.array_equal(np.sort(slots), np.sort(wslots))   # the write pass reads what landed
    return c0, n, np.concatenate(reads), np.concatenate(writes)


def _chan(a, b):
    n1, m1, q1 = a
    n2, m2, q2 = b
    nt = n1 + n2
    if nt == 0:
        return a
    d = m2 - m1
    w = n2 / nt
    return nt, m1 + d * w, q1 + q2 + d * d * n1 * w


def _butterfly(states, merge):
    lanes = list(states) + [None] * (32 - len(states))
    off = 16
    while off:
        lanes = [merge(lanes[i], lanes[i ^ off]) for i in range(32)]
        off >>= 1
    return lanes[0]


@pytest.mark.parametrize("task", ["layernorm", "softmax"])
def test_cluster_plan_covers_every_column_once(task: str) -> None:
    values = _knob_values(task)
    rng = np.random.default_rng(13)
    checked = 0
    for kb, t, reg, tma in itertools.product(values["CLUSTER_SMEM_KB"], values["CLUSTER_THREADS"],
                                             values["CLUSTER_REG"], values["CLUSTER_TMA"]):
        if kb == 0 or reg * t > 16384:
            continue
        for rows, cols in SHAPES:
            plan = _plan(cols, kb, reg * t)
            if plan is None:
                continue
            cl, chunk, smem = plan
            assert smem <= kb * 1024 and chunk % 4 == 0
            v = 4 if cols % 4 == 0 else (2 if cols % 2 == 0 else 1)
            x = rng.standard_normal(cols) * 3.0 + 7.0
            states, seen_r, seen_w = [], [], []  # type: ignore[var-annotated]
            for rank in range(cl):
                c0, n, reads, writes = _cta(cols, chunk, rank, v, t, reg, tma, smem)
                seen_r.append(reads)
                seen_w.append(writes)
                part = x[c0:c0 + n]
                if task == "layernorm":
                    mean = part.mean() if n else 0.0
                    states.append((float(n), mean, float(((part - mean) ** 2).sum()) if n else 0.0))
                else:
                    m = part.max() if n else -np.inf
                    states.append((m, float(np.exp(part - m).sum()) if n else 0.0))
            assert np.array_equal(np.sort(np.concatenate(seen_r)), np.arange(cols)), (kb, t, reg, tma, cols)
            assert np.array_equal(np.sort(np.concatenate(seen_w)), np.arange(cols)), (kb, t, reg, tma, cols)
            if task == "layernorm":
                total = _butterfly(states, lambda a, b: _chan(a or (0.0, 0.0, 0.0), b or (0.0, 0.0, 0.0)))
                assert total[0] == cols
                np.testing.assert_allclose(total[1], x.mean(), rtol=1e-12)
                np.testing.assert_allclose(total[2] / cols, x.var(), rtol=1e-10)
            else:
                def merge(a, b):
                    a = a or (-np.inf, 0.0)
                    b = b or (-np.inf, 0.0)
                    mx = max(a[0], b[0])
                    return mx, (a[1] * np.exp(a[0] - mx) if a[0] != -np.inf else 0.0) + (
                        b[1] * np.exp(b[0] - mx) if b[0] != -np.inf else 0.0)
                total = _butterfly(states, merge)
                assert total[0] == x.max()
                np.testing.assert_allclose(total[1], np.exp(x - x.max()).sum(), rtol=1e-12)
            checked += 1
    assert checked > 0


def test_long_rows_plans() -> None:
    """The plans the reports quote: layernorm 256 x 65536 and softmax 32 x 262144."""
    assert _plan(65536, 32, 0) == (8, 8192, 32768)
    assert _plan(65536, 16, 0) == (16, 4096, 16384)
    assert _plan(65536, 64, 16 * 256) == (4, 16384, 49152)
    assert _plan(262144, 64, 0) == (16, 16384, 65536)
    assert _plan(262144, 64, 16 * 256) == (16, 16384, 49152)
    assert _plan(262144, 96, 16 * 512) == (8, 32768, 98304)
    assert _plan(262144, 192, 16 * 1024) == (4, 65536, 196608)
