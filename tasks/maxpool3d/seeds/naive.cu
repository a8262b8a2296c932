// maxpool3d naive seed: one thread per output element (grid-stride), a direct 3x3x3 dilated
// window scan; out-of-range positions are skipped (padding acts as -infinity).
#include <cuda_runtime.h>
#include <math.h>

__global__ void maxpool3d_naive(const float* __restrict__ x, float* __restrict__ y, int N, int C,
                                int D, int H, int W, int OD, int OH, int OW, int ks, int stride,
                                int pad, int dil) {
    const long long total = (long long)N * C * OD * OH * OW;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        int ow = (int)(idx % OW);
        int oh = (int)((idx / OW) % OH);
        int od = (int)((idx / ((long long)OW * OH)) % OD);
        long long nc = idx / ((long long)OW * OH * OD);
        const float* xc = x + nc * D * H * W;
        float m = -INFINITY;
        for (int kd = 0; kd < ks; ++kd) {
            int d = od * stride - pad + kd * dil;
            if (d < 0 || d >= D) continue;
            for (int kh = 0; kh < ks; ++kh) {
                int h = oh * stride - pad + kh * dil;
                if (h < 0 || h >= H) continue;
                for (int kw = 0; kw < ks; ++kw) {
                    int w = ow * stride - pad + kw * dil;
                    if (w < 0 || w >= W) continue;
                    m = fmaxf(m, xc[((long long)d * H + h) * W + w]);
                }
            }
        }
        y[idx] = m;
    }
}

extern "C" int launch(const float* x, float* y, int N, int C, int D, int H, int W,
                      int kernel_size, int stride, int padding, int dilation, cudaStream_t stream) {
    int span = dilation * (kernel_size - 1) + 1;
    int OD = (D + 2 * padding - span) / stride + 1;
    int OH = (H + 2 * padding - span) / stride + 1;
    int OW = (W + 2 * padding - span) / stride + 1;
    long long total = (long long)N * C * OD * OH * OW;
    if (total <= 0) return 0;
    int threads = 256;
    long long blocks = (total + threads - 1) / threads;
    if (blocks > 65535LL * 32) blocks = 65535LL * 32;
    maxpool3d_naive<<<(unsigned)blocks, threads, 0, stream>>>(x, y, N, C, D, H, W, OD, OH, OW,
                                                               kernel_size, stride, padding, dilation);
    return (int)cudaGetLastError();
}
