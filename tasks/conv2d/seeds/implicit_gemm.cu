// conv2d seed: implicit GEMM with shared-memory tiles and a register micro-tile (fp32 FFMA).
// GEMM view: M = N*P*Q output pixels, Ncol = K filters, Kdim = C*R*S.
#include <cuda_runtime.h>

#define BLOCK_M 64   // knob: 32 64 128
#define BLOCK_N 64   // knob: 32 64 128
#define BLOCK_K 16   // knob: 8 16 32
#define THREAD_M 4   // knob: 2 4 8
#define THREAD_N 4   // knob: 2 4 8
#define MIN_BLOCKS 0 // knob: 0 1 2 4
// Knob constraints (evo_fsr/knobs.py): combinations that break one never reach nvcc.
// constraint: (BLOCK_M // THREAD_M) * (BLOCK_N // THREAD_N) >= 32
// constraint: (BLOCK_M // THREAD_M) * (BLOCK_N // THREAD_N) <= 1024
// Past 2048 resident threads per SM (sm_70 to sm_90) ptxas ignores MIN_BLOCKS: a duplicate.
// constraint: MIN_BLOCKS * (BLOCK_M // THREAD_M) * (BLOCK_N // THREAD_N) <= 2048

#define THREADS ((BLOCK_M / THREAD_M) * (BLOCK_N / THREAD_N))
static_assert(THREADS >= 32 && THREADS <= 1024, "knob combination gives an invalid block size");

// MIN_BLOCKS: resident blocks per SM that nvcc must allow for (caps registers per thread).
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
conv2d_igemm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
             int N, int C, int H, int W, int K, int R, int S, int pad, int stride, int P, int Q) {
    __shared__ float As[BLOCK_K][BLOCK_M + 1];
    __shared__ float Bs[BLOCK_K][BLOCK_N + 1];
    const int tid = threadIdx.x;
    const int tx = tid % (BLOCK_M / THREAD_M);
    const int ty = tid / (BLOCK_M / THREAD_M);
    const long long M = (long long)N * P * Q;
    const int RS = R * S;
    const int KD = C * RS;
    const long long m0 = (long long)blockIdx.x * BLOCK_M;
    const int n0 = blockIdx.y * BLOCK_N;

    float acc[THREAD_M][THREAD_N];
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
        for (int j = 0; j < THREAD_N; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < KD; k0 += BLOCK_K) {
        for (int e = tid; e < BLOCK_K * BLOCK_M; e += THREADS) {
            int kk = e / BLOCK_M, ml = e % BLOCK_M;
            long long m = m0 + ml;
            int kg = k0 + kk;
            float v = 0.0f;
            if (m < M && kg < KD) {
                int q = (int)(m % Q);
                int p = (int)((m / Q) % P);
                int n = (int)(m / ((long long)P * Q));
                int c = kg / RS, r = (kg / S) % R, s = kg % S;
                int h = p * stride - pad + r, wi = q * stride - pad + s;
                if (h >= 0 && h < H && wi >= 0 && wi < W)
                    v = x[(((long long)n * C + c) * H + h) * W + wi];
            }
            As[kk][ml] = v;
        }
        for (int e = tid; e < BLOCK_K * BLOCK_N; e += THREADS) {
            int kk = e % BLOCK_K, nl = e / BLOCK_K;
            int kg = k0 + kk, kn = n0 + nl;
            Bs[kk][nl] = (kg < KD && kn < K) ? w[(long long)kn * KD + kg] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BLOCK_K; ++kk) {
            float a[THREAD_M], b[THREAD_N];
#pragma unroll
            for (int i = 0; i < THREAD_M; ++i) a[i] = As[kk][tx + i * (BLOCK_M / THREAD_M)];
#pragma unroll
            for (int j = 0; j < THREAD_N; ++j) b[j] = Bs[kk][ty * THREAD_N + j];
#pragma unroll
            for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
                for (int j = 0; j < THREAD_N; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i) {
        long long m = m0 + tx + i * (BLOCK_M / THREAD_M);
        if (m >= M) continue;
        int q = (int)(m % Q);
        int p = (int)((m / Q) % P);
        long long n = m / ((long long)P * Q);
#pragma unroll
        for (int j = 0; j < THREAD_N; ++j) {
            int k = n0 + ty * THREAD_N + j;
            if (k < K) y[((n * K + k) * P + p) * Q + q] = acc[i][j];
        }
    }
}

extern "C" int launch(const float* x, const float* w, float* y, int N, int C, int H, int W,
                      int K, int R, int S, int pad, int stride, cudaStream_t stream) {
    int P = (H + 2 * pad - R) / stride + 1;
    int Q = (W + 2 * pad - S) / stride + 1;
    long long M = (long long)N * P * Q;
    dim3 grid((unsigned)((M + BLOCK_M - 1) / BLOCK_M), (unsigned)((K + BLOCK_N - 1) / BLOCK_N));
    conv2d_igemm<<<grid, THREADS, 0, stream>>>(x, w, y, N, C, H, W, K, R, S, pad, stride, P, Q);
    return (int)cudaGetLastError();
}
