// matmul: simt_regstage per shape (evo_fsr/dispatch.py assemble), built by hand from a knob sweep on an
// NVIDIA H100 80GB HBM3 (2026-11-24): tall_skinny -> WARPS_M=8 WARPS_N=1 BLOCK_K=16 MIN_BLOCKS=2 A_PHASES=4;
// any other shape -> the seed's default knobs. bench_vs_library: 0.95x cuBLAS on square_4096, 1.00x on tall_skinny.
// evo-fsr dispatch kernel: each benchmark shape goes to its best variant (evo_fsr/dispatch.py)
#include <cuda_runtime.h>
#include <stdint.h>

// ---- variant 0 ----
#define launch launch_variant_0
namespace evo_variant_0 {
// matmul seed family: a register-staged, double-buffered SIMT SGEMM (fp32 FFMA only: no tensor
// cores, no TF32; every product is accumulated in fp32 registers).
//
// Hierarchy.  A block computes a BM x BN tile of C with WARPS_M x WARPS_N warps; a warp computes a
// WARP_M x WARP_N tile with LANES_M x LANES_N lanes; a lane computes a THREAD_M x THREAD_N register
// tile, held as THREAD_M/4 x THREAD_N/4 blocks of 4x4 that sit 4*LANES_M rows (4*LANES_N columns)
// apart, so every fragment read from shared memory is one LDS.128, and the lanes of a warp read
// LANES_M distinct 16-byte A chunks (64 contiguous bytes for LANES_M=4) and LANES_N distinct B
// chunks (128 contiguous bytes for LANES_N=8): broadcasts, no bank conflict.
//
// Shared memory.  Two buffers (double buffering), each one BLOCK_K slice of A stored k-major,
// As[k][m] (row pitch AS_LD = BM + 4 floats), then of B as it lies, Bs[k][n] (pitch BN).
//
// Pipeline (one __syncthreads per K slice).  While slice t is consumed from buffer t&1:
//   * A of slice t+1 (vector path) is loaded global -> registers with LDG.128 along K and written
//     transposed into As of buffer (t+1)&1 with 4-byte st.shared.  The slice's BLOCK_K steps are
//     cut into A_PHASES phases; the quads of phase p are loaded at its first step and stored at
//     its last (A_PHASES = 1: load at the slice's start, store before its last step), so that
//     fewer staging registers are live at once;
//   * B of slice t+1 is copied global -> shared by 16-byte cp.async, issued at the start of slice
//     t, waited for (cp.async.wait_group 0) just before the barrier;
//   * within a slice, the fragments of step k+1 are read (LDS.128) while step k's FFMAs run (two
//     register buffers); at the last step the barrier is passed first and the fragments of step 0
//     of slice t+1 come from the other buffer, so the last step's FFMAs cover that latency;
//   * the last slice is peeled (a compile-time flag), so the main loop has no branch on it.
//   Race freedom: buffer (t+1)&1 was last read by fragment loads issued before the barrier that
//   ends slice t-1, so the writes of slice t into it (cp.async at its start, STS during it) come
//   after every read; the barrier that ends slice t publishes them before the first read.
//
// A's transposed stores are free of bank conflicts: a warp loads a patch of 16 rows x 2 k-quads
// (lane = 2 * row + quad, 32-byte row segments: full sectors), so for a given component i its 32
// stores hit words (4 * quad + i) * AS_LD + row; AS_LD = BM + 4 with BM % 16 == 0 makes
// 4 * AS_LD = 16 (mod 32), so quad 0 takes banks r..r+15 and quad 1 the other 16.
//
// Regimes (launch).  The vector path (A by LDG.128, B by 16-byte cp.async, C by float4 stores)
// when K % 4 == 0, N % 4 == 0 and A, B, C are 16-byte aligned; else the general path (correctness
// only: both A, transposed, and B by 4-byte cp.async in loops that are not unrolled, C by 4-byte
// stores).  Split-K when the output tiles cannot fill the GPU: up to SPLIT_K slices of K, C zeroed
// by cudaMemsetAsync on the stream, partial sums added with atomicAdd (float4 atomicAdd, sm_90, on
// the vector path; the task's determinism is `tolerance`).  Blocks are rasterized in groups of
// RASTER_GROUP tile rows so that blocks running together share A and B panels in L2.
//
// Edges (how each is handled; no inner-loop branch depends on them):
//   * M, N not multiples of BM, BN: loads of rows m >= M (A) or columns n >= N (B) are predicated
//     off and read as 0 (A, vector path: the register is set to 0; cp.async: src-size 0
//     zero-fills the destination and reads nothing); the epilogue skips rows m >= M and columns
//     n >= N.  On the vector path N % 4 == 0 and the column of a 16-byte chunk (n0 + 4c) is a
//     multiple of 4, so a chunk is either wholly inside or wholly outside [0, N).
//   * K not a multiple of BLOCK_K: k >= k_end is predicated off the same way (A quad / element
//     read as 0, B row zero-filled), so the tail slice multiplies zeros.  On the vector path
//     K % 4 == 0 and k_end (K, or a split boundary, a multiple of BLOCK_K) is a multiple of 4, as
//     is every quad's first k, so a k-quad is wholly in or out; the general path checks each k.
//   * M = N = K = 1 (or 3, 33, ...): K % 4 != 0 -> general path; one tile, one slice; only
//     element (0, 0) of A and B is read, everything else is zero-filled, only C[0] is written.
//     M = N = K = 1000 (or any multiple of 4 with aligned buffers): vector path, partial edge tiles.
//   * misaligned A, B or C (4-byte aligned only), N % 4 != 0 or K % 4 != 0: general path, every
//     global access is 4 bytes and needs only 4-byte alignment.
//   * masked-off accesses: an LDG that is predicated off is not issued; a masked cp.async on the
//     general path takes A or B itself as its source; a masked 16-byte cp.async on the vector path
//     keeps its (possibly out-of-range) computed source with src-size 0, which reads no byte (the
//     practice of CUTLASS's zfill copies).
//   * split-K: k_slices = ceil(K / BLOCK_K); splits double only while each split keeps >= 4 slices
//     (k_slices >= 8 * splits before doubling) and tiles * splits < SM count, k_chunk =
//     ceil(k_slices / splits) * BLOCK_K, then splits = ceil(K / k_chunk): no split is empty (K
//     smaller than the number of splits cannot happen: 2 splits need K > 7 * BLOCK_K), each has
//     k_left >= 1 and runs ceil(k_left / BLOCK_K) >= 1 slices.
//   * large sizes: element offsets are formed in 64-bit (m * K, k * N, m * N); the tile count and
//     RASTER_GROUP * tiles_n are checked against 2^31 - 1 in launch.  (K within BLOCK_K of 2^31
//     would overflow k_begin + k_chunk: not supported, the matrices would exceed 8 GiB per row
//     block anyway.)



#define WARPS_M 4       // variant knob 1 2 4 8
#define WARPS_N 4       // variant knob 1 2 4
#define LANES_M 4       // variant knob 2 4 8
#define THREAD_M 8      // variant knob 4 8 16
#define THREAD_N 8      // variant knob 4 8
#define BLOCK_K 16      // variant knob 8 16 32
#define SPLIT_K 4       // variant knob 1 2 4 8
#define MIN_BLOCKS 1    // variant knob 1 2 4
#define RASTER_GROUP 8  // variant knob 4 8 16
#define A_PHASES 1      // variant knob 1 2 4
// Knob constraints (evo_fsr/knobs.py), mirrored by the static_asserts below.
// A's patches of 16 rows (conflict-free transposed stores):
// variant constraint (WARPS_M * LANES_M * THREAD_M) % 16 == 0
// Registers.  REG_EST, the registers a thread is given (at least), is max(128, accumulators +
// two fragment buffers + A staging + 20), A staging being 4 when every A phase holds at most one
// quad (A_PHASES >= A_ITERS) and 4 * A_ITERS otherwise.  Calibrated with ptxas 13.0 over ~1070
// knob combinations under explicit budgets: none spilled with a budget of REG_EST or more, while
// budgets 16 above the first three terms did spill (and one 4x4 tile 24 above them under a
// 64-register budget: hence the floor of 128); then every one of the 2780 distinct kernels that
// the valid combinations make (both paths) compiled with 0 spills.  The block runs LB_BLOCKS = min(MIN_BLOCKS,
// blocks that fit REG_EST, 2048 / threads) per SM (__launch_bounds__), so MIN_BLOCKS is an upper
// bound; a combination is valid when one block fits:
// variant constraint max(128, THREAD_M * THREAD_N + 2 * (THREAD_M + THREAD_N) + (4 if A_PHASES >= (WARPS_M * LANES_M * THREAD_M * BLOCK_K // 4 + 32 * WARPS_M * WARPS_N - 1) // (32 * WARPS_M * WARPS_N) else 4 * ((WARPS_M * LANES_M * THREAD_M * BLOCK_K // 4 + 32 * WARPS_M * WARPS_N - 1) // (32 * WARPS_M * WARPS_N))) + 20) <= 255
// variant constraint 32 * WARPS_M * WARPS_N * ((max(128, THREAD_M * THREAD_N + 2 * (THREAD_M + THREAD_N) + (4 if A_PHASES >= (WARPS_M * LANES_M * THREAD_M * BLOCK_K // 4 + 32 * WARPS_M * WARPS_N - 1) // (32 * WARPS_M * WARPS_N) else 4 * ((WARPS_M * LANES_M * THREAD_M * BLOCK_K // 4 + 32 * WARPS_M * WARPS_N - 1) // (32 * WARPS_M * WARPS_N))) + 20) + 7) // 8 * 8) <= 65536
// Shared memory (two buffers of A and B slices) within sm_90's 227 KiB per block:
// variant constraint 2 * BLOCK_K * (WARPS_M * LANES_M * THREAD_M + 4 + WARPS_N * (32 // LANES_M) * THREAD_N) * 4 <= 227 * 1024

#define LANES_N (32 / LANES_M)
#define WARP_M (LANES_M * THREAD_M)
#define WARP_N (LANES_N * THREAD_N)
#define BM (WARPS_M * WARP_M)
#define BN (WARPS_N * WARP_N)
#define THREADS (32 * WARPS_M * WARPS_N)
#define AS_LD (BM + 4)                       // padded row of As[k][.]: = 4 (mod 16)
#define BS_LD (BN)                           // row of Bs[k][.] (read one k row at a time: no pad)
#define AS_FLOATS (BLOCK_K * AS_LD)
#define BS_FLOATS (BLOCK_K * BS_LD)
#define STAGE_FLOATS (AS_FLOATS + BS_FLOATS)   // one buffer: As[BLOCK_K][AS_LD], then Bs[BLOCK_K][BS_LD]
#define SMEM_BYTES (2 * STAGE_FLOATS * 4)
#define KQ (BLOCK_K / 4)                     // k-quads per A row of a slice
#define A_QUADS (BM * KQ)                    // 16-byte quads of an A slice (multiple of 32)
#define A_ITERS ((A_QUADS + THREADS - 1) / THREADS)
#define A_STAGE_REGS (A_PHASES >= A_ITERS ? 4 : 4 * A_ITERS)   // A staging registers (estimate)
#define REG_EST_RAW (THREAD_M * THREAD_N + 2 * (THREAD_M + THREAD_N) + A_STAGE_REGS + 20)
#define REG_EST (REG_EST_RAW > 128 ? REG_EST_RAW : 128)
#define REG_EST8 ((REG_EST + 7) / 8 * 8)                   // allocation granule: 8 per thread
#define FIT_BLOCKS (65536 / (THREADS * REG_EST8))
#define MIN2(a, b) ((a) < (b) ? (a) : (b))
#define LB_BLOCKS MIN2(MIN2(MIN_BLOCKS, FIT_BLOCKS), 2048 / THREADS)   // __launch_bounds__ blocks

static_assert(BM % 16 == 0, "A is loaded in patches of 16 rows");
static_assert(BLOCK_K % 8 == 0, "A is loaded in patches of 2 k-quads; fragments double-buffered");
static_assert(THREAD_M % 4 == 0 && THREAD_N % 4 == 0, "register tiles are made of 4x4 blocks");
static_assert(LANES_M * LANES_N == 32, "a warp has 32 lanes");
static_assert(REG_EST <= 255 && FIT_BLOCKS >= 1, "knob combination's register tile does not fit one block");
static_assert(SMEM_BYTES <= 227 * 1024, "knob combination needs more than 227 KiB of shared memory");

__device__ __forceinline__ void cp_async_4(float* smem, const float* gmem, bool valid) {
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    int bytes = valid ? 4 : 0;          // 0: no read, the 4 bytes are zero-filled
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_16(float* smem, const float* gmem, bool valid) {
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    int bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// 16-byte global load (read-only path); the caller guarantees 16-byte alignment.
__device__ __forceinline__ float4 ldg4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

// Four consecutive floats of shared memory (16-byte aligned) into f[0..3].
__device__ __forceinline__ void lds4(float* f, const float* smem) {
    float4 v = *reinterpret_cast<const float4*>(smem);
    f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
}

// Loader geometry.  Quad e = tid + j * THREADS of an A slice lies in patch p = e / 32 (16 rows x
// 2 k-quads, lane = 2 * row + quad); patches go k-first, P = KQ / 2 per 16 rows.  With W = THREADS
// / 32 warps, p = warp + j * W, and as W and P are powers of two (one divides the other), the j-th
// quad of a thread sits at compile-time offsets from its 0-th: rows + 16 * (j * W / P), k-quads
// + 2 * (j * W % P).  Likewise chunk e of a B slice (Q = BN / 4 chunks per k row on the vector
// path, BN elements on the general one): k row + j * THREADS / Q, chunk + j * THREADS % Q.
#define A_P (KQ / 2)
#define A_PHASE_STEPS (BLOCK_K / A_PHASES)           // k steps of one A phase
#define A_PHASE_OF(j) (((j) * A_PHASES) / A_ITERS)   // phase of quad j
#define A_DROW(j) (16 * (((j) * (THREADS / 32)) / A_P))
#define A_DKQ(j) (2 * (((j) * (THREADS / 32)) % A_P))

// Vector path: the A quads of phase `phase` (A_PHASE_OF(j) == phase; -1: all) of the slice at
// a_ptr (the thread's quad 0: its row, k = kt + kq4) -> registers, zero outside the matrix: a
// quad is read when its row is < M (drow < rows_left) and its k's are < k_end (K % 4 == 0 and
// k_end % 4 == 0 here, so a quad is wholly in or out).
__device__ __forceinline__ void ldg_a(float4 (&r)[A_ITERS], const float* a_ptr, int K, int rows_left,
                                      int kq4, int k_left, int warp, int phase) {
#pragma unroll
    for (int j = 0; j < A_ITERS; ++j) {
        if (phase >= 0 && A_PHASE_OF(j) != phase) continue;            // compile-time
        if (A_QUADS % THREADS == 0 || warp + j * (THREADS / 32) < A_QUADS / 32) {   // warp-uniform
            const float* p = a_ptr + ((long long)A_DROW(j) * K + 4 * A_DKQ(j));
            const bool ok = A_DROW(j) < rows_left && kq4 + 4 * A_DKQ(j) < k_left;
            r[j] = ok ? ldg4(p) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
}

// General path: the A slice [kt, kt + BLOCK_K) of the block's rows straight into As (transposed)
// by 4-byte cp.async (zero-fill outside the matrix; the source of a masked copy is A itself).
// a_blk = A + m0 * K + kt.  A loop that is not unrolled: no registers held for it.
__device__ __forceinline__ void cp_a_general(float* As_n, const float* a_blk, const float* __restrict__ A,
                                             int K, int rows, int k_left, int tid) {
#pragma unroll 1
    for (int e = tid; e < BM * BLOCK_K; e += THREADS) {
        const int row = e / BLOCK_K, kk = e % BLOCK_K;              // consecutive threads along k
        const bool ok = row < rows && kk < k_left;
        cp_async_4(As_n + kk * AS_LD + row, ok ? a_blk + ((long long)row * K + kk) : A, ok);
    }
}

// Registers -> As (transposed: As[k][m]); as_thr = As_n + kq4 * AS_LD + row of quad 0; only
// the quads of phase `phase` (-1: all).
__device__ __forceinline__ void sts_a(float* as_thr, const float4 (&r)[A_ITERS], int warp, int phase) {
#pragma unroll
    for (int j = 0; j < A_ITERS; ++j) {
        if (phase >= 0 && A_PHASE_OF(j) != phase) continue;            // compile-time
        if (A_QUADS % THREADS == 0 || warp + j * (THREADS / 32) < A_QUADS / 32) {
            float* d = as_thr + 4 * A_DKQ(j) * AS_LD + A_DROW(j);
            d[0 * AS_LD] = r[j].x;
            d[1 * AS_LD] = r[j].y;
            d[2 * AS_LD] = r[j].z;
            d[3 * AS_LD] = r[j].w;
        }
    }
}

// B slice -> Bs by cp.async (zero-fill outside the matrix).  b_ptr: the thread's chunk 0 in
// global memory (k row kt + kk0, column n0 + col0); bs_thr: its place in Bs_n; cols_left = N -
// n0 - col0; the source of a masked copy is B itself (src-size 0: nothing is read).  The general
// path (4-byte copies, correctness only: timed shapes take the vector path) runs a loop that is
// not unrolled, so that its many copies hold no registers through the main loop.
template <bool VEC>
__device__ __forceinline__ void cp_b(float* bs_thr, const float* b_ptr, const float* __restrict__ B,
                                     int N, int kk0, int cols_left, int k_left, int tid) {
    if (VEC) {
        constexpr int Q = BN / 4;                         // chunks of a k row
        constexpr int UNITS = BLOCK_K * Q;
        constexpr int ITERS = (UNITS + THREADS - 1) / THREADS;
#pragma unroll
        for (int j = 0; j < ITERS; ++j) {
            if (UNITS % THREADS == 0 || tid + j * THREADS < UNITS) {
                const int dkk = (j * THREADS) / Q, dc = 4 * ((j * THREADS) % Q);
                const bool ok = kk0 + dkk < k_left && dc < cols_left;
                cp_async_16(bs_thr + dkk * BS_LD + dc, b_ptr + ((long long)dkk * N + dc), ok);
            }
        }
    } else {
        constexpr int UNITS = BLOCK_K * BN;
#pragma unroll 1
        for (int j = 0; tid + j * THREADS < UNITS; ++j) {
            const int dkk = (j * THREADS) / BN, dc = (j * THREADS) % BN;
            const bool ok = kk0 + dkk < k_left && dc < cols_left;
            const float* src = ok ? b_ptr + ((long long)dkk * N + dc) : B;
            cp_async_4(bs_thr + dkk * BS_LD + dc, src, ok);
        }
    }
}

template <bool V>
struct BoolTag { static constexpr bool value = V; };

// Grouped rasterization: RASTER_GROUP tile rows are walked column by column; block pid -> its
// tile's first row m0 and column n0.
__device__ __forceinline__ void tile_origin(int pid, int tiles_m, int tiles_n, int& m0, int& n0) {
    const int per_group = RASTER_GROUP * tiles_n;            // fits an int (checked in launch)
    const int group = pid / per_group;
    const int first_m = group * RASTER_GROUP;
    const int group_m = min(tiles_m - first_m, RASTER_GROUP);
    const int in_group = pid - group * per_group;
    m0 = (first_m + in_group % group_m) * BM;
    n0 = (in_group / group_m) * BN;
}

// Thread tid's first row (in the block tile) of its register tile's block 0, and first column.
__device__ __forceinline__ void lane_origin(int tid, int& a_col, int& b_col) {
    const int lane = tid & 31, warp = tid >> 5;
    a_col = (warp / WARPS_N) * WARP_M + (lane / LANES_N) * 4;
    b_col = (warp % WARPS_N) * WARP_N + (lane % LANES_N) * 4;
}

// Special registers read again (volatile: not merged with the first reads), so that the
// epilogue recomputes its coordinates instead of holding them in registers through the main loop.
__device__ __forceinline__ int ctaid_x_again() { int v; asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v)); return v; }
__device__ __forceinline__ int tid_x_again() { int v; asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v)); return v; }

// C[m0.., n0..] (+)= A[m0.., k-range of blockIdx.z] * B[k-range, n0..].
// k_chunk: the K extent of one split (a multiple of BLOCK_K); gridDim.z > 1 means split-K (atomics).
template <bool VEC>
__global__ void __launch_bounds__(THREADS, LB_BLOCKS)
sgemm_regstage(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M,
               int K, int N, int k_chunk, int tiles_m, int tiles_n) {
    extern __shared__ __align__(16) float smem[];
    // Buffer s (0, 1) at smem + s * STAGE_FLOATS: As[BLOCK_K][AS_LD] then Bs[BLOCK_K][BS_LD].
    float* const As = smem;
    float* const Bs = smem + AS_FLOATS;

    int m0, n0;
    tile_origin(blockIdx.x, tiles_m, tiles_n, m0, n0);

    const int k_begin = blockIdx.z * k_chunk;
    const int k_end = min(K, k_begin + k_chunk);

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    int a_col, b_col;                       // fragment origins in the tile (see lane_origin)
    lane_origin(tid, a_col, b_col);

    // This thread's loader coordinates (quad 0 of A, chunk 0 of B; see "Loader geometry").
    const int a_row = (warp / A_P) * 16 + (lane >> 1);               // row in the tile
    const int a_kq4 = 4 * ((warp % A_P) * 2 + (lane & 1));           // k offset in the slice
    // Rows of A left from this thread's quad-0 row (vector path: quad j in iff A_DROW(j) < this)
    // or from the tile's first row (general path).
    const int a_rows_left = M - m0 - (VEC ? a_row : 0);
    constexpr int B_Q = VEC ? BN / 4 : BN;
    const int b_kk0 = tid / B_Q;
    const int b_col0 = (VEC ? 4 : 1) * (tid % B_Q);
    const int b_cols_left = N - n0 - b_col0;
    // A: this thread's quad 0 (vector path) or the tile's first row (general path); advanced per slice.
    const float* a_ptr = A + ((long long)(m0 + (VEC ? a_row : 0)) * K + k_begin + (VEC ? a_kq4 : 0));
    const float* b_ptr = B + ((long long)(k_begin + b_kk0) * N + n0 + b_col0);
    float* const as_thr = As + a_kq4 * AS_LD + a_row;                 // + buffer offset
    float* const bs_thr = Bs + b_kk0 * BS_LD + b_col0;

    float acc[THREAD_M][THREAD_N];
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
        for (int j = 0; j < THREAD_N; ++j) acc[i][j] = 0.0f;

    // Prologue: slice 0 into buffer 0.
    float4 a_stage[A_ITERS];
    int k_left = k_end - k_begin;          // k's of the matrix from the slice's first on
    if (VEC) ldg_a(a_stage, a_ptr, K, a_rows_left, a_kq4, k_left, warp, -1);
    else cp_a_general(As, a_ptr, A, K, a_rows_left, k_left, tid);
    cp_b<VEC>(bs_thr, b_ptr, B, N, b_kk0, b_cols_left, k_left, tid);
    cp_async_commit();
    if (VEC) sts_a(as_thr, a_stage, warp, -1);
    cp_async_wait_all();
    __syncthreads();

    float a_frag[2][THREAD_M], b_frag[2][THREAD_N];
#pragma unroll
    for (int c = 0; c < THREAD_M / 4; ++c) lds4(&a_frag[0][4 * c], As + a_col + c * 4 * LANES_M);
#pragma unroll
    for (int c = 0; c < THREAD_N / 4; ++c) lds4(&b_frag[0][4 * c], Bs + b_col + c * 4 * LANES_N);

    // One slice: consume buffer `cur`; when there is a next slice (HAS_NEXT, a compile-time flag:
    // the last slice is peeled off so that the main loop has no branch on it), load slice t+1 into
    // the other buffer meanwhile and publish it with the barrier.  k_left: k's of the matrix from
    // the first k of the slice being consumed (> 0); cur: the float offset of its buffer.
    int cur = 0;
    auto slice = [&](auto has_next_tag) {
        constexpr bool has_next = decltype(has_next_tag)::value;
        const int nxt = STAGE_FLOATS - cur;
        if (has_next) {                      // slice t+1: B (and A, general path) -> its buffer (in flight)
            k_left -= BLOCK_K;               // now of slice t+1
            a_ptr += BLOCK_K;
            b_ptr += (long long)BLOCK_K * N;
            if (!VEC) cp_a_general(As + nxt, a_ptr, A, K, a_rows_left, k_left, tid);
            cp_b<VEC>(bs_thr + nxt, b_ptr, B, N, b_kk0, b_cols_left, k_left, tid);
            cp_async_commit();
        }
        const float* As_c = As + cur;
        const float* Bs_c = Bs + cur;
#pragma unroll
        for (int kk = 0; kk < BLOCK_K; ++kk) {
            const int nf = (kk + 1) & 1;
            if (VEC && has_next && kk % A_PHASE_STEPS == 0)  // phase starts: its A quads -> registers
                ldg_a(a_stage, a_ptr, K, a_rows_left, a_kq4, k_left, warp, kk / A_PHASE_STEPS);
            if (VEC && has_next && kk % A_PHASE_STEPS == A_PHASE_STEPS - 1)   // phase ends: -> As of t+1
                sts_a(as_thr + nxt, a_stage, warp, kk / A_PHASE_STEPS);
            if (kk + 1 < BLOCK_K) {          // fragments of step kk+1 while step kk computes
                const float* a_src = As_c + (kk + 1) * AS_LD + a_col;
                const float* b_src = Bs_c + (kk + 1) * BS_LD + b_col;
#pragma unroll
                for (int c = 0; c < THREAD_M / 4; ++c) lds4(&a_frag[nf][4 * c], a_src + c * 4 * LANES_M);
#pragma unroll
                for (int c = 0; c < THREAD_N / 4; ++c) lds4(&b_frag[nf][4 * c], b_src + c * 4 * LANES_N);
            } else if (has_next) {           // publish slice t+1, then its step-0 fragments
                cp_async_wait_all();
                __syncthreads();
#pragma unroll
                for (int c = 0; c < THREAD_M / 4; ++c) lds4(&a_frag[nf][4 * c], As + nxt + a_col + c * 4 * LANES_M);
#pragma unroll
                for (int c = 0; c < THREAD_N / 4; ++c) lds4(&b_frag[nf][4 * c], Bs + nxt + b_col + c * 4 * LANES_N);
            }
            const int cf = kk & 1;
#pragma unroll
            for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
                for (int j = 0; j < THREAD_N; ++j) acc[i][j] = fmaf(a_frag[cf][i], b_frag[cf][j], acc[i][j]);
        }
        cur = nxt;
    };
    while (k_left > BLOCK_K) slice(BoolTag<true>{});   // slice t+1 exists iff k_left > BLOCK_K
    slice(BoolTag<false>{});

    const bool split = gridDim.z > 1;
    tile_origin(ctaid_x_again(), tiles_m, tiles_n, m0, n0);
    lane_origin(tid_x_again(), a_col, b_col);
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i) {
        const int m = m0 + a_col + (i / 4) * 4 * LANES_M + (i % 4);
        if (m >= M) continue;
        float* c_row = C + (long long)m * N;
#pragma unroll
        for (int cb = 0; cb < THREAD_N / 4; ++cb) {
            const int n = n0 + b_col + cb * 4 * LANES_N;
            if (VEC) {
                if (n < N) {
                    const float4 v = make_float4(acc[i][4 * cb], acc[i][4 * cb + 1], acc[i][4 * cb + 2],
                                                 acc[i][4 * cb + 3]);
                    float4* dst = reinterpret_cast<float4*>(c_row + n);
                    if (split) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                        atomicAdd(dst, v);
#else
                        atomicAdd(c_row + n, v.x); atomicAdd(c_row + n + 1, v.y);
                        atomicAdd(c_row + n + 2, v.z); atomicAdd(c_row + n + 3, v.w);
#endif
                    } else {
                        *dst = v;
                    }
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    if (n + j < N) {
                        if (split) atomicAdd(c_row + n + j, acc[i][4 * cb + j]);
                        else c_row[n + j] = acc[i][4 * cb + j];
                    }
                }
            }
        }
    }
}

template <bool VEC>
static cudaError_t launch_gemm(const float* A, const float* B, float* C, int M, int K, int N,
                               int k_chunk, int splits, int tiles_m, int tiles_n, cudaStream_t stream) {
    if (SMEM_BYTES > 48 * 1024) {
        cudaError_t err = cudaFuncSetAttribute(sgemm_regstage<VEC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               SMEM_BYTES);
        if (err != cudaSuccess) return err;
    }
    dim3 grid((unsigned)(tiles_m * tiles_n), 1u, (unsigned)splits);
    sgemm_regstage<VEC><<<grid, THREADS, SMEM_BYTES, stream>>>(A, B, C, M, K, N, k_chunk, tiles_m, tiles_n);
    return cudaSuccess;
}

extern "C" int launch(const float* A, const float* B, float* C, int M, int K, int N,
                      cudaStream_t stream) {
    if (M <= 0 || N <= 0 || K <= 0) return (int)cudaErrorInvalidValue;
    const long long tiles_m = (M + (long long)BM - 1) / BM;
    const long long tiles_n = (N + (long long)BN - 1) / BN;
    // The grid's x extent, and RASTER_GROUP * tiles_n (int arithmetic in the kernel).
    if (tiles_m * tiles_n > 0x7fffffffLL || (long long)RASTER_GROUP * tiles_n > 0x7fffffffLL)
        return (int)cudaErrorInvalidValue;
    const int tiles = (int)(tiles_m * tiles_n);

    // Split-K regime: too few output tiles for one wave, and a K long enough to share.
    static int sm_count = 0;
    if (sm_count == 0) {
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess ||
            cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
            sm_count = 132;
    }
    const int k_slices = (K + BLOCK_K - 1) / BLOCK_K;
    int splits = 1;
    while (splits * 2 <= SPLIT_K && (long long)tiles * splits < sm_count && k_slices >= splits * 2 * 4)
        splits *= 2;
    const int k_chunk = ((k_slices + splits - 1) / splits) * BLOCK_K;
    splits = (int)(((long long)K + k_chunk - 1) / k_chunk);   // no empty split

    if (splits > 1) {
        cudaError_t err = cudaMemsetAsync(C, 0, sizeof(float) * (size_t)M * (size_t)N, stream);
        if (err != cudaSuccess) return (int)err;
    }
    const bool vec = (K % 4 == 0) && (N % 4 == 0) && ((uintptr_t)A % 16 == 0) && ((uintptr_t)B % 16 == 0) &&
                     ((uintptr_t)C % 16 == 0);
    cudaError_t err = vec ? launch_gemm<true>(A, B, C, M, K, N, k_chunk, splits, (int)tiles_m, (int)tiles_n, stream)
                          : launch_gemm<false>(A, B, C, M, K, N, k_chunk, splits, (int)tiles_m, (int)tiles_n, stream);
    if (err != cudaSuccess) return (int)err;
    return (int)cudaGetLastError();
}
}  // namespace evo_variant_0
#undef launch
#undef AS_FLOATS
#undef AS_LD
#undef A_DKQ
#undef A_DROW
#undef A_ITERS
#undef A_P
#undef A_PHASES
#undef A_PHASE_OF
#undef A_PHASE_STEPS
#undef A_QUADS
#undef A_STAGE_REGS
#undef BLOCK_K
#undef BM
#undef BN
#undef BS_FLOATS
#undef BS_LD
#undef FIT_BLOCKS
#undef KQ
#undef LANES_M
#undef LANES_N
#undef LB_BLOCKS
#undef MIN2
#undef MIN_BLOCKS
#undef RASTER_GROUP
#undef REG_EST
#undef REG_EST8
#undef REG_EST_RAW
#undef SMEM_BYTES
#undef SPLIT_K
#undef STAGE_FLOATS
#undef THREADS
#undef THREAD_M
#undef THREAD_N
#undef WARPS_M
#undef WARPS_N
#undef WARP_M
#undef WARP_N

// ---- variant 1 ----
#define launch launch_variant_1
namespace evo_variant_1 {
// matmul seed family: a register-staged, double-buffered SIMT SGEMM (fp32 FFMA only: no tensor
// cores, no TF32; every product is accumulated in fp32 registers).
//
// Hierarchy.  A block computes a BM x BN tile of C with WARPS_M x WARPS_N warps; a warp computes a
// WARP_M x WARP_N tile with LANES_M x LANES_N lanes; a lane computes a THREAD_M x THREAD_N register
// tile, held as THREAD_M/4 x THREAD_N/4 blocks of 4x4 that sit 4*LANES_M rows (4*LANES_N columns)
// apart, so every fragment read from shared memory is one LDS.128, and the lanes of a warp read
// LANES_M distinct 16-byte A chunks (64 contiguous bytes for LANES_M=4) and LANES_N distinct B
// chunks (128 contiguous bytes for LANES_N=8): broadcasts, no bank conflict.
//
// Shared memory.  Two buffers (double buffering), each one BLOCK_K slice of A stored k-major,
// As[k][m] (row pitch AS_LD = BM + 4 floats), then of B as it lies, Bs[k][n] (pitch BN).
//
// Pipeline (one __syncthreads per K slice).  While slice t is consumed from buffer t&1:
//   * A of slice t+1 (vector path) is loaded global -> registers with LDG.128 along K and written
//     transposed into As of buffer (t+1)&1 with 4-byte st.shared.  The slice's BLOCK_K steps are
//     cut into A_PHASES phases; the quads of phase p are loaded at its first step and stored at
//     its last (A_PHASES = 1: load at the slice's start, store before its last step), so that
//     fewer staging registers are live at once;
//   * B of slice t+1 is copied global -> shared by 16-byte cp.async, issued at the start of slice
//     t, waited for (cp.async.wait_group 0) just before the barrier;
//   * within a slice, the fragments of step k+1 are read (LDS.128) while step k's FFMAs run (two
//     register buffers); at the last step the barrier is passed first and the fragments of step 0
//     of slice t+1 come from the other buffer, so the last step's FFMAs cover that latency;
//   * the last slice is peeled (a compile-time flag), so the main loop has no branch on it.
//   Race freedom: buffer (t+1)&1 was last read by fragment loads issued before the barrier that
//   ends slice t-1, so the writes of slice t into it (cp.async at its start, STS during it) come
//   after every read; the barrier that ends slice t publishes them before the first read.
//
// A's transposed stores are free of bank conflicts: a warp loads a patch of 16 rows x 2 k-quads
// (lane = 2 * row + quad, 32-byte row segments: full sectors), so for a given component i its 32
// stores hit words (4 * quad + i) * AS_LD + row; AS_LD = BM + 4 with BM % 16 == 0 makes
// 4 * AS_LD = 16 (mod 32), so quad 0 takes banks r..r+15 and quad 1 the other 16.
//
// Regimes (launch).  The vector path (A by LDG.128, B by 16-byte cp.async, C by float4 stores)
// when K % 4 == 0, N % 4 == 0 and A, B, C are 16-byte aligned; else the general path (correctness
// only: both A, transposed, and B by 4-byte cp.async in loops that are not unrolled, C by 4-byte
// stores).  Split-K when the output tiles cannot fill the GPU: up to SPLIT_K slices of K, C zeroed
// by cudaMemsetAsync on the stream, partial sums added with atomicAdd (float4 atomicAdd, sm_90, on
// the vector path; the task's determinism is `tolerance`).  Blocks are rasterized in groups of
// RASTER_GROUP tile rows so that blocks running together share A and B panels in L2.
//
// Edges (how each is handled; no inner-loop branch depends on them):
//   * M, N not multiples of BM, BN: loads of rows m >= M (A) or columns n >= N (B) are predicated
//     off and read as 0 (A, vector path: the register is set to 0; cp.async: src-size 0
//     zero-fills the destination and reads nothing); the epilogue skips rows m >= M and columns
//     n >= N.  On the vector path N % 4 == 0 and the column of a 16-byte chunk (n0 + 4c) is a
//     multiple of 4, so a chunk is either wholly inside or wholly outside [0, N).
//   * K not a multiple of BLOCK_K: k >= k_end is predicated off the same way (A quad / element
//     read as 0, B row zero-filled), so the tail slice multiplies zeros.  On the vector path
//     K % 4 == 0 and k_end (K, or a split boundary, a multiple of BLOCK_K) is a multiple of 4, as
//     is every quad's first k, so a k-quad is wholly in or out; the general path checks each k.
//   * M = N = K = 1 (or 3, 33, ...): K % 4 != 0 -> general path; one tile, one slice; only
//     element (0, 0) of A and B is read, everything else is zero-filled, only C[0] is written.
//     M = N = K = 1000 (or any multiple of 4 with aligned buffers): vector path, partial edge tiles.
//   * misaligned A, B or C (4-byte aligned only), N % 4 != 0 or K % 4 != 0: general path, every
//     global access is 4 bytes and needs only 4-byte alignment.
//   * masked-off accesses: an LDG that is predicated off is not issued; a masked cp.async on the
//     general path takes A or B itself as its source; a masked 16-byte cp.async on the vector path
//     keeps its (possibly out-of-range) computed source with src-size 0, which reads no byte (the
//     practice of CUTLASS's zfill copies).
//   * split-K: k_slices = ceil(K / BLOCK_K); splits double only while each split keeps >= 4 slices
//     (k_slices >= 8 * splits before doubling) and tiles * splits < SM count, k_chunk =
//     ceil(k_slices / splits) * BLOCK_K, then splits = ceil(K / k_chunk): no split is empty (K
//     smaller than the number of splits cannot happen: 2 splits need K > 7 * BLOCK_K), each has
//     k_left >= 1 and runs ceil(k_left / BLOCK_K) >= 1 slices.
//   * large sizes: element offsets are formed in 64-bit (m * K, k * N, m * N); the tile count and
//     RASTER_GROUP * tiles_n are checked against 2^31 - 1 in launch.  (K within BLOCK_K of 2^31
//     would overflow k_begin + k_chunk: not supported, the matrices would exceed 8 GiB per row
//     block anyway.)



#define WARPS_M 8       // variant knob 1 2 4 8
#define WARPS_N 1       // variant knob 1 2 4
#define LANES_M 4       // variant knob 2 4 8
#define THREAD_M 8      // variant knob 4 8 16
#define THREAD_N 8      // variant knob 4 8
#define BLOCK_K 16      // variant knob 8 16 32
#define SPLIT_K 4       // variant knob 1 2 4 8
#define MIN_BLOCKS 2    // variant knob 1 2 4
#define RASTER_GROUP 8  // variant knob 4 8 16
#define A_PHASES 4      // variant knob 1 2 4
// Knob constraints (evo_fsr/knobs.py), mirrored by the static_asserts below.
// A's patches of 16 rows (conflict-free transposed stores):
// variant constraint (WARPS_M * LANES_M * THREAD_M) % 16 == 0
// Registers.  REG_EST, the registers a thread is given (at least), is max(128, accumulators +
// two fragment buffers + A staging + 20), A staging being 4 when every A phase holds at most one
// quad (A_PHASES >= A_ITERS) and 4 * A_ITERS otherwise.  Calibrated with ptxas 13.0 over ~1070
// knob combinations under explicit budgets: none spilled with a budget of REG_EST or more, while
// budgets 16 above the first three terms did spill (and one 4x4 tile 24 above them under a
// 64-register budget: hence the floor of 128); then every one of the 2780 distinct kernels that
// the valid combinations make (both paths) compiled with 0 spills.  The block runs LB_BLOCKS = min(MIN_BLOCKS,
// blocks that fit REG_EST, 2048 / threads) per SM (__launch_bounds__), so MIN_BLOCKS is an upper
// bound; a combination is valid when one block fits:
// variant constraint max(128, THREAD_M * THREAD_N + 2 * (THREAD_M + THREAD_N) + (4 if A_PHASES >= (WARPS_M * LANES_M * THREAD_M * BLOCK_K // 4 + 32 * WARPS_M * WARPS_N - 1) // (32 * WARPS_M * WARPS_N) else 4 * ((WARPS_M * LANES_M * THREAD_M * BLOCK_K // 4 + 32 * WARPS_M * WARPS_N - 1) // (32 * WARPS_M * WARPS_N))) + 20) <= 255
// variant constraint 32 * WARPS_M * WARPS_N * ((max(128, THREAD_M * THREAD_N + 2 * (THREAD_M + THREAD_N) + (4 if A_PHASES >= (WARPS_M * LANES_M * THREAD_M * BLOCK_K // 4 + 32 * WARPS_M * WARPS_N - 1) // (32 * WARPS_M * WARPS_N) else 4 * ((WARPS_M * LANES_M * THREAD_M * BLOCK_K // 4 + 32 * WARPS_M * WARPS_N - 1) // (32 * WARPS_M * WARPS_N))) + 20) + 7) // 8 * 8) <= 65536
// Shared memory (two buffers of A and B slices) within sm_90's 227 KiB per block:
// variant constraint 2 * BLOCK_K * (WARPS_M * LANES_M * THREAD_M + 4 + WARPS_N * (32 // LANES_M) * THREAD_N) * 4 <= 227 * 1024

#define LANES_N (32 / LANES_M)
#define WARP_M (LANES_M * THREAD_M)
#define WARP_N (LANES_N * THREAD_N)
#define BM (WARPS_M * WARP_M)
#define BN (WARPS_N * WARP_N)
#define THREADS (32 * WARPS_M * WARPS_N)
#define AS_LD (BM + 4)                       // padded row of As[k][.]: = 4 (mod 16)
#define BS_LD (BN)                           // row of Bs[k][.] (read one k row at a time: no pad)
#define AS_FLOATS (BLOCK_K * AS_LD)
#define BS_FLOATS (BLOCK_K * BS_LD)
#define STAGE_FLOATS (AS_FLOATS + BS_FLOATS)   // one buffer: As[BLOCK_K][AS_LD], then Bs[BLOCK_K][BS_LD]
#define SMEM_BYTES (2 * STAGE_FLOATS * 4)
#define KQ (BLOCK_K / 4)                     // k-quads per A row of a slice
#define A_QUADS (BM * KQ)                    // 16-byte quads of an A slice (multiple of 32)
#define A_ITERS ((A_QUADS + THREADS - 1) / THREADS)
#define A_STAGE_REGS (A_PHASES >= A_ITERS ? 4 : 4 * A_ITERS)   // A staging registers (estimate)
#define REG_EST_RAW (THREAD_M * THREAD_N + 2 * (THREAD_M + THREAD_N) + A_STAGE_REGS + 20)
#define REG_EST (REG_EST_RAW > 128 ? REG_EST_RAW : 128)
#define REG_EST8 ((REG_EST + 7) / 8 * 8)                   // allocation granule: 8 per thread
#define FIT_BLOCKS (65536 / (THREADS * REG_EST8))
#define MIN2(a, b) ((a) < (b) ? (a) : (b))
#define LB_BLOCKS MIN2(MIN2(MIN_BLOCKS, FIT_BLOCKS), 2048 / THREADS)   // __launch_bounds__ blocks

static_assert(BM % 16 == 0, "A is loaded in patches of 16 rows");
static_assert(BLOCK_K % 8 == 0, "A is loaded in patches of 2 k-quads; fragments double-buffered");
static_assert(THREAD_M % 4 == 0 && THREAD_N % 4 == 0, "register tiles are made of 4x4 blocks");
static_assert(LANES_M * LANES_N == 32, "a warp has 32 lanes");
static_assert(REG_EST <= 255 && FIT_BLOCKS >= 1, "knob combination's register tile does not fit one block");
static_assert(SMEM_BYTES <= 227 * 1024, "knob combination needs more than 227 KiB of shared memory");

__device__ __forceinline__ void cp_async_4(float* smem, const float* gmem, bool valid) {
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    int bytes = valid ? 4 : 0;          // 0: no read, the 4 bytes are zero-filled
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_16(float* smem, const float* gmem, bool valid) {
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    int bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// 16-byte global load (read-only path); the caller guarantees 16-byte alignment.
__device__ __forceinline__ float4 ldg4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

// Four consecutive floats of shared memory (16-byte aligned) into f[0..3].
__device__ __forceinline__ void lds4(float* f, const float* smem) {
    float4 v = *reinterpret_cast<const float4*>(smem);
    f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
}

// Loader geometry.  Quad e = tid + j * THREADS of an A slice lies in patch p = e / 32 (16 rows x
// 2 k-quads, lane = 2 * row + quad); patches go k-first, P = KQ / 2 per 16 rows.  With W = THREADS
// / 32 warps, p = warp + j * W, and as W and P are powers of two (one divides the other), the j-th
// quad of a thread sits at compile-time offsets from its 0-th: rows + 16 * (j * W / P), k-quads
// + 2 * (j * W % P).  Likewise chunk e of a B slice (Q = BN / 4 chunks per k row on the vector
// path, BN elements on the general one): k row + j * THREADS / Q, chunk + j * THREADS % Q.
#define A_P (KQ / 2)
#define A_PHASE_STEPS (BLOCK_K / A_PHASES)           // k steps of one A phase
#define A_PHASE_OF(j) (((j) * A_PHASES) / A_ITERS)   // phase of quad j
#define A_DROW(j) (16 * (((j) * (THREADS / 32)) / A_P))
#define A_DKQ(j) (2 * (((j) * (THREADS / 32)) % A_P))

// Vector path: the A quads of phase `phase` (A_PHASE_OF(j) == phase; -1: all) of the slice at
// a_ptr (the thread's quad 0: its row, k = kt + kq4) -> registers, zero outside the matrix: a
// quad is read when its row is < M (drow < rows_left) and its k's are < k_end (K % 4 == 0 and
// k_end % 4 == 0 here, so a quad is wholly in or out).
__device__ __forceinline__ void ldg_a(float4 (&r)[A_ITERS], const float* a_ptr, int K, int rows_left,
                                      int kq4, int k_left, int warp, int phase) {
#pragma unroll
    for (int j = 0; j < A_ITERS; ++j) {
        if (phase >= 0 && A_PHASE_OF(j) != phase) continue;            // compile-time
        if (A_QUADS % THREADS == 0 || warp + j * (THREADS / 32) < A_QUADS / 32) {   // warp-uniform
            const float* p = a_ptr + ((long long)A_DROW(j) * K + 4 * A_DKQ(j));
            const bool ok = A_DROW(j) < rows_left && kq4 + 4 * A_DKQ(j) < k_left;
            r[j] = ok ? ldg4(p) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
}

// General path: the A slice [kt, kt + BLOCK_K) of the block's rows straight into As (transposed)
// by 4-byte cp.async (zero-fill outside the matrix; the source of a masked copy is A itself).
// a_blk = A + m0 * K + kt.  A loop that is not unrolled: no registers held for it.
__device__ __forceinline__ void cp_a_general(float* As_n, const float* a_blk, const float* __restrict__ A,
                                             int K, int rows, int k_left, int tid) {
#pragma unroll 1
    for (int e = tid; e < BM * BLOCK_K; e += THREADS) {
        const int row = e / BLOCK_K, kk = e % BLOCK_K;              // consecutive threads along k
        const bool ok = row < rows && kk < k_left;
        cp_async_4(As_n + kk * AS_LD + row, ok ? a_blk + ((long long)row * K + kk) : A, ok);
    }
}

// Registers -> As (transposed: As[k][m]); as_thr = As_n + kq4 * AS_LD + row of quad 0; only
// the quads of phase `phase` (-1: all).
__device__ __forceinline__ void sts_a(float* as_thr, const float4 (&r)[A_ITERS], int warp, int phase) {
#pragma unroll
    for (int j = 0; j < A_ITERS; ++j) {
        if (phase >= 0 && A_PHASE_OF(j) != phase) continue;            // compile-time
        if (A_QUADS % THREADS == 0 || warp + j * (THREADS / 32) < A_QUADS / 32) {
            float* d = as_thr + 4 * A_DKQ(j) * AS_LD + A_DROW(j);
            d[0 * AS_LD] = r[j].x;
            d[1 * AS_LD] = r[j].y;
            d[2 * AS_LD] = r[j].z;
            d[3 * AS_LD] = r[j].w;
        }
    }
}

// B slice -> Bs by cp.async (zero-fill outside the matrix).  b_ptr: the thread's chunk 0 in
// global memory (k row kt + kk0, column n0 + col0); bs_thr: its place in Bs_n; cols_left = N -
// n0 - col0; the source of a masked copy is B itself (src-size 0: nothing is read).  The general
// path (4-byte copies, correctness only: timed shapes take the vector path) runs a loop that is
// not unrolled, so that its many copies hold no registers through the main loop.
template <bool VEC>
__device__ __forceinline__ void cp_b(float* bs_thr, const float* b_ptr, const float* __restrict__ B,
                                     int N, int kk0, int cols_left, int k_left, int tid) {
    if (VEC) {
        constexpr int Q = BN / 4;                         // chunks of a k row
        constexpr int UNITS = BLOCK_K * Q;
        constexpr int ITERS = (UNITS + THREADS - 1) / THREADS;
#pragma unroll
        for (int j = 0; j < ITERS; ++j) {
            if (UNITS % THREADS == 0 || tid + j * THREADS < UNITS) {
                const int dkk = (j * THREADS) / Q, dc = 4 * ((j * THREADS) % Q);
                const bool ok = kk0 + dkk < k_left && dc < cols_left;
                cp_async_16(bs_thr + dkk * BS_LD + dc, b_ptr + ((long long)dkk * N + dc), ok);
            }
        }
    } else {
        constexpr int UNITS = BLOCK_K * BN;
#pragma unroll 1
        for (int j = 0; tid + j * THREADS < UNITS; ++j) {
            const int dkk = (j * THREADS) / BN, dc = (j * THREADS) % BN;
            const bool ok = kk0 + dkk < k_left && dc < cols_left;
            const float* src = ok ? b_ptr + ((long long)dkk * N + dc) : B;
            cp_async_4(bs_thr + dkk * BS_LD + dc, src, ok);
        }
    }
}

template <bool V>
struct BoolTag { static constexpr bool value = V; };

// Grouped rasterization: RASTER_GROUP tile rows are walked column by column; block pid -> its
// tile's first row m0 and column n0.
__device__ __forceinline__ void tile_origin(int pid, int tiles_m, int tiles_n, int& m0, int& n0) {
    const int per_group = RASTER_GROUP * tiles_n;            // fits an int (checked in launch)
    const int group = pid / per_group;
    const int first_m = group * RASTER_GROUP;
    const int group_m = min(tiles_m - first_m, RASTER_GROUP);
    const int in_group = pid - group * per_group;
    m0 = (first_m + in_group % group_m) * BM;
    n0 = (in_group / group_m) * BN;
}

// Thread tid's first row (in the block tile) of its register tile's block 0, and first column.
__device__ __forceinline__ void lane_origin(int tid, int& a_col, int& b_col) {
    const int lane = tid & 31, warp = tid >> 5;
    a_col = (warp / WARPS_N) * WARP_M + (lane / LANES_N) * 4;
    b_col = (warp % WARPS_N) * WARP_N + (lane % LANES_N) * 4;
}

// Special registers read again (volatile: not merged with the first reads), so that the
// epilogue recomputes its coordinates instead of holding them in registers through the main loop.
__device__ __forceinline__ int ctaid_x_again() { int v; asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v)); return v; }
__device__ __forceinline__ int tid_x_again() { int v; asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v)); return v; }

// C[m0.., n0..] (+)= A[m0.., k-range of blockIdx.z] * B[k-range, n0..].
// k_chunk: the K extent of one split (a multiple of BLOCK_K); gridDim.z > 1 means split-K (atomics).
template <bool VEC>
__global__ void __launch_bounds__(THREADS, LB_BLOCKS)
sgemm_regstage(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M,
               int K, int N, int k_chunk, int tiles_m, int tiles_n) {
    extern __shared__ __align__(16) float smem[];
    // Buffer s (0, 1) at smem + s * STAGE_FLOATS: As[BLOCK_K][AS_LD] then Bs[BLOCK_K][BS_LD].
    float* const As = smem;
    float* const Bs = smem + AS_FLOATS;

    int m0, n0;
    tile_origin(blockIdx.x, tiles_m, tiles_n, m0, n0);

    const int k_begin = blockIdx.z * k_chunk;
    const int k_end = min(K, k_begin + k_chunk);

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    int a_col, b_col;                       // fragment origins in the tile (see lane_origin)
    lane_origin(tid, a_col, b_col);

    // This thread's loader coordinates (quad 0 of A, chunk 0 of B; see "Loader geometry").
    const int a_row = (warp / A_P) * 16 + (lane >> 1);               // row in the tile
    const int a_kq4 = 4 * ((warp % A_P) * 2 + (lane & 1));           // k offset in the slice
    // Rows of A left from this thread's quad-0 row (vector path: quad j in iff A_DROW(j) < this)
    // or from the tile's first row (general path).
    const int a_rows_left = M - m0 - (VEC ? a_row : 0);
    constexpr int B_Q = VEC ? BN / 4 : BN;
    const int b_kk0 = tid / B_Q;
    const int b_col0 = (VEC ? 4 : 1) * (tid % B_Q);
    const int b_cols_left = N - n0 - b_col0;
    // A: this thread's quad 0 (vector path) or the tile's first row (general path); advanced per slice.
    const float* a_ptr = A + ((long long)(m0 + (VEC ? a_row : 0)) * K + k_begin + (VEC ? a_kq4 : 0));
    const float* b_ptr = B + ((long long)(k_begin + b_kk0) * N + n0 + b_col0);
    float* const as_thr = As + a_kq4 * AS_LD + a_row;                 // + buffer offset
    float* const bs_thr = Bs + b_kk0 * BS_LD + b_col0;

    float acc[THREAD_M][THREAD_N];
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
        for (int j = 0; j < THREAD_N; ++j) acc[i][j] = 0.0f;

    // Prologue: slice 0 into buffer 0.
    float4 a_stage[A_ITERS];
    int k_left = k_end - k_begin;          // k's of the matrix from the slice's first on
    if (VEC) ldg_a(a_stage, a_ptr, K, a_rows_left, a_kq4, k_left, warp, -1);
    else cp_a_general(As, a_ptr, A, K, a_rows_left, k_left, tid);
    cp_b<VEC>(bs_thr, b_ptr, B, N, b_kk0, b_cols_left, k_left, tid);
    cp_async_commit();
    if (VEC) sts_a(as_thr, a_stage, warp, -1);
    cp_async_wait_all();
    __syncthreads();

    float a_frag[2][THREAD_M], b_frag[2][THREAD_N];
#pragma unroll
    for (int c = 0; c < THREAD_M / 4; ++c) lds4(&a_frag[0][4 * c], As + a_col + c * 4 * LANES_M);
#pragma unroll
    for (int c = 0; c < THREAD_N / 4; ++c) lds4(&b_frag[0][4 * c], Bs + b_col + c * 4 * LANES_N);

    // One slice: consume buffer `cur`; when there is a next slice (HAS_NEXT, a compile-time flag:
    // the last slice is peeled off so that the main loop has no branch on it), load slice t+1 into
    // the other buffer meanwhile and publish it with the barrier.  k_left: k's of the matrix from
    // the first k of the slice being consumed (> 0); cur: the float offset of its buffer.
    int cur = 0;
    auto slice = [&](auto has_next_tag) {
        constexpr bool has_next = decltype(has_next_tag)::value;
        const int nxt = STAGE_FLOATS - cur;
        if (has_next) {                      // slice t+1: B (and A, general path) -> its buffer (in flight)
            k_left -= BLOCK_K;               // now of slice t+1
            a_ptr += BLOCK_K;
            b_ptr += (long long)BLOCK_K * N;
            if (!VEC) cp_a_general(As + nxt, a_ptr, A, K, a_rows_left, k_left, tid);
            cp_b<VEC>(bs_thr + nxt, b_ptr, B, N, b_kk0, b_cols_left, k_left, tid);
            cp_async_commit();
        }
        const float* As_c = As + cur;
        const float* Bs_c = Bs + cur;
#pragma unroll
        for (int kk = 0; kk < BLOCK_K; ++kk) {
            const int nf = (kk + 1) & 1;
            if (VEC && has_next && kk % A_PHASE_STEPS == 0)  // phase starts: its A quads -> registers
                ldg_a(a_stage, a_ptr, K, a_rows_left, a_kq4, k_left, warp, kk / A_PHASE_STEPS);
            if (VEC && has_next && kk % A_PHASE_STEPS == A_PHASE_STEPS - 1)   // phase ends: -> As of t+1
                sts_a(as_thr + nxt, a_stage, warp, kk / A_PHASE_STEPS);
            if (kk + 1 < BLOCK_K) {          // fragments of step kk+1 while step kk computes
                const float* a_src = As_c + (kk + 1) * AS_LD + a_col;
                const float* b_src = Bs_c + (kk + 1) * BS_LD + b_col;
#pragma unroll
                for (int c = 0; c < THREAD_M / 4; ++c) lds4(&a_frag[nf][4 * c], a_src + c * 4 * LANES_M);
#pragma unroll
                for (int c = 0; c < THREAD_N / 4; ++c) lds4(&b_frag[nf][4 * c], b_src + c * 4 * LANES_N);
            } else if (has_next) {           // publish slice t+1, then its step-0 fragments
                cp_async_wait_all();
                __syncthreads();
#pragma unroll
                for (int c = 0; c < THREAD_M / 4; ++c) lds4(&a_frag[nf][4 * c], As + nxt + a_col + c * 4 * LANES_M);
#pragma unroll
                for (int c = 0; c < THREAD_N / 4; ++c) lds4(&b_frag[nf][4 * c], Bs + nxt + b_col + c * 4 * LANES_N);
            }
            const int cf = kk & 1;
#pragma unroll
            for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
                for (int j = 0; j < THREAD_N; ++j) acc[i][j] = fmaf(a_frag[cf][i], b_frag[cf][j], acc[i][j]);
        }
        cur = nxt;
    };
    while (k_left > BLOCK_K) slice(BoolTag<true>{});   // slice t+1 exists iff k_left > BLOCK_K
    slice(BoolTag<false>{});

    const bool split = gridDim.z > 1;
    tile_origin(ctaid_x_again(), tiles_m, tiles_n, m0, n0);
    lane_origin(tid_x_again(), a_col, b_col);
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i) {
        const int m = m0 + a_col + (i / 4) * 4 * LANES_M + (i % 4);
        if (m >= M) continue;
        float* c_row = C + (long long)m * N;
#pragma unroll
        for (int cb = 0; cb < THREAD_N / 4; ++cb) {
            const int n = n0 + b_col + cb * 4 * LANES_N;
            if (VEC) {
                if (n < N) {
                    const float4 v = make_float4(acc[i][4 * cb], acc[i][4 * cb + 1], acc[i][4 * cb + 2],
                                                 acc[i][4 * cb + 3]);
                    float4* dst = reinterpret_cast<float4*>(c_row + n);
                    if (split) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                        atomicAdd(dst, v);
#else
                        atomicAdd(c_row + n, v.x); atomicAdd(c_row + n + 1, v.y);
                        atomicAdd(c_row + n + 2, v.z); atomicAdd(c_row + n + 3, v.w);
#endif
                    } else {
                        *dst = v;
                    }
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    if (n + j < N) {
                        if (split) atomicAdd(c_row + n + j, acc[i][4 * cb + j]);
                        else c_row[n + j] = acc[i][4 * cb + j];
                    }
                }
            }
        }
    }
}

template <bool VEC>
static cudaError_t launch_gemm(const float* A, const float* B, float* C, int M, int K, int N,
                               int k_chunk, int splits, int tiles_m, int tiles_n, cudaStream_t stream) {
    if (SMEM_BYTES > 48 * 1024) {
        cudaError_t err = cudaFuncSetAttribute(sgemm_regstage<VEC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               SMEM_BYTES);
        if (err != cudaSuccess) return err;
    }
    dim3 grid((unsigned)(tiles_m * tiles_n), 1u, (unsigned)splits);
    sgemm_regstage<VEC><<<grid, THREADS, SMEM_BYTES, stream>>>(A, B, C, M, K, N, k_chunk, tiles_m, tiles_n);
    return cudaSuccess;
}

extern "C" int launch(const float* A, const float* B, float* C, int M, int K, int N,
                      cudaStream_t stream) {
    if (M <= 0 || N <= 0 || K <= 0) return (int)cudaErrorInvalidValue;
    const long long tiles_m = (M + (long long)BM - 1) / BM;
    const long long tiles_n = (N + (long long)BN - 1) / BN;
    // The grid's x extent, and RASTER_GROUP * tiles_n (int arithmetic in the kernel).
    if (tiles_m * tiles_n > 0x7fffffffLL || (long long)RASTER_GROUP * tiles_n > 0x7fffffffLL)
        return (int)cudaErrorInvalidValue;
    const int tiles = (int)(tiles_m * tiles_n);

    // Split-K regime: too few output tiles for one wave, and a K long enough to share.
    static int sm_count = 0;
    if (sm_count == 0) {
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess ||
            cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
            sm_count = 132;
    }
    const int k_slices = (K + BLOCK_K - 1) / BLOCK_K;
    int splits = 1;
    while (splits * 2 <= SPLIT_K && (long long)tiles * splits < sm_count && k_slices >= splits * 2 * 4)
        splits *= 2;
    const int k_chunk = ((k_slices + splits - 1) / splits) * BLOCK_K;
    splits = (int)(((long long)K + k_chunk - 1) / k_chunk);   // no empty split

    if (splits > 1) {
        cudaError_t err = cudaMemsetAsync(C, 0, sizeof(float) * (size_t)M * (size_t)N, stream);
        if (err != cudaSuccess) return (int)err;
    }
    const bool vec = (K % 4 == 0) && (N % 4 == 0) && ((uintptr_t)A % 16 == 0) && ((uintptr_t)B % 16 == 0) &&
                     ((uintptr_t)C % 16 == 0);
    cudaError_t err = vec ? launch_gemm<true>(A, B, C, M, K, N, k_chunk, splits, (int)tiles_m, (int)tiles_n, stream)
                          : launch_gemm<false>(A, B, C, M, K, N, k_chunk, splits, (int)tiles_m, (int)tiles_n, stream);
    if (err != cudaSuccess) return (int)err;
    return (int)cudaGetLastError();
}
}  // namespace evo_variant_1
#undef launch
#undef AS_FLOATS
#undef AS_LD
#undef A_DKQ
#undef A_DROW
#undef A_ITERS
#undef A_P
#undef A_PHASES
#undef A_PHASE_OF
#undef A_PHASE_STEPS
#undef A_QUADS
#undef A_STAGE_REGS
#undef BLOCK_K
#undef BM
#undef BN
#undef BS_FLOATS
#undef BS_LD
#undef FIT_BLOCKS
#undef KQ
#undef LANES_M
#undef LANES_N
#undef LB_BLOCKS
#undef MIN2
#undef MIN_BLOCKS
#undef RASTER_GROUP
#undef REG_EST
#undef REG_EST8
#undef REG_EST_RAW
#undef SMEM_BYTES
#undef SPLIT_K
#undef STAGE_FLOATS
#undef THREADS
#undef THREAD_M
#undef THREAD_N
#undef WARPS_M
#undef WARPS_N
#undef WARP_M
#undef WARP_N

extern "C" int launch(const float* A, const float* B, float* C, int M, int K, int N, cudaStream_t stream) {
    if (M == 65536 && K == 1024 && N == 64) return evo_variant_1::launch_variant_1(A, B, C, M, K, N, stream);  // tall_skinny
    return evo_variant_0::launch_variant_0(A, B, C, M, K, N, stream);  // general
}
