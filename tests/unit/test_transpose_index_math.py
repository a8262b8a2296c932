"""transpose/tiled_smem: the index math of launch()'s dispatch and of the `tiled` (TILED_TILE /
TILED_BLOCK_ROWS), `aligned` and `strip2` kernels (ALIGN_Y / TILE_R / STRIP_ITEMS), restated in
NumPy and replayed block by block.

No GPU here: every block's loads, shared-memory slots and stores are computed as the kernels
compute them (the strip carries step by step, not by divmod), on x filled with distinct values,
and the test checks that every load and store is in bounds, that every shared slot read was
written by the block from the right x element, that every y element is written exactly once
with x's value, and, for ALIGN_Y > 1, that no sector (ALIGN_Y 8) or line (ALIGN_Y 32) of a y row
is stored by two blocks. y's float offset (the pointer mod 128 bytes) varies, since the aligned
tiles are anchored to y's real addresses. The `tiled` kernel is replayed at every declared
(TILED_TILE, TILED_BLOCK_ROWS), its shared-memory accesses checked conflict-free per warp. The
`strip` kernel is unchanged and validated on the GPU (tests/gpu/test_families_a_gpu.py).

The restatement is then held against the compiled launch() itself: the seed, built with nvcc for
sm_90 against a runtime that records launches instead of running them (launch_recorder.c), is
called on every shape below, and each call must launch the kernel, template tile, grid, block and
arguments the restatement names; so a launch() that sends a shape to the wrong kernel, or gives
the tiled kernel TILE instead of TILED_TILE (or the aligned kernel TILED_TILE), fails here.
"""
from __future__ import annotations

import itertools
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from evo_fsr.knobs import KnobSpace, parse_knobs, set_knobs
from evo_fsr.tasks import get_task
from evo_fsr.verdict.compile import compile_source, nvcc_path

SOURCE = get_task("transpose").seeds()["tiled_smem"]
STRIP_THREADS = 256          # transpose_strip2's block (STRIP2_THREADS) and transpose_strip's
STRIP_FLOATS = 8192          # transpose_strip's shared buffer
RECORDER = Path(__file__).with_name("launch_recorder.c")
RECORDER_RESIDENT = 132 * 6  # launch_recorder.c: 132 SMs x 6 blocks (transpose_strip2's occupancy)


def _knobs(**over: int) -> dict[str, int]:
    values = {name: int(k.value) for name, k in parse_knobs(SOURCE).items()}
    values.update(over)
    return values


def test_the_restated_constants_match_the_source() -> None:
    assert "#define STRIP2_THREADS 256" in SOURCE
    assert {"ALIGN_Y", "TILE_R", "STRIP_ITEMS", "TILED_TILE", "TILED_BLOCK_ROWS"} <= set(parse_knobs(SOURCE))
    assert "#define STRIP_FLOATS 8192" in SOURCE and "#define STRIP_THREADS 256" in SOURCE
    for text in ("__shared__ float tile[T][T + 1];", "const int r0 = tr * T, c0 = tc * T;",
                 "const int tx = threadIdx.x % T, ty = threadIdx.x / T;", "const int j = ty + k * BR;",
                 "transpose_tiled<TILED_TILE, TILED_BLOCK_ROWS><<<",
                 "((long long)rows + TILED_TILE - 1) / TILED_TILE",
                 "#define TILED_THREADS (TILED_TILE * TILED_BLOCK_ROWS)",
                 "const long long tiles_c = ((long long)cols + TILE - 1) / TILE;",
                 "transpose_aligned<<<(unsigned)(tiles_r * tiles_c), TILE_THREADS, 0, stream>>>"):
        assert text in SOURCE, text
    for text in ("const int g = low < ALIGN_Y ? low : ALIGN_Y;", "ext = ALIGN_Y - g",
                 "((long long)rows + sbase + ext + TA_TR - 1) / TA_TR",
                 "constexpr int TA_SROWS = TA_TR + ALIGN_Y - 1;", "constexpr int TA_PITCH = TILE + 1;",
                 "if (rmax >= 32) len = (len + 7) / 8 * 8;",
                 "TILE_R > 0 || (ALIGN_Y > 1 && (rows % ALIGN_Y != 0 || ((uintptr_t)y & (4u * ALIGN_Y - 1)) != 0))"):
        assert text in SOURCE, text


# ----------------------------------------------------------------------------- launch() restated

def _narrow_wide(rows: int, cols: int, k: dict[str, int]) -> tuple[bool, bool]:
    skinny = k["SKINNY_MAX"]
    narrow = skinny > 0 and cols <= skinny and (cols <= rows or rows > skinny)
    wide = not narrow and skinny > 0 and rows <= skinny
    return narrow, wide


def dispatch(rows: int, cols: int, k: dict[str, int], y_offset: int = 0) -> str:
    """launch()'s kernel choice; ``y_offset``: y's address in floats, modulo anything >= 32."""
    narrow, wide = _narrow_wide(rows, cols, k)
    if (narrow or wide) and k["STRIP_ITEMS"] > 0:
        return "strip2_narrow" if narrow else "strip2_wide"
    if narrow or wide:
        return "strip"
    if k["TILE_R"] > 0 or (k["ALIGN_Y"] > 1 and (rows % k["ALIGN_Y"] or y_offset % k["ALIGN_Y"])):
        return "aligned"
    return "tiled"


def strip_length(extent: int, rmax: int, resident: int) -> int:
    if rmax >= 32:
        rmax -= rmax % 8
    at_max = -(-extent // rmax)
    waves = -(-at_max // resident)
    length = -(-extent // (waves * resident))
    if rmax >= 32:
        length = -(-length // 8) * 8
    return max(1, min(length, rmax))


def strip2_geometry(rows: int, cols: int, k: dict[str, int], resident: int) -> tuple[int, int, int, int]:
    """(tile_r, tile_c, tiles_c, blocks) as launch() passes them to transpose_strip2."""
    floats = STRIP_THREADS * k["STRIP_ITEMS"]
    if dispatch(rows, cols, k) == "strip2_narrow":
        R = strip_length(rows, floats // (cols | 1), resident)
        return R, cols, 1, -(-rows // R)
    rmax = floats // rows
    if (rmax | 1) > floats // rows:
        rmax -= 1
    R = strip_length(cols, rmax, resident)
    blocks = -(-cols // R)
    return rows, R, blocks, blocks


def aligned_geometry(rows: int, cols: int, k: dict[str, int], yoff_floats: int) -> dict[str, int]:
    A, tile = k["ALIGN_Y"], k["TILE"]
    tr_len = tile if k["TILE_R"] == 0 else k["TILE_R"]
    yoff = yoff_floats & (A - 1)
    low = rows & -rows
    g = min(low, A)
    sbase, ext = yoff & (g - 1), A - g
    tiles_r = (rows + sbase + ext + tr_len - 1) // tr_len
    tiles_c = -(-cols // tile)
    return dict(A=A, TILE=tile, TR=tr_len, THREADS=tile * k["BLOCK_ROWS"], yoff=yoff, sbase=sbase, ext=ext,
                tiles_r=tiles_r, tiles_c=tiles_c)


def tiled_geometry(rows: int, cols: int, k: dict[str, int]) -> dict[str, int]:
    """transpose_tiled's launch: its own tile TILED_TILE, not TILE."""
    tile, block_rows = k["TILED_TILE"], k["TILED_BLOCK_ROWS"]
    tiles_r, tiles_c = -(-rows // tile), -(-cols // tile)
    return dict(TILE=tile, BR=block_rows, THREADS=tile * block_rows, tiles_r=tiles_r, tiles_c=tiles_c)


def strip_geometry(rows: int, cols: int, k: dict[str, int]) -> tuple[int, int, int, int]:
    """(tile_r, tile_c, tiles_c, blocks) as launch() passes them to transpose_strip (STRIP_ITEMS 0)."""
    if _narrow_wide(rows, cols, k)[0]:
        R = STRIP_FLOATS // (cols | 1)
        return R, cols, 1, -(-rows // R)
    R = STRIP_FLOATS // rows
    if (R | 1) > STRIP_FLOATS // rows:
        R -= 1
    blocks = -(-cols // R)
    return rows, R, blocks, blocks


def expected_launch(rows: int, cols: int, k: dict[str, int], y_offset: int,
                    resident: int = RECORDER_RESIDENT) -> tuple[str, int, int, int]:
    """(kernel, blocks, threads, the kernel's 5th argument) of one launch() call, restated: the
    kernel as launch_recorder.c reports it (tiled with its template tile, e.g. tiled<64,8>); the 5th
    argument is tiles_c for the tiled and aligned kernels, tile_r for the strips."""
    kernel = dispatch(rows, cols, k, y_offset)
    if kernel == "tiled":
        geo = tiled_geometry(rows, cols, k)
        return (f"tiled<{geo['TILE']},{geo['BR']}>", geo["tiles_r"] * geo["tiles_c"], geo["THREADS"],
                geo["tiles_c"])
    if kernel == "aligned":
        geo = aligned_geometry(rows, cols, k, y_offset)
        return "aligned", geo["tiles_r"] * geo["tiles_c"], geo["THREADS"], geo["tiles_c"]
    if kernel.startswith("strip2"):
        tile_r, _, _, blocks = strip2_geometry(rows, cols, k, resident)
        return "strip2", blocks, STRIP_THREADS, tile_r
    tile_r, _, _, blocks = strip_geometry(rows, cols, k)
    return "strip", blocks, STRIP_THREADS, tile_r


# ----------------------------------------------------------------------------- kernels restated

def _x(rows: int, cols: int) -> np.ndarray:
    return np.arange(1, rows * cols + 1, dtype=np.float64).reshape(rows, cols)      # distinct, non-zero


def emulate_aligned(rows: int, cols: int, k: dict[str, int], yoff_floats: int) -> None:
    geo = aligned_geometry(rows, cols, k, yoff_floats)
    A, TILE, TR, THREADS = geo["A"], geo["TILE"], geo["TR"], geo["THREADS"]
    assert TR % A == 0 and TR % k["BLOCK_ROWS"] == 0
    SROWS, PITCH = TR + A - 1, TILE + 1
    LOADS = -(-(SROWS * TILE) // THREADS)
    STORES = TR * TILE // THREADS
    assert STORES * THREADS == TR * TILE
    assert SROWS * PITCH * 4 <= 48 * 1024
    sbase, ext = geo["sbase"], geo["ext"]
    smax = sbase + ext
    x = _x(rows, cols)
    flat_x = x.ravel()
    y = np.full(rows * cols, np.nan)
    count = np.zeros(rows * cols, dtype=np.int64)
    owner = np.full(rows * cols, -1, dtype=np.int64)
    blocks = np.arange(geo["tiles_r"] * geo["tiles_c"], dtype=np.int64)
    tr, tc = blocks // geo["tiles_c"], blocks % geo["tiles_c"]
    c0 = tc * TILE
    rbase = tr * TR - smax
    # read: idx = t + k * THREADS over every thread and item is arange(LOADS * THREADS)
    idx = np.arange(LOADS * THREADS, dtype=np.int64)
    j, i = idx // TILE, idx % TILE
    stored = idx < SROWS * TILE                       # the shared store's bound
    slot = j * PITCH + i
    assert slot[stored].max() < SROWS * PITCH and len(np.unique(slot[stored])) == int(stored.sum())
    r, c = rbase[:, None] + j[None, :], c0[:, None] + i[None, :]
    valid = (j[None, :] < TR + ext) & (r >= 0) & (r < rows) & (c < cols)
    assert not np.any(valid & ~stored[None, :]), "a loaded element is never stored to shared memory"
    gidx = r * cols + c
    assert np.all((gidx[valid] >= 0) & (gidx[valid] < rows * cols))
    smem = np.full((len(blocks), SROWS * PITCH), np.nan)                             # never stored: NaN
    loaded = np.where(valid, flat_x[np.where(valid, gidx, 0)], -1.0)                 # not loaded: -1
    smem[:, slot[stored]] = loaded[:, stored]
    # write: idx -> (jc, p) = divmod(idx, TR)
    idx = np.arange(STORES * THREADS, dtype=np.int64)[None, :]
    p, jc = idx % TR, idx // TR
    cc = c0[:, None] + jc
    s = ((yoff_floats & (A - 1)) + (cc * rows) % (1 << 32)) % (1 << 32) & (A - 1)
    assert np.all((s >= sbase) & (s <= smax))
    rr = tr[:, None] * TR - s + p
    ok = (cc < cols) & (rr >= 0) & (rr < rows)
    sslot = (p + smax - s) * PITCH + jc
    assert np.all((sslot[ok] >= 0) & (sslot[ok] < SROWS * PITCH))
    got = smem[np.broadcast_to(blocks[:, None], ok.shape)[ok], sslot[ok]]
    yidx = cc[ok] * rows + rr[ok]
    assert np.all((yidx >= 0) & (yidx < rows * cols))
    assert np.array_equal(got, x[rr[ok], cc[ok]]), "a shared slot read holds the wrong x element"
    np.add.at(count, yidx, 1)
    y[yidx] = got
    owner[yidx] = np.broadcast_to(blocks[:, None], ok.shape)[ok]
    assert np.all(count == 1), f"y elements written {count.min()}..{count.max()} times"
    assert np.array_equal(y.reshape(cols, rows), x.T)
    if A > 1:
        # every ALIGN_Y-float unit of a y row (at y's real address) has one writer block
        addr = (yoff_floats + np.arange(rows * cols, dtype=np.int64))
        unit = addr // A
        yrow = np.arange(rows * cols, dtype=np.int64) // rows
        key = unit * (cols + 1) + yrow
        order = np.lexsort((owner, key))
        k_sorted, o_sorted = key[order], owner[order]
        same = k_sorted[1:] == k_sorted[:-1]
        assert np.all(o_sorted[1:][same] == o_sorted[:-1][same]), "a y sector/line is split between blocks"


def emulate_tiled(rows: int, cols: int, k: dict[str, int]) -> None:
    """transpose_tiled<T, BR> block by block: thread t, item k loads x[r0 + ty + k * BR, c0 + tx]
    into tile[ty + k * BR][tx], then stores y[c0 + ty + k * BR, r0 + tx] from tile[tx][ty + k * BR]."""
    geo = tiled_geometry(rows, cols, k)
    T, BR, THREADS = geo["TILE"], geo["BR"], geo["THREADS"]
    assert T % BR == 0 and 32 <= THREADS <= 1024 and THREADS % 32 == 0
    assert T * (T + 1) * 4 <= 48 * 1024
    PITCH = T + 1
    t = np.arange(THREADS, dtype=np.int64)
    items = np.arange(T // BR, dtype=np.int64)
    tx, j = np.broadcast_arrays((t % T)[None, :], (t // T)[None, :] + items[:, None] * BR)   # [item, thread]
    store_slot, load_slot = j * PITCH + tx, tx * PITCH + j      # tile[j][tx] before the barrier, tile[tx][j] after
    # shared memory: each warp's (32 consecutive threads, one item) accesses hit 32 distinct banks
    for slots in (store_slot, load_slot):
        banks = (slots % 32).reshape(-1, 32)
        assert all(len(set(w.tolist())) == 32 for w in banks), "a bank conflict"
    # every slot of the T x T tile is stored once, and the stored slots are the ones read back
    assert len(np.unique(store_slot)) == T * T and store_slot.max() < T * PITCH
    assert set(load_slot.ravel().tolist()) == set(store_slot.ravel().tolist())
    x = _x(rows, cols)
    y = np.full((cols, rows), np.nan)
    count = np.zeros((cols, rows), dtype=np.int64)
    blocks = np.arange(geo["tiles_r"] * geo["tiles_c"], dtype=np.int64)
    tr, tc = blocks // geo["tiles_c"], blocks % geo["tiles_c"]
    r0, c0 = tr * T, tc * T
    for b in range(len(blocks)):
        smem = np.full(T * PITCH, np.nan)
        r, c = r0[b] + j, c0[b] + tx
        ok = (r < rows) & (c < cols)
        smem[store_slot[ok]] = x[r[ok], c[ok]]
        orow, oc = r0[b] + tx, c0[b] + j                        # y column = x row, y row = x column
        ok = (oc < cols) & (orow < rows)
        got = smem[load_slot[ok]]
        assert np.array_equal(got, x[orow[ok], oc[ok]]), "a shared slot read holds the wrong x element"
        np.add.at(count, (oc[ok], orow[ok]), 1)
        y[oc[ok], orow[ok]] = got
    assert np.all(count == 1), f"y elements written {count.min()}..{count.max()} times"
    assert np.array_equal(y, x.T)


def _carry_walk(n: int, items: int, major_end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The strip2 kernel's divmod-free walk over rows of length ``n``: (major, minor, in range)
    of every (item, thread), minor carried into major as the kernel does; in range: major <
    ``major_end``."""
    t = np.arange(STRIP_THREADS, dtype=np.int64)
    major, minor = t // n, t % n
    d_major, d_minor = STRIP_THREADS // n, STRIP_THREADS % n
    majors, minors, valid = [], [], []
    for it in range(items):
        assert np.array_equal(major * n + minor, t + it * STRIP_THREADS) and np.all((minor >= 0) & (minor < n))
        majors.append(major.copy()); minors.append(minor.copy()); valid.append(major < major_end)
        major, minor = major + d_major, minor + d_minor
        wrap = minor >= n
        minor, major = np.where(wrap, minor - n, minor), np.where(wrap, major + 1, major)
    return np.concatenate(majors), np.concatenate(minors), np.concatenate(valid)


def _strip_pattern(nr: int, nc: int, items: int) -> tuple[np.ndarray, ...]:
    """The strip2 kernel's per-thread carries for one block shape: load (r, c) and store (c, r)
    of every (thread, item), and whether it is in range."""
    lr, lc, lv = _carry_walk(nc, items, nr)          # loads: along x rows of nc
    sc, sr, sv = _carry_walk(nr, items, nc)          # stores: along y rows of nr
    return lr, lc, lv, sr, sc, sv


def emulate_strip2(rows: int, cols: int, k: dict[str, int], resident: int) -> None:
    items = k["STRIP_ITEMS"]
    floats = STRIP_THREADS * items
    tile_r, tile_c, tiles_c, blocks = strip2_geometry(rows, cols, k, resident)
    assert tile_r >= 1 and tile_c >= 1
    x = _x(rows, cols)
    y = np.full(rows * cols, np.nan)
    count = np.zeros(rows * cols, dtype=np.int64)
    b = np.arange(blocks, dtype=np.int64)
    tr, tc = b // tiles_c, b % tiles_c
    r0, c0 = tr * tile_r, tc * tile_c
    nr, nc = np.minimum(tile_r, rows - r0), np.minimum(tile_c, cols - c0)
    assert np.all((nr >= 1) & (nc >= 1))
    assert np.all(nr * (nc | 1) <= floats), "a strip exceeds the shared buffer"
    for shape in sorted(set(zip(nr.tolist(), nc.tolist()))):
        sel = (nr == shape[0]) & (nc == shape[1])
        bnr, bnc = shape
        pitch = bnc | 1
        lr, lc, lv, sr, sc, sv = _strip_pattern(bnr, bnc, items)
        assert int(lv.sum()) == bnr * bnc and int(sv.sum()) == bnr * bnc     # the items cover the strip
        slot_in = lr[lv] * pitch + lc[lv]
        assert slot_in.max() < floats and len(np.unique(slot_in)) == len(slot_in)
        slot_out = sr[sv] * pitch + sc[sv]
        assert set(slot_out.tolist()) <= set(slot_in.tolist())
        smem_src_r = np.full(floats, -1, dtype=np.int64)
        smem_src_c = np.full(floats, -1, dtype=np.int64)
        smem_src_r[slot_in], smem_src_c[slot_in] = lr[lv], lc[lv]
        for br0, bc0 in zip(r0[sel].tolist(), c0[sel].tolist()):
            gr, gc = br0 + smem_src_r[slot_out], bc0 + smem_src_c[slot_out]   # x element in the slot
            yc, yr = bc0 + sc[sv], br0 + sr[sv]
            assert np.array_equal(gr, yr) and np.array_equal(gc, yc)
            yidx = yc * rows + yr
            assert yidx.min() >= 0 and yidx.max() < rows * cols
            np.add.at(count, yidx, 1)
            y[yidx] = x[gr, gc]
    assert np.all(count == 1)
    assert np.array_equal(y.reshape(cols, rows), x.T)


# ----------------------------------------------------------------------------- the checks

ALIGNED_CONFIGS = [
    dict(TILE=32, BLOCK_ROWS=8, ALIGN_Y=8, TILE_R=128),
    dict(TILE=32, BLOCK_ROWS=8, ALIGN_Y=32, TILE_R=64),
    dict(TILE=32, BLOCK_ROWS=8, ALIGN_Y=8, TILE_R=0),
    dict(TILE=32, BLOCK_ROWS=32, ALIGN_Y=32, TILE_R=32),
    dict(TILE=64, BLOCK_ROWS=4, ALIGN_Y=32, TILE_R=128),
    dict(TILE=64, BLOCK_ROWS=16, ALIGN_Y=8, TILE_R=32),
    dict(TILE=16, BLOCK_ROWS=4, ALIGN_Y=8, TILE_R=0),
    dict(TILE=16, BLOCK_ROWS=16, ALIGN_Y=32, TILE_R=32),
    dict(TILE=16, BLOCK_ROWS=8, ALIGN_Y=1, TILE_R=64),
]
#: validation shapes outside the strips, an odd one, and even rows with every power of two below 32
ALIGNED_SHAPES = [(1, 1), (1, 1000), (17, 33), (31, 65), (129, 257), (1234, 679), (300, 200), (4, 999),
                  (2, 77), (24, 130), (48, 70)]


@pytest.mark.parametrize("config", ALIGNED_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_aligned_tiles_move_every_element_once_with_whole_y_sectors(config: dict[str, int]) -> None:
    k = _knobs(SKINNY_MAX=0, **config)
    for (rows, cols), yoff in itertools.product(ALIGNED_SHAPES, (0, 3, 8, 29)):
        # y rows all on ALIGN_Y-float boundaries (and no taller tile asked for): the classic
        # tiled kernel's stores are aligned already, and launch() takes it; the aligned kernel
        # must still be right there (TILE_R > 0 takes it on every shape)
        aligned_rows = rows % k["ALIGN_Y"] == 0 and yoff % k["ALIGN_Y"] == 0
        expected = "tiled" if aligned_rows and k["TILE_R"] == 0 else "aligned"
        assert dispatch(rows, cols, k, yoff) == expected
        emulate_aligned(rows, cols, k, yoff)


@pytest.mark.parametrize("config", ALIGNED_CONFIGS[:2], ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_aligned_tiles_on_the_largest_validation_shape(config: dict[str, int]) -> None:
    emulate_aligned(2049, 1023, _knobs(**config), 3)


def test_aligned_extra_rows_only_where_rows_is_not_a_multiple_of_the_alignment() -> None:
    k = _knobs(ALIGN_Y=8, TILE_R=128)
    assert aligned_geometry(8192, 8192, k, 0)["ext"] == 0                 # square_8192: plain tall tiles
    assert aligned_geometry(8192, 8192, k, 5)["ext"] == 0                 # shifted y: a uniform shift
    assert aligned_geometry(12345, 6789, k, 0)["ext"] == 7                # odd: 135 of 128 rows staged
    assert aligned_geometry(12346, 6789, k, 1)["ext"] == 6
    geo = aligned_geometry(12345, 6789, _knobs(ALIGN_Y=32, TILE_R=128, TILE=32), 0)
    assert (geo["tiles_r"], geo["tiles_c"]) == (97, 213)


STRIP_SHAPES = [(1, 1), (1, 1000), (999, 1), (1000, 3), (100003, 33), (33, 100003), (5000, 128), (129, 4099),
                (70000, 64), (64, 70000), (4097, 127), (2, 3), (128, 129), (129, 128)]


@pytest.mark.parametrize("items", [16, 32])
@pytest.mark.parametrize("skinny", [32, 64, 128])
def test_strip2_moves_every_element_once(items: int, skinny: int) -> None:
    k = _knobs(STRIP_ITEMS=items, SKINNY_MAX=skinny)
    ran = 0
    for (rows, cols), resident in itertools.product(STRIP_SHAPES, (1, 7, 792)):
        if not dispatch(rows, cols, k).startswith("strip2") or (rows * cols > 1 << 20 and resident != 792):
            continue
        emulate_strip2(rows, cols, k, resident)
        ran += 1
    assert ran >= 6


def test_strip2_geometry_for_tall_33_fills_whole_waves() -> None:
    """[1048576, 33] at 6 resident blocks per SM on 132 SMs (32 KB strips): the strip kernel's 248
    rows make 4229 blocks, 5.34 waves; strip2's strips fill 6 waves (98.5 %), 224 rows each (whole
    sectors of y: 224 * 4 B = 28 sectors)."""
    k = _knobs(STRIP_ITEMS=32)
    tile_r, _, _, blocks = strip2_geometry(1 << 20, 33, k, 792)
    assert tile_r % 8 == 0 and tile_r * 33 <= STRIP_THREADS * 32
    assert blocks <= 6 * 792 and blocks > 5 * 792
    assert blocks / (6 * 792) > 0.98
    k16 = _knobs(STRIP_ITEMS=16)
    tile_r, _, _, blocks = strip2_geometry(1 << 20, 33, k16, 1056)
    assert tile_r % 8 == 0 and tile_r * 33 <= STRIP_THREADS * 16
    waves = -(-blocks // 1056)
    assert blocks / (waves * 1056) > 0.95


# ----------------------------------------------------------------------------- the tiled kernel's own tile

TILED_PAIRS = [(int(t), int(b)) for t in parse_knobs(SOURCE)["TILED_TILE"].choices
               for b in parse_knobs(SOURCE)["TILED_BLOCK_ROWS"].choices]
TILED_SHAPES = [(1, 1), (1, 1000), (999, 1), (17, 33), (31, 65), (64, 64), (65, 130), (129, 257), (300, 200)]


def test_every_declared_tiled_pair_is_valid() -> None:
    """Why the pair has static_asserts but no constraint line: every declared (TILED_TILE,
    TILED_BLOCK_ROWS) builds (32..1024 threads, whole items per thread, <= 48 KB, y segments
    aligned at every declared ALIGN_Y), so a constraint on it would exclude nothing."""
    assert len(TILED_PAIRS) == 6 and (64, 8) in TILED_PAIRS
    aligns = [int(a) for a in parse_knobs(SOURCE)["ALIGN_Y"].choices]
    for tile, block_rows in TILED_PAIRS:
        assert tile % block_rows == 0 and 32 <= tile * block_rows <= 1024, (tile, block_rows)
        assert tile * (tile + 1) * 4 <= 48 * 1024 and all(tile % a == 0 for a in aligns)
    assert _knobs()["TILED_TILE"] == 64 and _knobs()["TILED_BLOCK_ROWS"] == 8 and _knobs()["TILE"] == 32


@pytest.mark.parametrize("pair", TILED_PAIRS, ids=lambda p: f"TILED_TILE={p[0]},TILED_BLOCK_ROWS={p[1]}")
def test_tiled_kernel_moves_every_element_once_without_bank_conflicts(pair: tuple[int, int]) -> None:
    k = _knobs(TILED_TILE=pair[0], TILED_BLOCK_ROWS=pair[1], TILE=16, BLOCK_ROWS=16)   # TILE plays no part
    for rows, cols in TILED_SHAPES:
        emulate_tiled(rows, cols, k)


def test_tiled_kernel_on_the_largest_validation_shape() -> None:
    emulate_tiled(2049, 1023, _knobs())


def test_square_and_odd_shapes_take_their_own_tiles_at_the_defaults() -> None:
    """The H200 figures behind the knob: square_8192 (tiled) at a 64 tile, odd_12345x6789
    (aligned) at TILE 32, in one assignment."""
    k = _knobs()
    assert expected_launch(8192, 8192, k, 0) == ("tiled<64,8>", 128 * 128, 512, 128)
    # 32-row tiles (TILE, TILE_R 0) staging 7 extra rows: ceil((12345 + 7) / 32) x ceil(6789 / 32)
    assert expected_launch(12345, 6789, k, 0) == ("aligned", 386 * 213, 256, 213)
    assert expected_launch(8192, 8192, k, 3)[0] == "aligned"        # y rows off sector boundaries


# ----------------------------------------------------------------------------- the compiled launch()

#: main() of the recording build: launch() once per (rows, cols, y offset in floats) of argv; per
#: launch one line: kernel grid.xyz block.xyz smem stream x y rows cols arg4; per call "end rc launches".
RECORDER_MAIN = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
typedef struct { unsigned x, y, z; } rec_dim3;
int launch(const float* x, float* y, int rows, int cols, void* stream);
static int launches;
void recorder_on_launch(const char* name, rec_dim3 g, rec_dim3 b, size_t smem, void* stream, void** args) {
    printf("%s %u %u %u %u %u %u %zu %llu %llu %llu %d %d %d\n", name, g.x, g.y, g.z, b.x, b.y, b.z, smem,
           (unsigned long long)(uintptr_t)stream, (unsigned long long)(uintptr_t)*(void**)args[0],
           (unsigned long long)(uintptr_t)*(void**)args[1], *(int*)args[2], *(int*)args[3], *(int*)args[4]);
    ++launches;
}
int main(int argc, char** argv) {
    for (int i = 1; i + 2 < argc; i += 3) {
        const int rows = atoi(argv[i]), cols = atoi(argv[i + 1]), yoff = atoi(argv[i + 2]);
        launches = 0;
        const int rc = launch((const float*)(uintptr_t)X_ADDR, (float*)(uintptr_t)(Y_ADDR + 4ull * yoff), rows,
                              cols, (void*)(uintptr_t)STREAM);
        printf("end %d %d\n", rc, launches);
    }
    return 0;
}
"""
X_ADDR, Y_ADDR, STREAM = 1 << 32, 1 << 33, 0x1234     # never dereferenced: nothing runs
#: one variant per declared (TILED_TILE, TILED_BLOCK_ROWS), beside TILE / BLOCK_ROWS / ALIGN_Y /
#: TILE_R / SKINNY_MAX / STRIP_ITEMS settings that send the shapes below through every regime
LAUNCH_VARIANTS = [
    {},                                                                               # defaults: 64 x 8
    {"TILED_TILE": "32", "TILED_BLOCK_ROWS": "4", "TILE": "64", "BLOCK_ROWS": "16", "ALIGN_Y": "1",
     "SKINNY_MAX": "0"},                                                              # tiled everywhere
    {"TILED_TILE": "32", "TILED_BLOCK_ROWS": "8", "TILE": "16", "BLOCK_ROWS": "4", "ALIGN_Y": "8",
     "SKINNY_MAX": "32", "STRIP_ITEMS": "0"},
    {"TILED_TILE": "32", "TILED_BLOCK_ROWS": "16", "TILE": "32", "BLOCK_ROWS": "32", "ALIGN_Y": "32",
     "SKINNY_MAX": "128", "STRIP_ITEMS": "32"},
    {"TILED_TILE": "64", "TILED_BLOCK_ROWS": "4", "TILE": "16", "BLOCK_ROWS": "8", "ALIGN_Y": "8",
     "SKINNY_MAX": "64", "STRIP_ITEMS": "16"},
    {"TILED_TILE": "64", "TILED_BLOCK_ROWS": "16", "TILE": "64", "BLOCK_ROWS": "4", "ALIGN_Y": "32",
     "SKINNY_MAX": "64", "STRIP_ITEMS": "0"},
    {"TILE_R": "128", "ALIGN_Y": "8"},                                                # never the tiled kernel
]
LAUNCH_SHAPES = sorted({(s.env["rows"], s.env["cols"]) for s in get_task("transpose").validation}
                       | {(s.env["rows"], s.env["cols"]) for s in get_task("transpose").benchmark()}
                       | {(33, 100003), (4096, 4096), (4096, 4160), (64, 70000), (100, 64), (65, 64), (64, 65),
                          (129, 128), (5000, 128), (129, 4099), (1234, 679), (4098, 1030), (32768, 32769),
                          (24, 130), (8200, 8192)})
Y_OFFSETS = (0, 1, 8, 16)
_KERNEL_RE = re.compile(r"transpose_(tiled|aligned|strip2|strip)(?:ILi(\d+)ELi(\d+)E)?")


def _recorded_calls(values: dict[str, str], tmp: Path) -> list[tuple[int, int, int, list[tuple]]]:
    """The seed at ``values``, built for sm_90 with launch_recorder.c and called on every shape and
    y offset: (rows, cols, y offset, [(kernel, grid, block, smem, stream, x, y, rows, cols, arg4)])."""
    task = get_task("transpose")
    (tmp / "kernel.cu").write_text(task.header() + "\n" + set_knobs(SOURCE, values))
    (tmp / "main.c").write_text(RECORDER_MAIN.replace("X_ADDR", f"{X_ADDR}ull").replace("Y_ADDR", f"{Y_ADDR}ull")
                                .replace("STREAM", str(STREAM)))
    build = subprocess.run([nvcc_path(), "-std=c++17", "--cudart", "none", "-arch=sm_90", "kernel.cu", "main.c",
                            str(RECORDER), "-o", "probe"], cwd=tmp, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, f"{values}: {build.stderr[-3000:]}"
    calls = [(r, c, o) for r, c in LAUNCH_SHAPES for o in Y_OFFSETS]
    run = subprocess.run([str(tmp / "probe"), *(str(v) for call in calls for v in call)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    out, pending = [], []
    lines = iter(run.stdout.splitlines())
    for rows, cols, offset in calls:
        for line in lines:
            words = line.split()
            if words[0] == "end":
                assert words[1:] == ["0", str(len(pending))], (rows, cols, offset, line)
                break
            found = _KERNEL_RE.search(words[0])
            assert found, f"an unknown kernel {words[0]}"
            name = found[1] if found[2] is None else f"tiled<{found[2]},{found[3]}>"
            pending.append((name, *(int(w) for w in words[1:])))
        out.append((rows, cols, offset, pending))
        pending = []
    return out


def test_compiled_launch_takes_the_restated_kernel_tile_and_grid(tmp_path: Path) -> None:
    """Every LAUNCH_VARIANTS build (so every declared tiled pair compiles for sm_90), every shape
    and y offset: one launch, of the kernel and tile expected_launch() names, its grid, block
    and arguments, on the caller's stream."""
    if nvcc_path() is None:
        pytest.skip("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    space = KnobSpace.of(SOURCE)
    assert {(v.get("TILED_TILE", "64"), v.get("TILED_BLOCK_ROWS", "8")) for v in LAUNCH_VARIANTS} == {
        (str(t), str(b)) for t, b in TILED_PAIRS}
    for values in LAUNCH_VARIANTS:
        assert space.valid(values), values
    dirs = [tmp_path / f"v{i}" for i in range(len(LAUNCH_VARIANTS))]
    for d in dirs:
        d.mkdir()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_recorded_calls, LAUNCH_VARIANTS, dirs))
    seen: set[str] = set()
    for values, calls in zip(LAUNCH_VARIANTS, results):
        k = _knobs(**{name: int(v) for name, v in values.items()})
        for rows, cols, offset, launches in calls:
            kernel, blocks, threads, arg4 = expected_launch(rows, cols, k, offset)
            assert len(launches) == 1, (values, rows, cols, offset, launches)
            got = launches[0]
            want = (kernel, blocks, 1, 1, threads, 1, 1, 0, STREAM, X_ADDR, Y_ADDR + 4 * offset, rows, cols, arg4)
            assert got == want, f"{values} {rows}x{cols} y+{offset}: launched {got}, restated {want}"
            seen.add(kernel)
    assert {f"tiled<{t},{b}>" for t, b in TILED_PAIRS} | {"aligned", "strip", "strip2"} <= seen


@pytest.mark.parametrize("edit, message", [
    ({"TILED_BLOCK_ROWS": "32"}, "more than 1024 threads per tiled block"),              # 64 x 32
    ({"TILED_TILE": "32", "TILED_BLOCK_ROWS": "64"}, "TILED_BLOCK_ROWS must divide TILED_TILE"),
    ({"TILED_TILE": "128"}, "the tiled tile exceeds 48 KB of static shared memory"),
    ({"TILED_TILE": "16", "TILED_BLOCK_ROWS": "1"}, "fewer than 32 threads per tiled block"),
    ({"TILED_TILE": "16", "TILED_BLOCK_ROWS": "4", "ALIGN_Y": "32", "TILE": "32"},
     "the tiled kernel's y segments must keep ALIGN_Y alignment"),
], ids=["2048_threads", "rows_over_tile", "smem", "16_threads", "align"])
def test_static_asserts_refuse_a_tiled_pair_outside_the_declared_ones(edit: dict[str, str], message: str) -> None:
    """An edit that declares another pair meets nvcc's static_asserts (no constraint line covers it)."""
    if nvcc_path() is None:
        pytest.skip("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    source = SOURCE
    for name, value in edit.items():
        source, n = re.subn(rf"(#define {name} )\d+", rf"\g<1>{value}", source, count=1)
        assert n == 1, name
    result = compile_source(source, get_task("transpose").header(), "sm_90", cache_dir=None)
    assert not result.ok and "static assertion failed" in result.log and message in result.log, result.log[:2000]
