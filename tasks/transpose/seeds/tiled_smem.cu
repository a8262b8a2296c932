// transpose seed family: y[c, r] = x[r, c] for x [rows, cols] -> y [cols, rows], both row-major.
//
// Two kernels, chosen per call in launch() (regime dispatch):
//   tiled: the classic shared-memory transpose. A block of TILE x BLOCK_ROWS threads moves a
//          TILE x TILE tile: coalesced reads of x rows into tile[TILE][TILE + 1] (one float of
//          padding, so reading a column hits 32 different banks), __syncthreads, coalesced writes
//          of y rows from tile columns. Each thread moves TILE / BLOCK_ROWS elements, all loads
//          before the barrier. The tile index is a 1-D grid (no 65535 limit on grid.y).
//   strip: for skinny matrices (cols <= SKINNY_MAX, e.g. [1048576, 33], or rows <= SKINNY_MAX),
//          where a TILE-wide tile would be mostly empty: a block moves a strip of whole rows
//          (narrow x: rows [r0, r0 + R) with R * (cols | 1) <= STRIP_FLOATS, one contiguous read)
//          or of whole columns (wide x: columns [c0, c0 + R), one contiguous write). The strip
//          lands in shared memory with an odd row pitch (nc | 1) so that both the row-wise
//          writes and the column-wise reads are conflict-free; (row, column) pairs advance by a
//          precomputed carry instead of a division per element.
// The result is a permutation: values are moved, never computed. Indices are 64-bit.
#include <cuda_runtime.h>

#define TILE 32            // knob: 16 32 64
#define BLOCK_ROWS 8       // knob: 4 8 16 32
#define SKINNY_MAX 64      // knob: 0 32 64 128
// Knob constraints (evo_fsr/knobs.py), enforced by the static_asserts below:
// constraint: BLOCK_ROWS <= TILE
// constraint: TILE * BLOCK_ROWS <= 1024

#define TILE_THREADS (TILE * BLOCK_ROWS)
#define STRIP_THREADS 256
#define STRIP_FLOATS 8192                   // 32 KB of shared memory per strip

static_assert(BLOCK_ROWS <= TILE && TILE % BLOCK_ROWS == 0, "BLOCK_ROWS must divide TILE");
static_assert(TILE * BLOCK_ROWS <= 1024, "more than 1024 threads per block");
static_assert(TILE * BLOCK_ROWS >= 32, "fewer than 32 threads per block");
static_assert(SKINNY_MAX >= 0 && SKINNY_MAX <= 128, "a strip needs at least 63 rows or columns of 8192 floats");

__global__ void __launch_bounds__(TILE_THREADS)
transpose_tiled(const float* __restrict__ x, float* __restrict__ y, int rows, int cols, int tiles_c) {
    __shared__ float tile[TILE][TILE + 1];
    const int tr = (int)(blockIdx.x / (unsigned)tiles_c), tc = (int)(blockIdx.x % (unsigned)tiles_c);
    const int r0 = tr * TILE, c0 = tc * TILE;
    const int tx = threadIdx.x % TILE, ty = threadIdx.x / TILE;
    const int c = c0 + tx;
#pragma unroll
    for (int k = 0; k < TILE / BLOCK_ROWS; ++k) {
        const int j = ty + k * BLOCK_ROWS;
        const int r = r0 + j;
        if (r < rows && c < cols) tile[j][tx] = __ldg(x + (long long)r * cols + c);
    }
    __syncthreads();
    const int orow = r0 + tx;                // y column = x row
#pragma unroll
    for (int k = 0; k < TILE / BLOCK_ROWS; ++k) {
        const int j = ty + k * BLOCK_ROWS;
        const int oc = c0 + j;               // y row = x column
        if (oc < cols && orow < rows) y[(long long)oc * rows + orow] = tile[tx][j];
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

extern "C" int launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const bool narrow = SKINNY_MAX > 0 && cols <= SKINNY_MAX && (cols <= rows || rows > SKINNY_MAX);
    const bool wide = !narrow && SKINNY_MAX > 0 && rows <= SKINNY_MAX;
    if (narrow) {                             // strips of R whole rows: R * (cols | 1) <= STRIP_FLOATS
        const int R = STRIP_FLOATS / (cols | 1);
        const long long blocks = ((long long)rows + R - 1) / R;
        transpose_strip<<<(unsigned)blocks, STRIP_THREADS, 0, stream>>>(x, y, rows, cols, R, cols, 1);
    } else if (wide) {                        // strips of R whole columns: rows * (R | 1) <= STRIP_FLOATS
        int R = STRIP_FLOATS / rows;
        if ((R | 1) > STRIP_FLOATS / rows) --R;
        const long long blocks = ((long long)cols + R - 1) / R;
        transpose_strip<<<(unsigned)blocks, STRIP_THREADS, 0, stream>>>(x, y, rows, cols, rows, R, (int)blocks);
    } else {
        const long long tiles_r = ((long long)rows + TILE - 1) / TILE;
        const long long tiles_c = ((long long)cols + TILE - 1) / TILE;
        transpose_tiled<<<(unsigned)(tiles_r * tiles_c), TILE_THREADS, 0, stream>>>(x, y, rows, cols, (int)tiles_c);
    }
    return (int)cudaGetLastError();
}
