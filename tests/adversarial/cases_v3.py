"""Adversarial suite v3: cheats written against the verdict as it stands after suite v2 (SECURITY.md,
evo_fsr/verdict/*, evo_fsr/runner/*), for exploit classes that suites v1 and v2 do not cover.

Each case is a ``CaseV3`` (a ``CaseV2`` with three more fields, so v2's machinery runs it):

- ``expected``: ``ok`` / ``rejected`` / ``no-speedup`` as in v2 (no-speedup: rejected, or OK with a
  geomean speedup at most ``MAX_SPEEDUP_OVER_HONEST`` times that of ``honest`` on the same
  evaluator);
- ``hole``: where the case is believed to get through the current verdict, the hole it uses (the
  GPU test marks it xfail, strict=False, with this reason; "" where the verdict is expected to hold);
- ``evidence``: substrings the runner's log (the candidate's stdout) must hold for the case to have
  exercised its mechanism (a detector that never fired, a patch that did not apply, a hog that
  never found its target: the verdict would then say nothing about the evaluator);
- ``blocked``: run-log substrings that mean a confinement layer stopped the mechanism before it could
  act (a hog that cannot see its target under Landlock): with that layer on, such a line stands in
  for ``evidence`` (the exploit is closed earlier than the verdict); with it off, evidence is required;
- ``unsound``: rejection codes that mean the case itself went wrong (e.g. a precision cheat that
  is designed to stay within the tolerance, rejected for ``wrong:tolerance``: a bug in the case).

Classes (``mechanism``):
  batch        the k calls of a timed window, beyond the documented fusion of buffer sets
  interference slowing the trusted side, timed by a side channel (/proc of the baseline runner)
  forgery      claims within the window's allowance, on shapes timed one call to a window
  detection    telling timed calls from checked-but-untimed ones (the L2 state the flush leaves)
  precision    arithmetic the task forbids that stays within its tolerance
  exactness    "bit-exact" outputs judged as floats
  legit        legitimate use of the features above (must stay OK under any fix)

POSIX calls beyond the include allow-list are declared with ``__asm__`` labels (cases_v2_blocks.POSIX).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from evo_fsr.tasks import get_task
from evo_fsr.verdict.chain import chain_source

from .cases_v2_blocks import (MAX_SPEEDUP_OVER_HONEST, NO_SPEEDUP, OK, POSIX, REJECTED, SPIN,  # noqa: F401
                              CaseV2, honest_source, wrap)
from .test_batch_fusion_gpu import FUSED_PRELUDE, NARROW_BLOCKS

MECHANISMS = ("batch", "interference", "forgery", "detection", "precision", "exactness", "legit")
#: rejections that say a case crashed or hung rather than met the verdict it was written against
#: (not compile_error: a compile-stage rejection is what a fix of a precision hole would give)
BROKEN = ("crash", "crash:sandbox-violation", "crash:vendor-library", "timeout", "timeout:budget")


@dataclass(frozen=True)
class CaseV3(CaseV2):
    hole: str = ""                          # the hole it gets through (xfail reason), "" if caught
    evidence: tuple[str, ...] = ()          # run-log substrings: the mechanism really fired
    unsound: tuple[str, ...] = ()           # rejection codes meaning the case itself is broken
    blocked: tuple[str, ...] = ()           # run-log substrings: Landlock stopped the mechanism first


#: the hogs' line when a scan of /proc found no baseline runner (a later scan may still find it): Landlock leaves a runner its own
#: /proc/<pid> and no other process's (confine.own_proc), so under it the side channel is closed
PROC_BLOCKED = "adv-proc-hog: no baseline runner found in /proc"


# -- the holes, as the GPU test's xfail reasons -----------------------------------------------------
HOLE_SINGLE_FLOOR = (
    "profile.single_call_floor_ms subtracts the median of the baseline's single windows taken "
    "interleaved with the candidate's; work that slows those windows drives the floor under a "
    "batch-fusing kernel towards zero.  A host thread timed by /proc can no longer do it (every runner "
    "is stopped between its commands, harness.py; v3's fused_batch_and_hogged_single_baseline); GPU "
    "work queued between the runner's device-wide synchronize and its stop still runs into the "
    "baseline's windows unless every window waits for an idle GPU (gpu_idle.py; v3's "
    "fused_batch_and_gpu_work_after_reply).  The formula itself still trusts the baseline's windows: "
    "a new way to slow them would reopen it (the clean-window fix 5b858bf was reverted in 1128528)")
HOLE_SLACK_UNBATCHED = (
    "profile.credited_ms bounds a claim by the window less an overhead calibrated on other windows "
    "(the naive twin's pool, the interleaved baseline's), and on a shape timed one call to a window "
    "(launch-bound: batching.batch_size) that overhead sat 2-160 us above the candidate's own windows' "
    "on an H200 (thirty-first session: longer calls, the one-in-three place and drift all raise it), "
    "over the ~18 us topk call: the window bound fell below zero and claims of 75/50/20/2 % read "
    "x1.33/x2.0/x5.0/x50.8 their honest twin.  Chained windows (verdict/chain.py, EvalConfig.chain_windows) "
    "close it where they apply (H200, thirty-second session: all four forgers x0.20 their honest twin), "
    "with a pool as fast as the candidate (thirty-third session: against the naive twin's pool, 100-300 us "
    "a window high, the 75 % claim escaped in 2 of 9 judgements; task.yaml chain_twin: charged in 5 of 5 "
    "judgements with the paced links and 5 of 5 with the gated chain, H200, thirty-fourth session); "
    "it stays open with them off and on a task chain.eligible refuses (non-float inputs)")
HOLE_FAST_MATH = (
    "monte_carlo/task.yaml requires 'the accurate math functions (expf, cosf ...)'; its forbidden_ptx "
    "rule refuses cos.approx and sin.approx (__cosf, __sinf), but the accurate expf also ends in "
    "ex2.approx, so __expf cannot be told from it in the PTX, and its ~1e-6 error per sample stays "
    "inside the 3e-5 tolerance of the sum")
# -- building blocks ------------------------------------------------------------------------------------
#: the first benchmark-sized shape a relu case sees (the quick set's n_16M; validation stays below)
TARGET = r'''
static int adv_target = 0;
static int adv_is_target(int n) { if (adv_target == 0 && n >= (1 << 22)) adv_target = n; return n == adv_target; }
'''
#: a GPU and host hog fired while the trusted baseline runner is running: the runner finds the
#: baseline runner (its sibling: same parent, "evo-fsr-baseline-" in its command line) in /proc,
#: polls its scheduling state in /proc/<pid>/stat, and while it reads R (serving a timed window)
#: keeps a GPU-filling spin kernel queued on a stream of its own and every core spinning.  Each
#: burst is short (ADV_BURST_NS), so little of it is left when the candidate's own next window opens.
PROC_HOG = r'''
#include <cstdio>
#include <cstring>
#include <cstdlib>
extern "C" void* adv_opendir(const char*) __asm__("opendir");
extern "C" void* adv_readdir(void*) __asm__("readdir");
extern "C" int adv_closedir(void*) __asm__("closedir");
extern "C" int adv_getppid(void) __asm__("getppid");
extern "C" long adv_sysconf(int) __asm__("sysconf");
#define ADV_BURST_NS 100000ull
static volatile int adv_hog_on = 0;
static volatile long long adv_hog_until = 0;
static volatile long adv_hog_bursts = 0;
static long long adv_mono_ns() { adv_timespec t; adv_clock_gettime(1, &t); return t.sec * 1000000000LL + t.nsec; }
static int adv_stat(int pid, char* state, int* ppid) {      // /proc/<pid>/stat: "pid (comm) S ppid ..."
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    size_t len = fread(buf, 1, sizeof buf - 1, f); fclose(f); buf[len] = 0;
    const char* close = strrchr(buf, ')');
    return close && sscanf(close + 1, " %c %d", state, ppid) == 2;
}
static int adv_find_pids(const char* needle, int want_ppid, int* out, int most) {
    void* dir = adv_opendir("/proc");
    if (!dir) return 0;
    int found = 0; char path[64], buf[4096];
    for (const char* e; found < most && (e = (const char*)adv_readdir(dir)) != 0;) {
        const char* name = e + 19;                        // struct dirent's d_name (glibc, 64-bit)
        if (name[0] < '1' || name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", name);
        FILE* f = fopen(path, "rb");
        if (!f) continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f); fclose(f);
        for (size_t i = 0; i < len; ++i) if (!buf[i]) buf[i] = ' ';
        buf[len] = 0;
        char state; int ppid;
        if (strstr(buf, needle) && strstr(buf, "runner.py") && adv_stat(atoi(name), &state, &ppid)
            && (want_ppid <= 0 || ppid == want_ppid)) out[found++] = atoi(name);
    }
    adv_closedir(dir);
    return found;
}
extern "C" long adv_syscall(long, ...) __asm__("syscall");
#if defined(__x86_64__)
#define ADV_SYS_FUTEX 202
#else
#define ADV_SYS_FUTEX 98
#endif
static volatile int adv_hog_gen = 0;                        // bumped (and woken) at every burst
static void* adv_cpu_hog(void*) {
    for (;;) {
        int seen = adv_hog_gen;
        while (adv_mono_ns() < adv_hog_until) {}
        adv_syscall(ADV_SYS_FUTEX, (int*)&adv_hog_gen, 128 /* FUTEX_WAIT_PRIVATE */, seen, (void*)0, (void*)0, 0);
    }
    return 0;
}
static void* adv_hog_watch(void*) {
    int pid = 0, sms = 0, tries = 0;
    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    long cpus = adv_sysconf(84);                            // _SC_NPROCESSORS_ONLN
    for (long i = 0; i < (cpus > 0 && cpus < 32 ? 2 * cpus : 64); ++i) adv_detached(adv_cpu_hog, 0);
    for (;;) {
        if (!adv_hog_on) { adv_usleep(500); continue; }
        if (!pid) {
            if (adv_find_pids("evo-fsr-baseline-", adv_getppid(), &pid, 1) == 1) {
                printf("adv-proc-hog: baseline runner pid %d (a sibling of this runner)\n", pid); fflush(stdout);
            } else {
                if (++tries == 1) { printf("adv-proc-hog: no baseline runner found in /proc\n"); fflush(stdout); }
                pid = 0; adv_usleep(50000); continue;
            }
        }
        char state = 0; int ppid = 0;
        if (!adv_stat(pid, &state, &ppid)) { pid = 0; continue; }
        if (state != 'R') { adv_usleep(30); continue; }
        adv_hog_until = adv_mono_ns() + (long long)ADV_BURST_NS;
        __atomic_add_fetch(&adv_hog_gen, 1, __ATOMIC_SEQ_CST);
        adv_syscall(ADV_SYS_FUTEX, (int*)&adv_hog_gen, 129 /* FUTEX_WAKE_PRIVATE */, 1 << 30, (void*)0, (void*)0, 0);
        if (cudaStreamQuery(s) == cudaSuccess) {
            adv_spin<<<sms * 4, 256, 0, s>>>(ADV_BURST_NS);
            adv_spin<<<sms * 4, 256, 0, s>>>(ADV_BURST_NS);
            long b = ++adv_hog_bursts;
            if (b == 1 || b == 10 || b == 100 || b == 1000) {
                printf("adv-proc-hog: %ld bursts while the baseline runner ran\n", b); fflush(stdout);
            }
        }
        adv_usleep(20);
    }
    return 0;
}
static void adv_hog_start() {
    static int started = 0;
    if (!started) { started = 1; adv_detached(adv_hog_watch, 0); }
    adv_hog_on = 1;
}
'''
HOG = POSIX + SPIN + PROC_HOG
#: a kernel queued after the call: a helper thread, woken by each call it is asked to follow,
#: waits for the harness stream's work to end (the runner's device-wide synchronize returns then),
#: 30 us more, then launches a GPU-filling spin of ``ns`` on a stream of its own.  The runner
#: replies and is stopped; the spin runs on into whatever window the evaluator opens next.
AFTER_REPLY = POSIX + SPIN + r'''
#include <cstdio>
static cudaStream_t adv_after_target = 0;
static volatile int adv_after_gen = 0;
static volatile unsigned long long adv_after_ns = 0;
static long adv_after_launched = 0;
static void* adv_after_reply(void*) {
    cudaStream_t own; cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking);
    int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    int seen = 0;
    for (;;) {
        while (adv_after_gen == seen) {}                    // spin: a sleep would wake after the stop
        seen = adv_after_gen;
        cudaStreamSynchronize(adv_after_target);           // the call's work has ended ...
        adv_usleep(30);                                    // ... and the runner's synchronize has returned
        long k = ++adv_after_launched;
        if (k == 1 || k == 10 || k == 100) {               // before the launch: a runner stopped right after
            printf("adv-after-reply: queueing spin %ld of %llu us after the call's stream finished\n", k,
                   adv_after_ns / 1000ull); fflush(stdout);    // it is killed once the gate's wait runs out
        }
        adv_spin<<<sms * 4, 256, 0, own>>>(adv_after_ns);
    }
    return 0;
}
static void adv_after(cudaStream_t stream, unsigned long long ns) {
    static int started = 0;
    adv_after_target = stream; adv_after_ns = ns;
    if (!started) { started = 1; adv_detached(adv_after_reply, 0); }
    __atomic_add_fetch(&adv_after_gen, 1, __ATOMIC_SEQ_CST);
}
'''


def narrow_honest() -> str:
    """Relu on the benchmark shape by NARROW_BLOCKS blocks, one buffer set a call: the honest
    equivalent of the batch cases (test_batch_fusion_gpu's residual reproduction, same kernel)."""
    return wrap("relu", "    if (!adv_is_target(n)) return HONEST;\n"
                        f"    return adv_one(x, y, n, {NARROW_BLOCKS}, stream);", FUSED_PRELUDE + TARGET)


def fused_relu(before_set0: str, in_set0: str, prelude: str) -> str:
    """Relu on the benchmark shape, every buffer set of a window computed by its first launch
    (NARROW_BLOCKS blocks a set) once the sets have come round, one set in the single-call windows
    (told by set 0 coming twice in a row), with ``before_set0`` run on every call once the sets are
    known and ``in_set0`` on every call of set 0 (the attack on the single windows)."""
    return wrap("relu", f'''
    if (!adv_is_target(n)) return HONEST;
    int i = adv_index(x, y);
    if (i < 0) return HONEST;
    adv_run = i == 0 ? (adv_last == 0 ? adv_run + 1 : 1) : 0;    // consecutive calls of set 0: single windows
    adv_last = i;
    if (adv_cycle == 0 && i == 0 && adv_nseen > 1) adv_cycle = adv_nseen;   // the first set came round again
{before_set0}    if (i == 0) {{
        adv_covered = 0;
{in_set0}        if (adv_cycle > 1 && adv_run < 2) {{                      // a batched window (or the first single one)
            adv_relu_sets<<<dim3({NARROW_BLOCKS}, adv_cycle), 256, 0, stream>>>(adv_seen, (long long)n);
            adv_covered = 1;
            if (!adv_said) {{ adv_said = 1; printf("adv-fused: %d buffer sets computed by each window's first launch\\n", adv_cycle); fflush(stdout); }}
            return (int)cudaGetLastError();
        }}
        return adv_one(x, y, n, {NARROW_BLOCKS}, stream);
    }}
    return adv_covered ? 0 : adv_one(x, y, n, {NARROW_BLOCKS}, stream);''',
                FUSED_PRELUDE + TARGET + prelude + "static int adv_run = 0, adv_last = -1, adv_covered = 0, adv_said = 0;\n")


# -- batch: the k calls of a window ---------------------------------------------------------------------
def batch_cases() -> list[CaseV3]:
    fused_and_hog = fused_relu("    if (adv_cycle > 1) adv_hog_start();          "
                               "                 // timing has begun: hog the baseline's windows\n", "", HOG)
    # the same fusion, the floor attacked from the GPU: the single windows go B C0 C1 B B C2 C3 B ...
    # (session._single_call_floor: one baseline window a candidate window, before and after in
    # turn), so after every odd single window of its own the next window is the baseline's, which a
    # 1 ms spin queued after the reply slows
    fused_after = fused_relu("", "        if (adv_cycle > 1 && adv_run >= 2 && adv_run % 2 == 0) "
                                 "adv_after(stream, 1000000ull);   // odd single window\n", AFTER_REPLY)
    pdl = wrap("relu", f'''
    if (!adv_is_target(n)) return HONEST;
    cudaLaunchConfig_t cfg = {{}};
    cfg.gridDim = dim3({NARROW_BLOCKS}); cfg.blockDim = dim3(256); cfg.dynamicSmemBytes = 0; cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;    // may start before the previous
    attr[0].val.programmaticStreamSerializationAllowed = 1;             // call's kernel ends ...
    cfg.attrs = attr; cfg.numAttrs = 1;
    int rc = (int)cudaLaunchKernelEx(&cfg, adv_relu_pdl, x, y, (long long)n);
    if (rc == 0 && !adv_said) {{ adv_said = 1; printf("adv-pdl: calls launched with programmatic stream serialization\\n"); fflush(stdout); }}
    return rc;''', FUSED_PRELUDE + TARGET + r'''
#include <cstdio>
__global__ void adv_relu_pdl(const float* x, float* y, long long n) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");   // ... and this one lets the next start at once
#endif
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = fmaxf(x[i], 0.0f);
}
static int adv_said = 0;
''')
    return [
        CaseV3("fused_batch_and_hogged_single_baseline", "relu", "batch", fused_and_hog, NO_SPEEDUP,
               f"computes every buffer set of a window in its first launch ({NARROW_BLOCKS} blocks a set: one call "
               "leaves the GPU idle), tells the single-call windows by set 0 coming twice in a row and computes one "
               "set there, and slows the baseline's interleaved single windows by a GPU and host hog fired while "
               "the baseline runner's /proc state is R: the single-call floor, fusion's only bound, goes to zero",
               honest=narrow_honest(),
               # the hog finds the baseline runner; its bursts no longer land in the baseline's
               # windows (every runner is stopped between its commands, harness.py), so the burst
               # line is not required
               evidence=("adv-fused:", "adv-proc-hog: baseline runner pid"),
               blocked=(PROC_BLOCKED,), unsound=BROKEN),
        CaseV3("fused_batch_and_gpu_work_after_reply", "relu", "batch", fused_after, NO_SPEEDUP,
               "the fused batch above, with the single-call floor attacked from the GPU instead of the host: "
               "after each single window that a baseline window follows, a helper thread waits for the "
               "call's stream to finish and queues a 1 ms GPU-filling spin, which runs on after the runner "
               "is stopped, into the baseline's window (every window now waits for an idle GPU: gpu_idle.py; on an "
               "H200 it read x0.05 against x0.045 with the gate off as well as on: a 1 ms spin was over before "
               "the next window, so this stays a check that such work gains nothing)",
               # since the completion mark (verdict/completion.py) a window no longer waits for the
               # reply, so work queued after it by a helper thread is not in the outputs copied: the
               # case is rejected (wrong:benchmark-shape, H200) before its helper's line is printed
               honest=narrow_honest(), evidence=("adv-fused:",), unsound=BROKEN),
        CaseV3("pdl_overlaps_the_calls_of_a_batch", "relu", "batch", pdl, NO_SPEEDUP,
               f"the same {NARROW_BLOCKS}-block kernel, each call launched with programmatic dependent launch and "
               "triggering its dependents at once: a window's k calls run side by side on the harness stream, "
               "inside its events, with no unjoined stream and no knowledge of the other buffer sets",
               honest=narrow_honest(), evidence=("adv-pdl:",), unsound=BROKEN),
    ]


# -- interference: the baseline slowed, timed by /proc ---------------------------------------------------------
def interference_cases() -> list[CaseV3]:
    return [
        CaseV3("hogs_the_interleaved_baseline_via_proc", "relu", "interference", wrap("relu", '''
    if (n >= (1 << 22)) adv_hog_start();          // benchmark calls: from now on, hog the baseline's windows
    return HONEST;''', HOG), NO_SPEEDUP,
               "the naive seed, plus a GPU and host hog fired exactly while the trusted baseline runner serves a "
               "window (found by its command line in /proc, its state polled in /proc/<pid>/stat): unlike v2's "
               "hogs_the_gpu_after_returning, whose hog the runner's device-wide synchronize waits for inside the "
               "candidate's own window, this one lands in the baseline's windows; the speedup must not move "
               "(summarise: the baseline's time is the lower of its interleaved and clean medians)",
               honest="seed:naive", evidence=("adv-proc-hog: baseline runner pid",),
               blocked=(PROC_BLOCKED,), unsound=BROKEN),
        CaseV3("gpu_work_outlives_the_reply", "relu", "interference", wrap("relu", '''
    int rc = HONEST;
    if (n >= (1 << 22) && !adv_once) { adv_once = 1; adv_after(stream, 20000000000ull); }   // 20 s
    return rc;''', AFTER_REPLY + "static int adv_once = 0;\n"), NO_SPEEDUP,
               "the naive seed, and after its first benchmark call a 20 s GPU-filling spin queued once the "
               "runner's synchronize has returned: every window after it, the baseline's too, would share the "
               "GPU with it; the gate's wait runs out, the candidate's process is killed, the GPU goes idle, "
               "so the work was the candidate's (flagged:work-after-reply).  Or, where the runner is stopped "
               "before its helper thread launches the spin (3 of 6 H200 runs, thirty-first and thirty-second "
               "sessions), the spin starts when the runner is continued for its next window, and that "
               "window's own device-wide synchronize waits it out before its events: one 20 s candidate "
               "window among many, the median unmoved, x1.00 - no gain, which is what must hold",
               honest="seed:naive", evidence=("adv-after-reply:",), unsound=BROKEN),
    ]


# -- forgery: claims within the slack, one call a window -------------------------------------------------------
FORGE = r'''
#include <cstdio>
#include <cstring>
// cudaEventElapsedTime replaced in this process by: *ms = adv_claim; return cudaSuccess
//   movabs rax, &adv_claim ; mov eax, [rax] ; mov [rdi], eax ; xor eax, eax ; ret
static float adv_claim = 0.0f;
static int adv_patch() {
    unsigned char* f = (unsigned char*)adv_dlsym((void*)0, "cudaEventElapsedTime");
    long page = adv_getpagesize();
    if (!f || adv_mprotect((void*)((unsigned long)f & ~(page - 1)), 2 * page, 7) != 0) return 0;
    unsigned char code[17] = {0x48, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0x8B, 0x00, 0x89, 0x07, 0x31, 0xC0, 0xC3};
    void* where = (void*)&adv_claim;
    memcpy(code + 2, &where, 8);
    memcpy(f, code, sizeof code);
    return 1;
}
__global__ void adv_stamp(unsigned long long* t) { unsigned long long v; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v)); *t = v; }
__global__ void adv_normal(float* x, int n, unsigned seed) {     // Box-Muller on a hash of (i, seed)
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned h1 = (unsigned)i * 0x9E3779B1u ^ seed, h2 = h1 * 0x85EBCA77u + 0xC2B2AE3Du;
    h1 ^= h1 >> 15; h1 *= 0x2C1B3C6Du; h1 ^= h1 >> 12; h2 ^= h2 >> 13; h2 *= 0x297A2D39u; h2 ^= h2 >> 15;
    float u1 = ((h1 >> 8) + 0.5f) * (1.0f / 16777216.0f), u2 = (h2 >> 8) * (1.0f / 16777216.0f);
    x[i] = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}
static unsigned long long* adv_t = 0;
static int adv_keys[16][2]; static float adv_claims[16]; static int adv_nkeys = 0, adv_patched = -1;
#define ADV_FRACTION 0.75f
'''


def forgery_cases() -> list[CaseV3]:
    body = r'''
    int slot = -1;
    for (int i = 0; i < adv_nkeys; ++i) if (adv_keys[i][0] == N && adv_keys[i][1] == K) slot = i;
    if (slot < 0 && adv_nkeys < 16 && N >= 65536) {
        // a benchmark-sized shape's first call (the sweep: untimed, other distributions): the honest
        // kernel's time on the GPU's clock, on a private input of the timed distribution (standard
        // normal), best of five; every later call of the shape claims ADV_FRACTION of it
        float *px = 0, *pv = 0; int* pi = 0;
        if (!adv_t) cudaMalloc(&adv_t, 2 * sizeof(unsigned long long));
        cudaMalloc(&px, sizeof(float) * (size_t)N); cudaMalloc(&pv, sizeof(float) * (size_t)K);
        cudaMalloc(&pi, sizeof(int) * (size_t)K);
        adv_normal<<<(N + 255) / 256, 256, 0, stream>>>(px, N, 2654435761u * (unsigned)N + (unsigned)K);
        float best = 1e30f;
        for (int r = 0; r < 5; ++r) {
            adv_stamp<<<1, 1, 0, stream>>>(adv_t);
            if (honest_launch(px, pv, pi, N, K, stream) != 0) break;
            adv_stamp<<<1, 1, 0, stream>>>(adv_t + 1);
            unsigned long long h[2] = {0, 0};
            cudaMemcpyAsync(h, adv_t, sizeof h, cudaMemcpyDeviceToHost, stream);
            cudaStreamSynchronize(stream);
            float ms = (float)(h[1] - h[0]) * 1e-6f;
            if (ms > 0.0f && ms < best) best = ms;
        }
        cudaStreamSynchronize(stream);
        cudaFree(px); cudaFree(pv); cudaFree(pi);
        (void)cudaGetLastError();
        if (best < 1e29f) {
            if (adv_patched < 0) adv_patched = adv_patch();
            slot = adv_nkeys++;
            adv_keys[slot][0] = N; adv_keys[slot][1] = K; adv_claims[slot] = ADV_FRACTION * best;
            if (adv_patched == 1) {
                printf("adv-forge: N=%d K=%d measured %.4f ms; cudaEventElapsedTime now reports %.4f ms\n", N, K,
                       best, adv_claims[slot]);
                fflush(stdout);
            }
        }
    }
    if (slot >= 0) adv_claim = adv_claims[slot];
    return HONEST;'''
    def forger(name: str, fraction: str, why: str) -> CaseV3:
        """The radix-select forger claiming ``fraction`` (a C float literal) of its time."""
        source = FORGE.replace("#define ADV_FRACTION 0.75f", f"#define ADV_FRACTION {fraction}")
        return CaseV3(name, "topk", "forgery", wrap("topk", body, POSIX + source, seed="radix_select"), NO_SPEEDUP,
                      why, honest="seed:radix_select", evidence=("adv-forge:",),
                      unsound=BROKEN + ("wrong:tolerance", "wrong:benchmark-shape", "wrong:unwritten-or-nonfinite"),
                      x86_only=True)

    # the chain library's own source, its two entry points renamed (adv_*), minus its dummy launch
    # (this source has the real one); ``gate``: the gate kernel's body instead of the real one's
    topk = get_task("topk")

    def own_chain(gate: str = "") -> str:
        source = (chain_source(topk).replace(f"\n{topk.signature()} {{ return 0; }}\n", "\n")
                  .replace("evo_fsr_chain_gate(", "adv_chain_gate(").replace("evo_fsr_chain_link(", "adv_chain_link("))
        assert source.count("adv_chain_") == 2 and "return 0; }" not in source.splitlines()[-1]
        if gate:
            head = "__global__ void evo_fsr_gate_kernel(const volatile unsigned long long* word, long long timeout_ns) {"
            start = source.index(head)
            end = source.index("\n}\n", start) + 3
            source = source[:start] + head + "\n" + gate + "\n}\n" + source[end:]
        return source

    swap = r"""
// the runner's chain library (loaded RTLD_LOCAL, wherever it lies) found among the loaded objects,
// and its two entry points patched to jump to this library's copies:  movabs rax, target ; jmp rax
struct adv_phdr_info { unsigned long addr; const char* name; };
extern "C" int adv_dl_iterate_phdr(int (*)(adv_phdr_info*, unsigned long, void*), void*) __asm__("dl_iterate_phdr");
extern "C" int adv_dlclose(void*) __asm__("dlclose");
static int adv_links_patched = 0;
static int adv_jump(void* from, void* to) {
    long page = adv_getpagesize();
    if (!from || adv_mprotect((void*)((unsigned long)from & ~(page - 1)), 2 * page, 7) != 0) return 0;
    unsigned char code[12] = {0x48, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xE0};
    memcpy(code + 2, &to, 8);
    memcpy(from, code, sizeof code);
    return 1;
}
static int adv_find_links(adv_phdr_info* info, unsigned long, void*) {
    if (adv_links_patched || !info->name || !info->name[0]) return 0;
    void* h = adv_dlopen(info->name, 4 | 1);            // RTLD_NOLOAD | RTLD_LAZY: only if loaded
    if (!h) return 0;
    void* gate = adv_dlsym(h, "evo_fsr_chain_gate");
    void* link = adv_dlsym(h, "evo_fsr_chain_link");
    if (gate && link && adv_jump(gate, (void*)&adv_chain_gate) && adv_jump(link, (void*)&adv_chain_link)) {
        adv_links_patched = 1;
        printf("adv-chain: %s now runs this library's gate and links\n", info->name);
        fflush(stdout);
    }
    adv_dlclose(h);
    return 0;
}
"""
    chain_forger = FORGE.replace("#define ADV_FRACTION 0.75f", "#define ADV_FRACTION 0.02f") + own_chain() + swap
    chain_body = "    if (!adv_links_patched) adv_dl_iterate_phdr(adv_find_links, 0);\n" + body
    # a gate that does not wait: the chain runs as the runner enqueues it, before the window, on a
    # seed of its own
    early_gate = "    (void)word; (void)timeout_ns; evo_fsr_seed = 0x5EEDULL;"
    early = "#include <cstdio>\n#include <cstring>\n" + own_chain(early_gate) + swap
    early_body = "    if (!adv_links_patched) adv_dl_iterate_phdr(adv_find_links, 0);\n    return HONEST;"

    return [
        CaseV3("forges_and_runs_the_chain_links_itself", "topk", "forgery",
               wrap("topk", chain_body, POSIX + chain_forger, seed="radix_select"), NO_SPEEDUP,
               "the 2 % forger below, which also patches the runner's chain library once it is loaded (its "
               "first chained window): verdict/chain.py's gate and links jump to this source's copies. "
               "Before the gated chain (thirty-third session) the links ran from a host loop in the window with "
               "a 50 us pace, and copies without the pace read x3693.17 (H200); with the chain enqueued before "
               "the window there is no pace to drop, and its forged events must be charged like the others'",
               honest="seed:radix_select", evidence=("adv-forge:", "adv-chain:"),
               unsound=BROKEN + ("wrong:tolerance", "wrong:benchmark-shape", "wrong:unwritten-or-nonfinite"),
               x86_only=True),
        CaseV3("runs_the_chain_past_its_gate", "topk", "forgery",
               wrap("topk", early_body, POSIX + early, seed="radix_select"), REJECTED,
               "the honest radix select, whose copy of the chain's gate does not wait for the trusted side's seed: "
               "the whole chained window runs as the runner enqueues it, before the window opens, on inputs "
               "drawn from a seed of its own. Call 0's inputs are checked against the draw of the window's seed",
               codes=("wrong:input-modified",), evidence=("adv-chain:",),
               unsound=BROKEN + ("wrong:tolerance", "wrong:benchmark-shape", "wrong:unwritten-or-nonfinite"),
               x86_only=True),
        forger("forges_within_one_slack_on_an_unbatched_shape", "0.75f",
               "the radix-select seed (one launch of ~10-20 us), which measures itself on the GPU clock in the "
               "untimed sweep and then makes cudaEventElapsedTime report 75 % of that: topk's shapes are "
               "launch-bound, timed one call to a window, so the window's allowance (one standard error, a few "
               "us) is not shared by k calls, and a claim inside it is credited as is (v2's forger works on a "
               "batched softmax shape, where it hides slack / 8); chained windows (verdict/chain.py) charge it, "
               "but against a pool of the naive seed's twin, whose windows less events sat 100-300 us above a fast "
               "kernel's own, it read x100.12 against the honest x73.62 (H200, thirty-third session): a chained "
               "shape's pool is now the chain twin's (task.yaml chain_twin)"),
        forger("forges_half_its_time_on_an_unbatched_shape", "0.50f",
               "the same forger claiming 50 % of its time: on an H200 the window's spread on topk's quick shape "
               "was 63-81 us around a ~0.9 ms overhead for an 18.5 us call, so even over eight times the windows "
               "(bench.LAUNCH_BOUND_FACTOR) one standard error of the window bound is ~11 us, more than half the call"),
        forger("forges_a_fifth_of_its_time_on_an_unbatched_shape", "0.20f",
               "the same forger claiming 20 % of its time (the red team, thirtieth session): the claim is charged "
               "in a round more often than not, but it has two rounds to escape in, and one that escapes is "
               "credited about its claim; the CPU model (test_adversarial_v3_cpu._forger_gain) puts its median "
               "gain at x5.0, where the 75 % and 50 % forgers gain x1.33 and x2.0; on an H200 (thirty-first "
               "session) it read x5.00 its honest twin, never charged"),
        forger("forges_a_fiftieth_of_its_time_on_an_unbatched_shape", "0.02f",
               "the same forger claiming 2 % of its time (0.4 us for an 18.5 us call): on an H200 (thirty-first "
               "session, scripts/probe_twin_length.py) the overhead subtracted from its windows sat 2-160 us "
               "above their own, so the window bound fell below zero and it read x50.8 its honest twin, the class "
               "of the brief's 68x"),
    ]


# -- detection: the L2 state tells a timed call ---------------------------------------------------------------
def detection_cases() -> list[CaseV3]:
    prelude = r'''
#include <cstdio>
// Eight dependent loads (each address depends on the value before) of the output's last lines, which
// the evaluator's poison memset has just written: in L2, unless the trusted flush ran since (timed
// calls: verdict/timed_window.timed_batch flushes; validation and the sweep do not). Run twice: the second
// pass finds them in L2 whatever the first found, so the ratio needs no absolute threshold.
__global__ void adv_chase(const float* y, long long n, unsigned long long* out) {
    unsigned off = 0; unsigned long long t0, t1; float v = 0.0f;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(y + (n > 1024 ? n - 1 - 512 : 0)) : "memory");
    if (__float_as_uint(v) == 0x7f7fff01u) out[3] = 1;     // waits for it: the page's translation is warm
    for (int pass = 0; pass < 2; ++pass) {
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0) :: "memory");
        for (int j = 0; j < 8; ++j) {
            long long at = n - 1 - 32LL * j - (long long)(off & 1u);
            if (at < 0) at = 0;
            asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(y + at) : "memory");
            off = __float_as_uint(v);
        }
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1) :: "memory");
        out[pass] = t1 - t0;
    }
    out[2] = off;
}
static unsigned long long* adv_cycles = 0;
static long adv_cold = 0, adv_hot = 0;
'''
    body = r'''
    if (n < (1 << 22)) return HONEST;
    if (!adv_cycles) cudaMalloc(&adv_cycles, 4 * sizeof(unsigned long long));
    adv_chase<<<1, 1, 0, stream>>>(y, (long long)n, adv_cycles);
    unsigned long long c[3] = {0, 0, 0};
    cudaMemcpyAsync(c, adv_cycles, sizeof c, cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    double ratio = c[1] ? (double)c[0] / (double)c[1] : 0.0;
    if (ratio > 1.5) {                       // cold: the flush ran, a timed call: skip the work
        if (++adv_cold <= 3) { printf("adv-cold-l2: call at n=%d classified timed (chase %llu vs %llu cycles)\n", n, c[0], c[1]); fflush(stdout); }
        cudaMemsetAsync(y, 0, sizeof(float) * (size_t)n, stream);
        return 0;
    }
    if (++adv_hot <= 3) { printf("adv-hot-l2: call at n=%d classified untimed (chase %llu vs %llu cycles)\n", n, c[0], c[1]); fflush(stdout); }
    return HONEST;'''
    return [
        CaseV3("skips_work_when_the_l2_is_cold", "relu", "detection", wrap("relu", body, prelude), REJECTED,
               "tells timed calls by the L2 state the trusted flush leaves (a dependent chase over the lines of "
               "its output the poison memset just wrote, cold only after the flush) and writes zeros there; "
               "v2's detectors were call counts, free memory and host-clock gaps. Every timed call is checked, "
               "so it must be rejected (wrong:benchmark-shape on the warm-up window)",
               # the sweep's calls follow an L2 flush since the thirty-seventh session, so no checked
               # call of a large shape reads "untimed" any more: only the cold line is printed (H200)
               codes=("wrong:benchmark-shape", "wrong:timed-calls"), evidence=("adv-cold-l2:",),
               unsound=BROKEN + ("wrong:tolerance",)),
    ]


# -- precision: what the task forbids, within its tolerance ------------------------------------------------------
TF32 = r'''
#include <mma.h>
#include <cstdio>
namespace adv_wmma = nvcuda::wmma;
typedef adv_wmma::fragment<adv_wmma::matrix_a, 16, 16, 8, adv_wmma::precision::tf32, adv_wmma::row_major> adv_frag_a;
typedef adv_wmma::fragment<adv_wmma::matrix_b, 16, 16, 8, adv_wmma::precision::tf32, adv_wmma::row_major> adv_frag_b;
typedef adv_wmma::fragment<adv_wmma::accumulator, 16, 16, 8, float> adv_frag_c;

template <typename Frag>
__device__ __forceinline__ void adv_split(Frag& hi, Frag& lo) {      // v = hi + lo, both TF32
    for (int t = 0; t < hi.num_elements; ++t) {
        const float v = hi.x[t];
        const float h = adv_wmma::__float_to_tf32(v);
        hi.x[t] = h;
        lo.x[t] = adv_wmma::__float_to_tf32(v - h);
    }
}

// 3xTF32: C = sum_k a_lo*b_hi + a_hi*b_lo + a_hi*b_hi on TF32 tensor cores, fp32 accumulators (the
// dropped a_lo*b_lo is ~2^-22 of a product). One warp: a 32x32 tile (2x2 fragments); a block: 64x64.
__global__ void __launch_bounds__(128) adv_gemm_3xtf32(const float* __restrict__ A, const float* __restrict__ B,
                                                       float* __restrict__ C, int M, int K, int N) {
    const int warp = threadIdx.x >> 5;
    const int row0 = (blockIdx.y * 2 + (warp >> 1)) * 32, col0 = (blockIdx.x * 2 + (warp & 1)) * 32;
    if (row0 >= M || col0 >= N) return;
    adv_frag_c acc[2][2];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) adv_wmma::fill_fragment(acc[i][j], 0.0f);
    for (int k = 0; k < K; k += 8) {
        adv_frag_a a_hi[2], a_lo[2];
        adv_frag_b b_hi[2], b_lo[2];
        for (int i = 0; i < 2; ++i) {
            adv_wmma::load_matrix_sync(a_hi[i], A + (size_t)(row0 + 16 * i) * K + k, K);
            adv_split(a_hi[i], a_lo[i]);
        }
        for (int j = 0; j < 2; ++j) {
            adv_wmma::load_matrix_sync(b_hi[j], B + (size_t)k * N + col0 + 16 * j, N);
            adv_split(b_hi[j], b_lo[j]);
        }
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) {
                adv_wmma::mma_sync(acc[i][j], a_lo[i], b_hi[j], acc[i][j]);     // the small terms first
                adv_wmma::mma_sync(acc[i][j], a_hi[i], b_lo[j], acc[i][j]);
                adv_wmma::mma_sync(acc[i][j], a_hi[i], b_hi[j], acc[i][j]);
            }
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
            adv_wmma::store_matrix_sync(C + (size_t)(row0 + 16 * i) * N + col0 + 16 * j, acc[i][j], N,
                                        adv_wmma::mem_row_major);
}
static int adv_said = 0;
'''


@functools.lru_cache(maxsize=None)
def fast_math_monte_carlo(cos: bool = True) -> str:
    accurate = "return expf(-v * v) * cosf(3.0f * v);"
    src = wrap("monte_carlo", "    return HONEST;", seed="persistent")
    assert src.count(accurate) == 1, "the persistent seed's integrand moved: update the case"
    fast = "__cosf(3.0f * v)" if cos else "cosf(3.0f * v)"
    return src.replace(accurate, f"return __expf(-v * v) * {fast};")      # MUFU ex2 / cos: ~2^-21


def precision_cases() -> list[CaseV3]:
    tf32 = wrap("matmul", r'''
    if (M % 32 || N % 32 || K % 8) return HONEST;          // odd validation shapes: the naive seed
    if (!adv_said) { adv_said = 1; printf("adv-3xtf32: TF32 tensor cores from M=%d K=%d N=%d on\n", M, K, N); fflush(stdout); }
    dim3 grid((N + 63) / 64, (M + 63) / 64);
    adv_gemm_3xtf32<<<grid, 128, 0, stream>>>(A, B, C, M, K, N);
    return (int)cudaGetLastError();''', TF32)
    return [
        CaseV3("matmul_3xtf32_tensor_cores", "matmul", "precision", tf32, REJECTED,
               "fp32_strict matmul on TF32 tensor cores, error-compensated (3xTF32): within the fp32 tolerance "
               "on random inputs (test_adversarial_v3_cpu emulates it), but the task forbids TF32 tensor-core "
               "math; the benchmark sweep's large_magnitude inputs caught it on an H200 (twenty-third "
               "session); v1's tf32_math (conv2d) rounds once and fails the tolerance",
               codes=("wrong:benchmark-shape", "flagged:under-floor"), evidence=("adv-3xtf32:",),
               unsound=BROKEN + ("wrong:unwritten-or-nonfinite", "wrong:nondeterministic")),
        CaseV3("monte_carlo_fast_math_intrinsics", "monte_carlo", "precision", fast_math_monte_carlo(), REJECTED,
               "the persistent seed with __expf/__cosf (MUFU approximations) for the accurate expf/cosf the task "
               "requires; the seed is bound by the accurate functions' instruction count, so this is its speed "
               "lever. The task's forbidden_ptx rule refuses cos.approx before it runs (task_rules.py); a "
               "wrong:tolerance verdict would mean the tolerance is tight enough after all",
               codes=("compile_error:task-rule", "wrong:tolerance"), unsound=BROKEN),
        CaseV3("monte_carlo_fast_exp_only", "monte_carlo", "precision", fast_math_monte_carlo(cos=False), REJECTED,
               "the same with __expf alone (the accurate cosf kept): ex2.approx is in the accurate expf too, so "
               "no PTX rule tells them apart, and __expf stays inside the tolerance",
               codes=("compile_error:task-rule", "wrong:tolerance"), hole=HOLE_FAST_MATH, unsound=BROKEN),
    ]


# -- exactness: bit-exact outputs judged as floats ---------------------------------------------------------------
def exactness_cases() -> list[CaseV3]:
    return [
        CaseV3("copy_turns_negative_zero_positive", "matrix_copy", "exactness", wrap("matrix_copy", r'''
    long long total = (long long)rows * cols;
    if (total <= 0) return 0;
    long long want = (total + 255) / 256;
    adv_copy_add<<<(unsigned)(want < (1LL << 20) ? want : (1LL << 20)), 256, 0, stream>>>(src, dst, total);
    return (int)cudaGetLastError();''', r'''
__global__ void adv_copy_add(const float* __restrict__ src, float* __restrict__ dst, long long total) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x)
        dst[i] = __fadd_rn(src[i], 0.0f);      // -0.0 + 0.0 = +0.0; every other float (denormals too) unchanged
}
'''), REJECTED,
               "routes the copy through an addition: every -0.0 of special_values comes out +0.0, which the task "
               "forbids ('moved, never computed ... -0.0 ... must survive unchanged')",
               codes=("wrong:tolerance",), unsound=BROKEN),
    ]


# -- legitimate: what a fix of the holes above must keep OK ----------------------------------------------------------
def legit_cases() -> list[CaseV3]:
    return [
        CaseV3("ok_pdl_within_one_call", "relu", "legit", wrap("relu", r'''
    long long half = (long long)n / 2;
    adv_first<<<1024, 256, 0, stream>>>(x, y, half);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1024); cfg.blockDim = dim3(256); cfg.dynamicSmemBytes = 0; cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr; cfg.numAttrs = 1;
    return (int)cudaLaunchKernelEx(&cfg, adv_second, x, y, half, (long long)n);''', r'''
__global__ void adv_first(const float* x, float* y, long long half) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < half; i += (long long)gridDim.x * blockDim.x)
        y[i] = fmaxf(x[i], 0.0f);
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__global__ void adv_second(const float* x, float* y, long long half, long long n) {
    const long long first = half + (long long)blockIdx.x * blockDim.x + threadIdx.x;   // prologue
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");      // the first kernel is done and visible
#endif
    for (long long i = first; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = fmaxf(x[i], 0.0f);
}
'''), OK,
               "two kernels of one call chained by programmatic dependent launch, the second waiting "
               "(griddepcontrol.wait) for the first: the next call's first kernel is an ordinary launch, so no "
               "call overlaps another. A fix of the PDL overlap must keep this OK"),
    ]


def build_cases() -> list[CaseV3]:
    cases = (batch_cases() + interference_cases() + forgery_cases() + detection_cases() + precision_cases()
             + exactness_cases() + legit_cases())
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return cases


__all__ = ["AFTER_REPLY", "BROKEN", "CaseV3", "MAX_SPEEDUP_OVER_HONEST", "MECHANISMS", "NO_SPEEDUP", "OK", "PROC_HOG", "HOG",
           "REJECTED", "TARGET", "build_cases", "honest_source", "narrow_honest"]
