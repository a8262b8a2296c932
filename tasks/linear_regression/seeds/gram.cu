// linear_regression family: normal equations in one persistent kernel with a last-block solve.
//  1. A grid of BLOCKS_PER_SM blocks per SM walks tiles of TR = THREADS * ROWS_PER_THREAD rows.
//     A tile of X (TR * 10 contiguous floats) is staged into shared memory with coalesced float4
//     loads (a scalar head brings the pointer to 16 bytes; the tile keeps its global alignment in
//     shared memory), y alongside; each thread then reads whole rows from shared memory (float2
//     reads: 40-byte rows hit 16 distinct bank pairs per half-warp) and accumulates the 55
//     upper-triangle Gram entries and 10 entries of X^T y in 65 float32 registers.
//  2. Each block reduces its 65 sums (warp shuffles, then across warps) into workspace[block*65+e].
//  3. The last block to finish (a __device__ counter, zeroed on the stream at every call) sums the
//     partials in double in a fixed order and one warp solves the 10x10 SPD system by Gauss-Jordan
//     elimination in double (lane i holds row i; SPD: no pivoting needed), writing beta.
#include <cuda_runtime.h>
#include <stdint.h>

#define THREADS 256         // knob: 128 256 512
#define ROWS_PER_THREAD 2   // knob: 1 2 4
#define BLOCKS_PER_SM 2     // knob: 1 2 4
#define VEC 4               // knob: 1 4
// Knob constraints (evo_fsr/knobs.py): the staged tile (11 floats per row) fits 48 KB of
// static shared memory.
// constraint: THREADS * ROWS_PER_THREAD <= 1024

static_assert(THREADS * ROWS_PER_THREAD <= 1024, "knob constraint: THREADS * ROWS_PER_THREAD <= 1024");
static_assert(THREADS % 32 == 0 && THREADS >= 96 && THREADS <= 1024, "THREADS: a warp multiple, 96..1024");
static_assert(VEC == 1 || VEC == 4, "VEC must be 1 or 4");
static_assert(ROWS_PER_THREAD >= 1, "ROWS_PER_THREAD must be positive");

#define P 10
#define NE 65                 // 55 Gram entries (j <= k) + 10 right-hand-side entries
#define TR (THREADS * ROWS_PER_THREAD)
#define NWARPS (THREADS / 32)
#define MAX_PARTS 4096        // workspace: 65 * 4096 floats

__device__ unsigned int g_done;          // blocks finished in this call

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

// Copy n floats from global src to shared dst; src + head is 16-byte aligned and so is dst + head.
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

__global__ void __launch_bounds__(THREADS)
lr_gram(const float* __restrict__ X, const float* __restrict__ y, float* __restrict__ beta,
        float* __restrict__ workspace, long long n) {
    __shared__ __align__(16) float xs[TR * P + 4];
    __shared__ float ys[TR];
    __shared__ bool last;
    float* part = xs;                                            // after the tiles: [NE][NWARPS]
    double* total = reinterpret_cast<double*>(xs);               // after part is consumed
    static_assert(NE * NWARPS <= TR * P && 2 * NE <= TR * P, "reduction scratch must fit the tile");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    float acc[NE];
#pragma unroll
    for (int e = 0; e < NE; ++e) acc[e] = 0.0f;

    for (long long t = blockIdx.x; t * TR < n; t += gridDim.x) {
        const long long r0 = t * TR;
        const int nr = (int)(n - r0 < TR ? n - r0 : TR);
        const float* src = X + r0 * P;
        const int head = (int)((4 - (((uintptr_t)src >> 2) & 3)) & 3);
        const int pad = VEC == 4 ? (4 - head) & 3 : 0;          // (pad + head) % 4 == 0
        float* tile = xs + pad;
        stage(src, tile, nr * P, head);
        for (int k = tid; k < nr; k += THREADS) ys[k] = __ldg(y + r0 + k);
        __syncthreads();
#pragma unroll
        for (int rr = 0; rr < ROWS_PER_THREAD; ++rr) {
            const int row = rr * THREADS + tid;
            if (row < nr) {
                float r[P];
                const float* p = tile + row * P;
                if ((pad & 1) == 0) {                            // 8-byte aligned rows
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
        __syncthreads();                                         // the tile is overwritten next
    }

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
    __threadfence();

    // Last block: the totals in double, fixed order (warp per entry, lanes over blocks).
    const int parts = (int)gridDim.x;
    for (int e = warp; e < NE; e += NWARPS) {
        double s = 0.0;
        for (int b = lane; b < parts; b += 32) s += (double)__ldcg(workspace + (long long)b * NE + e);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) total[e] = s;
    }
    __syncthreads();
    if (warp != 0) return;

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

static int sm_count() {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 132;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) return 132;
    return sms;
}

extern "C" int launch(const float* X, const float* y, float* beta, float* workspace, int n,
                      cudaStream_t stream) {
    const long long rows = n;
    if (rows <= 0) return 0;
    void* done = nullptr;
    cudaError_t err = cudaGetSymbolAddress(&done, g_done);
    if (err != cudaSuccess) return (int)err;
    err = cudaMemsetAsync(done, 0, sizeof(unsigned int), stream);
    if (err != cudaSuccess) return (int)err;
    long long grid = (rows + TR - 1) / TR;
    const long long cap = (long long)sm_count() * BLOCKS_PER_SM;
    if (grid > cap) grid = cap;
    if (grid > MAX_PARTS) grid = MAX_PARTS;
    if (grid < 1) grid = 1;
    lr_gram<<<(unsigned)grid, THREADS, 0, stream>>>(X, y, beta, workspace, rows);
    return (int)cudaGetLastError();
}
