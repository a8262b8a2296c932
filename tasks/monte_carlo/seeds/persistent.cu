// monte_carlo family: one persistent kernel with a last-block finish.
// A grid of BLOCKS_PER_SM blocks per SM streams x as float4 vectors (a scalar head brings the
// pointer to 16 bytes, a scalar tail finishes; VEC 1 reads scalars), ITEMS vectors per thread in
// flight, and accumulates f(x) = expf(-x*x) * cosf(3x) (accurate expf/cosf, float32) per thread.
// Blocks reduce with warp shuffles and store one partial each in workspace[block]; the last
// block to finish (a __device__ counter, zeroed on the stream at the start of each call) sums the
// partials in a fixed order and writes out[0] = sum * (b - a) / N (the scale in double).
// Deterministic for a given grid; no float atomics.
// FINISH 1 trims the fixed cost of a call, as cross_entropy's and linear_regression's FINISH 1 do
// (at 2^24 samples a ~39 us call with a few us of it fixed; the stream itself is bounded near the
// FP32 issue rate by the accurate expf/cosf):
//  - no cudaMemsetAsync before the kernel (a second node on the stream, ~2 us a call with its
//    gap): the counter is a self-resetting ticket, atomicInc(&g_done, gridDim.x - 1), which wraps
//    to 0 on the last block's increment, so every call leaves it at 0 for the next (zero from
//    module load; a call that faults poisons the context anyway);
//  - the last block reads the partials 8 loads a thread at a time, all issued before any add (one
//    L2 round trip for up to 8 x THREADS blocks), still summed in a fixed order (deterministic).
// Both settings look the device's SM count and the counter's address up once per device (a batch
// of short calls must not wait on the host between launches).
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define THREADS 256         // knob: 128 256 512 1024
#define BLOCKS_PER_SM 8     // knob: 1 2 4 8
#define ITEMS 2             // knob: 1 2 4
#define VEC 4               // knob: 1 4
#define FINISH 1            // knob: 0 1
// Defaults since the seventeenth session: FINISH 1 with 8 blocks of 256 threads an SM (one H100, one
// evaluate.py process, x of torch at 2^24 / 2^26 / 1e8+7: 10.55x / 11.41x / 11.63x, against 9.59x /
// 10.32x / 10.61x for the earlier FINISH 0 with 4 blocks; FINISH 1 with 4 blocks 9.83x / 10.55x /
// 10.80x, with ITEMS 4 9.75x / 10.65x / 10.81x): twice the warps a scheduler hide more of the
// expf/cosf dependency chains.
// Knob constraints (evo_fsr/knobs.py): the blocks asked for per SM fit its 2048 threads.
// constraint: THREADS * BLOCKS_PER_SM <= 2048

static_assert(THREADS * BLOCKS_PER_SM <= 2048, "knob constraint: THREADS * BLOCKS_PER_SM <= 2048");
static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS: a warp multiple <= 1024");
static_assert(VEC == 1 || VEC == 4, "VEC must be 1 or 4");
static_assert(ITEMS >= 1, "ITEMS must be positive");
static_assert(FINISH == 0 || FINISH == 1, "FINISH must be 0 or 1");

#define NWARPS (THREADS / 32)
#define WORKSPACE_FLOATS 65536

__device__ unsigned int g_done;          // blocks finished in this call

__device__ __forceinline__ float integrand(float v) { return expf(-v * v) * cosf(3.0f * v); }

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

template <int V>
__device__ __forceinline__ void load_vec(const float* __restrict__ p, float* v) {
    if constexpr (V == 4) {
        const float4 t = __ldg(reinterpret_cast<const float4*>(p));
        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
    } else {
        v[0] = __ldg(p);
    }
}

__global__ void __launch_bounds__(THREADS)
mc_persistent(const float* __restrict__ x, float* __restrict__ out, float* __restrict__ workspace,
              long long n, double scale) {
    __shared__ float sh[NWARPS];
    __shared__ bool last;
    constexpr int V = VEC;
    const int head = V == 4 ? (int)(((16u - ((uintptr_t)x & 15u)) & 15u) >> 2) : 0;
    const long long h_n = head < n ? head : n;
    const long long nvec = (n - h_n) / V;
    const float* body = x + h_n;
    const long long threads = (long long)gridDim.x * THREADS;
    float acc = 0.0f;
    for (long long base = (long long)blockIdx.x * THREADS + threadIdx.x; base < nvec; base += threads * ITEMS) {
        float v[ITEMS][V];
        bool ok[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const long long j = base + i * threads;
            ok[i] = j < nvec;
            if (ok[i]) load_vec<V>(body + j * V, v[i]);
        }
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            if (ok[i]) {
#pragma unroll
                for (int k = 0; k < V; ++k) acc += integrand(v[i][k]);
            }
        }
    }
    // Scalar head (< 4 elements) and tail (< V elements): block 0.
    if (blockIdx.x == 0) {
        const long long tail0 = h_n + nvec * V;
        const int t = threadIdx.x;
        if (t < h_n) acc += integrand(__ldg(x + t));
        else if (t >= 4 && t - 4 < n - tail0) acc += integrand(__ldg(x + tail0 + (t - 4)));
    }
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
    if (threadIdx.x == 0) out[0] = (float)((double)s * scale);
}

// Host-side facts a call needs, cached per device (queried on a device's first call only).
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

extern "C" int launch(const float* x, float* out, float* workspace, int N, float a, float b,
                      cudaStream_t stream) {
    const long long n = N;
    if (n <= 0) return 0;
    DeviceInfo info;
    cudaError_t err = device_info(info);
    if (err != cudaSuccess) return (int)err;
#if !FINISH
    err = cudaMemsetAsync(info.done, 0, sizeof(unsigned int), stream);
    if (err != cudaSuccess) return (int)err;
#endif
    const long long per_block = (long long)THREADS * ITEMS * VEC;
    long long grid = (n + per_block - 1) / per_block;
    const long long cap = (long long)info.sms * BLOCKS_PER_SM;
    if (grid > cap) grid = cap;
    if (grid > WORKSPACE_FLOATS) grid = WORKSPACE_FLOATS;
    if (grid < 1) grid = 1;
    const double scale = ((double)b - (double)a) / (double)n;
    mc_persistent<<<(unsigned)grid, THREADS, 0, stream>>>(x, out, workspace, n, scale);
    return (int)cudaGetLastError();
}
