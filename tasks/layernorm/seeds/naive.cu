// layernorm naive seed: one thread per row, two-pass mean and variance, then a write pass.
// The row sums are taken in double: one float running sum of 65536 squared deviations drifts by
// 2.3e-4 of the variance on the large_mean inputs (values on a 1/16 grid: the roundings are biased,
// not random), which fails the tolerance at long_rows; in double the seed is right on every draw.
#include <cuda_runtime.h>

__global__ void layernorm_naive(const float* __restrict__ x, const float* __restrict__ gamma,
                                const float* __restrict__ beta, float* __restrict__ y,
                                int rows, int cols, float eps) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (long long)r * cols;
    float* yr = y + (long long)r * cols;
    double s = 0.0;
    for (int c = 0; c < cols; ++c) s += (double)xr[c];
    float mean = (float)(s / (double)cols);
    double v = 0.0;
    for (int c = 0; c < cols; ++c) {
        double d = (double)xr[c] - (double)mean;
        v += d * d;
    }
    float rstd = 1.0f / sqrtf((float)(v / (double)cols) + eps);
    for (int c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
}

extern "C" int launch(const float* x, const float* gamma, const float* beta, float* y, int rows,
                      int cols, float eps, cudaStream_t stream) {
    int threads = 128;
    unsigned blocks = (unsigned)((rows + threads - 1) / threads);
    layernorm_naive<<<blocks, threads, 0, stream>>>(x, gamma, beta, y, rows, cols, eps);
    return (int)cudaGetLastError();
}
