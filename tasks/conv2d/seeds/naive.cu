// conv2d naive seed: one thread per output element, direct loops. The baseline of every speedup.
#include <cuda_runtime.h>

__global__ void conv2d_naive(const float* __restrict__ x, const float* __restrict__ w,
                             float* __restrict__ y, int N, int C, int H, int W, int K, int R,
                             int S, int pad, int stride, int P, int Q) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long total = (long long)N * K * P * Q;
    if (idx >= total) return;
    int q = idx % Q;
    int p = (idx / Q) % P;
    int k = (idx / ((long long)P * Q)) % K;
    int n = idx / ((long long)K * P * Q);
    float acc = 0.0f;
    for (int c = 0; c < C; ++c)
        for (int r = 0; r < R; ++r) {
            int h = p * stride - pad + r;
            if (h < 0 || h >= H) continue;
            for (int s = 0; s < S; ++s) {
                int wi = q * stride - pad + s;
                if (wi < 0 || wi >= W) continue;
                acc += x[(((long long)n * C + c) * H + h) * W + wi] * w[((k * C + c) * R + r) * S + s];
            }
        }
    y[idx] = acc;
}

extern "C" int launch(const float* x, const float* w, float* y, int N, int C, int H, int W,
                      int K, int R, int S, int pad, int stride, cudaStream_t stream) {
    int P = (H + 2 * pad - R) / stride + 1;
    int Q = (W + 2 * pad - S) / stride + 1;
    long long total = (long long)N * K * P * Q;
    int threads = 256;
    unsigned blocks = (unsigned)((total + threads - 1) / threads);
    conv2d_naive<<<blocks, threads, 0, stream>>>(x, w, y, N, C, H, W, K, R, S, pad, stride, P, Q);
    return (int)cudaGetLastError();
}
