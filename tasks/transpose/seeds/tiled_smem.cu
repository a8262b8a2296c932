// transpose seed family: y[c, r] = x[r, c] for x [rows, cols] -> y [cols, rows], both row-major.
//
// Four kernels, chosen per call in launch() (regime dispatch):
//   tiled: the classic shared-memory transpose, with its own tile: TILED_TILE x TILED_BLOCK_ROWS
//          threads move a T x T tile (T = TILED_TILE): coalesced reads of x rows into tile[T][T + 1]
//          (one float of padding, so reading a column hits 32 different banks), __syncthreads,
//          coalesced writes of y rows from tile columns. Each thread moves T / TILED_BLOCK_ROWS
//          elements, all loads before the barrier. The tile index is a 1-D grid (no 65535 limit
//          on grid.y). (TILE_R 0, and ALIGN_Y 1 or every y row starting on an ALIGN_Y-float
//          boundary, e.g. square_8192.)
//          Why a tile of its own: with TILE 64 / BLOCK_ROWS 8 for every kernel (H200, 8 calls a
//          timing, tasks/README.md), square_8192, which takes this kernel, ran 140.1 us against
//          153.1 us at TILE 32 (93% against 85% of the copy's bandwidth; a block has 16 KB in
//          flight before its barrier instead of 4 KB, 8 loads a thread instead of 4), but
//          odd_12345x6789, which takes the aligned kernel (ALIGN_Y 8), ran 237.5 us against
//          218.0 us. One TILE cannot serve both, so TILED_TILE (default 64) sizes this kernel only
//          and TILE (default 32) stays the aligned kernel's. With the split (H200, twenty-ninth
//          session, bench_vs_library, 8 calls a timing): square_8192 140.0 us (94.2% of the
//          copy, 3.32x torch), odd_12345x6789 220.0 us and tall_33 91.5 us, as before.
//   aligned: the tiled transpose with y-aligned tile boundaries and taller tiles (TILE_R > 0, or
//          ALIGN_Y > 1 with y rows off ALIGN_Y-float boundaries: odd_12345x6789 on an H100 went
//          from 52% to 78% of speed-of-light, ALIGN_Y 8 and TILE_R 0, sixteenth session). A tile is TILE x columns by TR = TILE_R (or TILE) x rows; its y-row
//          segments are TR floats long. When rows is not a multiple of 8 (or 32) every y row
//          starts at a different offset in a 32-byte sector (128-byte line), so square tiles
//          leave a partially written sector at each end of every warp's store: 5 sectors per
//          128 bytes, and partial sectors the L2 must merge with another block's, or fill from
//          DRAM (read-modify-write) when it evicts them first. Here the tile boundaries of y row c
//          are shifted by s_c = (y's float offset of y[c, 0]) mod ALIGN_Y, so that every segment a
//          warp stores starts on an ALIGN_Y-float boundary (a sector for 8, a line for 32) and
//          covers whole sectors: element (r, c) belongs to tile row (r + s_c) / TR. The shift
//          varies along the tile's columns, so the block reads the x rows of the union of its
//          columns' ranges, TR + ext rows with ext = ALIGN_Y - g, g = gcd(rows, ALIGN_Y) (0 when
//          rows is a multiple of ALIGN_Y: then it is exactly the tiled kernel with a taller tile).
//          Those ext extra rows are re-read by the next tile row, which runs in the same wave, so
//          they are L2 hits: reads stay coalesced (32 consecutive floats per warp), DRAM traffic
//          stays 1x, and every store is full-sector. Taller tiles (TR 64 / 128) put more bytes in
//          flight: each thread issues all its (TR + ALIGN_Y - 1) * TILE / THREADS loads into
//          registers before the first shared-memory store (e.g. 17 x 4 B per thread, 17 KB per
//          256-thread block at TILE 32 / TR 128 / ALIGN_Y 8; ~100 KB per SM at 6 blocks), where
//          the tiled kernel has 4 KB per block, and they amortize the extra rows (7 of 128).
//   strip: for skinny matrices (cols <= SKINNY_MAX, e.g. [1048576, 33], or rows <= SKINNY_MAX),
//          where a TILE-wide tile would be mostly empty: a block moves a strip of whole rows
//          (narrow x: rows [r0, r0 + R) with R * (cols | 1) <= STRIP_FLOATS, one contiguous read)
//          or of whole columns (wide x: columns [c0, c0 + R), one contiguous write). The strip
//          lands in shared memory with an odd row pitch (nc | 1) so that both the row-wise
//          writes and the column-wise reads are conflict-free; (row, column) pairs advance by a
//          precomputed carry instead of a division per element. (STRIP_ITEMS 0.)
//   strip2: the same strips (STRIP_ITEMS > 0) with what the strip kernel lacks at 3 TB/s: all
//          STRIP_ITEMS loads of a thread are issued into registers before the first shared-memory
//          store (the strip kernel's `unroll 4` loop keeps 4 in flight: 4 KB per block), i.e. up
//          to 256 x STRIP_ITEMS x 4 B (16 or 32 KB) per block; and balanced waves: R is chosen so
//          that the strips fill whole waves of the resident blocks (occupancy x SMs) instead of,
//          for [1048576, 33] with R 248, 5.3 waves whose last third of a wave runs alone. R is a
//          multiple of 8 where possible, so with 32-byte-aligned y and rows a multiple of 8 every
//          y segment is whole sectors; a segment's partial end sectors are shared only with the
//          neighbouring strip (the next block index, same wave).
// The result is a permutation: values are moved, never computed. Indices are 64-bit.
#include <cuda_runtime.h>
#include <stdint.h>

#define TILE 32            // knob: 16 32 64
#define BLOCK_ROWS 8       // knob: 4 8 16 32
#define TILED_TILE 64      // knob: 32 64
#define TILED_BLOCK_ROWS 8 // knob: 4 8 16
#define SKINNY_MAX 64      // knob: 0 32 64 128
#define ALIGN_Y 8          // knob: 1 8 32
#define TILE_R 0           // knob: 0 32 64 128
#define STRIP_ITEMS 32     // knob: 0 16 32
// Knob constraints (evo_fsr/knobs.py), enforced by the static_asserts below:
// constraint: BLOCK_ROWS <= TILE
// constraint: TILE * BLOCK_ROWS <= 1024
// constraint: (TILE if TILE_R == 0 else TILE_R) % ALIGN_Y == 0
// (Every declared TILED_TILE x TILED_BLOCK_ROWS pair is valid: 128 to 1024 threads, each thread
// moving 2 to 16 elements, at most 64 x 65 x 4 B = 16.25 KB of shared memory. So no constraint
// line: one that excludes no declared combination has no combination to check nvcc's verdict on
// (tests/unit/test_families_a.py refuses it). The static_asserts below refuse a pair outside
// those bounds, should an edit declare one.)

#define TILE_THREADS (TILE * BLOCK_ROWS)
#define TILED_THREADS (TILED_TILE * TILED_BLOCK_ROWS)
#define STRIP_THREADS 256
#define STRIP_FLOATS 8192                   // 32 KB of shared memory per strip

static_assert(BLOCK_ROWS <= TILE && TILE % BLOCK_ROWS == 0, "BLOCK_ROWS must divide TILE");
static_assert(TILE * BLOCK_ROWS <= 1024, "more than 1024 threads per block");
static_assert(TILE * BLOCK_ROWS >= 32, "fewer than 32 threads per block");
static_assert(TILED_BLOCK_ROWS <= TILED_TILE && TILED_TILE % TILED_BLOCK_ROWS == 0,
              "TILED_BLOCK_ROWS must divide TILED_TILE");
static_assert(TILED_THREADS <= 1024, "more than 1024 threads per tiled block");
static_assert(TILED_THREADS >= 32, "fewer than 32 threads per tiled block");
// launch() sends y rows that start on ALIGN_Y-float boundaries here: the tile's y segments (T
// floats from y[c, tr * T]) then start on one too, i.e. whole sectors (lines at ALIGN_Y 32).
static_assert(TILED_TILE % ALIGN_Y == 0, "the tiled kernel's y segments must keep ALIGN_Y alignment");
static_assert(TILED_TILE * (TILED_TILE + 1) * 4 <= 48 * 1024, "the tiled tile exceeds 48 KB of static shared memory");
static_assert(SKINNY_MAX >= 0 && SKINNY_MAX <= 128, "a strip needs at least 63 rows or columns of 8192 floats");

// aligned kernel: TA_TR x rows per tile (the y-segment length), TA_SROWS shared rows (the tile
// plus the worst-case skew), all loads of a thread in flight at once.
constexpr int TA_TR = TILE_R == 0 ? TILE : TILE_R;
static_assert((TILE_R == 0 ? TILE : TILE_R) % ALIGN_Y == 0, "the tile height must be a multiple of ALIGN_Y");
static_assert(ALIGN_Y == 1 || ALIGN_Y == 8 || ALIGN_Y == 32, "ALIGN_Y: 1 (off), a sector or a line of floats");
static_assert(TA_TR % BLOCK_ROWS == 0, "every thread stores the same number of elements");
constexpr int TA_SROWS = TA_TR + ALIGN_Y - 1;
constexpr int TA_PITCH = TILE + 1;        // odd: a column of the tile spans 32 banks
constexpr int TA_LOADS = (TA_SROWS * TILE + TILE_THREADS - 1) / TILE_THREADS;
constexpr int TA_STORES = TA_TR * TILE / TILE_THREADS;
static_assert(TA_SROWS * TA_PITCH * 4 <= 48 * 1024, "the aligned tile exceeds 48 KB of static shared memory");

// strip2 kernel: STRIP2_FLOATS of shared memory, STRIP2_ITEMS loads in flight per thread.
#define STRIP2_THREADS 256
constexpr int STRIP2_ITEMS = STRIP_ITEMS > 0 ? STRIP_ITEMS : 1;
constexpr int STRIP2_FLOATS = STRIP2_THREADS * STRIP2_ITEMS;
static_assert(STRIP2_FLOATS >= 129, "a strip2 holds at least one row of 129 floats (cols | 1 <= 129)");
static_assert(STRIP2_FLOATS * 4 <= 48 * 1024, "strip2 exceeds 48 KB of static shared memory");

// T x T tile (T = TILED_TILE at the launch), BR = TILED_BLOCK_ROWS rows of T threads: at T 64 a
// warp is half a tile row, still 32 consecutive floats (128 B) per load and per store, and the
// padded column read tile[tx][j] hits bank (tx + j) mod 32: conflict-free at either T.
template <int T, int BR>
__global__ void __launch_bounds__(T * BR)
transpose_tiled(const float* __restrict__ x, float* __restrict__ y, int rows, int cols, int tiles_c) {
    static_assert(T % BR == 0, "every thread moves T / BR elements");
    __shared__ float tile[T][T + 1];
    const int tr = (int)(blockIdx.x / (unsigned)tiles_c), tc = (int)(blockIdx.x % (unsigned)tiles_c);
    const int r0 = tr * T, c0 = tc * T;
    const int tx = threadIdx.x % T, ty = threadIdx.x / T;
    const int c = c0 + tx;
#pragma unroll
    for (int k = 0; k < T / BR; ++k) {
        const int j = ty + k * BR;
        const int r = r0 + j;
        if (r < rows && c < cols) tile[j][tx] = __ldg(x + (long long)r * cols + c);
    }
    __syncthreads();
    const int orow = r0 + tx;                // y column = x row
#pragma unroll
    for (int k = 0; k < T / BR; ++k) {
        const int j = ty + k * BR;
        const int oc = c0 + j;               // y row = x column
        if (oc < cols && orow < rows) y[(long long)oc * rows + orow] = tile[tx][j];
    }
}

// Tile (tr, tc): x columns [c0, c0 + TILE); for each such column c, the x rows
// [tr * TA_TR - s_c, (tr + 1) * TA_TR - s_c) (clipped to [0, rows)), s_c = (yoff + c * rows) mod
// ALIGN_Y, so that y[c, tr * TA_TR - s_c] lies on an ALIGN_Y-float boundary. launch() guarantees
// s_c in [sbase, sbase + ext]: the block stages x rows [tr * TA_TR - sbase - ext, (tr + 1) * TA_TR
// - sbase), TA_TR + ext <= TA_SROWS of them, in shared row j = r - (tr * TA_TR - sbase - ext).
__global__ void __launch_bounds__(TILE_THREADS)
transpose_aligned(const float* __restrict__ x, float* __restrict__ y, int rows, int cols, int tiles_c,
                  unsigned yoff, int sbase, int ext) {
    __shared__ float tile[TA_SROWS * TA_PITCH];
    const int tr = (int)(blockIdx.x / (unsigned)tiles_c), tc = (int)(blockIdx.x % (unsigned)tiles_c);
    const int c0 = tc * TILE;
    const int smax = sbase + ext;
    const int rbase = tr * TA_TR - smax;      // x row of shared row 0 (negative in tile row 0)
    const int nsrows = TA_TR + ext;           // shared rows this tile needs
    // read: item k of thread t is idx = t + k * THREADS -> shared (j, i) = divmod(idx, TILE): a
    // warp reads 32 consecutive floats of one x row (two rows of 16 at TILE 16). All loads, then
    // all stores.
    float v[TA_LOADS];
#pragma unroll
    for (int k = 0; k < TA_LOADS; ++k) {
        const int idx = (int)threadIdx.x + k * TILE_THREADS;
        const int j = idx / TILE, i = idx % TILE;
        const int r = rbase + j, c = c0 + i;
        v[k] = 0.0f;
        if (j < nsrows && r >= 0 && r < rows && c < cols) v[k] = __ldg(x + (long long)r * cols + c);
    }
#pragma unroll
    for (int k = 0; k < TA_LOADS; ++k) {
        const int idx = (int)threadIdx.x + k * TILE_THREADS;
        if (TA_LOADS * TILE_THREADS <= TA_SROWS * TILE || idx < TA_SROWS * TILE)
            tile[(idx / TILE) * TA_PITCH + idx % TILE] = v[k];
    }
    __syncthreads();
    // write: idx -> (column jc, position p) = divmod(idx, TA_TR): a warp stores 32 consecutive
    // floats of one y row (two rows of 16 at TA_TR 16) starting on an ALIGN_Y boundary; s is
    // uniform per column, so the shared reads walk a column at odd pitch: conflict-free.
#pragma unroll
    for (int k = 0; k < TA_STORES; ++k) {
        const int idx = (int)threadIdx.x + k * TILE_THREADS;
        const int p = idx % TA_TR, jc = idx / TA_TR;
        const int c = c0 + jc;
        // mod ALIGN_Y (a power of two) survives the 32-bit wrap of c * rows
        const int s = (int)((yoff + (unsigned)c * (unsigned)rows) & (unsigned)(ALIGN_Y - 1));
        const int r = tr * TA_TR - s + p;
        if (c < cols && r >= 0 && r < rows)
            y[(long long)c * rows + r] = tile[(p + smax - s) * TA_PITCH + jc];
    }
}

// Block b moves the sub-matrix x[r0 .. r0+nr, c0 .. c0+nc) (tile_r x tile_c, clipped), with
// nr * (nc | 1) <= STRIP_FLOATS guaranteed by launch().
__global__ void __launch_bounds__(STRIP_THREADS)
transpose_strip(const float* __restrict__ x, float* __restrict__ y, int rows, int cols, int tile_r,
                int tile_c, int tiles_c) {
    __shared__ float s[STRIP_FLOATS];
    const int tr = (int)(blockIdx.x / (unsigned)tiles_c), tc = (int)(blockIdx.x % (unsigned)tiles_c);
    const int r0 = tr * tile_r, c0 = tc * tile_c;
    const int nr = min(tile_r, rows - r0), nc = min(tile_c, cols - c0);
    const int pitch = nc | 1;                 // odd: column reads are conflict-free
    const int total = nr * nc;
    // read: k -> (r, c) = divmod(k, nc), consecutive threads along x rows
    {
        int r = threadIdx.x / nc, c = threadIdx.x % nc;
        const int dr = STRIP_THREADS / nc, dc = STRIP_THREADS % nc;
#pragma unroll 4
        for (int k = threadIdx.x; k < total; k += STRIP_THREADS) {
            s[r * pitch + c] = __ldg(x + (long long)(r0 + r) * cols + (c0 + c));
            r += dr;
            c += dc;
            if (c >= nc) { c -= nc; ++r; }
        }
    }
    __syncthreads();
    // write: k -> (c, r) = divmod(k, nr), consecutive threads along y rows
    {
        int c = threadIdx.x / nr, r = threadIdx.x % nr;
        const int dc = STRIP_THREADS / nr, dr = STRIP_THREADS % nr;
#pragma unroll 4
        for (int k = threadIdx.x; k < total; k += STRIP_THREADS) {
            y[(long long)(c0 + c) * rows + (r0 + r)] = s[r * pitch + c];
            c += dc;
            r += dr;
            if (r >= nr) { r -= nr; ++c; }
        }
    }
}

// strip2: the strip kernel's block geometry (nr * (nc | 1) <= STRIP2_FLOATS, from launch()),
// with every load of a thread in flight before the first shared store, and every store unrolled.
// Item i of thread t is k = t + i * STRIP2_THREADS; k < nr * nc <= STRIP2_FLOATS, so STRIP2_ITEMS
// items cover the strip.
__global__ void __launch_bounds__(STRIP2_THREADS)
transpose_strip2(const float* __restrict__ x, float* __restrict__ y, int rows, int cols, int tile_r,
                 int tile_c, int tiles_c) {
    __shared__ float s[STRIP2_FLOATS];
    const int tr = (int)(blockIdx.x / (unsigned)tiles_c), tc = (int)(blockIdx.x % (unsigned)tiles_c);
    const int r0 = tr * tile_r, c0 = tc * tile_c;
    const int nr = min(tile_r, rows - r0), nc = min(tile_c, cols - c0);
    const int pitch = nc | 1;                 // odd: column reads are conflict-free
    const float* __restrict__ xs = x + (long long)r0 * cols + c0;
    // read: k -> (r, c) = divmod(k, nc) advanced by a carry; k < nr * nc <=> r < nr
    {
        const int r_start = (int)threadIdx.x / nc, c_start = (int)threadIdx.x % nc;
        const int dr = STRIP2_THREADS / nc, dc = STRIP2_THREADS % nc;
        float v[STRIP2_ITEMS];
        int r = r_start, c = c_start;
#pragma unroll
        for (int i = 0; i < STRIP2_ITEMS; ++i) {
            v[i] = 0.0f;
            if (r < nr) v[i] = __ldg(xs + (long long)r * cols + c);
            r += dr;
            c += dc;
            if (c >= nc) { c -= nc; ++r; }
        }
        r = r_start;
        c = c_start;
#pragma unroll
        for (int i = 0; i < STRIP2_ITEMS; ++i) {
            if (r < nr) s[r * pitch + c] = v[i];
            r += dr;
            c += dc;
            if (c >= nc) { c -= nc; ++r; }
        }
    }
    __syncthreads();
    // write: k -> (c, r) = divmod(k, nr), consecutive threads along y rows; k < nr * nc <=> c < nc
    {
        float* __restrict__ ys = y + (long long)c0 * rows + r0;
        int c = (int)threadIdx.x / nr, r = (int)threadIdx.x % nr;
        const int dc = STRIP2_THREADS / nr, dr = STRIP2_THREADS % nr;
#pragma unroll
        for (int i = 0; i < STRIP2_ITEMS; ++i) {
            if (c < nc) ys[(long long)c * rows + r] = s[r * pitch + c];
            c += dc;
            r += dr;
            if (r >= nr) { r -= nr; ++c; }
        }
    }
}

// Blocks of transpose_strip2 resident on the current device (SMs x occupancy), cached per device.
static int strip2_resident() {
    static int cached_dev = -1, cached = 0;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return 132;
    }
    if (dev != cached_dev) {
        int sms = 0, fit = 0;
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) {
            cudaGetLastError();
            sms = 132;
        }
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, transpose_strip2, STRIP2_THREADS, 0) != cudaSuccess
            || fit < 1) {
            cudaGetLastError();               // not left as the call's last error
            fit = 1;
        }
        cached = sms * fit;
        cached_dev = dev;
    }
    return cached;
}

// Strip length for `extent` rows (or columns) in strips of at most rmax: the fewest waves of
// `resident` blocks, then strips as even as possible across them, rounded up to a multiple of 8
// (whole y sectors when y is 32-byte aligned) where rmax allows.
static int strip_length(long long extent, int rmax, long long resident) {
    if (rmax >= 32) rmax -= rmax % 8;
    const long long at_max = (extent + rmax - 1) / rmax;
    const long long waves = (at_max + resident - 1) / resident;
    long long len = (extent + waves * resident - 1) / (waves * resident);
    if (rmax >= 32) len = (len + 7) / 8 * 8;
    if (len > rmax) len = rmax;
    return len < 1 ? 1 : (int)len;
}

extern "C" int launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const bool narrow = SKINNY_MAX > 0 && cols <= SKINNY_MAX && (cols <= rows || rows > SKINNY_MAX);
    const bool wide = !narrow && SKINNY_MAX > 0 && rows <= SKINNY_MAX;
    if ((narrow || wide) && STRIP_ITEMS > 0) {
        const long long resident = strip2_resident();
        if (narrow) {                         // R whole rows: R * (cols | 1) <= STRIP2_FLOATS
            const int R = strip_length(rows, STRIP2_FLOATS / (cols | 1), resident);
            const long long blocks = ((long long)rows + R - 1) / R;
            transpose_strip2<<<(unsigned)blocks, STRIP2_THREADS, 0, stream>>>(x, y, rows, cols, R, cols, 1);
        } else {                              // R whole columns: rows * (R | 1) <= STRIP2_FLOATS
            int rmax = STRIP2_FLOATS / rows;
            if ((rmax | 1) > STRIP2_FLOATS / rows) --rmax;
            const int R = strip_length(cols, rmax, resident);   // R <= rmax: (R | 1) <= (rmax | 1) or R < rmax
            const long long blocks = ((long long)cols + R - 1) / R;
            transpose_strip2<<<(unsigned)blocks, STRIP2_THREADS, 0, stream>>>(x, y, rows, cols, rows, R, (int)blocks);
        }
    } else if (narrow) {                      // strips of R whole rows: R * (cols | 1) <= STRIP_FLOATS
        const int R = STRIP_FLOATS / (cols | 1);
        const long long blocks = ((long long)rows + R - 1) / R;
        transpose_strip<<<(unsigned)blocks, STRIP_THREADS, 0, stream>>>(x, y, rows, cols, R, cols, 1);
    } else if (wide) {                        // strips of R whole columns: rows * (R | 1) <= STRIP_FLOATS
        int R = STRIP_FLOATS / rows;
        if ((R | 1) > STRIP_FLOATS / rows) --R;
        const long long blocks = ((long long)cols + R - 1) / R;
        transpose_strip<<<(unsigned)blocks, STRIP_THREADS, 0, stream>>>(x, y, rows, cols, rows, R, (int)blocks);
    } else if (TILE_R > 0 || (ALIGN_Y > 1 && (rows % ALIGN_Y != 0 || ((uintptr_t)y & (4u * ALIGN_Y - 1)) != 0))) {
        // (Every y row starting on an ALIGN_Y-float boundary, as in 8192 x 8192, leaves the
        // classic tile's stores aligned already: it takes the tiled kernel below, which measured
        // ~5% faster there than this one.)
        // y[c, 0] sits at float offset yoff + c * rows (mod ALIGN_Y); over all c these offsets are
        // yoff mod g plus multiples of g = gcd(rows, ALIGN_Y), so s_c lies in [sbase, sbase + ext].
        const unsigned yoff = (unsigned)(((uintptr_t)y >> 2) & (uintptr_t)(ALIGN_Y - 1));
        const int low = rows & -rows;         // largest power of two dividing rows
        const int g = low < ALIGN_Y ? low : ALIGN_Y;
        const int sbase = (int)(yoff & (unsigned)(g - 1)), ext = ALIGN_Y - g;
        const long long tiles_r = ((long long)rows + sbase + ext + TA_TR - 1) / TA_TR;
        const long long tiles_c = ((long long)cols + TILE - 1) / TILE;
        transpose_aligned<<<(unsigned)(tiles_r * tiles_c), TILE_THREADS, 0, stream>>>(
            x, y, rows, cols, (int)tiles_c, yoff, sbase, ext);
    } else {                                  // the tiled kernel's own tile, not TILE
        const long long tiles_r = ((long long)rows + TILED_TILE - 1) / TILED_TILE;
        const long long tiles_c = ((long long)cols + TILED_TILE - 1) / TILED_TILE;
        transpose_tiled<TILED_TILE, TILED_BLOCK_ROWS><<<(unsigned)(tiles_r * tiles_c), TILED_THREADS, 0, stream>>>(
            x, y, rows, cols, (int)tiles_c);
    }
    return (int)cudaGetLastError();
}
