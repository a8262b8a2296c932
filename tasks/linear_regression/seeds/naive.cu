// linear_regression naive seed: normal equations.
//  1. a fixed grid of blocks; each thread accumulates its grid-stride rows into 65 float32
//     registers (55 upper-triangle entries of X^T X and the 10 entries of X^T y); each block
//     reduces them (warp shuffles, then across warps) into workspace[block * 65 + e];
//  2. one block sums the block partials (entry e by thread e) and thread 0 solves the 10x10
//     system by Gaussian elimination with partial pivoting, writing beta.
#include <cuda_runtime.h>

#define P 10
#define NE 65            // 55 Gram entries (j <= k) + 10 right-hand-side entries
#define THREADS 256
#define WARPS (THREADS / 32)
#define MAX_BLOCKS 1024

__global__ void __launch_bounds__(THREADS)
gram_partials(const float* __restrict__ X, const float* __restrict__ y, float* __restrict__ workspace,
              long long n) {
    float acc[NE];
#pragma unroll
    for (int e = 0; e < NE; ++e) acc[e] = 0.0f;
    const long long stride = (long long)gridDim.x * THREADS;
    for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < n; i += stride) {
        float r[P];
#pragma unroll
        for (int j = 0; j < P; ++j) r[j] = X[i * P + j];
        const float yi = y[i];
        int e = 0;
#pragma unroll
        for (int j = 0; j < P; ++j)
#pragma unroll
            for (int k = j; k < P; ++k) acc[e++] += r[j] * r[k];
#pragma unroll
        for (int j = 0; j < P; ++j) acc[55 + j] += r[j] * yi;
    }
    __shared__ float part[NE][WARPS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int e = 0; e < NE; ++e) {
        float v = acc[e];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
        if (lane == 0) part[e][warp] = v;
    }
    __syncthreads();
    if (threadIdx.x < NE) {
        float v = 0.0f;
        for (int w = 0; w < WARPS; ++w) v += part[threadIdx.x][w];
        workspace[(long long)blockIdx.x * NE + threadIdx.x] = v;
    }
}

__global__ void solve_normal_equations(const float* __restrict__ workspace, float* __restrict__ beta,
                                       int parts) {
    __shared__ float total[NE];
    if (threadIdx.x < NE) {
        float v = 0.0f;
        for (int b = 0; b < parts; ++b) v += workspace[(long long)b * NE + threadIdx.x];
        total[threadIdx.x] = v;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    float A[P][P + 1];
    int e = 0;
    for (int j = 0; j < P; ++j)
        for (int k = j; k < P; ++k) {
            A[j][k] = total[e];
            A[k][j] = total[e];
            ++e;
        }
    for (int j = 0; j < P; ++j) A[j][P] = total[55 + j];
    for (int col = 0; col < P; ++col) {
        int piv = col;
        for (int r = col + 1; r < P; ++r)
            if (fabsf(A[r][col]) > fabsf(A[piv][col])) piv = r;
        if (piv != col)
            for (int c = 0; c <= P; ++c) {
                float t = A[col][c];
                A[col][c] = A[piv][c];
                A[piv][c] = t;
            }
        for (int r = col + 1; r < P; ++r) {
            const float f = A[r][col] / A[col][col];
            for (int c = col; c <= P; ++c) A[r][c] -= f * A[col][c];
        }
    }
    for (int r = P - 1; r >= 0; --r) {
        float s = A[r][P];
        for (int c = r + 1; c < P; ++c) s -= A[r][c] * A[c][P];
        A[r][P] = s / A[r][r];
    }
    for (int j = 0; j < P; ++j) beta[j] = A[j][P];
}

extern "C" int launch(const float* X, const float* y, float* beta, float* workspace, int n,
                      cudaStream_t stream) {
    const long long rows = n;
    long long want = (rows + THREADS - 1) / THREADS;
    int blocks = (int)(want < 1 ? 1 : (want > MAX_BLOCKS ? MAX_BLOCKS : want));
    gram_partials<<<blocks, THREADS, 0, stream>>>(X, y, workspace, rows);
    solve_normal_equations<<<1, 128, 0, stream>>>(workspace, beta, blocks);
    return (int)cudaGetLastError();
}
