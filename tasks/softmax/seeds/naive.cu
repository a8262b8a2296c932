// softmax naive seed: one thread per row, three sequential passes (max, sum of exp, write).
#include <cuda_runtime.h>

__global__ void softmax_naive(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (long long)r * cols;
    float* yr = y + (long long)r * cols;
    float m = xr[0];
    for (int c = 1; c < cols; ++c) m = fmaxf(m, xr[c]);
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += expf(xr[c] - m);
    float inv = 1.0f / s;
    for (int c = 0; c < cols; ++c) yr[c] = expf(xr[c] - m) * inv;
}

extern "C" int launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    int threads = 128;
    unsigned blocks = (unsigned)((rows + threads - 1) / threads);
    softmax_naive<<<blocks, threads, 0, stream>>>(x, y, rows, cols);
    return (int)cudaGetLastError();
}
