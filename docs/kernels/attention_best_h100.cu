// evo-fsr best kernel for task attention (candidate b10da0c0d2a99c35)
// 76.191x over naive, 1.37x of library (geomean over 2 shapes) on NVIDIA H100 80GB HBM3
// per shape: paper_512_b32 71.36x naive, 1.69x lib; n1024_d1024 81.35x naive, 1.11x lib
// per-shape dispatch: paper_512_b32 -> ee57bed160820b6f, n1024_d1024 -> 58bd1b96f8b56622; any other shape -> a01a2bf285b563b0 (general); assembled after generation 5 and evaluated as one candidate; run populations/attention/<run> (no LLM, pop 16, 5 generations)
// evo-fsr dispatch kernel: each benchmark shape goes to its best variant (evo_fsr/dispatch.py)
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

// ---- variant 0 ----
#define launch launch_variant_0
namespace evo_variant_0 {
// attention seed family: FlashAttention-style fused attention in fp32 (FFMA only, no tensor cores).
//
// A block owns BQ queries of one (batch, head).  K and V are streamed through shared memory in
// tiles of BKV keys (a ring of KV_STAGES buffers filled with cp.async, zero-filled past N and past
// d_head); scores never leave the chip.  Per query row a running maximum m and a running sum l
// are kept (online softmax): for each tile, m' = max(m, tile max), the output accumulator and l
// are rescaled by exp(m - m'), and p = exp(s - m') -- exp always sees s - max <= 0, so the large
// scores of case large_magnitude cannot overflow.  Both products are SIMT register-tiled:
//   S = Q K^T : a thread holds ROWS_Q x COLS_KV scores (4-row / 4-column blocks, 16-byte shared
//               loads from Q^T and K^T, both stored transposed in shared memory);
//   O += P V  : the same ROWS_Q rows x DHP/THREADS_KV output columns, P^T going through shared
//               memory.
// THREADS_KV threads (consecutive lanes) share a query row: the row maximum is a shuffle
// reduction within that group, and each thread keeps its own partial sum of p (all see the same
// m), reduced once at the end.
//
// Head dims: the knob tile is compiled for a padded head dim DHP = 32 (or 4*THREADS_KV when
// larger) and 64, unrolled, which covers the benchmark heads (d_head 32 and 64) exactly; any
// d_head <= 64 runs there zero-padded.  d_head in (64, 256] runs on a fixed small-tile general
// path (DHP 128 or 256).  V and out use 16-byte accesses when d_head and d_model are multiples of 4
// and the pointers are 16-byte aligned, else a 4-byte general path.  No mask (the task has none).




#define WARPS 8         // variant knob 2 4 8
#define THREADS_KV 8    // variant knob 4 8 16
#define ROWS_Q 8        // variant knob 4 8
#define COLS_KV 8       // variant knob 4 8
#define KV_STAGES 2     // variant knob 1 2
#define MIN_BLOCKS 1    // variant knob 1 2
// Knob constraints (evo_fsr/knobs.py), mirrored by the static_asserts below.
// Registers: scores plus output accumulators per thread at d_head 64 within 128:
// variant constraint ROWS_Q * (COLS_KV + 64 // THREADS_KV) <= 128
// Shared memory at d_head 64 (Q^T, the K^T / V ring, P^T; rows padded by 4) within 227 KiB:
// variant constraint (64 * ((32 * WARPS // THREADS_KV) * ROWS_Q + 4) + KV_STAGES * 64 * (COLS_KV * THREADS_KV + 4) + KV_STAGES * COLS_KV * THREADS_KV * 68 + COLS_KV * THREADS_KV * ((32 * WARPS // THREADS_KV) * ROWS_Q + 4)) * 4 <= 227 * 1024

#define MAX_DH 256

template <int DHP, int NWARPS, int TK, int RQ, int RKV, int NST>
struct AttnCfg {
    static constexpr int THREADS = 32 * NWARPS;
    static constexpr int TQ = THREADS / TK;        // threads along queries
    static constexpr int BQ = TQ * RQ;             // queries per block
    static constexpr int BKV = TK * RKV;           // keys per tile
    static constexpr int RD = DHP / TK;            // output columns per thread
    static constexpr int QS_LD = BQ + 4;           // Qs[e][i]   (Q^T)
    static constexpr int KS_LD = BKV + 4;          // Ks[e][j]   (K^T)
    static constexpr int VS_LD = DHP + 4;          // Vs[j][e]
    static constexpr int PS_LD = BQ + 4;           // Ps[j][i]   (P^T)
    static constexpr int FLOATS = DHP * QS_LD + NST * DHP * KS_LD + NST * BKV * VS_LD + BKV * PS_LD;
    static constexpr int SMEM_BYTES = FLOATS * 4;
    static_assert(32 % TK == 0, "a query row's threads must sit in one warp");
    static_assert(RQ % 4 == 0 && RKV % 4 == 0 && RD % 4 == 0 && RD >= 4, "register tiles are 4-wide blocks");
    static_assert(DHP % 8 == 0, "the transposed loads walk 8 columns at a time");
    static_assert(NST == 1 || NST == 2 || NST == 3, "one to three K/V stages");
    static_assert(SMEM_BYTES <= 227 * 1024, "tile needs more than 227 KiB of shared memory");
};

// The knob tile at d_head 64, checked whatever the head dims used (the constraint lines above).
static_assert(ROWS_Q * (COLS_KV + 64 / THREADS_KV) <= 128,
              "knob combination holds more than 128 scores and accumulators per thread");
static_assert(AttnCfg<64, WARPS, THREADS_KV, ROWS_Q, COLS_KV, KV_STAGES>::SMEM_BYTES <= 227 * 1024,
              "knob combination needs more than 227 KiB of shared memory at d_head 64");

__device__ __forceinline__ void cp_async_4(float* smem, const float* gmem, bool valid) {
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    int bytes = valid ? 4 : 0;          // 0: nothing read, zero-filled
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_16(float* smem, const float* gmem, bool valid) {
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    int bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void lds4(float* f, const float* smem) {
    float4 v = *reinterpret_cast<const float4*>(smem);
    f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
}

// ROWS x DHP rows of one head, starting at row r0 of the sequence, into dst[e][r] (transposed).
// Consecutive threads take 8 consecutive columns of one row (32-byte segments in global memory;
// in shared memory 8 rows x 4 columns -> 32 distinct banks).
template <int DHP, int ROWS, int LD, int THREADS>
__device__ __forceinline__ void load_transposed(float* dst, const float* __restrict__ src, int r0, int N,
                                                int D, int dh, int tid) {
    constexpr int ELEMS = ROWS * DHP;
#pragma unroll 1
    for (int i = 0; i < (ELEMS + THREADS - 1) / THREADS; ++i) {
        int idx = tid + i * THREADS;
        if (ELEMS % THREADS == 0 || idx < ELEMS) {
            int e = (idx / (8 * ROWS)) * 8 + idx % 8;
            int r = (idx / 8) % ROWS;
            bool ok = r0 + r < N && e < dh;
            const float* p = ok ? src + ((long long)(r0 + r) * D + e) : src;
            cp_async_4(dst + e * LD + r, p, ok);
        }
    }
}

// BKV x DHP rows of V (natural layout dst[j][e]).
template <int DHP, int ROWS, int LD, int THREADS, bool VEC>
__device__ __forceinline__ void load_rows(float* dst, const float* __restrict__ src, int r0, int N, int D,
                                          int dh, int tid) {
    if (VEC) {
        constexpr int CHUNKS = ROWS * (DHP / 4);
#pragma unroll 1
        for (int i = 0; i < (CHUNKS + THREADS - 1) / THREADS; ++i) {
            int idx = tid + i * THREADS;
            if (CHUNKS % THREADS == 0 || idx < CHUNKS) {
                int c = idx % (DHP / 4), r = idx / (DHP / 4);
                bool ok = r0 + r < N && 4 * c < dh;       // dh % 4 == 0: all four or none
                const float* p = ok ? src + ((long long)(r0 + r) * D + 4 * c) : src;
                cp_async_16(dst + r * LD + 4 * c, p, ok);
            }
        }
    } else {
        constexpr int ELEMS = ROWS * DHP;
#pragma unroll 1
        for (int i = 0; i < (ELEMS + THREADS - 1) / THREADS; ++i) {
            int idx = tid + i * THREADS;
            if (ELEMS % THREADS == 0 || idx < ELEMS) {
                int e = idx % DHP, r = idx / DHP;
                bool ok = r0 + r < N && e < dh;
                const float* p = ok ? src + ((long long)(r0 + r) * D + e) : src;
                cp_async_4(dst + r * LD + e, p, ok);
            }
        }
    }
}

template <int DHP, int NWARPS, int TK, int RQ, int RKV, int NST, bool VEC, int MINB>
__global__ void __launch_bounds__(32 * NWARPS, MINB)
attention_flash(const float* __restrict__ Q, const float* __restrict__ K, const float* __restrict__ V,
                float* __restrict__ out, int N, int D, int heads, int dh, float scale, int q_tiles) {
    using C = AttnCfg<DHP, NWARPS, TK, RQ, RKV, NST>;
    constexpr int THREADS = C::THREADS, TQ = C::TQ, BQ = C::BQ, BKV = C::BKV, RD = C::RD;
    extern __shared__ __align__(16) float smem[];
    float* Qs = smem;
    float* Ks = Qs + DHP * C::QS_LD;
    float* Vs = Ks + NST * DHP * C::KS_LD;
    float* Ps = Vs + NST * BKV * C::VS_LD;

    const long long tile = blockIdx.x;
    const int q0 = (int)(tile % q_tiles) * BQ;
    const long long bh = tile / q_tiles;
    const int h = (int)(bh % heads);
    const long long b = bh / heads;
    const long long head_base = b * N * (long long)D + (long long)h * dh;   // element [b, 0, h*dh]
    const float* Qh = Q + head_base;
    const float* Kh = K + head_base;
    const float* Vh = V + head_base;

    const int tid = threadIdx.x;
    const int tk = tid % TK, tq = tid / TK;
    const int row0 = tq * 4;     // rows of block c: c*4*TQ + row0 + (0..3)
    const int col0 = tk * 4;     // key / d columns of block c: c*4*TK + col0 + (0..3)
    const int kv_tiles = (N + BKV - 1) / BKV;

    float o[RQ][RD];
    float m_run[RQ], l_run[RQ];
#pragma unroll
    for (int r = 0; r < RQ; ++r) {
        m_run[r] = -INFINITY;
        l_run[r] = 0.0f;
#pragma unroll
        for (int d = 0; d < RD; ++d) o[r][d] = 0.0f;
    }

    load_transposed<DHP, BQ, C::QS_LD, THREADS>(Qs, Qh, q0, N, D, dh, tid);
    if (NST > 1) {      // prologue: tiles 0 .. NST-2 in flight (Q joins the first group)
#pragma unroll
        for (int s = 0; s < NST - 1; ++s) {
            if (s < kv_tiles) {
                load_transposed<DHP, BKV, C::KS_LD, THREADS>(Ks + s * DHP * C::KS_LD, Kh, s * BKV, N, D, dh, tid);
                load_rows<DHP, BKV, C::VS_LD, THREADS, VEC>(Vs + s * BKV * C::VS_LD, Vh, s * BKV, N, D, dh, tid);
            }
            cp_async_commit();
        }
    }

    int stage = 0, load_stage = NST - 1;
    for (int t = 0; t < kv_tiles; ++t) {
        if (NST == 1) {
            __syncthreads();                        // everyone is done with the previous tile
            load_transposed<DHP, BKV, C::KS_LD, THREADS>(Ks, Kh, t * BKV, N, D, dh, tid);
            load_rows<DHP, BKV, C::VS_LD, THREADS, VEC>(Vs, Vh, t * BKV, N, D, dh, tid);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();
        } else {
            cp_async_wait<(NST > 1 ? NST - 2 : 0)>();   // tile t (and Q) landed for this thread ...
            __syncthreads();                        // ... for all; tile t-1's stage and Ps are free
            const int next = t + NST - 1;
            if (next < kv_tiles) {
                load_transposed<DHP, BKV, C::KS_LD, THREADS>(Ks + load_stage * DHP * C::KS_LD, Kh, next * BKV,
                                                             N, D, dh, tid);
                load_rows<DHP, BKV, C::VS_LD, THREADS, VEC>(Vs + load_stage * BKV * C::VS_LD, Vh, next * BKV,
                                                           N, D, dh, tid);
            }
            cp_async_commit();
        }
        const float* Ks_s = Ks + stage * DHP * C::KS_LD;
        const float* Vs_s = Vs + stage * BKV * C::VS_LD;
        const int j0 = t * BKV;

        // S = Q K^T for this thread's RQ x RKV block.
        float s[RQ][RKV];
#pragma unroll
        for (int r = 0; r < RQ; ++r)
#pragma unroll
            for (int c = 0; c < RKV; ++c) s[r][c] = 0.0f;
#pragma unroll 8
        for (int e = 0; e < DHP; ++e) {
            float qf[RQ], kf[RKV];
#pragma unroll
            for (int c = 0; c < RQ / 4; ++c) lds4(&qf[4 * c], Qs + e * C::QS_LD + c * 4 * TQ + row0);
#pragma unroll
            for (int c = 0; c < RKV / 4; ++c) lds4(&kf[4 * c], Ks_s + e * C::KS_LD + c * 4 * TK + col0);
#pragma unroll
            for (int r = 0; r < RQ; ++r)
#pragma unroll
                for (int c = 0; c < RKV; ++c) s[r][c] = fmaf(qf[r], kf[c], s[r][c]);
        }

        // Online softmax: scale, mask keys past N, row max over the TK threads of the row.
#pragma unroll
        for (int r = 0; r < RQ; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < RKV; ++c) {
                const int j = j0 + (c / 4) * 4 * TK + col0 + (c % 4);
                s[r][c] = j < N ? s[r][c] * scale : -INFINITY;
                mx = fmaxf(mx, s[r][c]);
            }
#pragma unroll
            for (int off = TK / 2; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float m_new = fmaxf(m_run[r], mx);          // finite: key j0 < N is in the row
            const float alpha = expf(m_run[r] - m_new);       // 0 on the first tile
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < RKV; ++c) {
                const float p = expf(s[r][c] - m_new);       // exp(-inf) = 0 for masked keys
                s[r][c] = p;
                sum += p;
            }
            l_run[r] = l_run[r] * alpha + sum;
            m_run[r] = m_new;
#pragma unroll
            for (int d = 0; d < RD; ++d) o[r][d] *= alpha;
        }
        // P^T to shared memory: Ps[j][i].
#pragma unroll
        for (int r = 0; r < RQ; ++r) {
            const int i = (r / 4) * 4 * TQ + row0 + (r % 4);
#pragma unroll
            for (int c = 0; c < RKV; ++c) Ps[((c / 4) * 4 * TK + col0 + (c % 4)) * C::PS_LD + i] = s[r][c];
        }
        __syncthreads();

        // O += P V for this thread's RQ rows x RD columns.
#pragma unroll 4
        for (int j = 0; j < BKV; ++j) {
            float pf[RQ], vf[RD];
#pragma unroll
            for (int c = 0; c < RQ / 4; ++c) lds4(&pf[4 * c], Ps + j * C::PS_LD + c * 4 * TQ + row0);
#pragma unroll
            for (int c = 0; c < RD / 4; ++c) lds4(&vf[4 * c], Vs_s + j * C::VS_LD + c * 4 * TK + col0);
#pragma unroll
            for (int r = 0; r < RQ; ++r)
#pragma unroll
                for (int d = 0; d < RD; ++d) o[r][d] = fmaf(pf[r], vf[d], o[r][d]);
        }
        stage = (stage + 1 == NST) ? 0 : stage + 1;
        load_stage = (load_stage + 1 == NST) ? 0 : load_stage + 1;
    }
    cp_async_wait<0>();

    // Normalize by the row sum (partial sums of the row's TK threads) and store.
#pragma unroll
    for (int r = 0; r < RQ; ++r) {
        float l = l_run[r];
#pragma unroll
        for (int off = TK / 2; off > 0; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
        const float inv = 1.0f / l;
        const int i = q0 + (r / 4) * 4 * TQ + row0 + (r % 4);
        if (i >= N) continue;
        float* orow = out + head_base + (long long)i * D;
#pragma unroll
        for (int cb = 0; cb < RD / 4; ++cb) {
            const int e = cb * 4 * TK + col0;
            if (VEC) {
                if (e < dh)
                    *reinterpret_cast<float4*>(orow + e) = make_float4(o[r][4 * cb] * inv, o[r][4 * cb + 1] * inv,
                                                                       o[r][4 * cb + 2] * inv, o[r][4 * cb + 3] * inv);
            } else {
#pragma unroll
                for (int x = 0; x < 4; ++x)
                    if (e + x < dh) orow[e + x] = o[r][4 * cb + x] * inv;
            }
        }
    }
}

template <int DHP, int NWARPS, int TK, int RQ, int RKV, int NST, int MINB>
static cudaError_t launch_cfg(const float* Q, const float* K, const float* V, float* out, int B, int N, int D,
                              int heads, int dh, bool vec, cudaStream_t stream) {
    using C = AttnCfg<DHP, NWARPS, TK, RQ, RKV, NST>;
    const long long q_tiles = (N + C::BQ - 1) / C::BQ;
    const long long blocks = q_tiles * B * heads;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
    const float scale = 1.0f / sqrtf((float)dh);
    auto kernel = vec ? attention_flash<DHP, NWARPS, TK, RQ, RKV, NST, true, MINB>
                      : attention_flash<DHP, NWARPS, TK, RQ, RKV, NST, false, MINB>;
    if (C::SMEM_BYTES > 48 * 1024) {
        cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES);
        if (err != cudaSuccess) return err;
    }
    kernel<<<(unsigned)blocks, C::THREADS, C::SMEM_BYTES, stream>>>(Q, K, V, out, N, D, heads, dh, scale,
                                                                  (int)q_tiles);
    return cudaSuccess;
}

#define DH_SMALL (4 * THREADS_KV > 32 ? 4 * THREADS_KV : 32)

extern "C" int launch(const float* Q, const float* K, const float* V, float* out, int B, int N,
                      int d_model, int heads, cudaStream_t stream) {
    if (B <= 0 || N <= 0 || heads <= 0 || d_model % heads != 0) return (int)cudaErrorInvalidValue;
    const int dh = d_model / heads;
    if (dh > MAX_DH) return (int)cudaErrorInvalidValue;
    const bool vec = dh % 4 == 0 && d_model % 4 == 0 && (uintptr_t)V % 16 == 0 && (uintptr_t)out % 16 == 0;
    cudaError_t err;
    if (dh <= DH_SMALL)
        err = launch_cfg<DH_SMALL, WARPS, THREADS_KV, ROWS_Q, COLS_KV, KV_STAGES, MIN_BLOCKS>(
            Q, K, V, out, B, N, d_model, heads, dh, vec, stream);
    else if (dh <= 64)
        err = launch_cfg<64, WARPS, THREADS_KV, ROWS_Q, COLS_KV, KV_STAGES, MIN_BLOCKS>(
            Q, K, V, out, B, N, d_model, heads, dh, vec, stream);
    else if (dh <= 128)   // general path: a fixed small tile (64 threads, 32 x 32)
        err = launch_cfg<128, 2, 8, 4, 4, 1, 1>(Q, K, V, out, B, N, d_model, heads, dh, vec, stream);
    else
        err = launch_cfg<256, 2, 8, 4, 4, 1, 1>(Q, K, V, out, B, N, d_model, heads, dh, vec, stream);
    if (err != cudaSuccess) return (int)err;
    return (int)cudaGetLastError();
}
}  // namespace evo_variant_0
#undef launch
#undef COLS_KV
#undef DH_SMALL
#undef KV_STAGES
#undef MAX_DH
#undef MIN_BLOCKS
#undef ROWS_Q
#undef THREADS_KV
#undef WARPS

// ---- variant 1 ----
#define launch launch_variant_1
namespace evo_variant_1 {
// attention seed family: FlashAttention-style fused attention in fp32 (FFMA only, no tensor cores).
//
// A block owns BQ queries of one (batch, head).  K and V are streamed through shared memory in
// tiles of BKV keys (a ring of KV_STAGES buffers filled with cp.async, zero-filled past N and past
// d_head); scores never leave the chip.  Per query row a running maximum m and a running sum l
// are kept (online softmax): for each tile, m' = max(m, tile max), the output accumulator and l
// are rescaled by exp(m - m'), and p = exp(s - m') -- exp always sees s - max <= 0, so the large
// scores of case large_magnitude cannot overflow.  Both products are SIMT register-tiled:
//   S = Q K^T : a thread holds ROWS_Q x COLS_KV scores (4-row / 4-column blocks, 16-byte shared
//               loads from Q^T and K^T, both stored transposed in shared memory);
//   O += P V  : the same ROWS_Q rows x DHP/THREADS_KV output columns, P^T going through shared
//               memory.
// THREADS_KV threads (consecutive lanes) share a query row: the row maximum is a shuffle
// reduction within that group, and each thread keeps its own partial sum of p (all see the same
// m), reduced once at the end.
//
// Head dims: the knob tile is compiled for a padded head dim DHP = 32 (or 4*THREADS_KV when
// larger) and 64, unrolled, which covers the benchmark heads (d_head 32 and 64) exactly; any
// d_head <= 64 runs there zero-padded.  d_head in (64, 256] runs on a fixed small-tile general
// path (DHP 128 or 256).  V and out use 16-byte accesses when d_head and d_model are multiples of 4
// and the pointers are 16-byte aligned, else a 4-byte general path.  No mask (the task has none).




#define WARPS 8         // variant knob 2 4 8
#define THREADS_KV 4    // variant knob 4 8 16
#define ROWS_Q 4        // variant knob 4 8
#define COLS_KV 8       // variant knob 4 8
#define KV_STAGES 2     // variant knob 1 2
#define MIN_BLOCKS 2    // variant knob 1 2
// Knob constraints (evo_fsr/knobs.py), mirrored by the static_asserts below.
// Registers: scores plus output accumulators per thread at d_head 64 within 128:
// variant constraint ROWS_Q * (COLS_KV + 64 // THREADS_KV) <= 128
// Shared memory at d_head 64 (Q^T, the K^T / V ring, P^T; rows padded by 4) within 227 KiB:
// variant constraint (64 * ((32 * WARPS // THREADS_KV) * ROWS_Q + 4) + KV_STAGES * 64 * (COLS_KV * THREADS_KV + 4) + KV_STAGES * COLS_KV * THREADS_KV * 68 + COLS_KV * THREADS_KV * ((32 * WARPS // THREADS_KV) * ROWS_Q + 4)) * 4 <= 227 * 1024

#define MAX_DH 256

template <int DHP, int NWARPS, int TK, int RQ, int RKV, int NST>
struct AttnCfg {
    static constexpr int THREADS = 32 * NWARPS;
    static constexpr int TQ = THREADS / TK;        // threads along queries
    static constexpr int BQ = TQ * RQ;             // queries per block
    static constexpr int BKV = TK * RKV;           // keys per tile
    static constexpr int RD = DHP / TK;            // output columns per thread
    static constexpr int QS_LD = BQ + 4;           // Qs[e][i]   (Q^T)
    static constexpr int KS_LD = BKV + 4;          // Ks[e][j]   (K^T)
    static constexpr int VS_LD = DHP + 4;          // Vs[j][e]
    static constexpr int PS_LD = BQ + 4;           // Ps[j][i]   (P^T)
    static constexpr int FLOATS = DHP * QS_LD + NST * DHP * KS_LD + NST * BKV * VS_LD + BKV * PS_LD;
    static constexpr int SMEM_BYTES = FLOATS * 4;
    static_assert(32 % TK == 0, "a query row's threads must sit in one warp");
    static_assert(RQ % 4 == 0 && RKV % 4 == 0 && RD % 4 == 0 && RD >= 4, "register tiles are 4-wide blocks");
    static_assert(DHP % 8 == 0, "the transposed loads walk 8 columns at a time");
    static_assert(NST == 1 || NST == 2 || NST == 3, "one to three K/V stages");
    static_assert(SMEM_BYTES <= 227 * 1024, "tile needs more than 227 KiB of shared memory");
};

// The knob tile at d_head 64, checked whatever the head dims used (the constraint lines above).
static_assert(ROWS_Q * (COLS_KV + 64 / THREADS_KV) <= 128,
              "knob combination holds more than 128 scores and accumulators per thread");
static_assert(AttnCfg<64, WARPS, THREADS_KV, ROWS_Q, COLS_KV, KV_STAGES>::SMEM_BYTES <= 227 * 1024,
              "knob combination needs more than 227 KiB of shared memory at d_head 64");

__device__ __forceinline__ void cp_async_4(float* smem, const float* gmem, bool valid) {
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    int bytes = valid ? 4 : 0;          // 0: nothing read, zero-filled
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_16(float* smem, const float* gmem, bool valid) {
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    int bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void lds4(float* f, const float* smem) {
    float4 v = *reinterpret_cast<const float4*>(smem);
    f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
}

// ROWS x DHP rows of one head, starting at row r0 of the sequence, into dst[e][r] (transposed).
// Consecutive threads take 8 consecutive columns of one row (32-byte segments in global memory;
// in shared memory 8 rows x 4 columns -> 32 distinct banks).
template <int DHP, int ROWS, int LD, int THREADS>
__device__ __forceinline__ void load_transposed(float* dst, const float* __restrict__ src, int r0, int N,
                                                int D, int dh, int tid) {
    constexpr int ELEMS = ROWS * DHP;
#pragma unroll 1
    for (int i = 0; i < (ELEMS + THREADS - 1) / THREADS; ++i) {
        int idx = tid + i * THREADS;
        if (ELEMS % THREADS == 0 || idx < ELEMS) {
            int e = (idx / (8 * ROWS)) * 8 + idx % 8;
            int r = (idx / 8) % ROWS;
            bool ok = r0 + r < N && e < dh;
            const float* p = ok ? src + ((long long)(r0 + r) * D + e) : src;
            cp_async_4(dst + e * LD + r, p, ok);
        }
    }
}

// BKV x DHP rows of V (natural layout dst[j][e]).
template <int DHP, int ROWS, int LD, int THREADS, bool VEC>
__device__ __forceinline__ void load_rows(float* dst, const float* __restrict__ src, int r0, int N, int D,
                                          int dh, int tid) {
    if (VEC) {
        constexpr int CHUNKS = ROWS * (DHP / 4);
#pragma unroll 1
        for (int i = 0; i < (CHUNKS + THREADS - 1) / THREADS; ++i) {
            int idx = tid + i * THREADS;
            if (CHUNKS % THREADS == 0 || idx < CHUNKS) {
                int c = idx % (DHP / 4), r = idx / (DHP / 4);
                bool ok = r0 + r < N && 4 * c < dh;       // dh % 4 == 0: all four or none
                const float* p = ok ? src + ((long long)(r0 + r) * D + 4 * c) : src;
                cp_async_16(dst + r * LD + 4 * c, p, ok);
            }
        }
    } else {
        constexpr int ELEMS = ROWS * DHP;
#pragma unroll 1
        for (int i = 0; i < (ELEMS + THREADS - 1) / THREADS; ++i) {
            int idx = tid + i * THREADS;
            if (ELEMS % THREADS == 0 || idx < ELEMS) {
                int e = idx % DHP, r = idx / DHP;
                bool ok = r0 + r < N && e < dh;
                const float* p = ok ? src + ((long long)(r0 + r) * D + e) : src;
                cp_async_4(dst + r * LD + e, p, ok);
            }
        }
    }
}

template <int DHP, int NWARPS, int TK, int RQ, int RKV, int NST, bool VEC, int MINB>
__global__ void __launch_bounds__(32 * NWARPS, MINB)
attention_flash(const float* __restrict__ Q, const float* __restrict__ K, const float* __restrict__ V,
                float* __restrict__ out, int N, int D, int heads, int dh, float scale, int q_tiles) {
    using C = AttnCfg<DHP, NWARPS, TK, RQ, RKV, NST>;
    constexpr int THREADS = C::THREADS, TQ = C::TQ, BQ = C::BQ, BKV = C::BKV, RD = C::RD;
    extern __shared__ __align__(16) float smem[];
    float* Qs = smem;
    float* Ks = Qs + DHP * C::QS_LD;
    float* Vs = Ks + NST * DHP * C::KS_LD;
    float* Ps = Vs + NST * BKV * C::VS_LD;

    const long long tile = blockIdx.x;
    const int q0 = (int)(tile % q_tiles) * BQ;
    const long long bh = tile / q_tiles;
    const int h = (int)(bh % heads);
    const long long b = bh / heads;
    const long long head_base = b * N * (long long)D + (long long)h * dh;   // element [b, 0, h*dh]
    const float* Qh = Q + head_base;
    const float* Kh = K + head_base;
    const float* Vh = V + head_base;

    const int tid = threadIdx.x;
    const int tk = tid % TK, tq = tid / TK;
    const int row0 = tq * 4;     // rows of block c: c*4*TQ + row0 + (0..3)
    const int col0 = tk * 4;     // key / d columns of block c: c*4*TK + col0 + (0..3)
    const int kv_tiles = (N + BKV - 1) / BKV;

    float o[RQ][RD];
    float m_run[RQ], l_run[RQ];
#pragma unroll
    for (int r = 0; r < RQ; ++r) {
        m_run[r] = -INFINITY;
        l_run[r] = 0.0f;
#pragma unroll
        for (int d = 0; d < RD; ++d) o[r][d] = 0.0f;
    }

    load_transposed<DHP, BQ, C::QS_LD, THREADS>(Qs, Qh, q0, N, D, dh, tid);
    if (NST > 1) {      // prologue: tiles 0 .. NST-2 in flight (Q joins the first group)
#pragma unroll
        for (int s = 0; s < NST - 1; ++s) {
            if (s < kv_tiles) {
                load_transposed<DHP, BKV, C::KS_LD, THREADS>(Ks + s * DHP * C::KS_LD, Kh, s * BKV, N, D, dh, tid);
                load_rows<DHP, BKV, C::VS_LD, THREADS, VEC>(Vs + s * BKV * C::VS_LD, Vh, s * BKV, N, D, dh, tid);
            }
            cp_async_commit();
        }
    }

    int stage = 0, load_stage = NST - 1;
    for (int t = 0; t < kv_tiles; ++t) {
        if (NST == 1) {
            __syncthreads();                        // everyone is done with the previous tile
            load_transposed<DHP, BKV, C::KS_LD, THREADS>(Ks, Kh, t * BKV, N, D, dh, tid);
            load_rows<DHP, BKV, C::VS_LD, THREADS, VEC>(Vs, Vh, t * BKV, N, D, dh, tid);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();
        } else {
            cp_async_wait<(NST > 1 ? NST - 2 : 0)>();   // tile t (and Q) landed for this thread ...
            __syncthreads();                        // ... for all; tile t-1's stage and Ps are free
            const int next = t + NST - 1;
            if (next < kv_tiles) {
                load_transposed<DHP, BKV, C::KS_LD, THREADS>(Ks + load_stage * DHP * C::KS_LD, Kh, next * BKV,
                                                             N, D, dh, tid);
                load_rows<DHP, BKV, C::VS_LD, THREADS, VEC>(Vs + load_stage * BKV * C::VS_LD, Vh, next * BKV,
                                                           N, D, dh, tid);
            }
            cp_async_commit();
        }
        const float* Ks_s = Ks + stage * DHP * C::KS_LD;
        const float* Vs_s = Vs + stage * BKV * C::VS_LD;
        const int j0 = t * BKV;

        // S = Q K^T for this thread's RQ x RKV block.
        float s[RQ][RKV];
#pragma unroll
        for (int r = 0; r < RQ; ++r)
#pragma unroll
            for (int c = 0; c < RKV; ++c) s[r][c] = 0.0f;
#pragma unroll 8
        for (int e = 0; e < DHP; ++e) {
            float qf[RQ], kf[RKV];
#pragma unroll
            for (int c = 0; c < RQ / 4; ++c) lds4(&qf[4 * c], Qs + e * C::QS_LD + c * 4 * TQ + row0);
#pragma unroll
            for (int c = 0; c < RKV / 4; ++c) lds4(&kf[4 * c], Ks_s + e * C::KS_LD + c * 4 * TK + col0);
#pragma unroll
            for (int r = 0; r < RQ; ++r)
#pragma unroll
                for (int c = 0; c < RKV; ++c) s[r][c] = fmaf(qf[r], kf[c], s[r][c]);
        }

        // Online softmax: scale, mask keys past N, row max over the TK threads of the row.
#pragma unroll
        for (int r = 0; r < RQ; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < RKV; ++c) {
                const int j = j0 + (c / 4) * 4 * TK + col0 + (c % 4);
                s[r][c] = j < N ? s[r][c] * scale : -INFINITY;
                mx = fmaxf(mx, s[r][c]);
            }
#pragma unroll
            for (int off = TK / 2; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float m_new = fmaxf(m_run[r], mx);          // finite: key j0 < N is in the row
            const float alpha = expf(m_run[r] - m_new);       // 0 on the first tile
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < RKV; ++c) {
                const float p = expf(s[r][c] - m_new);       // exp(-inf) = 0 for masked keys
                s[r][c] = p;
                sum += p;
            }
            l_run[r] = l_run[r] * alpha + sum;
            m_run[r] = m_new;
#pragma unroll
            for (int d = 0; d < RD; ++d) o[r][d] *= alpha;
        }
        // P^T to shared memory: Ps[j][i].
#pragma unroll
        for (int r = 0; r < RQ; ++r) {
            const int i = (r / 4) * 4 * TQ + row0 + (r % 4);
#pragma unroll
            for (int c = 0; c < RKV; ++c) Ps[((c / 4) * 4 * TK + col0 + (c % 4)) * C::PS_LD + i] = s[r][c];
        }
        __syncthreads();

        // O += P V for this thread's RQ rows x RD columns.
#pragma unroll 4
        for (int j = 0; j < BKV; ++j) {
            float pf[RQ], vf[RD];
#pragma unroll
            for (int c = 0; c < RQ / 4; ++c) lds4(&pf[4 * c], Ps + j * C::PS_LD + c * 4 * TQ + row0);
#pragma unroll
            for (int c = 0; c < RD / 4; ++c) lds4(&vf[4 * c], Vs_s + j * C::VS_LD + c * 4 * TK + col0);
#pragma unroll
            for (int r = 0; r < RQ; ++r)
#pragma unroll
                for (int d = 0; d < RD; ++d) o[r][d] = fmaf(pf[r], vf[d], o[r][d]);
        }
        stage = (stage + 1 == NST) ? 0 : stage + 1;
        load_stage = (load_stage + 1 == NST) ? 0 : load_stage + 1;
    }
    cp_async_wait<0>();

    // Normalize by the row sum (partial sums of the row's TK threads) and store.
#pragma unroll
    for (int r = 0; r < RQ; ++r) {
        float l = l_run[r];
#pragma unroll
        for (int off = TK / 2; off > 0; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
        const float inv = 1.0f / l;
        const int i = q0 + (r / 4) * 4 * TQ + row0 + (r % 4);
        if (i >= N) continue;
        float* orow = out + head_base + (long long)i * D;
#pragma unroll
        for (int cb = 0; cb < RD / 4; ++cb) {
            const int e = cb * 4 * TK + col0;
            if (VEC) {
                if (e < dh)
                    *reinterpret_cast<float4*>(orow + e) = make_float4(o[r][4 * cb] * inv, o[r][4 * cb + 1] * inv,
                                                                       o[r][4 * cb + 2] * inv, o[r][4 * cb + 3] * inv);
            } else {
#pragma unroll
                for (int x = 0; x < 4; ++x)
                    if (e + x < dh) orow[e + x] = o[r][4 * cb + x] * inv;
            }
        }
    }
}

template <int DHP, int NWARPS, int TK, int RQ, int RKV, int NST, int MINB>
static cudaError_t launch_cfg(const float* Q, const float* K, const float* V, float* out, int B, int N, int D,
                              int heads, int dh, bool vec, cudaStream_t stream) {
    using C = AttnCfg<DHP, NWARPS, TK, RQ, RKV, NST>;
    const long long q_tiles = (N + C::BQ - 1) / C::BQ;
    const long long blocks = q_tiles * B * heads;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
    const float scale = 1.0f / sqrtf((float)dh);
    auto kernel = vec ? attention_flash<DHP, NWARPS, TK, RQ, RKV, NST, true, MINB>
                      : attention_flash<DHP, NWARPS, TK, RQ, RKV, NST, false, MINB>;
    if (C::SMEM_BYTES > 48 * 1024) {
        cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES);
        if (err != cudaSuccess) return err;
    }
    kernel<<<(unsigned)blocks, C::THREADS, C::SMEM_BYTES, stream>>>(Q, K, V, out, N, D, heads, dh, scale,
                                                                  (int)q_tiles);
    return cudaSuccess;
}

#define DH_SMALL (4 * THREADS_KV > 32 ? 4 * THREADS_KV : 32)

extern "C" int launch(const float* Q, const float* K, const float* V, float* out, int B, int N,
                      int d_model, int heads, cudaStream_t stream) {
    if (B <= 0 || N <= 0 || heads <= 0 || d_model % heads != 0) return (int)cudaErrorInvalidValue;
    const int dh = d_model / heads;
    if (dh > MAX_DH) return (int)cudaErrorInvalidValue;
    const bool vec = dh % 4 == 0 && d_model % 4 == 0 && (uintptr_t)V % 16 == 0 && (uintptr_t)out % 16 == 0;
    cudaError_t err;
    if (dh <= DH_SMALL)
        err = launch_cfg<DH_SMALL, WARPS, THREADS_KV, ROWS_Q, COLS_KV, KV_STAGES, MIN_BLOCKS>(
            Q, K, V, out, B, N, d_model, heads, dh, vec, stream);
    else if (dh <= 64)
        err = launch_cfg<64, WARPS, THREADS_KV, ROWS_Q, COLS_KV, KV_STAGES, MIN_BLOCKS>(
            Q, K, V, out, B, N, d_model, heads, dh, vec, stream);
    else if (dh <= 128)   // general path: a fixed small tile (64 threads, 32 x 32)
        err = launch_cfg<128, 2, 8, 4, 4, 1, 1>(Q, K, V, out, B, N, d_model, heads, dh, vec, stream);
    else
        err = launch_cfg<256, 2, 8, 4, 4, 1, 1>(Q, K, V, out, B, N, d_model, heads, dh, vec, stream);
    if (err != cudaSuccess) return (int)err;
    return (int)cudaGetLastError();
}
}  // namespace evo_variant_1
#undef launch
#undef COLS_KV
#undef DH_SMALL
#undef KV_STAGES
#undef MAX_DH
#undef MIN_BLOCKS
#undef ROWS_Q
#undef THREADS_KV
#undef WARPS

// ---- variant 2 ----
#define launch launch_variant_2
namespace evo_variant_2 {
// attention seed family: FlashAttention-style fused attention in fp32 (FFMA only, no tensor cores).
//
// A block owns BQ queries of one (batch, head).  K and V are streamed through shared memory in
// tiles of BKV keys (a ring of KV_STAGES buffers filled with cp.async, zero-filled past N and past
// d_head); scores never leave the chip.  Per query row a running maximum m and a running sum l
// are kept (online softmax): for each tile, m' = max(m, tile max), the output accumulator and l
// are rescaled by exp(m - m'), and p = exp(s - m') -- exp always sees s - max <= 0, so the large
// scores of case large_magnitude cannot overflow.  Both products are SIMT register-tiled:
//   S = Q K^T : a thread holds ROWS_Q x COLS_KV scores (4-row / 4-column blocks, 16-byte shared
//               loads from Q^T and K^T, both stored transposed in shared memory);
//   O += P V  : the same ROWS_Q rows x DHP/THREADS_KV output columns, P^T going through shared
//               memory.
// THREADS_KV threads (consecutive lanes) share a query row: the row maximum is a shuffle
// reduction within that group, and each thread keeps its own partial sum of p (all see the same
// m), reduced once at the end.
//
// Head dims: the knob tile is compiled for a padded head dim DHP = 32 (or 4*THREADS_KV when
// larger) and 64, unrolled, which covers the benchmark heads (d_head 32 and 64) exactly; any
// d_head <= 64 runs there zero-padded.  d_head in (64, 256] runs on a fixed small-tile general
// path (DHP 128 or 256).  V and out use 16-byte accesses when d_head and d_model are multiples of 4
// and the pointers are 16-byte aligned, else a 4-byte general path.  No mask (the task has none).




#define WARPS 8         // variant knob 2 4 8
#define THREADS_KV 8    // variant knob 4 8 16
#define ROWS_Q 8        // variant knob 4 8
#define COLS_KV 8       // variant knob 4 8
#define KV_STAGES 1     // variant knob 1 2
#define MIN_BLOCKS 1    // variant knob 1 2
// Knob constraints (evo_fsr/knobs.py), mirrored by the static_asserts below.
// Registers: scores plus output accumulators per thread at d_head 64 within 128:
// variant constraint ROWS_Q * (COLS_KV + 64 // THREADS_KV) <= 128
// Shared memory at d_head 64 (Q^T, the K^T / V ring, P^T; rows padded by 4) within 227 KiB:
// variant constraint (64 * ((32 * WARPS // THREADS_KV) * ROWS_Q + 4) + KV_STAGES * 64 * (COLS_KV * THREADS_KV + 4) + KV_STAGES * COLS_KV * THREADS_KV * 68 + COLS_KV * THREADS_KV * ((32 * WARPS // THREADS_KV) * ROWS_Q + 4)) * 4 <= 227 * 1024

#define MAX_DH 256

template <int DHP, int NWARPS, int TK, int RQ, int RKV, int NST>
struct AttnCfg {
    static constexpr int THREADS = 32 * NWARPS;
    static constexpr int TQ = THREADS / TK;        // threads along queries
    static constexpr int BQ = TQ * RQ;             // queries per block
    static constexpr int BKV = TK * RKV;           // keys per tile
    static constexpr int RD = DHP / TK;            // output columns per thread
    static constexpr int QS_LD = BQ + 4;           // Qs[e][i]   (Q^T)
    static constexpr int KS_LD = BKV + 4;          // Ks[e][j]   (K^T)
    static constexpr int VS_LD = DHP + 4;          // Vs[j][e]
    static constexpr int PS_LD = BQ + 4;           // Ps[j][i]   (P^T)
    static constexpr int FLOATS = DHP * QS_LD + NST * DHP * KS_LD + NST * BKV * VS_LD + BKV * PS_LD;
    static constexpr int SMEM_BYTES = FLOATS * 4;
    static_assert(32 % TK == 0, "a query row's threads must sit in one warp");
    static_assert(RQ % 4 == 0 && RKV % 4 == 0 && RD % 4 == 0 && RD >= 4, "register tiles are 4-wide blocks");
    static_assert(DHP % 8 == 0, "the transposed loads walk 8 columns at a time");
    static_assert(NST == 1 || NST == 2 || NST == 3, "one to three K/V stages");
    static_assert(SMEM_BYTES <= 227 * 1024, "tile needs more than 227 KiB of shared memory");
};

// The knob tile at d_head 64, checked whatever the head dims used (the constraint lines above).
static_assert(ROWS_Q * (COLS_KV + 64 / THREADS_KV) <= 128,
              "knob combination holds more than 128 scores and accumulators per thread");
static_assert(AttnCfg<64, WARPS, THREADS_KV, ROWS_Q, COLS_KV, KV_STAGES>::SMEM_BYTES <= 227 * 1024,
              "knob combination needs more than 227 KiB of shared memory at d_head 64");

__device__ __forceinline__ void cp_async_4(float* smem, const float* gmem, bool valid) {
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    int bytes = valid ? 4 : 0;          // 0: nothing read, zero-filled
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_16(float* smem, const float* gmem, bool valid) {
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    int bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void lds4(float* f, const float* smem) {
    float4 v = *reinterpret_cast<const float4*>(smem);
    f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
}

// ROWS x DHP rows of one head, starting at row r0 of the sequence, into dst[e][r] (transposed).
// Consecutive threads take 8 consecutive columns of one row (32-byte segments in global memory;
// in shared memory 8 rows x 4 columns -> 32 distinct banks).
template <int DHP, int ROWS, int LD, int THREADS>
__device__ __forceinline__ void load_transposed(float* dst, const float* __restrict__ src, int r0, int N,
                                                int D, int dh, int tid) {
    constexpr int ELEMS = ROWS * DHP;
#pragma unroll 1
    for (int i = 0; i < (ELEMS + THREADS - 1) / THREADS; ++i) {
        int idx = tid + i * THREADS;
        if (ELEMS % THREADS == 0 || idx < ELEMS) {
            int e = (idx / (8 * ROWS)) * 8 + idx % 8;
            int r = (idx / 8) % ROWS;
            bool ok = r0 + r < N && e < dh;
            const float* p = ok ? src + ((long long)(r0 + r) * D + e) : src;
            cp_async_4(dst + e * LD + r, p, ok);
        }
    }
}

// BKV x DHP rows of V (natural layout dst[j][e]).
template <int DHP, int ROWS, int LD, int THREADS, bool VEC>
__device__ __forceinline__ void load_rows(float* dst, const float* __restrict__ src, int r0, int N, int D,
                                          int dh, int tid) {
    if (VEC) {
        constexpr int CHUNKS = ROWS * (DHP / 4);
#pragma unroll 1
        for (int i = 0; i < (CHUNKS + THREADS - 1) / THREADS; ++i) {
            int idx = tid + i * THREADS;
            if (CHUNKS % THREADS == 0 || idx < CHUNKS) {
                int c = idx % (DHP / 4), r = idx / (DHP / 4);
                bool ok = r0 + r < N && 4 * c < dh;       // dh % 4 == 0: all four or none
                const float* p = ok ? src + ((long long)(r0 + r) * D + 4 * c) : src;
                cp_async_16(dst + r * LD + 4 * c, p, ok);
            }
        }
    } else {
        constexpr int ELEMS = ROWS * DHP;
#pragma unroll 1
        for (int i = 0; i < (ELEMS + THREADS - 1) / THREADS; ++i) {
            int idx = tid + i * THREADS;
            if (ELEMS % THREADS == 0 || idx < ELEMS) {
                int e = idx % DHP, r = idx / DHP;
                bool ok = r0 + r < N && e < dh;
                const float* p = ok ? src + ((long long)(r0 + r) * D + e) : src;
                cp_async_4(dst + r * LD + e, p, ok);
            }
        }
    }
}

template <int DHP, int NWARPS, int TK, int RQ, int RKV, int NST, bool VEC, int MINB>
__global__ void __launch_bounds__(32 * NWARPS, MINB)
attention_flash(const float* __restrict__ Q, const float* __restrict__ K, const float* __restrict__ V,
                float* __restrict__ out, int N, int D, int heads, int dh, float scale, int q_tiles) {
    using C = AttnCfg<DHP, NWARPS, TK, RQ, RKV, NST>;
    constexpr int THREADS = C::THREADS, TQ = C::TQ, BQ = C::BQ, BKV = C::BKV, RD = C::RD;
    extern __shared__ __align__(16) float smem[];
    float* Qs = smem;
    float* Ks = Qs + DHP * C::QS_LD;
    float* Vs = Ks + NST * DHP * C::KS_LD;
    float* Ps = Vs + NST * BKV * C::VS_LD;

    const long long tile = blockIdx.x;
    const int q0 = (int)(tile % q_tiles) * BQ;
    const long long bh = tile / q_tiles;
    const int h = (int)(bh % heads);
    const long long b = bh / heads;
    const long long head_base = b * N * (long long)D + (long long)h * dh;   // element [b, 0, h*dh]
    const float* Qh = Q + head_base;
    const float* Kh = K + head_base;
    const float* Vh = V + head_base;

    const int tid = threadIdx.x;
    const int tk = tid % TK, tq = tid / TK;
    const int row0 = tq * 4;     // rows of block c: c*4*TQ + row0 + (0..3)
    const int col0 = tk * 4;     // key / d columns of block c: c*4*TK + col0 + (0..3)
    const int kv_tiles = (N + BKV - 1) / BKV;

    float o[RQ][RD];
    float m_run[RQ], l_run[RQ];
#pragma unroll
    for (int r = 0; r < RQ; ++r) {
        m_run[r] = -INFINITY;
        l_run[r] = 0.0f;
#pragma unroll
        for (int d = 0; d < RD; ++d) o[r][d] = 0.0f;
    }

    load_transposed<DHP, BQ, C::QS_LD, THREADS>(Qs, Qh, q0, N, D, dh, tid);
    if (NST > 1) {      // prologue: tiles 0 .. NST-2 in flight (Q joins the first group)
#pragma unroll
        for (int s = 0; s < NST - 1; ++s) {
            if (s < kv_tiles) {
                load_transposed<DHP, BKV, C::KS_LD, THREADS>(Ks + s * DHP * C::KS_LD, Kh, s * BKV, N, D, dh, tid);
                load_rows<DHP, BKV, C::VS_LD, THREADS, VEC>(Vs + s * BKV * C::VS_LD, Vh, s * BKV, N, D, dh, tid);
            }
            cp_async_commit();
        }
    }

    int stage = 0, load_stage = NST - 1;
    for (int t = 0; t < kv_tiles; ++t) {
        if (NST == 1) {
            __syncthreads();                        // everyone is done with the previous tile
            load_transposed<DHP, BKV, C::KS_LD, THREADS>(Ks, Kh, t * BKV, N, D, dh, tid);
            load_rows<DHP, BKV, C::VS_LD, THREADS, VEC>(Vs, Vh, t * BKV, N, D, dh, tid);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();
        } else {
            cp_async_wait<(NST > 1 ? NST - 2 : 0)>();   // tile t (and Q) landed for this thread ...
            __syncthreads();                        // ... for all; tile t-1's stage and Ps are free
            const int next = t + NST - 1;
            if (next < kv_tiles) {
                load_transposed<DHP, BKV, C::KS_LD, THREADS>(Ks + load_stage * DHP * C::KS_LD, Kh, next * BKV,
                                                             N, D, dh, tid);
                load_rows<DHP, BKV, C::VS_LD, THREADS, VEC>(Vs + load_stage * BKV * C::VS_LD, Vh, next * BKV,
                                                           N, D, dh, tid);
            }
            cp_async_commit();
        }
        const float* Ks_s = Ks + stage * DHP * C::KS_LD;
        const float* Vs_s = Vs + stage * BKV * C::VS_LD;
        const int j0 = t * BKV;

        // S = Q K^T for this thread's RQ x RKV block.
        float s[RQ][RKV];
#pragma unroll
        for (int r = 0; r < RQ; ++r)
#pragma unroll
            for (int c = 0; c < RKV; ++c) s[r][c] = 0.0f;
#pragma unroll 8
        for (int e = 0; e < DHP; ++e) {
            float qf[RQ], kf[RKV];
#pragma unroll
            for (int c = 0; c < RQ / 4; ++c) lds4(&qf[4 * c], Qs + e * C::QS_LD + c * 4 * TQ + row0);
#pragma unroll
            for (int c = 0; c < RKV / 4; ++c) lds4(&kf[4 * c], Ks_s + e * C::KS_LD + c * 4 * TK + col0);
#pragma unroll
            for (int r = 0; r < RQ; ++r)
#pragma unroll
                for (int c = 0; c < RKV; ++c) s[r][c] = fmaf(qf[r], kf[c], s[r][c]);
        }

        // Online softmax: scale, mask keys past N, row max over the TK threads of the row.
#pragma unroll
        for (int r = 0; r < RQ; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < RKV; ++c) {
                const int j = j0 + (c / 4) * 4 * TK + col0 + (c % 4);
                s[r][c] = j < N ? s[r][c] * scale : -INFINITY;
                mx = fmaxf(mx, s[r][c]);
            }
#pragma unroll
            for (int off = TK / 2; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float m_new = fmaxf(m_run[r], mx);          // finite: key j0 < N is in the row
            const float alpha = expf(m_run[r] - m_new);       // 0 on the first tile
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < RKV; ++c) {
                const float p = expf(s[r][c] - m_new);       // exp(-inf) = 0 for masked keys
                s[r][c] = p;
                sum += p;
            }
            l_run[r] = l_run[r] * alpha + sum;
            m_run[r] = m_new;
#pragma unroll
            for (int d = 0; d < RD; ++d) o[r][d] *= alpha;
        }
        // P^T to shared memory: Ps[j][i].
#pragma unroll
        for (int r = 0; r < RQ; ++r) {
            const int i = (r / 4) * 4 * TQ + row0 + (r % 4);
#pragma unroll
            for (int c = 0; c < RKV; ++c) Ps[((c / 4) * 4 * TK + col0 + (c % 4)) * C::PS_LD + i] = s[r][c];
        }
        __syncthreads();

        // O += P V for this thread's RQ rows x RD columns.
#pragma unroll 4
        for (int j = 0; j < BKV; ++j) {
            float pf[RQ], vf[RD];
#pragma unroll
            for (int c = 0; c < RQ / 4; ++c) lds4(&pf[4 * c], Ps + j * C::PS_LD + c * 4 * TQ + row0);
#pragma unroll
            for (int c = 0; c < RD / 4; ++c) lds4(&vf[4 * c], Vs_s + j * C::VS_LD + c * 4 * TK + col0);
#pragma unroll
            for (int r = 0; r < RQ; ++r)
#pragma unroll
                for (int d = 0; d < RD; ++d) o[r][d] = fmaf(pf[r], vf[d], o[r][d]);
        }
        stage = (stage + 1 == NST) ? 0 : stage + 1;
        load_stage = (load_stage + 1 == NST) ? 0 : load_stage + 1;
    }
    cp_async_wait<0>();

    // Normalize by the row sum (partial sums of the row's TK threads) and store.
#pragma unroll
    for (int r = 0; r < RQ; ++r) {
        float l = l_run[r];
#pragma unroll
        for (int off = TK / 2; off > 0; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
        const float inv = 1.0f / l;
        const int i = q0 + (r / 4) * 4 * TQ + row0 + (r % 4);
        if (i >= N) continue;
        float* orow = out + head_base + (long long)i * D;
#pragma unroll
        for (int cb = 0; cb < RD / 4; ++cb) {
            const int e = cb * 4 * TK + col0;
            if (VEC) {
                if (e < dh)
                    *reinterpret_cast<float4*>(orow + e) = make_float4(o[r][4 * cb] * inv, o[r][4 * cb + 1] * inv,
                                                                       o[r][4 * cb + 2] * inv, o[r][4 * cb + 3] * inv);
            } else {
#pragma unroll
                for (int x = 0; x < 4; ++x)
                    if (e + x < dh) orow[e + x] = o[r][4 * cb + x] * inv;
            }
        }
    }
}

template <int DHP, int NWARPS, int TK, int RQ, int RKV, int NST, int MINB>
static cudaError_t launch_cfg(const float* Q, const float* K, const float* V, float* out, int B, int N, int D,
                              int heads, int dh, bool vec, cudaStream_t stream) {
    using C = AttnCfg<DHP, NWARPS, TK, RQ, RKV, NST>;
    const long long q_tiles = (N + C::BQ - 1) / C::BQ;
    const long long blocks = q_tiles * B * heads;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
    const float scale = 1.0f / sqrtf((float)dh);
    auto kernel = vec ? attention_flash<DHP, NWARPS, TK, RQ, RKV, NST, true, MINB>
                      : attention_flash<DHP, NWARPS, TK, RQ, RKV, NST, false, MINB>;
    if (C::SMEM_BYTES > 48 * 1024) {
        cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES);
        if (err != cudaSuccess) return err;
    }
    kernel<<<(unsigned)blocks, C::THREADS, C::SMEM_BYTES, stream>>>(Q, K, V, out, N, D, heads, dh, scale,
                                                                  (int)q_tiles);
    return cudaSuccess;
}

#define DH_SMALL (4 * THREADS_KV > 32 ? 4 * THREADS_KV : 32)

extern "C" int launch(const float* Q, const float* K, const float* V, float* out, int B, int N,
                      int d_model, int heads, cudaStream_t stream) {
    if (B <= 0 || N <= 0 || heads <= 0 || d_model % heads != 0) return (int)cudaErrorInvalidValue;
    const int dh = d_model / heads;
    if (dh > MAX_DH) return (int)cudaErrorInvalidValue;
    const bool vec = dh % 4 == 0 && d_model % 4 == 0 && (uintptr_t)V % 16 == 0 && (uintptr_t)out % 16 == 0;
    cudaError_t err;
    if (dh <= DH_SMALL)
        err = launch_cfg<DH_SMALL, WARPS, THREADS_KV, ROWS_Q, COLS_KV, KV_STAGES, MIN_BLOCKS>(
            Q, K, V, out, B, N, d_model, heads, dh, vec, stream);
    else if (dh <= 64)
        err = launch_cfg<64, WARPS, THREADS_KV, ROWS_Q, COLS_KV, KV_STAGES, MIN_BLOCKS>(
            Q, K, V, out, B, N, d_model, heads, dh, vec, stream);
    else if (dh <= 128)   // general path: a fixed small tile (64 threads, 32 x 32)
        err = launch_cfg<128, 2, 8, 4, 4, 1, 1>(Q, K, V, out, B, N, d_model, heads, dh, vec, stream);
    else
        err = launch_cfg<256, 2, 8, 4, 4, 1, 1>(Q, K, V, out, B, N, d_model, heads, dh, vec, stream);
    if (err != cudaSuccess) return (int)err;
    return (int)cudaGetLastError();
}
}  // namespace evo_variant_2
#undef launch
#undef COLS_KV
#undef DH_SMALL
#undef KV_STAGES
#undef MAX_DH
#undef MIN_BLOCKS
#undef ROWS_Q
#undef THREADS_KV
#undef WARPS

extern "C" int launch(const float* Q, const float* K, const float* V, float* out, int B, int N, int d_model, int heads, cudaStream_t stream) {
    if (B == 32 && N == 512 && d_model == 512 && heads == 16) return evo_variant_1::launch_variant_1(Q, K, V, out, B, N, d_model, heads, stream);  // paper_512_b32
    if (B == 8 && N == 1024 && d_model == 1024 && heads == 16) return evo_variant_2::launch_variant_2(Q, K, V, out, B, N, d_model, heads, stream);  // n1024_d1024
    return evo_variant_0::launch_variant_0(Q, K, V, out, B, N, d_model, heads, stream);  // general
}
