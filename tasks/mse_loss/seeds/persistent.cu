// mse_loss seed family: a persistent grid of vectorized, ITEMS-deep grid-stride partial sums of
// squared residuals, warp-shuffle block reductions, and a finish that sums the per-block
// partials and writes sum / n (the division in double).
//
// Pass 1: G = min(tiles, BLOCKS_PER_SM * SMs) blocks; each thread keeps ITEMS independent float
// accumulators over VEC-wide loads; a block reduces with __shfl_down_sync and shared memory and
// stores its partial in workspace[blockIdx.x] (G <= 65535 < the 65536-float workspace).
// Finish (FINISH knob):
//   0: a second kernel, one block, sums the G partials in a fixed order (deterministic);
//   1: last-block finish in the same kernel: each block publishes its partial, __threadfence(),
//      takes a ticket; the block that takes the G-th ticket sums the partials (__ldcg, L2) and
//      writes out[0]. The ticket is one __device__ word taken with atomicInc(&word, G - 1), which
//      wraps to 0 on the G-th arrival: one atomic per block, and every completed call (a
//      replayed capture too) leaves the word at 0 for the next. A call that does not complete
//      faulted, and a faulted context runs nothing more. (An epoch-tagged word updated in an
//      atomicCAS loop cost ~0.15 ms on an H100: 528 blocks finishing together retried the CAS,
//      one success per round trip.) Summation order depends on arrival order.
// Regime dispatch in launch():
//   - one tile or less (G = 1): one block sums everything and writes out[0] itself (one launch);
//   - a and b at the same offset modulo VEC*4 bytes: a scalar head of < VEC elements
//     brings both to a VEC*4-byte boundary, then VEC-wide loads; at different offsets (buffers
//     are only 4-byte aligned in general): the VEC = 1 instantiation;
//   - large N: the persistent grid above.
// out[0] is always written, never accumulated into (it holds garbage on entry).
#include <cuda_runtime.h>
#include <stdint.h>

#define THREADS 256        // knob: 128 256 512 1024
#define VEC 4              // knob: 1 2 4
#define ITEMS 4            // knob: 1 2 4 8
#define BLOCKS_PER_SM 4    // knob: 1 2 4 8
#define FINISH 1           // knob: 0 1
#define CACHE 0            // knob: 0 1
// Knob constraints (evo_fsr/knobs.py), enforced by the static_asserts below:
// constraint: VEC * ITEMS <= 16

// CACHE: 0 plain loads, 1 streaming loads (__ldcs: evict first, the data is read once).
static_assert(VEC * ITEMS <= 16, "more than 16 floats in flight per thread: registers, no gain");
static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC must be 1, 2 or 4");
static_assert(THREADS % 32 == 0 && THREADS >= 64 && THREADS <= 1024, "THREADS must be a warp multiple in [64, 1024]");
static_assert(ITEMS >= 1 && BLOCKS_PER_SM >= 1, "ITEMS and BLOCKS_PER_SM must be positive");
static_assert(FINISH == 0 || FINISH == 1, "FINISH must be 0 or 1");

#define WORKSPACE_FLOATS 65536
#define MAX_PARTIALS (WORKSPACE_FLOATS - 1)

template <int V> struct VecOf;
template <> struct VecOf<1> { typedef float T; };
template <> struct VecOf<2> { typedef float2 T; };
template <> struct VecOf<4> { typedef float4 T; };

template <typename T> __device__ __forceinline__ T load(const T* p) {
#if CACHE == 1
    return __ldcs(p);
#else
    return *p;
#endif
}
// acc + sum of (a - b)^2 over the VEC components: the difference in float32 first, then squared
// (the residuals are ~1e-3 of the operands, see task.yaml).
__device__ __forceinline__ float accumulate(float acc, float a, float b) {
    const float d = a - b;
    return fmaf(d, d, acc);
}
__device__ __forceinline__ float accumulate(float acc, float2 a, float2 b) {
    return accumulate(accumulate(acc, a.x, b.x), a.y, b.y);
}
__device__ __forceinline__ float accumulate(float acc, float4 a, float4 b) {
    return accumulate(accumulate(accumulate(accumulate(acc, a.x, b.x), a.y, b.y), a.z, b.z), a.w, b.w);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// Sum over the block; the result is valid in thread 0. Safe to call again after a __syncthreads.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_part[THREADS / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0) warp_part[warp] = v;
    __syncthreads();
    v = 0.0f;
    if (warp == 0) {
        v = lane < THREADS / 32 ? warp_part[lane] : 0.0f;
        v = warp_sum(v);
    }
    return v;
}

__device__ unsigned int g_ticket = 0;        // blocks of the current call arrived (0 between calls)

// Elements [0, head) and [head + nv*V, n) are scalar (fewer than V each, block 0).
template <int V>
__global__ void __launch_bounds__(THREADS)
mse_partial(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
            float* __restrict__ ws, long long n, int head) {
    typedef typename VecOf<V>::T T;
    const long long nv = (n - head) / V;
    const T* __restrict__ xv = reinterpret_cast<const T*>(x + head);
    const T* __restrict__ yv = reinterpret_cast<const T*>(y + head);
    const int tid = threadIdx.x;
    float acc[ITEMS];
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) acc[u] = 0.0f;
    const long long tile = (long long)THREADS * ITEMS;
    const long long step = (long long)gridDim.x * tile;
    for (long long base = (long long)blockIdx.x * tile; base < nv; base += step) {
        if (base + tile <= nv) {
            T a[ITEMS], b[ITEMS];
#pragma unroll
            for (int u = 0; u < ITEMS; ++u) {
                a[u] = load(xv + base + u * THREADS + tid);
                b[u] = load(yv + base + u * THREADS + tid);
            }
#pragma unroll
            for (int u = 0; u < ITEMS; ++u) acc[u] = accumulate(acc[u], a[u], b[u]);
        } else {
#pragma unroll
            for (int u = 0; u < ITEMS; ++u) {
                const long long i = base + u * THREADS + tid;
                if (i < nv) acc[u] = accumulate(acc[u], load(xv + i), load(yv + i));
            }
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) s += acc[u];
    if (blockIdx.x == 0) {
        if (tid < head) s = accumulate(s, x[tid], y[tid]);
        const long long tail0 = head + nv * V;
        if (tid < n - tail0) s = accumulate(s, x[tail0 + tid], y[tail0 + tid]);
    }
    s = block_sum(s);
    if (gridDim.x == 1) {                     // small-N regime: no partials, no finish
        if (tid == 0) out[0] = (float)((double)s / (double)n);
        return;
    }
#if FINISH == 0
    if (tid == 0) ws[blockIdx.x] = s;
#else
    __shared__ bool is_last;
    if (tid == 0) {
        ws[blockIdx.x] = s;
        __threadfence();                      // the partial is visible device-wide before the ticket
        is_last = atomicInc(&g_ticket, gridDim.x - 1u) == gridDim.x - 1u;   // wraps to 0: ready for the next call
    }
    __syncthreads();
    if (is_last) {
        __threadfence();
        float v = 0.0f;
        for (int i = tid; i < (int)gridDim.x; i += THREADS) v += __ldcg(ws + i);
        v = block_sum(v);
        if (tid == 0) out[0] = (float)((double)v / (double)n);
    }
#endif
}

__global__ void __launch_bounds__(THREADS)
mse_finish(const float* __restrict__ ws, float* __restrict__ out, int parts, long long n) {
    float v = 0.0f;
    for (int i = threadIdx.x; i < parts; i += THREADS) v += ws[i];
    v = block_sum(v);
    if (threadIdx.x == 0) out[0] = (float)((double)v / (double)n);
}

static int sm_count(int* sms) {
    static int cached_device = -1, cached_sms = 0;
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return (int)err;
    if (device != cached_device) {
        err = cudaDeviceGetAttribute(&cached_sms, cudaDevAttrMultiProcessorCount, device);
        if (err != cudaSuccess) return (int)err;
        cached_device = device;
    }
    *sms = cached_sms;
    return 0;
}

template <int V>
static int run(const float* x, const float* y, float* out, float* ws, long long n, int head,
               cudaStream_t stream) {
    int sms = 0;
    const int err = sm_count(&sms);
    if (err) return err;
    const long long nv = (n - head) / V;
    const long long tile = (long long)THREADS * ITEMS;
    long long blocks = (nv + tile - 1) / tile;
    const long long cap = (long long)sms * BLOCKS_PER_SM;
    if (blocks > cap) blocks = cap;
    if (blocks > MAX_PARTIALS) blocks = MAX_PARTIALS;
    if (blocks < 1) blocks = 1;
    mse_partial<V><<<(unsigned)blocks, THREADS, 0, stream>>>(x, y, out, ws, n, head);
#if FINISH == 0
    if (blocks > 1) mse_finish<<<1, THREADS, 0, stream>>>(ws, out, (int)blocks, n);
#endif
    return (int)cudaGetLastError();
}

extern "C" int launch(const float* a, const float* b, float* out, float* workspace, int n_elements,
                      cudaStream_t stream) {
    if (n_elements <= 0) return 0;
    const long long n = n_elements;
    const float* x = a;     // predictions
    const float* y = b;     // targets
    if (VEC > 1) {
        const uintptr_t bytes = VEC * sizeof(float);
        const uintptr_t ax = (uintptr_t)x % bytes, ay = (uintptr_t)y % bytes;
        if (ax == ay && ax % sizeof(float) == 0) {
            long long head = (long long)((bytes - ax) % bytes / sizeof(float));
            if (head > n) head = n;
            return run<VEC>(x, y, out, workspace, n, (int)head, stream);
        }
    }
    return run<1>(x, y, out, workspace, n, 0, stream);
}
