"""Legitimate kernels, suite v4: honest, correct kernels written the way an LLM or a GPU engineer
typically writes them, in styles the earlier suites (cases_v2_legit.py, cases_v3.legit_cases) do
not cover.  Every case must be rated OK: a rejection is a false positive of the verdict.

Each source is a complete file (no seed wrapped): the styles are in the host code as much as in
the kernels (device queries every call, lazily allocated static scratch, stream-ordered
allocation, memsets of a static counter, a last-block-finishes reduction, cub block primitives,
thrust with its own temporary storage, cooperative-groups tiles, synchronisation at the end of
``launch``, the legacy default stream, opt-in dynamic shared memory, template dispatch, boilerplate
includes).  The note of each case says what it exercises and what the verdict's code makes of it.
"""
from __future__ import annotations

from .cases_v2_blocks import OK
from .cases_v3 import CaseV3

# -- 1. relu: grid-stride float4 with a scalar head and tail; device properties every call ------------------
RELU_FLOAT4 = r'''
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>

// x and y have the same address modulo 16 (checked on the host): peel a head of at most three
// elements to the 16-byte boundary, stream the body as float4, finish with a scalar tail.
__global__ void __launch_bounds__(256) relu_vec4(const float* __restrict__ x, float* __restrict__ y, long long n) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long head = (long long)(((16u - ((uintptr_t)x & 15u)) & 15u) / 4u);
    if (head > n) head = n;
    if (tid < head) y[tid] = fmaxf(__ldg(x + tid), 0.0f);
    const long long body = (n - head) / 4;
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x + head);
    float4* __restrict__ y4 = reinterpret_cast<float4*>(y + head);
    for (long long i = tid; i < body; i += stride) {
        float4 v = __ldg(x4 + i);
        v.x = fmaxf(v.x, 0.0f);
        v.y = fmaxf(v.y, 0.0f);
        v.z = fmaxf(v.z, 0.0f);
        v.w = fmaxf(v.w, 0.0f);
        y4[i] = v;
    }
    for (long long i = head + body * 4 + tid; i < n; i += stride) y[i] = fmaxf(__ldg(x + i), 0.0f);
}

// different phases modulo 16: four scalar elements per thread per step, unrolled
__global__ void __launch_bounds__(256) relu_scalar(const float* __restrict__ x, float* __restrict__ y, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long base = (long long)blockIdx.x * blockDim.x + threadIdx.x; base < n; base += 4 * stride) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            long long i = base + k * stride;
            if (i < n) y[i] = fmaxf(__ldg(x + i), 0.0f);
        }
    }
}

extern "C" int launch(const float* x, float* y, int n, cudaStream_t stream) {
    if (n <= 0) return 0;
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return (int)err;
    cudaDeviceProp prop;
    err = cudaGetDeviceProperties(&prop, dev);           // every call, as LLM code often does
    if (err != cudaSuccess) return (int)err;
    const int threads = 256;
    const bool same_phase = ((((uintptr_t)x) ^ ((uintptr_t)y)) & 15u) == 0;
    const long long work = same_phase ? ((long long)n + 3) / 4 : (long long)n;
    const long long want = (work + threads - 1) / threads;
    const int blocks = (int)std::max<long long>(1, std::min<long long>(want, (long long)prop.multiProcessorCount * 8));
    if (same_phase) relu_vec4<<<blocks, threads, 0, stream>>>(x, y, (long long)n);
    else relu_scalar<<<blocks, threads, 0, stream>>>(x, y, (long long)n);
    return (int)cudaGetLastError();
}
'''

# -- 2. sigmoid on the legacy default stream ---------------------------------------------------------------
SIGMOID_DEFAULT_STREAM = r'''
#include <cuda_runtime.h>
#include <math.h>

__global__ void sigmoid_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float v = x[i];
        float r;
        if (v >= 0.0f) {
            r = 1.0f / (1.0f + expf(-v));
        } else {
            const float e = expf(v);                      // no overflow for very negative v
            r = e / (1.0f + e);
        }
        y[i] = r;
    }
}

extern "C" int launch(const float* x, float* y, int n, cudaStream_t stream) {
    (void)stream;                                         // launched on the default stream instead
    const int threads = 256;
    long long want = ((long long)n + threads - 1) / threads;
    int blocks = (int)(want < 4096 ? (want < 1 ? 1 : want) : 4096);
    sigmoid_kernel<<<blocks, threads>>>(x, y, (long long)n);
    return (int)cudaGetLastError();
}
'''

# -- 3. sum_reduction: single pass, the last block to finish sums the partials ------------------------------
SUM_LAST_BLOCK = r'''
#include <cuda_runtime.h>
#include <cub/cub.cuh>

#define SUM_THREADS 256
#define SUM_WARPS (SUM_THREADS / 32)

__device__ unsigned int g_blocks_done = 0;               // reset by the last block of every call

__device__ __forceinline__ float block_sum(float v, float* warp_sums) {
    typedef cub::WarpReduce<float> WarpReduce;
    __shared__ typename WarpReduce::TempStorage temp[SUM_WARPS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    v = WarpReduce(temp[warp]).Sum(v);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    float r = 0.0f;
    if (warp == 0) {
        r = lane < SUM_WARPS ? warp_sums[lane] : 0.0f;
        r = WarpReduce(temp[0]).Sum(r);
    }
    __syncthreads();
    return r;                                              // valid in thread 0
}

__global__ void __launch_bounds__(SUM_THREADS) sum_single_pass(const float* __restrict__ x, float* __restrict__ partial,
                                                               float* __restrict__ out, long long n) {
    __shared__ float warp_sums[SUM_WARPS];
    __shared__ bool am_last;
    const long long stride = (long long)gridDim.x * SUM_THREADS;
    long long i = (long long)blockIdx.x * SUM_THREADS + threadIdx.x;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (; i + 3 * stride < n; i += 4 * stride) {
        a0 += __ldg(x + i);
        a1 += __ldg(x + i + stride);
        a2 += __ldg(x + i + 2 * stride);
        a3 += __ldg(x + i + 3 * stride);
    }
    for (; i < n; i += stride) a0 += __ldg(x + i);
    float total = block_sum((a0 + a1) + (a2 + a3), warp_sums);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = total;
        __threadfence();                                   // the partial is visible before the ticket
        const unsigned int ticket = atomicAdd(&g_blocks_done, 1u);
        am_last = (ticket == gridDim.x - 1);
    }
    __syncthreads();
    if (!am_last) return;
    __threadfence();
    float s = 0.0f;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += SUM_THREADS) s += __ldcg(partial + b);
    s = block_sum(s, warp_sums);
    if (threadIdx.x == 0) {
        out[0] = s;
        g_blocks_done = 0u;                                // ready for the next call
    }
}

extern "C" int launch(const float* x, float* out, float* workspace, int N, cudaStream_t stream) {
    int dev = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&dev);
    cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return (int)err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sum_single_pass, SUM_THREADS, 0);
    if (err != cudaSuccess) return (int)err;
    long long want = ((long long)N + SUM_THREADS - 1) / SUM_THREADS;
    long long cap = (long long)sms * (per_sm > 0 ? per_sm : 1);
    if (cap > 65536) cap = 65536;                          // one partial per block in the workspace
    int blocks = (int)(want < cap ? want : cap);
    if (blocks < 1) blocks = 1;
    sum_single_pass<<<blocks, SUM_THREADS, 0, stream>>>(x, workspace, out, (long long)N);
    return (int)cudaGetLastError();
}
'''

# -- 4. dot_product: lazily allocated static scratch (ignores the workspace), two kernels, stream sync -----
DOT_STATIC_SCRATCH = r'''
#include <cuda_runtime.h>
#include <cstdint>

#define DOT_THREADS 256
#define DOT_MAX_BLOCKS 2048

static float* d_partials = nullptr;                       // allocated on the first call, kept

template <bool VEC>
__global__ void __launch_bounds__(DOT_THREADS) dot_partial(const float* __restrict__ x, const float* __restrict__ y,
                                                           float* __restrict__ partials, long long n) {
    __shared__ float sh[DOT_THREADS];
    const long long tid = (long long)blockIdx.x * DOT_THREADS + threadIdx.x;
    const long long stride = (long long)gridDim.x * DOT_THREADS;
    float acc = 0.0f;
    long long done = 0;
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const float4* y4 = reinterpret_cast<const float4*>(y);
        const long long n4 = n / 4;
        for (long long i = tid; i < n4; i += stride) {
            const float4 a = __ldg(x4 + i), b = __ldg(y4 + i);
            acc = fmaf(a.x, b.x, acc);
            acc = fmaf(a.y, b.y, acc);
            acc = fmaf(a.z, b.z, acc);
            acc = fmaf(a.w, b.w, acc);
        }
        done = n4 * 4;
    }
    for (long long i = done + tid; i < n; i += stride) acc = fmaf(__ldg(x + i), __ldg(y + i), acc);
    sh[threadIdx.x] = acc;
    __syncthreads();
#pragma unroll
    for (int off = DOT_THREADS / 2; off > 0; off >>= 1) {
        if (threadIdx.x < off) sh[threadIdx.x] += sh[threadIdx.x + off];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

__global__ void dot_final(const float* __restrict__ partials, int count, float* __restrict__ out) {
    __shared__ float sh[1024];
    float s = 0.0f;
    for (int i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int off = blockDim.x / 2; off > 0; off >>= 1) {
        if (threadIdx.x < off) sh[threadIdx.x] += sh[threadIdx.x + off];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = sh[0];
}

extern "C" int launch(const float* x, const float* y, float* out, float* workspace, int N, cudaStream_t stream) {
    (void)workspace;
    if (d_partials == nullptr) {
        cudaError_t err = cudaMalloc((void**)&d_partials, DOT_MAX_BLOCKS * sizeof(float));
        if (err != cudaSuccess) { d_partials = nullptr; return (int)err; }
    }
    const long long n = N;
    long long want = (n + DOT_THREADS * 4 - 1) / (DOT_THREADS * 4);
    int blocks = (int)(want < DOT_MAX_BLOCKS ? (want < 1 ? 1 : want) : DOT_MAX_BLOCKS);
    const bool vec = ((((uintptr_t)x) | ((uintptr_t)y)) & 15u) == 0;
    if (vec) dot_partial<true><<<blocks, DOT_THREADS, 0, stream>>>(x, y, d_partials, n);
    else dot_partial<false><<<blocks, DOT_THREADS, 0, stream>>>(x, y, d_partials, n);
    dot_final<<<1, 1024, 0, stream>>>(d_partials, blocks, out);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;
    return (int)cudaStreamSynchronize(stream);             // "make sure it is done" before returning
}
'''

# -- 5. mse_loss: stream-ordered scratch (cudaMallocAsync / cudaFreeAsync), cooperative-groups reduce ------
MSE_MALLOC_ASYNC = r'''
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

#define MSE_THREADS 256

__device__ float cg_block_sum(float v, cg::thread_block& block, float* warp_sums) {
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    v = cg::reduce(warp, v, cg::plus<float>());
    if (warp.thread_rank() == 0) warp_sums[warp.meta_group_rank()] = v;
    block.sync();
    float r = 0.0f;
    if (warp.meta_group_rank() == 0) {
        r = warp.thread_rank() < warp.meta_group_size() ? warp_sums[warp.thread_rank()] : 0.0f;
        r = cg::reduce(warp, r, cg::plus<float>());
    }
    return r;                                              // valid in thread 0
}

__global__ void __launch_bounds__(MSE_THREADS) mse_partial(const float* __restrict__ a, const float* __restrict__ b,
                                                           float* __restrict__ partial, long long n) {
    cg::thread_block block = cg::this_thread_block();
    __shared__ float warp_sums[32];
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * MSE_THREADS + threadIdx.x; i < n; i += (long long)gridDim.x * MSE_THREADS) {
        const float d = a[i] - b[i];                       // the difference first, in float32
        acc = fmaf(d, d, acc);
    }
    const float s = cg_block_sum(acc, block, warp_sums);
    if (block.thread_rank() == 0) partial[blockIdx.x] = s;
}

__global__ void __launch_bounds__(1024) mse_final(const float* __restrict__ partial, int count, float* __restrict__ out,
                                                  double inv_n) {
    cg::thread_block block = cg::this_thread_block();
    __shared__ float warp_sums[32];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
    const float s = cg_block_sum(acc, block, warp_sums);
    if (block.thread_rank() == 0) out[0] = (float)((double)s * inv_n);
}

extern "C" int launch(const float* a, const float* b, float* out, float* workspace, int n, cudaStream_t stream) {
    (void)workspace;
    long long want = ((long long)n + MSE_THREADS * 8 - 1) / (MSE_THREADS * 8);
    int blocks = (int)(want < 4096 ? (want < 1 ? 1 : want) : 4096);
    float* partial = nullptr;
    cudaError_t err = cudaMallocAsync((void**)&partial, (size_t)blocks * sizeof(float), stream);
    if (err != cudaSuccess) return (int)err;
    mse_partial<<<blocks, MSE_THREADS, 0, stream>>>(a, b, partial, (long long)n);
    mse_final<<<1, 1024, 0, stream>>>(partial, blocks, out, 1.0 / (double)n);
    err = cudaFreeAsync(partial, stream);
    if (err != cudaSuccess) return (int)err;
    return (int)cudaGetLastError();
}
'''

# -- 6. cross_entropy: a static work-queue counter and the output zeroed with cudaMemsetAsync, atomics ------
CE_WORK_QUEUE = r'''
#include <cuda_runtime.h>
#include <math.h>

#define CE_THREADS 256
#define CE_ROWS_PER_CHUNK CE_THREADS

__device__ unsigned int g_next_chunk;                     // zeroed on the stream before every launch

__global__ void __launch_bounds__(CE_THREADS) ce_queue(const float* __restrict__ logits, const int* __restrict__ labels,
                                                       float* __restrict__ out, int N, int C, float inv_n) {
    __shared__ unsigned int chunk;
    __shared__ float warp_sums[CE_THREADS / 32];
    float acc = 0.0f;
    for (;;) {
        if (threadIdx.x == 0) chunk = atomicAdd(&g_next_chunk, 1u);
        __syncthreads();
        const long long row0 = (long long)chunk * CE_ROWS_PER_CHUNK;
        __syncthreads();                                   // everyone has read chunk before it changes
        if (row0 >= N) break;
        const long long r = row0 + threadIdx.x;
        if (r < N) {
            const float* row = logits + r * C;
            float m = -INFINITY, s = 0.0f;                 // online log-sum-exp
            for (int j = 0; j < C; ++j) {
                const float v = row[j];
                if (v > m) { s = s * expf(m - v) + 1.0f; m = v; }
                else s += expf(v - m);
            }
            acc += (m - row[labels[r]]) + logf(s);
        }
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < CE_THREADS / 32 ? warp_sums[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) atomicAdd(out, v * inv_n);
    }
}

extern "C" int launch(const float* logits, const int* labels, float* out, float* workspace, int N, int C,
                      cudaStream_t stream) {
    (void)workspace;
    void* counter = nullptr;
    cudaError_t err = cudaGetSymbolAddress(&counter, g_next_chunk);
    if (err != cudaSuccess) return (int)err;
    cudaMemsetAsync(counter, 0, sizeof(unsigned int), stream);
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const long long chunks = ((long long)N + CE_ROWS_PER_CHUNK - 1) / CE_ROWS_PER_CHUNK;
    long long cap = (long long)(sms > 0 ? sms : 1) * 8;
    int blocks = (int)(chunks < cap ? chunks : cap);
    if (blocks < 1) blocks = 1;
    ce_queue<<<blocks, CE_THREADS, 0, stream>>>(logits, labels, out, N, C, 1.0f / (float)N);
    return (int)cudaGetLastError();
}
'''

# -- 7. histogram: per-warp shared sub-histograms, int4 loads, a device printf that never fires ------------
HIST_PRINTF = r'''
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>

#define BINS 256
#define HIST_THREADS 256
#define HIST_WARPS (HIST_THREADS / 32)

__device__ __forceinline__ void count_value(unsigned int* h, int v) {
    if ((unsigned int)v >= BINS) {                        // cannot happen for valid inputs
        printf("histogram: value %d out of range [0, %d)\n", v, BINS);
        return;
    }
    atomicAdd(&h[v], 1u);
}

__global__ void __launch_bounds__(HIST_THREADS) hist_kernel(const int* __restrict__ x, int* __restrict__ hist,
                                                            long long n, int vec_ok) {
    __shared__ unsigned int sub[HIST_WARPS][BINS];          // one sub-histogram per warp: less contention
    for (int i = threadIdx.x; i < HIST_WARPS * BINS; i += HIST_THREADS) (&sub[0][0])[i] = 0u;
    __syncthreads();
    unsigned int* mine = sub[threadIdx.x / 32];
    const long long tid = (long long)blockIdx.x * HIST_THREADS + threadIdx.x;
    const long long stride = (long long)gridDim.x * HIST_THREADS;
    long long done = 0;
    if (vec_ok) {
        const int4* x4 = reinterpret_cast<const int4*>(x);
        const long long n4 = n / 4;
        for (long long i = tid; i < n4; i += stride) {
            const int4 v = __ldg(x4 + i);
            count_value(mine, v.x);
            count_value(mine, v.y);
            count_value(mine, v.z);
            count_value(mine, v.w);
        }
        done = n4 * 4;
    }
    for (long long i = done + tid; i < n; i += stride) count_value(mine, __ldg(x + i));
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += HIST_THREADS) {
        unsigned int s = 0;
#pragma unroll
        for (int w = 0; w < HIST_WARPS; ++w) s += sub[w][b];
        if (s) atomicAdd(&hist[b], (int)s);
    }
}

extern "C" int launch(const int* x, int* hist, int N, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(hist, 0, BINS * sizeof(int), stream);
    if (err != cudaSuccess) return (int)err;
    const long long n = N;
    long long want = (n + HIST_THREADS * 16 - 1) / (HIST_THREADS * 16);
    int blocks = (int)(want < 1024 ? (want < 1 ? 1 : want) : 1024);
    const int vec_ok = (((uintptr_t)x) & 15u) == 0;
    hist_kernel<<<blocks, HIST_THREADS, 0, stream>>>(x, hist, n, vec_ok);
    return (int)cudaGetLastError();
}
'''

# -- 8. prefix_sum: cub BlockLoad / BlockScan / BlockStore, block totals in the workspace, three kernels ---
SCAN_CUB_BLOCKSCAN = r'''
#include <cuda_runtime.h>
#include <cub/cub.cuh>

#define SCAN_THREADS 256
#define SCAN_ITEMS 8
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)

// pass 1: each tile scanned on its own, its total kept in the workspace
template <int BT, int IPT>
__global__ void __launch_bounds__(BT) tile_scan(const float* __restrict__ x, float* __restrict__ y,
                                                float* __restrict__ totals, long long n) {
    typedef cub::BlockLoad<float, BT, IPT, cub::BLOCK_LOAD_WARP_TRANSPOSE> Load;
    typedef cub::BlockStore<float, BT, IPT, cub::BLOCK_STORE_WARP_TRANSPOSE> Store;
    typedef cub::BlockScan<float, BT> Scan;
    __shared__ union {
        typename Load::TempStorage load;
        typename Store::TempStorage store;
        typename Scan::TempStorage scan;
    } temp;
    const long long base = (long long)blockIdx.x * (BT * IPT);
    const long long left = n - base;
    const int valid = left < (long long)(BT * IPT) ? (int)left : BT * IPT;
    float items[IPT];
    Load(temp.load).Load(x + base, items, valid, 0.0f);
    __syncthreads();
    float aggregate;
    Scan(temp.scan).InclusiveSum(items, items, aggregate);
    __syncthreads();
    Store(temp.store).Store(y + base, items, valid);
    if (threadIdx.x == 0) totals[blockIdx.x] = aggregate;
}

// pass 2: one block turns the tile totals into exclusive offsets, chunk by chunk with a carry
template <int BT>
__global__ void __launch_bounds__(BT) totals_scan(float* __restrict__ totals, int count) {
    typedef cub::BlockScan<float, BT> Scan;
    __shared__ typename Scan::TempStorage temp;
    float carry = 0.0f;
    for (int base = 0; base < count; base += BT) {
        const int i = base + threadIdx.x;
        const float v = i < count ? totals[i] : 0.0f;
        float excl, chunk_total;
        Scan(temp).ExclusiveSum(v, excl, chunk_total);
        __syncthreads();                                   // temp reused by the next chunk
        if (i < count) totals[i] = carry + excl;
        carry += chunk_total;
    }
}

// pass 3: every tile but the first adds its offset
__global__ void __launch_bounds__(SCAN_THREADS) add_offsets(float* __restrict__ y, const float* __restrict__ offsets,
                                                            long long n) {
    if (blockIdx.x == 0) return;
    const float off = offsets[blockIdx.x];
    const long long base = (long long)blockIdx.x * SCAN_TILE;
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        const long long i = base + k * SCAN_THREADS + threadIdx.x;
        if (i < n) y[i] += off;
    }
}

extern "C" int launch(const float* x, float* y, float* workspace, int N, cudaStream_t stream) {
    const long long n = N;
    const long long tiles = (n + SCAN_TILE - 1) / SCAN_TILE;   // <= N/2048 + 1 <= N/32 + 1024 workspace floats
    tile_scan<SCAN_THREADS, SCAN_ITEMS><<<(unsigned)tiles, SCAN_THREADS, 0, stream>>>(x, y, workspace, n);
    if (tiles > 1) {
        totals_scan<1024><<<1, 1024, 0, stream>>>(workspace, (int)tiles);
        add_offsets<<<(unsigned)tiles, SCAN_THREADS, 0, stream>>>(y, workspace, n);
    }
    return (int)cudaGetLastError();
}
'''

# -- 9. softmax: a template per row length, chosen by a switch; device attribute every call ---------------
SOFTMAX_TEMPLATE_SWITCH = r'''
#include <cuda_runtime.h>
#include <algorithm>
#include <math.h>

#define FULL_MASK 0xffffffffu

// one warp per row, VPT values per lane in registers (cols <= 32 * VPT)
template <int VPT>
__global__ void __launch_bounds__(128) softmax_warp(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;                               // whole warps leave together
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float v[VPT];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = lane + 32 * k;
        v[k] = c < cols ? __ldg(xr + c) : -INFINITY;
        m = fmaxf(m, v[k]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, o));
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = lane + 32 * k;
        v[k] = c < cols ? expf(v[k] - m) : 0.0f;
        s += v[k];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL_MASK, s, o);
    const float inv = 1.0f / s;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = lane + 32 * k;
        if (c < cols) yr[c] = v[k] * inv;
    }
}

__device__ __forceinline__ void merge_max_sum(float& m, float& s, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) { m = m2; s = s2; return; }
    const float M = fmaxf(m, m2);
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

// one block per row: online max and sum per thread, merged across the block, then the output
template <int BT>
__global__ void __launch_bounds__(BT) softmax_block(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float sm[BT / 32], ss[BT / 32];
    __shared__ float row_max, row_inv;
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = y + (long long)blockIdx.x * cols;
    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BT) {
        const float v = __ldg(xr + c);
        if (v > m) { s = s * expf(m - v) + 1.0f; m = v; }
        else s += expf(v - m);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(FULL_MASK, m, o), s2 = __shfl_xor_sync(FULL_MASK, s, o);
        merge_max_sum(m, s, m2, s2);
    }
    if ((threadIdx.x & 31) == 0) { sm[threadIdx.x / 32] = m; ss[threadIdx.x / 32] = s; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float M = sm[0], S = ss[0];
        for (int w = 1; w < BT / 32; ++w) merge_max_sum(M, S, sm[w], ss[w]);
        row_max = M;
        row_inv = 1.0f / S;
    }
    __syncthreads();
    const float M = row_max, inv = row_inv;
    for (int c = threadIdx.x; c < cols; c += BT) yr[c] = expf(__ldg(xr + c) - M) * inv;
}

template <int VPT>
static void launch_warp(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    const int rows_per_block = 4;                          // 128 threads
    const unsigned blocks = (unsigned)((rows + rows_per_block - 1) / rows_per_block);
    softmax_warp<VPT><<<blocks, 32 * rows_per_block, 0, stream>>>(x, y, rows, cols);
}

extern "C" int launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int per_lane = (cols + 31) / 32;
    switch (per_lane) {
        case 1: launch_warp<1>(x, y, rows, cols, stream); break;
        case 2: launch_warp<2>(x, y, rows, cols, stream); break;
        case 3: case 4: launch_warp<4>(x, y, rows, cols, stream); break;
        case 5: case 6: case 7: case 8: launch_warp<8>(x, y, rows, cols, stream); break;
        default:
            if (per_lane <= 16) { launch_warp<16>(x, y, rows, cols, stream); break; }
            if (per_lane <= 32) { launch_warp<32>(x, y, rows, cols, stream); break; }
            // long rows: few rows get the widest blocks
            if (rows < std::max(1, sms)) softmax_block<1024><<<rows, 1024, 0, stream>>>(x, y, cols);
            else softmax_block<256><<<rows, 256, 0, stream>>>(x, y, cols);
    }
    return (int)cudaGetLastError();
}
'''

# -- 10. layernorm: cooperative-groups tiles, the row cached in opt-in dynamic shared memory --------------
LAYERNORM_CG = r'''
#include <cuda_runtime.h>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#define LN_THREADS 512
#define LN_CACHE_BYTES (96 * 1024)                         // above the 48 KB default: needs the opt-in

__device__ float ln_block_sum(float v, cg::thread_block& block, float* scratch) {
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += tile.shfl_down(v, o);
    if (tile.thread_rank() == 0) scratch[tile.meta_group_rank()] = v;
    block.sync();
    if (tile.meta_group_rank() == 0) {
        float r = tile.thread_rank() < tile.meta_group_size() ? scratch[tile.thread_rank()] : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) r += tile.shfl_down(r, o);
        if (tile.thread_rank() == 0) scratch[32] = r;
    }
    block.sync();
    const float r = scratch[32];
    block.sync();                                          // scratch free for the next reduction
    return r;
}

template <bool CACHED>
__global__ void __launch_bounds__(LN_THREADS) layernorm_rows(const float* __restrict__ x, const float* __restrict__ gamma,
                                                             const float* __restrict__ beta, float* __restrict__ y,
                                                             int cols, float eps) {
    extern __shared__ float row_cache[];
    __shared__ float scratch[33];
    cg::thread_block block = cg::this_thread_block();
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = y + (long long)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += LN_THREADS) {
        const float v = xr[c];
        if (CACHED) row_cache[c] = v;
        s += v;
    }
    const float mean = ln_block_sum(s, block, scratch) / (float)cols;
    float q = 0.0f;                                        // two passes: no E[x^2] - mean^2
    for (int c = threadIdx.x; c < cols; c += LN_THREADS) {
        const float d = (CACHED ? row_cache[c] : xr[c]) - mean;
        q = fmaf(d, d, q);
    }
    const float var = ln_block_sum(q, block, scratch) / (float)cols;
    const float rstd = rsqrtf(var + eps);
    for (int c = threadIdx.x; c < cols; c += LN_THREADS) {
        const float v = CACHED ? row_cache[c] : xr[c];
        yr[c] = (v - mean) * rstd * gamma[c] + beta[c];
    }
}

extern "C" int launch(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols, float eps,
                      cudaStream_t stream) {
    int dev = 0, optin = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    const int cache_limit = optin < LN_CACHE_BYTES ? optin - 1024 : LN_CACHE_BYTES;
    cudaError_t err = cudaFuncSetAttribute(layernorm_rows<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           cache_limit);
    if (err != cudaSuccess) return (int)err;
    const size_t bytes = (size_t)cols * sizeof(float);
    if (bytes <= (size_t)cache_limit)
        layernorm_rows<true><<<rows, LN_THREADS, bytes, stream>>>(x, gamma, beta, y, cols, eps);
    else
        layernorm_rows<false><<<rows, LN_THREADS, 0, stream>>>(x, gamma, beta, y, cols, eps);
    return (int)cudaGetLastError();
}
'''

# -- 11. transpose: 32x33 shared tiles, 64-bit indexing, grid-stride over tiles, device sync at the end ----
TRANSPOSE_TILED = r'''
#include <cuda_runtime.h>

#define TILE_DIM 32
#define BLOCK_ROWS 8

__global__ void __launch_bounds__(TILE_DIM * BLOCK_ROWS) transpose_tiled(const float* __restrict__ x, float* __restrict__ y,
                                                                         int rows, int cols) {
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];         // +1: no bank conflicts on the transposed read
    const long long tiles_r = ((long long)rows + TILE_DIM - 1) / TILE_DIM;
    const long long tiles_c = ((long long)cols + TILE_DIM - 1) / TILE_DIM;
    for (long long tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
        for (long long tc = blockIdx.x; tc < tiles_c; tc += gridDim.x) {
            const long long c = tc * TILE_DIM + threadIdx.x;
#pragma unroll
            for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
                const long long r = tr * TILE_DIM + threadIdx.y + j;
                if (r < rows && c < cols) tile[threadIdx.y + j][threadIdx.x] = x[r * cols + c];
            }
            __syncthreads();
            const long long r_out = tr * TILE_DIM + threadIdx.x;      // a column of y is a row of x
#pragma unroll
            for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
                const long long c_out = tc * TILE_DIM + threadIdx.y + j;
                if (c_out < cols && r_out < rows) y[c_out * rows + r_out] = tile[threadIdx.x][threadIdx.y + j];
            }
            __syncthreads();
        }
    }
}

extern "C" int launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    const long long tiles_r = ((long long)rows + TILE_DIM - 1) / TILE_DIM;
    const long long tiles_c = ((long long)cols + TILE_DIM - 1) / TILE_DIM;
    dim3 grid((unsigned)(tiles_c < 65535 ? tiles_c : 65535), (unsigned)(tiles_r < 65535 ? tiles_r : 65535));
    transpose_tiled<<<grid, dim3(TILE_DIM, BLOCK_ROWS), 0, stream>>>(x, y, rows, cols);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;
    return (int)cudaDeviceSynchronize();
}
'''

# -- 12. sort: thrust::sort with thrust's own temporary storage, synchronous policy -----------------------
SORT_THRUST = r'''
#include <cuda_runtime.h>
#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>
#include <thrust/sort.h>

extern "C" int launch(const float* x, float* y, float* workspace, int N, cudaStream_t stream) {
    (void)workspace;
    cudaError_t err = cudaMemcpyAsync(y, x, (size_t)N * sizeof(float), cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess) return (int)err;
    try {
        thrust::device_ptr<float> p = thrust::device_pointer_cast(y);
        thrust::sort(thrust::cuda::par.on(stream), p, p + N);   // radix sort; temp storage via cudaMalloc
    } catch (...) {
        return (int)cudaErrorUnknown;
    }
    return (int)cudaGetLastError();
}
'''

# -- 13. topk: sort (value, index) pairs descending with thrust (asynchronous policy), lazily grown scratch --
TOPK_THRUST = r'''
#include <cuda_runtime.h>
#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

static float* g_keys = nullptr;
static int* g_idx = nullptr;
static int g_capacity = 0;

extern "C" int launch(const float* x, float* values, int* indices, int N, int K, cudaStream_t stream) {
    if (N > g_capacity) {                                   // grown on demand, then reused
        if (g_keys) cudaFree(g_keys);
        if (g_idx) cudaFree(g_idx);
        g_keys = nullptr; g_idx = nullptr; g_capacity = 0;
        cudaError_t err = cudaMalloc((void**)&g_keys, (size_t)N * sizeof(float));
        if (err != cudaSuccess) return (int)err;
        err = cudaMalloc((void**)&g_idx, (size_t)N * sizeof(int));
        if (err != cudaSuccess) return (int)err;
        g_capacity = N;
    }
    cudaError_t err = cudaMemcpyAsync(g_keys, x, (size_t)N * sizeof(float), cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess) return (int)err;
    try {
        auto policy = thrust::cuda::par_nosync.on(stream);
        thrust::device_ptr<float> keys = thrust::device_pointer_cast(g_keys);
        thrust::device_ptr<int> idx = thrust::device_pointer_cast(g_idx);
        thrust::sequence(policy, idx, idx + N);
        thrust::sort_by_key(policy, keys, keys + N, idx, thrust::greater<float>());
    } catch (...) {
        return (int)cudaErrorUnknown;
    }
    cudaMemcpyAsync(values, g_keys, (size_t)K * sizeof(float), cudaMemcpyDeviceToDevice, stream);
    cudaMemcpyAsync(indices, g_idx, (size_t)K * sizeof(int), cudaMemcpyDeviceToDevice, stream);
    return (int)cudaGetLastError();
}
'''

# -- 14. reverse: boilerplate includes (<iostream>, <vector>) and a CUDA_CHECK macro --------------------------
REVERSE_BOILERPLATE = r'''
#include <cuda_runtime.h>
#include <iostream>
#include <vector>

#define CUDA_CHECK(call)                                                                   \
    do {                                                                                   \
        cudaError_t err_ = (call);                                                         \
        if (err_ != cudaSuccess) {                                                         \
            std::cerr << "CUDA error " << cudaGetErrorString(err_) << " at line " << __LINE__ \
                      << std::endl;                                                        \
            return (int)err_;                                                              \
        }                                                                                  \
    } while (0)

// thread i swaps x[i] and x[n-1-i] for i < n/2 (the middle element of an odd length stays)
__global__ void reverse_in_place(float* __restrict__ x, long long n) {
    const long long half = n / 2;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < half; i += (long long)gridDim.x * blockDim.x) {
        const long long j = n - 1 - i;
        const float a = x[i];
        const float b = x[j];
        x[i] = b;
        x[j] = a;
    }
}

extern "C" int launch(float* x, int N, cudaStream_t stream) {
    const long long half = (long long)N / 2;
    if (half == 0) return 0;
    const int threads = 256;
    long long want = (half + threads - 1) / threads;
    int blocks = (int)(want < 8192 ? want : 8192);
    reverse_in_place<<<blocks, threads, 0, stream>>>(x, (long long)N);
    CUDA_CHECK(cudaGetLastError());
    return 0;
}
'''


def build_cases() -> list[CaseV3]:
    def case(name: str, task: str, source: str, note: str) -> CaseV3:
        return CaseV3(name, task, "legit", source, OK, note)

    cases = [
        case("ok_v4_relu_float4_head_tail", "relu", RELU_FLOAT4,
             "grid-stride float4 body with a scalar head to the 16-byte boundary and a scalar tail (scalar kernel "
             "when x and y differ modulo 16), __ldg, #pragma unroll, cudaGetDeviceProperties every call, "
             "std::min/std::max from <algorithm>, 64-bit indexing, returns cudaGetLastError()"),
        case("ok_v4_sigmoid_legacy_default_stream", "sigmoid", SIGMOID_DEFAULT_STREAM,
             "the kernel is launched on the legacy default stream (<<<g, b>>>), not on `stream`: correct, since the "
             "runner synchronizes the device around every call; its time is charged through the device-wide "
             "events and the host clock (the harness stream is non-blocking, so its events do not cover it)"),
        case("ok_v4_sum_last_block_ticket", "sum_reduction", SUM_LAST_BLOCK,
             "single-pass reduction: block partials in the workspace, __threadfence and an atomic ticket on a "
             "__device__ counter; the last block sums the partials and resets the counter; cub::WarpReduce; "
             "cudaDeviceGetAttribute and cudaOccupancyMaxActiveBlocksPerMultiprocessor every call"),
        case("ok_v4_dot_static_scratch_stream_sync", "dot_product", DOT_STATIC_SCRATCH,
             "a static device buffer allocated with cudaMalloc on the first call (the task's workspace ignored), "
             "two kernels, float4 loads when both inputs are 16-byte aligned, cudaStreamSynchronize(stream) at the "
             "end of launch"),
        case("ok_v4_mse_malloc_async_cg_reduce", "mse_loss", MSE_MALLOC_ASYNC,
             "per-call scratch from cudaMallocAsync / cudaFreeAsync on the stream (the default memory pool), "
             "cooperative_groups::reduce over tiled_partition<32>, final scaling in double"),
        case("ok_v4_cross_entropy_memset_counter", "cross_entropy", CE_WORK_QUEUE,
             "a persistent grid pulling row chunks from a __device__ work-queue counter that is zeroed with "
             "cudaMemsetAsync on its cudaGetSymbolAddress every call; out zeroed with cudaMemsetAsync and "
             "accumulated with atomicAdd; online log-sum-exp"),
        case("ok_v4_histogram_warp_subhist_printf", "histogram", HIST_PRINTF,
             "per-warp shared-memory sub-histograms, int4 loads when aligned, hist zeroed with cudaMemsetAsync, a "
             "device printf in a range check that never fires for valid inputs"),
        case("ok_v4_prefix_sum_cub_blockscan", "prefix_sum", SCAN_CUB_BLOCKSCAN,
             "three kernels: cub::BlockLoad/BlockScan/BlockStore per tile with its total in the workspace, one "
             "block scanning the totals with a carry, then the offsets added"),
        case("ok_v4_softmax_template_switch", "softmax", SOFTMAX_TEMPLATE_SWITCH,
             "warp-per-row kernels templated on values per lane, chosen by a switch over cols, a block-per-row "
             "online kernel for long rows, cudaDeviceGetAttribute every call, std::max from <algorithm>"),
        case("ok_v4_layernorm_cg_tiles_optin_smem", "layernorm", LAYERNORM_CG,
             "block per row, two-pass mean and variance, cooperative_groups thread_block_tile<32>::shfl_down, the "
             "row cached in dynamic shared memory with cudaFuncSetAttribute raising the limit to 96 KB every call "
             "(the task's shapes cache rows of at most 16 KB; longer rows take the uncached path)"),
        case("ok_v4_transpose_tiled_device_sync", "transpose", TRANSPOSE_TILED,
             "32x33 shared-memory tiles, 64-bit indexing, grid-stride over tiles in both dimensions (grid capped at "
             "65535), cudaDeviceSynchronize() at the end of launch"),
        case("ok_v4_sort_thrust_sync_policy", "sort", SORT_THRUST,
             "cudaMemcpyAsync of x into y, then thrust::sort(thrust::cuda::par.on(stream), ...): thrust allocates "
             "its temporary storage with cudaMalloc, frees it with cudaFree and synchronizes the stream, so "
             "launch blocks; sort's 2^20 shape is timed in chained windows (enqueued behind a gate)"),
        case("ok_v4_topk_thrust_sort_by_key", "topk", TOPK_THRUST,
             "static key/index scratch grown with cudaMalloc on demand, thrust::sequence and thrust::sort_by_key "
             "descending with thrust::cuda::par_nosync.on(stream) (temporary storage from cudaMallocAsync), the "
             "first K pairs copied out with cudaMemcpyAsync; every topk shape is timed in chained windows"),
        case("ok_v4_reverse_iostream_vector_includes", "reverse", REVERSE_BOILERPLATE,
             "an in-place swap kernel with LLM boilerplate: #include <iostream> and <vector> (standard C++ headers) "
             "and a CUDA_CHECK macro printing to std::cerr on an error that never happens"),
    ]
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return cases


__all__ = ["build_cases"]
