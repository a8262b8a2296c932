// evo-fsr best kernel for task conv2d (candidate 3186732e2e8107c1)
// 23.598x over naive, 1.94x of library (geomean over 5 shapes) on NVIDIA H100 80GB HBM3
// per shape: conv2_x 30.60x naive, 2.17x lib; conv3_x 33.43x naive, 1.24x lib; conv4_x 26.42x naive, 1.83x lib; conv5_x 25.86x naive, 2.27x lib; stem 10.47x naive, 2.47x lib
// a single kernel: the per-shape dispatch 882b79104e0b7961 was evaluated and not written (23.462x, not above 23.598x); found in generation 6 by knob_mutate; run populations/conv2d/main_h100
// conv2d seed: SIMT implicit GEMM (fp32 FFMA), block / warp / thread tiles, cp.async pipeline.
// GEMM view: M = N*P*Q output pixels (rows), Ngemm = K filters (columns), Kgemm = C*R*S, with
// the Kgemm index kg = (c*R + r)*S + s.  A[m][kg] = x[n, c, p*stride-pad+r, q*stride-pad+s]
// (zero outside the image), B[kg][k] = w[k][kg] (w is K x Kgemm row-major), y[n,k,p,q] = (A B)[m][k].
//
// Tiles: a CTA computes BM x BN of y; WARPS_M x WARPS_N warps each own WM x WN; a warp's lanes
// form LANES_M x LANES_N and each lane owns TM x TN accumulators (TM rows in groups of 4
// contiguous, for float4 shared loads; TN columns interleaved by LANES_N, for conflict-free
// float4 loads of the padded B rows).
// Shared memory per stage: As[BK][BM] (k-major, m contiguous) and Bs[BN][BK + 4] (n-major, k
// contiguous, padded by 4 floats so that 8 lanes reading 8 consecutive rows hit 8 distinct 16-byte
// bank groups: (BK + 4) / 4 is odd for BK = 8, 16, 32).
// Gather: each thread loads the same A rows m on every k-tile (A_LOAD_M threads of a CTA side by
// side along m, so a warp reads consecutive output pixels); their base offsets are computed
// once.  Its Kgemm rows' (c, r, s) are walked incrementally with one carry per digit (the steps
// are divided out once), so the main loop has no division or modulo.  Padding, the image border and the tile tails are
// zero-filled by cp.async's src-size 0 form.  Filters are loaded as 16-byte cp.async when
// Kgemm % 4 == 0 and w is 16-byte aligned, else as 4-byte cp.async.
// Epilogue: float4 stores of a thread's 4 contiguous rows m when P*Q % 4 == 0 (they share an
// image and are 16-byte aligned), scalar stores otherwise.
// Split-K (grid.z) for grids too small to fill the GPU: each split writes its partial sums in
// full to a static device buffer, and a second kernel sums them into y (no reset needed).
// Regimes (launch): 3x3 stride-1 layers take Winograd F(2x2, 3x3) when the WINOGRAD knob (its filter tile) is not 0
// (see conv2d_winograd_f2); 1x1 stride-1 pad-0 convolutions take a plain GEMM gather (no border
// test, Kgemm = C); the general path handles any R, S, pad, stride.
// Limits: C*H*W below 2^31 (the gather's offset within an image is 32-bit; image bases, filter
// rows and output offsets are 64-bit); the split-K and Winograd filter buffers are static, so
// launches of this kernel must not run concurrently on two streams.
#include <cuda_runtime.h>
#include <stdint.h>

#define WARPS_M 2   // knob: 1 2 4
#define WARPS_N 2   // knob: 1 2 4
#define LANES_M 8   // knob: 4 8
#define TM 8        // knob: 4 8
#define TN 8        // knob: 4 8
#define BK 8       // knob: 8 16 32
#define STAGES 4    // knob: 2 3 4
#define SPLIT_K 1   // knob: 1 2 4
#define A_LOAD_M 64 // knob: 32 64 128
#define WINOGRAD 64 // knob: 0 32 64
// Knob constraints (evo_fsr/knobs.py): combinations that break one never reach nvcc.
// Register budget: launch_bounds(THREADS) leaves 65536 / THREADS registers per thread; a lane
// needs about 2 * TM * TN + 64 (accumulators, fragments, gather state, addresses).
// constraint: WARPS_M * WARPS_N * 32 * (2 * TM * TN + 64) <= 65536

#define LANES_N (32 / LANES_M)
#define THREADS (WARPS_M * WARPS_N * 32)
#define WM (LANES_M * TM)
#define WN (LANES_N * TN)
#define BM (WARPS_M * WM)
#define BN (WARPS_N * WN)
#define BS_LD (BK + 4)                       // padded row of Bs (floats)
#define A_STAGE (BK * BM)                    // floats per stage of As
#define B_STAGE (BN * BS_LD)                 // floats per stage of Bs
#define SMEM_BYTES (STAGES * (A_STAGE + B_STAGE) * 4)
// A loader: A_TM threads along m (A_MI rows m each, A_TM apart), A_TK along Kgemm rows (A_KI
// rows each, A_TK apart).  A smaller A_TM gives each thread more rows m per walked Kgemm row:
// fewer (c, r, s) carries per loaded element, more registers for the row bases.
#define A_TM_CAP (THREADS < BM ? THREADS : BM)
#define A_TM (A_LOAD_M < A_TM_CAP ? A_LOAD_M : A_TM_CAP)
#define A_MI (BM / A_TM)
#define A_TK (THREADS / A_TM)
#define A_KI ((BK + A_TK - 1) / A_TK)
// B loaders: 16-byte chunks (4 Kgemm values of one filter) or single floats.
#define B_CHUNKS (BN * BK / 4)
#define B_VI ((B_CHUNKS + THREADS - 1) / THREADS)
#define B_SI ((BN * BK + THREADS - 1) / THREADS)
#define SPLITK_WS_FLOATS (4 << 20)           // 16 MiB of partial sums

static_assert(THREADS * (2 * TM * TN + 64) <= 65536,
              "knob constraint: WARPS_M * WARPS_N * 32 * (2 * TM * TN + 64) <= 65536");
static_assert(TM % 4 == 0 && BK % 4 == 0 && THREADS <= 1024, "tile shapes the loops assume");
static_assert(BM % A_TM == 0 && THREADS % A_TM == 0, "A loader mapping");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per CTA on sm_90");

__device__ __align__(16) float g_splitk_ws[SPLITK_WS_FLOATS];

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// 4-byte copy; src_bytes 0 writes a zero and reads nothing.
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(ok ? 4 : 0));
}

// 16-byte copy (L2 only); src_bytes 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(float* dst, const float* src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(ok ? 16 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

// A step of d along Kgemm as (dc, dr, ds) with dr < R and ds < S: applied with one carry each.
struct KStep {
    int dc, dr, ds, doff;   // doff = dc*HW + dr*W + ds
};

__device__ __forceinline__ KStep make_step(int d, int RS, int S, int HW, int W) {
    KStep st;
    st.dc = d / RS;
    st.dr = (d % RS) / S;
    st.ds = d % S;
    st.doff = st.dc * HW + st.dr * W + st.ds;
    return st;
}

// (c, r, s) of a Kgemm index and its in-image offset off = c*HW + r*W + s, advanced by a KStep.
struct KPos {
    int c, r, s, off;
};

__device__ __forceinline__ void advance(KPos& k, const KStep& st, int R, int S, int W, int HW) {
    k.s += st.ds;
    k.r += st.dr;
    k.c += st.dc;
    k.off += st.doff;
    if (k.s >= S) { k.s -= S; k.r += 1; k.off += W - S; }
    if (k.r >= R) { k.r -= R; k.c += 1; k.off += HW - R * W; }
}

template <bool IS_1X1, bool VEC_B>
__global__ void __launch_bounds__(THREADS, 1)
conv2d_igemm_v2(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                float* __restrict__ partial, int N, int C, int H, int W, int K, int R, int S,
                int pad, int stride, int P, int Q, int tiles_per_split) {
    extern __shared__ float4 smem_f4[];
    float* As = reinterpret_cast<float*>(smem_f4);
    float* Bs = As + STAGES * A_STAGE;

    const int tid = threadIdx.x;
    const int PQ = P * Q;
    const long long M = (long long)N * PQ;
    const int HW = H * W;
    const int RS = R * S;
    const int KD = C * RS;
    const long long m0 = (long long)blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    const int k_tiles = (KD + BK - 1) / BK;
    const int kt_begin = blockIdx.z * tiles_per_split;
    const int kt_end = min(k_tiles, kt_begin + tiles_per_split);
    const int n_tiles = max(0, kt_end - kt_begin);

    // ---- A gather state, once per thread: image base and top-left input corner of each row m.
    const int am = tid % A_TM;
    const int ak = tid / A_TM;
    long long a_base[A_MI];   // n*C*HW + h0*W + w0 (general) or n*C*HW + pq (1x1)
    int a_h0[A_MI], a_w0[A_MI];
#pragma unroll
    for (int i = 0; i < A_MI; ++i) {
        const long long m = m0 + am + i * A_TM;
        if (m < M) {
            const int n = (int)(m / PQ);
            const int pq = (int)(m - (long long)n * PQ);
            const int p = pq / Q;
            const int q = pq - p * Q;
            a_h0[i] = p * stride - pad;
            a_w0[i] = q * stride - pad;
            a_base[i] = (long long)n * C * HW + (IS_1X1 ? (long long)pq : (long long)a_h0[i] * W + a_w0[i]);
        } else {
            a_h0[i] = -(1 << 30);      // fails every border test (and the 1x1 row test below)
            a_w0[i] = -(1 << 30);
            a_base[i] = 0;
        }
    }
    // The thread's first Kgemm row of the next tile to load, and the steps between rows / tiles.
    KPos kp;
    {
        const int kg = kt_begin * BK + ak;
        kp.c = kg / RS;
        kp.r = (kg % RS) / S;
        kp.s = kg % S;
        kp.off = kp.c * HW + kp.r * W + kp.s;
    }
    const KStep row_step = make_step(A_TK, RS, S, HW, W);
    const KStep tile_step = make_step(BK, RS, S, HW, W);

    // ---- B state: each thread's filter rows, as pointers advanced by BK per tile.
    int b_kg = kt_begin * BK;     // Kgemm index of the next tile to load

    auto load_tile = [&](int stage) {
        float* as = As + stage * A_STAGE;
        float* bs = Bs + stage * B_STAGE;
        KPos row = kp;
#pragma unroll
        for (int j = 0; j < A_KI; ++j) {
            const int kk = ak + j * A_TK;
            if (BK % A_TK == 0 || kk < BK) {
                const bool kin = row.c < C;          // r < R and s < S always: kg < KD <=> c < C
#pragma unroll
                for (int i = 0; i < A_MI; ++i) {
                    bool ok;
                    long long off;
                    if (IS_1X1) {
                        ok = kin && a_h0[i] >= 0;
                        off = a_base[i] + row.off;
                    } else {
                        const int h = a_h0[i] + row.r;
                        const int wi = a_w0[i] + row.s;
                        ok = kin && (unsigned)h < (unsigned)H && (unsigned)wi < (unsigned)W;
                        off = a_base[i] + row.off;
                    }
                    cp_async4(as + kk * BM + am + i * A_TM, ok ? x + off : x, ok);
                }
            }
            if (j + 1 < A_KI) advance(row, row_step, R, S, W, HW);
        }
        advance(kp, tile_step, R, S, W, HW);

        if (VEC_B) {
#pragma unroll
            for (int i = 0; i < B_VI; ++i) {
                const int idx = tid + i * THREADS;
                if (B_CHUNKS % THREADS == 0 || idx < B_CHUNKS) {
                    const int nb = idx / (BK / 4);
                    const int kq = (idx % (BK / 4)) * 4;
                    const int kn = n0 + nb;
                    const bool ok = kn < K && b_kg + kq < KD;
                    const float* src = ok ? w + (long long)kn * KD + b_kg + kq : w;
                    cp_async16(bs + nb * BS_LD + kq, src, ok);
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < B_SI; ++i) {
                const int idx = tid + i * THREADS;
                if ((BN * BK) % THREADS == 0 || idx < BN * BK) {
                    const int nb = idx / BK;
                    const int kk = idx % BK;
                    const int kn = n0 + nb;
                    const bool ok = kn < K && b_kg + kk < KD;
                    const float* src = ok ? w + (long long)kn * KD + b_kg + kk : w;
                    cp_async4(bs + nb * BS_LD + kk, src, ok);
                }
            }
        }
        b_kg += BK;
    };

    // ---- compute mapping
    const int warp = tid / 32, lane = tid % 32;
    const int warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
    const int lane_m = lane / LANES_N, lane_n = lane % LANES_N;
    const int a_col = warp_m * WM + lane_m * 4;     // + g * LANES_M * 4 + e, g < TM / 4, e < 4
    const int b_row = warp_n * WN + lane_n;         // + j * LANES_N, j < TN

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    // ---- pipeline: prologue fills STAGES-1 stages (a group is committed even when empty).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_tiles) load_tile(s);
        cp_async_commit();
    }
    int read_stage = 0;
    int write_stage = STAGES - 1;
    for (int t = 0; t < n_tiles; ++t) {
        cp_async_wait<STAGES - 2>();    // tile t has landed (this thread's copies)
        __syncthreads();                // ... everyone's, and stage write_stage is no longer read
        if (t + STAGES - 1 < n_tiles) load_tile(write_stage);
        cp_async_commit();

        const float* as = As + read_stage * A_STAGE;
        const float* bs = Bs + read_stage * B_STAGE;
#pragma unroll
        for (int k4 = 0; k4 < BK; k4 += 4) {
            float4 b[TN];
#pragma unroll
            for (int j = 0; j < TN; ++j)
                b[j] = *reinterpret_cast<const float4*>(bs + (b_row + j * LANES_N) * BS_LD + k4);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                float a[TM];
#pragma unroll
                for (int g = 0; g < TM / 4; ++g) {
                    const float4 v = *reinterpret_cast<const float4*>(as + (k4 + u) * BM + a_col + g * LANES_M * 4);
                    a[4 * g + 0] = v.x; a[4 * g + 1] = v.y; a[4 * g + 2] = v.z; a[4 * g + 3] = v.w;
                }
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    const float bv = u == 0 ? b[j].x : u == 1 ? b[j].y : u == 2 ? b[j].z : b[j].w;
#pragma unroll
                    for (int i = 0; i < TM; ++i) acc[i][j] = fmaf(a[i], bv, acc[i][j]);
                }
            }
        }
        read_stage = read_stage + 1 == STAGES ? 0 : read_stage + 1;
        write_stage = write_stage + 1 == STAGES ? 0 : write_stage + 1;
    }
    cp_async_wait<0>();

    // ---- epilogue: y[n][k][p][q] (or this split's slice of the partial buffer); written in full.
    float* out = partial ? partial + (long long)blockIdx.z * M * K : y;
    if (PQ % 4 == 0 && ((uintptr_t)out & 15) == 0) {
        // A thread's 4 contiguous rows m (m % 4 == 0) lie in one image and 16-byte aligned
        // output, all below M or all not (M = N*PQ is a multiple of 4): one float4 per (g, j),
        // and the lanes of a row group write 16 * LANES_M contiguous bytes.
#pragma unroll
        for (int g = 0; g < TM / 4; ++g) {
            const long long m = m0 + a_col + g * LANES_M * 4;
            if (m >= M) continue;
            const int n = (int)(m / PQ);
            const int pq = (int)(m - (long long)n * PQ);
            const long long base = (long long)n * K * PQ + pq;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int k = n0 + b_row + j * LANES_N;
                if (k < K)
                    *reinterpret_cast<float4*>(out + base + (long long)k * PQ) =
                        make_float4(acc[4 * g][j], acc[4 * g + 1][j], acc[4 * g + 2][j], acc[4 * g + 3][j]);
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const long long m = m0 + a_col + (i / 4) * LANES_M * 4 + (i % 4);
        if (m >= M) continue;
        const int n = (int)(m / PQ);
        const int pq = (int)(m - (long long)n * PQ);
        const long long base = (long long)n * K * PQ + pq;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int k = n0 + b_row + j * LANES_N;
            if (k < K) out[base + (long long)k * PQ] = acc[i][j];
        }
    }
}

// y[i] = sum of the splits' partial sums.
__global__ void conv2d_splitk_reduce(const float* __restrict__ partial, float* __restrict__ y,
                                     long long total, int splits) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        float v = partial[i];
        for (int z = 1; z < splits; ++z) v += partial[i + z * total];
        y[i] = v;
    }
}

template <bool IS_1X1, bool VEC_B>
static cudaError_t launch_igemm(int device, dim3 grid, const float* x, const float* w, float* y, float* partial,
                                int N, int C, int H, int W, int K, int R, int S, int pad, int stride,
                                int P, int Q, int tiles_per_split, cudaStream_t stream) {
    auto kernel = conv2d_igemm_v2<IS_1X1, VEC_B>;
    static int configured_device = -1;    // one attribute call per instantiation and device
    if (configured_device != device) {
        cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
        if (err != cudaSuccess) return err;
        configured_device = device;
    }
    kernel<<<grid, THREADS, SMEM_BYTES, stream>>>(x, w, y, partial, N, C, H, W, K, R, S, pad, stride,
                                                  P, Q, tiles_per_split);
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Winograd F(2x2, 3x3) for 3x3 stride-1 layers (knob WINOGRAD > 0).
// Each output 2x2 tile needs a 4x4 input patch d; per channel, V = B^T d B and U = G g G^T are
// 4x4 and the tile's output is A^T (sum over channels of U (.) V) A: 16 multiplies per tile and
// channel instead of 36, i.e. 16 independent GEMMs (one per component xi of the 4x4) with
// M = tiles, N = filters, K = channels.  F(2x2) only: F(4x4)'s transforms amplify fp32 rounding
// past fp32_strict's tolerance at C >= 64.
// Two kernels.  conv2d_winograd_filters writes U once per call into a static buffer, laid out
// [c][xi][k] and zero-padded to whole steps of channels and whole filter tiles, so that the main
// kernel copies it with unpredicated 16-byte cp.async (gathering the 3x3 filters in the main
// loop was its L1 bottleneck: 9 strided loads per filter, one sector each).
// conv2d_winograd_f2: a CTA owns WG_BT = 32 tiles x WG_BK filters, all 16 components; 8 warps,
// warp w owns components 2w and 2w+1; a lane owns 8 tiles x WG_TN filters of each (float4
// fragments; lane = 4 * lk + lt, so that each quarter-warp's epilogue stores hit distinct banks).
// Each thread gathers one 4x4 patch (one tile, one channel) per step into registers a step ahead
// and transforms it into the other shared buffer after the step's FMAs; the tile's (n, row,
// column) and its border mask are computed once, so the main loop has no division.  The
// epilogue stages all 16 components through shared memory (rows padded to WG_BT + 4 floats) and
// applies A^T . A per (tile, filter).
// WINOGRAD is the filter tile WG_BK of a CTA (32 or 64); 0 leaves 3x3 layers to the implicit GEMM.
#define WG_BK (WINOGRAD ? WINOGRAD : 32)
#define WG_BT 32
#define WG_BC 8
#define WG_THREADS 256
#define WG_TN (WG_BK / 8)                    // filters per lane and component
#define WG_V_STAGE (16 * WG_BC * WG_BT)
#define WG_U_STAGE (16 * WG_BC * WG_BK)
#define WG_U_CHUNKS (WG_U_STAGE / 4 / WG_THREADS)   // 16-byte copies per thread and step
#define WG_M_LD (WG_BT + 4)
#define WG_SMEM_MAIN (2 * (WG_V_STAGE + WG_U_STAGE) * 4)
#define WG_SMEM_EPI (16 * WG_BK * WG_M_LD * 4)
#define WG_SMEM_BYTES (WG_SMEM_MAIN > WG_SMEM_EPI ? WG_SMEM_MAIN : WG_SMEM_EPI)
#define WG_U_FLOATS (4 << 20)                // 16 MiB: 16 x C x K up to C = K = 512
static_assert(WG_BK % 32 == 0 && WG_U_STAGE % (4 * WG_THREADS) == 0, "Winograd filter tile");
static_assert(WG_SMEM_BYTES <= 227 * 1024, "Winograd shared memory");

__device__ __align__(16) float g_wino_u[WG_U_FLOATS];

// The 1-D transforms, applied to rows and then to columns.
__device__ __forceinline__ void wg_bt4(float a, float b, float c, float d, float* o) {
    o[0] = a - c; o[1] = b + c; o[2] = c - b; o[3] = b - d;
}
__device__ __forceinline__ void wg_g3(float a, float b, float c, float* o) {
    o[0] = a; o[1] = 0.5f * (a + b + c); o[2] = 0.5f * (a - b + c); o[3] = c;
}

// U[(c * 16 + xi) * Kp + k] = (G g G^T)[xi] of filter k, channel c; zero for c >= C or k >= K.
__global__ void conv2d_winograd_filters(const float* __restrict__ w, float* __restrict__ u,
                                        int C, int K, int Cp, int Kp) {
    const long long total = (long long)Cp * Kp;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int c = (int)(i / Kp), k = (int)(i - (long long)c * Kp);
        const bool ok = c < C && k < K;
        float g[9], gr[12], o[4];
        #pragma unroll
        for (int e = 0; e < 9; ++e) g[e] = ok ? __ldg(w + ((long long)k * C + c) * 9 + e) : 0.0f;
        #pragma unroll
        for (int s = 0; s < 3; ++s) {        // G g: columns s of the three rows
            wg_g3(g[s], g[3 + s], g[6 + s], o);
            #pragma unroll
            for (int r = 0; r < 4; ++r) gr[3 * r + s] = o[r];
        }
        #pragma unroll
        for (int r = 0; r < 4; ++r) {        // (G g) G^T: each row
            wg_g3(gr[3 * r], gr[3 * r + 1], gr[3 * r + 2], o);
            #pragma unroll
            for (int j = 0; j < 4; ++j) u[((long long)c * 16 + 4 * r + j) * Kp + k] = o[j];
        }
    }
}

__global__ void __launch_bounds__(WG_THREADS, 1)
conv2d_winograd_f2(const float* __restrict__ x, const float* __restrict__ u, float* __restrict__ y,
                   int N, int C, int H, int W, int K, int Kp, int pad, int P, int Q, int tiles_w, int tiles_hw) {
    extern __shared__ __align__(16) float smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int lt = lane & 3, lk = lane >> 2;
    const int k0 = blockIdx.y * WG_BK;

    // This thread's patch: tile t of the CTA, channel c of each step (fixed for the whole loop).
    const int t = tid % WG_BT, pc = tid / WG_BT;
    const long long tile = (long long)blockIdx.x * WG_BT + t;
    const bool tile_ok = tile < (long long)N * tiles_hw;
    int n = 0, th = 0, tw = 0;
    if (tile_ok) {
        n = (int)(tile / tiles_hw);
        const int rem = (int)(tile - (long long)n * tiles_hw);
        th = rem / tiles_w; tw = rem - th * tiles_w;
    }
    const int h0 = 2 * th - pad, w0 = 2 * tw - pad;
    unsigned mask = 0;                       // bit 4i+j: d[i][j] lies inside the image
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j)
            if (tile_ok && h0 + i >= 0 && h0 + i < H && w0 + j >= 0 && w0 + j < W) mask |= 1u << (4 * i + j);
    const long long HW = (long long)H * W;
    const float* xp = x + (long long)n * C * HW + (long long)pc * HW + (long long)h0 * W + w0;
    // U copies: 16-byte chunk q = tid + f * 256 of a step is row q / (WG_BK / 4) = xi * WG_BC + c,
    // column 4 * (q % (WG_BK / 4)); a thread's chunks share c and step xi by 128 / WG_BK.
    const int u_row = tid / (WG_BK / 4), u_col = (tid % (WG_BK / 4)) * 4;
    const int u_c = u_row % WG_BC, u_xi = u_row / WG_BC;
    const float* up = u + ((long long)u_c * 16 + u_xi) * Kp + k0 + u_col;
    const int u_step = (128 / WG_BK) * Kp;

    float d[16];
    auto gather = [&](int c0) {
        const bool c_ok = c0 + pc < C;
        const float* src = xp + (long long)c0 * HW;
        #pragma unroll
        for (int i = 0; i < 4; ++i)
            #pragma unroll
            for (int j = 0; j < 4; ++j)
                d[4 * i + j] = (c_ok && (mask >> (4 * i + j) & 1u)) ? __ldg(src + i * W + j) : 0.0f;
    };
    auto copy_filters = [&](int c0, int buf) {
        float* dst = smem + buf * (WG_V_STAGE + WG_U_STAGE) + WG_V_STAGE + u_row * WG_BK + u_col;
        const float* src = up + (long long)c0 * 16 * Kp;
        #pragma unroll
        for (int f = 0; f < WG_U_CHUNKS; ++f)
            cp_async16(dst + f * (1024 / WG_BK) * WG_BK, src + f * u_step, true);
        cp_async_commit();
    };
    auto transform_store = [&](int buf) {
        float* Vs = smem + buf * (WG_V_STAGE + WG_U_STAGE);
        float r[16], v[4];
        #pragma unroll
        for (int j = 0; j < 4; ++j) {        // B^T d: columns j of the four rows
            wg_bt4(d[j], d[4 + j], d[8 + j], d[12 + j], v);
            #pragma unroll
            for (int i = 0; i < 4; ++i) r[4 * i + j] = v[i];
        }
        #pragma unroll
        for (int i = 0; i < 4; ++i) {        // (B^T d) B: each row
            wg_bt4(r[4 * i], r[4 * i + 1], r[4 * i + 2], r[4 * i + 3], v);
            #pragma unroll
            for (int j = 0; j < 4; ++j) Vs[((4 * i + j) * WG_BC + pc) * WG_BT + t] = v[j];
        }
    };

    float acc[2][8][WG_TN];
    #pragma unroll
    for (int q = 0; q < 2; ++q)
        #pragma unroll
        for (int i = 0; i < 8; ++i)
            #pragma unroll
            for (int j = 0; j < WG_TN; ++j) acc[q][i][j] = 0.0f;

    const int steps = (C + WG_BC - 1) / WG_BC;
    copy_filters(0, 0);
    gather(0);
    transform_store(0);
    cp_async_wait<0>();
    __syncthreads();
    for (int s = 0; s < steps; ++s) {
        const bool more = s + 1 < steps;
        if (more) {                          // in flight during the FMAs
            copy_filters((s + 1) * WG_BC, (s + 1) & 1);
            gather((s + 1) * WG_BC);
        }
        const float* Vs = smem + (s & 1) * (WG_V_STAGE + WG_U_STAGE);
        const float* Us = Vs + WG_V_STAGE;
        #pragma unroll
        for (int c = 0; c < WG_BC; ++c) {
            #pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int xi = 2 * warp + q;
                const float4* v4 = reinterpret_cast<const float4*>(Vs + (xi * WG_BC + c) * WG_BT);
                const float4* u4 = reinterpret_cast<const float4*>(Us + (xi * WG_BC + c) * WG_BK);
                float a[8], b[WG_TN];
                *reinterpret_cast<float4*>(a) = v4[lt];
                *reinterpret_cast<float4*>(a + 4) = v4[4 + lt];
                #pragma unroll
                for (int gq = 0; gq < WG_TN / 4; ++gq) *reinterpret_cast<float4*>(b + 4 * gq) = u4[lk + 8 * gq];
                #pragma unroll
                for (int i = 0; i < 8; ++i)
                    #pragma unroll
                    for (int j = 0; j < WG_TN; ++j) acc[q][i][j] = fmaf(a[i], b[j], acc[q][i][j]);
            }
        }
        if (more) {
            transform_store((s + 1) & 1);
            cp_async_wait<0>();
        }
        __syncthreads();
    }

    // Epilogue: the 16 components of each (tile, filter) meet in shared memory.
    float* Ms = smem;
    #pragma unroll
    for (int q = 0; q < 2; ++q) {
        const int xi = 2 * warp + q;
        #pragma unroll
        for (int j = 0; j < WG_TN; ++j) {
            const int k = lk * 4 + (j & 3) + 32 * (j >> 2);
            float* row = Ms + (xi * WG_BK + k) * WG_M_LD;
            #pragma unroll
            for (int half = 0; half < 2; ++half)
                *reinterpret_cast<float4*>(row + 16 * half + 4 * lt) =
                    make_float4(acc[q][4 * half][j], acc[q][4 * half + 1][j], acc[q][4 * half + 2][j], acc[q][4 * half + 3][j]);
        }
    }
    __syncthreads();
    if (!tile_ok) return;
    const int p0 = 2 * th, q0 = 2 * tw;
    const bool row1 = p0 + 1 < P, col1 = q0 + 1 < Q;
    const bool pair = col1 && (Q & 1) == 0;  // 8-byte aligned float2 stores
    const long long PQ = (long long)P * Q;
    #pragma unroll 2
    for (int kk = pc; kk < WG_BK; kk += WG_THREADS / WG_BT) {
        if (k0 + kk >= K) break;
        float m[16], r[8], o[2];
        #pragma unroll
        for (int xi = 0; xi < 16; ++xi) m[xi] = Ms[(xi * WG_BK + kk) * WG_M_LD + t];
        #pragma unroll
        for (int j = 0; j < 4; ++j) {        // A^T M: columns j
            r[j] = m[j] + m[4 + j] + m[8 + j];
            r[4 + j] = m[4 + j] - m[8 + j] - m[12 + j];
        }
        float* out = y + ((long long)n * K + k0 + kk) * PQ + (long long)p0 * Q + q0;
        #pragma unroll
        for (int i = 0; i < 2; ++i) {        // (A^T M) A: each row
            if (i == 1 && !row1) break;
            o[0] = r[4 * i] + r[4 * i + 1] + r[4 * i + 2];
            o[1] = r[4 * i + 1] - r[4 * i + 2] - r[4 * i + 3];
            float* dst = out + i * Q;
            if (pair) {
                *reinterpret_cast<float2*>(dst) = make_float2(o[0], o[1]);
            } else {
                dst[0] = o[0];
                if (col1) dst[1] = o[1];
            }
        }
    }
}

// Whether a layer fits the filter buffer: 16 x (C rounded up to a step) x (K to a tile).
static bool winograd_fits(int C, int K) {
    const long long Cp = (C + WG_BC - 1) / WG_BC * WG_BC, Kp = (K + WG_BK - 1) / WG_BK * WG_BK;
    return 16 * Cp * Kp <= WG_U_FLOATS;
}

static cudaError_t launch_winograd(int device, float* ubuf, const float* x, const float* w, float* y, int N, int C,
                                   int H, int W, int K, int pad, int P, int Q, cudaStream_t stream) {
    static int configured_device = -1;
    if (configured_device != device) {
        cudaError_t err = cudaFuncSetAttribute(conv2d_winograd_f2, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               WG_SMEM_BYTES);
        if (err != cudaSuccess) return err;
        configured_device = device;
    }
    const int Cp = (C + WG_BC - 1) / WG_BC * WG_BC, Kp = (K + WG_BK - 1) / WG_BK * WG_BK;
    const long long pairs = (long long)Cp * Kp;
    const unsigned fblocks = (unsigned)((pairs + 255) / 256 < 4096 ? (pairs + 255) / 256 : 4096);
    conv2d_winograd_filters<<<fblocks, 256, 0, stream>>>(w, ubuf, C, K, Cp, Kp);
    const int tiles_h = (P + 1) / 2, tiles_w = (Q + 1) / 2;
    const long long tiles = (long long)N * tiles_h * tiles_w;
    const dim3 grid((unsigned)((tiles + WG_BT - 1) / WG_BT), (unsigned)(Kp / WG_BK));
    conv2d_winograd_f2<<<grid, WG_THREADS, WG_SMEM_BYTES, stream>>>(x, ubuf, y, N, C, H, W, K, Kp, pad, P, Q,
                                                                     tiles_w, tiles_h * tiles_w);
    return cudaSuccess;
}

extern "C" int launch(const float* x, const float* w, float* y, int N, int C, int H, int W,
                      int K, int R, int S, int pad, int stride, cudaStream_t stream) {
    const int P = (H + 2 * pad - R) / stride + 1;
    const int Q = (W + 2 * pad - S) / stride + 1;
    const long long M = (long long)N * P * Q;
    const long long total = M * K;
    if (M <= 0 || K <= 0) return 0;
    const int KD = C * R * S;
    const int k_tiles = (KD + BK - 1) / BK;
    const unsigned m_tiles = (unsigned)((M + BM - 1) / BM);
    const unsigned n_tiles = (unsigned)((K + BN - 1) / BN);

    // Per-device facts, looked up once per device: SM count and the split-K buffer's address.
    static int cached_device = -1, sms = 0;
    static float* ws = nullptr;
    static float* wino_u = nullptr;
    int device = 0;
    {
        cudaError_t err = cudaGetDevice(&device);
        if (err == cudaSuccess && device != cached_device) {
            err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
            if (err == cudaSuccess) err = cudaGetSymbolAddress((void**)&ws, g_splitk_ws);
            if (err == cudaSuccess) err = cudaGetSymbolAddress((void**)&wino_u, g_wino_u);
            if (err == cudaSuccess) cached_device = device;
        }
        if (err != cudaSuccess) return (int)err;
    }
    if (WINOGRAD > 0 && R == 3 && S == 3 && stride == 1 && winograd_fits(C, K)) {
        cudaError_t err = launch_winograd(device, wino_u, x, w, y, N, C, H, W, K, pad, P, Q, stream);
        return err != cudaSuccess ? (int)err : (int)cudaGetLastError();
    }
    // Split-K while the grid is smaller than the GPU, each split keeping at least 4 k-tiles.
    int splits = 1;
    const long long ctas = (long long)m_tiles * n_tiles;
    while (splits * 2 <= SPLIT_K && ctas * splits < sms && k_tiles >= 8 * splits &&
           (long long)splits * 2 * total <= SPLITK_WS_FLOATS)
        splits *= 2;
    const int tiles_per_split = (k_tiles + splits - 1) / splits;
    splits = (k_tiles + tiles_per_split - 1) / tiles_per_split;   // no split left empty
    float* partial = splits > 1 ? ws : nullptr;
    const dim3 grid(m_tiles, n_tiles, (unsigned)splits);
    const bool is_1x1 = R == 1 && S == 1 && pad == 0 && stride == 1;
    const bool vec_b = KD % 4 == 0 && ((uintptr_t)w & 15) == 0;
    cudaError_t err;
    if (is_1x1)
        err = vec_b ? launch_igemm<true, true>(device, grid, x, w, y, partial, N, C, H, W, K, R, S, pad, stride, P, Q, tiles_per_split, stream)
                    : launch_igemm<true, false>(device, grid, x, w, y, partial, N, C, H, W, K, R, S, pad, stride, P, Q, tiles_per_split, stream);
    else
        err = vec_b ? launch_igemm<false, true>(device, grid, x, w, y, partial, N, C, H, W, K, R, S, pad, stride, P, Q, tiles_per_split, stream)
                    : launch_igemm<false, false>(device, grid, x, w, y, partial, N, C, H, W, K, R, S, pad, stride, P, Q, tiles_per_split, stream);
    if (err != cudaSuccess) return (int)err;
    if (splits > 1) {
        const long long blocks = (total + 255) / 256;
        const unsigned reduce_blocks = (unsigned)(blocks < 4096 ? blocks : 4096);
        conv2d_splitk_reduce<<<reduce_blocks, 256, 0, stream>>>(partial, y, total, splits);
    }
    return (int)cudaGetLastError();
}
