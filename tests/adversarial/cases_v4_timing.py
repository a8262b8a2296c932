"""Adversarial suite v4 (timing): cheats that shrink the part of a trusted window the calibration
assumes to be the same in every role, so that a forged claim under the candidate's real time fits
under the window bound (``profile.credited_ms``: ``median(window) - overhead - slack``, the
overhead taken from the twin's and the baseline's windows, never the candidate's own).

Written against the verdict as it stands after suite v3 (red team, timing brief).  Each case is a
``cases_v3.CaseV3`` (``expected``, ``honest``, ``hole``, ``evidence``, ``unsound`` as there).

Classes (``mechanism``):
  overhead  the window's non-kernel part made shorter than the twin's: the runner replies before
            its GPU work is done (the trusted copy-out waits on the GPU anyway), a native thread
            serves the commands in place of the runner's Python, the host kept out of idle states
            while the candidate's own window runs
  forgery   a claim forged only where it cannot cost: a shape's rounds have a fixed number of
            windows, so the candidate knows when a second round (a charge) has begun

The forged claims never go under 1.2 times the speed-of-light time the device's own attributes
give (an HBM bandwidth below the datasheet's that ``gpu.py`` uses), so ``flagged:under-floor``
cannot catch them.  POSIX calls beyond the include allow-list are declared with ``__asm__`` labels
(cases_v2_blocks.POSIX).
"""
from __future__ import annotations

from evo_fsr.runner import cores
from evo_fsr.verdict.evaluate import EvalConfig

from .cases_v2_blocks import NO_SPEEDUP, POSIX
from .cases_v3 import BROKEN, CaseV3, wrap

#: wrong results that mean the copy-out was not held behind the candidate's GPU work after all
#: (the early-reply cases then fail, which is the verdict holding, not the case breaking)
RACED = ("wrong:timed-calls", "wrong:benchmark-shape", "wrong:unwritten-or-nonfinite")

# -- building blocks ------------------------------------------------------------------------------------
#: patching the runtime in this process (x86-64), the driver's own elapsed time (libcuda, which a
#: patch of libcudart leaves alone) and the speed-of-light time of ``bytes``
PATCH = r'''
#include <cstdio>
#include <cstring>
#include <cstdlib>
static int adv_rwx(void* f) {
    long page = adv_getpagesize();
    return f && adv_mprotect((void*)((unsigned long)f & ~(page - 1)), 2 * page, 7) == 0;
}
static int adv_jump(void* from, void* to) {            // movabs rax, to ; jmp rax
    if (!adv_rwx(from)) return 0;
    unsigned char code[12] = {0x48, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xE0};
    memcpy(code + 2, &to, 8); memcpy(from, code, sizeof code);
    return 1;
}
static int adv_return_success(void* f) {               // xor eax, eax ; ret: cudaSuccess at once
    if (!adv_rwx(f)) return 0;
    const unsigned char code[3] = {0x31, 0xC0, 0xC3};
    memcpy(f, code, sizeof code);
    return 1;
}
typedef int (*adv_elapsed_fn)(float*, void*, void*);
static adv_elapsed_fn adv_driver_elapsed() {           // cuEventElapsedTime: a CUevent is a cudaEvent_t
    void* h = adv_dlopen("libcuda.so.1", 4 | 1);       // RTLD_NOLOAD | RTLD_LAZY: the loaded driver
    if (!h) return 0;
    void* f = adv_dlsym(h, "cuEventElapsedTime_v2");
    return (adv_elapsed_fn)(f ? f : adv_dlsym(h, "cuEventElapsedTime"));
}
static double adv_sol_ms(double bytes) {               // over the attributes' HBM bandwidth (< the datasheet's)
    int clk = 0, bus = 0;
    cudaDeviceGetAttribute(&clk, (cudaDeviceAttr)36, 0);   // memory clock (kHz)
    cudaDeviceGetAttribute(&bus, (cudaDeviceAttr)37, 0);   // bus width (bits)
    double bw = 2.0 * clk * 1e3 * bus / 8.0;
    if (bw < 1e11) bw = 3e12;
    return bytes / bw * 1e3;
}
'''

#: monte_carlo's persistent seed: ~35-40 us a call at 2^24 (bound by the accurate expf/cosf), 2.5-3x
#: its speed-of-light time (14 us), timed eight calls a window; the naive seed ~10x slower
MC = "monte_carlo"
MC_SEED = "persistent"
MC_HONEST = "seed:persistent"


#: what the three monte_carlo forgers of the window bound share (SECURITY.md, forty-first session)
HOLE_DRIFT = (
    "monte_carlo 2^24's window is ~1.4 ms for 273 us of calls, and the pool's overhead drifted up to 120 us above "
    "the rounds' (H200, scripts/probe_rounds.py, twelve fresh evaluators): the early replier, the first-round "
    "forger and the host-awake spinner went uncharged in the first round in 9, 6 and 6 of 12, and the early "
    "replier read x1.98 uncharged in one v4 run; with the overhead capped by the interleaved baseline's "
    "(profile.own_share_calibration) the recorded windows replay as 3, 2 and 3 of 12 (not yet run on a GPU): a "
    "claim within one slack of the window still escapes")


# -- overhead: the runner replies before its work is done ------------------------------------------------
def early_reply() -> CaseV3:
    prelude = POSIX + PATCH + r'''
#define ADV_FRACTION 0.70f
static float adv_claim = 0.0f, adv_pending = 0.0f;
static int adv_reads = 0, adv_state = 0;               // 0: not yet, 1: patched, -1: failed
static int adv_forged_elapsed(float* ms, void*, void*) {
    *ms = adv_pending;                                 // the calls since the last reply, at their claim
    if (++adv_reads % 2 == 0) adv_pending = 0.0f;      // the runner reads two times a reply
    return 0;
}
'''
    body = r'''
    if (N < (1 << 22)) return HONEST;                  // validation: as the seed, synchronized
    if (adv_state == 0) {
        // the sweep's call (untimed): this kernel's time, best of four after evicting the L2
        void* evict = 0; cudaEvent_t e0, e1; float best = 1e30f;
        cudaMalloc(&evict, 256u << 20); cudaEventCreate(&e0); cudaEventCreate(&e1);
        for (int r = 0; r < 4; ++r) {
            if (evict) cudaMemsetAsync(evict, r, 256u << 20, stream);
            cudaEventRecord(e0, stream);
            if (HONEST != 0) break;
            cudaEventRecord(e1, stream); cudaEventSynchronize(e1);
            float ms = 0.0f;
            if (cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms > 0.0f && ms < best) best = ms;
        }
        cudaFree(evict); (void)cudaGetLastError();
        adv_state = -1;
        if (best < 1e29f) {
            const double floor_ms = 1.2 * adv_sol_ms(4.0 * N);
            adv_claim = (float)(ADV_FRACTION * best > floor_ms ? ADV_FRACTION * best : floor_ms);
            // the runner's device-wide and stream synchronizes return at once, so it replies as soon as
            // its launches are queued; its elapsed times are the claims
            if (adv_jump(adv_dlsym((void*)0, "cudaEventElapsedTime"), (void*)&adv_forged_elapsed)
                && adv_return_success(adv_dlsym((void*)0, "cudaStreamSynchronize"))
                && adv_return_success(adv_dlsym((void*)0, "cudaDeviceSynchronize"))) {
                adv_state = 1;
                printf("adv-early-reply: N=%d takes %.4f ms a call; the runner now replies before its calls "
                       "are done, each claiming %.4f ms\n", N, best, adv_claim);
                fflush(stdout);
            }
        }
        if (adv_state == 1) adv_pending += adv_claim;
        return 0;                                      // out holds the last measured run's answer
    }
    if (adv_state == 1) adv_pending += adv_claim;
    return HONEST;'''
    return CaseV3(
        "replies_before_its_calls_are_done", MC, "overhead", wrap(MC, body, prelude, seed=MC_SEED), NO_SPEEDUP,
        "the persistent seed, whose runner's cudaDeviceSynchronize and cudaStreamSynchronize are patched to "
        "return at once and cudaEventElapsedTime to report 70 % of the call's own time (measured in the "
        "untimed sweep): the reply leaves as soon as the window's eight calls are queued. The trusted "
        "copy-out (timed_window._close_window) is a cudaMemcpyAsync in the evaluator's context, which the GPU "
        "runs only once the candidate's context has gone idle (two contexts time-slice; SECURITY.md measured "
        "the evaluator's copies waiting a whole slice behind a runner's kernel), so every output is complete "
        "when copied and checked, while the runner's post-launch Python and the trusted side's wake-up and "
        "copy issue (~100-200 us) now overlap the GPU work instead of following it. The window, and with it "
        "the window bound, sits that much below the twin's, whose runner replies after its work: a claim "
        "that far under the real time is not charged (H200, thirty-seventh session: x2.01-2.04 against the "
        "honest x1.42). Closed in the thirty-eighth by the completion mark (verdict/completion.py): the window "
        "ends when a trusted kernel queued after the calls has written a hash of their outputs into a page the "
        "evaluator spins on, and the reply is read after the window (H200: x1.11, charged, against x1.43)",
        honest=MC_HONEST, evidence=("adv-early-reply:",), codes=RACED,
        unsound=BROKEN, x86_only=True, hole=HOLE_DRIFT)


# -- overhead: a native thread serves the commands ------------------------------------------------------------
#: the command pipe interposed: a thread of this library reads the trusted side's commands first,
#: serves ``call`` commands whose buffer sets it has learnt itself (no Python: parse, launches,
#: synchronize, reply), and passes every other line to the runner's Python through a pipe put in
#: place of the command fd.  It learns the buffers of a set from the calls Python serves (the
#: names it forwarded, in launch order), and how long Python took from the command to its first
#: launch, which it takes off its claims.  Needs ``adv_args``, ``ADV_CALL(args, stream)`` and
#: ``ADV_BYTES(args)`` before it.
PROXY = r'''
#include <cstdio>
#include <cstring>
#include <cstdlib>
extern "C" long adv_read(int, void*, unsigned long) __asm__("read");
extern "C" int adv_pipe(int*) __asm__("pipe");
extern "C" int adv_dup(int) __asm__("dup");
extern "C" int adv_dup2(int, int) __asm__("dup2");
extern "C" int adv_open(const char*, int, ...) __asm__("open");
extern "C" int adv_close(int) __asm__("close");
static double adv_sol_ms(double bytes) {
    int clk = 0, bus = 0;
    cudaDeviceGetAttribute(&clk, (cudaDeviceAttr)36, 0); cudaDeviceGetAttribute(&bus, (cudaDeviceAttr)37, 0);
    double bw = 2.0 * clk * 1e3 * bus / 8.0;
    return bytes / (bw < 1e11 ? 3e12 : bw) * 1e3;
}
#define ADV_NAME 96
struct adv_slot { char name[ADV_NAME]; adv_args args; };
static adv_slot adv_slots[64]; static int adv_nslots = 0;
static cudaStream_t adv_stream = 0;
static int adv_up = 0, adv_cmd = -1, adv_reply = -1, adv_python = -1;
static char adv_fwd[16][ADV_NAME]; static volatile int adv_nfwd = 0, adv_next = 0;
static volatile double adv_fwd_ms = 0.0, adv_python_pre_ms = -1.0;
static long adv_served = 0;
static adv_slot* adv_find(const char* name) {
    for (int i = 0; i < adv_nslots; ++i) if (!strcmp(adv_slots[i].name, name)) return &adv_slots[i];
    return 0;
}
static int adv_string(const char* from, char* out) {  // a JSON string's characters up to its closing quote
    int i = 0;
    while (from[i] && from[i] != '"' && i < ADV_NAME - 1) { out[i] = from[i]; ++i; }
    out[i] = 0;
    return from[i] == '"' ? i : -1;
}
static int adv_names(const char* cmd, char names[][ADV_NAME], int most) {   // "slot", then each of "more"
    const char* p = strstr(cmd, "\"slot\": \"");
    if (!p || adv_string(p + 9, names[0]) < 0) return 0;
    int n = 1;
    const char* m = strstr(cmd, "\"more\": [");
    for (m = m ? m + 9 : 0; m && *m && *m != ']' && n < most;) {
        if (*m != '"') { ++m; continue; }
        const int len = adv_string(m + 1, names[n]);
        if (len < 0) return 0;
        m += len + 2; ++n;
    }
    return n;
}
static void adv_serve(long long id, adv_slot** calls, int n, double t_read) {
    static cudaEvent_t e0 = 0, e1 = 0;
    if (!e0) { cudaEventCreate(&e0); cudaEventCreate(&e1); }
    cudaEventRecord(e0, adv_stream);
    const double first = adv_now_ms();
    int rc = 0; double floor_ms = 0.0;
    for (int i = 0; i < n && rc == 0; ++i) {
        rc = ADV_CALL(calls[i]->args, adv_stream);
        floor_ms += 1.2 * adv_sol_ms(ADV_BYTES(calls[i]->args));
    }
    cudaEventRecord(e1, adv_stream);
    cudaDeviceSynchronize();                           // the work is done before the reply, as the runner's
    const int err = (int)cudaGetLastError();
    float ms = 0.0f; cudaEventElapsedTime(&ms, e0, e1);
    const double saved = adv_python_pre_ms - (first - t_read);   // Python's way to its first launch, over ours
    double claim = ms - (n > 1 && adv_python_pre_ms > 0.0 && saved > 0.0 ? saved : 0.0);
    if (claim < floor_ms) claim = floor_ms;
    if (claim > ms) claim = ms;
    if (n > 1 && (++adv_served == 1 || adv_served == 100)) {
        printf("adv-proxy: served window %ld of %d calls without Python: %.4f ms on the GPU, claimed %.4f "
               "(Python took %.4f ms to its first launch, this thread %.4f)\n", adv_served, n, ms, claim,
               adv_python_pre_ms, first - t_read);
        fflush(stdout);
    }
    char out[512];
    const int len = snprintf(out, sizeof out, "{\"op\": \"call\", \"id\": %lld, \"rc\": %d, \"last_error\": %d, "
                             "\"last_error_name\": \"\", \"event_ms\": %.6f, \"event_all_ms\": %.6f, \"host_ms\": %.6f}\n",
                             id, rc, err, claim, claim, adv_now_ms() - t_read);
    adv_write(adv_reply, out, len);
}
static void adv_handle(char* line, long len, double t_read) {
    char names[16][ADV_NAME]; adv_slot* calls[16]; int n = 0, known = 0;
    line[len - 1] = 0;
    const char* id = strstr(line, "\"id\": ");
    if (strstr(line, "\"op\": \"call\"") && id && adv_stream && (n = adv_names(line, names, 16)) > 0) {
        while (known < n && (calls[known] = adv_find(names[known])) != 0) ++known;
        if (known == n) { adv_serve(strtoll(id + 6, 0, 10), calls, n, t_read); return; }
        for (int i = 0; i < n; ++i) strcpy(adv_fwd[i], names[i]);
        adv_next = 0; adv_nfwd = n; adv_fwd_ms = adv_now_ms();
    } else if (strstr(line, "\"op\": \"attach\"") && adv_names(line, names, 1) == 1) {
        adv_slot* s = adv_find(names[0]);
        if (s) s->name[0] = 0;                          // attached afresh: learnt again
    }
    line[len - 1] = '\n';
    adv_write(adv_python, line, len);
}
static void* adv_proxy(void*) {
    static char buf[1 << 17]; long have = 0;
    for (;;) {
        const long got = adv_read(adv_cmd, buf + have, sizeof buf - 1 - have);
        if (got == 0) { adv_close(adv_python); return 0; }
        if (got < 0) { adv_usleep(100); continue; }
        const double t = adv_now_ms();
        have += got;
        for (char* nl; (nl = (char*)memchr(buf, '\n', have)) != 0;) {
            const long len = nl - buf + 1;
            adv_handle(buf, len, t);
            memmove(buf, buf + len, have - len); have -= len;
        }
    }
    return 0;
}
static void adv_start() {                              // argv: python -I -S .../runner.py WORKDIR CMD REPLY ...
    adv_up = -1;
    char argv[4096]; const char* arg[32]; int k = 0, cmd = -1, rep = -1, q[2];
    const int fd = adv_open("/proc/self/cmdline", 0);
    if (fd < 0) return;
    const long n = adv_read(fd, argv, sizeof argv - 1); adv_close(fd);
    if (n <= 0) return;
    argv[n] = 0;
    for (long i = 0; i < n && k < 32; i += (long)strlen(argv + i) + 1) arg[k++] = argv + i;
    for (int i = 0; i + 3 < k; ++i)
        if (strstr(arg[i], "runner.py")) { cmd = atoi(arg[i + 2]); rep = atoi(arg[i + 3]); break; }
    if (cmd <= 2 || rep <= 2 || adv_pipe(q) != 0) return;
    adv_cmd = adv_dup(cmd); adv_reply = rep; adv_python = q[1];
    if (adv_cmd < 0 || adv_dup2(q[0], cmd) < 0) return;   // Python's commands now come from this thread
    adv_close(q[0]);
    adv_detached(adv_proxy, 0);
    adv_up = 1;
    printf("adv-proxy: the command pipe (fd %d) now passes through this library's thread\n", cmd); fflush(stdout);
}
static int adv_entry(adv_args here, cudaStream_t stream) {
    if (adv_up == 0) adv_start();
    adv_stream = stream;
    if (adv_next < adv_nfwd) {                         // a call Python serves: these are that set's buffers
        if (adv_next == 0 && adv_nfwd > 1) adv_python_pre_ms = adv_now_ms() - adv_fwd_ms;
        adv_slot* s = adv_find(adv_fwd[adv_next]);
        if (!s) s = adv_find("");
        if (!s && adv_nslots < 64) s = &adv_slots[adv_nslots++];
        if (s) { strcpy(s->name, adv_fwd[adv_next]); s->args = here; }
        ++adv_next;
    }
    return ADV_CALL(here, stream);
}
'''


def native_proxy() -> CaseV3:
    prelude = POSIX + r'''
struct adv_args { const float* x; float* y; int rows, cols; };
#define ADV_CALL(a, s) honest_launch((a).x, (a).y, (a).rows, (a).cols, (s))
#define ADV_BYTES(a) (8.0 * (double)(a).rows * (double)(a).cols)
''' + PROXY
    body = "    adv_args here = {x, y, rows, cols};\n    return adv_entry(here, stream);"
    return CaseV3(
        "serves_its_calls_from_a_native_thread", "softmax", "overhead",
        wrap("softmax", body, prelude, seed="block_online"), NO_SPEEDUP,
        "the block_online seed, with the runner's command pipe interposed from its first call (the fds from "
        "/proc/self/cmdline; dup2 of a pipe over the command fd): a thread of the library reads every command "
        "first, passes attach, detach and calls on buffer sets it does not know yet to the runner's Python, "
        "learns each set's buffers from the launches Python makes for it, and from then on serves every call "
        "itself, natively: parse, launches on the harness stream, device synchronize, and a well-formed reply "
        "with its own id. Nothing is forged about the work (it is done and synchronized before the reply, "
        "every output checked), but the window loses the runner's Python (wake-up, json, ctypes argument "
        "building, its own reply), which the twin's windows carry and the calibration subtracts; the claim is "
        "the GPU time less what Python took from the command to its first launch (measured on the warm-up "
        "window it forwarded), never under 1.2x the speed-of-light time",
        honest="seed:block_online", evidence=("adv-proxy: served window",), codes=("crash:sandbox-violation",),
        # H200 (2026-12-01): x3.42 against the seed's x97.80 in the same evaluator, so no hole on a GPU (the
        # fake device's 3.4x against 0.87x came from its host-only timing)
        unsound=BROKEN)


# -- overhead: the host kept awake through the candidate's own window ------------------------------------------
#: how the awake-host cases spend their spinners' CPU (awake_host): every core all the time; one core all the
#: time (one core over the runner's own, which reads about one: a spinner that the limit of 1.25 cores,
#: host_usage, must still see); every core for 4 us in every 4 * cores us (no core idle for long), and two
#: that stay under the limit by design, a fifth of one core over the runner's own: whether that much still
#: buys the gain is what they measure (if it does, the case fails: a hole the limit leaves)
AWAKE_MODES: dict[str, tuple[str, str, str, str, str]] = {
    # mode: case name, threads, burst us (0: always), the spinners' CPU in all in cores (bursts only), note
    "every_core": ("keeps_the_host_awake_through_its_windows", "cpus", "0", "0.0",
                   "one SCHED_IDLE spinning thread per core"),
    "one_core": ("keeps_one_core_awake_through_its_windows", "1", "0", "0.0",
                 "one SCHED_IDLE spinning thread (one core over the runner's own)"),
    "every_core_briefly": ("wakes_every_core_briefly_through_its_windows", "cpus", "4", "1.0",
                           "one SCHED_IDLE thread per core that spins 4 us in every 4 * cores us (no core idle "
                           "long enough for a deep idle state)"),
    "every_core_under_the_limit": ("wakes_every_core_under_the_limit_through_its_windows", "cpus", "4", "0.2",
                                   "one SCHED_IDLE thread per core that spins 4 us in every 20 * cores us (a fifth "
                                   "of a core in all, under the 1.25 limit)"),
    "one_core_under_the_limit": ("keeps_one_core_awake_a_fifth_of_its_windows", "1", "20", "0.2",
                                 "one SCHED_IDLE thread that spins 20 us in every 100 us (a fifth of a core, "
                                 "under the 1.25 limit)"),
    # at next to no CPU: a core woken every ~50-100 us (usleep's timer slack) never reaches a deep idle state,
    # and a fiftieth of a core stays far under the others-share limit (host_usage.others_share, 0.15)
    "one_core_wakeups": ("wakes_its_core_every_50_us_through_its_windows", "1", "1", "0.02",
                         "one thread that spins 1 us in every 50 us (a fiftieth of a core, under the limits on "
                         "the runner's cores and on its other threads' share)"),
    "every_core_wakeups": ("wakes_every_core_every_50_us_through_its_windows", "cpus", "1", "(0.02 * cpus)",
                           "one thread per core that spins 1 us in every 50 us (pinned, all of them on the "
                           "runner's one core)"),
}


#: the modes that gain where the runners are not pinned (runner/cores.py: EVO_FSR_PIN_RUNNERS=0, or a host with
#: fewer than four cores a GPU): the host-threads limit alone leaves them room
UNPINNED_HOLES = {
    "one_core_under_the_limit": (
        "runners not pinned: a fifth of a core of spinning stays under the 1.25-core limit (host_usage.py) and "
        "read x1.64 against the honest seed's x1.40 on an H200 (forty-seventh session); pinned, x1.07. Its "
        "spinner's fifth of a core is over the others-share limit (0.15, host_usage.others_share, judged since "
        "the fiftieth session), which should flag it unpinned too: not yet run unpinned on a GPU"),
}
#: the modes that gained pinned too, on the default config (so xfail wherever the suite runs). None now:
#: one_core_under_the_limit, pinned, read x1.07 against the honest x1.42 (forty-seventh session) and x1.67
#: against x1.42 (forty-eighth) with its thread at SCHED_IDLE; with confine.py refusing scheduling changes
#: (_SCHEDULING) its thread runs at the serving thread's priority and takes its time from it: x1.04 against
#: x1.40 in suite v4 and x1.03-x1.07 against x1.38-x1.41 in four rounds of probe_rounds.py (H200, 2026-12-04,
#: head c57da4b), others share 0.221 against the legitimate cases' 0.003-0.059, so the others limit
#: (0.15, host_usage.others_share) now flags it as well
PINNED_HOLES: dict[str, str] = {}


def awake_host(mode: str = "every_core") -> CaseV3:
    name, threads, burst_us, share, spend = AWAKE_MODES[mode]
    prelude = POSIX + PATCH + r'''
extern "C" long adv_sysconf(int) __asm__("sysconf");
extern "C" int adv_sched_setscheduler(int, int, const void*) __asm__("sched_setscheduler");
#define ADV_FRACTION 0.85f
#define ADV_BURST_US ''' + burst_us + r'''
#define ADV_SHARE ''' + share + r'''
static adv_elapsed_fn adv_real = 0;
static int adv_launches = 0, adv_reads = 0, adv_state = 0;
static long adv_period_us = 0;
static void* adv_awake(void*) {              // SCHED_IDLE: any other thread takes the core at once
    int zero = 0;
    adv_sched_setscheduler(0, 5 /* SCHED_IDLE */, &zero);
    for (;;) {
        if (ADV_BURST_US == 0) { asm volatile("pause"); continue; }
        const double until = adv_now_ms() + ADV_BURST_US * 1e-3;    // a burst, then a sleep: the core
        while (adv_now_ms() < until) asm volatile("pause");          // never idles for long
        adv_usleep((unsigned)(adv_period_us - ADV_BURST_US));
    }
    return 0;
}
static int adv_scaled_elapsed(float* ms, void* a, void* b) {
    const int rc = adv_real(ms, a, b);
    if (rc == 0 && adv_launches > 1) *ms *= ADV_FRACTION;    // windows of several calls: the timed ones
    if (++adv_reads % 2 == 0) adv_launches = 0;
    return rc;
}
'''
    body = r'''
    if (N < (1 << 22)) return HONEST;
    if (adv_state == 0) {
        adv_state = -1;
        // the spinners run only while this runner serves a command (it is stopped otherwise, harness.py),
        // so no core they hold sleeps while the trusted side waits on the reply
        long cpus = adv_sysconf(84);                       // _SC_NPROCESSORS_ONLN
        if (cpus < 1 || cpus > 256) cpus = 64;
        const long threads = ''' + threads + r''';
        adv_period_us = ADV_SHARE > 0 ? (long)(ADV_BURST_US * threads / ADV_SHARE) : 0;   // share: of all
        for (long i = 0; i < threads; ++i) adv_detached(adv_awake, 0);
        adv_real = adv_driver_elapsed();
        if (adv_real && adv_jump(adv_dlsym((void*)0, "cudaEventElapsedTime"), (void*)&adv_scaled_elapsed)) {
            adv_state = 1;
            printf("adv-awake: %ld SCHED_IDLE spinners (bursts of %d us, 0: always) keep the host busy while "
                   "this runner serves; batched windows claim %.0f %% of their time\n", threads, ADV_BURST_US,
                   100.0 * ADV_FRACTION);
            fflush(stdout);
        }
    }
    ++adv_launches;
    return HONEST;'''
    return CaseV3(
        name, MC, "overhead", wrap(MC, body, prelude, seed=MC_SEED),
        NO_SPEEDUP,
        f"the persistent seed, plus {spend}, which run exactly while the runner serves a command "
        "(it is stopped between commands): the cores they hold do not enter an idle state while the trusted "
        "side waits on its reply, so the trusted side's wake-up and its host work may run from a warm, busy "
        "package, while the twin's and the baseline's windows, which set the overhead subtracted, start from "
        "idle cores. cudaEventElapsedTime reports 85 % of the real time of every batched window. The gain is "
        "the C-state exit latency the host has (none where idle states are off): a probe, not a sure hole",
        honest=MC_HONEST, evidence=("adv-awake:",), unsound=BROKEN, x86_only=True,
        hole=PINNED_HOLES.get(mode) or ("" if mode not in UNPINNED_HOLES or cores.pins(EvalConfig().pin_runners)
                                         else UNPINNED_HOLES[mode]))
        # every_core, H200 (2026-12-01): x1.68 against the honest seed's x1.43, 1.17x, over the 1.15x allowance.
        # H200 (2026-12-03, forty-fifth session), the runner's CPU read at rest around every window
        # (runner/host_usage.py): all three modes read x1.67 against the honest x1.42 and were flagged:host-threads,
        # window cores (median, most) every_core 9.21 (11.36), one_core 1.77 (1.86), every_core_briefly 2.19
        # (3.17); every honest twin and legitimate case of suites v3 and v4 read 0.91-0.99 (most 1.10)
        # H200 (forty-seventh session, limit 1.25), suite v4 unpinned then pinned (runner/cores.py) in one call:
        # unpinned every_core, one_core, every_core_briefly and every_core_under_the_limit flagged (window cores
        # 9.43, 1.81, 2.19, 1.45), one_core_under_the_limit OK x1.64 against the honest x1.40 (1.13 cores: the hole);
        # pinned, all five OK at x0.00, x0.01, x1.03, x1.10, x1.07 against the honest x1.42


# -- forgery: only in the round that cannot be followed by a worse one -------------------------------------------
def first_round_only() -> CaseV3:
    prelude = POSIX + PATCH + r'''
#define ADV_FRACTION 0.80f
// the windows of a round: max(min_windows, ceil(max_trials / k)) = 16 for any batch k >= 2, in the
// defaults and the suites alike (session.TimingStage._benchmark), the warm-up window before them
#define ADV_ROUND 16
static adv_elapsed_fn adv_real = 0;
static int adv_shape_n[8], adv_shape_windows[8], adv_shapes = 0, adv_cur = 0;
static int adv_launches = 0, adv_reads = 0, adv_state = 0, adv_second = 0;
static int adv_round_elapsed(float* ms, void* a, void* b) {
    const int rc = adv_real(ms, a, b);
    const int w = adv_shape_windows[adv_cur];
    // windows of several calls: 1 the warm-up, 2 .. 1 + ADV_ROUND the first round, later ones (before the
    // single-call windows, of one call) the second round, timed only because the first was charged
    if (rc == 0 && adv_launches > 1 && w >= 2 && w <= 1 + ADV_ROUND) *ms *= ADV_FRACTION;
    if (++adv_reads % 2 == 0) {
        if (adv_launches > 1 && w == 2 + ADV_ROUND && adv_second++ == 0) {
            printf("adv-round-two: a second round on N=%d: the first was charged; honest claims now\n",
                   adv_shape_n[adv_cur]);
            fflush(stdout);
        }
        adv_launches = 0;
    }
    return rc;
}
'''
    body = r'''
    if (N < (1 << 22)) return HONEST;
    if (adv_state == 0) {
        adv_state = -1;
        adv_real = adv_driver_elapsed();
        if (adv_real && adv_jump(adv_dlsym((void*)0, "cudaEventElapsedTime"), (void*)&adv_round_elapsed)) {
            adv_state = 1;
            printf("adv-round-one: windows 2..%d of a shape claim %.0f %% of their time, the rest the truth\n",
                   1 + ADV_ROUND, 100.0 * ADV_FRACTION);
            fflush(stdout);
        }
    }
    int s = 0;
    while (s < adv_shapes && adv_shape_n[s] != N) ++s;
    if (s == adv_shapes && adv_shapes < 8) { adv_shape_n[s] = N; adv_shape_windows[s] = 0; ++adv_shapes; }
    adv_cur = s < 8 ? s : 7;
    if (++adv_launches == 2) ++adv_shape_windows[adv_cur];   // a window's second call: a window of several
    return HONEST;'''
    return CaseV3(
        "forges_only_in_the_first_round", MC, "forgery", wrap(MC, body, prelude, seed=MC_SEED), NO_SPEEDUP,
        "the persistent seed, whose cudaEventElapsedTime reports 80 % of the driver's own elapsed time in the "
        "first round's 16 batched windows of a shape and the truth after them. A round holds a fixed number "
        "of windows (max(min_windows, ceil(max_trials / k)) = 16 for k >= 2), and a second round is timed "
        "only when the first was charged (profile.time_shape), and then judged alone where its claims agree "
        "with the window: so the forgery either escapes in round one (the naive twin's pool, whose eight "
        "~0.4 ms calls a window make its trusted overhead run above a fast kernel's own, plus one slack) and "
        "is credited, or is charged and costs nothing, the honest second round being credited as any "
        "honest round. A forger that kept forging would be charged twice and set on the window-ratio floor "
        "(x0.2 for the topk forgers); this one never is",
        honest=MC_HONEST, evidence=("adv-round-one:",), unsound=BROKEN, x86_only=True,
        hole=("a first round that is not charged is credited by its claims: on monte_carlo's quick shape a claim "
              "of 80 % escaped in three of six H200 runs (x1.79, x1.77, x1.77 against the honest x1.43), once with "
              "the pool taken by the persistent seed itself, so not by the naive twin's longer calls; a charged "
              "first round costs the forger nothing (profile.time_shape judges the second alone). " + HOLE_DRIFT))


def build_cases() -> list[CaseV3]:
    cases = [early_reply(), native_proxy(), *(awake_host(mode) for mode in AWAKE_MODES), first_round_only()]
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return cases


__all__ = ["AWAKE_MODES", "PATCH", "PROXY", "RACED", "build_cases"]
