// topk naive seed: one thread per element counts its rank in the total order
// (value descending, then index ascending) against every element, tiled through shared
// memory; elements with rank < K write themselves to values[rank] / indices[rank].
// The ranks are a permutation of 0..N-1, so each of the K slots is written exactly once.
// O(N^2) comparisons: simple and deterministic, the baseline of every speedup.
#include <cuda_runtime.h>

#define THREADS 256

__global__ void __launch_bounds__(THREADS)
topk_rank(const float* __restrict__ x, float* __restrict__ values, int* __restrict__ indices,
          int n, int k) {
    __shared__ float tile[THREADS];
    const int i = blockIdx.x * THREADS + threadIdx.x;
    const float xi = i < n ? x[i] : 0.0f;
    int rank = 0;
    for (int base = 0; base < n; base += THREADS) {
        const int m = min(THREADS, n - base);
        __syncthreads();
        if (threadIdx.x < m) tile[threadIdx.x] = x[base + threadIdx.x];
        __syncthreads();
        for (int jj = 0; jj < m; ++jj) {
            const float xj = tile[jj];
            const int j = base + jj;
            rank += (xj > xi) || (xj == xi && j < i);
        }
    }
    if (i < n && rank < k) {
        values[rank] = xi;
        indices[rank] = i;
    }
}

extern "C" int launch(const float* x, float* values, int* indices, int N, int K, cudaStream_t stream) {
    if (N <= 0 || K <= 0) return 0;
    unsigned blocks = (unsigned)((N + THREADS - 1) / THREADS);
    topk_rank<<<blocks, THREADS, 0, stream>>>(x, values, indices, N, K);
    return (int)cudaGetLastError();
}
