// softmax family with regime dispatch by row length (complements block_online.cu):
//  - short rows (cols <= 32 * WARP_ITEMS): one warp per row, the row cached in registers,
//    exact max then sum of exp with warp shuffles; WARPS_PER_BLOCK rows per block;
//  - medium rows (cols <= THREADS * ITEMS): one block per row, the row cached in registers,
//    block-wide max then sum (two reductions, one read of x, one write of y);
//  - long rows: an online (max, sum of exp) over chunks of ITEMS elements per thread. With
//    enough rows to fill the GPU, one block per row (read, re-read, write). With few rows, the row
//    is split across CTAs (chunk of about SPLIT_COLS columns each): kernel 1 writes one (max, sum)
//    partial per chunk into a __device__ buffer, kernel 2 merges the row's partials and writes
//    its chunk (the re-read of x mostly hits L2).
// Vector loads (float2/float4, up to VEC) only when x and y are aligned and cols is a multiple of
// the width; otherwise scalar. exp is always taken of x - (row max): large |x| cannot overflow.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define WARP_ITEMS 8        // knob: 1 2 4 8 16 32
#define WARPS_PER_BLOCK 4   // knob: 2 4 8
#define THREADS 512         // knob: 128 256 512 1024
#define ITEMS 8             // knob: 4 8 16 32
#define SPLIT_COLS 8192     // knob: 2048 4096 8192 16384
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
#define PART_CAP 65536      // (max, sum) partials of the split regime

__device__ float2 g_part[PART_CAP];

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

// Block-wide max or sum, the result in every thread; sh holds NWARPS + 1 floats.
template <bool IS_MAX>
__device__ __forceinline__ float block_all(float v, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = IS_MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < NWARPS ? sh[lane] : (IS_MAX ? -INFINITY : 0.0f);
        t = IS_MAX ? warp_max(t) : warp_sum(t);
        if (lane == 0) sh[NWARPS] = t;
    }
    __syncthreads();
    const float r = sh[NWARPS];
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

template <int V>
static void run_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (cols <= THREADS * ITEMS) {
        softmax_cached<V><<<(unsigned)rows, THREADS, 0, stream>>>(x, y, cols);
        return;
    }
    long long splits = ((long long)cols + SPLIT_COLS - 1) / SPLIT_COLS;
    const long long cap = PART_CAP / rows;                   // rows < 2 * SMs here: cap >= 1
    if (rows >= 2 * sm_count() || cap < 2 || splits < 2) {
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
