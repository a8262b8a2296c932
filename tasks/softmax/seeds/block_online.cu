// softmax seed: one block per row. Each thread keeps an online (max, sum of exp) pair over a
// strided slice of the row; the pairs are merged with warp shuffles and shared memory; a second
// pass over the row writes exp(x - max) / sum. Rows of any length (1 .. millions) are handled.
#include <cuda_runtime.h>
#include <math.h>

#define THREADS 256  // knob: 128 256 512 1024
#define UNROLL 4     // knob: 1 2 4 8

static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS must be a warp multiple <= 1024");
static_assert(UNROLL >= 1, "UNROLL must be positive");

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    float mx = fmaxf(m, m2);
    float a = (m == -INFINITY) ? 0.0f : s * expf(m - mx);
    float b = (m2 == -INFINITY) ? 0.0f : s2 * expf(m2 - mx);
    m = mx;
    s = a + b;
}

__global__ void __launch_bounds__(THREADS)
softmax_block(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    __shared__ float sm[THREADS / 32], ss[THREADS / 32];
    const long long r = blockIdx.x;
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const int tid = threadIdx.x;

    float m = -INFINITY, s = 0.0f;
    int c = tid;
    for (; c + (UNROLL - 1) * THREADS < cols; c += UNROLL * THREADS) {
        float v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = xr[c + u * THREADS];
        float vm = v[0];
#pragma unroll
        for (int u = 1; u < UNROLL; ++u) vm = fmaxf(vm, v[u]);
        float vs = 0.0f;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) vs += expf(v[u] - vm);
        merge(m, s, vm, vs);
    }
    for (; c < cols; c += THREADS) merge(m, s, xr[c], 1.0f);

#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge(m, s, m2, s2);
    }
    const int warp = tid / 32, lane = tid % 32;
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = (lane < THREADS / 32) ? sm[lane] : -INFINITY;
        s = (lane < THREADS / 32) ? ss[lane] : 0.0f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, off);
            float s2 = __shfl_xor_sync(0xffffffffu, s, off);
            merge(m, s, m2, s2);
        }
        if (lane == 0) { sm[0] = m; ss[0] = s; }
    }
    __syncthreads();
    const float rm = sm[0];
    const float inv = 1.0f / ss[0];
    for (int k = tid; k < cols; k += THREADS) yr[k] = expf(xr[k] - rm) * inv;
}

extern "C" int launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    softmax_block<<<(unsigned)rows, THREADS, 0, stream>>>(x, y, rows, cols);
    return (int)cudaGetLastError();
}
