// histogram family: privatized shared-memory histograms with warp aggregation.
// A persistent grid (BLOCKS_PER_SM blocks per SM) streams x as int4 vectors (a scalar head brings
// the pointer to 16 bytes, a scalar tail finishes), ITEMS vectors per lane in flight, in
// warp-uniform iterations (so warp-wide intrinsics always see the full warp). Each warp counts
// into one of COPIES shared-memory copies of the 256 bins (fewer warps contending on one
// address). AGG chooses how a warp's 32 values reach shared memory:
//   0: one shared atomicAdd per value;
//   1: __match_any_sync groups equal values, the lowest lane adds the group's size (runs and
//      skewed inputs cost one atomic per distinct value per warp);
//   2: one atomicAdd of 32 when the whole warp holds one value (one_bin), else one per value.
// At the end each block adds its non-zero bins to hist (zeroed on the stream first) with global
// atomics: integer counts, so the result is exact in any order.
// FINISH 1 removes the cudaMemsetAsync node before the kernel (~2 us a call with its gap, against
// a ~30 us kernel at 2^24 values): blocks add their bins into a __device__ array g_bins (zero from
// module load) instead, and the last block to finish (a self-resetting ticket: atomicInc wraps
// g_done to 0 on the last increment) moves every bin to hist with atomicExch(&g_bins[b], 0), which
// writes every bin of hist, empty ones included, and leaves g_bins zero for the next call (a call
// that faults poisons the context anyway). Integer counts: exact, as with FINISH 0.
// Measured (seventeenth session, one H100, one evaluate.py process, x of torch on uniform_2^24 /
// uniform_5e7 / gaussian_2^24): FINISH 0 7.50x / 6.65x / 8.27x, FINISH 1 7.26x / 6.55x / 8.00x:
// the last block's exchange costs more than the memset node it replaces, so the default stays 0.
#include <cuda_runtime.h>
#include <stdint.h>

#define THREADS 512         // knob: 256 512 1024
#define COPIES 4            // knob: 1 2 4 8 16
#define AGG 2               // knob: 0 1 2
#define BLOCKS_PER_SM 2     // knob: 1 2 4
#define ITEMS 4             // knob: 1 2 4
#define VEC 4               // knob: 1 4
#define FINISH 0            // knob: 0 1
// Knob constraints (evo_fsr/knobs.py): each copy belongs to at least one warp, and the blocks
// asked for per SM fit its 2048 threads.
// constraint: COPIES <= THREADS // 32
// constraint: THREADS * BLOCKS_PER_SM <= 2048

static_assert(COPIES <= THREADS / 32, "knob constraint: COPIES <= THREADS // 32");
static_assert(THREADS * BLOCKS_PER_SM <= 2048, "knob constraint: THREADS * BLOCKS_PER_SM <= 2048");
static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS: a warp multiple <= 1024");
static_assert(AGG >= 0 && AGG <= 2, "AGG must be 0, 1 or 2");
static_assert(VEC == 1 || VEC == 4, "VEC must be 1 or 4");
static_assert(ITEMS >= 1, "ITEMS must be positive");
static_assert(FINISH == 0 || FINISH == 1, "FINISH must be 0 or 1");

#define BINS 256
#define NWARPS (THREADS / 32)

__device__ unsigned int g_bins[BINS];    // FINISH 1: this call's counts so far (zero between calls)
__device__ unsigned int g_done;          // FINISH 1: blocks finished in this call

// Count value v (when valid) into the shared bins h; called by all 32 lanes of the warp.
__device__ __forceinline__ void count(unsigned int* h, int v, bool valid) {
    valid = valid && (unsigned)v < BINS;                 // the task never gives other values
    if (AGG == 1) {
        const unsigned key = valid ? (unsigned)v : 0xffffffffu;
        const unsigned peers = __match_any_sync(0xffffffffu, key);
        const int lane = threadIdx.x & 31;
        if (valid && lane == __ffs(peers) - 1) atomicAdd(h + v, (unsigned)__popc(peers));
    } else if (AGG == 2) {
        const unsigned key = valid ? (unsigned)v : 0xffffffffu;
        const unsigned first = __shfl_sync(0xffffffffu, key, 0);
        if (__all_sync(0xffffffffu, key == first)) {
            if ((threadIdx.x & 31) == 0 && valid) atomicAdd(h + v, 32u);
        } else if (valid) {
            atomicAdd(h + v, 1u);
        }
    } else {
        if (valid) atomicAdd(h + v, 1u);
    }
}

template <int V>
__device__ __forceinline__ void load_vec(const int* __restrict__ p, int* v) {
    if constexpr (V == 4) {
        const int4 t = __ldg(reinterpret_cast<const int4*>(p));
        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
    } else {
        v[0] = __ldg(p);
    }
}

__global__ void __launch_bounds__(THREADS)
histogram_privatized(const int* __restrict__ x, int* __restrict__ hist, long long n) {
    __shared__ unsigned int bins[COPIES * BINS];
    for (int i = threadIdx.x; i < COPIES * BINS; i += THREADS) bins[i] = 0u;
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned int* h = bins + (warp % COPIES) * BINS;

    // Vectors of V ints from x + head (16-byte aligned when V == 4).
    constexpr int V = VEC;
    const int head = V == 4 ? (int)(((16u - ((uintptr_t)x & 15u)) & 15u) >> 2) : 0;
    const long long h_n = head < n ? head : n;
    const long long nvec = (n - h_n) / V;
    const int* body = x + h_n;
    const long long warps = (long long)gridDim.x * NWARPS;
    const long long step = warps * 32 * ITEMS;
    for (long long base = ((long long)blockIdx.x * NWARPS + warp) * 32 * ITEMS; base < nvec; base += step) {
        int v[ITEMS][V];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const long long j = base + i * 32 + lane;
            if (j < nvec) {
                load_vec<V>(body + j * V, v[i]);
            } else {
#pragma unroll
                for (int k = 0; k < V; ++k) v[i][k] = -1;
            }
        }
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
#pragma unroll
            for (int k = 0; k < V; ++k) count(h, v[i][k], base + i * 32 + lane < nvec);
    }
    // Scalar head (< 4 elements) and tail (< V elements): the first warp of block 0.
    if (blockIdx.x == 0 && warp == 0) {
        const long long tail0 = h_n + nvec * V;
        const long long tail_n = n - tail0;               // 0 .. V-1
        bool valid = false;
        long long e = 0;
        if (lane < h_n) {
            valid = true;
            e = lane;
        } else if (lane >= 4 && lane - 4 < tail_n) {
            valid = true;
            e = tail0 + (lane - 4);
        }
        count(h, valid ? __ldg(x + e) : -1, valid);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += THREADS) {
        unsigned int total = 0u;
#pragma unroll
        for (int c = 0; c < COPIES; ++c) total += bins[c * BINS + b];
#if FINISH
        if (total) atomicAdd(g_bins + b, total);
#else
        if (total) atomicAdd(hist + b, (int)total);
#endif
    }
#if FINISH
    __shared__ bool last;
    __threadfence();                                     // this thread's bins before the ticket
    __syncthreads();
    if (threadIdx.x == 0) last = atomicInc(&g_done, gridDim.x - 1) == gridDim.x - 1;   // wraps to 0
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int b = threadIdx.x; b < BINS; b += THREADS) hist[b] = (int)atomicExch(g_bins + b, 0u);
#endif
}

// The SM count, looked up once per device (a batch of short calls must not wait on the host).
static int sm_count() {
    static int cached_dev = -1, cached_sms = 132;
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 132;
    if (dev == cached_dev) return cached_sms;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) sms = 132;
    cached_dev = dev;
    cached_sms = sms;
    return sms;
}

extern "C" int launch(const int* x, int* hist, int N, cudaStream_t stream) {
    const long long n = N;
    if (FINISH == 0 || n <= 0) {                         // FINISH 1: the last block writes hist
        const cudaError_t err = cudaMemsetAsync(hist, 0, BINS * sizeof(int), stream);
        if (err != cudaSuccess) return (int)err;
    }
    if (n <= 0) return 0;
    const long long per_block = (long long)THREADS * ITEMS * VEC;
    long long grid = (n + per_block - 1) / per_block;
    const long long cap = (long long)sm_count() * BLOCKS_PER_SM;
    if (grid > cap) grid = cap;
    if (grid < 1) grid = 1;
    histogram_privatized<<<(unsigned)grid, THREADS, 0, stream>>>(x, hist, n);
    return (int)cudaGetLastError();
}
