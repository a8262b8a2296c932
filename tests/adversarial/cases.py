"""The adversarial suite's manifest: bad candidates and the verdict the evaluator must reach.

Most cases are variants of the conv2d naive seed (tasks/conv2d/seeds/naive.cu).  Host-behaviour
cases make their OUTPUT depend on whether the violation worked: a contained attempt leaves a
correct kernel (verdict OK), a hole writes garbage (verdict WRONG), and where the sandbox kills
the process (seccomp: fork, exec) the verdict is CRASH with rejection ``crash:sandbox-violation``.

``build_cases(ctx)`` returns the cases; ``ctx`` carries the paths and the loopback port a test
prepared (secret file, places that must stay unwritten, a listening socket on 127.0.0.1).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evo_fsr.tasks import get_task
from evo_fsr.types import Status

ROOT = Path(__file__).resolve().parents[2]
NAIVE = get_task("conv2d").baseline_source
INCLUDE = "#include <cuda_runtime.h>\n"
KERNEL_LINE = "    y[idx] = acc;\n"
ACC_LINE = "    float acc = 0.0f;\n"
LAUNCH_LINE = "    conv2d_naive<<<blocks, threads, 0, stream>>>(x, w, y, N, C, H, W, K, R, S, pad, stride, P, Q);\n"
HOST_LINE = "    int P = (H + 2 * pad - R) / stride + 1;\n"          # first line of launch()
PRODUCT = "                acc += x[(((long long)n * C + c) * H + h) * W + wi] * w[((k * C + c) * R + r) * S + s];\n"
for _piece in (INCLUDE, KERNEL_LINE, ACC_LINE, LAUNCH_LINE, HOST_LINE, PRODUCT):
    assert _piece in NAIVE, _piece

API_KEY = "sk-adversarial-test"
SECRET_MARKER = "EVO-FSR-ADVERSARIAL-SECRET-7f3a9c"


@dataclass(frozen=True)
class Context:
    root: Path = ROOT
    secret_file: Path = Path("/tmp/evo-fsr-adversarial-secret.txt")   # holds SECRET_MARKER
    outside_file: Path = Path("/tmp/evo-fsr-adversarial-outside.txt")  # must never appear
    repo_file: Path = ROOT / "evo-fsr-adversarial-was-here.txt"       # must never appear
    port: int = 1                                                      # loopback listener


@dataclass(frozen=True)
class Case:
    name: str
    category: str            # output | timing | fault | host | compile
    source: str
    expected: Status
    rejection: str | None = None           # expected EvalResult.rejection (None: not checked / OK)
    requires: tuple[str, ...] = ()         # sandbox layers the expectation relies on
    note: str = ""
    timeout_case: bool = False             # needs the short validation timeout
    known_hole: str = ""                   # a hole the evaluator still has: the test xfails (strict)
    check_log: str | None = None           # substring the run log must contain
    max_log_chars: int | None = None
    extra: dict = field(default_factory=dict)


def variant(kernel_line: str = KERNEL_LINE, launch_line: str = LAUNCH_LINE, prelude: str = "",
            host: str = "", product: str = PRODUCT, acc_line: str = ACC_LINE) -> str:
    src = (NAIVE.replace(KERNEL_LINE, kernel_line).replace(LAUNCH_LINE, launch_line)
           .replace(PRODUCT, product).replace(ACC_LINE, acc_line))
    src = src.replace(HOST_LINE, host + HOST_LINE, 1)
    return src.replace(INCLUDE, INCLUDE + prelude, 1)


def _c_string(path: Path | str) -> str:
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


GARBAGE = "        adv_garbage = 1;\n"
GARBAGE_PRELUDE = "static int adv_garbage = 0;\n"
# a hole shows up as a wrong answer: every output multiplied by 3
GARBAGE_LAUNCH = LAUNCH_LINE + ("    if (adv_garbage) { scale3<<<blocks, threads, 0, stream>>>(y, total); }\n")
SCALE3 = ("__global__ void scale3(float* y, long long total) {\n"
          "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
          "    if (i < total) y[i] *= 3.0f;\n}\n")


def host_probe(name: str, decls: str, attempt: str, note: str, expected: Status = Status.OK,
               rejection: str | None = None, requires: tuple[str, ...] = ()) -> Case:
    """A kernel that is correct unless ``attempt`` (host code in launch) sets adv_garbage."""
    src = variant(prelude=decls + GARBAGE_PRELUDE + SCALE3, host=attempt, launch_line=GARBAGE_LAUNCH)
    return Case(name, "host", src, expected, rejection, requires, note)


# ---------------------------------------------------------------------------------------------
def output_cases() -> list[Case]:
    race = NAIVE.split("__global__")[0] + r'''
__global__ void conv2d_race(const float* __restrict__ x, const float* __restrict__ w, float* y,
                            int N, int C, int H, int W, int K, int R, int S, int pad, int stride, int P, int Q) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long idx = t / 4;
    int part = (int)(t % 4);
    long long total = (long long)N * K * P * Q;
    if (idx >= total) return;
    int q = idx % Q, p = (idx / Q) % P, k = (idx / ((long long)P * Q)) % K, n = idx / ((long long)K * P * Q);
    float acc = 0.0f;
    int j = 0;
    for (int c = 0; c < C; ++c)
        for (int r = 0; r < R; ++r)
            for (int s = 0; s < S; ++s, ++j) {
                int h = p * stride - pad + r, wi = q * stride - pad + s;
                if ((j & 3) != part || h < 0 || h >= H || wi < 0 || wi >= W) continue;
                acc += x[(((long long)n * C + c) * H + h) * W + wi] * w[((k * C + c) * R + r) * S + s];
            }
    if (part == 0) y[idx] = 0.0f;
    __syncwarp(__activemask());
    y[idx] += acc;   // data race: four lanes read-modify-write the same element without atomics
}

extern "C" int launch(const float* x, const float* w, float* y, int N, int C, int H, int W,
                      int K, int R, int S, int pad, int stride, cudaStream_t stream) {
    int P = (H + 2 * pad - R) / stride + 1;
    int Q = (W + 2 * pad - S) / stride + 1;
    long long total = (long long)N * K * P * Q * 4;
    int threads = 256;
    unsigned blocks = (unsigned)((total + threads - 1) / threads);
    conv2d_race<<<blocks, threads, 0, stream>>>(x, w, y, N, C, H, W, K, R, S, pad, stride, P, Q);
    return (int)cudaGetLastError();
}
'''
    cache_decls = ("#include <cstring>\nstatic float* adv_cache = nullptr;\nstatic size_t adv_cache_bytes = 0;\n"
                   "static int adv_calls = 0;\n")
    def cached(key_decl: str, hit: str, remember: str) -> str:
        host = (key_decl +
                "    {\n"
                "        int P0 = (H + 2 * pad - R) / stride + 1, Q0 = (W + 2 * pad - S) / stride + 1;\n"
                "        size_t bytes = sizeof(float) * (size_t)N * K * P0 * Q0;\n"
                f"        if (adv_cache && bytes == adv_cache_bytes && ({hit})) {{\n"
                "            cudaMemcpyAsync(y, adv_cache, bytes, cudaMemcpyDeviceToDevice, stream);\n"
                "            return (int)cudaGetLastError();\n"
                "        }\n"
                "    }\n")
        launch_line = (LAUNCH_LINE +
                       "    if ((size_t)total * sizeof(float) != adv_cache_bytes) {\n"
                       "        if (adv_cache) cudaFree(adv_cache);\n"
                       "        adv_cache_bytes = (size_t)total * sizeof(float);\n"
                       "        cudaMalloc(&adv_cache, adv_cache_bytes);\n"
                       "    }\n"
                       "    cudaMemcpyAsync(adv_cache, y, adv_cache_bytes, cudaMemcpyDeviceToDevice, stream);\n"
                       + remember)
        return variant(prelude=cache_decls, host=host, launch_line=launch_line)

    nondet = variant(
        prelude="__device__ unsigned adv_flip;\nstatic unsigned adv_count = 0;\n",
        kernel_line="    y[idx] = adv_flip ? __uint_as_float(__float_as_uint(acc) ^ 1u) : acc;\n",
        host="    { unsigned f = adv_count++ > 0; cudaMemcpyToSymbolAsync(adv_flip, &f, sizeof f, 0, "
             "cudaMemcpyHostToDevice, stream); cudaStreamSynchronize(stream); }\n")
    return [
        Case("writes_nothing", "output", variant("    (void)acc;\n"), Status.WRONG, "wrong:unwritten-or-nonfinite"),
        Case("one_row", "output", variant("    if (n == 0 && k == 0 && p == 0) y[idx] = acc;\n"), Status.WRONG,
             "wrong:unwritten-or-nonfinite", note="writes only the first output row"),
        Case("one_tile", "output", variant("    if (idx < 256) y[idx] = acc;\n"), Status.WRONG,
             "wrong:unwritten-or-nonfinite", note="writes only the first 256-element tile"),
        Case("only_benchmark_shape", "output",
             variant("    y[idx] = (N == 8 && C == 64) ? acc : 0.0f;\n"), Status.WRONG, "wrong:tolerance",
             note="correct only for the quick benchmark's first shape"),
        Case("skips_benchmark_shapes", "output", variant(host="    if (N >= 8) return 0;\n"), Status.WRONG,
             "wrong:benchmark-shape", note="correct on validation shapes, does nothing on benchmark shapes"),
        Case("constant_zero", "output", variant("    y[idx] = 0.0f;\n"), Status.WRONG, "wrong:tolerance"),
        Case("uninitialised_accumulator", "output", variant("    y[idx] += acc;\n"), Status.WRONG,
             "wrong:unwritten-or-nonfinite", note="reads the output buffer it never initialised"),
        Case("nondeterministic_bits", "output", nondet, Status.OK,
             note="flips the last bit after its first call: within tolerance and conv2d declares "
                  "`determinism: tolerance` (split-K atomics are legitimate), so the re-run judges it by the "
                  "tolerance; bitwise tasks are covered by v2's histogram_differs_on_rerun"),
        Case("data_race", "output", race, Status.WRONG, "wrong:tolerance",
             note="four lanes accumulate into one element without atomics (lost updates)"),
        Case("fp16_math", "output", variant(
            prelude="#include <cuda_fp16.h>\n",
            product="                acc += __half2float(__float2half(x[(((long long)n * C + c) * H + h) * W + wi]) * "
                    "__float2half(w[((k * C + c) * R + r) * S + s]));\n"), Status.COMPILE_ERROR, "compile_error:task-rule",
             note="half products (mul.f16): refused before it runs by conv2d's fp32_strict PTX rule "
                  "(verdict/task_rules.py); it read wrong:tolerance before that rule"),
        Case("tf32_math", "output", variant(
            prelude="__device__ __forceinline__ float tf32(float v) { return __uint_as_float(__float_as_uint(v) & 0xffffe000u); }\n",
            product="                acc += tf32(x[(((long long)n * C + c) * H + h) * W + wi]) * "
                    "tf32(w[((k * C + c) * R + r) * S + s]);\n"), Status.WRONG, "wrong:tolerance"),
        Case("nan_output", "output", variant("    y[idx] = idx == 7 ? __int_as_float(0x7fc00000) : acc;\n"),
             Status.WRONG, "wrong:unwritten-or-nonfinite"),
        Case("inf_output", "output", variant("    y[idx] = idx == total - 1 ? __int_as_float(0x7f800000) : acc;\n"),
             Status.WRONG, "wrong:unwritten-or-nonfinite"),
        Case("modifies_input", "output", variant(
            prelude="__global__ void scribble(float* x) { x[0] = 42.0f; }\n",
            launch_line=LAUNCH_LINE + "    scribble<<<1, 1, 0, stream>>>(const_cast<float*>(x));\n"),
             Status.WRONG, "wrong:input-modified"),
        Case("cache_by_pointer", "output", cached(
            "    static const void* adv_x = nullptr; static const void* adv_w = nullptr; static void* adv_y = nullptr;\n",
            "adv_x == x && adv_w == w && adv_y == y",
            "    adv_x = x; adv_w = w; adv_y = y;\n"), Status.WRONG,
             note="replays its last output when called with the same pointers (in validation, where the "
                  "allocator reuses addresses, or while timing)"),
        Case("cache_by_shape", "output", cached(
            "    static int adv_key[9] = {-1};\n    int key[9] = {N, C, H, W, K, R, S, pad, stride};\n",
            "memcmp(adv_key, key, sizeof key) == 0",
            "    memcpy(adv_key, key, sizeof key);\n"), Status.WRONG),
        Case("cache_by_call_count", "output", cached("", "adv_calls >= 2", "    ++adv_calls;\n"), Status.WRONG,
             note="computes on its first two calls, replays the last output afterwards"),
    ]


def timing_cases() -> list[Case]:
    side = variant(launch_line=(
        "    static cudaStream_t side = nullptr;\n"
        "    if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);\n"
        "    conv2d_naive<<<blocks, threads, 0, side>>>(x, w, y, N, C, H, W, K, R, S, pad, stride, P, Q);\n"))
    thread = variant(
        prelude=("extern \"C\" int pthread_create(unsigned long*, const void*, void* (*)(void*), void*);\n"
                 "extern \"C\" int pthread_join(unsigned long, void**);\n"
                 "struct AdvJob { const float* x; const float* w; float* y; int a[11]; unsigned blocks; };\n"
                 "__global__ void conv2d_naive(const float* __restrict__, const float* __restrict__, float* __restrict__,"
                 " int, int, int, int, int, int, int, int, int, int, int);\n"
                 "static void* adv_worker(void* arg) {\n"
                 "    AdvJob* j = (AdvJob*)arg;\n"
                 "    static cudaStream_t s = nullptr;\n"
                 "    if (!s) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);\n"
                 "    conv2d_naive<<<j->blocks, 256, 0, s>>>(j->x, j->w, j->y, j->a[0], j->a[1], j->a[2], j->a[3], j->a[4],"
                 " j->a[5], j->a[6], j->a[7], j->a[8], j->a[9], j->a[10]);\n"
                 "    return nullptr;\n}\n"),
        launch_line=("    AdvJob job = {x, w, y, {N, C, H, W, K, R, S, pad, stride, P, Q}, blocks};\n"
                     "    unsigned long tid;\n"
                     "    if (pthread_create(&tid, nullptr, adv_worker, &job) != 0) return 999;\n"
                     "    pthread_join(tid, nullptr);\n"))
    # two-entry output caches keyed on input CONTENT, decided on the device (no host sync).  Every
    # validation call has fresh inputs (a miss); every timed call sees inputs it has not seen
    # before (the benchmark set rotated), so a key on sampled elements misses there too and the
    # kernel must do its work (OK, and no faster than naive), while a key that a rotation leaves
    # unchanged (the exact sum of all bits) hits and replays a stale output (WRONG)
    def content_cache(key_decls: str, key_launch: str) -> str:
        return variant(
            prelude=(key_decls + "__device__ unsigned long long adv_keys[2][8];\n__device__ int adv_valid[2];\n"
                     "__device__ int adv_hit;\n__device__ int adv_next;\n"
                     "static float* adv_cache[2] = {nullptr, nullptr};\nstatic long long adv_cap = 0;\n"
                     "__device__ void adv_lookup(const unsigned long long* k) {\n"
                     "    adv_hit = -1;\n"
                     "    for (int e = 0; e < 2; ++e) {\n"
                     "        bool same = adv_valid[e];\n"
                     "        for (int i = 0; i < 8; ++i) same = same && k[i] == adv_keys[e][i];\n"
                     "        if (same) adv_hit = e;\n    }\n"
                     "    if (adv_hit < 0) { int e = adv_next; adv_next ^= 1; for (int i = 0; i < 8; ++i) adv_keys[e][i] = k[i];"
                     " adv_valid[e] = 1; adv_hit = -2 - e; }\n}\n"
                     "__global__ void adv_copy(float* y, float* c0, float* c1, long long total, int store) {\n"
                     "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
                     "    if (i >= total) return;\n"
                     "    int h = adv_hit;\n"
                     "    if (!store && h >= 0) y[i] = (h == 0 ? c0 : c1)[i];\n"
                     "    if (store && h < 0) (h == -2 ? c0 : c1)[i] = y[i];\n}\n"),
            acc_line="    if (adv_hit >= 0) return;\n    float acc = 0.0f;\n",
            host="",
            launch_line=(
                "    long long nx = (long long)N * C * H * W, nw = (long long)K * C * R * S;\n"
                "    if (total > adv_cap) {\n"
                "        for (int e = 0; e < 2; ++e) { if (adv_cache[e]) cudaFree(adv_cache[e]); cudaMalloc(&adv_cache[e], total * 4); }\n"
                "        int zero[2] = {0, 0}; cudaMemcpyToSymbol(adv_valid, zero, sizeof zero); adv_cap = total;\n"
                "    }\n"
                + key_launch +
                "    adv_copy<<<blocks, threads, 0, stream>>>(y, adv_cache[0], adv_cache[1], total, 0);\n"
                + LAUNCH_LINE +
                "    adv_copy<<<blocks, threads, 0, stream>>>(y, adv_cache[0], adv_cache[1], total, 1);\n"))

    sampled = content_cache(
        "__device__ void adv_lookup(const unsigned long long* k);\n"
        "__global__ void adv_key_sampled(const float* x, const float* w, long long nx, long long nw) {\n"
        "    unsigned long long k[8] = {__float_as_uint(x[0]), __float_as_uint(x[nx / 2]), __float_as_uint(x[nx - 1]),\n"
        "        __float_as_uint(w[0]), __float_as_uint(w[nw / 2]), __float_as_uint(w[nw - 1]),\n"
        "        (unsigned long long)nx, (unsigned long long)nw};\n"
        "    adv_lookup(k);\n}\n",
        "    adv_key_sampled<<<1, 1, 0, stream>>>(x, w, nx, nw);\n")
    summed = content_cache(
        "__device__ void adv_lookup(const unsigned long long* k);\n"
        "__device__ unsigned long long adv_sum[2];\n"
        "__global__ void adv_zero() { adv_sum[0] = 0; adv_sum[1] = 0; }\n"
        "__global__ void adv_reduce(const float* p, long long n, int slot) {\n"
        "    unsigned long long s = 0;\n"
        "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)\n"
        "        s += __float_as_uint(p[i]);\n"
        "    atomicAdd(&adv_sum[slot], s);\n}\n"
        "__global__ void adv_key_summed(long long nx, long long nw) {\n"
        "    unsigned long long k[8] = {adv_sum[0], adv_sum[1], (unsigned long long)nx, (unsigned long long)nw, 0, 0, 0, 0};\n"
        "    adv_lookup(k);\n}\n",
        "    adv_zero<<<1, 1, 0, stream>>>();\n"
        "    adv_reduce<<<256, 256, 0, stream>>>(x, nx, 0);\n"
        "    adv_reduce<<<64, 256, 0, stream>>>(w, nw, 1);\n"
        "    adv_key_summed<<<1, 1, 0, stream>>>(nx, nw);\n")
    return [
        Case("side_stream", "timing", side, Status.OK, extra={"rejected_or_no_speedup": True, "max_speedup": 1.2},
             note="the naive work on a side stream: charged (device-wide events), so no speedup"),
        Case("own_thread_stream", "timing", thread, Status.OK,
             extra={"rejected_or_no_speedup": True, "max_speedup": 1.2},
             note="a thread of its own launches the work on its own stream: charged by the trusted window"),
        Case("content_cache_sampled", "timing", sampled, Status.OK, extra={"max_speedup": 1.2},
             note="replays outputs for inputs it has seen (key: sampled elements): every timed call sees unseen "
                  "inputs, so it never hits there and is timed doing its work (before issue 4's fix it hit on "
                  "every timed call and was ~25x faster than naive)"),
        Case("content_cache_rotation_invariant", "timing", summed, Status.WRONG,
             extra={"rejected_or_no_speedup": True, "max_speedup": 1.2},
             note="key: the exact sum of all input bits: v2's mixed timed inputs change every sum, so it never "
                  "hits (no speedup), and a hit would replay another call's output (wrong)"),
    ]


def fault_cases() -> list[Case]:
    decls = ("extern \"C\" unsigned int sleep(unsigned int);\n")
    return [
        Case("illegal_address", "fault", variant("    y[idx + (1LL << 40)] = acc;\n"), Status.CRASH),
        Case("trap", "fault", variant("    if (idx == 3) __trap();\n    y[idx] = acc;\n"), Status.CRASH),
        Case("device_assert", "fault", variant("    assert(idx != 3);\n    y[idx] = acc;\n", prelude="#include <cassert>\n"),
             Status.CRASH),
        Case("kernel_infinite_loop", "fault", variant("    while (acc == acc) { acc += 1.0f; }\n    y[idx] = acc;\n"),
             Status.TIMEOUT, timeout_case=True),
        Case("host_infinite_loop", "fault", variant(host="    { volatile int spin = 1; while (spin) {} }\n"),
             Status.TIMEOUT, timeout_case=True),
        Case("host_sleep", "fault", variant(prelude=decls, host="    sleep(3600);\n"), Status.TIMEOUT, timeout_case=True),
        Case("host_exit0", "fault", variant(prelude="#include <cstdlib>\n", host="    exit(0);\n"), Status.CRASH),
        Case("host_abort", "fault", variant(prelude="#include <cstdlib>\n", host="    abort();\n"), Status.CRASH),
        Case("host_segfault", "fault", variant(host="    *(volatile int*)16 = 1;\n"), Status.CRASH),
        Case("too_much_shared_memory", "fault", variant(launch_line=LAUNCH_LINE.replace(
            "<<<blocks, threads, 0, stream>>>", "<<<blocks, threads, 1 << 20, stream>>>")), Status.CRASH),
        Case("too_many_threads", "fault", variant(launch_line=LAUNCH_LINE.replace(
            "<<<blocks, threads, 0, stream>>>", "<<<blocks, 2048, 0, stream>>>")), Status.CRASH),
        Case("huge_device_allocation", "fault", variant(host=(
            "    { void* p = nullptr; cudaError_t e = cudaMalloc(&p, 1ULL << 52); if (e != cudaSuccess) return (int)e; }\n")),
             Status.CRASH),
        Case("hog_device_memory", "fault", variant(host=(
            "    { static bool done = false; size_t chunk = 1ULL << 30; void* p;\n"
            "      while (!done && chunk >= (1ULL << 20)) { if (cudaMalloc(&p, chunk) != cudaSuccess) { cudaGetLastError(); chunk /= 2; } }\n"
            "      done = true; }\n")), Status.OK,
             note="takes all free device memory and keeps it: since verdict v2 every buffer is the "
                  "evaluator's, allocated before the candidate runs, so the verdict is unaffected and "
                  "the next candidate (fresh process) too"),
        Case("host_printf_flood", "fault", variant(prelude="#include <cstdio>\n", host=(
            "    { static bool done = false; if (!done) { done = true; for (int i = 0; i < 400000; ++i)\n"
            "      printf(\"flood %d ................................................................................\\n\", i);"
            " fflush(stdout); } }\n")), Status.OK, check_log="bytes of output dropped", max_log_chars=200_000),
        Case("device_printf_flood", "fault", variant(
            "    if (idx < 4096) for (int i = 0; i < 64; ++i) printf(\"flood %lld %d ..................................\\n\", idx, i);\n"
            "    y[idx] = acc;\n", prelude="#include <cstdio>\n"), Status.OK, max_log_chars=200_000),
    ]


def host_cases(ctx: Context) -> list[Case]:
    cstd = "#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n"
    def open_probe(name: str, path: Path | str, mode: str, note: str, requires: tuple[str, ...] = ("landlock",)) -> Case:
        attempt = (f"    {{ FILE* f = fopen({_c_string(path)}, \"{mode}\");\n"
                   "      if (f) {\n" + GARBAGE + ("        fputs(\"adversarial\", f);\n" if "w" in mode or "a" in mode else "")
                   + "        fclose(f); } }\n")
        return host_probe(name, cstd, attempt, note, requires=requires)

    unistd = ("extern \"C\" int getppid(void);\nextern \"C\" int fork(void);\nextern \"C\" void _exit(int);\n"
              "extern \"C\" int kill(int, int);\nextern \"C\" long ptrace(long, int, void*, void*);\n"
              "extern \"C\" int socket(int, int, int);\nextern \"C\" int connect(int, const void*, unsigned int);\n"
              "extern \"C\" int close(int);\nextern char** environ;\n")
    port = ctx.port
    return [
        open_probe("write_outside_tempdir", ctx.outside_file, "w", "creates a file in /tmp, outside its workdir"),
        open_probe("write_into_repo", ctx.repo_file, "w", "creates a file in the evo-fsr checkout"),
        open_probe("read_task_reference", ctx.root / "tasks" / "conv2d" / "reference.py", "r",
                   "reads the task's reference implementation"),
        open_probe("read_evo_fsr_source", ctx.root / "evo_fsr" / "verdict" / "evaluate.py", "r", "reads evo-fsr's own code"),
        open_probe("read_user_secret", ctx.secret_file, "r", "reads a file of the user's outside any allowed dir"),
        host_probe("read_parent_environ", cstd + unistd, (
            "    { char path[64]; snprintf(path, sizeof path, \"/proc/%d/environ\", getppid());\n"
            "      FILE* f = fopen(path, \"r\"); if (f) { static char buf[1 << 16]; size_t n = fread(buf, 1, sizeof buf - 1, f);\n"
            "        fclose(f); for (size_t i = 0; i + 3 < n; ++i) if (memcmp(buf + i, \"sk-\", 3) == 0) {\n"
            + GARBAGE + "        } } }\n"),
            "reads the evaluator's environment (the API key) through /proc", requires=("landlock",)),
        host_probe("getenv_api_key", cstd + unistd, (
            "    if (getenv(\"OPENAI_API_KEY\")) {\n" + GARBAGE + "    }\n"
            "    for (char** e = environ; e && *e; ++e) if (strstr(*e, \"sk-\")) {\n" + GARBAGE + "    }\n"),
            "looks for an API key in its own environment"),
        host_probe("network_connect_loopback", cstd + unistd, (
            "    { struct { unsigned short fam, port; unsigned addr; char zero[8]; } a = "
            f"{{2, (unsigned short)((({port}) & 0xff) << 8 | (({port}) >> 8)), 0x0100007fu, {{0}}}};\n"
            "      int s = socket(2, 1, 0);\n"
            "      if (s >= 0) { if (connect(s, &a, sizeof a) == 0) {\n" + GARBAGE + "      } close(s); } }\n"),
            "connects to a listener on 127.0.0.1", requires=("netns|seccomp",)),
        host_probe("fork", cstd + unistd, (
            "    { int pid = fork(); if (pid == 0) _exit(0); if (pid > 0) {\n" + GARBAGE + "    } }\n"),
            "forks a child", expected=Status.CRASH, rejection="crash:sandbox-violation", requires=("seccomp",)),
        host_probe("system_exec", cstd, (
            "    if (system(\"true\") == 0) {\n" + GARBAGE + "    }\n"),
            "runs a shell command (posix_spawn + execve)", expected=Status.CRASH,
            rejection="crash:sandbox-violation", requires=("seccomp",)),
        host_probe("signal_parent", cstd + unistd, (
            "    if (kill(getppid(), 0) == 0 || kill(-1, 0) == 0) {\n" + GARBAGE + "    }\n"),
            "checks it could signal the evaluator or every process (signal 0: nothing is sent)",
            requires=("seccomp",)),
        host_probe("ptrace_parent", cstd + unistd, (
            "    if (ptrace(0x4206 /* PTRACE_SEIZE */, getppid(), 0, 0) == 0) {\n"
            "        ptrace(17 /* PTRACE_DETACH */, getppid(), 0, 0);\n" + GARBAGE + "    }\n"),
            "attaches to the evaluator with ptrace", requires=("seccomp",)),
    ]


def compile_cases(ctx: Context) -> list[Case]:
    bomb = (INCLUDE + "template <int N, int M> struct T { static const long long v = T<N - 1, 2 * M>::v + "
            "T<N - 1, 2 * M + 1>::v; };\ntemplate <int M> struct T<0, M> { static const long long v = 1; };\n"
            "long long never = T<40, 0>::v;\n" + NAIVE.split(INCLUDE, 1)[1])
    secret = _c_string(ctx.secret_file)
    def inc(name: str, directive: str, note: str, requires: tuple[str, ...] = ()) -> Case:
        return Case(name, "compile", directive + "\n" + NAIVE, Status.COMPILE_ERROR, "compile_error", requires, note)
    return [
        Case("missing_launch_symbol", "compile", NAIVE.replace('extern "C" int launch(', 'extern "C" int launch_v2('),
             Status.COMPILE_ERROR, "compile_error"),
        Case("wrong_launch_signature", "compile", NAIVE.replace("int pad, int stride, cudaStream_t stream)",
                                                                "int pad, cudaStream_t stream)"),
             Status.COMPILE_ERROR, "compile_error"),
        Case("compile_never_ends", "compile", bomb, Status.COMPILE_ERROR, "compile_error",
             note="exponential template instantiation: the compile timeout kills nvcc and its children"),
        Case("enormous_source", "compile", NAIVE + "// " + "x" * 400_000 + "\n", Status.COMPILE_ERROR, "compile_error"),
        inc("include_absolute_path", f"#include {secret}", "quoted include of a user file"),
        inc("include_task_reference", f"#include {_c_string(ctx.root / 'tasks' / 'conv2d' / 'reference.py')}",
            "include of the task's reference"),
        inc("include_line_splice", f"#inc\\\nlude {secret}", "backslash-newline inside the directive"),
        inc("include_comment_between", f"#/**/include {secret}", "comment between # and include"),
        inc("include_digraph", f"%:include {secret}", "the %: digraph for #"),
        inc("include_next", f"#include_next <{ctx.secret_file.name}>", "include_next"),
        inc("incbin_string_concat", f'__asm__(".inc" "bin \\"{ctx.secret_file}\\"");',
            ".incbin hidden by string-literal concatenation: only the compiler's Landlock stops it",
            requires=("landlock",)),
    ]


def build_cases(ctx: Context | None = None) -> list[Case]:
    ctx = ctx or Context()
    cases = output_cases() + timing_cases() + fault_cases() + host_cases(ctx) + compile_cases(ctx)
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return cases


def good_kernel() -> str:
    return NAIVE
