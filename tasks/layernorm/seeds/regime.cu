// layernorm family with regime dispatch by row length:
//  - short rows (cols <= 32 * WARP_ITEMS): one warp per row, the row cached in registers, exact
//    two-pass statistics (mean, then the mean of (x - mean)^2) with warp shuffles;
//  - medium rows (cols <= THREADS * ITEMS): one block per row, cached, two-pass block reductions;
//  - long rows, few of them (rows < 2 * SMs), CLUSTER_SMEM_KB > 0: one thread-block cluster of CL
//    CTAs per row (sm_90), CL the smallest of 2, 4, 8, 16 whose chunk (cols / CL rounded up to 4
//    floats) fits in CLUSTER_REG floats a thread of registers plus CLUSTER_SMEM_KB of shared
//    memory. Each CTA reads its chunk from global memory exactly once: the first
//    CLUSTER_REG * CLUSTER_THREADS floats into registers (coalesced, all in flight at once), the
//    rest into shared memory, either by bulk copies (CLUSTER_TMA 1 and float4 alignment: thread 0
//    issues CPIECES cp.async.bulk copies, one mbarrier each, so the whole chunk is in flight with
//    no staging registers and the sum starts on the first piece while the others land) or by
//    loads staged through registers (16 floats a thread in flight). The CTA then takes its
//    chunk's exact two-pass (count, mean, M2) over registers and shared memory; the CL states
//    are merged with Chan's formula through DSMEM (warp 0, lane q reads rank q's state, one
//    butterfly: the same inputs in the same order, so the same bits, in every CTA), and each CTA
//    writes y for its chunk from registers and shared memory: one read of x, one write of y,
//    one launch. Why: the split regime below reads x twice and 64 MB of rows (256 x 65536) do
//    not stay in L2 between its two kernels. The cluster regime runs in waves when the rows do
//    not fit the GPU's shared memory (256 x 256 KB = 64 MB > 132 x 227 KB), so small chunks (many
//    CTAs a SM, at different phases: one loads while another writes) keep the DRAM busy through
//    the waves and make the tail short; CLUSTER_REG moves part of every chunk into the register
//    file (256 KB a SM, otherwise idle here) so that more of the rows are resident at once (fewer
//    waves). Without a cluster that fits (a row too long for 16 chunks, a device that cannot
//    run the cluster), the regimes below;
//  - the same, persistent (CLUSTER_PERSIST 1, with CLUSTER_TMA 1 and float4 alignment only):
//    as many clusters as the device holds at once (cudaOccupancyMaxActiveClusters, asked once
//    per device and plan), at most one per CLUSTER_PERSIST_ROWS rows, each looping over rows
//    cid, cid + nclusters, ... Every CTA owns two chunk buffers (CLUSTER_SMEM_KB is the CTA's
//    total: two buffers of CLUSTER_SMEM_KB / 2, so CL is the smallest cluster whose chunk, less
//    its register part, fits half of it) and, before the statistics, merge and write of row k
//    from buffer k & 1, thread 0 issues the bulk copies of the cluster's next row into the other
//    buffer: the next row's bytes are in flight through this row's cluster barrier, merge and
//    write, and there are no waves (no CTA launches, no tail of a last partial wave). The register
//    part (CLUSTER_REG) is loaded at the top of each row, not ahead. Falls back to the cluster
//    regime above when two buffers fit no cluster of 2..16 (long_rows at CLUSTER_SMEM_KB 16) or
//    the device cannot run it. Why (the hypothesis it tested; measured slower, below): at the defaults the
//    cluster regime runs long_rows at 0.0686 ms on an H100, ~67% of a device copy of the same
//    bytes (~0.046 ms), though it moves one read and one write: 256 clusters of 8 CTAs (2048
//    CTAs, ~6 a SM, ~2.6 waves), each strictly serial (load, wait, statistics, cluster barrier,
//    merge, write), so the DRAM may idle while CTAs sit in their barrier, merge and write phases
//    and at the wave boundaries. Measured (seventeenth session, one H100, one evaluate.py
//    process, long_rows): the one-shot cluster regime 0.0691 ms (2.38x torch); persistent at 64 KB
//    0.0815 (2.02x), at 64 KB with 512 threads 0.0863, at 32 KB (clusters of 16) 0.0822, at 128 KB
//    with 1024 threads 0.1338. Fewer resident chunks (two buffers a CTA halve them) cost more than
//    the overlap bought, so the default stays CLUSTER_PERSIST 0; the path stays in the search;
//  - both cluster regimes, CLUSTER_XCHG 1: the CL states are exchanged without release/acquire
//    cluster barriers. Each CTA has CL receive slots and an exchange mbarrier in its own shared
//    memory; lanes q < CL of warp 0 write the CTA's (count, mean, M2) into slot `rank` of CTA q
//    with st.async (completing 16 bytes on CTA q's mbarrier), and each CTA waits on its own
//    mbarrier and merges slots 0..CL-1 exactly as the DSMEM merge does (every warp on its own:
//    no __syncthreads, no DSMEM reads). Only relaxed cluster barriers remain (no memory fences):
//    one after the mbarrier init, waited on before the first st.async, and one before exit.
//    Why: Nsight Compute on an H100 (long_rows, CLUSTER_XCHG 0) showed the cluster kernel at
//    ~1750 GB/s of ~2900, with membar stalls (6.8 warps per issue) from the release arrives and
//    barrier stalls from waiting twice for the slowest CTA of the cluster; not measured yet;
//  - long rows otherwise: each thread folds batches of ITEMS elements (batch mean and M2 by two
//    passes over registers) into a running (count, mean, M2) with Chan's parallel update; states
//    merge across warps and blocks the same way. With enough rows, one block per row (statistics
//    pass, then the write pass); with few rows, the row is split across CTAs (about SPLIT_COLS
//    columns each): kernel 1 writes one (count, mean, M2) partial per chunk, kernel 2 merges the
//    row's partials and writes its chunk.
// Never E[x^2] - mean^2: rows with a mean far above their spread stay accurate.
// Vector loads (up to VEC floats) only when x, y, gamma and beta are aligned and cols is a
// multiple of the width; otherwise scalar.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#define WARP_ITEMS 32       // knob: 1 2 4 8 16 32
#define WARPS_PER_BLOCK 2   // knob: 2 4 8
#define THREADS 256         // knob: 128 256 512 1024
#define ITEMS 16            // knob: 4 8 16 32
#define SPLIT_COLS 16384    // knob: 2048 4096 8192 16384
#define VEC 4               // knob: 1 2 4
#define CLUSTER_SMEM_KB 32  // knob: 0 16 32 64 128
#define CLUSTER_THREADS 256 // knob: 128 256 512 1024
#define CLUSTER_REG 0       // knob: 0 8 16 32
#define CLUSTER_TMA 1       // knob: 0 1
#define CLUSTER_PERSIST 0   // knob: 0 1
#define CLUSTER_XCHG 1      // knob: 0 1
#define CACHED_FULL 1       // knob: 0 1
// Defaults: the cluster regime at 32 KB a CTA, 256 threads, TMA loads: long_rows (256 x 65536) on
// an H100 went from 0.0836 ms (the split regime, 1.97x torch) to 0.0694 ms (2.37x) in one process
// (sixteenth session); 16 KB read 0.0707-0.0772, 64 KB with CLUSTER_REG 16 0.0705, and 32 KB with
// register-staged loads (CLUSTER_TMA 0) 0.0980.
// CLUSTER_SMEM_KB: shared memory a CTA of the cluster regime may cache (0: regime off);
// CLUSTER_THREADS: that kernel's block size; CLUSTER_REG: floats of its chunk each thread holds
// in registers; CLUSTER_TMA: bulk copies (1) or register-staged loads (0) into shared memory;
// CLUSTER_PERSIST: 1 runs the cluster regime persistent and double-buffered where it can (bulk
// copies, float4 rows; CLUSTER_SMEM_KB then holds both buffers), 0 one cluster per row;
// CLUSTER_XCHG: 1 exchanges the cluster regimes' per-CTA states by st.async into every CTA's own
// shared memory (an mbarrier a CTA, relaxed cluster barriers only), 0 by DSMEM reads between
// release/acquire cluster barriers (cluster.sync). 1 is the default: on an H100 (evaluate.py,
// --trials 20) long_rows 2.66x torch against 2.37x (tasks/README.md, eighteenth session).
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
static_assert(CLUSTER_REG * CLUSTER_THREADS <= 16384, "knob constraint: CLUSTER_REG * CLUSTER_THREADS <= 16384");
static_assert(CLUSTER_SMEM_KB >= 0 && CLUSTER_SMEM_KB <= 224,
              "CLUSTER_SMEM_KB in 0..224 (sm_90: 227 KB per block, static shared memory included)");
static_assert(CLUSTER_THREADS % 32 == 0 && CLUSTER_THREADS >= 64 && CLUSTER_THREADS <= 1024,
              "CLUSTER_THREADS: a warp multiple in 64..1024");
static_assert(CLUSTER_REG % 4 == 0 && CLUSTER_REG >= 0, "CLUSTER_REG: a multiple of 4 (whole float4s)");
static_assert(CLUSTER_TMA == 0 || CLUSTER_TMA == 1, "CLUSTER_TMA: 0 or 1");
static_assert(CLUSTER_PERSIST == 0 || CLUSTER_PERSIST == 1, "CLUSTER_PERSIST: 0 or 1");
static_assert(CLUSTER_XCHG == 0 || CLUSTER_XCHG == 1, "CLUSTER_XCHG: 0 or 1");
static_assert(CACHED_FULL == 0 || CACHED_FULL == 1, "CACHED_FULL: 0 or 1");
// CACHED_FULL (the cached block-per-row regime, medium rows such as square_4096): 1 caps the
// kernel's registers for 2048 threads a SM (32 a thread at 256, no spill: 8 rows in flight a SM
// instead of 7 at 36 registers). Why: in one process at 8 calls a timing (twenty-eighth session,
// H200) square_4096 moved 134 MB in 36.2 us (3.7 TB/s) where relu's streaming kernel moved 537 MB
// at 4.2 TB/s. The default since the thirty-sixth session: on an H200 (probe_inproc.py, 60
// trials) square_4096 read 1.572x torch alone and 1.443x at 8 calls a timing, against 1.523x and
// 1.426x at 0. Measured slower in the same session and removed (tasks/README.md): one Chan merge
// a row instead of two block sums (1.399x at 8 a timing), and persistent CTAs loading the next
// row ahead (1.300x: two rows of registers leave 4 CTAs a SM, fewer rows in flight).
#if CACHED_FULL
#define CACHED_BOUNDS __launch_bounds__(THREADS, 2048 / THREADS)
#else
#define CACHED_BOUNDS __launch_bounds__(THREADS)   // not (THREADS, 1): ptxas then takes 48, not 36
#endif

#define NWARPS (THREADS / 32)
#define CNWARPS (CLUSTER_THREADS / 32)
#define CPIECES 4           // bulk copies (one mbarrier each) per chunk in the cluster regime
// CLUSTER_PERSIST 1: at most one cluster per this many rows, so that each cluster pipelines
// several rows (its first row's load is the only one not overlapped with other work) and so that
// the task's validation shapes (33 rows of 1000 columns: 9 clusters, 33 % 9 = 6) run the loop,
// both buffers, both mbarrier parities and a ragged last round. long_rows (256 rows) is capped by
// the device instead (estimated ~50 clusters on an H100, not queried yet).
#define CLUSTER_PERSIST_ROWS 4
// Cluster kernel's minimum CTAs a SM (its register cap): about 40 registers of work plus the
// CLUSTER_REG cached floats a thread, at most what CLUSTER_SMEM_KB (plus 1 KB reserved a CTA)
// and 2048 threads a SM allow: small chunks run many CTAs a SM, not 3 for lack of registers.
#define CMINB_REG (65536 / (CLUSTER_THREADS * (CLUSTER_REG + 40)))
#define CMINB_SMEM (228 / (CLUSTER_SMEM_KB + 1))
#define CMINB_THR (2048 / CLUSTER_THREADS)
#define CMINB_2 (CMINB_REG < CMINB_SMEM ? CMINB_REG : CMINB_SMEM)
#define CMINB_3 (CMINB_2 < CMINB_THR ? CMINB_2 : CMINB_THR)
#define CLUSTER_MIN_BLOCKS (CMINB_3 > 1 ? CMINB_3 : 1)
#define PART_CAP 65536      // (count, mean, M2) partials of the split regime

__device__ float4 g_part[PART_CAP];

template <int V>
__device__ __forceinline__ void ldv(const float* __restrict__ p, float* v) {
    if constexpr (V == 4) {
        const float4 t = __ldg(reinterpret_cast<const float4*>(p));
        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
    } else if constexpr (V == 2) {
        const float2 t = __ldg(reinterpret_cast<const float2*>(p));
        v[0] = t.x; v[1] = t.y;
    } else {
        v[0] = __ldg(p);
    }
}

// V floats of shared memory at p into v.
template <int V>
__device__ __forceinline__ void ldv_shared(const float* p, float* v) {
    if constexpr (V == 4) {
        const float4 t = *reinterpret_cast<const float4*>(p);
        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
    } else if constexpr (V == 2) {
        const float2 t = *reinterpret_cast<const float2*>(p);
        v[0] = t.x; v[1] = t.y;
    } else {
        v[0] = *p;
    }
}

// STREAM: st.global.cs (evict first) for y. Used by the cluster regime's writes only (long_rows):
// on an H200 (2026-12-01, scripts/probe_inproc.py, 40 trials) long_rows went from 53.4 to 45.6 us at
// 8 calls a timing (2.80x -> 3.28x torch) and 51.2 -> 42.9 us alone, while the same stores slowed
// square_4096 and rows_16k_d1024 by ~1 % (1.443x -> 1.432x / 1.431x), so the other regimes keep
// plain stores. Global memory only (never a shared-memory pointer).
template <int V, bool STREAM = false>
__device__ __forceinline__ void stv(float* __restrict__ p, const float* v) {
    if constexpr (V == 4 && STREAM) {
        __stcs(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
    } else if constexpr (V == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else if constexpr (V == 2) {
        *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
    } else {
        p[0] = v[0];
    }
}

// y[c..c+V) = (x - mean) * rstd * gamma + beta for one vector (v holds x).
template <int V, bool STREAM = false>
__device__ __forceinline__ void normalize_store(float* __restrict__ yp, const float* __restrict__ gamma,
                                                const float* __restrict__ beta, long long c, float* v,
                                                float mean, float rstd) {
    float g[V], b[V];
    ldv<V>(gamma + c, g);
    ldv<V>(beta + c, b);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = (v[k] - mean) * rstd * g[k] + b[k];
    stv<V, STREAM>(yp + c, v);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Block-wide sum over NW warps, the result in every thread; sh holds NW + 1 floats.
template <int NW = NWARPS>
__device__ __forceinline__ float block_sum(float v, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < NW ? sh[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) sh[NW] = t;
    }
    __syncthreads();
    const float r = sh[NW];
    __syncthreads();   // sh may be reused
    return r;
}

// Chan et al.: (n, mean, m2) <- merge with (n2, mean2, m22); an empty state has n = 0.
__device__ __forceinline__ void chan(float& n, float& mean, float& m2, float n2, float mean2, float m22) {
    const float nt = n + n2;
    if (nt == 0.0f) return;
    const float d = mean2 - mean;
    const float w = n2 / nt;
    mean += d * w;
    m2 += m22 + d * d * n * w;
    n = nt;
}

__device__ __forceinline__ void warp_chan(float& n, float& mean, float& m2) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float n2 = __shfl_xor_sync(0xffffffffu, n, off);
        const float a2 = __shfl_xor_sync(0xffffffffu, mean, off);
        const float q2 = __shfl_xor_sync(0xffffffffu, m2, off);
        chan(n, mean, m2, n2, a2, q2);
    }
}

// Block-wide Chan merge, the result in every thread; sh holds 3 * (NWARPS + 1) floats.
__device__ __forceinline__ void block_chan(float& n, float& mean, float& m2, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* shn = sh;
    float* sha = sh + (NWARPS + 1);
    float* shq = sh + 2 * (NWARPS + 1);
    warp_chan(n, mean, m2);
    if (lane == 0) { shn[warp] = n; sha[warp] = mean; shq[warp] = m2; }
    __syncthreads();
    if (warp == 0) {
        n = lane < NWARPS ? shn[lane] : 0.0f;
        mean = lane < NWARPS ? sha[lane] : 0.0f;
        m2 = lane < NWARPS ? shq[lane] : 0.0f;
        warp_chan(n, mean, m2);
        if (lane == 0) { shn[NWARPS] = n; sha[NWARPS] = mean; shq[NWARPS] = m2; }
    }
    __syncthreads();
    n = shn[NWARPS];
    mean = sha[NWARPS];
    m2 = shq[NWARPS];
    __syncthreads();
}

// ---- short rows: one warp per row --------------------------------------------------------
template <int V>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
layernorm_warp(const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ beta,
               float* __restrict__ y, int rows, int cols, float eps) {
    constexpr int NV = WARP_ITEMS / V;
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= rows) return;                       // uniform per warp: shuffles stay full-warp
    const float* xr = x + row * cols;
    float v[WARP_ITEMS];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int c = (i * 32 + lane) * V;         // cols % V == 0: a vector is all in or all out
        if (c < cols) {
            ldv<V>(xr + c, v + i * V);
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) v[i * V + k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < V; ++k) s += v[i * V + k];
    }
    const float mean = warp_sum(s) / (float)cols;
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        if ((i * 32 + lane) * V < cols) {
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const float d = v[i * V + k] - mean;
                q += d * d;
            }
        }
    }
    const float rstd = 1.0f / sqrtf(warp_sum(q) / (float)cols + eps);
    float* yr = y + row * cols;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int c = (i * 32 + lane) * V;
        if (c < cols) normalize_store<V>(yr, gamma, beta, c, v + i * V, mean, rstd);
    }
}

// ---- medium rows: one block per row, cached ----------------------------------------------
template <int V>
__global__ void CACHED_BOUNDS
layernorm_cached(const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ beta,
                 float* __restrict__ y, int cols, float eps) {
    constexpr int NV = ITEMS / V;
    __shared__ float sh[NWARPS + 1];
    const long long row = blockIdx.x;
    const float* xr = x + row * cols;
    const int tid = threadIdx.x;
    float v[ITEMS];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int c = (i * THREADS + tid) * V;
        if (c < cols) {
            ldv<V>(xr + c, v + i * V);
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) v[i * V + k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < V; ++k) s += v[i * V + k];
    }
    const float mean = block_sum(s, sh) / (float)cols;
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        if ((i * THREADS + tid) * V < cols) {
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const float d = v[i * V + k] - mean;
                q += d * d;
            }
        }
    }
    const float rstd = 1.0f / sqrtf(block_sum(q, sh) / (float)cols + eps);
    float* yr = y + row * cols;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int c = (i * THREADS + tid) * V;
        if (c < cols) normalize_store<V>(yr, gamma, beta, c, v + i * V, mean, rstd);
    }
}

// ---- long rows ---------------------------------------------------------------------------
// This thread's (count, mean, M2) over columns [c0, c1) of a row (c0, c1 multiples of V).
template <int V>
__device__ __forceinline__ void stats_range(const float* __restrict__ xr, long long c0, long long c1,
                                            float& n, float& mean, float& m2) {
    constexpr int NV = ITEMS / V;
    const long long end = c1 / V;
    for (long long base = c0 / V + threadIdx.x; base < end; base += (long long)NV * THREADS) {
        float v[ITEMS];
        float s = 0.0f;
        int cnt = 0;
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            const long long j = base + (long long)i * THREADS;
            if (j < end) {
                ldv<V>(xr + j * V, v + i * V);
                cnt += V;
            } else {
#pragma unroll
                for (int k = 0; k < V; ++k) v[i * V + k] = 0.0f;
            }
#pragma unroll
            for (int k = 0; k < V; ++k) s += v[i * V + k];
        }
        const float bn = (float)cnt;                // >= V: element `base` is real
        const float bm = s / bn;
        float bq = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            if (base + (long long)i * THREADS < end) {
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    const float d = v[i * V + k] - bm;
                    bq += d * d;
                }
            }
        }
        chan(n, mean, m2, bn, bm, bq);
    }
}

template <int V>
__device__ __forceinline__ void write_range(const float* __restrict__ xr, const float* __restrict__ gamma,
                                            const float* __restrict__ beta, float* __restrict__ yr,
                                            long long c0, long long c1, float mean, float rstd) {
    const long long end = c1 / V;
#pragma unroll 4
    for (long long j = c0 / V + threadIdx.x; j < end; j += THREADS) {
        float v[V];
        ldv<V>(xr + j * V, v);
        normalize_store<V>(yr, gamma, beta, j * V, v, mean, rstd);
    }
}

// One block per row, any length: statistics pass, then the write pass.
template <int V>
__global__ void __launch_bounds__(THREADS)
layernorm_looped(const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ beta,
                 float* __restrict__ y, int cols, float eps) {
    __shared__ float sh[3 * (NWARPS + 1)];
    const long long row = blockIdx.x;
    const float* xr = x + row * cols;
    float n = 0.0f, mean = 0.0f, m2 = 0.0f;
    stats_range<V>(xr, 0, cols, n, mean, m2);
    block_chan(n, mean, m2, sh);
    const float rstd = 1.0f / sqrtf(m2 / (float)cols + eps);
    write_range<V>(xr, gamma, beta, y + row * cols, 0, cols, mean, rstd);
}

// Split regime, kernel 1: grid (rows, splits); one (count, mean, M2) partial per chunk.
template <int V>
__global__ void __launch_bounds__(THREADS)
layernorm_split_stats(const float* __restrict__ x, int cols, long long chunk) {
    __shared__ float sh[3 * (NWARPS + 1)];
    const long long row = blockIdx.x;
    const long long c0 = (long long)blockIdx.y * chunk;
    const long long c1 = c0 + chunk < cols ? c0 + chunk : cols;
    float n = 0.0f, mean = 0.0f, m2 = 0.0f;
    stats_range<V>(x + row * cols, c0, c1, n, mean, m2);
    block_chan(n, mean, m2, sh);
    if (threadIdx.x == 0) g_part[row * gridDim.y + blockIdx.y] = make_float4(n, mean, m2, 0.0f);
}

// Split regime, kernel 2: merge the row's partials (warp 0), then write this chunk.
template <int V>
__global__ void __launch_bounds__(THREADS)
layernorm_split_write(const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ beta,
                      float* __restrict__ y, int cols, long long chunk, float eps) {
    __shared__ float row_mean, row_rstd;
    const long long row = blockIdx.x;
    const int splits = (int)gridDim.y;
    if (threadIdx.x < 32) {
        float n = 0.0f, mean = 0.0f, m2 = 0.0f;
        for (int p = threadIdx.x; p < splits; p += 32) {
            const float4 q = g_part[row * splits + p];
            chan(n, mean, m2, q.x, q.y, q.z);
        }
        warp_chan(n, mean, m2);
        if (threadIdx.x == 0) {
            row_mean = mean;
            row_rstd = 1.0f / sqrtf(m2 / (float)cols + eps);
        }
    }
    __syncthreads();
    const long long c0 = (long long)blockIdx.y * chunk;
    const long long c1 = c0 + chunk < cols ? c0 + chunk : cols;
    write_range<V>(x + row * cols, gamma, beta, y + row * cols, c0, c1, row_mean, row_rstd);
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

// Until the phase of parity `parity` of the mbarrier at bar has completed (reused mbarriers: the
// j-th copy into a buffer completes its phase j, waited on with parity j & 1).
__device__ __forceinline__ void bulk_wait_parity(unsigned long long* bar, unsigned parity) {
    asm volatile("{\n\t.reg .pred done;\n"
                 "WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
                 "@!done bra WAIT_%=;\n}" ::"r"(shared_address(bar)), "r"(parity) : "memory");
}

__device__ __forceinline__ void bulk_wait(unsigned long long* bar) { bulk_wait_parity(bar, 0u); }

// ---- CLUSTER_XCHG 1: the CTAs' states exchanged by st.async, no release/acquire cluster barrier ----
// Every CTA owns receive slots (slot q: rank q's (n, mean, M2), 16 bytes) and an exchange mbarrier
// (arrival count 1) in its own shared memory. Per row:
//  1. thread 0 arms its own mbarrier: arrive + expect_tx of CL * 16 bytes (the phase then completes
//     when all CL states have landed, its own included);
//  2. lane q < CL of warp 0 writes this CTA's state into slot `rank` of CTA q (q = rank included)
//     with st.async, which completes its 16 bytes on CTA q's mbarrier;
//  3. every thread waits on its own mbarrier and its warp merges slots 0..CL-1 from its own shared
//     memory: the butterfly of cluster_row_total on the same bits in the same lanes, so the same
//     (mean, rstd) bits as CLUSTER_XCHG 0, whatever order the states landed in.
// Memory model (PTX ISA, st.async, "Conditions" for .weak): the store is a weak memory operation and
// "the complete-tx operation on the mbarrier has .release semantics at .cluster scope"; each reading
// thread observes the phase completion and then acquires at .cluster scope (xchg_wait; the scope must
// cover the writing thread in another CTA: the default .cta scope of try_wait would not), so every
// slot of that phase is visible to its plain loads afterwards: st.async "is performed in the generic
// proxy", like those loads, so no proxy fence is needed either. The arming may come before or after
// peers' bytes land: a complete-tx before the expect-tx drives tx-count negative (its valid range
// is -(2^20 - 1) .. 2^20 - 1), and the phase cannot complete while the arrival is pending.
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

// Thread 0: initialise n exchange mbarriers (arrival count 1) and publish the inits to the cluster;
// every thread then arrives on the cluster barrier (cluster_arrive_relaxed).
__device__ __forceinline__ void xchg_init(unsigned long long* bar, int n) {
    for (int i = 0; i < n; ++i)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&bar[i])) : "memory");
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
// completing 16 bytes on CTA q's `bar`.
__device__ __forceinline__ void xchg_send(float4* slots, unsigned long long* bar, int rank, int cl, float4 v) {
    const int lane = threadIdx.x & 31;
    if (lane == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     ::"r"(shared_address(bar)), "r"((unsigned)cl * 16u) : "memory");
    if (lane < cl) {
        unsigned dst, rbar;
        asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst) : "r"(shared_address(slots + rank)), "r"(lane));
        asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(shared_address(bar)), "r"(lane));
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];"
                     ::"r"(dst), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(rbar) : "memory");
    }
}

// Until the phase of parity `parity` of this CTA's exchange mbarrier has completed, then acquire at
// cluster scope for shared memory (pairs with the st.asyncs' release complete-tx). CUDA >= 12.8
// (PTX ISA 8.6): a relaxed try_wait and fence.acquire.sync_restrict::shared::cluster.cluster, the
// PTX ISA's own example ("acquire local shared memory via generic proxy"; membar/fence section):
// the acquire covers shared memory only, so no L1 invalidation (try_wait.acquire.cluster compiles
// to an extra CCTL.IVALL, which also drops the co-resident CTAs' cached gamma / beta lines). Older
// toolkits: try_wait.acquire.cluster.
__device__ __forceinline__ void xchg_wait(unsigned long long* bar, unsigned parity) {
#if __CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8)
    asm volatile("{\n\t.reg .pred done;\n"
                 "XWAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.relaxed.cluster.shared::cta.b64 done, [%0], %1;\n\t"
                 "@!done bra XWAIT_%=;\n}" ::"r"(shared_address(bar)), "r"(parity) : "memory");
    asm volatile("fence.acquire.sync_restrict::shared::cluster.cluster;" ::: "memory");
#else
    asm volatile("{\n\t.reg .pred done;\n"
                 "XWAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n\t"
                 "@!done bra XWAIT_%=;\n}" ::"r"(shared_address(bar)), "r"(parity) : "memory");
#endif
}

// Every warp, after xchg_wait: the row's (mean, rstd) from the cl received states, lane q holding
// slot q and lane 0's butterfly result broadcast; the operations of cluster_row_total on the same
// values in the same lanes, hence the same bits in every warp and every CTA. The slots are read
// through a generic pointer the compiler cannot trace to shared memory (one 16-byte load a lane a
// row): with ld.shared here, ptxas (CUDA 13.0) reloaded the global-memory descriptor in every trip
// of chunk_write's loop and spilled 48 bytes in layernorm_cluster<4> at 40 registers.
__device__ __forceinline__ float2 xchg_row_total(const float4* slots, int cl, int cols, float eps) {
    const int lane = threadIdx.x & 31;
    const float4* g;
    asm("mov.b64 %0, %1;" : "=l"(g) : "l"(slots));
    const float4 o = lane < cl ? g[lane] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float rn = o.x, rm = o.y, rq = o.z;
    warp_chan(rn, rm, rq);
    rm = __shfl_sync(0xffffffffu, rm, 0);
    rq = __shfl_sync(0xffffffffu, rq, 0);
    return make_float2(rm, 1.0f / sqrtf(rq / (float)cols + eps));
}

// ---- the cluster regimes' per-chunk steps (layernorm_cluster and layernorm_cluster_persist) ----
// A CTA's chunk: nv vectors of V floats, the first CLUSTER_REG / V of each thread in registers r
// (thread t: vectors i * CLUSTER_THREADS + t), the rest in shared memory at sx (sx[0] is float
// CLUSTER_REG * CLUSTER_THREADS of the chunk).

// The register part of the chunk at xr into r (0 past the chunk's end).
template <int V>
__device__ __forceinline__ void load_register_part(const float* __restrict__ xr, float* r, int nv) {
#pragma unroll
    for (int i = 0; i < CLUSTER_REG / V; ++i) {
        const int j = i * CLUSTER_THREADS + (int)threadIdx.x;
        if (j < nv) {
            ldv<V>(xr + j * V, r + i * V);
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) r[i * V + k] = 0.0f;
        }
    }
}

// This thread's share of the chunk's M2 about `mean` (exact two-pass): registers, then shared memory.
template <int V>
__device__ __forceinline__ float chunk_m2(const float* r, const float* sx, int nv, float mean) {
    constexpr int T = CLUSTER_THREADS, RV = CLUSTER_REG / V, RF = CLUSTER_REG * T;
    const int tid = threadIdx.x;
    float q2 = 0.0f;
#pragma unroll
    for (int i = 0; i < RV; ++i) {
        if (i * T + tid < nv) {
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const float d = r[i * V + k] - mean;
                q2 += d * d;
            }
        }
    }
#pragma unroll 4
    for (int j = RV * T + tid; j < nv; j += T) {
        float v[V];
        ldv_shared<V>(sx + (j * V - RF), v);
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const float d = v[k] - mean;
            q2 += d * d;
        }
    }
    return q2;
}

// The row's (mean, rstd) into total: warp 0 merges the cl states `part` of the cluster's CTAs
// (lane q holds rank q's, read through DSMEM, then one Chan butterfly: every CTA runs the same
// merges on the same bits, so every CTA gets the same lane-0 result). Called after the cluster
// barrier that publishes the states; total is read after a __syncthreads.
__device__ __forceinline__ void cluster_row_total(const cg::cluster_group& cluster, float4* part, int cl, int cols,
                                                  float eps, float2* total) {
    const int tid = threadIdx.x;
    if (tid < 32) {
        const float4 o = tid < cl ? *cluster.map_shared_rank(part, tid) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        float rn = o.x, rm = o.y, rq = o.z;
        warp_chan(rn, rm, rq);
        if (tid == 0) *total = make_float2(rm, 1.0f / sqrtf(rq / (float)cols + eps));
    }
}

// y for the chunk (registers, then shared memory), normalised with the row's (mean, rstd).
template <int V>
__device__ __forceinline__ void chunk_write(float* __restrict__ yr, const float* __restrict__ gr,
                                            const float* __restrict__ br, float* r, const float* sx, int nv,
                                            float rmean, float rstd) {
    constexpr int T = CLUSTER_THREADS, RV = CLUSTER_REG / V, RF = CLUSTER_REG * T;
    constexpr int WU = CLUSTER_REG >= 8 ? 2 : 4;    // write-loop unroll: fewer registers when many hold x
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < RV; ++i) {
        const int j = i * T + tid;
        if (j < nv) normalize_store<V, true>(yr, gr, br, (long long)j * V, r + i * V, rmean, rstd);
    }
#pragma unroll(WU)
    for (int j = RV * T + tid; j < nv; j += T) {
        float v[V];
        ldv_shared<V>(sx + (j * V - RF), v);
        normalize_store<V, true>(yr, gr, br, (long long)j * V, v, rmean, rstd);
    }
}

// Grid: rows * CL CTAs, clusters of CL along x. CTA rank r owns columns [r * chunk,
// min((r + 1) * chunk, cols)) of row blockIdx.x / CL (chunk % 4 == 0: every chunk start keeps the
// row's alignment); an empty chunk contributes the state (0, 0, 0). Of the chunk's n floats, the
// first RF = CLUSTER_REG * CLUSTER_THREADS live in registers (thread t holds vectors i *
// CLUSTER_THREADS + t, i < CLUSTER_REG / V) and floats [RF, n) in dynamic shared memory (sx[0]
// is float RF). CLUSTER_XCHG 1: the states go through xslot / xbar (see xchg_send) instead of part.
template <int V>
__global__ void __launch_bounds__(CLUSTER_THREADS, CLUSTER_MIN_BLOCKS)
layernorm_cluster(const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ beta,
                  float* __restrict__ y, int cols, int chunk, float eps) {
    constexpr int T = CLUSTER_THREADS;
    constexpr int RV = CLUSTER_REG / V;              // vectors a thread holds in registers
    constexpr int RF = CLUSTER_REG * T;              // floats of the chunk in registers
    constexpr int U = 16 / V;                        // vectors a thread stages in flight
    constexpr bool BULK = CLUSTER_TMA != 0 && V == 4;
    extern __shared__ float4 cluster_smem[];
    float* sx = reinterpret_cast<float*>(cluster_smem);
    __shared__ float sh[CNWARPS + 1];
    __shared__ float4 part;                          // this CTA's (n, mean, M2), read via DSMEM
    __shared__ float2 total;                         // the row's (mean, rstd)
    __shared__ unsigned long long bar[CPIECES];
    const cg::cluster_group cluster = cg::this_cluster();
    const int cl = (int)cluster.num_blocks();
    const int rank = (int)cluster.block_rank();
    const int tid = threadIdx.x;
    const int c0 = min(rank * chunk, cols);
    const int n = min(chunk, cols - c0);             // floats in this chunk (a multiple of V), >= 0
    const int nv = n / V;
    const int ns = n > RF ? n - RF : 0;              // floats in shared memory
    const long long off = (long long)(blockIdx.x / cl) * cols + c0;
    const float* xr = x + off;
    float* yr = y + off;
    const float* gr = gamma + c0;
    const float* br = beta + c0;

    // CLUSTER_XCHG 1: the exchange mbarrier, initialised and published before the loads (the
    // relaxed arrive is waited on just before the first st.async, long after every CTA got here).
    __shared__ float4 xslot[CLUSTER_XCHG ? 16 : 1];  // slot q: rank q's (n, mean, M2)
    __shared__ unsigned long long xbar;              // completes once all CL slots have landed
    if constexpr (CLUSTER_XCHG != 0) {
        if (tid == 0) xchg_init(&xbar, 1);
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
    load_register_part<V>(xr, r, nv);
    if constexpr (BULK) __syncthreads();             // the mbarriers' init, before any wait

    // Pass 1: the chunk's sum (registers, then shared memory as it lands).
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < RV * V; ++k) s += r[k];      // padding is 0
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
                    s += (t.x + t.y) + (t.z + t.w);
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
                    for (int k = 0; k < V; ++k) s += v[i * V + k];
                }
            }
        }
    }
    const float cnt = (float)n;
    const float sum = block_sum<CNWARPS>(s, sh);
    const float mean = n > 0 ? sum / cnt : 0.0f;

    // Pass 2: the chunk's M2 about its own mean (exact two-pass), registers then shared memory.
    const float m2 = block_sum<CNWARPS>(chunk_m2<V>(r, sx, nv, mean), sh);

    if constexpr (CLUSTER_XCHG != 0) {
        // Row statistics: every CTA's state into slot `rank` of every CTA (st.async), merged by
        // every warp from its own CTA's slots once they have all landed (see xchg_send).
        cluster_wait_aligned();                      // every peer's mbarrier initialised
        if (tid < 32) xchg_send(xslot, &xbar, rank, cl, make_float4(cnt, mean, m2, 0.0f));
        xchg_wait(&xbar, 0u);                        // all CL states landed here, visible (acquire)
        const float2 t = xchg_row_total(xslot, cl, cols, eps);
        cluster_arrive_relaxed();                    // my mbarrier completed; waited on before exit

        // y for the chunk: registers, then shared memory.
        chunk_write<V>(yr, gr, br, r, sx, nv, t.x, t.y);
        cluster_wait_aligned();                      // every CTA's mbarrier completed: no st.async
                                                     // of the cluster is still in flight
    } else {
        // Row statistics: the CL states merged by warp 0.
        if (tid == 0) part = make_float4(cnt, mean, m2, 0.0f);
        cluster.sync();                              // all states written, all CTAs running
        cluster_row_total(cluster, &part, cl, cols, eps, &total);
        __syncthreads();
        cluster.barrier_arrive();                    // DSMEM reads done; waited on before exit

        // y for the chunk: registers, then shared memory.
        chunk_write<V>(yr, gr, br, r, sx, nv, total.x, total.y);
        cluster.barrier_wait();                      // no CTA exits while its state may be read
    }
}

// CLUSTER_PERSIST 1: grid nclusters * CL CTAs (nclusters <= rows and <= the co-resident clusters;
// correctness does not depend on co-residency: clusters share nothing);
// cluster cid handles rows cid, cid + nclusters, ... (its k-th row: k = 0, 1, ...), every CTA of
// the cluster the same rows (the same trip count: the cluster barriers pair up). CTA rank r owns
// the same columns as in layernorm_cluster: [r * chunk, min((r + 1) * chunk, cols)), the first RF
// floats in registers (loaded at the top of each row) and the rest, ns floats, in buffer k & 1 of
// dynamic shared memory (two buffers of `stride` floats; V == 4: every offset a multiple of 16
// bytes). Buffer b has CPIECES mbarriers (bar[b * CPIECES + p]); its j-th fill (the row with k = 2j
// + b) completes their phase j.
// Synchronisation, per row k (b = k & 1):
//  1. k > 0: every thread fences (generic reads of buffer b ^ 1 in row k - 1, before the async
//     proxy's writes into it; conservative) and __syncthreads: row k - 1's reads of buffer b ^ 1
//     are over. Then thread 0 issues the copies of row k + 1 into buffer b ^ 1 (the prologue
//     issued row 0 into buffer 0). Each thread waits on buffer b's mbarriers for parity
//     (k >> 1) & 1: buffer b's previous fill (row k - 2) completed its phase (every thread waited
//     on it in row k - 2) and this fill was issued before the __syncthreads that ended row k - 1's
//     first reduction, so the phase of that parity still pending is this fill's.
//  2. the CTA's (n, mean, M2) goes to part[b]; cluster.sync (release / acquire: every state of row
//     k written, every CTA of the cluster running); warp 0 reads the CL part[b] through DSMEM.
//     part is double-buffered because one cluster barrier a row orders only rows k - 1 and k + 1:
//     a CTA that has passed row k's barrier can write its part for row k + 1 before a slower peer
//     has read its part for row k, so it writes the other slot; it can write part[b] again (row
//     k + 2) only after row k + 1's barrier, which every peer reaches after its row-k reads.
//  3. on the cluster's last row every thread arrives on the cluster barrier after the DSMEM reads,
//     and waits on it just before exiting: no CTA exits while a peer may still read its part.
// CLUSTER_XCHG 1 replaces 2 and 3 (no cluster.sync a row): the states of row k go by st.async into
// slot set b = k & 1 (xslot[b][rank] of every CTA), completing on that CTA's mbarrier xbar[b]; row k
// is xbar[b]'s (k >> 1)-th phase, waited on with parity (k >> 1) & 1 and armed (arrive + expect_tx
// of CL * 16 bytes) by thread 0 in row k itself, just before its own sends. Why two slot sets and
// two mbarriers, and why that suffices (no CTA can race two rows ahead of a peer's reads):
//  - one mbarrier for every row would be wrong: a peer that has finished row k may send row k + 1
//    while another peer's row-k bytes to me are still in flight, and bytes count alike, so row k's
//    phase could complete on row k + 1's bytes with a row-k slot not yet written;
//  - with xbar[b], a peer P writes row k + 2 (slot set b again) only after P's row k + 1 completed,
//    i.e. after my row-(k + 1) state landed in P; I send that state after the __syncthreads at the
//    top of row k + 1, which every warp of mine reaches only after reading its row-k slots and
//    after waiting on xbar[b]'s row-k phase. So P's row-(k + 2) bytes land after my last read of
//    set b for row k (the chain: my reads, __syncthreads, my st.async's release complete-tx at
//    cluster scope, P's acquire wait, P's st.async: no write-after-read race on the slots) and
//    after that phase completed (they count towards row k + 2's phase, never row k's). They may
//    land before thread 0 arms row k + 2's phase: tx-count goes negative until the arming, and the
//    phase cannot complete while its arrival is pending;
//  - the relaxed cluster barrier before the first st.async (row 0) guarantees every peer's
//    mbarriers are initialised; on the cluster's last row every thread arrives (.relaxed) once its
//    mbarrier completed and waits before exit (the same cluster.barrier_wait() as step 3), so no
//    CTA exits with an st.async of the cluster in flight (see xchg_send). One cluster barrier
//    fewer a row, no memory fences, and the merge runs in every warp (no __syncthreads, no DSMEM).
template <int V>
__global__ void __launch_bounds__(CLUSTER_THREADS, CLUSTER_MIN_BLOCKS)
layernorm_cluster_persist(const float* __restrict__ x, const float* __restrict__ gamma,
                          const float* __restrict__ beta, float* __restrict__ y, int rows, int cols, int chunk,
                          float eps) {
    static_assert(V == 4, "the persistent cluster regime moves its chunks by 16-byte bulk copies");
    constexpr int T = CLUSTER_THREADS;
    constexpr int RV = CLUSTER_REG / V;              // vectors a thread holds in registers
    constexpr int RF = CLUSTER_REG * T;              // floats of the chunk in registers
    extern __shared__ float4 cluster_smem[];
    float* const sbuf = reinterpret_cast<float*>(cluster_smem);
    __shared__ float sh[CNWARPS + 1];
    __shared__ float4 part[2];                       // this CTA's (n, mean, M2) of rows k even / odd
    __shared__ float2 total;                         // the row's (mean, rstd)
    __shared__ unsigned long long bar[2 * CPIECES];
    const cg::cluster_group cluster = cg::this_cluster();
    const int cl = (int)cluster.num_blocks();
    const int rank = (int)cluster.block_rank();
    const int nclusters = (int)(gridDim.x / (unsigned)cl);
    const int cid = (int)(blockIdx.x / (unsigned)cl);
    if (cid >= rows) return;                         // never (the host launches <= rows clusters);
                                                     // whole clusters, before any DSMEM access
    const int tid = threadIdx.x;
    const int c0 = min(rank * chunk, cols);
    const int n = min(chunk, cols - c0);             // floats in this chunk (a multiple of 4), >= 0
    const int nv = n / V;
    const int ns = n > RF ? n - RF : 0;              // floats in shared memory, a multiple of 4
    const int q = ns / 4;                            // their float4s
    const int stride = chunk > RF ? chunk - RF : 0;  // floats a buffer (ns <= stride)
    const float* gr = gamma + c0;
    const float* br = beta + c0;

    // CLUSTER_XCHG 1: slot set b and its mbarrier xbar[b] for the rows k with k & 1 == b.
    __shared__ float4 xslot[CLUSTER_XCHG ? 2 : 1][CLUSTER_XCHG ? 16 : 1];
    __shared__ unsigned long long xbar[2];
    if constexpr (CLUSTER_XCHG != 0) {
        if (tid == 0) xchg_init(xbar, 2);
        cluster_arrive_relaxed();                    // waited on before row 0's st.async
    }

    // Thread 0: the copies of row `row`'s shared part into buffer b, CPIECES pieces.
    auto issue = [&](int row, int b) {
        const float* src = x + (long long)row * cols + c0 + RF;
        float* dst = sbuf + b * stride;
#pragma unroll
        for (int p = 0; p < CPIECES; ++p) {
            const int u0 = (int)((long long)q * p / CPIECES), u1 = (int)((long long)q * (p + 1) / CPIECES);
            bulk_load(dst + 4 * u0, src + 4 * u0, (unsigned)(u1 - u0) * 16u, &bar[b * CPIECES + p]);
        }
    };
    if (ns > 0 && tid == 0) {
#pragma unroll
        for (int p = 0; p < 2 * CPIECES; ++p)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&bar[p])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");   // the inits, seen by the copies
        issue(cid, 0);
    }
    __syncthreads();                                 // the mbarriers' init, before any wait

    int k = 0;
#pragma unroll 1
    for (int row = cid; row < rows; row += nclusters, ++k) {
        const int b = k & 1;
        const bool last = row >= rows - nclusters;   // the cluster's last row (uniform in the cluster)
        if (k > 0) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            __syncthreads();                         // row k - 1 is done with buffer b ^ 1
        }
        if (ns > 0 && tid == 0 && !last) issue(row + nclusters, b ^ 1);
        const long long off = (long long)row * cols + c0;
        const float* xr = x + off;
        float* yr = y + off;
        const float* sx = sbuf + b * stride;

        float r[CLUSTER_REG > 0 ? CLUSTER_REG : 1];
        load_register_part<V>(xr, r, nv);

        // Pass 1: the chunk's sum (registers, then buffer b as its pieces land).
        float s = 0.0f;
#pragma unroll
        for (int kk = 0; kk < RV * V; ++kk) s += r[kk];   // padding is 0
        if (ns > 0) {
            const unsigned parity = (unsigned)(k >> 1) & 1u;
            const float4* s4 = reinterpret_cast<const float4*>(sx);
#pragma unroll 1
            for (int p = 0; p < CPIECES; ++p) {
                const int u0 = (int)((long long)q * p / CPIECES), u1 = (int)((long long)q * (p + 1) / CPIECES);
                bulk_wait_parity(&bar[b * CPIECES + p], parity);
                for (int u = u0 + tid; u < u1; u += T) {
                    const float4 t = s4[u];
                    s += (t.x + t.y) + (t.z + t.w);
                }
            }
        }
        const float cnt = (float)n;
        const float sum = block_sum<CNWARPS>(s, sh);
        const float mean = n > 0 ? sum / cnt : 0.0f;

        // Pass 2: the chunk's M2 about its own mean (exact two-pass).
        const float m2 = block_sum<CNWARPS>(chunk_m2<V>(r, sx, nv, mean), sh);

        if constexpr (CLUSTER_XCHG != 0) {
            // Row statistics: the CL states of row k through slot set b (see above).
            if (k == 0) cluster_wait_aligned();      // every peer's mbarriers initialised
            if (tid < 32) xchg_send(xslot[b], &xbar[b], rank, cl, make_float4(cnt, mean, m2, 0.0f));
            xchg_wait(&xbar[b], (unsigned)(k >> 1) & 1u);
            const float2 t = xchg_row_total(xslot[b], cl, cols, eps);
            if (last) cluster_arrive_relaxed();      // my mbarriers' last phase completed

            // y for the chunk: registers, then buffer b.
            chunk_write<V>(yr, gr, br, r, sx, nv, t.x, t.y);
        } else {
            // Row statistics: the CL states of part[b], merged by warp 0 as in layernorm_cluster.
            if (tid == 0) part[b] = make_float4(cnt, mean, m2, 0.0f);
            cluster.sync();                          // row k's states written, all CTAs running
            cluster_row_total(cluster, &part[b], cl, cols, eps, &total);
            __syncthreads();
            if (last) cluster.barrier_arrive();      // DSMEM reads done; waited on before exit

            // y for the chunk: registers, then buffer b.
            chunk_write<V>(yr, gr, br, r, sx, nv, total.x, total.y);
        }
    }
    cluster.barrier_wait();                          // no CTA exits while its part may be read (or,
                                                     // CLUSTER_XCHG 1, while an st.async is in flight)
}

// ---- dispatch ----------------------------------------------------------------------------
static bool aligned(const void* p, int bytes) { return (uintptr_t)p % (uintptr_t)bytes == 0; }

static int vector_width(const float* x, const float* g, const float* b, const float* y, int cols, int widest) {
    for (int v = widest; v > 1; v >>= 1)
        if (cols % v == 0 && aligned(x, 4 * v) && aligned(g, 4 * v) && aligned(b, 4 * v) && aligned(y, 4 * v))
            return v;
    return 1;
}

static int sm_count() {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 132;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) return 132;
    return sms;
}

// The cluster regimes' size: the smallest cluster of 2, 4, 8 or 16 CTAs (idx 0..3) whose chunk
// (cols / cl rounded up to 4 floats), less its CLUSTER_REG floats a thread in registers, fits
// `budget` bytes of shared memory (bytes: what it takes). False when no size does.
static bool cluster_plan(int cols, long long budget, int& idx, int& cl, long long& chunk, long long& bytes) {
    constexpr long long kRegFloats = (long long)CLUSTER_REG * CLUSTER_THREADS;
    for (idx = 0, cl = 2; idx < 4; ++idx, cl <<= 1) {
        chunk = ((long long)cols + cl - 1) / cl;
        chunk = (chunk + 3) / 4 * 4;
        bytes = chunk > kRegFloats ? (chunk - kRegFloats) * (long long)sizeof(float) : 0;
        if (bytes <= budget) return true;
    }
    return false;
}

// A launch of clusters of cl CTAs of CLUSTER_THREADS threads on `stream` (grid and shared memory
// still to set; attr: the caller's storage for the cluster-dimension attribute).
static cudaLaunchConfig_t cluster_launch(int cl, cudaStream_t stream, cudaLaunchAttribute* attr) {
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = (unsigned)cl;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.blockDim = dim3(CLUSTER_THREADS, 1, 1);
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
    return config;
}

// Cluster regime: launches it and returns true, or returns false (nothing launched, no error
// left pending) when it does not apply: no cluster size 2..16 whose chunk fits CLUSTER_REG floats
// a thread plus CLUSTER_SMEM_KB, or the device cannot run such a cluster.
template <int V>
static bool run_cluster(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols,
                        float eps, cudaStream_t stream) {
    if constexpr (CLUSTER_SMEM_KB == 0) {
        return false;
    } else {
        constexpr int kSmemMax = CLUSTER_SMEM_KB * 1024;
        int idx = 0, cl = 2;
        long long chunk = 0, smem = 0;
        if (!cluster_plan(cols, kSmemMax, idx, cl, chunk, smem)) return false;

        auto kernel = layernorm_cluster<V>;
        cudaLaunchAttribute attr;
        cudaLaunchConfig_t config = cluster_launch(cl, stream, &attr);

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
        if (cudaLaunchKernelEx(&config, kernel, x, gamma, beta, y, cols, (int)chunk, eps) != cudaSuccess) {
            (void)cudaGetLastError();                // nothing ran: the caller falls back
            return false;
        }
        return true;
    }
}

// Persistent cluster regime (CLUSTER_PERSIST 1): launches it and returns true, or returns false
// (nothing launched, no error left pending) when it does not apply: not built (CLUSTER_PERSIST 0,
// CLUSTER_TMA 0, CLUSTER_SMEM_KB 0), not float4 rows (V < 4), no cluster size 2..16 whose chunk,
// less its register part, fits one buffer of CLUSTER_SMEM_KB / 2, or the device cannot run it.
// The caller then tries the one-cluster-a-row regime.
template <int V>
static bool run_cluster_persist(const float* x, const float* gamma, const float* beta, float* y, int rows,
                                int cols, float eps, cudaStream_t stream) {
    if constexpr (CLUSTER_PERSIST == 0 || CLUSTER_TMA == 0 || CLUSTER_SMEM_KB == 0 || V != 4) {
        return false;
    } else {
        constexpr int kSmemMax = CLUSTER_SMEM_KB * 1024;
        int idx = 0, cl = 2;
        long long chunk = 0, buf = 0;
        if (!cluster_plan(cols, kSmemMax / 2, idx, cl, chunk, buf)) return false;   // a buffer: half
        const int smem = (int)(2 * buf);             // two buffers, 16-byte multiples

        auto kernel = layernorm_cluster_persist<V>;
        cudaLaunchAttribute attr;
        cudaLaunchConfig_t config = cluster_launch(cl, stream, &attr);
        config.dynamicSmemBytes = (size_t)smem;

        // Kernel attributes: set once per device. Co-resident clusters: asked once per device and
        // plan (cluster size, shared memory), remembered in a small table, never per call.
        static int attr_dev = -1;
        static bool attr_ok = false, attr_np = false;
        struct Fit { int dev, cl, smem, clusters; };
        static Fit fits[8];
        static int nfits = 0, next_fit = 0;
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess) { (void)cudaGetLastError(); return false; }
        if (dev != attr_dev) {
            attr_dev = dev;
            attr_ok =
                cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemMax) == cudaSuccess;
            attr_np =                                // cluster size 16
                attr_ok && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
            (void)cudaGetLastError();
        }
        if (!attr_ok || (cl == 16 && !attr_np)) return false;
        int clusters = -1;
        for (int i = 0; i < nfits; ++i)
            if (fits[i].dev == dev && fits[i].cl == cl && fits[i].smem == smem) clusters = fits[i].clusters;
        if (clusters < 0) {
            config.gridDim = dim3((unsigned)cl, 1, 1);
            if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) clusters = 0;
            (void)cudaGetLastError();
            fits[next_fit] = Fit{dev, cl, smem, clusters};
            next_fit = (next_fit + 1) % 8;
            if (nfits < 8) ++nfits;
        }
        if (clusters <= 0) return false;
        const int wanted = (int)(((long long)rows + CLUSTER_PERSIST_ROWS - 1) / CLUSTER_PERSIST_ROWS);
        const int nclusters = clusters < wanted ? clusters : wanted;   // >= 1, <= rows

        config.gridDim = dim3((unsigned)(nclusters * cl), 1, 1);
        if (cudaLaunchKernelEx(&config, kernel, x, gamma, beta, y, rows, cols, (int)chunk, eps) != cudaSuccess) {
            (void)cudaGetLastError();                // nothing ran: the caller falls back
            return false;
        }
        return true;
    }
}

template <int V>
static void run_rows(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols,
                     float eps, cudaStream_t stream) {
    if (cols <= THREADS * ITEMS) {
        layernorm_cached<V><<<(unsigned)rows, THREADS, 0, stream>>>(x, gamma, beta, y, cols, eps);
        return;
    }
    const bool few_rows = rows < 2 * sm_count();
    if (few_rows && run_cluster_persist<V>(x, gamma, beta, y, rows, cols, eps, stream)) return;
    if (few_rows && run_cluster<V>(x, gamma, beta, y, rows, cols, eps, stream)) return;
    long long splits = ((long long)cols + SPLIT_COLS - 1) / SPLIT_COLS;
    const long long cap = PART_CAP / rows;
    if (!few_rows || cap < 2 || splits < 2) {
        layernorm_looped<V><<<(unsigned)rows, THREADS, 0, stream>>>(x, gamma, beta, y, cols, eps);
        return;
    }
    if (splits > cap) splits = cap;
    if (splits > 65535) splits = 65535;
    long long chunk = ((long long)cols + splits - 1) / splits;
    chunk = (chunk + 3) / 4 * 4;                              // keeps every chunk start aligned
    splits = ((long long)cols + chunk - 1) / chunk;           // every chunk non-empty
    const dim3 grid((unsigned)rows, (unsigned)splits);
    layernorm_split_stats<V><<<grid, THREADS, 0, stream>>>(x, cols, chunk);
    layernorm_split_write<V><<<grid, THREADS, 0, stream>>>(x, gamma, beta, y, cols, chunk, eps);
}

extern "C" int launch(const float* x, const float* gamma, const float* beta, float* y, int rows,
                      int cols, float eps, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    if (cols <= 32 * WARP_ITEMS) {
        constexpr int WV = WARP_ITEMS < VEC ? WARP_ITEMS : VEC;
        const int v = vector_width(x, gamma, beta, y, cols, WV);
        const unsigned blocks = (unsigned)(((long long)rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
        if (WV >= 4 && v == 4)
            layernorm_warp<(WV >= 4 ? 4 : 1)><<<blocks, WARPS_PER_BLOCK * 32, 0, stream>>>(
                x, gamma, beta, y, rows, cols, eps);
        else if (WV >= 2 && v == 2)
            layernorm_warp<(WV >= 2 ? 2 : 1)><<<blocks, WARPS_PER_BLOCK * 32, 0, stream>>>(
                x, gamma, beta, y, rows, cols, eps);
        else
            layernorm_warp<1><<<blocks, WARPS_PER_BLOCK * 32, 0, stream>>>(x, gamma, beta, y, rows, cols, eps);
    } else {
        const int v = vector_width(x, gamma, beta, y, cols, VEC);
        if (VEC >= 4 && v == 4) run_rows<(VEC >= 4 ? 4 : 1)>(x, gamma, beta, y, rows, cols, eps, stream);
        else if (VEC >= 2 && v == 2) run_rows<(VEC >= 2 ? 2 : 1)>(x, gamma, beta, y, rows, cols, eps, stream);
        else run_rows<1>(x, gamma, beta, y, rows, cols, eps, stream);
    }
    return (int)cudaGetLastError();
}
