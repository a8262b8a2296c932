"""transpose/tiled_smem: the index math of launch()'s dispatch and of the `aligned` and `strip2`
kernels (ALIGN_Y / TILE_R / STRIP_ITEMS), restated in NumPy and replayed block by block.

No GPU here: every block's loads, shared-memory slots and stores are computed as the kernels
compute them (the strip carries step by step, not by divmod), on x filled with distinct values,
and the test checks that every load and store is in bounds, that every shared slot read was
written by the block from the right x element, that every y element is written exactly once
with x's value, and, for ALIGN_Y > 1, that no sector (ALIGN_Y 8) or line (ALIGN_Y 32) of a y row
is stored by two blocks. y's float offset (the pointer mod 128 bytes) varies, since the aligned
tiles are anchored to y's real addresses. The classic `tiled` and `strip` kernels are unchanged
and validated on the GPU (tests/gpu/test_families_a_gpu.py).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from evo_fsr.knobs import parse_knobs
from evo_fsr.tasks import get_task

SOURCE = get_task("transpose").seeds()["tiled_smem"]
STRIP_THREADS = 256          # transpose_strip2's block (STRIP2_THREADS)


def _knobs(**over: int) -> dict[str, int]:
    values = {name: int(k.value) for name, k in parse_knobs(SOURCE).items()}
    values.update(over)
    return values


def test_the_restated_constants_match_the_source() -> None:
    assert "#define STRIP2_THREADS 256" in SOURCE
    assert {"ALIGN_Y", "TILE_R", "STRIP_ITEMS"} <= set(parse_knobs(SOURCE))
    for text in ("const int g = low < ALIGN_Y ? low : ALIGN_Y;", "ext = ALIGN_Y - g",
                 "((long long)rows + sbase + ext + TA_TR - 1) / TA_TR",
                 "constexpr int TA_SROWS = TA_TR + ALIGN_Y - 1;", "constexpr int TA_PITCH = TILE + 1;",
                 "if (rmax >= 32) len = (len + 7) / 8 * 8;",
                 "TILE_R > 0 || (ALIGN_Y > 1 && (rows % ALIGN_Y != 0 || ((uintptr_t)y & (4u * ALIGN_Y - 1)) != 0))"):
        assert text in SOURCE, text


# ----------------------------------------------------------------------------- launch() restated

def dispatch(rows: int, cols: int, k: dict[str, int], y_offset: int = 0) -> str:
    """launch()'s kernel choice; ``y_offset``: y's address in floats, modulo anything >= 32."""
    skinny = k["SKINNY_MAX"]
    narrow = skinny > 0 and cols <= skinny and (cols <= rows or rows > skinny)
    wide = not narrow and skinny > 0 and rows <= skinny
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
