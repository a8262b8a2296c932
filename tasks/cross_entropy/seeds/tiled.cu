// cross_entropy family: warp-staged rows for few classes, one warp per row for many; a persistent
// grid (at most BLOCKS_PER_SM blocks per SM, clamped to what fits) with a last-block finish.
//
// Few classes (C <= SMALL_C), the benchmark regime (C = 10): every warp owns chunks of
// 32 * ROWS_PER_THREAD consecutive rows (grid-stride over chunks, round robin over all warps).
//  - A chunk is 32 * ROWS_PER_THREAD * C contiguous floats, so it starts at a multiple of 128
//    bytes from logits: when logits is 16-byte aligned (checked at run time) and VEC is 4 the
//    warp reads it with coalesced float4 loads (512 contiguous bytes an instruction: the L1 sees
//    4 lines per request, where one thread per row with scalar loads, the naive seed, sees up to
//    32 lines per request and saturates the L1 tag stage near the DRAM rate); otherwise (a
//    4-byte-aligned buffer, VEC 1, or the last, partial chunk) with coalesced scalar loads.
//  - All of a lane's loads of a chunk (and its ROWS_PER_THREAD labels, coalesced) are issued
//    before any is used: ROWS_PER_THREAD * C * 4 bytes in flight per lane (2.5 KB per warp at
//    C = 10, ROWS_PER_THREAD 2), several times the ~25 KB per SM that keeps HBM3 busy.
//  - The chunk goes through the warp's own slice of shared memory (only __syncwarp, no block
//    barrier: warps never wait on each other) and lane l then takes rows l, l + 32, ... of it:
//    max, sum of exp(x - max), loss = (max - x[label]) + log(sum); x[label] is a shared-memory
//    read, so a runtime label needs no dynamically indexed register array (no local memory).
//    When C is a multiple of 4 the slice is skewed by one float every 32 (row reads at stride C
//    would be 4- to 16-way bank conflicts; skewed at most 2-way); otherwise rows are read
//    unskewed (odd C: conflict-free; C = 2 mod 4: 2-way, as skewed) and float4 stores stay whole.
//  - C in 2..FIXED_C is a template parameter (a switch in launch()): every loop is unrolled and
//    a lane's loads are independent instructions in registers. Other C <= SMALL_C run the same
//    kernel with a runtime C (loops, unrolled by 4).
// Many classes (C > SMALL_C): one warp per row, an online (max, sum of exp) over the row with
// warp merges.
// Each block writes its partial sum of losses to workspace[block]; the last block to finish
// (a __device__ counter, zeroed on the stream at the start of each call) sums the partials in a
// fixed order and writes out[0] = sum / N: deterministic, no float atomics.
// FINISH 1 trims the fixed cost of a call (from two timed shapes, time ~ bytes / 2.98 TB/s +
// ~13 us: the 90 %-of-copy target needs that fixed part near 6 us at n_3M_odd):
//  - no cudaMemsetAsync before the kernel (a second node on the stream, ~2 us a call with its
//    gap): the counter is a self-resetting ticket, atomicInc(&g_done, gridDim.x - 1), which wraps
//    to 0 on the last block's increment, so every call leaves it at 0 for the next one (zero
//    from module load; a call that faults poisons the context anyway);
//  - the last block reads the partials 8 loads a thread at a time (all issued before any add:
//    one L2 round trip for up to 8 x THREADS blocks) instead of one dependent load per add, and
//    still sums them in a fixed order (deterministic).
// PREFETCH (the hypothesis it tested; measured below, not taken): on one H100 in one process, fits of time =
// bytes / rate + fixed gave ~2.81 TB/s + ~7 us for this family against ~3.18 TB/s + ~6.5 us for
// sum_reduction (both read-only), so the streaming rate is the gap (the 90 %-of-copy target, 2934
// GB/s copy, puts n_4M at <= ~66 us; 72.9 us now). At PREFETCH 0 a warp issues the loads of its
// chunk i + 1 only after it has stored chunk i to its slice and computed its rows, so it has
// nothing in flight while it computes (expf of 20 floats a lane, the row loops): with 32 warps an
// SM that may leave too few bytes in flight on average. PREFETCH 1 and 2 keep the next chunk(s)
// in flight during the compute (compile-time C only; other chunks take the ordinary path):
//  - PREFETCH 1: register software pipelining of the full chunks (float4-aligned logits): the
//    float4s and labels of the warp's next chunk are loaded into registers before the current
//    chunk is computed from the slice, then stored to the slice (__syncwarp on either side). The
//    prefetched registers live across the compute, so an instantiation has it only where they fit
//    the __launch_bounds__ budget without spilling (prefetch_fits; at the defaults C = 2..13).
//  - PREFETCH 2: a ring of PIPE_STAGES chunk buffers per warp filled by the bulk copy engine
//    (cp.async.bulk, one mbarrier per stage, lane 0 issues, all lanes wait on the stage's phase
//    parity): up to PIPE_STAGES - 1 chunks land while the warp computes one, at no register cost;
//    labels are loaded one chunk ahead in registers. Rows are read from the unskewed buffer, so C
//    a multiple of 4 (4- to 16-way conflicts) falls back to the ordinary path, as do runtime C,
//    misaligned logits and the partial last chunk. 3 stages only where BLOCKS_PER_SM blocks of
//    them fit an SM's shared memory (not at the defaults with C = 10: 4 blocks of 2 stages, 42 KB).
//  - The last, partial chunk, VEC 1 and 4-byte-aligned logits take the PREFETCH 0 code unchanged
//    (PREFETCH 0 compiles to the same PTX as before the knob existed).
// Measured (seventeenth session, one H100, one evaluate.py process, n_4M): PREFETCH 0 0.0728 ms,
// PREFETCH 1 0.0725 (the same within noise), PREFETCH 2 0.0767, with 3 stages and one row a lane
// 0.0781, with 2 blocks an SM 0.0757. Keeping the next chunk in flight did not move the stream,
// so the warps' compute was not what left the DRAM short; the default stays PREFETCH 0 and the
// paths stay in the search (another GPU's balance of issue rate and bandwidth may differ).
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define THREADS 256         // knob: 128 256 512
#define ROWS_PER_THREAD 2   // knob: 1 2 4
#define FIXED_C 16          // knob: 0 10 16
#define SMALL_C 32          // knob: 16 32 64
#define BLOCKS_PER_SM 4     // knob: 2 4 8
#define VEC 4               // knob: 1 4
#define CACHE 1             // knob: 0 1
#define FINISH 1            // knob: 0 1
#define PREFETCH 0          // knob: 0 1 2
#define PIPE_STAGES 2       // knob: 2 3
// THREADS: block size. ROWS_PER_THREAD: rows a lane takes from each chunk (chunk = 32 x that).
// FIXED_C: classes compiled in (C = 2..FIXED_C; 0: none, every C <= SMALL_C at run time).
// SMALL_C: the largest C staged through shared memory (larger: one warp per row).
// BLOCKS_PER_SM: persistent blocks per SM asked for (also __launch_bounds__' minimum, so the
// register budget is 65536 / (THREADS * BLOCKS_PER_SM)); clamped at run time to what fits.
// VEC: 4 reads aligned chunks with float4 loads, 1 with scalar loads. CACHE: 1 streams logits and
// labels (ld.global.cs: read once, evict first), 0 reads them through the read-only path.
// FINISH: 0 zeroes the finish counter with a memset per call, 1 uses a self-resetting ticket and a
// batched last-block sum (see above).
// PREFETCH: 0 loads a chunk after computing the previous one; 1 prefetches the next full chunk
// into registers; 2 streams full chunks through a per-warp ring of bulk copies (see above).
// PIPE_STAGES: the most stages of PREFETCH 2's ring (2 or 3; fewer where 3 would not let
// BLOCKS_PER_SM blocks fit an SM); no effect at PREFETCH 0 or 1.
// Defaults since the sixteenth session: FINISH 1 with BLOCKS_PER_SM 4 (one H100, one process: 55.0x /
// 53.3x torch on n_4M / n_3M_odd against 53.3x / 50.2x for FINISH 0 with 8 blocks; FINISH 1 with
// 8 blocks 54.3x / 52.2x).
// Earlier defaults: the fastest consistent setting of six timed in one process on an H100 (thirteenth
// session): 75 % / 71 % of speed-of-light on n_4M / n_3M_odd, 1.17x the naive seed (which reads
// 66 % / 60 %) and 53x / 50x torch; the previous tiled family read 56 % / 52 %. Three settings
// with BLOCKS_PER_SM 4 or 4 rows a lane read one shape 2-3x slower in that run, while the launch
// still queried the device, the counter's address and the occupancy on every call (now cached).
// Knob constraints (evo_fsr/knobs.py): a block's runtime-C staging slice (33/32 x THREADS x
// ROWS_PER_THREAD x SMALL_C floats, at most 132 KB) fits an SM's shared memory, and the blocks
// asked for per SM fit its 2048 threads.
// constraint: THREADS * ROWS_PER_THREAD * SMALL_C <= 32768
// constraint: THREADS * BLOCKS_PER_SM <= 2048

static_assert(THREADS * ROWS_PER_THREAD * SMALL_C <= 32768,
              "knob constraint: THREADS * ROWS_PER_THREAD * SMALL_C <= 32768");
static_assert(THREADS * BLOCKS_PER_SM <= 2048, "knob constraint: THREADS * BLOCKS_PER_SM <= 2048");
static_assert(THREADS % 32 == 0 && THREADS >= 64 && THREADS <= 1024, "THREADS: a warp multiple, 64..1024");
static_assert(VEC == 1 || VEC == 4, "VEC must be 1 or 4");
static_assert(FIXED_C <= SMALL_C, "FIXED_C classes are staged: FIXED_C <= SMALL_C");
static_assert(ROWS_PER_THREAD >= 1, "ROWS_PER_THREAD >= 1");
static_assert(FINISH == 0 || FINISH == 1, "FINISH must be 0 or 1");
static_assert(PREFETCH >= 0 && PREFETCH <= 2, "PREFETCH must be 0, 1 or 2");
static_assert(PIPE_STAGES == 2 || PIPE_STAGES == 3, "PIPE_STAGES must be 2 or 3");

#define NWARPS (THREADS / 32)
#define CHUNK_ROWS (32 * ROWS_PER_THREAD)
// Registers a thread may use under __launch_bounds__(THREADS, BLOCKS_PER_SM) (allocated 8 at a
// time, at most 255): what PREFETCH 1 and 2 budget against.
#define REG_CAP ((65536 / (THREADS * BLOCKS_PER_SM)) / 8 * 8 > 255 ? 255 : (65536 / (THREADS * BLOCKS_PER_SM)) / 8 * 8)
#define WORKSPACE_FLOATS 65536

__device__ unsigned int g_done;          // blocks finished in this call

// One global load of a float, float4 or int: streaming (CACHE 1) or through the read-only path.
template <typename T>
__device__ __forceinline__ T ld(const T* p) {
#if CACHE
    return __ldcs(p);
#else
    return __ldg(p);
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Block-wide sum, valid in thread 0; sh holds NWARPS floats.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();                       // sh may still be read by a previous call
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = 0.0f;
    if (warp == 0) {
        t = lane < NWARPS ? sh[lane] : 0.0f;
        t = warp_sum(t);
    }
    return t;
}

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    const float mx = fmaxf(m, m2);
    const float a = (m == -INFINITY) ? 0.0f : s * expf(m - mx);
    const float b = (m2 == -INFINITY) ? 0.0f : s2 * expf(m2 - mx);
    m = mx;
    s = a + b;
}

__device__ __forceinline__ void finish(float acc, float* __restrict__ workspace, float* __restrict__ out,
                                       int N, float* sh) {
    __shared__ bool last;
    const float part = block_sum(acc, sh);
    if (threadIdx.x == 0) {
        workspace[blockIdx.x] = part;
        __threadfence();
#if FINISH
        last = atomicInc(&g_done, gridDim.x - 1) == gridDim.x - 1;     // wraps to 0: reset
#else
        last = atomicAdd(&g_done, 1u) == gridDim.x - 1;
#endif
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    float s = 0.0f;
#if FINISH
    const int parts = (int)gridDim.x;
    for (int b0 = 0; b0 < parts; b0 += 8 * THREADS) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int b = b0 + u * THREADS + (int)threadIdx.x;
            v[u] = b < parts ? __ldcg(workspace + b) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) s += v[u];
    }
#else
    for (int b = threadIdx.x; b < (int)gridDim.x; b += THREADS) s += __ldcg(workspace + b);
#endif
    s = block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = (float)((double)s / (double)N);
}

// Shared-memory floats of one warp's slice for C classes: a chunk plus one skew float per 32,
// rounded up to a float4 so that every slice starts 16-byte aligned.
__host__ __device__ __forceinline__ constexpr int slice_floats(int C) {
    return (33 * ROWS_PER_THREAD * C + 3) & ~3;
}

// Where element k of a chunk lives in the warp's slice.
__device__ __forceinline__ int at(int k, bool skew) { return skew ? k + (k >> 5) : k; }

// Float4 g of a chunk (elements 4g .. 4g + 3) into the warp's slice, where at() puts them.
__device__ __forceinline__ void store_slice4(float* tile, int g, float4 v, bool skew) {
    if (skew) {
        float* d = tile + 4 * g + (g >> 3);          // = at(4g + q) for q < 4
        d[0] = v.x; d[1] = v.y; d[2] = v.z; d[3] = v.w;
    } else {
        reinterpret_cast<float4*>(tile)[g] = v;
    }
}

// One row (C classes from the slice, element e0 first): its loss.
template <int CT>
__device__ __forceinline__ float row_loss(const float* tile, int e0, int C, int lab, bool skew) {
    float m, s = 0.0f;
    if constexpr (CT > 0) {
        float x[CT];
#pragma unroll
        for (int c = 0; c < CT; ++c) x[c] = tile[at(e0 + c, skew)];
        m = x[0];
#pragma unroll
        for (int c = 1; c < CT; ++c) m = fmaxf(m, x[c]);
#pragma unroll
        for (int c = 0; c < CT; ++c) s += expf(x[c] - m);
    } else {
        m = tile[at(e0, skew)];
        for (int c = 1; c < C; ++c) m = fmaxf(m, tile[at(e0 + c, skew)]);
#pragma unroll 4
        for (int c = 0; c < C; ++c) s += expf(tile[at(e0 + c, skew)] - m);
    }
    return (m - tile[at(e0 + lab, skew)]) + logf(s);
}

#if PREFETCH == 1
// Whether the C = CT instantiation has PREFETCH 1's pipeline: its prefetched registers (4 a
// float4, one a label) plus a row's CT values must leave ~21 of REG_CAP for the rest. Fitted on
// ptxas -v over THREADS x ROWS_PER_THREAD x BLOCKS_PER_SM (FIXED_C 16): within it no
// instantiation spills that does not spill at PREFETCH 0 (past it ptxas spilled, e.g. C = 15, 16
// at the defaults, or C >= 8 with 4 rows a lane at 64 registers); other C take the ordinary path.
template <int CT>
__host__ __device__ constexpr bool prefetch_fits() {
    return CT > 0 && 4 * ((8 * ROWS_PER_THREAD * CT + 31) / 32) + ROWS_PER_THREAD + CT <= REG_CAP - 21;
}

// PREFETCH 1 (compile-time C, float4-aligned logits): the full chunks a warp owns, software-
// pipelined through registers. The float4s and labels of the warp's next full chunk are loaded
// into registers before the current chunk's rows are computed from the slice, so that they are in
// flight during the compute; afterwards they are stored to the slice. Returns the first chunk of
// the warp not done (its partial last chunk, if it owns it, or past the end), which the
// ordinary loop then takes.
template <int CT>
__device__ __forceinline__ long long rows_prefetched(const float* __restrict__ logits, const int* __restrict__ labels,
                                                     float* tile, int N, long long ch, float& acc) {
    constexpr int NV = 8 * ROWS_PER_THREAD * CT;             // float4s in a full chunk
    constexpr int PV = (NV + 31) / 32;                       // per lane
    constexpr bool SKEW = (CT & 3) == 0;
    const int lane = threadIdx.x & 31;
    const long long full = (long long)N / CHUNK_ROWS;        // chunks [0, full) are full
    const long long stride = (long long)gridDim.x * NWARPS;
    if (ch >= full) return ch;
    float4 v[PV];
    int lab[ROWS_PER_THREAD];
    auto issue = [&](long long c) {                          // chunk c's loads, none used yet
        const float4* s4 = reinterpret_cast<const float4*>(logits + c * (CHUNK_ROWS * CT));
#pragma unroll
        for (int r = 0; r < ROWS_PER_THREAD; ++r) lab[r] = ld(labels + c * CHUNK_ROWS + r * 32 + lane);
#pragma unroll
        for (int j = 0; j < PV; ++j)
            if (NV % 32 == 0 || j * 32 + lane < NV) v[j] = ld(s4 + j * 32 + lane);
    };
    issue(ch);
    while (true) {
        __syncwarp();                                        // the previous chunk's rows are read
#pragma unroll
        for (int j = 0; j < PV; ++j) {
            const int g = j * 32 + lane;
            if (NV % 32 == 0 || g < NV) store_slice4(tile, g, v[j], SKEW);
        }
        int cur[ROWS_PER_THREAD];
#pragma unroll
        for (int r = 0; r < ROWS_PER_THREAD; ++r) cur[r] = lab[r];
        __syncwarp();                                        // the chunk is in the slice
        const long long next = ch + stride;
        if (next < full) issue(next);                        // warp-uniform: in flight from here
#pragma unroll
        for (int r = 0; r < ROWS_PER_THREAD; ++r)
            acc += row_loss<CT>(tile, (r * 32 + lane) * CT, CT, cur[r], SKEW);
        ch = next;
        if (ch >= full) return ch;
    }
}
#endif

#if PREFETCH == 2
// PREFETCH 2: a ring of bulk copies per warp (sm_90 TMA, 1-D). Each warp owns its own ring of
// `ring_stages` chunk buffers in its region of dynamic shared memory, one mbarrier each (static
// shared memory); lane 0 issues the copies, every lane waits on the stage's barrier. Per warp
// rather than per block: warps stay independent (no block barrier, as in the other paths), and a
// copy is one contiguous chunk of 1280 x ROWS_PER_THREAD bytes at C = 10 (a multiple of 16 bytes
// at a multiple of 128 bytes from logits: aligned when logits is 16-byte aligned).
// Rows are read from the unskewed buffer: fine for C % 4 != 0 (odd C conflict-free, C = 2 mod 4
// 2-way); C % 4 == 0 would read rows with 4- to 16-way bank conflicts, so those C (and runtime C)
// fall back to the ordinary path, as do misaligned logits and the partial last chunk.
// Shared memory sizes of an H100 SM (sm_90): what an SM holds, a block's most (opted in) and the
// runtime's reservation per block.
#define SM_SMEM_BYTES 233472
#define BLOCK_SMEM_MAX 232448
#define BLOCK_SMEM_RESERVED 1024

// Floats of a warp's ring region: stages 0..S-2 at a chunk's stride, the last one a full slice
// (the fallback path reuses the region's start as its skewed slice after the ring is drained).
template <int CT>
__host__ __device__ constexpr int ring_floats(int S) {
    return (S - 1) * CHUNK_ROWS * CT + slice_floats(CT);
}

// A block's shared memory with S stages (dynamic ring, barriers, sh[], rounded up for margin).
template <int CT>
__host__ __device__ constexpr int ring_block_bytes(int S) {
    return (NWARPS * (ring_floats<CT>(S) * 4 + S * 8) + NWARPS * 4 + 64 + 127) / 128 * 128;
}

// PIPE_STAGES is the most stages: 3 only where BLOCKS_PER_SM blocks of 3 stages fit an SM.
template <int CT>
__host__ __device__ constexpr int ring_stages() {
    return PIPE_STAGES == 3 && BLOCKS_PER_SM * (ring_block_bytes<CT>(3) + BLOCK_SMEM_RESERVED) <= SM_SMEM_BYTES ? 3 : 2;
}

// Whether the C = CT instantiation has the ring: C % 4 != 0, a block of it fits an SM at all,
// and the registers allow it. With 32 registers a thread (THREADS x BLOCKS_PER_SM = 2048) ptxas
// spilled the ring for 2 and 4 rows a lane and C >= 13 at 1 (ptxas -v over THREADS x
// ROWS_PER_THREAD x BLOCKS_PER_SM, FIXED_C 16); those take the ordinary path.
template <int CT>
__host__ __device__ constexpr bool ring_ok() {
    return CT > 0 && CT % 4 != 0 && ring_block_bytes<CT>(ring_stages<CT>()) <= BLOCK_SMEM_MAX &&
           (REG_CAP >= 64 || (ROWS_PER_THREAD == 1 && CT <= 12));
}

__device__ __forceinline__ unsigned smem_address(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ unsigned long long evict_first_policy() {
    unsigned long long policy = 0;
#if CACHE
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
    return policy;
}

// One chunk into a stage: the stage's barrier expects its bytes (the one arrival of the phase),
// then the copy completes them. CACHE 1: an L2 evict-first hint, as ld.global.cs streams.
__device__ __forceinline__ void bulk_chunk(float* dst, const float* src, unsigned bytes, unsigned long long* bar,
                                           unsigned long long policy) {
    const unsigned b = smem_address(bar);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
#if CACHE
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                 ::"r"(smem_address(dst)), "l"(src), "r"(bytes), "r"(b), "l"(policy) : "memory");
#else
    (void)policy;
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_address(dst)), "l"(src), "r"(bytes), "r"(b) : "memory");
#endif
}

// Until the phase of ``bar`` with parity ``parity`` has completed.
__device__ __forceinline__ void bar_wait(unsigned long long* bar, unsigned parity) {
    asm volatile("{\n\t.reg .pred done;\n"
                 "WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
                 "@!done bra WAIT_%=;\n}" ::"r"(smem_address(bar)), "r"(parity) : "memory");
}

// The warp's full chunks through its ring: chunk k of the warp (chunk ch + k * stride) lands in
// stage k % S, the (k / S)-th use of that stage's barrier, so its wait parity is (k / S) & 1; the
// stage is re-armed with chunk k + S only after every lane has read chunk k (__syncwarp). The
// labels of chunk k + 1 are loaded (into registers) before chunk k is computed. Returns the first
// chunk of the warp not done; every copy issued has been waited on by then.
template <int CT>
__device__ __forceinline__ long long rows_ring(const float* __restrict__ logits, const int* __restrict__ labels,
                                               float* ring, int N, long long ch, float& acc) {
    constexpr int S = ring_stages<CT>();
    constexpr int CH = CHUNK_ROWS * CT;                      // floats of a chunk: a stage's stride
    constexpr unsigned BYTES = CH * 4u;                      // a multiple of 128
    __shared__ unsigned long long bars[NWARPS * S];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned long long* bar = bars + warp * S;
    const long long full = (long long)N / CHUNK_ROWS;        // chunks [0, full) are full
    const long long stride = (long long)gridDim.x * NWARPS;
    if (ch >= full) return ch;
    const int mine = (int)((full - 1 - ch) / stride) + 1;    // the warp's full chunks
    unsigned long long policy = 0;
    if (lane == 0) {
#pragma unroll
        for (int s = 0; s < S; ++s)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_address(bar + s)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");   // the inits, seen by the copies
        policy = evict_first_policy();
#pragma unroll
        for (int s = 0; s < S; ++s)
            if (s < mine) bulk_chunk(ring + s * CH, logits + (ch + s * stride) * CH, BYTES, bar + s, policy);
    }
    int lab[ROWS_PER_THREAD];
#pragma unroll
    for (int r = 0; r < ROWS_PER_THREAD; ++r) lab[r] = ld(labels + ch * CHUNK_ROWS + r * 32 + lane);
    __syncwarp();                                            // the barriers' init, before any wait
    int s = 0;
    unsigned parity = 0u;
#pragma unroll 1
    for (int k = 0; k < mine; ++k) {
        const long long c = ch + (long long)k * stride;
        int next[ROWS_PER_THREAD];
#pragma unroll
        for (int r = 0; r < ROWS_PER_THREAD; ++r) next[r] = 0;
        if (k + 1 < mine) {
#pragma unroll
            for (int r = 0; r < ROWS_PER_THREAD; ++r) next[r] = ld(labels + (c + stride) * CHUNK_ROWS + r * 32 + lane);
        }
        bar_wait(bar + s, parity);                           // chunk k has landed in stage s
        const float* t = ring + s * CH;
#pragma unroll
        for (int r = 0; r < ROWS_PER_THREAD; ++r)
            acc += row_loss<CT>(t, (r * 32 + lane) * CT, CT, lab[r], false);
        __syncwarp();                                        // every lane has read stage s
        if (lane == 0 && k + S < mine) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the reads, before the copy's writes
            bulk_chunk(ring + s * CH, logits + (c + (long long)S * stride) * CH, BYTES, bar + s, policy);
        }
#pragma unroll
        for (int r = 0; r < ROWS_PER_THREAD; ++r) lab[r] = next[r];
        if (++s == S) {
            s = 0;
            parity ^= 1u;
        }
    }
    return ch + (long long)mine * stride;
}
#endif

// C <= SMALL_C: warp-staged chunks of CHUNK_ROWS rows (CT > 0: C = CT compiled in; 0: runtime C).
template <int CT>
__global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM)
ce_rows(const float* __restrict__ logits, const int* __restrict__ labels, float* __restrict__ out,
        float* __restrict__ workspace, int N, int Crt) {
    extern __shared__ float4 smem4[];
    __shared__ float sh[NWARPS];
    const int C = CT > 0 ? CT : Crt;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* tile = reinterpret_cast<float*>(smem4) + warp * slice_floats(C);
    const bool skew = (C & 3) == 0;
    const bool vec = VEC == 4 && (reinterpret_cast<uintptr_t>(logits) & 15) == 0;
    const long long nchunks = ((long long)N + CHUNK_ROWS - 1) / CHUNK_ROWS;
    float acc = 0.0f;
    long long ch = (long long)blockIdx.x * NWARPS + warp;
#if PREFETCH == 1
    if constexpr (prefetch_fits<CT>())
        if (vec) ch = rows_prefetched<CT>(logits, labels, tile, N, ch, acc);    // the full chunks
#elif PREFETCH == 2
    if constexpr (ring_ok<CT>()) {
        if (vec) {                                           // the warp's region holds its ring
            tile = reinterpret_cast<float*>(smem4) + warp * ring_floats<CT>(ring_stages<CT>());
            ch = rows_ring<CT>(logits, labels, tile, N, ch, acc);                // the full chunks
        }
    }
#endif
    for (; ch < nchunks; ch += (long long)gridDim.x * NWARPS) {
        const long long row0 = ch * CHUNK_ROWS;
        const int nr = N - row0 < CHUNK_ROWS ? (int)(N - row0) : CHUNK_ROWS;
        const float* src = logits + row0 * C;
        const int nf = nr * C;                               // floats in this chunk
        int lab[ROWS_PER_THREAD];
#pragma unroll
        for (int r = 0; r < ROWS_PER_THREAD; ++r)
            lab[r] = r * 32 + lane < nr ? ld(labels + row0 + r * 32 + lane) : 0;
        __syncwarp();                                        // the previous chunk's rows are read
        if constexpr (CT > 0) {
            constexpr int NV = 8 * ROWS_PER_THREAD * CT;     // float4s in a full chunk
            constexpr int PV = (NV + 31) / 32;               // per lane
            constexpr int NS = ROWS_PER_THREAD * CT;         // floats per lane
            if (vec && nr == CHUNK_ROWS) {
                const float4* s4 = reinterpret_cast<const float4*>(src);
                float4 v[PV];
#pragma unroll
                for (int j = 0; j < PV; ++j)
                    if (NV % 32 == 0 || j * 32 + lane < NV) v[j] = ld(s4 + j * 32 + lane);
#pragma unroll
                for (int j = 0; j < PV; ++j) {
                    const int g = j * 32 + lane;
                    if (NV % 32 == 0 || g < NV) store_slice4(tile, g, v[j], skew);
                }
            } else {
                float v[NS];
#pragma unroll
                for (int j = 0; j < NS; ++j) {
                    const int k = j * 32 + lane;
                    v[j] = k < nf ? ld(src + k) : 0.0f;
                }
#pragma unroll
                for (int j = 0; j < NS; ++j) {
                    const int k = j * 32 + lane;
                    if (k < nf) tile[at(k, skew)] = v[j];
                }
            }
        } else if (vec && nr == CHUNK_ROWS) {
            const float4* s4 = reinterpret_cast<const float4*>(src);
            const int nv = nf >> 2;                          // nf = CHUNK_ROWS * C: a multiple of 4
#pragma unroll 4
            for (int g = lane; g < nv; g += 32) store_slice4(tile, g, ld(s4 + g), skew);
        } else {
#pragma unroll 4
            for (int k = lane; k < nf; k += 32) tile[at(k, skew)] = ld(src + k);
        }
        __syncwarp();                                        // the chunk is in the slice
#pragma unroll
        for (int r = 0; r < ROWS_PER_THREAD; ++r) {
            const int row = r * 32 + lane;
            if (row < nr) acc += row_loss<CT>(tile, row * C, C, lab[r], skew);
        }
    }
    finish(acc, workspace, out, N, sh);
}

// C > SMALL_C: one warp per row (grid-stride over rows by warp).
__global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM)
ce_warp(const float* __restrict__ logits, const int* __restrict__ labels, float* __restrict__ out,
        float* __restrict__ workspace, int N, int C) {
    __shared__ float sh[NWARPS];
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * NWARPS;
    float acc = 0.0f;
    for (long long r = (long long)blockIdx.x * NWARPS + (threadIdx.x >> 5); r < N; r += warps) {
        const float* row = logits + r * C;
        float m = -INFINITY, s = 0.0f;
        for (int c = lane; c < C; c += 4 * 32) {
            float v[4];
            float lm = -INFINITY;
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int k = c + u * 32;
                v[u] = k < C ? ld(row + k) : -INFINITY;
                lm = fmaxf(lm, v[u]);
            }
            float ls = 0.0f;                // lm finite: element c is real
#pragma unroll
            for (int u = 0; u < 4; ++u) ls += expf(v[u] - lm);
            merge(m, s, lm, ls);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
            const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
            merge(m, s, m2, s2);
        }
        if (lane == 0) acc += (m - __ldg(row + __ldg(labels + r))) + logf(s);
    }
    finish(acc, workspace, out, N, sh);
}

// Host-side facts a call needs, cached per device (queried on a device's first call only: a
// batch of short calls back to back must not wait on the host between launches). Nothing here
// depends on the inputs.
struct DeviceInfo {
    int device = -1, sms = 0;
    void* done = nullptr;                 // g_done's device address
};

static cudaError_t device_info(DeviceInfo& info) {
    static DeviceInfo cached;
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return err;
    if (cached.device != dev) {
        DeviceInfo fresh;
        if (cudaDeviceGetAttribute(&fresh.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || fresh.sms <= 0)
            fresh.sms = 132;
        err = cudaGetSymbolAddress(&fresh.done, g_done);
        if (err != cudaSuccess) return err;
        fresh.device = dev;
        cached = fresh;
    }
    info = cached;
    return cudaSuccess;
}

// Blocks of `kernel` that fit an SM with `smem` bytes of dynamic shared memory (opted into past
// 48 KB), cached per kernel (the Tag: one cache per instantiation), device and smem.
template <typename Tag, typename K>
static cudaError_t blocks_fit(K kernel, size_t smem, int dev, int& fit) {
    static int cached_dev = -1, cached_fit = 0;
    static size_t cached_smem = 0;
    if (cached_dev == dev && cached_smem == smem) {
        fit = cached_fit;
        return cudaSuccess;
    }
    if (smem > 48 * 1024) {
        const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (err != cudaSuccess) return err;
    }
    fit = BLOCKS_PER_SM;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, THREADS, smem) != cudaSuccess || fit < 1) {
        cudaGetLastError();                          // not left as the call's last error
        fit = 1;
    }
    cached_fit = fit;
    cached_smem = smem;
    cached_dev = dev;
    return cudaSuccess;
}

// A persistent grid: BLOCKS_PER_SM blocks per SM, or fewer where fewer fit (a second wave of a
// persistent grid would double the time of its last chunks), and no more than there is work.
static long long grid_for(const DeviceInfo& info, int fit, long long work_blocks) {
    if (fit > BLOCKS_PER_SM) fit = BLOCKS_PER_SM;
    long long grid = (long long)info.sms * fit;
    if (grid > work_blocks) grid = work_blocks;
    if (grid > WORKSPACE_FLOATS) grid = WORKSPACE_FLOATS;
    return grid < 1 ? 1 : grid;
}

template <int CT> struct RowsTag {};
struct WarpTag {};

template <int CT>
static int launch_rows(const DeviceInfo& info, const float* logits, const int* labels, float* out,
                       float* workspace, int N, int C, cudaStream_t stream) {
    size_t smem = (size_t)NWARPS * slice_floats(C) * sizeof(float);
#if PREFETCH == 2
    if constexpr (ring_ok<CT>())                             // the kernel's test: float4-aligned
        if (VEC == 4 && (reinterpret_cast<uintptr_t>(logits) & 15) == 0)
            smem = (size_t)NWARPS * ring_floats<CT>(ring_stages<CT>()) * sizeof(float);
#endif
    int fit = 1;
    const cudaError_t err = blocks_fit<RowsTag<CT>>(ce_rows<CT>, smem, info.device, fit);
    if (err != cudaSuccess) return (int)err;
    const long long chunks = ((long long)N + CHUNK_ROWS - 1) / CHUNK_ROWS;
    const long long grid = grid_for(info, fit, (chunks + NWARPS - 1) / NWARPS);
    ce_rows<CT><<<(unsigned)grid, THREADS, smem, stream>>>(logits, labels, out, workspace, N, C);
    return (int)cudaGetLastError();
}

// C == K for some K in 2..FIXED_C: that instantiation; otherwise the runtime-C one.
template <int K>
static int dispatch_rows(const DeviceInfo& info, const float* logits, const int* labels, float* out,
                         float* workspace, int N, int C, cudaStream_t stream) {
    if constexpr (K > FIXED_C) {
        return launch_rows<0>(info, logits, labels, out, workspace, N, C, stream);
    } else {
        if (C == K) return launch_rows<K>(info, logits, labels, out, workspace, N, C, stream);
        return dispatch_rows<K + 1>(info, logits, labels, out, workspace, N, C, stream);
    }
}

extern "C" int launch(const float* logits, const int* labels, float* out, float* workspace, int N,
                      int C, cudaStream_t stream) {
    if (N <= 0 || C <= 0) return 0;
    DeviceInfo info;
    cudaError_t err = device_info(info);
    if (err != cudaSuccess) return (int)err;
#if !FINISH
    err = cudaMemsetAsync(info.done, 0, sizeof(unsigned int), stream);
    if (err != cudaSuccess) return (int)err;
#endif
    if (C <= SMALL_C) return dispatch_rows<2>(info, logits, labels, out, workspace, N, C, stream);
    int fit = 1;
    err = blocks_fit<WarpTag>(ce_warp, 0, info.device, fit);
    if (err != cudaSuccess) return (int)err;
    const long long grid = grid_for(info, fit, ((long long)N + NWARPS - 1) / NWARPS);
    ce_warp<<<(unsigned)grid, THREADS, 0, stream>>>(logits, labels, out, workspace, N, C);
    return (int)cudaGetLastError();
}
