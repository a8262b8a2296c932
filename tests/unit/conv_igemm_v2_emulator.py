"""A NumPy emulation of tasks/conv2d/seeds/implicit_gemm_v2.cu's index math (no GPU needed).

It runs the kernel's own arithmetic, statement for statement, vectorized over the threads of a
CTA: the A gather (per-thread row bases, the incremental (c, r, s) walk with one carry per
digit), the 16-byte and 4-byte filter loaders with their zero-fill predicates, the stage ring and
cp.async group accounting, the warp/lane/thread tile mapping of the FFMA loop, the epilogue's
output offsets, the split-K partition and the reduction.  Values are float64, so the result
must match the float64 reference to rounding; and it checks the invariants the CUDA code relies
on as it goes (every shared slot written once per load, walk == divmod, no stage overwritten
before it is read, every output written exactly once per split, 16-byte alignment of vector
copies).  Knob values come from the .cu file so the emulation follows the seed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np


@dataclass(frozen=True)
class Tiles:
    """The kernel's compile-time constants, derived from the knobs as its #defines do."""

    WARPS_M: int
    WARPS_N: int
    LANES_M: int
    TM: int
    TN: int
    BK: int
    STAGES: int
    SPLIT_K: int
    A_LOAD_M: int

    @classmethod
    def of(cls, knobs: Mapping[str, str]) -> "Tiles":
        return cls(**{name: int(knobs[name]) for name in cls.__dataclass_fields__})

    @property
    def LANES_N(self) -> int: return 32 // self.LANES_M
    @property
    def THREADS(self) -> int: return self.WARPS_M * self.WARPS_N * 32
    @property
    def WM(self) -> int: return self.LANES_M * self.TM
    @property
    def WN(self) -> int: return self.LANES_N * self.TN
    @property
    def BM(self) -> int: return self.WARPS_M * self.WM
    @property
    def BN(self) -> int: return self.WARPS_N * self.WN
    @property
    def BS_LD(self) -> int: return self.BK + 4
    @property
    def A_STAGE(self) -> int: return self.BK * self.BM
    @property
    def B_STAGE(self) -> int: return self.BN * self.BS_LD
    @property
    def A_TM(self) -> int: return min(self.A_LOAD_M, self.THREADS, self.BM)
    @property
    def A_MI(self) -> int: return self.BM // self.A_TM
    @property
    def A_TK(self) -> int: return self.THREADS // self.A_TM
    @property
    def A_KI(self) -> int: return -(-self.BK // self.A_TK)
    @property
    def B_CHUNKS(self) -> int: return self.BN * self.BK // 4
    @property
    def B_VI(self) -> int: return -(-self.B_CHUNKS // self.THREADS)
    @property
    def B_SI(self) -> int: return -(-(self.BN * self.BK) // self.THREADS)


SPLITK_WS_FLOATS = 4 << 20


def plan_splits(t: Tiles, M: int, K: int, KD: int, sms: int) -> tuple[int, int]:
    """launch()'s split-K choice: (splits, tiles_per_split)."""
    k_tiles = -(-KD // t.BK)
    ctas = -(-M // t.BM) * -(-K // t.BN)
    splits = 1
    while splits * 2 <= t.SPLIT_K and ctas * splits < sms and k_tiles >= 8 * splits \
            and splits * 2 * M * K <= SPLITK_WS_FLOATS:
        splits *= 2
    per = -(-k_tiles // splits)
    return -(-k_tiles // per), per


def _step(d: int, RS: int, S: int, HW: int, W: int) -> tuple[int, int, int, int]:
    dc, dr, ds = d // RS, (d % RS) // S, d % S
    return dc, dr, ds, dc * HW + dr * W + ds


def _advance(k: dict[str, np.ndarray], st: tuple[int, int, int, int], R: int, S: int, W: int, HW: int) -> None:
    dc, dr, ds, doff = st
    k["s"] = k["s"] + ds
    k["r"] = k["r"] + dr
    k["c"] = k["c"] + dc
    k["off"] = k["off"] + doff
    carry = k["s"] >= S
    k["s"] = np.where(carry, k["s"] - S, k["s"])
    k["r"] = np.where(carry, k["r"] + 1, k["r"])
    k["off"] = np.where(carry, k["off"] + W - S, k["off"])
    carry = k["r"] >= R
    k["r"] = np.where(carry, k["r"] - R, k["r"])
    k["c"] = np.where(carry, k["c"] + 1, k["c"])
    k["off"] = np.where(carry, k["off"] + HW - R * W, k["off"])


def _check_walk(k: dict[str, np.ndarray], kg: np.ndarray, R: int, S: int, W: int, HW: int) -> None:
    RS = R * S
    assert np.array_equal(k["c"], kg // RS) and np.array_equal(k["r"], (kg % RS) // S) \
        and np.array_equal(k["s"], kg % S), "incremental (c, r, s) walk left divmod"
    assert np.array_equal(k["off"], k["c"] * HW + k["r"] * W + k["s"]), "walked offset drifted"


def run(t: Tiles, x: np.ndarray, w: np.ndarray, pad: int, stride: int, *, sms: int = 132,
        splits_override: int | None = None, w_aligned: bool = True, out_aligned: bool = True) -> np.ndarray:
    """y as the kernel computes it (float64), checking the kernel's invariants on the way."""
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    PQ, M, HW, RS = P * Q, N * P * Q, H * W, R * S
    KD = C * RS
    xf, wf = x.astype(np.float64).ravel(), w.astype(np.float64).ravel()
    k_tiles = -(-KD // t.BK)
    splits, per = plan_splits(t, M, K, KD, sms)
    if splits_override is not None:
        per = -(-k_tiles // splits_override)
        splits = -(-k_tiles // per)
    is_1x1 = R == 1 and S == 1 and pad == 0 and stride == 1
    vec_b = KD % 4 == 0 and w_aligned
    out = np.full((splits, M * K), np.nan)
    written = np.zeros((splits, M * K), dtype=np.int64)
    tid = np.arange(t.THREADS)
    am, ak = tid % t.A_TM, tid // t.A_TM
    warp, lane = tid // 32, tid % 32
    warp_m, warp_n = warp % t.WARPS_M, warp // t.WARPS_M
    lane_m, lane_n = lane // t.LANES_N, lane % t.LANES_N
    a_col = warp_m * t.WM + lane_m * 4
    b_row = warp_n * t.WN + lane_n
    row_step, tile_step = _step(t.A_TK, RS, S, HW, W), _step(t.BK, RS, S, HW, W)

    for z in range(splits):
        kt_begin = z * per
        n_tiles = max(0, min(k_tiles, kt_begin + per) - kt_begin)
        for bx in range(-(-M // t.BM)):
            m0 = bx * t.BM
            a_h0, a_w0, a_base = [], [], []
            for i in range(t.A_MI):
                m = m0 + am + i * t.A_TM
                n = m // PQ
                pq = m - n * PQ
                p, q = pq // Q, pq - (pq // Q) * Q
                h0, w0 = p * stride - pad, q * stride - pad
                base = n * C * HW + (pq if is_1x1 else h0 * W + w0)
                inside = m < M
                a_h0.append(np.where(inside, h0, -(1 << 30)))
                a_w0.append(np.where(inside, w0, -(1 << 30)))
                a_base.append(np.where(inside, base, 0))
            for by in range(-(-K // t.BN)):
                n0 = by * t.BN
                kg0 = kt_begin * t.BK + ak
                kp = {"c": kg0 // RS, "r": (kg0 % RS) // S, "s": kg0 % S}
                kp["off"] = kp["c"] * HW + kp["r"] * W + kp["s"]
                state = {"b_kg": kt_begin * t.BK, "kg": kg0.copy()}
                As = np.full((t.STAGES, t.A_STAGE), np.nan)
                Bs = np.full((t.STAGES, t.B_STAGE), np.nan)
                tag = [None] * t.STAGES             # (tile, group) loaded into each stage
                consumed = [True] * t.STAGES
                loaded = [0]                         # tiles loaded so far

                def load_tile(stage: int, group: int) -> None:
                    assert consumed[stage], "a stage is overwritten before its tile is read"
                    As[stage], Bs[stage] = np.nan, np.nan
                    a_count = np.zeros(t.A_STAGE, dtype=np.int64)
                    b_count = np.zeros(t.B_STAGE, dtype=np.int64)
                    row = dict(kp)
                    row_kg = state["kg"].copy()
                    for j in range(t.A_KI):
                        kk = ak + j * t.A_TK
                        _check_walk(row, row_kg, R, S, W, HW)
                        live = kk < t.BK
                        kin = row["c"] < C
                        for i in range(t.A_MI):
                            if is_1x1:
                                ok = kin & (a_h0[i] >= 0)
                            else:
                                h, wi = a_h0[i] + row["r"], a_w0[i] + row["s"]
                                ok = kin & (h >= 0) & (h < H) & (wi >= 0) & (wi < W)
                            off = a_base[i] + row["off"]
                            dst = kk * t.BM + am + i * t.A_TM
                            vals = np.where(ok & live, xf[np.where(ok & live, off, 0)], 0.0)
                            As[stage, dst[live]] = vals[live]
                            np.add.at(a_count, dst[live], 1)
                        if j + 1 < t.A_KI:
                            _advance(row, row_step, R, S, W, HW)
                            row_kg = row_kg + t.A_TK
                    _advance(kp, tile_step, R, S, W, HW)
                    state["kg"] = state["kg"] + t.BK
                    b_kg = state["b_kg"]
                    if vec_b:
                        for i in range(t.B_VI):
                            idx = tid + i * t.THREADS
                            live = idx < t.B_CHUNKS
                            nb, kq = idx // (t.BK // 4), (idx % (t.BK // 4)) * 4
                            kn = n0 + nb
                            ok = live & (kn < K) & (b_kg + kq < KD)
                            src = kn * KD + b_kg + kq
                            assert np.all(src[ok] % 4 == 0) and np.all(b_kg + kq[ok] + 3 < KD), "16-byte copy"
                            dst = nb * t.BS_LD + kq
                            assert np.all(dst % 4 == 0)
                            for e in range(4):
                                vals = np.where(ok, wf[np.where(ok, src + e, 0)], 0.0)
                                Bs[stage, dst[live] + e] = vals[live]
                                np.add.at(b_count, dst[live] + e, 1)
                    else:
                        for i in range(t.B_SI):
                            idx = tid + i * t.THREADS
                            live = idx < t.BN * t.BK
                            nb, kk = idx // t.BK, idx % t.BK
                            kn = n0 + nb
                            ok = live & (kn < K) & (b_kg + kk < KD)
                            src = kn * KD + b_kg + kk
                            vals = np.where(ok, wf[np.where(ok, src, 0)], 0.0)
                            dst = nb * t.BS_LD + kk
                            Bs[stage, dst[live]] = vals[live]
                            np.add.at(b_count, dst[live], 1)
                    state["b_kg"] = b_kg + t.BK
                    assert np.all(a_count == 1), "As slots not written exactly once"
                    b_used = (np.arange(t.B_STAGE) % t.BS_LD) < t.BK
                    assert np.all(b_count[b_used] == 1) and np.all(b_count[~b_used] == 0), "Bs slots"
                    tag[stage] = (loaded[0], group)
                    consumed[stage] = False
                    loaded[0] += 1

                acc = np.zeros((t.THREADS, t.TM, t.TN))
                group = 0
                for s in range(t.STAGES - 1):
                    if s < n_tiles:
                        load_tile(s, group)
                    group += 1                            # commit (possibly empty)
                read_stage, write_stage = 0, t.STAGES - 1
                for kt in range(n_tiles):
                    complete = group - (t.STAGES - 2)     # wait_group STAGES-2: groups < complete done
                    if kt + t.STAGES - 1 < n_tiles:
                        load_tile(write_stage, group)
                    group += 1
                    assert tag[read_stage] is not None and tag[read_stage][0] == kt, "stage ring"
                    assert tag[read_stage][1] < complete, "tile read before its cp.async group completed"
                    assert not consumed[read_stage]
                    a_idx = np.array([[(k4 + u) * t.BM + a_col + g * t.LANES_M * 4 + e
                                       for g in range(t.TM // 4) for e in range(4)]
                                      for k4 in range(0, t.BK, 4) for u in range(4)])   # [BK, TM, THREADS]
                    b_idx = np.array([[(b_row + j * t.LANES_N) * t.BS_LD + k4 + u for j in range(t.TN)]
                                      for k4 in range(0, t.BK, 4) for u in range(4)])   # [BK, TN, THREADS]
                    assert a_idx.min() >= 0 and a_idx.max() < t.A_STAGE and b_idx.max() < t.B_STAGE
                    assert np.all((b_idx % t.BS_LD) < t.BK), "read of Bs padding"
                    a = As[read_stage][a_idx]
                    b = Bs[read_stage][b_idx]
                    assert not np.isnan(a).any() and not np.isnan(b).any(), "read of an unwritten slot"
                    acc += np.einsum("kit,kjt->tij", a, b)
                    consumed[read_stage] = True
                    read_stage = (read_stage + 1) % t.STAGES
                    write_stage = (write_stage + 1) % t.STAGES
                assert loaded[0] == n_tiles
                if PQ % 4 == 0 and out_aligned:          # float4 epilogue
                    for g in range(t.TM // 4):
                        m = m0 + a_col + g * t.LANES_M * 4
                        n = m // PQ
                        pq = m - n * PQ
                        base = n * K * PQ + pq
                        assert np.all(m % 4 == 0) and np.all((m < M) == (m + 3 < M))
                        for j in range(t.TN):
                            k = n0 + b_row + j * t.LANES_N
                            ok = (m < M) & (k < K)
                            dst = (base + k * PQ)[ok]
                            assert np.all(dst % 4 == 0), "misaligned float4 store"
                            for e in range(4):
                                assert np.all((m[ok] + e) // PQ == n[ok]), "float4 store across images"
                                out[z, dst + e] = acc[ok, 4 * g + e, j]
                                np.add.at(written[z], dst + e, 1)
                    continue
                for i in range(t.TM):
                    m = m0 + a_col + (i // 4) * t.LANES_M * 4 + (i % 4)
                    n = m // PQ
                    pq = m - n * PQ
                    base = n * K * PQ + pq
                    for j in range(t.TN):
                        k = n0 + b_row + j * t.LANES_N
                        ok = (m < M) & (k < K)
                        dst = (base + k * PQ)[ok]
                        out[z, dst] = acc[ok, i, j]
                        np.add.at(written[z], dst, 1)
    assert np.all(written == 1), "an output written other than once per split"
    y = out[0] if splits == 1 else out.sum(axis=0)          # the reduce kernel
    return y.reshape(N, K, P, Q)
