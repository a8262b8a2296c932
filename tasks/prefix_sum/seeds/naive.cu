// prefix_sum naive seed: the textbook three-phase scan.
//  1. each block of 1024 threads scans its 1024-element chunk in shared memory
//     (Hillis-Steele) and stores the chunk total in workspace[block];
//  2. one block scans the chunk totals in place (1024 at a time, with a running carry);
//  3. every chunk but the first adds the inclusive total of the chunks before it.
#include <cuda_runtime.h>

#define CHUNK 1024

__global__ void __launch_bounds__(CHUNK)
scan_chunks(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ workspace, long long n) {
    __shared__ float s[CHUNK];
    const int t = threadIdx.x;
    const long long i = (long long)blockIdx.x * CHUNK + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int off = 1; off < CHUNK; off <<= 1) {
        float v = t >= off ? s[t - off] : 0.0f;
        __syncthreads();
        s[t] += v;
        __syncthreads();
    }
    if (i < n) y[i] = s[t];
    if (t == CHUNK - 1) workspace[blockIdx.x] = s[CHUNK - 1];
}

__global__ void __launch_bounds__(CHUNK)
scan_totals(float* __restrict__ workspace, long long chunks) {
    __shared__ float s[CHUNK];
    const int t = threadIdx.x;
    float carry = 0.0f;
    for (long long base = 0; base < chunks; base += CHUNK) {
        const long long i = base + t;
        s[t] = i < chunks ? workspace[i] : 0.0f;
        __syncthreads();
        for (int off = 1; off < CHUNK; off <<= 1) {
            float v = t >= off ? s[t - off] : 0.0f;
            __syncthreads();
            s[t] += v;
            __syncthreads();
        }
        if (i < chunks) workspace[i] = s[t] + carry;
        const float total = s[CHUNK - 1];
        __syncthreads();
        carry += total;
    }
}

__global__ void __launch_bounds__(CHUNK)
add_carries(float* __restrict__ y, const float* __restrict__ workspace, long long n) {
    const long long chunk = (long long)blockIdx.x + 1;   // chunk 0 needs nothing
    const long long i = chunk * CHUNK + threadIdx.x;
    if (i < n) y[i] += workspace[chunk - 1];
}

extern "C" int launch(const float* x, float* y, float* workspace, int N, cudaStream_t stream) {
    const long long n = N;
    if (n <= 0) return 0;
    const long long chunks = (n + CHUNK - 1) / CHUNK;
    scan_chunks<<<(unsigned)chunks, CHUNK, 0, stream>>>(x, y, workspace, n);
    if (chunks > 1) {
        scan_totals<<<1, CHUNK, 0, stream>>>(workspace, chunks);
        add_carries<<<(unsigned)(chunks - 1), CHUNK, 0, stream>>>(y, workspace, n);
    }
    return (int)cudaGetLastError();
}
