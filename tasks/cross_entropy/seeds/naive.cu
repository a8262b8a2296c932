// cross_entropy naive seed: one thread per row (grid-stride over rows) computes
// loss = (max - x[label]) + log(sum exp(x - max)) in float32; each block reduces its threads'
// sums in shared memory into one partial in the workspace; a single-block kernel sums the
// partials in a fixed order and writes sum / N. Deterministic, no atomics.
#include <cuda_runtime.h>
#include <math.h>

#define BLOCKS 1024
#define THREADS 256

__global__ void ce_partial(const float* __restrict__ logits, const int* __restrict__ labels,
                           float* __restrict__ partial, int N, int C) {
    __shared__ float sh[THREADS];
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < N;
         i += (long long)gridDim.x * THREADS) {
        const float* x = logits + i * C;
        float m = x[0];
        for (int c = 1; c < C; ++c) m = fmaxf(m, x[c]);
        float s = 0.0f;
        for (int c = 0; c < C; ++c) s += expf(x[c] - m);
        acc += (m - x[labels[i]]) + logf(s);
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int off = THREADS / 2; off > 0; off >>= 1) {
        if (threadIdx.x < off) sh[threadIdx.x] += sh[threadIdx.x + off];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void ce_final(const float* __restrict__ partial, int count, float* __restrict__ out, int N) {
    __shared__ float sh[THREADS];
    float s = 0.0f;
    for (int i = threadIdx.x; i < count; i += THREADS) s += partial[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int off = THREADS / 2; off > 0; off >>= 1) {
        if (threadIdx.x < off) sh[threadIdx.x] += sh[threadIdx.x + off];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (float)((double)sh[0] / (double)N);
}

extern "C" int launch(const float* logits, const int* labels, float* out, float* workspace, int N,
                      int C, cudaStream_t stream) {
    long long need = ((long long)N + THREADS - 1) / THREADS;
    int blocks = need < BLOCKS ? (int)need : BLOCKS;
    if (blocks < 1) blocks = 1;
    ce_partial<<<blocks, THREADS, 0, stream>>>(logits, labels, workspace, N, C);
    ce_final<<<1, THREADS, 0, stream>>>(workspace, blocks, out, N);
    return (int)cudaGetLastError();
}
