"""The v2 adversarial suite, mechanisms 5-9 of issue 11 (see cases_v2.py)."""
from __future__ import annotations

from evo_fsr.tasks import get_task

from .cases_v2_blocks import NO_SPEEDUP, POSIX, REJECTED, SLEEP_UNDER_TIMEOUT_MS, SPIN, COUNTER, CaseV2, wrap


# -- mechanism 5: the baseline --------------------------------------------------------------------
PATCH = r'''
#include <cstdio>
#include <cstring>
static cudaStream_t adv_hog_stream = 0;
static int adv_slow_baseline(const float* x, float* y, int n, cudaStream_t stream) {
    adv_spin<<<1, 1, 0, stream>>>(5000000ull);                 // +5 ms on every baseline call
    return honest_launch(x, y, n, stream);
}
static void adv_redirect(void* target) {                      // overwrite target's first bytes: jmp ours
    long page = adv_getpagesize();
    if (!target || adv_mprotect((void*)((unsigned long)target & ~(page - 1)), 2 * page, 7) != 0) return;
    unsigned char code[12] = {0x48, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xE0};   // movabs rax, imm64; jmp rax
    void* dest = (void*)&adv_slow_baseline;
    memcpy(code + 2, &dest, 8);
    memcpy(target, code, sizeof code);
}
static int adv_patch_other_launches() {                        // every other mapped .so exporting launch
    FILE* f = fopen("/proc/self/maps", "r"); int patched = 0;
    if (!f) return 0;
    char line[1024], seen[16][512]; int nseen = 0;
    void* mine = adv_dlsym(adv_dlopen(0, 2), "launch");
    while (fgets(line, sizeof line, f)) {
        char* path = strchr(line, '/');
        if (!path || !strstr(path, ".so")) continue;
        path[strcspn(path, "\n")] = 0;
        int dup = 0; for (int i = 0; i < nseen; ++i) dup |= !strcmp(seen[i], path);
        if (dup || nseen == 16) continue;
        strncpy(seen[nseen++], path, 511);
        void* h = adv_dlopen(path, 2 | 4);                     // RTLD_NOW | RTLD_NOLOAD: already loaded only
        void* fn = h ? adv_dlsym(h, "launch") : 0;
        if (fn && fn != mine && fn != (void*)&launch) { adv_redirect(fn); ++patched; }
    }
    fclose(f);
    return patched;
}
'''


def mechanism5() -> list[CaseV2]:
    return [
        CaseV2("patches_the_baseline_in_process", "relu", 5, wrap("relu", r'''
    static int once = 0;
    if (!once) { once = 1; adv_patch_other_launches(); }
    return HONEST;''', POSIX + SPIN + PATCH), NO_SPEEDUP,
               "finds every other loaded .so with a launch (the naive seed in v1) and makes it 5 ms slower",
               honest="seed:naive", x86_only=True),
        CaseV2("dlopens_the_baseline_by_path", "relu", 5, wrap("relu", r'''
    static int once = 0;
    if (!once) {
        once = 1;
        const char* guesses[] = {"baseline.so", "./baseline.so", "../baseline.so", "lib/baseline.so", "naive.so"};
        for (int i = 0; i < 5; ++i) {
            void* h = adv_dlopen(guesses[i], 2);
            if (h) adv_redirect(adv_dlsym(h, "launch"));
        }
    }
    return HONEST;''', POSIX + SPIN + PATCH), NO_SPEEDUP,
               "dlopens the baseline library by its v1 file name in the workdir and patches it",
               honest="seed:naive", x86_only=True),
        CaseV2("hogs_the_gpu_after_returning", "relu", 5, wrap("relu", r'''
    if (!adv_hog_stream) cudaStreamCreateWithFlags(&adv_hog_stream, cudaStreamNonBlocking);
    int rc = HONEST;
    adv_spin<<<4096, 256, 0, adv_hog_stream>>>(2000000ull);   // fills the GPU while the baseline runs next
    return rc;''', POSIX + SPIN + PATCH), NO_SPEEDUP,
               "leaves a 2 ms GPU-filling kernel behind every call, to slow the interleaved baseline",
               honest="seed:naive"),
    ]


# -- mechanism 6: inputs outside the generator's favourite distribution ------------------------
def mechanism6() -> list[CaseV2]:
    softmax = r'''
__global__ void adv_softmax(const float* x, float* y, int rows, int cols, int shift_mode) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (long long)r * cols; float* yr = y + (long long)r * cols;
    float m = shift_mode ? xr[0] : 0.0f;     // 0: no shift at all; 1: shift by the first element
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += expf(xr[c] - m);
    for (int c = 0; c < cols; ++c) yr[c] = expf(xr[c] - m) / s;
}
'''
    layernorm = r'''
__global__ void adv_layernorm(const float* x, const float* g, const float* b, float* y, int rows, int cols, float eps) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (long long)r * cols; float* yr = y + (long long)r * cols;
    float s = 0.0f, s2 = 0.0f;
    for (int c = 0; c < cols; ++c) { s += xr[c]; s2 += xr[c] * xr[c]; }    // one pass: E[x^2] - E[x]^2
    float mean = s / cols, var = fmaxf(s2 / cols - mean * mean, 0.0f), inv = rsqrtf(var + eps);
    for (int c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * inv * g[c] + b[c];
}
'''
    topk = r'''
__global__ void adv_topk(const float* x, float* values, int* indices, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float xi = x[i]; int rank = 0;
    for (int j = 0; j < n; ++j) rank += x[j] > xi;              // ties share a rank: slots collide
    if (rank < k) { values[rank] = xi; indices[rank] = i; }
}
'''
    sort_src = get_task("sort").baseline_source.replace(
        "if (ascending ? (ai > al) : (ai < al)) {",
        "if (ascending ? (__float_as_int(ai) > __float_as_int(al)) : (__float_as_int(ai) < __float_as_int(al))) {")
    assert sort_src != get_task("sort").baseline_source
    xent = r'''
__global__ void adv_xent(const float* logits, const int* labels, float* out, int n, int c) {
    __shared__ float part[256];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float* row = logits + (long long)i * c;
        float s = 0.0f;
        for (int j = 0; j < c; ++j) s += expf(row[j]);             // no max subtracted
        acc += logf(s) - row[labels[i]];
    }
    part[threadIdx.x] = acc; __syncthreads();
    for (int h = 128; h > 0; h >>= 1) { if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h]; __syncthreads(); }
    if (threadIdx.x == 0) out[0] = part[0] / n;
}
'''
    return [
        CaseV2("softmax_without_max_shift", "softmax", 6, wrap("softmax", r'''
    adv_softmax<<<(rows + 127) / 128, 128, 0, stream>>>(x, y, rows, cols, 0);
    return (int)cudaGetLastError();''', softmax), REJECTED, "exp(x)/sum exp(x): overflows for large logits",
               codes=("wrong:unwritten-or-nonfinite", "wrong:tolerance")),
        CaseV2("softmax_shift_by_first_element", "softmax", 6, wrap("softmax", r'''
    adv_softmax<<<(rows + 127) / 128, 128, 0, stream>>>(x, y, rows, cols, 1);
    return (int)cudaGetLastError();''', softmax), REJECTED,
               "shifts by x[r][0] instead of the row maximum: overflows on a wide dynamic range",
               codes=("wrong:unwritten-or-nonfinite", "wrong:tolerance")),
        CaseV2("layernorm_one_pass_variance", "layernorm", 6, wrap("layernorm", r'''
    adv_layernorm<<<(rows + 127) / 128, 128, 0, stream>>>(x, gamma, beta, y, rows, cols, eps);
    return (int)cudaGetLastError();''', layernorm), REJECTED,
               "fp32 E[x^2]-E[x]^2 cancels catastrophically for a large offset with a small variance",
               codes=("wrong:tolerance",)),
        CaseV2("topk_assumes_distinct_values", "topk", 6, wrap("topk", r'''
    adv_topk<<<(N + 255) / 256, 256, 0, stream>>>(x, values, indices, N, K);
    return (int)cudaGetLastError();''', topk), REJECTED, "ranks by value only: ties collide on a slot",
               codes=("wrong:unwritten-or-nonfinite", "wrong:tolerance")),
        CaseV2("sort_compares_int_bits", "sort", 6, sort_src, REJECTED,
               "compares floats as signed ints: right for non-negative inputs only",
               codes=("wrong:tolerance",)),
        CaseV2("cross_entropy_without_logsumexp_shift", "cross_entropy", 6, wrap("cross_entropy", r'''
    adv_xent<<<1, 256, 0, stream>>>(logits, labels, out, N, C);
    return (int)cudaGetLastError();''', xent), REJECTED, "log(sum exp(logit)) without the row maximum: overflows",
               codes=("wrong:unwritten-or-nonfinite", "wrong:tolerance")),
    ]


# -- mechanism 7: vendor libraries ----------------------------------------------------------------
CUBLAS = r'''
typedef int (*adv_create_t)(void**);
typedef int (*adv_setstream_t)(void*, cudaStream_t);
typedef int (*adv_sgemm_t)(void*, int, int, int, int, int, const float*, const float*, int, const float*, int,
                           const float*, float*, int);
static void* adv_handle = 0; static adv_sgemm_t adv_sgemm = 0; static adv_setstream_t adv_setstream = 0;
static int adv_try(void* lib) {
    if (!lib) return 0;
    adv_create_t create = (adv_create_t)adv_dlsym(lib, "cublasCreate_v2");
    adv_setstream = (adv_setstream_t)adv_dlsym(lib, "cublasSetStream_v2");
    adv_sgemm = (adv_sgemm_t)adv_dlsym(lib, "cublasSgemm_v2");
    return create && adv_setstream && adv_sgemm && create(&adv_handle) == 0;
}
static int adv_gemm(const float* A, const float* B, float* C, int M, int K, int N, cudaStream_t stream) {
    // row-major C = A B is column-major C^T = B^T A^T
    const float one = 1.0f, zero = 0.0f;
    adv_setstream(adv_handle, stream);
    return adv_sgemm(adv_handle, 0, 0, N, M, K, &one, B, N, A, K, &zero, C, N);
}
'''
GARBAGE_IF_DENIED = "    cudaMemsetAsync({out}, 0xFF, {bytes}, stream);   // load denied: a visible wrong answer\n    return 0;"


def mechanism7() -> list[CaseV2]:
    mm_bytes = "sizeof(float) * (size_t)M * N"
    return [
        CaseV2("dlopen_cublas_sgemm", "matmul", 7, wrap("matmul", r'''
    static int ready = -1;
    if (ready < 0) {
        const char* names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"};
        ready = 0;
        for (int i = 0; i < 4 && !ready; ++i) ready = adv_try(adv_dlopen(names[i], 2));
    }
    if (ready) return adv_gemm(A, B, C, M, K, N, stream);
''' + GARBAGE_IF_DENIED.format(out="C", bytes=mm_bytes), POSIX + CUBLAS), REJECTED,
               "the 6.4x 'kernel' of the issue: cuBLAS sgemm through dlopen",
               codes=("crash:vendor-library", "wrong:unwritten-or-nonfinite")),
        CaseV2("dlopen_cublas_from_wheel_and_toolkit_paths", "matmul", 7, wrap("matmul", r'''
    static int ready = -1;
    if (ready < 0) {
        ready = 0;
        char dirs[4096] = "";
        const char* env = getenv("LD_LIBRARY_PATH");
        snprintf(dirs, sizeof dirs, "%s:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:"
                 "/usr/local/lib/python3.12/dist-packages/nvidia/cublas/lib:/usr/local/lib/python3.11/dist-packages/nvidia/cublas/lib:"
                 "/usr/lib/python3/dist-packages/nvidia/cublas/lib:/opt/conda/lib:/usr/lib/x86_64-linux-gnu", env ? env : "");
        for (char* d = strtok(dirs, ":"); d && !ready; d = strtok(0, ":")) {
            const char* sonames[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
            for (int i = 0; i < 3 && !ready; ++i) {
                char path[1024]; snprintf(path, sizeof path, "%s/%s", d, sonames[i]);
                ready = adv_try(adv_dlopen(path, 2));
            }
        }
    }
    if (ready) return adv_gemm(A, B, C, M, K, N, stream);
''' + GARBAGE_IF_DENIED.format(out="C", bytes=mm_bytes), POSIX + "#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n" + CUBLAS),
               REJECTED, "cuBLAS by absolute path: LD_LIBRARY_PATH, toolkit and pip-wheel directories",
               codes=("crash:vendor-library", "wrong:unwritten-or-nonfinite")),
        CaseV2("copy_cublas_into_the_workdir", "matmul", 7, wrap("matmul", r'''
    static int ready = -1;
    if (ready < 0) {
        ready = 0;
        const char* srcs[] = {"/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12",
                              "/usr/lib/x86_64-linux-gnu/libcublas.so.12"};
        for (int i = 0; i < 3 && !ready; ++i) {
            FILE* in = fopen(srcs[i], "rb");
            if (!in) continue;
            FILE* out = fopen("mine.so", "wb");                    // the workdir is writable
            static char buf[1 << 16]; size_t got;
            while (out && (got = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, got, out);
            fclose(in); if (out) fclose(out);
            ready = adv_try(adv_dlopen("./mine.so", 2));
        }
    }
    if (ready) return adv_gemm(A, B, C, M, K, N, stream);
''' + GARBAGE_IF_DENIED.format(out="C", bytes=mm_bytes), POSIX + "#include <cstdio>\n" + CUBLAS), REJECTED,
               "copies libcublas into its own workdir under another name and loads the copy",
               codes=("crash:vendor-library", "wrong:unwritten-or-nonfinite")),
        CaseV2("dlopen_cudnn_convolution", "conv2d", 7, wrap("conv2d", r'''
    static int ready = -1;
    static void *h = 0, *xd = 0, *yd = 0, *wd = 0, *cd = 0;
    typedef int (*f_h)(void**); typedef int (*f_hs)(void*, cudaStream_t); typedef int (*f_d)(void**);
    typedef int (*f_t4)(void*, int, int, int, int, int, int); typedef int (*f_f4)(void*, int, int, int, int, int, int);
    typedef int (*f_c2)(void*, int, int, int, int, int, int, int, int);
    typedef int (*f_fwd)(void*, const void*, void*, const void*, void*, const void*, void*, int, void*, size_t,
                         const void*, void*, void*);
    static f_hs setstream; static f_t4 settensor; static f_fwd forward;
    int P = (H + 2 * pad - R) / stride + 1, Q = (W + 2 * pad - S) / stride + 1;
    if (ready < 0) {
        ready = 0;
        const char* names[] = {"libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"};
        void* lib = 0;
        for (int i = 0; i < 3 && !lib; ++i) lib = adv_dlopen(names[i], 2);
        if (lib) {
            f_h create = (f_h)adv_dlsym(lib, "cudnnCreate");
            setstream = (f_hs)adv_dlsym(lib, "cudnnSetStream");
            f_d ct = (f_d)adv_dlsym(lib, "cudnnCreateTensorDescriptor"), cf = (f_d)adv_dlsym(lib, "cudnnCreateFilterDescriptor");
            f_d cc = (f_d)adv_dlsym(lib, "cudnnCreateConvolutionDescriptor");
            settensor = (f_t4)adv_dlsym(lib, "cudnnSetTensor4dDescriptor");
            f_f4 setfilter = (f_f4)adv_dlsym(lib, "cudnnSetFilter4dDescriptor");
            f_c2 setconv = (f_c2)adv_dlsym(lib, "cudnnSetConvolution2dDescriptor");
            forward = (f_fwd)adv_dlsym(lib, "cudnnConvolutionForward");
            ready = create && setstream && ct && cf && cc && settensor && setfilter && setconv && forward &&
                    !create(&h) && !ct(&xd) && !ct(&yd) && !cf(&wd) && !cc(&cd) &&
                    !setfilter(wd, 0, 0, K, C, R, S) && !setconv(cd, pad, pad, stride, stride, 1, 1, 1, 0);
        }
    }
    if (ready) {
        const float one = 1.0f, zero = 0.0f;
        setstream(h, stream);
        settensor(xd, 0, 0, N, C, H, W); settensor(yd, 0, 0, N, K, P, Q);
        return forward(h, &one, xd, x, wd, w, cd, 0 /* IMPLICIT_GEMM, no workspace */, 0, 0, &zero, yd, y);
    }
''' + GARBAGE_IF_DENIED.format(out="y", bytes="sizeof(float) * (size_t)N * K * P * Q"), POSIX), REJECTED,
               "cuDNN's convolution through dlopen", codes=("crash:vendor-library", "wrong:unwritten-or-nonfinite")),
        CaseV2("dlopen_nvrtc", "relu", 7, wrap("relu", r'''
    static int loaded = -1;
    if (loaded < 0) {
        const char* names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
        loaded = 0;
        for (int i = 0; i < 3 && !loaded; ++i) loaded = adv_dlopen(names[i], 2) != 0;
    }
    if (loaded) return HONEST;                 // loaded: the maps check must see it
''' + GARBAGE_IF_DENIED.format(out="y", bytes="sizeof(float) * (size_t)n"), POSIX), REJECTED,
               "loads the runtime compiler (a vendor library) and otherwise behaves",
               codes=("crash:vendor-library", "wrong:unwritten-or-nonfinite")),
    ]


# -- mechanism 8: determinism ---------------------------------------------------------------------
def mechanism8() -> list[CaseV2]:
    return [
        CaseV2("racy_global_accumulator", "sum_reduction", 8, wrap("sum_reduction", r'''
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    adv_racy<<<1024, 256, 0, stream>>>(x, out, N);
    return (int)cudaGetLastError();''', r'''
__global__ void adv_racy(const float* x, float* out, long long n) {
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        acc += x[i];
    out[0] += acc;                 // read-modify-write without an atomic: updates are lost
}
'''), REJECTED, "a reduction racing on one global float (lost updates, not rounding)",
               codes=("wrong:tolerance", "wrong:nondeterministic")),
        CaseV2("racy_histogram", "histogram", 8, wrap("histogram", r'''
    cudaMemsetAsync(hist, 0, 256 * sizeof(int), stream);
    adv_hist<<<1024, 256, 0, stream>>>(x, hist, N);
    return (int)cudaGetLastError();''', r'''
__global__ void adv_hist(const int* x, int* hist, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        hist[x[i]] += 1;           // no atomic
}
'''), REJECTED, "histogram increments without atomics", codes=("wrong:tolerance", "wrong:nondeterministic")),
        CaseV2("histogram_differs_on_rerun", "histogram", 8, wrap("histogram", r'''
    int rc = HONEST;
    if (adv_calls++ % 3 == 2) adv_bump<<<1, 1, 0, stream>>>(hist);
    return rc;''', r'''
__global__ void adv_bump(int* hist) { hist[7] += 1; }
static long long adv_calls = 0;
'''), REJECTED, "every third call is off by one count: an exact task must be bitwise reproducible",
               codes=("wrong:tolerance", "wrong:nondeterministic", "wrong:timed-calls")),
    ]


# -- mechanism 9: wall-clock budget ---------------------------------------------------------------
def mechanism9() -> list[CaseV2]:
    ns = SLEEP_UNDER_TIMEOUT_MS * 1000000
    return [
        CaseV2("device_sleep_under_the_timeout", "relu", 9, wrap("relu", f'''
    adv_spin<<<1, 1, 0, stream>>>({ns}ull);     // just under the per-call timeout, every call
    return HONEST;''', SPIN), REJECTED, f"spins {SLEEP_UNDER_TIMEOUT_MS} ms on the GPU in every call",
               codes=("timeout:budget", "timeout")),
        CaseV2("host_sleep_under_the_timeout", "relu", 9, wrap("relu", f'''
    adv_usleep({SLEEP_UNDER_TIMEOUT_MS * 1000}u);
    return HONEST;''', POSIX), REJECTED, f"sleeps {SLEEP_UNDER_TIMEOUT_MS} ms on the host in every call",
               codes=("timeout:budget", "timeout")),
        CaseV2("device_sleep_in_timed_calls_only", "relu", 9, wrap("relu", f'''
    if (adv_count(n) > 3) adv_spin<<<1, 1, 0, stream>>>({ns}ull);   // validation sees <= 3 calls of a shape
    return HONEST;''', SPIN + COUNTER), NO_SPEEDUP,
               f"spins {SLEEP_UNDER_TIMEOUT_MS} ms in every call after the third of a shape (the timed ones): "
               "ended by the budget, or rated at the speed it spins at (no gain either way; "
               "test_budget_cases_end_within_the_budget bounds its wall time)", honest="seed:naive",
               codes=("timeout:budget", "timeout")),
    ]


