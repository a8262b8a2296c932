// sigmoid seed family: vectorized elementwise kernel, y = 1 / (1 + exp(-x)).
//
// Each thread moves ITEMS vectors of VEC floats per step (all loads issued before any store, for
// memory-level parallelism). The grid is exact (one tile of THREADS*ITEMS vectors per block) or,
// with BLOCKS_PER_SM > 0, capped at BLOCKS_PER_SM blocks per SM and grid-strided.
//
// Regime dispatch in launch():
//   - x and y at the same offset modulo VEC*4 bytes: a scalar head of < VEC elements brings both
//     to a VEC*4-byte boundary, VEC-wide loads/stores for the body, a scalar tail of < VEC;
//   - x and y at different offsets (buffers are only 4-byte aligned in general): the VEC = 1
//     instantiation of the same kernel (scalar, still ITEMS-deep).
// Indices are 64-bit. exp(-x) overflows to +inf for x < -88.7, so 1/(1+inf) = 0: the correct
// limit (never exp(x)/(1+exp(x)), which is NaN there).
#include <cuda_runtime.h>
#include <stdint.h>

// Defaults: 128 threads moving 2 float4s each (a block's tile: 1024 floats), the shape of torch's
// element-wise kernels. On an H200 (twenty-seventh session, scripts/probe_inproc.py: kernel and
// torch timed alike in one process) relu and matrix_copy read 0.99-1.02x torch with them and
// 0.95-0.98x at the old 256 x 4; loads with the L2::256B prefetch hint read 0.90-0.93x (not kept).
#define THREADS 128        // knob: 128 256 512 1024
#define VEC 4              // knob: 1 2 4
#define ITEMS 2            // knob: 1 2 4 8
#define BLOCKS_PER_SM 0    // knob: 0 4 8 16
#define CACHE 0            // knob: 0 1 2
#define FAST_EXP 0         // knob: 0 1
// Knob constraints (evo_fsr/knobs.py), enforced by the static_asserts below:
// constraint: VEC * ITEMS <= 16

// CACHE: 0 plain loads/stores, 1 read-only path (__ldg), 2 streaming (__ldcs / __stcs: evict first).
// FAST_EXP: 1 uses __expf (fp32, a few ulp: well inside fp32_strict's tolerance), 0 uses expf.
static_assert(VEC * ITEMS <= 16, "more than 16 floats in flight per thread: registers, no gain");
static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC must be 1, 2 or 4");
static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS must be a warp multiple <= 1024");
static_assert(ITEMS >= 1, "ITEMS must be positive");
static_assert(CACHE >= 0 && CACHE <= 2, "CACHE must be 0, 1 or 2");
static_assert(BLOCKS_PER_SM >= 0, "BLOCKS_PER_SM must be >= 0");

template <int V> struct VecOf;
template <> struct VecOf<1> { typedef float T; };
template <> struct VecOf<2> { typedef float2 T; };
template <> struct VecOf<4> { typedef float4 T; };

template <typename T> __device__ __forceinline__ T load(const T* p) {
#if CACHE == 1
    return __ldg(p);
#elif CACHE == 2
    return __ldcs(p);
#else
    return *p;
#endif
}

template <typename T> __device__ __forceinline__ void store(T* p, T v) {
#if CACHE == 2
    __stcs(p, v);
#else
    *p = v;
#endif
}

__device__ __forceinline__ float op(float v) {
#if FAST_EXP
    return 1.0f / (1.0f + __expf(-v));
#else
    return 1.0f / (1.0f + expf(-v));
#endif
}
__device__ __forceinline__ float apply(float v) { return op(v); }
__device__ __forceinline__ float2 apply(float2 v) { return make_float2(op(v.x), op(v.y)); }
__device__ __forceinline__ float4 apply(float4 v) { return make_float4(op(v.x), op(v.y), op(v.z), op(v.w)); }

// Elements [0, head) and [head + nv*V, n) are scalar (fewer than V each, block 0); the vectors
// in between start at x + head, which is V*4-byte aligned (and so is y + head).
template <int V>
__global__ void __launch_bounds__(THREADS)
sigmoid_vec(const float* __restrict__ x, float* __restrict__ y, long long n, int head) {
    typedef typename VecOf<V>::T T;
    const long long nv = (n - head) / V;
    const T* __restrict__ xv = reinterpret_cast<const T*>(x + head);
    T* __restrict__ yv = reinterpret_cast<T*>(y + head);
    const int tid = threadIdx.x;
    if (blockIdx.x == 0) {
        if (tid < head) y[tid] = op(load(x + tid));
        const long long tail0 = head + nv * V;
        if (tid < n - tail0) y[tail0 + tid] = op(load(x + tail0 + tid));
    }
    const long long tile = (long long)THREADS * ITEMS;
    const long long step = (long long)gridDim.x * tile;
    for (long long base = (long long)blockIdx.x * tile; base < nv; base += step) {
        T v[ITEMS];
        if (base + tile <= nv) {              // full tile: no bounds checks
#pragma unroll
            for (int u = 0; u < ITEMS; ++u) v[u] = load(xv + base + u * THREADS + tid);
#pragma unroll
            for (int u = 0; u < ITEMS; ++u) store(yv + base + u * THREADS + tid, apply(v[u]));
        } else {
#pragma unroll
            for (int u = 0; u < ITEMS; ++u) {
                const long long i = base + u * THREADS + tid;
                if (i < nv) v[u] = load(xv + i);
            }
#pragma unroll
            for (int u = 0; u < ITEMS; ++u) {
                const long long i = base + u * THREADS + tid;
                if (i < nv) store(yv + i, apply(v[u]));
            }
        }
    }
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
static int run(const float* x, float* y, long long n, int head, cudaStream_t stream) {
    const long long nv = (n - head) / V;
    const long long tile = (long long)THREADS * ITEMS;
    long long blocks = (nv + tile - 1) / tile;
    if (BLOCKS_PER_SM > 0) {
        int sms = 0;
        const int err = sm_count(&sms);
        if (err) return err;
        const long long cap = (long long)sms * BLOCKS_PER_SM;
        if (blocks > cap) blocks = cap;
    }
    if (blocks < 1) blocks = 1;               // block 0 also does the scalar head and tail
    sigmoid_vec<V><<<(unsigned)blocks, THREADS, 0, stream>>>(x, y, n, head);
    return (int)cudaGetLastError();
}

extern "C" int launch(const float* x, float* y, int n, cudaStream_t stream) {
    if (n <= 0) return 0;
    const long long count = n;
    if (VEC > 1) {
        const uintptr_t bytes = VEC * sizeof(float);
        const uintptr_t ax = (uintptr_t)x % bytes, ay = (uintptr_t)y % bytes;
        if (ax == ay && ax % sizeof(float) == 0) {
            long long head = (long long)((bytes - ax) % bytes / sizeof(float));
            if (head > count) head = count;
            return run<VEC>(x, y, count, (int)head, stream);
        }
    }
    return run<1>(x, y, count, 0, stream);
}
