// cross_entropy family: a persistent grid (BLOCKS_PER_SM blocks per SM) with a last-block finish.
//  - few classes (C <= SMALL_C): a block stages a tile of THREADS rows (THREADS * C contiguous
//    floats) into shared memory with coalesced float4 loads (scalar head and tail: rows of 10
//    floats are not 16-byte aligned), then each thread takes one row from shared memory:
//    max, sum of exp(x - max), loss = (max - x[label]) + log(sum);
//  - many classes: one warp per row, an online (max, sum of exp) over the row with warp merges.
// Each block writes its partial sum of losses to workspace[block]; the last block to finish
// (a __device__ counter, zeroed on the stream at the start of each call) sums the partials in a
// fixed order and writes out[0] = sum / N: deterministic, no float atomics.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define THREADS 256         // knob: 128 256 512
#define SMALL_C 32          // knob: 16 32 64
#define BLOCKS_PER_SM 4     // knob: 2 4 8
#define VEC 4               // knob: 1 4
// Knob constraints (evo_fsr/knobs.py): the row tile fits 64 KB of shared memory, and the blocks
// asked for per SM fit its 2048 threads.
// constraint: THREADS * SMALL_C <= 16384
// constraint: THREADS * BLOCKS_PER_SM <= 2048

static_assert(THREADS * SMALL_C <= 16384, "knob constraint: THREADS * SMALL_C <= 16384");
static_assert(THREADS * BLOCKS_PER_SM <= 2048, "knob constraint: THREADS * BLOCKS_PER_SM <= 2048");
static_assert(THREADS % 32 == 0 && THREADS >= 64 && THREADS <= 1024, "THREADS: a warp multiple, 64..1024");
static_assert(VEC == 1 || VEC == 4, "VEC must be 1 or 4");

#define NWARPS (THREADS / 32)
#define WORKSPACE_FLOATS 65536

__device__ unsigned int g_done;          // blocks finished in this call

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

// Copy n floats from global src to shared dst (dst + pad is where src[0] lands, pad chosen by
// the caller so that 16-byte-aligned global vectors land on 16-byte-aligned shared addresses).
__device__ __forceinline__ void stage(const float* __restrict__ src, float* dst, int n, int head) {
    const int tid = threadIdx.x;
    if (VEC == 4 && n > head) {
        if (tid < head) dst[tid] = __ldg(src + tid);
        const int nvec = (n - head) / 4;
        const float4* s4 = reinterpret_cast<const float4*>(src + head);
        float4* d4 = reinterpret_cast<float4*>(dst + head);
        for (int j = tid; j < nvec; j += THREADS) d4[j] = __ldg(s4 + j);
        for (int k = head + 4 * nvec + tid; k < n; k += THREADS) dst[k] = __ldg(src + k);
    } else {
        for (int k = tid; k < n; k += THREADS) dst[k] = __ldg(src + k);
    }
}

__device__ __forceinline__ void finish(float acc, float* __restrict__ workspace, float* __restrict__ out,
                                       int N, float* sh) {
    __shared__ bool last;
    const float part = block_sum(acc, sh);
    if (threadIdx.x == 0) {
        workspace[blockIdx.x] = part;
        __threadfence();
        last = atomicAdd(&g_done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    float s = 0.0f;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += THREADS) s += __ldcg(workspace + b);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = (float)((double)s / (double)N);
}

// C <= SMALL_C: tiles of THREADS rows through shared memory, one row per thread.
__global__ void __launch_bounds__(THREADS)
ce_tiled(const float* __restrict__ logits, const int* __restrict__ labels, float* __restrict__ out,
         float* __restrict__ workspace, int N, int C) {
    extern __shared__ float4 smem4[];
    float* tile = reinterpret_cast<float*>(smem4);
    __shared__ float sh[NWARPS];
    const int tid = threadIdx.x;
    float acc = 0.0f;
    for (long long t = blockIdx.x; t * THREADS < N; t += gridDim.x) {
        const long long r0 = t * THREADS;
        const int nr = (int)(N - r0 < THREADS ? N - r0 : THREADS);
        const float* src = logits + r0 * C;
        const int head = (int)((4 - (((uintptr_t)src >> 2) & 3)) & 3);   // floats to a 16-byte boundary
        const int pad = (4 - head) & 3;                                     // (pad + head) % 4 == 0
        float* dst = tile + pad;
        stage(src, dst, nr * C, head);
        __syncthreads();
        if (tid < nr) {
            const float* row = dst + tid * C;
            float m = row[0];
            for (int c = 1; c < C; ++c) m = fmaxf(m, row[c]);
            float s = 0.0f;
            for (int c = 0; c < C; ++c) s += expf(row[c] - m);
            const int lab = __ldg(labels + r0 + tid);
            acc += (m - row[lab]) + logf(s);
        }
        __syncthreads();                   // the tile is overwritten next iteration
    }
    finish(acc, workspace, out, N, sh);
}

// C > SMALL_C: one warp per row (grid-stride over rows by warp).
__global__ void __launch_bounds__(THREADS)
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
                v[u] = k < C ? __ldg(row + k) : -INFINITY;
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

static int sm_count() {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 132;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) return 132;
    return sms;
}

extern "C" int launch(const float* logits, const int* labels, float* out, float* workspace, int N,
                      int C, cudaStream_t stream) {
    if (N <= 0 || C <= 0) return 0;
    void* done = nullptr;
    cudaError_t err = cudaGetSymbolAddress(&done, g_done);
    if (err != cudaSuccess) return (int)err;
    err = cudaMemsetAsync(done, 0, sizeof(unsigned int), stream);
    if (err != cudaSuccess) return (int)err;
    long long grid = (long long)sm_count() * BLOCKS_PER_SM;
    if (C <= SMALL_C) {
        const long long tiles = ((long long)N + THREADS - 1) / THREADS;
        if (grid > tiles) grid = tiles;
        if (grid > WORKSPACE_FLOATS) grid = WORKSPACE_FLOATS;
        const size_t smem = ((size_t)THREADS * C + 4) * sizeof(float);
        if (smem > 48 * 1024) {
            err = cudaFuncSetAttribute(ce_tiled, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
            if (err != cudaSuccess) return (int)err;
        }
        ce_tiled<<<(unsigned)grid, THREADS, smem, stream>>>(logits, labels, out, workspace, N, C);
    } else {
        const long long need = ((long long)N + NWARPS - 1) / NWARPS;
        if (grid > need) grid = need;
        if (grid > WORKSPACE_FLOATS) grid = WORKSPACE_FLOATS;
        ce_warp<<<(unsigned)grid, THREADS, 0, stream>>>(logits, labels, out, workspace, N, C);
    }
    return (int)cudaGetLastError();
}
