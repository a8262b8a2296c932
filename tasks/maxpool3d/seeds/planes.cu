// maxpool3d family: one output plane (n, c, od) per grid row, THREADS * ITEMS outputs of that
// plane per block. Plane and in-plane coordinates are split once (64-bit plane index, 32-bit
// oh/ow), the 27 taps are fully unrolled with compile-time kernel/stride/padding/dilation
// (3, 2, 1, 3, the task's values; a generic kernel takes any other values at run time), a
// tap outside the input is skipped per axis (d, then h, then w), and each thread keeps ITEMS independent
// outputs (strided by THREADS, so warps stay coalesced) in flight. The running max starts at
// -inf: padding never contributes, all-negative and huge-negative inputs stay exact.
#include <cuda_runtime.h>
#include <math.h>

#define THREADS 256         // knob: 64 128 256 512
#define ITEMS 2             // knob: 1 2 4 8
#define MIN_BLOCKS 0        // knob: 0 2 4 8
// Knob constraints (evo_fsr/knobs.py): a block covers at most 2048 outputs of a plane (a
// 64x64 input gives 30x30 = 900), and the blocks asked to be resident fit an SM's 2048 threads.
// constraint: THREADS * ITEMS <= 2048
// constraint: THREADS * MIN_BLOCKS <= 2048

static_assert(THREADS * ITEMS <= 2048, "knob constraint: THREADS * ITEMS <= 2048");
static_assert(THREADS * MIN_BLOCKS <= 2048, "knob constraint: THREADS * MIN_BLOCKS <= 2048");
static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS: a warp multiple <= 1024");
static_assert(ITEMS >= 1, "ITEMS must be positive");

#if MIN_BLOCKS > 0
#define BOUNDS __launch_bounds__(THREADS, MIN_BLOCKS)
#else
#define BOUNDS __launch_bounds__(THREADS)
#endif

#define MAX_GRID_Y 65535

struct Geometry {
    int D, H, W, OD, OH, OW;
    long long planes;        // N * C * OD
};

// FIXED: kernel 3, stride 2, padding 1, dilation 3 as constants; otherwise the run-time values.
template <bool FIXED>
__global__ void BOUNDS
maxpool3d_planes(const float* __restrict__ x, float* __restrict__ y, Geometry g, int ks_rt, int st_rt,
                 int pad_rt, int dil_rt) {
    const int ks = FIXED ? 3 : ks_rt;
    const int st = FIXED ? 2 : st_rt;
    const int pad = FIXED ? 1 : pad_rt;
    const int dil = FIXED ? 3 : dil_rt;
    const int plane_size = g.OH * g.OW;
    const long long in_plane = (long long)g.H * g.W;
    const long long in_volume = in_plane * g.D;
    for (long long p = blockIdx.y; p < g.planes; p += gridDim.y) {
        const long long nc = p / g.OD;
        const int od = (int)(p - nc * g.OD);
        const float* xc = x + nc * in_volume;
        float* yp = y + p * plane_size;
        const int d0 = od * st - pad;
        const int q0 = blockIdx.x * (THREADS * ITEMS) + threadIdx.x;
        float best[ITEMS];
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            best[it] = -INFINITY;
            const int q = q0 + it * THREADS;
            if (q >= plane_size) continue;
            const int oh = q / g.OW;
            const int ow = q - oh * g.OW;
            const int h0 = oh * st - pad;
            const int w0 = ow * st - pad;
            float m = -INFINITY;
            if (FIXED) {
#pragma unroll
                for (int kd = 0; kd < 3; ++kd) {
                    const int d = d0 + kd * 3;
                    if (d < 0 || d >= g.D) continue;
#pragma unroll
                    for (int kh = 0; kh < 3; ++kh) {
                        const int h = h0 + kh * 3;
                        if (h < 0 || h >= g.H) continue;
                        const float* xrow = xc + (long long)d * in_plane + (long long)h * g.W;
#pragma unroll
                        for (int kw = 0; kw < 3; ++kw) {
                            const int w = w0 + kw * 3;
                            if (w >= 0 && w < g.W) m = fmaxf(m, __ldg(xrow + w));
                        }
                    }
                }
            } else {
                for (int kd = 0; kd < ks; ++kd) {
                    const int d = d0 + kd * dil;
                    if (d < 0 || d >= g.D) continue;
                    for (int kh = 0; kh < ks; ++kh) {
                        const int h = h0 + kh * dil;
                        if (h < 0 || h >= g.H) continue;
                        const float* xrow = xc + (long long)d * in_plane + (long long)h * g.W;
                        for (int kw = 0; kw < ks; ++kw) {
                            const int w = w0 + kw * dil;
                            if (w >= 0 && w < g.W) m = fmaxf(m, __ldg(xrow + w));
                        }
                    }
                }
            }
            best[it] = m;
        }
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int q = q0 + it * THREADS;
            if (q < plane_size) yp[q] = best[it];
        }
    }
}

extern "C" int launch(const float* x, float* y, int N, int C, int D, int H, int W,
                      int kernel_size, int stride, int padding, int dilation, cudaStream_t stream) {
    const int span = dilation * (kernel_size - 1) + 1;
    Geometry g;
    g.D = D;
    g.H = H;
    g.W = W;
    g.OD = (D + 2 * padding - span) / stride + 1;
    g.OH = (H + 2 * padding - span) / stride + 1;
    g.OW = (W + 2 * padding - span) / stride + 1;
    if (N <= 0 || C <= 0 || g.OD <= 0 || g.OH <= 0 || g.OW <= 0) return 0;
    g.planes = (long long)N * C * g.OD;
    const long long plane_size = (long long)g.OH * g.OW;
    const dim3 grid((unsigned)((plane_size + THREADS * ITEMS - 1) / (THREADS * ITEMS)),
                    (unsigned)(g.planes < MAX_GRID_Y ? g.planes : MAX_GRID_Y));
    if (kernel_size == 3 && stride == 2 && padding == 1 && dilation == 3)
        maxpool3d_planes<true><<<grid, THREADS, 0, stream>>>(x, y, g, kernel_size, stride, padding, dilation);
    else
        maxpool3d_planes<false><<<grid, THREADS, 0, stream>>>(x, y, g, kernel_size, stride, padding, dilation);
    return (int)cudaGetLastError();
}
