// reverse seed family (in place): pair i (0 <= i < N/2) swaps x[i] and x[N-1-i].
//
// Two kernels, chosen per call in launch() (regime dispatch):
//   direct: each thread swaps ITEMS pairs of VEC-wide vectors, all loads before any store: the
//           front vector at f = h + VEC*k and its mirror at N - VEC - f, components reversed.
//           Both are VEC*4-byte aligned only when (N - 2h) % VEC == 0, h being the scalar head
//           that aligns x; the < VEC pairs before f = h and after the last full vector pair are
//           swapped as scalars by block 0. With VEC = 1 it is the plain scalar kernel, for any N.
//   staged: for the other N (odd N, for instance, can never have both sides aligned): block s
//           owns the pairs [s*SEG, min((s+1)*SEG, N/2)) with SEG = THREADS*ITEMS*VEC; it reads
//           its front segment and the mirrored back segment into shared memory (each with its
//           own scalar head/tail and VEC-wide aligned loads), synchronises, and writes each
//           segment with the other one reversed (VEC-wide aligned stores). Shared memory is
//           indexed e + e/32, which keeps the VEC-strided accesses (at most 2-way) conflict-free.
//           Segments of different blocks are disjoint and every read precedes every write in a
//           block, so no block sees another's writes.
//   STAGED = 0 sends those N to the direct kernel with VEC = 1 instead.
// N = 1 (and N = 0) leaves x unchanged: nothing is launched. Indices are 64-bit.
#include <cuda_runtime.h>
#include <stdint.h>

#define THREADS 256        // knob: 128 256 512 1024
#define ITEMS 4            // knob: 1 2 4 8
#define VEC 4              // knob: 1 2 4
#define STAGED 1           // knob: 0 1
#define STREAMING 0        // knob: 0 1
// Knob constraints (evo_fsr/knobs.py), enforced by the static_asserts below: the direct kernel
// holds 2 * VEC * ITEMS floats per thread (32 registers at most: at 1024 threads 64 is the cap,
// and 4 x 8 spills). It also keeps the staged kernel's two padded segments (at most
// 1024 * 16 pairs, 132 KB) within the 227 KB of shared memory a block may have.
// constraint: VEC * ITEMS <= 16

// STREAMING: 1 uses __ldcs / __stcs (evict-first: every element is touched once), 0 plain ld/st.
static_assert(VEC * ITEMS <= 16, "more than 2 x 16 floats in flight per thread: spills at 1024 threads");
static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC must be 1, 2 or 4");
static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS must be a warp multiple <= 1024");
static_assert(ITEMS >= 1, "ITEMS must be positive");
static_assert(STAGED == 0 || STAGED == 1, "STAGED must be 0 or 1");
static_assert(THREADS >= 2 * VEC, "block 0 swaps up to 2*(VEC-1) scalar pairs, one per thread");

#define SEG (THREADS * ITEMS * VEC)                 // pairs per block in the staged kernel
#define SEG_PADDED (SEG + SEG / 32 + 1)             // floats per padded shared-memory segment
#define STAGED_SMEM_BYTES (2 * SEG_PADDED * (int)sizeof(float))
static_assert(STAGED == 0 || STAGED_SMEM_BYTES <= 227 * 1024, "staged segments larger than shared memory");

template <int V> struct VecOf;
template <> struct VecOf<1> { typedef float T; };
template <> struct VecOf<2> { typedef float2 T; };
template <> struct VecOf<4> { typedef float4 T; };

template <typename T> __device__ __forceinline__ T load(const T* p) {
#if STREAMING
    return __ldcs(p);
#else
    return *p;
#endif
}
template <typename T> __device__ __forceinline__ void store(T* p, T v) {
#if STREAMING
    __stcs(p, v);
#else
    *p = v;
#endif
}

__device__ __forceinline__ float reversed(float v) { return v; }
__device__ __forceinline__ float2 reversed(float2 v) { return make_float2(v.y, v.x); }
__device__ __forceinline__ float4 reversed(float4 v) { return make_float4(v.w, v.z, v.y, v.x); }

// ---- direct kernel ------------------------------------------------------------------------
// Vector pairs k in [0, K): front [f, f+V) with f = h + V*k, back [n-V-f, n-f); f + V <= n/2.
template <int V>
__global__ void __launch_bounds__(THREADS)
reverse_direct(float* x, long long n, int h, long long K) {
    typedef typename VecOf<V>::T T;
    const int tid = threadIdx.x;
    if (blockIdx.x == 0) {                    // scalar pairs [0, min(h, half)) and [h + V*K, half)
        const long long half = n / 2;
        const long long s1 = h < half ? h : half;
        const long long e2 = h + (long long)V * K;
        const long long c2 = half > e2 ? half - e2 : 0;
        long long i = -1;
        if (tid < s1) i = tid;
        else if (tid - s1 < c2) i = e2 + (tid - s1);
        if (i >= 0) {
            const float a = x[i], b = x[n - 1 - i];
            x[i] = b;
            x[n - 1 - i] = a;
        }
    }
    const long long base = (long long)blockIdx.x * THREADS * ITEMS;
    T a[ITEMS], b[ITEMS];
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
        const long long k = base + u * THREADS + tid;
        if (k < K) {
            const long long f = h + (long long)V * k;
            a[u] = load(reinterpret_cast<const T*>(x + f));
            b[u] = load(reinterpret_cast<const T*>(x + (n - V - f)));
        }
    }
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
        const long long k = base + u * THREADS + tid;
        if (k < K) {
            const long long f = h + (long long)V * k;
            store(reinterpret_cast<T*>(x + f), reversed(b[u]));
            store(reinterpret_cast<T*>(x + (n - V - f)), reversed(a[u]));
        }
    }
}

// ---- staged kernel ------------------------------------------------------------------------
__device__ __forceinline__ int padded(int e) { return e + (e >> 5); }

// Elements of p before the first V*4-byte boundary (at most len).
template <int V> __device__ __forceinline__ int head_of(const float* p, int len) {
    const int mis = (int)(((uintptr_t)p / sizeof(float)) % V);
    const int h = (V - mis) % V;
    return h < len ? h : len;
}

__device__ __forceinline__ void put(float* s, int e, float v) { s[padded(e)] = v; }
__device__ __forceinline__ void put(float* s, int e, float2 v) { s[padded(e)] = v.x; s[padded(e + 1)] = v.y; }
__device__ __forceinline__ void put(float* s, int e, float4 v) {
    s[padded(e)] = v.x; s[padded(e + 1)] = v.y; s[padded(e + 2)] = v.z; s[padded(e + 3)] = v.w;
}
// The V values s[top], s[top-1], ... (a segment read backwards).
template <int V> __device__ __forceinline__ typename VecOf<V>::T get_reversed(const float* s, int top);
template <> __device__ __forceinline__ float get_reversed<1>(const float* s, int top) { return s[padded(top)]; }
template <> __device__ __forceinline__ float2 get_reversed<2>(const float* s, int top) {
    return make_float2(s[padded(top)], s[padded(top - 1)]);
}
template <> __device__ __forceinline__ float4 get_reversed<4>(const float* s, int top) {
    return make_float4(s[padded(top)], s[padded(top - 1)], s[padded(top - 2)], s[padded(top - 3)]);
}

template <int V>
__global__ void __launch_bounds__(THREADS)
reverse_staged(float* x, long long n) {
    typedef typename VecOf<V>::T T;
    extern __shared__ float smem[];
    float* sF = smem;                         // front segment, padded
    float* sB = smem + SEG_PADDED;            // back segment, padded
    const int tid = threadIdx.x;
    const long long half = n / 2;
    const long long p0 = (long long)blockIdx.x * SEG;
    const int len = (int)(half - p0 < SEG ? half - p0 : SEG);    // > 0: grid = ceil(half / SEG)
    float* gF = x + p0;                       // front: x[p0 .. p0+len)
    float* gB = x + (n - p0 - len);           // back:  x[n-p0-len .. n-p0), its mirror
    const int hF = head_of<V>(gF, len), hB = head_of<V>(gB, len);
    const int nvF = (len - hF) / V, nvB = (len - hB) / V;
    const int tF = hF + nvF * V, tB = hB + nvB * V;              // scalar tails start here
    const T* vF = reinterpret_cast<const T*>(gF + hF);
    const T* vB = reinterpret_cast<const T*>(gB + hB);

    T rf[ITEMS], rb[ITEMS];
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
        const int j = u * THREADS + tid;
        if (j < nvF) rf[u] = load(vF + j);
        if (j < nvB) rb[u] = load(vB + j);
    }
    if (tid < hF) sF[padded(tid)] = gF[tid];
    if (tid < len - tF) sF[padded(tF + tid)] = gF[tF + tid];
    if (tid < hB) sB[padded(tid)] = gB[tid];
    if (tid < len - tB) sB[padded(tB + tid)] = gB[tB + tid];
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
        const int j = u * THREADS + tid;
        if (j < nvF) put(sF, hF + j * V, rf[u]);
        if (j < nvB) put(sB, hB + j * V, rb[u]);
    }
    __syncthreads();
    // front element e takes back element len-1-e, and back element e takes front element len-1-e
    T* wF = reinterpret_cast<T*>(gF + hF);
    T* wB = reinterpret_cast<T*>(gB + hB);
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
        const int j = u * THREADS + tid;
        if (j < nvF) store(wF + j, get_reversed<V>(sB, len - 1 - (hF + j * V)));
        if (j < nvB) store(wB + j, get_reversed<V>(sF, len - 1 - (hB + j * V)));
    }
    if (tid < hF) gF[tid] = sB[padded(len - 1 - tid)];
    if (tid < len - tF) gF[tF + tid] = sB[padded(len - 1 - (tF + tid))];
    if (tid < hB) gB[tid] = sF[padded(len - 1 - tid)];
    if (tid < len - tB) gB[tB + tid] = sF[padded(len - 1 - (tB + tid))];
}

// ---- launch -------------------------------------------------------------------------------
template <int V>
static int run_direct(float* x, long long n, int h, cudaStream_t stream) {
    const long long half = n / 2;
    const long long K = half > h ? (half - h) / V : 0;
    const long long per_block = (long long)THREADS * ITEMS;
    long long blocks = (K + per_block - 1) / per_block;
    if (blocks < 1) blocks = 1;               // block 0 also swaps the scalar pairs
    reverse_direct<V><<<(unsigned)blocks, THREADS, 0, stream>>>(x, n, h, K);
    return (int)cudaGetLastError();
}

#if STAGED
static int run_staged(float* x, long long n, cudaStream_t stream) {
    const long long half = n / 2;
    const long long blocks = (half + SEG - 1) / SEG;
    if (STAGED_SMEM_BYTES > 48 * 1024) {
        const cudaError_t err = cudaFuncSetAttribute(reverse_staged<VEC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     STAGED_SMEM_BYTES);
        if (err != cudaSuccess) return (int)err;
    }
    reverse_staged<VEC><<<(unsigned)blocks, THREADS, STAGED_SMEM_BYTES, stream>>>(x, n);
    return (int)cudaGetLastError();
}
#endif

extern "C" int launch(float* x, int N, cudaStream_t stream) {
    const long long n = N;
    if (n < 2) return 0;                      // nothing to swap
    if (VEC > 1) {
        const uintptr_t mis = ((uintptr_t)x / sizeof(float)) % VEC;
        const int h = (int)((VEC - mis) % VEC);   // scalar head that aligns x
        if ((uintptr_t)x % sizeof(float) == 0 && ((n - 2 * h) % VEC + VEC) % VEC == 0)
            return run_direct<VEC>(x, n, h, stream);
#if STAGED
        if ((uintptr_t)x % sizeof(float) == 0) return run_staged(x, n, stream);
#endif
    }
    return run_direct<1>(x, n, 0, stream);
}
