// layernorm family with regime dispatch by row length:
//  - short rows (cols <= 32 * WARP_ITEMS): one warp per row, the row cached in registers, exact
//    two-pass statistics (mean, then the mean of (x - mean)^2) with warp shuffles;
//  - medium rows (cols <= THREADS * ITEMS): one block per row, cached, two-pass block reductions;
//  - long rows: each thread folds batches of ITEMS elements (batch mean and M2 by two passes over
//    registers) into a running (count, mean, M2) with Chan's parallel update; states merge across
//    warps and blocks the same way. With enough rows, one block per row (statistics pass, then the
//    write pass); with few rows, the row is split across CTAs (about SPLIT_COLS columns each):
//    kernel 1 writes one (count, mean, M2) partial per chunk, kernel 2 merges the row's partials
//    and writes its chunk.
// Never E[x^2] - mean^2: rows with a mean far above their spread stay accurate.
// Vector loads (up to VEC floats) only when x, y, gamma and beta are aligned and cols is a
// multiple of the width; otherwise scalar.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define WARP_ITEMS 32       // knob: 1 2 4 8 16 32
#define WARPS_PER_BLOCK 2   // knob: 2 4 8
#define THREADS 256         // knob: 128 256 512 1024
#define ITEMS 16            // knob: 4 8 16 32
#define SPLIT_COLS 16384    // knob: 2048 4096 8192 16384
#define VEC 4               // knob: 1 2 4
// Knob constraints (evo_fsr/knobs.py): a row cached in registers must fit (64 registers per
// thread at 1024 threads).
// constraint: THREADS * ITEMS <= 16384

static_assert(THREADS * ITEMS <= 16384, "knob constraint: THREADS * ITEMS <= 16384");
static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS: a warp multiple <= 1024");
static_assert(WARPS_PER_BLOCK >= 1 && WARPS_PER_BLOCK * 32 <= 1024, "WARPS_PER_BLOCK out of range");
static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC must be 1, 2 or 4");
static_assert(ITEMS % VEC == 0 && ITEMS >= VEC, "ITEMS must be a multiple of VEC");
static_assert(WARP_ITEMS >= 1 && (WARP_ITEMS & (WARP_ITEMS - 1)) == 0, "WARP_ITEMS: a power of two");
static_assert(SPLIT_COLS % 4 == 0, "SPLIT_COLS must keep float4 alignment");

#define NWARPS (THREADS / 32)
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

// y[c..c+V) = (x - mean) * rstd * gamma + beta for one vector (v holds x).
template <int V>
__device__ __forceinline__ void normalize_store(float* __restrict__ yp, const float* __restrict__ gamma,
                                                const float* __restrict__ beta, long long c, float* v,
                                                float mean, float rstd) {
    float g[V], b[V];
    ldv<V>(gamma + c, g);
    ldv<V>(beta + c, b);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = (v[k] - mean) * rstd * g[k] + b[k];
    stv<V>(yp + c, v);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Block-wide sum, the result in every thread; sh holds NWARPS + 1 floats.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < NWARPS ? sh[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) sh[NWARPS] = t;
    }
    __syncthreads();
    const float r = sh[NWARPS];
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
__global__ void __launch_bounds__(THREADS)
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

template <int V>
static void run_rows(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols,
                     float eps, cudaStream_t stream) {
    if (cols <= THREADS * ITEMS) {
        layernorm_cached<V><<<(unsigned)rows, THREADS, 0, stream>>>(x, gamma, beta, y, cols, eps);
        return;
    }
    long long splits = ((long long)cols + SPLIT_COLS - 1) / SPLIT_COLS;
    const long long cap = PART_CAP / rows;
    if (rows >= 2 * sm_count() || cap < 2 || splits < 2) {
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
