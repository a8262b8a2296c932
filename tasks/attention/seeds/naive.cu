// attention naive seed: one thread per (batch, head, query). Pass 1 finds the maximum score;
// pass 2 recomputes each score, accumulates the softmax denominator and p_j * V_j into a
// per-thread array (d_head <= 256), then divides. Threads of a warp share (b, h) and read the
// same K/V rows (broadcast loads).
#include <cuda_runtime.h>
#include <math.h>

#define MAX_DH 256

__global__ void attention_naive(const float* __restrict__ Q, const float* __restrict__ K,
                                const float* __restrict__ V, float* __restrict__ out, int B, int N,
                                int D, int heads, int dh, float scale) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long total = (long long)B * heads * N;
    if (t >= total) return;
    int i = (int)(t % N);
    int h = (int)((t / N) % heads);
    long long b = t / ((long long)N * heads);
    const float* q = Q + (b * N + i) * D + (long long)h * dh;
    const float* kb = K + b * N * D + (long long)h * dh;
    const float* vb = V + b * N * D + (long long)h * dh;

    float m = -INFINITY;
    for (int j = 0; j < N; ++j) {
        const float* kj = kb + (long long)j * D;
        float s = 0.0f;
        for (int e = 0; e < dh; ++e) s += q[e] * kj[e];
        m = fmaxf(m, s * scale);
    }
    float acc[MAX_DH];
    for (int e = 0; e < dh; ++e) acc[e] = 0.0f;
    float l = 0.0f;
    for (int j = 0; j < N; ++j) {
        const float* kj = kb + (long long)j * D;
        const float* vj = vb + (long long)j * D;
        float s = 0.0f;
        for (int e = 0; e < dh; ++e) s += q[e] * kj[e];
        float p = expf(s * scale - m);
        l += p;
        for (int e = 0; e < dh; ++e) acc[e] += p * vj[e];
    }
    float inv = 1.0f / l;
    float* o = out + (b * N + i) * D + (long long)h * dh;
    for (int e = 0; e < dh; ++e) o[e] = acc[e] * inv;
}

extern "C" int launch(const float* Q, const float* K, const float* V, float* out, int B, int N,
                      int d_model, int heads, cudaStream_t stream) {
    int dh = d_model / heads;
    if (dh > MAX_DH || dh * heads != d_model) return (int)cudaErrorInvalidValue;
    long long total = (long long)B * heads * N;
    int threads = 128;
    unsigned blocks = (unsigned)((total + threads - 1) / threads);
    float scale = 1.0f / sqrtf((float)dh);
    attention_naive<<<blocks, threads, 0, stream>>>(Q, K, V, out, B, N, d_model, heads, dh, scale);
    return (int)cudaGetLastError();
}
