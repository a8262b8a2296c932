// transpose naive seed: one thread per output element (grid-stride); reads of x are strided.
#include <cuda_runtime.h>

__global__ void transpose_naive(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    const long long total = (long long)rows * cols;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < total;
         o += (long long)gridDim.x * blockDim.x) {
        long long c = o / rows;     // y is [cols, rows]
        long long r = o % rows;
        y[o] = x[r * cols + c];
    }
}

extern "C" int launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    long long total = (long long)rows * cols;
    if (total <= 0) return 0;
    int threads = 256;
    long long blocks = (total + threads - 1) / threads;
    if (blocks > 65535LL * 32) blocks = 65535LL * 32;
    transpose_naive<<<(unsigned)blocks, threads, 0, stream>>>(x, y, rows, cols);
    return (int)cudaGetLastError();
}
