"""Python mirrors of the index math of tasks/matmul/seeds/simt_pipelined.cu and
tasks/attention/seeds/flash_fp32.cu (issue 12), for tests/unit/test_families_c.py.

There is no GPU in the CPU suite, so these functions restate the kernels' index formulas line by
line (thread -> tile mapping, the cp.async loads with zero-fill, the STAGES ring and its
wait_group counts, the split-K plan and block rasterization, the online softmax with its shuffle
butterflies) and run them in float64 on small inputs.  Shared memory starts as NaN; a group of
copies lands either at once (``early``: catches a stage refilled before it was consumed) or only
at the wait that must cover it (``late``: catches a stage read before its copies landed).  They
check the formulas as written here: an edit to a .cu file must be mirrored in this file.
"""
from __future__ import annotations

import numpy as np

# --- matmul: simt_pipelined -----------------------------------------------------------------
def mm_derive(k):
    d = {'RASTER_GROUP': 8, **k}        # RASTER_GROUP: a plain #define (8) in the .cu
    d['LANES_N'] = 32 // k['LANES_M']
    d['WARP_M'] = k['LANES_M'] * k['THREAD_M']
    d['WARP_N'] = d['LANES_N'] * k['THREAD_N']
    d['BM'] = k['WARPS_M'] * d['WARP_M']
    d['BN'] = k['WARPS_N'] * d['WARP_N']
    d['THREADS'] = 32 * k['WARPS_M'] * k['WARPS_N']
    d['AS_LD'] = d['BM'] + 4
    d['BS_LD'] = d['BN'] + 4
    return d

def mm_plan(d, M, K, N, sm_count=132):
    BM, BN, BK = d['BM'], d['BN'], d['BLOCK_K']
    tiles_m = (M + BM - 1) // BM
    tiles_n = (N + BN - 1) // BN
    tiles = tiles_m * tiles_n
    k_slices = (K + BK - 1) // BK
    splits = 1
    while splits * 2 <= d['SPLIT_K'] and tiles * splits < sm_count and k_slices >= splits * 2 * 4:
        splits *= 2
    k_chunk = ((k_slices + splits - 1) // splits) * BK
    splits = (K + k_chunk - 1) // k_chunk
    return tiles_m, tiles_n, splits, k_chunk

def mm_raster(d, pid, tiles_m, tiles_n):
    G = d['RASTER_GROUP']
    per_group = G * tiles_n
    group = pid // per_group
    first_m = group * G
    group_m = min(tiles_m - first_m, G)
    in_group = pid - group * per_group
    return first_m + in_group % group_m, in_group // group_m

def mm_thread_maps(d):
    T = d['THREADS']; tid = np.arange(T)
    lane, warp = tid & 31, tid >> 5
    warp_m, warp_n = warp // d['WARPS_N'], warp % d['WARPS_N']
    lane_m, lane_n = lane // d['LANES_N'], lane % d['LANES_N']
    a_col = warp_m * d['WARP_M'] + lane_m * 4
    b_col = warp_n * d['WARP_N'] + lane_n * 4
    i = np.arange(d['THREAD_M']); j = np.arange(d['THREAD_N'])
    rows = a_col[:, None] + (i // 4)[None] * 4 * d['LANES_M'] + (i % 4)[None]
    cols = b_col[:, None] + (j // 4)[None] * 4 * d['LANES_N'] + (j % 4)[None]
    return rows, cols

def mm_load_writes(d, A, B, M, K, N, m0, n0, k0, k_end, vec):
    """(a_writes, b_writes): lists of (flat smem index within a stage's As / Bs, value)."""
    T, BM, BN, BK = d['THREADS'], d['BM'], d['BN'], d['BLOCK_K']
    tid = np.arange(T)
    out = []
    E = BM * BK
    e = (tid[None] + np.arange((E + T - 1) // T)[:, None] * T).ravel()
    e = e[e < E]
    row, kk = e // BK, e % BK
    gm, gk = m0 + row, k0 + kk
    ok = (gm < M) & (gk < k_end)
    val = np.where(ok, A[np.minimum(gm, M - 1), np.minimum(gk, K - 1)], 0.0)
    idx = kk * d['AS_LD'] + row
    assert len(set(idx.tolist())) == E and row.max() < BM
    a = (idx, val)
    if vec:
        E = BK * (BN // 4)
        e = (tid[None] + np.arange((E + T - 1) // T)[:, None] * T).ravel(); e = e[e < E]
        kk, c = e // (BN // 4), e % (BN // 4)
        gk, gn = k0 + kk, n0 + 4 * c
        ok = (gk < k_end) & (gn < N)
        assert np.all(~ok | (gn + 3 < N))
        idx = (kk * d['BS_LD'] + 4 * c)[:, None] + np.arange(4)[None]
        assert np.all(idx % 4 == np.arange(4)[None])            # 16-byte aligned destinations
        src = np.minimum(gn[:, None] + np.arange(4)[None], N - 1)
        val = np.where(ok[:, None], B[np.minimum(gk, K - 1)[:, None], src], 0.0)
        idx, val = idx.ravel(), val.ravel()
    else:
        E = BK * BN
        e = (tid[None] + np.arange((E + T - 1) // T)[:, None] * T).ravel(); e = e[e < E]
        kk, c = e // BN, e % BN
        gk, gn = k0 + kk, n0 + c
        ok = (gk < k_end) & (gn < N)
        val = np.where(ok, B[np.minimum(gk, K - 1), np.minimum(gn, N - 1)], 0.0)
        idx = kk * d['BS_LD'] + c
    assert len(set(idx.tolist())) == BK * BN
    return a, (idx, val)

def run_matmul(knobs, A, B, vec, early, sm_count=132, wait_slack=0):
    """C as the kernel computes it (float64), and the number of K splits; ``wait_slack``
    waits for that many groups fewer than the kernel does (a broken ring, for the tests)."""
    d = mm_derive(knobs)
    M, K = A.shape; N = B.shape[1]
    S, BK, BM, BN = d['STAGES'], d['BLOCK_K'], d['BM'], d['BN']
    tiles_m, tiles_n, splits, k_chunk = mm_plan(d, M, K, N, sm_count)
    assert splits <= 8 and k_chunk % BK == 0
    C = np.zeros((M, N)) if splits > 1 else np.full((M, N), np.nan)
    count = np.zeros((M, N), int)
    rows, cols = mm_thread_maps(d)
    cover = np.zeros((BM, BN), int)                 # register tiles cover the block tile once
    np.add.at(cover, (rows[:, :, None], cols[:, None, :]), 1)
    assert np.all(cover == 1)
    quads = cols.reshape(-1, d['THREAD_N'] // 4, 4)  # column blocks of 4: contiguous, 4-aligned
    assert np.all(quads - quads[:, :, :1] == np.arange(4)) and np.all(quads[:, :, 0] % 4 == 0)
    seen = set()
    for pid in range(tiles_m * tiles_n):
        tm, tn = mm_raster(d, pid, tiles_m, tiles_n)
        assert 0 <= tm < tiles_m and 0 <= tn < tiles_n and (tm, tn) not in seen
        seen.add((tm, tn))
        m0, n0 = tm * BM, tn * BN
        for z in range(splits):
            k_begin = z * k_chunk; k_end = min(K, k_begin + k_chunk)
            slices = (k_end - k_begin + BK - 1) // BK
            assert slices >= 1
            As = np.full((S, BK * d['AS_LD']), np.nan); Bs = np.full((S, BK * d['BS_LD']), np.nan)
            groups = []                      # pending groups: list of writes
            holder = [None] * S              # slice whose data a stage holds (or will)
            def issue(stage, sl):
                if sl is None:              # an empty commit group
                    groups.append([])
                    return
                (ai, av), (bi, bv) = mm_load_writes(d, A, B, M, K, N, m0, n0, k_begin + sl * BK, k_end, vec)
                w = [(stage, ai, av, bi, bv)]
                holder[stage] = sl
                if early:
                    for st, ai_, av_, bi_, bv_ in w:
                        As[st, ai_] = av_; Bs[st, bi_] = bv_
                    w = []
                groups.append(w)
            def wait(n):
                while len([g for g in groups if g is not None]) > n:
                    k = next(i for i, g in enumerate(groups) if g is not None)
                    for st, ai_, av_, bi_, bv_ in groups[k]:
                        As[st, ai_] = av_; Bs[st, bi_] = bv_
                    groups[k] = None
            for s in range(S - 1):
                issue(s, s if s < slices else None)
            acc = np.zeros((d['THREADS'], d['THREAD_M'], d['THREAD_N']))
            stage, load_stage = 0, S - 1
            for t in range(slices):
                wait(S - 2 + wait_slack)
                nxt = t + S - 1
                # WAR: the stage refilled must hold a slice already consumed (t-1 or none)
                assert holder[load_stage] is None or holder[load_stage] < t
                issue(load_stage, nxt if nxt < slices else None)
                assert holder[stage] == t
                a = As[stage].reshape(BK, d['AS_LD'])[:, rows]   # [BK, T, TM]
                b = Bs[stage].reshape(BK, d['BS_LD'])[:, cols]
                acc += np.einsum('ktm,ktn->tmn', a, b)
                stage = 0 if stage + 1 == S else stage + 1
                load_stage = 0 if load_stage + 1 == S else load_stage + 1
            wait(0)
            gm = np.broadcast_to((m0 + rows)[:, :, None], acc.shape)
            gn = np.broadcast_to((n0 + cols)[:, None, :], acc.shape)
            keep = (gm < M) & (gn < N)
            if splits > 1:
                np.add.at(C, (gm[keep], gn[keep]), acc[keep])
            else:
                C[gm[keep], gn[keep]] = acc[keep]
            np.add.at(count, (gm[keep], gn[keep]), 1)
    assert len(seen) == tiles_m * tiles_n
    assert np.all(count == splits), "every element written once per split"
    return C, splits


# --- attention: flash_fp32 --------------------------------------------------------------------
def attn_cfg(DHP, W, TK, RQ, RKV, NST):
    T = 32 * W; TQ = T // TK
    c = dict(DHP=DHP, T=T, TK=TK, TQ=TQ, RQ=RQ, RKV=RKV, NST=NST, BQ=TQ * RQ, BKV=TK * RKV, RD=DHP // TK)
    c['QS_LD'] = c['BQ'] + 4; c['KS_LD'] = c['BKV'] + 4; c['VS_LD'] = DHP + 4; c['PS_LD'] = c['BQ'] + 4
    assert 32 % TK == 0 and RQ % 4 == 0 and RKV % 4 == 0 and c['RD'] % 4 == 0 and DHP % 8 == 0
    return c

def attn_dispatch(k, dh):
    small = max(4 * k['THREADS_KV'], 32)
    args = (k['WARPS'], k['THREADS_KV'], k['ROWS_Q'], k['COLS_KV'], k['KV_STAGES'])
    if dh <= small:
        return attn_cfg(small, *args)
    if dh <= 64:
        return attn_cfg(64, *args)
    if dh <= 128:                       # the general path's fixed tile
        return attn_cfg(128, 2, 8, 4, 4, 1)
    return attn_cfg(256, 2, 8, 4, 4, 1)

def transposed_writes(c, ROWS, LD, src, r0, N, D, dh):
    T, DHP = c['T'], c['DHP']
    E = ROWS * DHP
    idx = np.arange(E)          # every i, tid pair: idx = tid + i*T covers 0..E-1
    e = (idx // (8 * ROWS)) * 8 + idx % 8
    r = (idx // 8) % ROWS
    ok = (r0 + r < N) & (e < dh)
    val = np.where(ok, src[np.minimum(r0 + r, N - 1), np.minimum(e, D - 1)], 0.0)
    dst = e * LD + r
    assert len(set(dst.tolist())) == E and r.max() < ROWS and e.max() < DHP
    return dst, val

def rows_writes(c, ROWS, LD, src, r0, N, D, dh, vec):
    DHP = c['DHP']
    if vec:
        idx = np.arange(ROWS * (DHP // 4))
        ch, r = idx % (DHP // 4), idx // (DHP // 4)
        ok = (r0 + r < N) & (4 * ch < dh)
        assert np.all(~ok | (4 * ch + 3 < dh))
        dst = (r * LD + 4 * ch)[:, None] + np.arange(4)[None]
        assert np.all(dst[:, 0] % 4 == 0)
        src_rows = np.minimum(r0 + r, N - 1)[:, None]
        src_cols = np.minimum(4 * ch[:, None] + np.arange(4)[None], D - 1)
        val = np.where(ok[:, None], src[src_rows, src_cols], 0.0)
        dst, val = dst.ravel(), val.ravel()
    else:
        idx = np.arange(ROWS * DHP)
        e, r = idx % DHP, idx // DHP
        ok = (r0 + r < N) & (e < dh)
        val = np.where(ok, src[np.minimum(r0 + r, N - 1), np.minimum(e, D - 1)], 0.0)
        dst = r * LD + e
    assert len(set(dst.tolist())) == ROWS * DHP
    return dst, val

def xor_reduce(x, TK, op):
    """x: [T, ...]; butterfly over lanes tid ^ off, off = TK/2 .. 1 (as __shfl_xor_sync)."""
    T = x.shape[0]; tid = np.arange(T)
    off = TK // 2
    while off > 0:
        partner = tid ^ off
        assert np.all(partner // 32 == tid // 32)
        x = op(x, x[partner])
        off //= 2
    return x

def run_attention(k, Q, K, V, heads, vec, early):
    """out as the kernel computes it (float64), for knob values ``k``."""
    Bn, N, D = Q.shape; dh = D // heads
    c = attn_dispatch(k, dh)
    T, TK, TQ, RQ, RKV, RD, NST, BQ, BKV, DHP = (c[x] for x in 'T TK TQ RQ RKV RD NST BQ BKV DHP'.split())
    q_tiles = (N + BQ - 1) // BQ
    out = np.full((Bn, N, D), np.nan)
    tid = np.arange(T); tk = tid % TK; tq = tid // TK
    row0, col0 = tq * 4, tk * 4
    ri = np.arange(RQ); ci = np.arange(RKV); di = np.arange(RD)
    rows = (ri // 4)[None] * 4 * TQ + row0[:, None] + (ri % 4)[None]        # [T, RQ]
    kcols = (ci // 4)[None] * 4 * TK + col0[:, None] + (ci % 4)[None]      # [T, RKV]
    dcols = (di // 4)[None] * 4 * TK + col0[:, None] + (di % 4)[None]      # [T, RD]
    # coverage: rows x dcols tiles BQ x DHP exactly once; rows x kcols tiles BQ x BKV once
    for width, cols in ((DHP, dcols), (BKV, kcols)):
        cover = np.zeros((BQ, width), int)
        np.add.at(cover, (rows[:, :, None], cols[:, None, :]), 1)
        assert np.all(cover == 1)
    scale = 1.0 / np.sqrt(dh)
    written = np.zeros((Bn, N, D), int)
    for blk in range(q_tiles * Bn * heads):
        q0 = (blk % q_tiles) * BQ; bh = blk // q_tiles; h = bh % heads; b = bh // heads
        Qh = Q[b][:, h * dh:]; Kh = K[b][:, h * dh:]; Vh = V[b][:, h * dh:]   # D - h*dh columns visible
        Dv = Qh.shape[1]
        Qs = np.full(DHP * c['QS_LD'], np.nan); Ks = np.full((NST, DHP * c['KS_LD']), np.nan)
        Vs = np.full((NST, BKV * c['VS_LD']), np.nan); Ps = np.full(BKV * c['PS_LD'], np.nan)
        kv_tiles = (N + BKV - 1) // BKV
        groups, uncommitted, holder = [], [], [None] * NST
        def apply(w):
            for arr, st, dst, val in w:
                if st is None: arr[dst] = val
                else: arr[st, dst] = val
        def issue(w):
            if early: apply(w)
            else: uncommitted.extend(w)
        def commit():
            groups.append(list(uncommitted)); uncommitted.clear()
        def wait(n):
            live = [i for i, g in enumerate(groups) if g is not None]
            for i in live[:max(0, len(live) - n)]:
                apply(groups[i]); groups[i] = None
        def load_kv(stage, t):
            holder[stage] = t
            issue([(Ks, stage) + transposed_writes(c, BKV, c['KS_LD'], Kh, t * BKV, N, Dv, dh),
                   (Vs, stage) + rows_writes(c, BKV, c['VS_LD'], Vh, t * BKV, N, Dv, dh, vec)])
        issue([(Qs, None) + transposed_writes(c, BQ, c['QS_LD'], Qh, q0, N, Dv, dh)])
        if NST > 1:
            for s in range(NST - 1):
                if s < kv_tiles: load_kv(s, s)
                commit()
        o = np.zeros((T, RQ, RD)); m_run = np.full((T, RQ), -np.inf); l_run = np.zeros((T, RQ))
        stage, load_stage = 0, NST - 1
        for t in range(kv_tiles):
            if NST == 1:
                load_kv(0, t); commit(); wait(0)
            else:
                wait(NST - 2)
                nxt = t + NST - 1
                assert holder[load_stage] is None or holder[load_stage] < t
                if nxt < kv_tiles: load_kv(load_stage, nxt)
                commit()
            assert holder[stage] == t
            Ks_s = Ks[stage].reshape(DHP, c['KS_LD']); Vs_s = Vs[stage].reshape(BKV, c['VS_LD'])
            Qm = Qs.reshape(DHP, c['QS_LD'])
            s = np.einsum('etr,etc->trc', Qm[:, rows], Ks_s[:, kcols])
            j0 = t * BKV
            valid = (j0 + kcols < N)[:, None, :]
            s = np.where(valid, s * scale, -np.inf)
            mx = xor_reduce(s.max(axis=2), TK, np.maximum)
            m_new = np.maximum(m_run, mx)
            assert np.all(np.isfinite(m_new))
            alpha = np.exp(m_run - m_new)
            p = np.exp(s - m_new[:, :, None])
            l_run = l_run * alpha + p.sum(axis=2)
            m_run = m_new
            o *= alpha[:, :, None]
            Pm = Ps.reshape(BKV, c['PS_LD'])
            Pm[kcols[:, None, :], rows[:, :, None]] = p          # Ps[j][i]
            o += np.einsum('jtr,jtd->trd', Pm[:, rows], Vs_s[:, dcols])
            stage = 0 if stage + 1 == NST else stage + 1
            load_stage = 0 if load_stage + 1 == NST else load_stage + 1
        wait(0)
        l = xor_reduce(l_run, TK, np.add)
        res = o / l[:, :, None]
        gi = np.broadcast_to((q0 + rows)[:, :, None], res.shape)
        ge = np.broadcast_to(dcols[:, None, :], res.shape)
        keep = (gi < N) & (ge < dh)
        out[b, gi[keep], h * dh + ge[keep]] = res[keep]
        np.add.at(written, (b, gi[keep], h * dh + ge[keep]), 1)
    assert np.all(written == 1)
    return out
