"""NumPy emulation of tasks/sort/seeds/radix.cu, step for step (no GPU).

Restates the kernels' index math: the key transform, the one-CTA bitonic network (pair q's low
index, the direction bit), and the LSD passes (the grid G and each CTA's tile range, the upsweep's
digit-major counts, the per-digit scans over CTAs and each CTA's scan of the digit totals, the downsweep's warp-striped tile, the
__match_any_sync ranking with the highest peer lane advancing the warp's count, the exclusive
offsets across warps, the per-thread-grouped block scan over digits, the shared-memory slots and
the coalesced store, the ping-pong parity). Buffers start as garbage; every store is recorded so
that a pass writing a slot twice or leaving one unwritten is caught.
"""
from __future__ import annotations

import numpy as np

MAX_G = 2048
SCAN_THREADS = 256
SMALL_THREADS = 512


def derive(knobs: dict[str, int]) -> dict[str, int]:
    d = dict(knobs)
    d["RADIX"] = 1 << d["RADIX_BITS"]
    d["PASSES"] = (32 + d["RADIX_BITS"] - 1) // d["RADIX_BITS"]
    d["NWARPS"] = d["THREADS"] // 32
    d["TILE"] = d["THREADS"] * d["ITEMS"]
    d["DIGITS_PER_THREAD"] = (d["RADIX"] + d["THREADS"] - 1) // d["THREADS"]
    return d


def to_key(u: np.ndarray) -> np.ndarray:
    u = u.astype(np.uint32)
    return u ^ np.where(u >> np.uint32(31), np.uint32(0xFFFFFFFF), np.uint32(0x80000000)).astype(np.uint32)


def from_key(k: np.ndarray) -> np.ndarray:
    k = k.astype(np.uint32)
    return k ^ np.where(k >> np.uint32(31), np.uint32(0x80000000), np.uint32(0xFFFFFFFF)).astype(np.uint32)


def small_sort(x: np.ndarray) -> np.ndarray:
    """small_sort: keys padded with 0xffffffff to the next power of two, bitonic network."""
    n = x.size
    p = 1
    while p < n:
        p <<= 1
    s = np.full(p, 0xFFFFFFFF, np.uint32)
    s[:n] = to_key(x.view(np.uint32))
    k = 2
    while k <= p:
        j = k >> 1
        while j > 0:
            q = np.arange(p >> 1)
            i = ((q & ~(j - 1)) << 1) | (q & (j - 1))
            l = i + j
            assert np.array_equal(np.sort(np.concatenate([i, l])), np.arange(p)), "pairs cover the array once"
            a, b = s[i].copy(), s[l].copy()
            ascending = (i & k) == 0
            swap = np.where(ascending, a > b, a < b)
            s[i] = np.where(swap, b, a)
            s[l] = np.where(swap, a, b)
            j >>= 1
        k <<= 1
    return from_key(s[:n]).view(np.float32)


def grid(d: dict[str, int], n: int, sms: int) -> tuple[int, int]:
    tiles = (n + d["TILE"] - 1) // d["TILE"]
    g = min(sms * d["BLOCKS_PER_SM"], MAX_G, tiles)
    return tiles, g


def cta_range(tiles: int, G: int, b: int) -> tuple[int, int]:
    return tiles * b // G, tiles * (b + 1) // G


def digit_of(k: np.ndarray, shift: int, d: dict[str, int]) -> np.ndarray:
    return ((k >> np.uint32(shift)) & np.uint32(d["RADIX"] - 1)).astype(np.int64)


def block_exclusive_scan(values: np.ndarray) -> tuple[np.ndarray, int]:
    inclusive = np.cumsum(values, dtype=np.int64)
    return inclusive - values, int(inclusive[-1]) if values.size else 0


def upsweep(d, src, n, tiles, G, shift, first, counts):
    for b in range(G):
        t0, t1 = cta_range(tiles, G, b)
        begin, end = t0 * d["TILE"], min(t1 * d["TILE"], n)
        k = src[begin:end]
        if first:
            k = to_key(k)
        h = np.bincount(digit_of(k, shift, d), minlength=d["RADIX"])
        counts[np.arange(d["RADIX"]) * G + b] = h


def scan_counts(d, counts: np.ndarray, totals: np.ndarray, G: int) -> None:
    """One CTA per digit: its row of G counts scanned in chunks of SCAN_THREADS, with a carry."""
    for digit in range(d["RADIX"]):
        row = counts[digit * G:(digit + 1) * G]
        carry = 0
        for base in range(0, G, SCAN_THREADS):
            v = np.zeros(SCAN_THREADS, np.int64)
            m = min(SCAN_THREADS, G - base)
            v[:m] = row[base:base + m]
            ex, total = block_exclusive_scan(v)
            row[base:base + m] = carry + ex[:m]
            carry += total
        totals[digit] = carry


def digit_scan(d, per_digit: np.ndarray) -> np.ndarray:
    """The downsweep's block scan over digits: DIGITS_PER_THREAD contiguous digits per thread."""
    dpt = d["DIGITS_PER_THREAD"]
    per_thread = np.zeros(d["THREADS"] * dpt, np.int64)
    per_thread[:d["RADIX"]] = per_digit
    per_thread = per_thread.reshape(d["THREADS"], dpt)
    ex, _ = block_exclusive_scan(per_thread.sum(1))
    return (ex[:, None] + np.cumsum(per_thread, 1) - per_thread).reshape(-1)[:d["RADIX"]]


def downsweep(d, src, dst, written, n, tiles, G, shift, first, last, counts, totals, stable=True):
    R, W, ITEMS, TILE = d["RADIX"], d["NWARPS"], d["ITEMS"], d["TILE"]
    lanes = np.arange(32)
    below = lanes[None, :] < lanes[:, None]          # [l, l2]: l2 < l
    above = lanes[None, :] > lanes[:, None]
    if not stable:                                   # the broken variant: peers above rank first
        below, above = above, below
    for b in range(G):
        off = digit_scan(d, totals) + counts[np.arange(R) * G + b]
        t0, t1 = cta_range(tiles, G, b)
        for tile in range(t0, t1):
            base = tile * TILE
            valid_in_tile = min(n - base, TILE)
            pos = np.arange(TILE).reshape(W, ITEMS, 32)            # warp-striped
            valid = pos < valid_in_tile
            key = np.zeros((W, ITEMS, 32), np.uint32)
            key[valid] = src[base + pos[valid]]
            if first:
                key = to_key(key)
            s_warp = np.zeros((W, R), np.int64)
            rank = np.zeros((W, ITEMS, 32), np.int64)
            widx = np.repeat(np.arange(W)[:, None], 32, 1)
            for i in range(ITEMS):
                dg = np.where(valid[:, i], digit_of(key[:, i], shift, d), R)      # (W, 32)
                eq = dg[:, :, None] == dg[:, None, :]                           # peers masks
                if d.get("MATCH", 0) == 1:                                      # the ballot narrowing
                    ok = valid[:, i]
                    same = ok[:, :, None] == ok[:, None, :]
                    for bit in range(d["RADIX_BITS"]):
                        on = ((dg >> bit) & 1).astype(bool)
                        same &= on[:, :, None] == on[:, None, :]
                    assert np.array_equal(same[ok], eq[ok]), "ballots find the same peers"
                    eq = np.where(ok[:, :, None], same, eq)
                count = np.where(valid[:, i], s_warp[widx, np.minimum(dg, R - 1)], 0)
                rank[:, i] = count + (eq & below).sum(-1)
                leader = valid[:, i] & ((eq & above).sum(-1) == 0)
                s_warp[widx[leader], dg[leader]] = count[leader] + eq.sum(-1)[leader]
            cnt = s_warp.sum(0)
            s_warp = np.cumsum(s_warp, 0) - s_warp                               # exclusive across warps
            start = digit_scan(d, cnt)
            assert start[-1] + cnt[-1] == valid_in_tile
            s_keys = np.full(TILE, -1, np.int64)
            dg = digit_of(key, shift, d)
            slot = start[dg] + s_warp[widx[:, None, :].repeat(ITEMS, 1), dg] + rank
            assert np.all(s_keys[slot[valid]] == -1) and np.unique(slot[valid]).size == valid_in_tile
            s_keys[slot[valid]] = key[valid]
            assert np.all(s_keys[:valid_in_tile] >= 0) and np.all(s_keys[valid_in_tile:] == -1)
            j = np.arange(valid_in_tile)
            k = s_keys[:valid_in_tile].astype(np.uint32)
            dk = digit_of(k, shift, d)
            g = off[dk] + j - start[dk]
            assert np.all((g >= 0) & (g < n))
            written[g] += 1
            dst[g] = from_key(k) if last else k
            off += cnt


def radix_sort(knobs: dict[str, int], x: np.ndarray, sms: int = 132, stable: bool = True,
               force_radix: bool = False) -> np.ndarray:
    """launch(): y for x (float32), through the regime launch() picks (or the passes if forced)."""
    d = derive(knobs)
    n = x.size
    if n <= d["SMALL_N"] and not force_radix:
        return small_sort(x)
    p = 1 << (n - 1).bit_length()
    rng = np.random.default_rng(n)
    y = rng.integers(0, 2**32, n, dtype=np.uint32)                   # garbage
    ws = np.full(p, 0x7FC00000, np.uint32)                            # NaN
    counts = rng.integers(0, 2**32, MAX_G * d["RADIX"], dtype=np.uint32).astype(np.int64)
    totals = rng.integers(0, 2**32, d["RADIX"], dtype=np.uint32).astype(np.int64)
    tiles, G = grid(d, n, sms)
    src = x.view(np.uint32)
    x_before = x.copy()
    for ps in range(d["PASSES"]):
        dst = y if (d["PASSES"] - 1 - ps) % 2 == 0 else ws
        shift = ps * d["RADIX_BITS"]
        upsweep(d, src, n, tiles, G, shift, ps == 0, counts)
        scan_counts(d, counts, totals, G)
        written = np.zeros(n, np.int64)
        downsweep(d, src, dst, written, n, tiles, G, shift, ps == 0, ps == d["PASSES"] - 1, counts, totals, stable)
        assert np.all(written == 1), f"pass {ps}: every slot of the destination written once"
        src = dst
    assert src is y
    assert np.array_equal(x.view(np.uint32), x_before.view(np.uint32)), "x unchanged"
    return y.view(np.float32)
