// softmax family with regime dispatch by row length (complements block_online.cu):
//  - short rows (cols <= 32 * WARP_ITEMS): one warp per row, the row cached in registers,
//    exact max then sum of exp with warp shuffles; WARPS_PER_BLOCK rows per block;
//  - medium rows (cols <= THREADS * ITEMS): one block per row, the row cached in registers,
//    block-wide max then sum (two reductions, one read of x, one write of y);
//  - long rows, few of them (rows < 2 * SMs): one thread-block cluster of CL CTAs per row (sm_90),
//    CL the smallest of 2, 4, 8, 16 whose chunk (cols / CL, rounded up to 4 floats) fits in
//    CLUSTER_REG floats a thread of registers plus CLUSTER_SMEM_KB of shared memory. Each CTA
//    loads its chunk once: the first CLUSTER_REG * CLUSTER_THREADS floats into registers
//    (coalesced, all in flight at once), the rest into shared memory, by loads staged through
//    registers (16 floats a thread in flight) or, with CLUSTER_TMA 1 and float4 alignment, by
//    CPIECES bulk copies (cp.async.bulk, one mbarrier each, issued by thread 0: the whole chunk in
//    flight, no staging registers, the max starts on the first piece while the others land). It
//    takes the chunk's max, replaces each element by exp(x - chunk max) and sums them; the CL
//    partial (max, sum) states are merged through DSMEM (the same order, so the same bits, in
//    every CTA) and each CTA writes its chunk from registers and shared memory: one read of x,
//    one write of y, one launch. Why CLUSTER_REG: 32 rows of 262144 floats (32 MB) exceed the
//    GPU's shared memory (132 x 227 KB = 30 MB), so with shared memory alone the clusters run in
//    two waves, the second a quarter full (at 64 KB, 16 CTAs a row, 3 CTAs a SM: 24 of the 32
//    clusters at once); the register file (256 KB a SM, idle here) holds the rest, e.g. 16
//    floats x 256 threads = 16 KB of each 64 KB chunk, 48 KB in shared memory, 4 CTAs a SM at
//    <= 64 registers: all 32 rows resident in one wave where the GPCs can place the clusters.
//    Without a cluster that fits (CLUSTER_SMEM_KB 0, a row too long for 16 chunks, a device
//    without room for the cluster), the two regimes below. CLUSTER_XCHG 1: the CL (max, sum) states
//    are exchanged without release/acquire cluster barriers: lanes q < CL of warp 0 write the CTA's
//    state into slot `rank` of CTA q with st.async (completing 8 bytes on CTA q's exchange
//    mbarrier), each CTA waits on its own mbarrier and every warp merges slots 0..CL-1 as the DSMEM
//    merge does (no __syncthreads, no DSMEM reads); only relaxed cluster barriers remain (no memory
//    fences): one after the mbarrier init, waited on before the first st.async, one before exit.
//    Why: Nsight Compute on an H100 (long_rows, CLUSTER_XCHG 0): 1458 GB/s of ~2900, barrier stalls
//    5.5 warps per issue, waiting twice for the slowest CTA of the cluster; not measured yet;
//  - long rows otherwise: an online (max, sum of exp) over chunks of ITEMS elements per thread.
//    With enough rows to fill the GPU, one block per row (read, re-read, write). With few rows,
//    the row is split across CTAs (chunk of about SPLIT_COLS columns each): kernel 1 writes one
//    (max, sum) partial per chunk into a __device__ buffer, kernel 2 merges the row's partials and
//    writes its chunk (the re-read of x mostly hits L2).
// Vector loads (float2/float4, up to VEC) only when x and y are aligned and cols is a multiple of
// the width; otherwise scalar. exp is always taken of x - (the max of a range holding x): large
// |x| cannot overflow.
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <math.h>
#include <stdint.h>

namespace cg = cooperative_groups;

#define WARP_ITEMS 8        // knob: 1 2 4 8 16 32
#define WARPS_PER_BLOCK 4   // knob: 2 4 8
#define THREADS 512         // knob: 128 256 512 1024
#define ITEMS 8             // knob: 4 8 16 32
#define SPLIT_COLS 8192     // knob: 2048 4096 8192 16384
#define VEC 4               // knob: 1 2 4
#define CLUSTER_SMEM_KB 64  // knob: 0 64 96 128 192
#define CLUSTER_THREADS 256 // knob: 128 256 512 1024
#define CLUSTER_REG 16      // knob: 0 8 16 32
#define CLUSTER_TMA 1       // knob: 0 1
#define CLUSTER_XCHG 1      // knob: 0 1
// Defaults: CLUSTER_REG 16 and CLUSTER_TMA 1 since the sixteenth session: long_rows (32 x 262144)
// on an H100 read 0.0346 ms (3.20x torch) against 0.0368 ms (3.01x) with the chunk all in shared
// memory and register-staged loads, in one process; CLUSTER_TMA 0 0.0358, 96 KB with 512 threads
// 0.0351, 192 KB with 1024 threads 0.0426.
// CLUSTER_SMEM_KB: shared memory a CTA of the cluster regime may cache (0: regime off);
// CLUSTER_THREADS: that kernel's block size; CLUSTER_REG: floats of its chunk each thread holds
// in registers; CLUSTER_TMA: bulk copies (1) or register-staged loads (0) into shared memory;
// CLUSTER_XCHG: 1 exchanges the per-CTA (max, sum) states by st.async into every CTA's own shared
// memory (an mbarrier a CTA, relaxed cluster barriers only), 0 by DSMEM reads between
// release/acquire cluster barriers (cluster.sync). 1 is the default: on an H100 (evaluate.py,
// --trials 20) long_rows 3.27x torch against 3.19x (tasks/README.md, eighteenth session).
// Knob constraints (evo_fsr/knobs.py): a row cached in registers must fit (64 registers per
// thread at 1024 threads), in both the block-per-row and the cluster regime.
// constraint: THREADS * ITEMS <= 16384
// constraint: CLUSTER_REG * CLUSTER_THREADS <= 16384

static_assert(THREADS * ITEMS <= 16384, "knob constraint: THREADS * ITEMS <= 16384");
static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS: a warp multiple <= 1024");
static_assert(WARPS_PER_BLOCK >= 1 && WARPS_PER_BLOCK * 32 <= 1024, "WARPS_PER_BLOCK out of range");
static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC must be 1, 2 or 4");
static_assert(ITEMS % VEC == 0 && ITEMS >= VEC, "ITEMS must be a multiple of VEC");
static_assert(WARP_ITEMS >= 1 && (WARP_ITEMS & (WARP_ITEMS - 1)) == 0, "WARP_ITEMS: a power of two");
static_assert(SPLIT_COLS % 4 == 0, "SPLIT_COLS must keep float4 alignment");
static_assert(CLUSTER_SMEM_KB >= 0 && CLUSTER_SMEM_KB <= 224,
              "CLUSTER_SMEM_KB in 0..224 (sm_90: 227 KB per block, static shared memory included)");
static_assert(CLUSTER_THREADS % 32 == 0 && CLUSTER_THREADS >= 64 && CLUSTER_THREADS <= 1024,
              "CLUSTER_THREADS: a warp multiple in 64..1024");
static_assert(CLUSTER_REG * CLUSTER_THREADS <= 16384, "knob constraint: CLUSTER_REG * CLUSTER_THREADS <= 16384");
static_assert(CLUSTER_REG % 4 == 0 && CLUSTER_REG >= 0, "CLUSTER_REG: a multiple of 4 (whole float4s)");
static_assert(CLUSTER_TMA == 0 || CLUSTER_TMA == 1, "CLUSTER_TMA: 0 or 1");
static_assert(CLUSTER_XCHG == 0 || CLUSTER_XCHG == 1, "CLUSTER_XCHG: 0 or 1");

#define NWARPS (THREADS / 32)
#define CNWARPS (CLUSTER_THREADS / 32)
#define CPIECES 4           // bulk copies (one mbarrier each) per chunk in the cluster regime
// Cluster kernel's minimum CTAs a SM (its register cap): about 40 registers of work plus the
// CLUSTER_REG cached floats a thread, at most what CLUSTER_SMEM_KB (plus 1 KB reserved a CTA)
// and 2048 threads a SM allow.
#define CMINB_REG (65536 / (CLUSTER_THREADS * (CLUSTER_REG + 40)))
#define CMINB_SMEM (228 / (CLUSTER_SMEM_KB + 1))
#define CMINB_THR (2048 / CLUSTER_THREADS)
#define CMINB_2 (CMINB_REG < CMINB_SMEM ? CMINB_REG : CMINB_SMEM)
#define CMINB_3 (CMINB_2 < CMINB_THR ? CMINB_2 : CMINB_THR)
#define CLUSTER_MIN_BLOCKS (CMINB_3 > 1 ? CMINB_3 : 1)
#define PART_CAP 65536      // (max, sum) partials of the split regime

__device__ float2 g_part[PART_CAP];

// V floats at p into v: through the read-only path (__ldg) for x, plainly for shared memory.
template <int V, bool READ_ONLY = true>
__device__ __forceinline__ void ldv(const float* __restrict__ p, float* v) {
    if constexpr (V == 4) {
        const float4* q = reinterpret_cast<const float4*>(p);
        const float4 t = READ_ONLY ? __ldg(q) : *q;
        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
    } else if constexpr (V == 2) {
        const float2* q = reinterpret_cast<const float2*>(p);
        const float2 t = READ_ONLY ? __ldg(q) : *q;
        v[0] = t.x; v[1] = t.y;
    } else {
        v[0] = READ_ONLY ? __ldg(p) : *p;
    }
}

template <int V>
__device__ __forceinline__ void stv(float* __restrict__ p, const float* v) {
    if constexpr (V == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else if constexpr (V == 2) {
        *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
    } else {
        p[0] = v[0];
    }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// (m, s) <- merge of two online states; an empty state is (-inf, 0).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    const float mx = fmaxf(m, m2);
    const float a = (m == -INFINITY) ? 0.0f : s * expf(m - mx);
    const float b = (m2 == -INFINITY) ? 0.0f : s2 * expf(m2 - mx);
    m = mx;
    s = a + b;
}

__device__ __forceinline__ void warp_merge(float& m, float& s) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge(m, s, m2, s2);
    }
}

// Block-wide max or sum over NW warps, the result in every thread; sh holds NW + 1 floats.
template <bool IS_MAX, int NW = NWARPS>
__device__ __forceinline__ float block_all(float v, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = IS_MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < NW ? sh[lane] : (IS_MAX ? -INFINITY : 0.0f);
        t = IS_MAX ? warp_max(t) : warp_sum(t);
        if (lane == 0) sh[NW] = t;
    }
    __syncthreads();
    const float r = sh[NW];
    __syncthreads();   // sh may be reused
    return r;
}

// Block-wide merge of online states, the result in every thread.
__device__ __forceinline__ void block_merge(float& m, float& s, float* shm, float* shs) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    warp_merge(m, s);
    if (lane == 0) { shm[warp] = m; shs[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = lane < NWARPS ? shm[lane] : -INFINITY;
        s = lane < NWARPS ? shs[lane] : 0.0f;
        warp_merge(m, s);
        if (lane == 0) { shm[NWARPS] = m; shs[NWARPS] = s; }
    }
    __syncthreads();
    m = shm[NWARPS];
    s = shs[NWARPS];
    __syncthreads();
}

// ---- short rows: one warp per row --------------------------------------------------------
template <int V>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
softmax_warp(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    constexpr int NV = WARP_ITEMS / V;
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= rows) return;                       // uniform per warp: shuffles stay full-warp
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float v[WARP_ITEMS];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int c = (i * 32 + lane) * V;         // cols % V == 0: a vector is all in or all out
        if (c < cols) {
            ldv<V>(xr + c, v + i * V);
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) v[i * V + k] = -INFINITY;
        }
#pragma unroll
        for (int k = 0; k < V; ++k) m = fmaxf(m, v[i * V + k]);
    }
    m = warp_max(m);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < WARP_ITEMS; ++k) {
        v[k] = expf(v[k] - m);                     // expf(-inf) = 0 for the padding
        s += v[k];
    }
    const float inv = 1.0f / warp_sum(s);
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int c = (i * 32 + lane) * V;
        if (c < cols) {
#pragma unroll
            for (int k = 0; k < V; ++k) v[i * V + k] *= inv;
            stv<V>(yr + c, v + i * V);
        }
    }
}

// ---- medium rows: one block per row, cached ----------------------------------------------
template <int V>
__global__ void __launch_bounds__(THREADS)
softmax_cached(const float* __restrict__ x, float* __restrict__ y, int cols) {
    constexpr int NV = ITEMS / V;
    __shared__ float sh[NWARPS + 1];
    const long long row = blockIdx.x;
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    const int tid = threadIdx.x;
    float v[ITEMS];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int c = (i * THREADS + tid) * V;
        if (c < cols) {
            ldv<V>(xr + c, v + i * V);
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) v[i * V + k] = -INFINITY;
        }
#pragma unroll
        for (int k = 0; k < V; ++k) m = fmaxf(m, v[i * V + k]);
    }
    m = block_all<true>(m, sh);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        v[k] = expf(v[k] - m);
        s += v[k];
    }
    const float inv = 1.0f / block_all<false>(s, sh);
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int c = (i * THREADS + tid) * V;
        if (c < cols) {
#pragma unroll
            for (int k = 0; k < V; ++k) v[i * V + k] *= inv;
            stv<V>(yr + c, v + i * V);
        }
    }
}

// ---- long rows ---------------------------------------------------------------------------
// This thread's online state over columns [c0, c1) of a row (c0, c1 multiples of V).
template <int V>
__device__ __forceinline__ void online_range(const float* __restrict__ xr, long long c0, long long c1,
                                             float& m, float& s) {
    constexpr int NV = ITEMS / V;
    const long long end = c1 / V;
    for (long long base = c0 / V + threadIdx.x; base < end; base += (long long)NV * THREADS) {
        float v[ITEMS];
        float lm = -INFINITY;
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            const long long j = base + (long long)i * THREADS;
            if (j < end) {
                ldv<V>(xr + j * V, v + i * V);
            } else {
#pragma unroll
                for (int k = 0; k < V; ++k) v[i * V + k] = -INFINITY;
            }
#pragma unroll
            for (int k = 0; k < V; ++k) lm = fmaxf(lm, v[i * V + k]);
        }
        float ls = 0.0f;                            // lm is finite: element `base` is real
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) ls += expf(v[k] - lm);
        merge(m, s, lm, ls);
    }
}

template <int V>
__device__ __forceinline__ void write_range(const float* __restrict__ xr, float* __restrict__ yr,
                                            long long c0, long long c1, float m, float inv) {
    const long long end = c1 / V;
#pragma unroll 4
    for (long long j = c0 / V + threadIdx.x; j < end; j += THREADS) {
        float v[V];
        ldv<V>(xr + j * V, v);
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] = expf(v[k] - m) * inv;
        stv<V>(yr + j * V, v);
    }
}

// One block per row, any length: online pass, then the write pass.
template <int V>
__global__ void __launch_bounds__(THREADS)
softmax_looped(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float shm[NWARPS + 1], shs[NWARPS + 1];
    const long long row = blockIdx.x;
    const float* xr = x + row * cols;
    float m = -INFINITY, s = 0.0f;
    online_range<V>(xr, 0, cols, m, s);
    block_merge(m, s, shm, shs);
    write_range<V>(xr, y + row * cols, 0, cols, m, 1.0f / s);
}

// Split regime, kernel 1: grid (rows, splits); one (max, sum) partial per chunk.
template <int V>
__global__ void __launch_bounds__(THREADS)
softmax_split_stats(const float* __restrict__ x, int cols, long long chunk) {
    __shared__ float shm[NWARPS + 1], shs[NWARPS + 1];
    const long long row = blockIdx.x;
    const long long c0 = (long long)blockIdx.y * chunk;
    const long long c1 = c0 + chunk < cols ? c0 + chunk : cols;
    float m = -INFINITY, s = 0.0f;
    online_range<V>(x + row * cols, c0, c1, m, s);
    block_merge(m, s, shm, shs);
    if (threadIdx.x == 0) g_part[row * gridDim.y + blockIdx.y] = make_float2(m, s);
}

// Split regime, kernel 2: merge the row's partials (warp 0), then write this chunk.
template <int V>
__global__ void __launch_bounds__(THREADS)
softmax_split_write(const float* __restrict__ x, float* __restrict__ y, int cols, long long chunk) {
    __shared__ float row_m, row_s;
    const long long row = blockIdx.x;
    const int splits = (int)gridDim.y;
    if (threadIdx.x < 32) {
        float m = -INFINITY, s = 0.0f;
        for (int p = threadIdx.x; p < splits; p += 32) {
            const float2 q = g_part[row * splits + p];
            merge(m, s, q.x, q.y);
        }
        warp_merge(m, s);
        if (threadIdx.x == 0) { row_m = m; row_s = s; }
    }
    __syncthreads();
    const long long c0 = (long long)blockIdx.y * chunk;
    const long long c1 = c0 + chunk < cols ? c0 + chunk : cols;
    write_range<V>(x + row * cols, y + row * cols, c0, c1, row_m, 1.0f / row_s);
}

// Pairwise sum of N (a power of two) values.
template <int N>
__device__ __forceinline__ float tree_sum(const float* a) {
    if constexpr (N == 1) return a[0];
    else return tree_sum<N / 2>(a) + tree_sum<N / 2>(a + N / 2);
}

// ---- long rows, few of them: one thread-block cluster per row -----------------------------
// Bulk copies global -> shared memory (sm_90 TMA, 1-D: 16-byte aligned addresses, a multiple of
// 16 bytes), each completing on its own mbarrier (phase 0: used once).
__device__ __forceinline__ unsigned shared_address(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void bulk_load(float* dst, const float* src, unsigned bytes, unsigned long long* bar) {
    const unsigned b = shared_address(bar);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
    if (bytes > 0)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(shared_address(dst)), "l"(src), "r"(bytes), "r"(b) : "memory");
}

__device__ __forceinline__ void bulk_wait(unsigned long long* bar) {
    asm volatile("{\n\t.reg .pred done;\n"
                 "WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n\t"
                 "@!done bra WAIT_%=;\n}" ::"r"(shared_address(bar)) : "memory");
}

// ---- CLUSTER_XCHG 1: the CTAs' states exchanged by st.async, no release/acquire cluster barrier ----
// Every CTA owns receive slots (slot q: rank q's (max, sum), 8 bytes) and an exchange mbarrier
// (arrival count 1, used once) in its own shared memory:
//  1. thread 0 arms its own mbarrier: arrive + expect_tx of CL * 8 bytes (the phase then completes
//     when all CL states have landed, its own included);
//  2. lane q < CL of warp 0 writes this CTA's state into slot `rank` of CTA q (q = rank included)
//     with st.async, which completes its 8 bytes on CTA q's mbarrier;
//  3. every thread waits on its own mbarrier and its warp merges slots 0..CL-1 from its own shared
//     memory: the butterfly of the DSMEM merge on the same bits in the same lanes, so the same
//     (max, sum) bits as CLUSTER_XCHG 0, whatever order the states landed in.
// Memory model (PTX ISA, st.async, "Conditions" for .weak): the store is a weak memory operation and
// "the complete-tx operation on the mbarrier has .release semantics at .cluster scope"; each reading
// thread observes the phase completion and then acquires at .cluster scope (xchg_wait; the scope must
// cover the writing thread in another CTA: the default .cta scope of try_wait would not), so every
// slot is visible to its plain loads afterwards: st.async "is performed in the generic proxy", like
// those loads, so no proxy fence is needed either. The arming may come before or after peers' bytes
// land: a complete-tx before the expect-tx drives tx-count negative (its valid range is
// -(2^20 - 1) .. 2^20 - 1), and the phase cannot complete while the arrival is pending.
// A CTA may write into a peer only once the peer's mbarrier is initialised: thread 0 initialises it
// at kernel start, fence.mbarrier_init.release.cluster publishes the init, every thread arrives on
// the cluster barrier with .relaxed (no membar: the fence is the release, the PTX ISA's own example
// of releasing barrier state), and every thread waits on that barrier (acquire) right before the
// first st.async; by then every CTA has long passed its kernel start, so the wait costs ~nothing.
// Exit: no CTA exits while st.async into it may be pending (it waits on its own mbarrier, which
// completes only when every peer's bytes have landed). Whether a CTA may exit with its own st.async
// to a peer still in flight, the PTX ISA does not say (the CUDA guide asks that all DSMEM operations
// happen before a block exits), so each CTA also arrives (.relaxed) on the cluster barrier once its
// own mbarrier completed and waits on it just before exiting: when that wait returns, every CTA's
// mbarrier has completed, i.e. every st.async of the cluster has landed. This is an execution
// dependency, not a memory-visibility one, so .relaxed suffices; the arrive comes before the write
// pass, so the wait at exit is normally satisfied on arrival.

// Thread 0: initialise the exchange mbarrier (arrival count 1) and publish the init to the cluster;
// every thread then arrives on the cluster barrier (cluster_arrive_relaxed).
__device__ __forceinline__ void xchg_init(unsigned long long* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// barrier.cluster with no memory ordering on the arrive (no membar); every thread of every CTA of the
// cluster executes both, uniformly (.aligned).
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait_aligned() {
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

// Warp 0 (all 32 lanes): thread 0 arms this CTA's mbarrier `bar` for cl states, then lane q < cl
// writes v into slot `rank` of CTA q's `slots` (the same shared-memory offsets in every CTA),
// completing 8 bytes on CTA q's `bar`.
__device__ __forceinline__ void xchg_send(float2* slots, unsigned long long* bar, int rank, int cl, float2 v) {
    const int lane = threadIdx.x & 31;
    if (lane == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     ::"r"(shared_address(bar)), "r"((unsigned)cl * 8u) : "memory");
    if (lane < cl) {
        unsigned dst, rbar;
        asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst) : "r"(shared_address(slots + rank)), "r"(lane));
        asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(shared_address(bar)), "r"(lane));
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
                     ::"r"(dst), "f"(v.x), "f"(v.y), "r"(rbar) : "memory");
    }
}

// Until this CTA's exchange mbarrier has completed its phase 0, then acquire at cluster scope for
// shared memory (pairs with the st.asyncs' release complete-tx). CUDA >= 12.8 (PTX ISA 8.6): a
// relaxed try_wait and fence.acquire.sync_restrict::shared::cluster.cluster, the PTX ISA's own
// example ("acquire local shared memory via generic proxy"; membar/fence section): the acquire
// covers shared memory only, so no L1 invalidation (try_wait.acquire.cluster compiles to an extra
// CCTL.IVALL). Older toolkits: try_wait.acquire.cluster.
__device__ __forceinline__ void xchg_wait(unsigned long long* bar) {
#if __CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8)
    asm volatile("{\n\t.reg .pred done;\n"
                 "XWAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.relaxed.cluster.shared::cta.b64 done, [%0], 0;\n\t"
                 "@!done bra XWAIT_%=;\n}" ::"r"(shared_address(bar)) : "memory");
    asm volatile("fence.acquire.sync_restrict::shared::cluster.cluster;" ::: "memory");
#else
    asm volatile("{\n\t.reg .pred done;\n"
                 "XWAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], 0;\n\t"
                 "@!done bra XWAIT_%=;\n}" ::"r"(shared_address(bar)) : "memory");
#endif
}

// Every warp, after xchg_wait: the row's (max, sum) from the cl received states, lane q holding slot
// q and lane 0's butterfly result broadcast; the operations of the DSMEM merge on the same values in
// the same lanes, hence the same bits in every warp and every CTA. The slots are read through a
// generic pointer the compiler cannot trace to shared memory (one 8-byte load a lane), as in
// layernorm/regime.cu, where ld.shared there made ptxas spill in the write loop.
__device__ __forceinline__ float2 xchg_row_total(const float2* slots, int cl) {
    const int lane = threadIdx.x & 31;
    const float2* g;
    asm("mov.b64 %0, %1;" : "=l"(g) : "l"(slots));
    const float2 q = lane < cl ? g[lane] : make_float2(-INFINITY, 0.0f);
    float rm = q.x, rsum = q.y;
    warp_merge(rm, rsum);
    return make_float2(__shfl_sync(0xffffffffu, rm, 0), __shfl_sync(0xffffffffu, rsum, 0));
}

// Grid: rows * CL CTAs, clusters of CL along x. CTA rank r owns columns [r * chunk,
// min((r + 1) * chunk, cols)) of row blockIdx.x / CL (chunk % 4 == 0, so every chunk start keeps
// the row's alignment); an empty chunk contributes (-inf, 0). Of the chunk's n floats, the first
// RF = CLUSTER_REG * CLUSTER_THREADS live in registers (thread t holds vectors i *
// CLUSTER_THREADS + t, i < CLUSTER_REG / V) and floats [RF, n) in dynamic shared memory (sx[0]
// is float RF). CLUSTER_XCHG 1: the states go through xslot / xbar (see xchg_send) instead of part.
template <int V>
__global__ void __launch_bounds__(CLUSTER_THREADS, CLUSTER_MIN_BLOCKS)
softmax_cluster(const float* __restrict__ x, float* __restrict__ y, int cols, int chunk) {
    constexpr int T = CLUSTER_THREADS;
    constexpr int RV = CLUSTER_REG / V;              // vectors a thread holds in registers
    constexpr int RF = CLUSTER_REG * T;              // floats of the chunk in registers
    constexpr int U = 16 / V;                        // vectors per thread in flight (16 floats)
    constexpr int R = 4;                             // vectors per step of the smem passes
    constexpr bool BULK = CLUSTER_TMA != 0 && V == 4;
    extern __shared__ float4 cluster_smem[];
    float* sx = reinterpret_cast<float*>(cluster_smem);
    __shared__ float sh[CNWARPS + 1];
    __shared__ float2 part;                          // this CTA's (max, sum), read via DSMEM
    __shared__ float2 total;                         // the row's (max, sum)
    __shared__ unsigned long long bar[CPIECES];
    const cg::cluster_group cluster = cg::this_cluster();
    const int cl = (int)cluster.num_blocks();
    const int rank = (int)cluster.block_rank();
    const int tid = threadIdx.x;
    const int c0 = min(rank * chunk, cols);
    const int nv = min(chunk, cols - c0) / V;        // vectors in this chunk
    const int ns = nv * V > RF ? nv * V - RF : 0;    // floats in shared memory
    const long long off = (long long)(blockIdx.x / cl) * cols + c0;
    const float* xr = x + off;
    float* yr = y + off;

    // CLUSTER_XCHG 1: the exchange mbarrier, initialised and published before the loads (the
    // relaxed arrive is waited on just before the first st.async, long after every CTA got here).
    __shared__ float2 xslot[CLUSTER_XCHG ? 16 : 1];  // slot q: rank q's (max, sum)
    __shared__ unsigned long long xbar;              // completes once all CL slots have landed
    if constexpr (CLUSTER_XCHG != 0) {
        if (tid == 0) xchg_init(&xbar);
        cluster_arrive_relaxed();
    }

    // Issue every load of the chunk before consuming any: the bulk copies (thread 0), then the
    // register part.
    if constexpr (BULK) {
        if (ns > 0 && tid == 0) {
#pragma unroll
            for (int p = 0; p < CPIECES; ++p)
                asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&bar[p])) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");   // the inits, seen by the copies
            const int q = ns / 4;                    // float4s (ns % 4 == 0 when V == 4)
#pragma unroll
            for (int p = 0; p < CPIECES; ++p) {
                const int u0 = (int)((long long)q * p / CPIECES), u1 = (int)((long long)q * (p + 1) / CPIECES);
                bulk_load(sx + 4 * u0, xr + RF + 4 * u0, (unsigned)(u1 - u0) * 16u, &bar[p]);
            }
        }
    }
    float r[CLUSTER_REG > 0 ? CLUSTER_REG : 1];
#pragma unroll
    for (int i = 0; i < RV; ++i) {
        const int j = i * T + tid;
        if (j < nv) {
            ldv<V>(xr + j * V, r + i * V);
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) r[i * V + k] = -INFINITY;
        }
    }
    if constexpr (BULK) __syncthreads();             // the mbarriers' init, before any wait

    // The chunk's max: registers, then shared memory (as it lands, or as it is staged in).
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < RV * V; ++k) m = fmaxf(m, r[k]);     // padding is -inf
    if constexpr (BULK) {
        if (ns > 0) {
            const int q = ns / 4;
            const float4* s4 = reinterpret_cast<const float4*>(sx);
#pragma unroll 1
            for (int p = 0; p < CPIECES; ++p) {
                const int u0 = (int)((long long)q * p / CPIECES), u1 = (int)((long long)q * (p + 1) / CPIECES);
                bulk_wait(&bar[p]);
                for (int u = u0 + tid; u < u1; u += T) {
                    const float4 t = s4[u];
                    m = fmaxf(m, fmaxf(fmaxf(t.x, t.y), fmaxf(t.z, t.w)));
                }
            }
        }
    } else {
        for (int base = RV * T + tid; base < nv; base += U * T) {
            float v[U * V];
#pragma unroll
            for (int i = 0; i < U; ++i) {
                const int j = base + i * T;
                if (j < nv) ldv<V>(xr + j * V, v + i * V);
            }
#pragma unroll
            for (int i = 0; i < U; ++i) {
                const int j = base + i * T;
                if (j < nv) {
                    stv<V>(sx + (j * V - RF), v + i * V);
#pragma unroll
                    for (int k = 0; k < V; ++k) m = fmaxf(m, v[i * V + k]);
                }
            }
        }
    }
    m = block_all<true, CNWARPS>(m, sh);

    // exp(x - chunk max) in place (registers, then shared memory); R * V partial sums per thread
    // for the shared part, then a tree, plus the register part's sum.
    float rs = 0.0f;
#pragma unroll
    for (int k = 0; k < RV * V; ++k) {
        r[k] = expf(r[k] - m);                       // padding: expf(-inf) = 0
        rs += r[k];
    }
    float acc[R * V];
#pragma unroll
    for (int k = 0; k < R * V; ++k) acc[k] = 0.0f;
    for (int base = RV * T + tid; base < nv; base += R * T) {
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const int j = base + i * T;
            if (j < nv) {
                float v[V];
                ldv<V, false>(sx + (j * V - RF), v);
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    v[k] = expf(v[k] - m);
                    acc[i * V + k] += v[k];
                }
                stv<V>(sx + (j * V - RF), v);
            }
        }
    }
    const float s = block_all<false, CNWARPS>(tree_sum<R * V>(acc) + rs, sh);

    float2 row;                                      // the row's (max, sum)
    if constexpr (CLUSTER_XCHG != 0) {
        // Row state: every CTA's partial into slot `rank` of every CTA (st.async), merged by every
        // warp from its own CTA's slots once they have all landed (see xchg_send).
        cluster_wait_aligned();                      // every peer's mbarrier initialised
        if (tid < 32) xchg_send(xslot, &xbar, rank, cl, make_float2(m, s));
        xchg_wait(&xbar);                            // all CL partials landed here, visible
        row = xchg_row_total(xslot, cl);
        cluster_arrive_relaxed();                    // my mbarrier completed; waited on before exit
    } else {
        // Row state: warp 0 merges the CL partials (lane q holds rank q's; the butterfly gives every
        // lane, and every CTA, the same bits).
        if (tid == 0) part = make_float2(m, s);
        cluster.sync();                              // all parts written, all CTAs running
        if (tid < 32) {
            const float2 q = tid < cl ? *cluster.map_shared_rank(&part, tid) : make_float2(-INFINITY, 0.0f);
            float rm = q.x, rsum = q.y;
            warp_merge(rm, rsum);
            if (tid == 0) total = make_float2(rm, rsum);
        }
        __syncthreads();
        cluster.barrier_arrive();                    // DSMEM reads done; waited on before exit
        row = total;
    }

    // y = exp(x - chunk max) * exp(chunk max - row max) / row sum (m is finite when nv > 0).
    const float scale = expf(m - row.x) / row.y;
#pragma unroll
    for (int i = 0; i < RV; ++i) {
        const int j = i * T + tid;
        if (j < nv) {
#pragma unroll
            for (int k = 0; k < V; ++k) r[i * V + k] *= scale;
            stv<V>(yr + j * V, r + i * V);
        }
    }
#pragma unroll 4
    for (int j = RV * T + tid; j < nv; j += T) {
        float v[V];
        ldv<V, false>(sx + (j * V - RF), v);
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] *= scale;
        stv<V>(yr + j * V, v);
    }
    if constexpr (CLUSTER_XCHG != 0)
        cluster_wait_aligned();                      // every CTA's mbarrier completed: no st.async
                                                     // of the cluster is still in flight
    else
        cluster.barrier_wait();                      // no CTA exits while its part may be read
}

// ---- dispatch ----------------------------------------------------------------------------
static int vector_width(const void* a, const void* b, int cols, int widest) {
    for (int v = widest; v > 1; v >>= 1)
        if (cols % v == 0 && (uintptr_t)a % (4u * v) == 0 && (uintptr_t)b % (4u * v) == 0) return v;
    return 1;
}

static int sm_count() {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 132;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) return 132;
    return sms;
}

// Cluster regime: launches it and returns true, or returns false (nothing launched, no error
// left pending) when it does not apply: no cluster size 2..16 whose chunk fits CLUSTER_REG floats
// a thread plus CLUSTER_SMEM_KB, or the device cannot run such a cluster.
template <int V>
static bool run_cluster(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if constexpr (CLUSTER_SMEM_KB == 0) {
        return false;
    } else {
        constexpr int kSmemMax = CLUSTER_SMEM_KB * 1024;
        constexpr long long kRegFloats = (long long)CLUSTER_REG * CLUSTER_THREADS;
        int idx = 0, cl = 2;
        long long chunk = 0, smem = 0;
        for (; idx < 4; ++idx, cl <<= 1) {
            chunk = ((long long)cols + cl - 1) / cl;
            chunk = (chunk + 3) / 4 * 4;
            smem = chunk > kRegFloats ? (chunk - kRegFloats) * (long long)sizeof(float) : 0;
            if (smem <= kSmemMax) break;
        }
        if (idx == 4) return false;

        auto kernel = softmax_cluster<V>;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = (unsigned)cl;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cudaLaunchConfig_t config = {};
        config.blockDim = dim3(CLUSTER_THREADS, 1, 1);
        config.stream = stream;
        config.attrs = attr;
        config.numAttrs = 1;

        // Kernel attributes and "can a cluster of cl CTAs of kSmemMax bytes run" depend on the
        // device only: set and asked once per device (per V), never per input.
        static int state_dev = -1;
        static signed char usable[4];                // per cluster size: -1 unknown, 0 no, 1 yes
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess) { (void)cudaGetLastError(); return false; }
        if (dev != state_dev) {
            state_dev = dev;
            const bool ok =
                cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemMax) == cudaSuccess;
            const bool nonportable =             // cluster size 16
                ok && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
            for (int i = 0; i < 4; ++i) usable[i] = (ok && (i < 3 || nonportable)) ? -1 : 0;
            (void)cudaGetLastError();
        }
        if (usable[idx] < 0) {
            int clusters = 0;
            config.gridDim = dim3((unsigned)cl, 1, 1);
            config.dynamicSmemBytes = kSmemMax;
            usable[idx] =
                cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess && clusters > 0;
            (void)cudaGetLastError();
        }
        if (!usable[idx]) return false;

        config.gridDim = dim3((unsigned)(rows * cl), 1, 1);
        config.dynamicSmemBytes = (size_t)smem;
        if (cudaLaunchKernelEx(&config, kernel, x, y, cols, (int)chunk) != cudaSuccess) {
            (void)cudaGetLastError();                // nothing ran: the caller falls back
            return false;
        }
        return true;
    }
}

template <int V>
static void run_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (cols <= THREADS * ITEMS) {
        softmax_cached<V><<<(unsigned)rows, THREADS, 0, stream>>>(x, y, cols);
        return;
    }
    const bool few_rows = rows < 2 * sm_count();
    if (few_rows && run_cluster<V>(x, y, rows, cols, stream)) return;
    long long splits = ((long long)cols + SPLIT_COLS - 1) / SPLIT_COLS;
    const long long cap = PART_CAP / rows;                   // rows < 2 * SMs here: cap >= 1
    if (!few_rows || cap < 2 || splits < 2) {
        softmax_looped<V><<<(unsigned)rows, THREADS, 0, stream>>>(x, y, cols);
        return;
    }
    if (splits > cap) splits = cap;
    if (splits > 65535) splits = 65535;
    long long chunk = ((long long)cols + splits - 1) / splits;
    chunk = (chunk + 3) / 4 * 4;                              // keeps every chunk start aligned
    splits = ((long long)cols + chunk - 1) / chunk;           // every chunk non-empty
    const dim3 grid((unsigned)rows, (unsigned)splits);
    softmax_split_stats<V><<<grid, THREADS, 0, stream>>>(x, cols, chunk);
    softmax_split_write<V><<<grid, THREADS, 0, stream>>>(x, y, cols, chunk);
}

extern "C" int launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    if (cols <= 32 * WARP_ITEMS) {
        constexpr int WV = WARP_ITEMS < VEC ? WARP_ITEMS : VEC;
        const int v = vector_width(x, y, cols, WV);
        const unsigned blocks = (unsigned)(((long long)rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
        if (WV >= 4 && v == 4)
            softmax_warp<(WV >= 4 ? 4 : 1)><<<blocks, WARPS_PER_BLOCK * 32, 0, stream>>>(x, y, rows, cols);
        else if (WV >= 2 && v == 2)
            softmax_warp<(WV >= 2 ? 2 : 1)><<<blocks, WARPS_PER_BLOCK * 32, 0, stream>>>(x, y, rows, cols);
        else
            softmax_warp<1><<<blocks, WARPS_PER_BLOCK * 32, 0, stream>>>(x, y, rows, cols);
    } else {
        const int v = vector_width(x, y, cols, VEC);
        if (VEC >= 4 && v == 4) run_rows<(VEC >= 4 ? 4 : 1)>(x, y, rows, cols, stream);
        else if (VEC >= 2 && v == 2) run_rows<(VEC >= 2 ? 2 : 1)>(x, y, rows, cols, stream);
        else run_rows<1>(x, y, rows, cols, stream);
    }
    return (int)cudaGetLastError();
}
