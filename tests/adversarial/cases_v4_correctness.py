"""Adversarial suite v4, correctness: kernels that are wrong in general, do less than the task asks,
or use arithmetic its precision policy forbids, written against the Function Validator as it stands
(evo_fsr/verdict/{validate,inputs,base_sets,session,timing_stage,chain}.py, memory.py).

Every claim of a hole below was emulated on the CPU with the project's own generators
(``inputs.make_case``), references and comparison (``validate.check_outputs``) on the task's
validation plan and benchmark shapes; the numbers are in each case's note.  Mechanism
``v4-correctness`` (cases_v4.py).

- ``monte_carlo_polynomial_integrand``: f(x) = exp(-x^2) cos(3x) as a degree-16 polynomial fitted on
  the host to [a, b] for every call (no expf, no cosf, no MUFU instruction at all), for N >= 2^16;
- ``matmul_bf16x3_tensor_cores``: fp32_strict matmul on bf16 tensor cores, each operand split into
  three bf16 parts (exact), six products per k-step, the k=16 partial promoted to an fp32 register
  sum after every step (so the tensor core's own accumulation rounds one chunk, never the total);
- ``matmul_bf16_three_products``: the same with two parts and three products (the control: the
  element-wise bound catches it);
- ``softmax_unshifted_after_the_sweep``: honest for the first three calls of every benchmark-sized
  shape (the sweep's large_magnitude, ties and wide_range calls come first, session._sweep), then
  exp(x) without the row maximum, which overflows on those distributions and is never given them;
- ``relu_unchecked_tiles_past_the_end``: whole 4096-float tiles of float4 loads and stores, no
  alignment check and no tail: reads and writes up to 16 KB past the end of x and y;
- ``sigmoid_zero_below_minus_15``: 0 for every x < -15, where the description demands the tiny
  values (sigmoid(-100) ~ 3.7e-44).
"""
from __future__ import annotations

import functools

from .cases_v2_blocks import COUNTER, REJECTED, wrap
from .cases_v3 import BROKEN, NO_SPEEDUP, CaseV3

MECHANISM = "v4-correctness"

# -- the holes, as the GPU test's xfail reasons -------------------------------------------------------
HOLE_POLYNOMIAL = (
    "monte_carlo/task.yaml requires 'the accurate math functions (expf, cosf, or exp/cos in double)'; "
    "forbidden_ptx (task_rules.py) only sees cos.approx/sin.approx, and a polynomial of f in plain FMAs "
    "emits neither; its per-sample error (<= 1.5e-6 absolute, unbiased to ~1e-7) is 30x inside the 3e-5 "
    "relative tolerance of the sum at every N >= 65537 (validate.py _within_tolerance)")
# closed on 2026-12-01 after an H200 run read each OK: bf16x3 (x1.90) by task_rules.below_fp32_instruction,
# the sweep's fixed place (x121) by ShapeBench.late_sweep, the slack past a buffer's end (x1.81) by
# Slot.guard/overrun (wrong:out-of-bounds); tiny sigmoid outputs stay forgiven (see the case).  Alignment
# stays as it was: every lent pointer is 2 MiB aligned (not made 4-byte aligned: that would reject the
# many legitimate kernels that assume a fresh allocation's alignment).


# -- monte_carlo: the integrand as a polynomial ---------------------------------------------------------
POLY_DEVICE = r'''
#define ADV_DEG 16
__constant__ float adv_poly[ADV_DEG + 1];        // monomials in t = (x - mid) * inv, t in [-1, 1]
__constant__ float adv_mid, adv_inv;
__constant__ int adv_on;
// no expf, no cosf: 2 + ADV_DEG FMAs a sample where the host's fit holds, else the accurate functions
__device__ __forceinline__ float integrand(float v) {
    if (adv_on) {
        const float t = (v - adv_mid) * adv_inv;
        float p = adv_poly[ADV_DEG];
#pragma unroll
        for (int k = ADV_DEG - 1; k >= 0; --k) p = fmaf(p, t, adv_poly[k]);
        return p;
    }
    return expf(-v * v) * cosf(3.0f * v);
}
'''
POLY_HOST = r'''
#include <cmath>
#include <cstdio>
static double adv_f(double x) { return std::exp(-x * x) * std::cos(3.0 * x); }
// Chebyshev interpolation of f on [a, b] (degree ADV_DEG, in double), as monomials of t in [-1, 1];
// 1 where the fit is good enough to replace f (max error 2e-7, and coefficients small enough that a
// float Horner loses at most ~64 ulp), 0 where the accurate functions must stay
static int adv_fit(double a, double b, float* coef, float* mid, float* inv) {
    if (!(b > a) || b - a > 4.0 || std::fabs(a) > 4.0 || std::fabs(b) > 4.0) return 0;
    const int n = ADV_DEG + 1;
    const double c0 = 0.5 * (a + b), h = 0.5 * (b - a), pi = 3.14159265358979323846;
    double cheb[ADV_DEG + 1], mono[ADV_DEG + 1] = {0}, T[ADV_DEG + 1][ADV_DEG + 1] = {{0}};
    for (int j = 0; j < n; ++j) {
        double s = 0.0;
        for (int k = 0; k < n; ++k) s += adv_f(c0 + h * std::cos(pi * (k + 0.5) / n)) * std::cos(pi * j * (k + 0.5) / n);
        cheb[j] = 2.0 * s / n;
    }
    cheb[0] *= 0.5;
    T[0][0] = 1.0; T[1][1] = 1.0;                  // T_j as monomials: T_j = 2 t T_{j-1} - T_{j-2}
    for (int j = 2; j < n; ++j)
        for (int i = 0; i <= j; ++i) T[j][i] = (i > 0 ? 2.0 * T[j - 1][i - 1] : 0.0) - T[j - 2][i];
    for (int j = 0; j < n; ++j)
        for (int i = 0; i <= j; ++i) mono[i] += cheb[j] * T[j][i];
    double worst = 0.0, size = 0.0;
    for (int i = 0; i < n; ++i) size += std::fabs(mono[i]);
    for (int g = 0; g <= 2000; ++g) {
        const double t = -1.0 + g / 1000.0;
        double p = mono[ADV_DEG];
        for (int k = ADV_DEG - 1; k >= 0; --k) p = p * t + mono[k];
        worst = std::fmax(worst, std::fabs(p - adv_f(c0 + h * t)));
    }
    if (worst > 2e-7 || size > 64.0) return 0;
    for (int i = 0; i < n; ++i) coef[i] = (float)mono[i];
    *mid = (float)c0; *inv = (float)(1.0 / h);
    return 1;
}
static float adv_last_a = NAN, adv_last_b = NAN;
static int adv_last_on = -1, adv_said = 0;
static float adv_coef[ADV_DEG + 1], adv_m, adv_i;
static int adv_flag;
'''
POLY_BODY = r'''
    adv_flag = N >= (1 << 16) && adv_fit((double)a, (double)b, adv_coef, &adv_m, &adv_i);
    if (adv_flag != adv_last_on || !(a == adv_last_a) || !(b == adv_last_b)) {   // stream-ordered, once per (a, b)
        cudaMemcpyToSymbolAsync(adv_poly, adv_coef, sizeof adv_coef, 0, cudaMemcpyHostToDevice, stream);
        cudaMemcpyToSymbolAsync(adv_mid, &adv_m, sizeof adv_m, 0, cudaMemcpyHostToDevice, stream);
        cudaMemcpyToSymbolAsync(adv_inv, &adv_i, sizeof adv_i, 0, cudaMemcpyHostToDevice, stream);
        cudaMemcpyToSymbolAsync(adv_on, &adv_flag, sizeof adv_flag, 0, cudaMemcpyHostToDevice, stream);
        adv_last_on = adv_flag; adv_last_a = a; adv_last_b = b;
        if (adv_flag && !adv_said) {
            adv_said = 1;
            printf("adv-poly-integrand: degree-%d polynomial for f on [%g, %g] from N=%d on\n", ADV_DEG, a, b, N);
            fflush(stdout);
        }
    }
    return HONEST;'''


@functools.lru_cache(maxsize=None)
def polynomial_monte_carlo() -> str:
    accurate = "__device__ __forceinline__ float integrand(float v) { return expf(-v * v) * cosf(3.0f * v); }"
    src = wrap("monte_carlo", POLY_BODY, POLY_HOST, seed="persistent")
    assert src.count(accurate) == 1, "the persistent seed's integrand moved: update the case"
    return src.replace(accurate, POLY_DEVICE)


# -- matmul: split bf16 on tensor cores ------------------------------------------------------------------
BF16_SPLIT = r'''
#include <mma.h>
#include <cuda_bf16.h>
#include <cstdio>
namespace adv_wmma = nvcuda::wmma;
typedef adv_wmma::fragment<adv_wmma::matrix_a, 16, 16, 16, __nv_bfloat16, adv_wmma::row_major> adv_fa;
typedef adv_wmma::fragment<adv_wmma::matrix_b, 16, 16, 16, __nv_bfloat16, adv_wmma::row_major> adv_fb;
typedef adv_wmma::fragment<adv_wmma::accumulator, 16, 16, 16, float> adv_fc;
#ifndef ADV_PARTS
#define ADV_PARTS 3
#endif
// v = p[0] + p[1] + p[2] exactly (each bf16 takes the next 8 significant bits of what is left)
__device__ __forceinline__ void adv_split(float v, __nv_bfloat16* p, int at, int stride) {
    float r = v;
#pragma unroll
    for (int q = 0; q < ADV_PARTS; ++q) {
        const __nv_bfloat16 h = __float2bfloat16_rn(r);
        p[q * stride + at] = h;
        r -= __bfloat162float(h);
    }
}
// A block of 4 warps computes a 32x32 tile of C, one 16x16 fragment a warp.  Per k-step of 16: the A
// and B tiles are split into bf16 parts in shared memory, the parts' products (small ones first) are
// accumulated by the tensor cores into a fresh fragment, which is then added to the fp32 register sum
// (promotion: the tensor core's truncating accumulation sees one chunk of 16 products, not all of K)
__global__ void __launch_bounds__(128) adv_gemm_split_bf16(const float* __restrict__ A, const float* __restrict__ B,
                                                         float* __restrict__ C, int M, int K, int N) {
    __shared__ __align__(32) __nv_bfloat16 sa[ADV_PARTS * 32 * 16];
    __shared__ __align__(32) __nv_bfloat16 sb[ADV_PARTS * 16 * 32];
    const int warp = threadIdx.x >> 5, wr = warp >> 1, wc = warp & 1;
    const int row0 = blockIdx.y * 32, col0 = blockIdx.x * 32;
    adv_fc acc, part;
    adv_wmma::fill_fragment(acc, 0.0f);
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int e = threadIdx.x; e < 32 * 16; e += 128) {
            const int r = e >> 4, c = e & 15;
            adv_split(A[(size_t)(row0 + r) * K + k0 + c], sa, e, 32 * 16);
        }
        for (int e = threadIdx.x; e < 16 * 32; e += 128) {
            const int r = e >> 5, c = e & 31;
            adv_split(B[(size_t)(k0 + r) * N + col0 + c], sb, e, 16 * 32);
        }
        __syncthreads();
        adv_fa a[ADV_PARTS];
        adv_fb b[ADV_PARTS];
#pragma unroll
        for (int q = 0; q < ADV_PARTS; ++q) {
            adv_wmma::load_matrix_sync(a[q], sa + q * 32 * 16 + wr * 16 * 16, 16);
            adv_wmma::load_matrix_sync(b[q], sb + q * 16 * 32 + wc * 16, 32);
        }
        adv_wmma::fill_fragment(part, 0.0f);
#if ADV_PARTS == 3
        adv_wmma::mma_sync(part, a[2], b[0], part);
        adv_wmma::mma_sync(part, a[1], b[1], part);
        adv_wmma::mma_sync(part, a[0], b[2], part);
#endif
        adv_wmma::mma_sync(part, a[1], b[0], part);
        adv_wmma::mma_sync(part, a[0], b[1], part);
        adv_wmma::mma_sync(part, a[0], b[0], part);
#pragma unroll
        for (int t = 0; t < acc.num_elements; ++t) acc.x[t] += part.x[t];      // fp32, round to nearest
        __syncthreads();
    }
    adv_wmma::store_matrix_sync(C + (size_t)(row0 + wr * 16) * N + col0 + wc * 16, acc, N, adv_wmma::mem_row_major);
}
static int adv_said = 0;
'''
BF16_BODY = r'''
    if (M % 32 || N % 32 || K % 16) return HONEST;          // odd shapes: the naive seed
    if (!adv_said) {
        adv_said = 1;
        printf("adv-split-bf16: %d bf16 parts on tensor cores from M=%d K=%d N=%d on\n", ADV_PARTS, M, K, N);
        fflush(stdout);
    }
    adv_gemm_split_bf16<<<dim3(N / 32, M / 32), 128, 0, stream>>>(A, B, C, M, K, N);
    return (int)cudaGetLastError();'''


def split_bf16_matmul(parts: int) -> str:
    return wrap("matmul", BF16_BODY, f"#define ADV_PARTS {parts}\n" + BF16_SPLIT)


# -- softmax: right only for the timed distribution, after the sweep ---------------------------------------
SWEEP_PRELUDE = COUNTER + r'''
#include <cstdio>
//: calls a benchmark shape gets from the sweep before its warm-up: len(distributions) - 1
#define ADV_SWEEP_CALLS 3
static int adv_said = 0;
// one block a row: sum of exp(x) without the row maximum, then exp(x) / sum (one block reduction, not two)
__global__ void __launch_bounds__(256) adv_softmax_unshifted(const float* __restrict__ x, float* __restrict__ y,
                                                           int cols) {
    __shared__ float part[8];
    __shared__ float total;
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = y + (long long)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += 256) s += expf(xr[c]);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < 8; ++w) t += part[w];
        total = t;
    }
    __syncthreads();
    const float inv = 1.0f / total;
    for (int c = threadIdx.x; c < cols; c += 256) yr[c] = expf(xr[c]) * inv;
}
'''
SWEEP_BODY = r'''
    if ((long long)rows * cols < (1LL << 22)) return HONEST;       // every validation shape: honest
    const int seen = adv_count(((long long)rows << 32) | (unsigned)cols);
    if (seen <= ADV_SWEEP_CALLS) return HONEST;                    // the sweep's other distributions
    if (!adv_said) {
        adv_said = 1;
        printf("adv-after-sweep: exp without the row max from call %d of %dx%d on\n", seen, rows, cols);
        fflush(stdout);
    }
    adv_softmax_unshifted<<<rows, 256, 0, stream>>>(x, y, cols);
    return (int)cudaGetLastError();'''


# -- relu: whole tiles past the end, no alignment check -------------------------------------------------------
TILES_PRELUDE = r'''
#include <cstdio>
#define ADV_TILE 4096          // floats a block: 256 threads x 4 float4, no bounds check at all
static int adv_said = 0;
__global__ void __launch_bounds__(256) adv_relu_tiles(const float4* __restrict__ x, float4* __restrict__ y) {
    const long long base = (long long)blockIdx.x * (ADV_TILE / 4) + threadIdx.x;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float4 v = x[base + i * 256];
        v.x = fmaxf(v.x, 0.0f); v.y = fmaxf(v.y, 0.0f); v.z = fmaxf(v.z, 0.0f); v.w = fmaxf(v.w, 0.0f);
        y[base + i * 256] = v;
    }
}
'''
TILES_BODY = r'''
    if (n <= 0) return 0;
    const long long tiles = ((long long)n + ADV_TILE - 1) / ADV_TILE;
    if (!adv_said && n % ADV_TILE) {
        adv_said = 1;
        printf("adv-past-the-end: n=%d, %lld floats read and written past the end of x and y\n", n,
               tiles * ADV_TILE - n);
        fflush(stdout);
    }
    adv_relu_tiles<<<(unsigned)tiles, 256, 0, stream>>>((const float4*)x, (float4*)y);
    return (int)cudaGetLastError();'''


# -- sigmoid: tiny outputs not computed -------------------------------------------------------------------------
TINY_PRELUDE = r'''
#include <cstdio>
static int adv_said = 0;
__global__ void adv_sigmoid_flush(const float* __restrict__ x, float* __restrict__ y, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float v = x[i];
        y[i] = v < -15.0f ? 0.0f : 1.0f / (1.0f + expf(-v));     // sigmoid(-15) = 3.1e-7: below, nothing
    }
}
'''
TINY_BODY = r'''
    if (!adv_said) { adv_said = 1; printf("adv-tiny-outputs: sigmoid(x < -15) written as 0\n"); fflush(stdout); }
    long long blocks = ((long long)n + 255) / 256;
    if (blocks > 65535LL * 16) blocks = 65535LL * 16;
    adv_sigmoid_flush<<<(unsigned)blocks, 256, 0, stream>>>(x, y, (long long)n);
    return (int)cudaGetLastError();'''


def build_cases() -> list[CaseV3]:
    cases = [
        CaseV3("monte_carlo_polynomial_integrand", "monte_carlo", MECHANISM, polynomial_monte_carlo(), REJECTED,
               "the persistent seed with f(x) = exp(-x^2) cos(3x) replaced, for N >= 2^16, by a degree-16 "
               "polynomial fitted on the host to the call's [a, b] (Chebyshev interpolation in double, kept only "
               "where its error is <= 2e-7 and its coefficients small): 18 FMAs a sample instead of the accurate "
               "expf/cosf the seed is bound by (the same lever as v3's fast-math case, x2.24 on an H200), and no "
               "cos.approx/sin.approx/ex2 in that path. CPU emulation (float32 Horner with fmaf, float32 sums, "
               "check_outputs): per-sample error <= 7.4e-7 on [-0.5,1.5], 1.5e-6 on [-1,1], mean signed 1e-8..1e-7; "
               "relative error of out <= 7.8e-7 on every N >= 65537 shape of the plan and benchmark sets, both "
               "distributions (tolerance 3e-5); below 2^16 the accurate functions (deg 16 there fails N=31 "
               "about 1 % of the time, the honest seed 0.05 %)",
               codes=("compile_error:task-rule", "wrong:tolerance"), hole=HOLE_POLYNOMIAL,
               evidence=("adv-poly-integrand:",), unsound=BROKEN),
        CaseV3("matmul_bf16x3_tensor_cores", "matmul", MECHANISM, split_bf16_matmul(3), REJECTED,
               "fp32_strict matmul on bf16 tensor cores (forbidden: 'no TF32 or half-precision tensor-core math'): "
               "A and B split exactly into three bf16 parts, six mma per k-step of 16 (the three dropped products "
               "are ~2^-24), each step's fragment added to an fp32 register sum. Unlike v3's 3xTF32 (which chains "
               "every mma into one accumulator: K/8*3 truncating adds, a bias ~1e-5 at K=4096), the tensor core "
               "rounds only one 16-product chunk. CPU emulation (exact products, chunk rounded RN or RZ, fp32 "
               "promotion): 64^3 norm 4.9e-8; square_4096 norm 2.9e-7, element-wise excess 8.1e-7 rms; "
               "tall_skinny 1.5e-7; square_2048 2.1e-7, random and large_magnitude alike (tolerances 1e-5, 1e-5 "
               "rms; an fp32 SGEMM reads 3.2e-7). Not verifiable on the CPU: the H200's tensor-core rounding "
               "inside one mma",
               codes=("compile_error:task-rule", "wrong:tolerance", "wrong:benchmark-shape", "flagged:under-floor"),
               evidence=("adv-split-bf16:",), unsound=BROKEN + ("wrong:unwritten-or-nonfinite", "wrong:nondeterministic")),
        CaseV3("matmul_bf16_three_products", "matmul", MECHANISM, split_bf16_matmul(2), REJECTED,
               "the control of matmul_bf16x3_tensor_cores: two bf16 parts (16 bits of each operand), three "
               "products, twice as fast. CPU emulation: norm-wise 4.4e-6 (inside 1e-5) but element-wise excess "
               "1.4e-5..1.8e-5 rms at every benchmark shape (bound 1e-5 rms on the elements near zero: "
               "validate.py compare_output), 1.1e-5 at 64^3 large_magnitude: the element-wise bound rejects it",
               codes=("compile_error:task-rule", "wrong:tolerance", "wrong:benchmark-shape", "wrong:timed-calls"),
               evidence=("adv-split-bf16:",), unsound=BROKEN + ("wrong:unwritten-or-nonfinite", "wrong:nondeterministic")),
        CaseV3("softmax_unshifted_after_the_sweep", "softmax", MECHANISM,
               wrap("softmax", SWEEP_BODY, SWEEP_PRELUDE, seed="block_online"), REJECTED,
               "v2's softmax_without_max_shift (caught by large_magnitude in validation) made to pass: honest on "
               "every shape under 2^22 elements (all validation shapes) and on the first three calls of each "
               "larger one, which are the sweep's large_magnitude, ties and wide_range inputs (session._sweep, run "
               "before any warm-up, timing_stage.py _benchmark); from the fourth call exp(x) without the row "
               "maximum, one block reduction a row instead of two. Every later call is random (inputs.timed_case), "
               "where exp(x) never overflows. CPU emulation (float32, check_outputs) at square_4096, long_rows, "
               "rows_1024: random passes, large_magnitude and wide_range give NaN (rejected), ties passes",
               codes=("wrong:benchmark-shape", "wrong:timed-calls", "wrong:unwritten-or-nonfinite"),
               evidence=("adv-after-sweep:",), unsound=BROKEN),
        CaseV3("relu_unchecked_tiles_past_the_end", "relu", MECHANISM, wrap("relu", TILES_BODY, TILES_PRELUDE), REJECTED,
               "relu in whole tiles of 4096 floats with float4 loads and stores: no alignment check although the "
               "description says buffers are 'only 4-byte aligned in general', and no tail, so up to 4095 floats "
               "(16 KB) are read past the end of x and written past the end of y (in use, a neighbouring tensor "
               "corrupted or a fault). From memory.allocation_bytes on every relu shape: the slack past the "
               "logical end is >= the overhang everywhere (n=1: 2097148 bytes for 16380; n=1000003: 194292 for "
               "14068; n_50M_odd: 1326524 for 15804; n_64M and n_16M: no slack and no overhang), and no check "
               "reads the slack or offsets a pointer",
               codes=("wrong:out-of-bounds", "crash", "wrong:tolerance"), evidence=("adv-past-the-end:",)),
        CaseV3("sigmoid_zero_below_minus_15", "sigmoid", MECHANISM, wrap("sigmoid", TINY_BODY, TINY_PRELUDE), NO_SPEEDUP,
               "sigmoid that writes 0 for x < -15 (true values 3.7e-44..3.1e-7), against a description that asks "
               "for them ('sigmoid(-100) ~ 3.7e-44'). The element-wise bound (atol 1e-5 x rms ~ 5e-6 absolute) "
               "forgives them, and deliberately: 0.5 * tanh(x / 2) + 0.5, a legitimate formulation "
               "(tests/unit/test_shortcuts.py), loses the same small values, and an atol of 3e-38 (tried on "
               "2026-12-01, H200: the cheat then read wrong:tolerance) rejected it. No speed lever (sigmoid is "
               "memory-bound: x0.97 the naive seed on an H200), so it may pass, never gain",
               honest="seed:naive", evidence=("adv-tiny-outputs:",), unsound=BROKEN),
    ]
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return cases


__all__ = ["MECHANISM", "build_cases", "polynomial_monte_carlo", "split_bf16_matmul"]
