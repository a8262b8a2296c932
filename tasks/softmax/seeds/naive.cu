// softmax naive seed: one thread per row, three sequential passes (max, sum of exp, write).
// The row sum is accumulated in double: a float running sum over a long row swamps the small terms
// once it is large (each add below half an ulp of the sum is lost), and on a large_magnitude row
// of 262144 elements (a few dominant terms, many tiny ones) that made the sum 4.6e-4 too small
// and this seed fail the tolerance (H100, evolve's sweep on long_rows, 2026-11-24).
#include <cuda_runtime.h>

__global__ void softmax_naive(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (long long)r * cols;
    float* yr = y + (long long)r * cols;
    float m = xr[0];
    for (int c = 1; c < cols; ++c) m = fmaxf(m, xr[c]);
    double s = 0.0;
    for (int c = 0; c < cols; ++c) s += (double)expf(xr[c] - m);
    float inv = (float)(1.0 / s);
    for (int c = 0; c < cols; ++c) yr[c] = expf(xr[c] - m) * inv;
}

extern "C" int launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    int threads = 128;
    unsigned blocks = (unsigned)((rows + threads - 1) / threads);
    softmax_naive<<<blocks, threads, 0, stream>>>(x, y, rows, cols);
    return (int)cudaGetLastError();
}
