// linear_regression family: normal equations in one persistent kernel with a last-block solve.
//  1. A persistent grid (SM count x BLOCKS_PER_SM, capped by the occupancy the kernel really gets)
//     walks tiles of TR = THREADS * ROWS_PER_THREAD rows: block b takes tiles b, b + G, b + 2G...
//     A tile of X (TR * 10 contiguous floats) and its y are copied global -> shared with cp.async
//     into a ring of STAGES shared-memory stages: while the block computes tile k, the copies of
//     tiles k + 1 .. k + STAGES - 1 are in flight (STAGES 1: copy, wait, compute, one tile at a
//     time). VEC 4: coalesced 16-byte copies, a scalar head bringing the pointer to 16 bytes and a
//     scalar tail (the tile keeps its global alignment mod 16 in shared memory: X and y may be only
//     4-byte aligned); VEC 1: 4-byte copies only. Each thread then reads whole rows from shared
//     memory (float2 reads when rows are 8-byte aligned: 40-byte rows hit 16 distinct bank pairs
//     per half-warp) and accumulates the 55 upper-triangle Gram entries and 10 entries of X^T y in
//     65 float32 registers.
//  2. Each block reduces its 65 sums (warp shuffles, then across warps) into workspace[block*65+e].
//  3. The last block to finish (a __device__ counter, zeroed on the stream at every call) sums the
//     partials in double in a fixed order and one warp solves the 10x10 SPD system by Gauss-Jordan
//     elimination in double (lane i holds row i; SPD: no pivoting needed), writing beta.
// SPLIT 1 (tiles): block b owns one contiguous range of rows, the n rows cut into gridDim.x
//   ranges of equal length (a multiple of 4 rows, so every range and tile keeps the base
//   pointers' alignment mod 16), streamed as tiles of TR rows (the last one partial). SPLIT 0
//   hands out fixed tiles round robin: with ceil(n / TR) tiles over G blocks, ntiles mod G blocks
//   take one tile more (at 2^22 rows, 8 of 264 blocks: one latency-bound tile-time alone at the
//   end, a few us of a ~90 us kernel); equal ranges end every block within a few rows of the others
//   and each block reads one sequential stream (DRAM pages opened once). SPLIT 2 (a tile queue)
//   hands tiles out as blocks ask: block b starts with tiles b, b + G, ... b + (STAGES - 1) G (one
//   a stage of its ring, no atomic before the first copies), then thread 0 takes the next tile
//   number from a __device__ counter (STAGES * G + atomicAdd) a tile ahead of its use, the atomic's
//   round trip hidden behind the tile being computed. Equal ranges end together only when every SM
//   streams at the same rate; with a queue a block on a slower SM simply takes fewer tiles. The
//   counter is reset by the last block (every block's last take precedes its finish ticket).
// FINISH 1 (the fixed costs after streaming, ~1/4 of the time at 2^22 rows with FINISH 0):
//  - no cudaMemsetAsync before the kernel (a second graph node, ~2 us a call): the finish counter
//    is a self-resetting ticket (atomicInc wraps it to 0 at gridDim.x - 1, so the last block
//    leaves it at 0 for the next call on the stream), zero from module load;
//  - the warp reduction of the 65 sums is a transposed reduce-scatter (Hillis-Steele halving: at
//    offset o a lane keeps the half of its values its o bit selects and adds the partner's copy of
//    it): 32 + 16 + 8 + 4 + 2 shuffles leave lane l with 2 of entries 0..63, and entry 64 takes 5
//    more: 67 shuffles a warp instead of 325 (shuffles issue at one warp-instruction per clock per
//    SM; 16 warps x 325 is ~3 us of shuffles while the SM's memory pipe idles);
//  - blocks add their 65 sums into __device__ doubles (native atom.add.f64 in L2), each on its own
//    128-byte line so that the 65 entries' atomics proceed in different L2 slices, while other
//    blocks still stream; the last block takes the totals with atomicExch(.., 0) (read and reset
//    in one step: 65 independent atomics, one L2 round trip) instead of summing 65 x G partials
//    (the FINISH 0 loop walks them with a dependent double add per load: tens of serial L2
//    round trips per warp). The sum order of the doubles varies between runs (the task allows
//    it: determinism tolerance); double accumulation of float partials keeps it ~1e-16 relative.
#include <cuda_runtime.h>
#include <stdint.h>

#define THREADS 256         // knob: 128 256 512
#define ROWS_PER_THREAD 2   // knob: 1 2 4
#define STAGES 2            // knob: 1 2 3 4
#define BLOCKS_PER_SM 2     // knob: 1 2 4
#define VEC 4               // knob: 1 4
#define SPLIT 2             // knob: 0 1 2
#define FINISH 1            // knob: 0 1
// SPLIT: 0 tiles round robin over the blocks, 1 one contiguous balanced range of rows a block, 2 a
// tile queue (see above).
// FINISH: 0 memset counter + per-block partials summed by the last block, 1 self-resetting
// counter + transposed warp reduction + double atomics (see above).
// SPLIT 2 default since the nineteenth session (scripts/probe_gram.py, one H100, one process, L2
// flushed, 30 rounds: 84.5 / 271.4 us against SPLIT 1's 86.8 / 278.2 at n2^22 / 2^24, 1.03x both;
// per-block %globaltimer traces: the stream's end spread across blocks, last block past the
// median, 3.1 -> 1.3 us at n2^22 and 5.9 -> 0.8 us at n2^24).
// Before it, since the sixteenth session: SPLIT 1, FINISH 1, STAGES 2 (one H100, one evaluate.py
// process, x of torch at n2^22 / 2^24 / 1e7+19: 6.65 / 6.15 / 6.50, against 5.67 / 5.87 / 6.10 for
// the earlier SPLIT 0, FINISH 0, STAGES 1; FINISH 1 alone 6.58 / 6.12 / 6.49, SPLIT 1 alone 5.64 /
// 5.88 / 5.92): the finish, not the stream, was the gap on the short shapes.
// Earlier: STAGES 1 with 2 blocks of 256 threads per SM (22.5 KB each), the fastest of six
// settings timed in one process on an H100 (thirteenth session, x of torch at n2^22 / 2^24 /
// 1e7+19: 6.30 / 6.09 / 6.48, 79 % of speed-of-light at 2^24; the previous __ldg staging 4.88 /
// 4.53 / 4.87, the naive seed 4.86 / 5.61 / 5.64). Deeper rings read slower there (STAGES 4 with
// 4 blocks of 128: 4.65 / 5.13 / 5.24; STAGES 2: 5.56 / 5.75 / 6.02): two resident blocks already
// overlap one block's copies with the other's compute, and a deeper ring's per-tile barrier and
// smaller grid cost more than the extra bytes in flight buy. The search tunes them per GPU.
// Knob constraints (evo_fsr/knobs.py): the ring of STAGES tiles (11 floats per row) fits one
// block's dynamic shared memory (4096 rows: 180 KB of the 227 KB an sm_90 block may opt into).
// constraint: STAGES * THREADS * ROWS_PER_THREAD <= 4096

static_assert(STAGES * THREADS * ROWS_PER_THREAD <= 4096, "knob constraint: STAGES * THREADS * ROWS_PER_THREAD <= 4096");
static_assert(THREADS % 32 == 0 && THREADS >= 96 && THREADS <= 1024, "THREADS: a warp multiple, 96..1024");
static_assert(VEC == 1 || VEC == 4, "VEC must be 1 or 4");
static_assert(ROWS_PER_THREAD >= 1, "ROWS_PER_THREAD must be positive");
static_assert(STAGES >= 1 && STAGES <= 8, "STAGES must be 1..8");
static_assert(BLOCKS_PER_SM >= 1, "BLOCKS_PER_SM must be positive");
static_assert(SPLIT >= 0 && SPLIT <= 2, "SPLIT must be 0, 1 or 2");
static_assert(FINISH == 0 || FINISH == 1, "FINISH must be 0 or 1");

#define P 10
#define NE 65                 // 55 Gram entries (j <= k) + 10 right-hand-side entries
#define TR (THREADS * ROWS_PER_THREAD)
#define NWARPS (THREADS / 32)
#define MAX_PARTS 4096        // workspace: 65 * 4096 floats
// One stage: X tile (TR * 10 floats + up to 3 of alignment pad, rounded to 4), then y (TR + 3,
// rounded to 4). Both sizes are multiples of 4 floats, so every stage and region starts 16-byte
// aligned. Tiles start at multiples of TR rows, i.e. of 40 * TR bytes (TR even: a multiple of 16),
// so every tile of X (and of y, TR a multiple of 4) has the alignment of its base pointer.
#define XS_FLOATS (TR * P + 4)
#define STAGE_FLOATS (XS_FLOATS + TR + 4)
#define SMEM_BYTES (STAGES * STAGE_FLOATS * 4)
static_assert(TR % 4 == 0, "tiles must keep the base pointers' alignment mod 16");

__device__ unsigned int g_done;          // blocks finished in this call
#define ACC_STRIDE 16                    // doubles between two entries of g_acc: one 128-byte line each
__device__ double g_acc[NE * ACC_STRIDE]; // FINISH 1: the 65 totals of this call (0 between calls)
__device__ unsigned long long g_next;    // SPLIT 2: queued tiles taken in this call (0 between calls)

// Index of Gram entry (j, k), j <= k, in the accumulation order.
__device__ __forceinline__ int gram_index(int j, int k) { return j * P - j * (j - 1) / 2 + (k - j); }

__device__ __forceinline__ void accumulate(float (&acc)[NE], const float (&r)[P], float yi) {
    int e = 0;
#pragma unroll
    for (int j = 0; j < P; ++j)
#pragma unroll
        for (int k = j; k < P; ++k) acc[e++] += r[j] * r[k];
#pragma unroll
    for (int j = 0; j < P; ++j) acc[55 + j] += r[j] * yi;
}

// One level of the transposed warp reduction (FINISH 1): values 0..2H-1 of each lane become H
// values, at shuffle offset H / 2 (H = 32: offset 16, ... H = 2: offset 1). Both halves are read
// before the select: written as `up ? acc[i] : acc[i + H]`, nvcc hoisted the selects above the
// streaming loop and carried both orders of the sums through it (172 registers, one block of 256
// an SM); this form compiles to 108..116 like FINISH 0.
template <int H>
__device__ __forceinline__ void halve(float (&acc)[NE], int lane) {
    const bool up = (lane & (H / 2)) != 0;
#pragma unroll
    for (int i = 0; i < H; ++i) {
        const float lo = acc[i], hi = acc[i + H];
        const float got = __shfl_xor_sync(0xffffffffu, up ? lo : hi, H / 2);
        acc[i] = (up ? hi : lo) + got;
    }
}

// cp.async: global -> shared without a register round trip. 16 bytes bypass L1 (.cg); 4 bytes
// need .ca. The group functions order them per thread; __syncthreads after the wait publishes
// them to the block.
__device__ __forceinline__ void cp_async16(float* dst, const float* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(__cvta_generic_to_global(src)) : "memory");
}
__device__ __forceinline__ void cp_async4(float* dst, const float* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(__cvta_generic_to_global(src)) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Copy cnt floats from global src to shared dst asynchronously; with VEC 4, src + head and
// dst + head are 16-byte aligned.
__device__ __forceinline__ void stage_async(const float* __restrict__ src, float* dst, int cnt, int head) {
    const int tid = threadIdx.x;
    if (VEC == 4 && cnt > head) {
        if (tid < head) cp_async4(dst + tid, src + tid);
        const int nvec = (cnt - head) >> 2;
        for (int j = tid; j < nvec; j += THREADS) cp_async16(dst + head + 4 * j, src + head + 4 * j);
        const int k = head + 4 * nvec + tid;                       // at most 3 tail floats
        if (k < cnt) cp_async4(dst + k, src + k);
    } else {
        for (int k = tid; k < cnt; k += THREADS) cp_async4(dst + k, src + k);
    }
}

// Floats from p to the next 16-byte boundary (0..3), and the shared pad that gives the staged
// copy the same alignment mod 16.
__device__ __forceinline__ int head_of(const float* p) { return VEC == 4 ? (int)((4 - (((uintptr_t)p >> 2) & 3)) & 3) : 0; }

__global__ void __launch_bounds__(THREADS)
lr_gram(const float* __restrict__ X, const float* __restrict__ y, float* __restrict__ beta,
        float* __restrict__ workspace, long long n) {
    extern __shared__ __align__(16) float smem[];                // STAGES x STAGE_FLOATS
    __shared__ bool last;
    float* part = smem;                                          // after the tiles: [NE][NWARPS]
    double* total = reinterpret_cast<double*>(smem);             // after part is consumed
    static_assert(NE * NWARPS <= TR * P && 2 * NE <= TR * P, "reduction scratch must fit a stage");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    const int xhead = head_of(X), yhead = head_of(y);
    const int xpad = (4 - xhead) & 3, ypad = (4 - yhead) & 3;    // (pad + head) % 4 == 0
    const long long G = gridDim.x, b = blockIdx.x;
#if SPLIT == 1
    const long long per = (((n + 3) / 4 + G - 1) / G) * 4;      // rows a block: a multiple of 4
    const long long lo = b * per < n ? b * per : n;
    const long long end = n - lo > per ? lo + per : n;           // this block's rows: [lo, end)
    const long long mine = (end - lo + TR - 1) / TR;
    auto tile_row = [&](long long k) { return lo + k * TR; };
#else                                                            // tiles of TR rows over all n
    const long long ntiles = (n + TR - 1) / TR;
    const long long end = n;
#endif
#if SPLIT == 0
    const long long mine = b < ntiles ? (ntiles - 1 - b) / G + 1 : 0;   // tiles b, b+G, ...
    auto tile_row = [&](long long k) { return (b + k * G) * TR; };
#elif SPLIT == 2
#if STAGES > 1
    __shared__ long long tile_at[STAGES];      // the tile in each stage of the ring
#endif
    __shared__ long long granted[2];           // the tile of the next issue (taken a tile ahead)
    // Thread 0 takes the next tile number, a tile ahead of its use (the next issue after tile t).
    auto take = [&](long long t) -> long long {
        return t < ntiles ? (long long)(STAGES * G) + (long long)atomicAdd(&g_next, 1ull) : t;
    };
#endif

    // Issue the copies of the tile at row r0 into stage s (no commit).
    auto issue_rows = [&](long long r0, int s) {
        const int nr = (int)(end - r0 < TR ? end - r0 : TR);
        float* st = smem + s * STAGE_FLOATS;
        stage_async(X + r0 * P, st + xpad, nr * P, xhead);
        stage_async(y + r0, st + XS_FLOATS + ypad, nr, yhead);
    };
#if SPLIT != 2
    auto issue = [&](long long k, int s) { issue_rows(tile_row(k), s); };   // this block's k-th tile
#endif

    float acc[NE];
#pragma unroll
    for (int e = 0; e < NE; ++e) acc[e] = 0.0f;

    // Accumulate the tile at row r0 from stage s.
    auto compute_rows = [&](long long r0, int s) {
        const int nr = (int)(end - r0 < TR ? end - r0 : TR);
        const float* tile = smem + s * STAGE_FLOATS + xpad;
        const float* ys = smem + s * STAGE_FLOATS + XS_FLOATS + ypad;
#pragma unroll
        for (int rr = 0; rr < ROWS_PER_THREAD; ++rr) {
            const int row = rr * THREADS + tid;
            if (row < nr) {
                float r[P];
                const float* p = tile + row * P;
                if ((xpad & 1) == 0) {                           // 8-byte aligned rows
#pragma unroll
                    for (int j = 0; j < P; j += 2) {
                        const float2 q = *reinterpret_cast<const float2*>(p + j);
                        r[j] = q.x;
                        r[j + 1] = q.y;
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < P; ++j) r[j] = p[j];
                }
                accumulate(acc, r, ys[row]);
            }
        }
    };
#if SPLIT != 2
    auto compute = [&](long long k, int s) { compute_rows(tile_row(k), s); };
#endif

#if SPLIT == 2 && STAGES == 1
    if (tid == 0) granted[0] = b;
    for (long long k = 0;; ++k) {
        __syncthreads();                                         // granted; the stage is free
        const long long t = granted[k & 1];
        if (t >= ntiles) break;
        const long long next = tid == 0 ? take(t) : 0;
        issue_rows(t * TR, 0);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        compute_rows(t * TR, 0);
        if (tid == 0) granted[(k + 1) & 1] = next;
    }
#elif SPLIT == 2
    // Prologue: the block's first STAGES - 1 tiles (b, b + G, ...) in flight, the next one granted.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        const long long t = b + s * G;
        if (tid == 0) tile_at[s] = t;
        if (t < ntiles) issue_rows(t * TR, s);
        cp_async_commit();
    }
    if (tid == 0) granted[0] = b + (STAGES - 1) * G;
    int cs = 0;                                                  // stage of the k-th tile
    for (long long k = 0;; ++k) {
        cp_async_wait<STAGES - 2>();                             // this thread's copies of tile k
        __syncthreads();                                         // everyone's; tile k-1 consumed
        const long long t = tile_at[cs];
        if (t >= ntiles) break;                                  // a block's tiles only grow
        const int ns = cs == 0 ? STAGES - 1 : cs - 1;            // tile k-1's stage
        const long long tn = granted[k & 1];
        long long next = 0;
        if (tid == 0) {
            tile_at[ns] = tn;
            next = take(tn);                                     // its round trip overlaps compute
        }
        if (tn < ntiles) issue_rows(tn * TR, ns);
        cp_async_commit();
        compute_rows(t * TR, cs);
        if (tid == 0) granted[(k + 1) & 1] = next;
        cs = cs == STAGES - 1 ? 0 : cs + 1;
    }
    cp_async_wait<0>();                                          // only empty groups remain
#elif STAGES == 1
    for (long long k = 0; k < mine; ++k) {
        if (k > 0) __syncthreads();                              // the stage is overwritten next
        issue(k, 0);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        compute(k, 0);
    }
#else
    // Prologue: tiles 0 .. STAGES-2 in flight (one commit group each, empty past the last tile).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < mine) issue(s, s);
        cp_async_commit();
    }
    int cs = 0;                                                  // stage of tile k
    for (long long k = 0; k < mine; ++k) {
        cp_async_wait<STAGES - 2>();                             // this thread's copies of tile k
        __syncthreads();                                         // everyone's; tile k-1 consumed
        const int ns = cs == 0 ? STAGES - 1 : cs - 1;            // (k + STAGES - 1) % STAGES: tile k-1's
        if (k + STAGES - 1 < mine) issue(k + STAGES - 1, ns);
        cp_async_commit();
        compute(k, cs);
        cs = cs == STAGES - 1 ? 0 : cs + 1;
    }
    cp_async_wait<0>();                                          // only empty groups remain
#endif
    __syncthreads();                                             // the stages become scratch

#if FINISH
    // Transposed warp reduction: at offset o (16 .. 1) a lane keeps the upper half of its K values
    // when its o bit is set, the lower half otherwise, and adds the partner's copy of that half
    // (every index compile-time: no local memory). After 5 levels lane l holds the warp sums of
    // entries base(l) and base(l) + 1, base(l) = 32 b4 + 16 b3 + 8 b2 + 4 b1 + 2 b0 (bits of l).
    halve<32>(acc, lane);
    halve<16>(acc, lane);
    halve<8>(acc, lane);
    halve<4>(acc, lane);
    halve<2>(acc, lane);
    float last64 = acc[64];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) last64 += __shfl_xor_sync(0xffffffffu, last64, off);
    {
        const int base = ((lane >> 4) & 1) * 32 + ((lane >> 3) & 1) * 16 + ((lane >> 2) & 1) * 8 +
                         ((lane >> 1) & 1) * 4 + (lane & 1) * 2;
        part[base * NWARPS + warp] = acc[0];
        part[(base + 1) * NWARPS + warp] = acc[1];
        if (lane == 0) part[64 * NWARPS + warp] = last64;
    }
    __syncthreads();
    if (tid < NE) {
        float v = 0.0f;
        for (int w = 0; w < NWARPS; ++w) v += part[tid * NWARPS + w];
        atomicAdd(&g_acc[tid * ACC_STRIDE], (double)v);
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicInc(&g_done, gridDim.x - 1) == gridDim.x - 1;   // wraps to 0: reset
    __syncthreads();
    if (!last) return;
#if SPLIT == 2
    if (tid == 0) g_next = 0;                                    // every block's takes are done
#endif
    __threadfence();
    if (tid < NE)                                                // read and reset for the next call
        total[tid] = __longlong_as_double((long long)atomicExch(
            reinterpret_cast<unsigned long long*>(&g_acc[tid * ACC_STRIDE]), 0ull));
    __syncthreads();
    if (warp != 0) return;
#else
    // Block reduction of the 65 sums.
#pragma unroll
    for (int e = 0; e < NE; ++e) {
        float v = acc[e];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) part[e * NWARPS + warp] = v;
    }
    __syncthreads();
    if (tid < NE) {
        float v = 0.0f;
        for (int w = 0; w < NWARPS; ++w) v += part[tid * NWARPS + w];
        workspace[(long long)blockIdx.x * NE + tid] = v;
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(&g_done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
#if SPLIT == 2
    if (tid == 0) g_next = 0;                                    // every block's takes are done
#endif
    __threadfence();

    // Last block: the totals in double, fixed order (warp per entry, lanes over blocks).
    const int parts = (int)gridDim.x;
    for (int e = warp; e < NE; e += NWARPS) {
        double s = 0.0;
        for (int q = lane; q < parts; q += 32) s += (double)__ldcg(workspace + (long long)q * NE + e);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) total[e] = s;
    }
    __syncthreads();
    if (warp != 0) return;
#endif

    // Gauss-Jordan on [G | c] by warp 0: lane i < 10 holds row i.
    const int i = lane < P ? lane : 0;
    double a[P];
#pragma unroll
    for (int j = 0; j < P; ++j) a[j] = total[i <= j ? gram_index(i, j) : gram_index(j, i)];
    double c = total[55 + i];
#pragma unroll
    for (int k = 0; k < P; ++k) {
        double pr[P];
#pragma unroll
        for (int j = 0; j < P; ++j) pr[j] = __shfl_sync(0xffffffffu, a[j], k);
        const double pc = __shfl_sync(0xffffffffu, c, k);
        if (lane != k) {
            const double f = a[k] / pr[k];
#pragma unroll
            for (int j = 0; j < P; ++j) a[j] -= f * pr[j];
            c -= f * pc;
        }
    }
    double diag = a[0];
#pragma unroll
    for (int j = 1; j < P; ++j)
        if (j == i) diag = a[j];
    if (lane < P) beta[lane] = (float)(c / diag);
}

// Per device (cached): the SM count, the counter's address, and how many blocks of lr_gram fit
// an SM with its shared-memory ring (opted into past 48 KB once).
struct LaunchInfo {
    int device = -1, sms = 0, fit = 0;
    void* done = nullptr;
};

static cudaError_t launch_info(LaunchInfo& info) {
    static LaunchInfo cached;
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return err;
    if (cached.device == dev) {
        info = cached;
        return cudaSuccess;
    }
    LaunchInfo fresh;
    fresh.device = dev;
    if (cudaDeviceGetAttribute(&fresh.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || fresh.sms <= 0)
        fresh.sms = 132;
    err = cudaGetSymbolAddress(&fresh.done, g_done);
    if (err != cudaSuccess) return err;
    if (SMEM_BYTES > 48 * 1024) {
        err = cudaFuncSetAttribute(lr_gram, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
        if (err != cudaSuccess) return err;
        if (cudaFuncSetAttribute(lr_gram, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 cudaSharedmemCarveoutMaxShared) != cudaSuccess)
            cudaGetLastError();                                  // optional: not left as the last error
    }
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fresh.fit, lr_gram, THREADS, SMEM_BYTES) != cudaSuccess) {
        cudaGetLastError();
        fresh.fit = BLOCKS_PER_SM;
    }
    if (fresh.fit <= 0) fresh.fit = 1;
    cached.sms = fresh.sms;
    cached.fit = fresh.fit;
    cached.done = fresh.done;
    cached.device = dev;                                         // last: marks the entry filled
    info = fresh;
    return cudaSuccess;
}

extern "C" int launch(const float* X, const float* y, float* beta, float* workspace, int n,
                      cudaStream_t stream) {
    const long long rows = n;
    if (rows <= 0) return 0;
    LaunchInfo info;
    cudaError_t err = launch_info(info);
    if (err != cudaSuccess) return (int)err;
#if !FINISH
    err = cudaMemsetAsync(info.done, 0, sizeof(unsigned int), stream);
    if (err != cudaSuccess) return (int)err;
#endif
    long long grid = (rows + TR - 1) / TR;
    const long long cap = (long long)info.sms * (BLOCKS_PER_SM < info.fit ? BLOCKS_PER_SM : info.fit);
    if (grid > cap) grid = cap;
    if (grid > MAX_PARTS) grid = MAX_PARTS;
    if (grid < 1) grid = 1;
    lr_gram<<<(unsigned)grid, THREADS, SMEM_BYTES, stream>>>(X, y, beta, workspace, rows);
    return (int)cudaGetLastError();
}
