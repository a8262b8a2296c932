// reverse naive seed: one thread per pair (i, N-1-i) with i < N/2 swaps the two values.
#include <cuda_runtime.h>

__global__ void reverse_naive(float* __restrict__ x, long long n) {
    long long half = n / 2;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < half; i += stride) {
        long long j = n - 1 - i;
        float a = x[i];
        float b = x[j];
        x[i] = b;
        x[j] = a;
    }
}

extern "C" int launch(float* x, int N, cudaStream_t stream) {
    long long half = (long long)N / 2;
    if (half <= 0) return (int)cudaGetLastError();
    int threads = 256;
    long long want = (half + threads - 1) / threads;
    unsigned blocks = (unsigned)(want < (1LL << 20) ? want : (1LL << 20));
    reverse_naive<<<blocks, threads, 0, stream>>>(x, (long long)N);
    return (int)cudaGetLastError();
}
