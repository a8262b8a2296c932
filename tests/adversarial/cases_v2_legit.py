"""Legitimate but unusual kernels of the v2 adversarial suite: each must be rated OK (issue 11's
false-positive list: atomics, several streams joined with events, CUDA graphs, cooperative
launch, large dynamic shared memory, CUB block and device primitives)."""
from __future__ import annotations

from .cases_v2_blocks import OK, CaseV2, wrap

WARP_SUM = r'''
__device__ __forceinline__ float adv_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
'''


def legitimate_cases() -> list[CaseV2]:
    atomic_sum = WARP_SUM + r'''
__global__ void atomic_sum(const float* __restrict__ x, float* out, long long n) {
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        acc += x[i];
    acc = adv_warp_sum(acc);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);      // fp32 atomics: order varies run to run
}
'''
    atomic_dot = WARP_SUM + r'''
__global__ void atomic_dot(const float* __restrict__ x, const float* __restrict__ y, float* out, long long n) {
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        acc = fmaf(x[i], y[i], acc);
    acc = adv_warp_sum(acc);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}
'''
    split_k = r'''
#define TILE 16
__global__ void splitk_matmul(const float* A, const float* B, float* C, int M, int K, int N, int kchunk) {
    __shared__ float As[TILE][TILE], Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    int k0 = blockIdx.z * kchunk, k1 = min(K, k0 + kchunk);
    float acc = 0.0f;
    for (int t = k0; t < k1; t += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < M && t + threadIdx.x < k1) ? A[(long long)row * K + t + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && t + threadIdx.y < k1) ? B[(long long)(t + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
        __syncthreads();
    }
    if (row < M && col < N) atomicAdd(&C[(long long)row * N + col], acc);   // split-K partials
}
'''
    relu_part = r'''
__global__ void relu_part(const float* x, float* y, long long lo, long long hi) {
    for (long long i = lo + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < hi; i += (long long)gridDim.x * blockDim.x)
        y[i] = fmaxf(x[i], 0.0f);
}
'''
    coop = WARP_SUM + r'''
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void coop_sum(const float* __restrict__ x, float* out, float* partial, long long n) {
    cg::grid_group grid = cg::this_grid();
    __shared__ float warp_sums[32];
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        acc += x[i];
    acc = adv_warp_sum(acc);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0.0f;
        v = adv_warp_sum(v);
        if (threadIdx.x == 0) partial[blockIdx.x] = v;
    }
    grid.sync();                                             // every block's partial is visible
    if (blockIdx.x == 0) {
        float v = 0.0f;
        for (int b = threadIdx.x; b < gridDim.x; b += blockDim.x) v += partial[b];
        v = adv_warp_sum(v);
        if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
        __syncthreads();
        if (threadIdx.x < 32) {
            float w = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0.0f;
            w = adv_warp_sum(w);
            if (threadIdx.x == 0) out[0] = w;
        }
    }
}
'''
    big_smem = r'''
#define TILE_FLOATS 24576                                      // 96 KiB of dynamic shared memory
__global__ void __launch_bounds__(256) smem_softmax(const float* __restrict__ x, float* __restrict__ y, int cols) {
    extern __shared__ float tile[];
    __shared__ float red[256];
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = y + (long long)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    red[threadIdx.x] = m; __syncthreads();
    for (int h = 128; h > 0; h >>= 1) { if (threadIdx.x < h) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + h]); __syncthreads(); }
    m = red[0]; __syncthreads();
    float s = 0.0f;
    for (int base = 0; base < cols; base += TILE_FLOATS) {
        int len = min(TILE_FLOATS, cols - base);
        for (int c = threadIdx.x; c < len; c += blockDim.x) { float e = expf(xr[base + c] - m); tile[c] = e; s += e; }
        __syncthreads();
        if (base + len < cols) {                               // long row: write the chunk unscaled, fix later
            for (int c = threadIdx.x; c < len; c += blockDim.x) yr[base + c] = tile[c];
            __syncthreads();
        }
    }
    red[threadIdx.x] = s; __syncthreads();
    for (int h = 128; h > 0; h >>= 1) { if (threadIdx.x < h) red[threadIdx.x] += red[threadIdx.x + h]; __syncthreads(); }
    float inv = 1.0f / red[0];
    int last = ((cols - 1) / TILE_FLOATS) * TILE_FLOATS;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = (c >= last ? tile[c - last] : yr[c]) * inv;
}
'''
    cub_block = r'''
#include <cub/cub.cuh>
template <int BT>
__global__ void cub_block_sum(const float* __restrict__ x, float* partial, long long n) {
    typedef cub::BlockReduce<float, BT> Reduce;
    __shared__ typename Reduce::TempStorage temp;
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * BT + threadIdx.x; i < n; i += (long long)gridDim.x * BT)
        acc += x[i];
    float total = Reduce(temp).Sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}
template <int BT>
__global__ void cub_block_final(const float* partial, float* out, int parts) {
    typedef cub::BlockReduce<float, BT> Reduce;
    __shared__ typename Reduce::TempStorage temp;
    float acc = 0.0f;
    for (int i = threadIdx.x; i < parts; i += BT) acc += partial[i];
    float total = Reduce(temp).Sum(acc);
    if (threadIdx.x == 0) out[0] = total;
}
'''
    cub_device = "#include <cub/cub.cuh>\nstatic void* adv_temp = 0; static size_t adv_temp_bytes = 0;\n"
    sort_cub = "#include <cub/cub.cuh>\nstatic void* adv_temp = 0; static size_t adv_temp_bytes = 0;\n"
    shared_hist = r'''
__global__ void shared_hist(const int* __restrict__ x, int* hist, long long n) {
    __shared__ int local[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) local[i] = 0;
    __syncthreads();
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        atomicAdd(&local[x[i]], 1);
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x) atomicAdd(&hist[i], local[i]);
}
'''
    return [
        CaseV2("ok_atomic_sum_reduction", "sum_reduction", 8, wrap("sum_reduction", r'''
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    atomic_sum<<<1024, 256, 0, stream>>>(x, out, N);
    return (int)cudaGetLastError();''', atomic_sum), OK, "fp32 atomicAdd of warp partials (issue 11's false positive)"),
        CaseV2("ok_atomic_dot_product", "dot_product", 8, wrap("dot_product", r'''
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    atomic_dot<<<1024, 256, 0, stream>>>(x, y, out, N);
    return (int)cudaGetLastError();''', atomic_dot), OK, "fp32 atomicAdd dot product"),
        CaseV2("ok_split_k_atomic_matmul", "matmul", 8, wrap("matmul", r'''
    cudaMemsetAsync(C, 0, sizeof(float) * (size_t)M * N, stream);
    int splits = K >= 1024 ? 4 : 1, kchunk = ((K + splits - 1) / splits + 15) / 16 * 16;
    dim3 grid((N + 15) / 16, (M + 15) / 16, (K + kchunk - 1) / kchunk);
    splitk_matmul<<<grid, dim3(16, 16), 0, stream>>>(A, B, C, M, K, N, kchunk);
    return (int)cudaGetLastError();''', split_k), OK, "split-K GEMM reducing partials with fp32 atomics"),
        CaseV2("ok_streams_joined_with_events", "relu", 4, wrap("relu", r'''
    if (!s1) {
        cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
        cudaEventCreateWithFlags(&fork_ev, cudaEventDisableTiming);
        cudaEventCreateWithFlags(&join1, cudaEventDisableTiming); cudaEventCreateWithFlags(&join2, cudaEventDisableTiming);
    }
    long long half = n / 2;
    cudaEventRecord(fork_ev, stream);
    cudaStreamWaitEvent(s1, fork_ev, 0); cudaStreamWaitEvent(s2, fork_ev, 0);
    relu_part<<<512, 256, 0, s1>>>(x, y, 0, half);
    relu_part<<<512, 256, 0, s2>>>(x, y, half, n);
    cudaEventRecord(join1, s1); cudaEventRecord(join2, s2);
    cudaStreamWaitEvent(stream, join1, 0); cudaStreamWaitEvent(stream, join2, 0);   // joined before return
    return (int)cudaGetLastError();''', relu_part + "static cudaStream_t s1 = 0, s2 = 0; static cudaEvent_t fork_ev, join1, join2;\n"),
               OK, "two private streams forked from and joined back to the harness stream with events"),
        CaseV2("ok_cuda_graph_on_harness_stream", "relu", 4, wrap("relu", r'''
    for (int i = 0; i < used; ++i)
        if (keys[i].x == x && keys[i].y == y && keys[i].n == n) return (int)cudaGraphLaunch(keys[i].exec, stream);
    cudaStream_t cap; cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking);
    cudaGraph_t g; cudaGraphExec_t e;
    cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal);
    relu_part<<<1024, 256, 0, cap>>>(x, y, 0, n / 2);
    relu_part<<<1024, 256, 0, cap>>>(x, y, n / 2, n);
    cudaStreamEndCapture(cap, &g);
    cudaStreamDestroy(cap);
    if (cudaGraphInstantiate(&e, g, 0) != cudaSuccess) return (int)cudaGetLastError();
    cudaGraphDestroy(g);
    if (used < 64) keys[used++] = {x, y, n, e};
    return (int)cudaGraphLaunch(e, stream);''', relu_part +
                    "struct GraphKey { const float* x; float* y; int n; cudaGraphExec_t exec; };\n"
                    "static GraphKey keys[64]; static int used = 0;\n"),
               OK, "a CUDA graph per (pointers, size), captured once and launched on the harness stream"),
        CaseV2("ok_cooperative_grid_sync", "sum_reduction", 4, wrap("sum_reduction", r'''
    int dev = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, coop_sum, 256, 0);
    int blocks = sms * (per_sm < 2 ? per_sm : 2);
    if (blocks > 65536) blocks = 65536;
    long long n = N;
    void* args[] = {(void*)&x, (void*)&out, (void*)&workspace, (void*)&n};
    return (int)cudaLaunchCooperativeKernel((void*)coop_sum, dim3(blocks), dim3(256), args, 0, stream);''', coop),
               OK, "one cooperative kernel: block partials, grid.sync(), final sum by block 0"),
        CaseV2("ok_large_dynamic_shared_memory", "softmax", 4, wrap("softmax", r'''
    const int bytes = TILE_FLOATS * sizeof(float);
    cudaFuncSetAttribute(smem_softmax, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    smem_softmax<<<rows, 256, bytes, stream>>>(x, y, cols);
    return (int)cudaGetLastError();''', big_smem), OK, "96 KiB of dynamic shared memory per block (opt-in above 48 KiB)"),
        CaseV2("ok_cub_block_reduce", "sum_reduction", 8, wrap("sum_reduction", r'''
    long long n = N, want = (n + 255) / 256;
    int blocks = (int)(want < 1 ? 1 : (want > 2048 ? 2048 : want));
    cub_block_sum<256><<<blocks, 256, 0, stream>>>(x, workspace, n);
    cub_block_final<1024><<<1, 1024, 0, stream>>>(workspace, out, blocks);
    return (int)cudaGetLastError();''', cub_block), OK, "cub::BlockReduce in two passes"),
        CaseV2("ok_cub_device_reduce", "sum_reduction", 8, wrap("sum_reduction", r'''
    size_t need = 0;
    cub::DeviceReduce::Sum(nullptr, need, x, out, N, stream);
    if (need > adv_temp_bytes) {
        if (need <= 65536 * sizeof(float)) { adv_temp = workspace; adv_temp_bytes = 65536 * sizeof(float); }
        else { cudaFree(adv_temp); cudaMalloc(&adv_temp, need); adv_temp_bytes = need; }
    }
    if (adv_temp_bytes <= 65536 * sizeof(float)) adv_temp = workspace;
    return (int)cub::DeviceReduce::Sum(adv_temp, need, x, out, N, stream);''', cub_device), OK,
               "cub::DeviceReduce::Sum with its temp storage in the task's workspace"),
        CaseV2("ok_cub_device_radix_sort", "sort", 8, wrap("sort", r'''
    size_t need = 0;
    cub::DeviceRadixSort::SortKeys(nullptr, need, x, y, N, 0, 32, stream);
    if (need > adv_temp_bytes) { cudaFree(adv_temp); cudaMalloc(&adv_temp, need); adv_temp_bytes = need; }
    return (int)cub::DeviceRadixSort::SortKeys(adv_temp, need, x, y, N, 0, 32, stream);''', sort_cub), OK,
               "cub::DeviceRadixSort on float keys (temp storage allocated once and reused)"),
        CaseV2("ok_shared_memory_atomic_histogram", "histogram", 8, wrap("histogram", r'''
    cudaMemsetAsync(hist, 0, 256 * sizeof(int), stream);
    shared_hist<<<512, 256, 0, stream>>>(x, hist, N);
    return (int)cudaGetLastError();''', shared_hist), OK, "privatised histogram: shared-memory then global atomics"),
    ]
