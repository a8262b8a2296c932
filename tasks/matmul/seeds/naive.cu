// matmul naive seed: one thread per output element, a plain fp32 dot product over K.
// threadIdx.x runs along n so the loads of B and the stores of C are coalesced.
#include <cuda_runtime.h>

__global__ void matmul_naive(const float* __restrict__ A, const float* __restrict__ B,
                             float* __restrict__ C, int M, int K, int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || n >= N) return;
    const float* a = A + (long long)m * K;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[k] * B[(long long)k * N + n];
    C[(long long)m * N + n] = acc;
}

extern "C" int launch(const float* A, const float* B, float* C, int M, int K, int N,
                      cudaStream_t stream) {
    dim3 block(32, 8);
    dim3 grid((unsigned)((N + 31) / 32), (unsigned)((M + 7) / 8));
    matmul_naive<<<grid, block, 0, stream>>>(A, B, C, M, K, N);
    return (int)cudaGetLastError();
}
