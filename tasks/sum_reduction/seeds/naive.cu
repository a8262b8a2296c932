// sum_reduction naive seed: a fixed grid of blocks, each thread sums a grid-stride slice,
// each block reduces its threads in shared memory and stores a partial in workspace; a second
// one-block kernel reduces the partials into out[0]. Deterministic (no atomics).
#include <cuda_runtime.h>

#define THREADS 256
#define MAX_BLOCKS 1024

__global__ void __launch_bounds__(THREADS)
partial_sums(const float* __restrict__ x, float* __restrict__ workspace, long long n) {
    __shared__ float s[THREADS];
    float acc = 0.0f;
    const long long stride = (long long)gridDim.x * THREADS;
    for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < n; i += stride)
        acc += x[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) workspace[blockIdx.x] = s[0];
}

__global__ void __launch_bounds__(MAX_BLOCKS)
final_sum(const float* __restrict__ workspace, float* __restrict__ out, int parts) {
    __shared__ float s[MAX_BLOCKS];
    s[threadIdx.x] = threadIdx.x < parts ? workspace[threadIdx.x] : 0.0f;
    __syncthreads();
    for (int half = MAX_BLOCKS / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = s[0];
}

extern "C" int launch(const float* x, float* out, float* workspace, int N, cudaStream_t stream) {
    long long n = N;
    long long want = (n + THREADS - 1) / THREADS;
    int blocks = (int)(want < 1 ? 1 : (want > MAX_BLOCKS ? MAX_BLOCKS : want));
    partial_sums<<<blocks, THREADS, 0, stream>>>(x, workspace, n);
    final_sum<<<1, MAX_BLOCKS, 0, stream>>>(workspace, out, blocks);
    return (int)cudaGetLastError();
}
