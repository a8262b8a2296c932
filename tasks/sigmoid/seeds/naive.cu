// sigmoid naive seed: one thread per element (grid-stride), y = 1 / (1 + expf(-x)).
// expf(-x) overflows to +inf for x < -88.7, giving 1/inf = 0: the correct limit.
#include <cuda_runtime.h>

__global__ void sigmoid_naive(const float* __restrict__ x, float* __restrict__ y, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = 1.0f / (1.0f + expf(-x[i]));
}

extern "C" int launch(const float* x, float* y, int n, cudaStream_t stream) {
    int threads = 256;
    long long blocks = ((long long)n + threads - 1) / threads;
    if (blocks > 65535LL * 16) blocks = 65535LL * 16;
    if (blocks < 1) blocks = 1;
    sigmoid_naive<<<(unsigned)blocks, threads, 0, stream>>>(x, y, (long long)n);
    return (int)cudaGetLastError();
}
