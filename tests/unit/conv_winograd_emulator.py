"""A NumPy emulation of conv2d_winograd_f2 (tasks/conv2d/seeds/implicit_gemm_v2.cu, knob WINOGRAD).

It replays the kernel's index math, vectorized over the 256 threads of a CTA: the filter
transform kernel's padded [c][xi][k] buffer, the tile mapping and border mask computed once per
thread, the patch gather with its zero-fill predicates, the row-then-column input transform
written to the same shared-memory slots, the 16-byte filter copies (in bounds, aligned), the
double buffer, the warp/lane fragment reads of the FFMA loop, the epilogue's staging of the 16
components (padded rows) and the output transform with its store guards.  In float64 the result
must equal the reference to rounding; ``dtype=np.float32`` gives the kernel's transforms in
float32 (the GEMM's summation order differs from the GPU's).  Invariants are checked on the way:
each shared slot written once per stage, no stage read before it is written, every output
written exactly once, shared memory within WG_SMEM_BYTES.
"""
from __future__ import annotations

import numpy as np

BT, BC, THREADS = 32, 8, 256
U_FLOATS = 4 << 20          # the static filter buffer (WG_U_FLOATS)


def smem_floats(bk: int) -> int:
    main = 2 * (16 * BC * BT + 16 * BC * bk)
    epi = 16 * bk * (BT + 4)
    return max(main, epi)


def _bt4(a, b, c, d):
    return [a - c, b + c, c - b, b - d]


def _g3(a, b, c):
    return [a, 0.5 * (a + b + c), 0.5 * (a - b + c), c]


def fits(bk: int, C: int, K: int) -> bool:
    """winograd_fits: 16 x C rounded up to a step x K rounded up to a tile within the buffer."""
    return 16 * (-(-C // BC) * BC) * (-(-K // bk) * bk) <= U_FLOATS


def transform_filters(w: np.ndarray, bk: int, dtype=np.float64) -> np.ndarray:
    """conv2d_winograd_filters: U[(c * 16 + xi) * Kp + k], zero for c >= C or k >= K."""
    K, C = w.shape[:2]
    Cp, Kp = -(-C // BC) * BC, -(-K // bk) * bk
    i = np.arange(Cp * Kp)
    c, k = i // Kp, i % Kp
    ok = (c < C) & (k < K)
    wf = w.astype(dtype).ravel()
    g = [np.where(ok, wf[np.where(ok, (k * C + c) * 9 + e, 0)], 0).astype(dtype) for e in range(9)]
    gr = [None] * 12
    for s in range(3):
        o = _g3(g[s], g[3 + s], g[6 + s])
        for r in range(4):
            gr[3 * r + s] = o[r]
    u = np.full(16 * Cp * Kp, np.nan, dtype=dtype)
    for r in range(4):
        o = _g3(gr[3 * r], gr[3 * r + 1], gr[3 * r + 2])
        for j in range(4):
            u[(c * 16 + 4 * r + j) * Kp + k] = o[j]
    assert not np.isnan(u).any() and u.size <= U_FLOATS
    return u


def run(bk: int, x: np.ndarray, w: np.ndarray, pad: int, dtype=np.float64) -> np.ndarray:
    N, C, H, W = x.shape
    K = w.shape[0]
    assert w.shape[1:] == (C, 3, 3)
    P, Q = H + 2 * pad - 2, W + 2 * pad - 2
    tiles_h, tiles_w = (P + 1) // 2, (Q + 1) // 2
    hw = tiles_h * tiles_w
    tiles = N * hw
    assert fits(bk, C, K)
    TN, M_LD = bk // 8, BT + 4
    Kp = -(-K // bk) * bk
    uf = transform_filters(w, bk, dtype)
    V_STAGE, U_STAGE = 16 * BC * BT, 16 * BC * bk
    assert 4 * smem_floats(bk) <= 227 * 1024
    xf = x.astype(dtype).ravel()
    PQ, HW = P * Q, H * W
    y = np.full(N * K * PQ, np.nan, dtype=dtype)
    written = np.zeros(N * K * PQ, dtype=np.int64)
    tid = np.arange(THREADS)
    warp, lane = tid // 32, tid % 32
    lt, lk = lane & 3, lane >> 2
    t, pc = tid % BT, tid // BT
    # fragment slots of each thread: 8 tiles, TN filters (as in the FFMA loop and the epilogue)
    a_tiles = np.stack([4 * lt + i for i in range(4)] + [16 + 4 * lt + i for i in range(4)], axis=1)
    b_filters = np.stack([4 * (lk + 8 * (j >> 2)) + (j & 3) for j in range(TN)], axis=1)
    steps = -(-C // BC)
    for bx in range(-(-tiles // BT)):
        for by in range(-(-K // bk)):
            k0 = by * bk
            tile = bx * BT + t
            ok = tile < tiles
            n = np.where(ok, tile // hw, 0)
            rem = tile - n * hw
            th = np.where(ok, rem // tiles_w, 0)
            tw = np.where(ok, rem - th * tiles_w, 0)
            h0, w0 = 2 * th - pad, 2 * tw - pad
            inside = np.stack([ok & (h0 + i >= 0) & (h0 + i < H) & (w0 + j >= 0) & (w0 + j < W)
                               for i in range(4) for j in range(4)], axis=1)
            xbase = n * C * HW + pc * HW + h0 * W + w0
            u_row, u_col = tid // (bk // 4), (tid % (bk // 4)) * 4
            u_c, u_xi = u_row % BC, u_row // BC
            up = (u_c * 16 + u_xi) * Kp + k0 + u_col
            u_step = (128 // bk) * Kp
            smem = np.full(smem_floats(bk), np.nan, dtype=dtype)
            acc = np.zeros((THREADS, 2, 8, TN), dtype=dtype)

            def gather(c0: int):
                c_ok = c0 + pc < C
                d = []
                for i in range(4):
                    for j in range(4):
                        use = c_ok & inside[:, 4 * i + j]
                        idx = np.where(use, xbase + c0 * HW + i * W + j, 0)
                        assert (idx >= 0).all() and (idx < xf.size).all()
                        d.append(np.where(use, xf[idx], 0).astype(dtype))
                return d

            def copy_filters(c0: int, buf: int) -> None:
                dst = buf * (V_STAGE + U_STAGE) + V_STAGE + u_row * bk + u_col
                src = up + c0 * 16 * Kp
                slots = []
                for f in range(U_STAGE // 4 // THREADS):
                    fsrc, fdst = src + f * u_step, dst + f * (1024 // bk) * bk
                    assert (fsrc % 4 == 0).all() and (fdst % 4 == 0).all(), "16-byte copies"
                    assert (fsrc >= 0).all() and (fsrc + 4 <= uf.size).all(), "inside the filter buffer"
                    for e in range(4):
                        smem[fdst + e] = uf[fsrc + e]
                        slots.append(fdst + e)
                slots = np.concatenate(slots)
                assert len(np.unique(slots)) == len(slots) == U_STAGE
                assert slots.min() == buf * (V_STAGE + U_STAGE) + V_STAGE

            def transform_store(buf: int, d) -> None:
                base = buf * (V_STAGE + U_STAGE)
                r = [None] * 16
                for j in range(4):
                    v = _bt4(d[j], d[4 + j], d[8 + j], d[12 + j])
                    for i in range(4):
                        r[4 * i + j] = v[i]
                slots = []
                for i in range(4):
                    v = _bt4(r[4 * i], r[4 * i + 1], r[4 * i + 2], r[4 * i + 3])
                    for j in range(4):
                        idx = base + ((4 * i + j) * BC + pc) * BT + t
                        smem[idx] = v[j]
                        slots.append(idx)
                slots = np.concatenate(slots)
                assert len(np.unique(slots)) == len(slots) == V_STAGE, "each slot once per stage"
                assert slots.max() < base + V_STAGE

            copy_filters(0, 0)
            d = gather(0)
            transform_store(0, d)
            for s in range(steps):
                more = s + 1 < steps
                if more:
                    nxt = ((s + 1) & 1) * (V_STAGE + U_STAGE)
                    smem[nxt:nxt + V_STAGE + U_STAGE] = np.nan    # the buffer read last step is free
                    copy_filters((s + 1) * BC, (s + 1) & 1)
                    d = gather((s + 1) * BC)
                base = (s & 1) * (V_STAGE + U_STAGE)
                for c in range(BC):
                    for q in range(2):
                        xi = 2 * warp + q
                        a = smem[base + ((xi * BC + c) * BT)[:, None] + a_tiles]
                        b = smem[base + V_STAGE + ((xi * BC + c) * bk)[:, None] + b_filters]
                        assert not np.isnan(a).any() and not np.isnan(b).any(), "stage read before written"
                        acc[:, q] += a[:, :, None] * b[:, None, :]
                if more:
                    transform_store((s + 1) & 1, d)
            # epilogue
            smem[:] = np.nan
            ms_slots = []
            for q in range(2):
                xi = 2 * warp + q
                for j in range(TN):
                    k = lk * 4 + (j & 3) + 32 * (j >> 2)
                    for half in range(2):
                        for u in range(4):
                            idx = (xi * bk + k) * M_LD + 16 * half + 4 * lt + u
                            smem[idx] = acc[:, q, 4 * half + u, j]
                            ms_slots.append(idx)
            ms_slots = np.concatenate(ms_slots)
            assert len(np.unique(ms_slots)) == len(ms_slots) == 16 * bk * BT
            row1, col1 = 2 * th + 1 < P, 2 * tw + 1 < Q
            for kk0 in range(0, bk, THREADS // BT):
                kk = pc + kk0
                live = ok & (k0 + kk < K)
                m = [smem[(xi * bk + kk) * M_LD + t] for xi in range(16)]
                r = [None] * 8
                for j in range(4):
                    r[j] = m[j] + m[4 + j] + m[8 + j]
                    r[4 + j] = m[4 + j] - m[8 + j] - m[12 + j]
                out = (n * K + k0 + kk) * PQ + 2 * th * Q + 2 * tw
                for i in range(2):
                    o0 = r[4 * i] + r[4 * i + 1] + r[4 * i + 2]
                    o1 = r[4 * i + 1] - r[4 * i + 2] - r[4 * i + 3]
                    row_live = live & (row1 if i == 1 else True)
                    for col, val, col_live in ((0, o0, True), (1, o1, col1)):
                        sel = row_live & col_live
                        idx = out[sel] + i * Q + col
                        assert not np.isnan(val[sel]).any()
                        y[idx] = val[sel]
                        np.add.at(written, idx, 1)
    assert (written == 1).all(), "every output written exactly once"
    return y.reshape(N, K, P, Q)
