"""Host-C "kernels" for the fake device (the verdict protocol end to end on a CPU).

Each implements relu's ``launch(const float* x, float* y, int n, void* stream)`` on host memory
shared with the evaluator, as a CUDA kernel does on device memory shared through CUDA IPC.
"""

HONEST = r"""
int launch(const float* x, float* y, int n, void* stream) {
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return 0;
}
"""

SLOW_BASELINE = r"""
#include <time.h>
int launch(const float* x, float* y, int n, void* stream) {
    struct timespec t = {0, 2000000};                 /* 2 ms of "work" */
    nanosleep(&t, 0);
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return 0;
}
"""

HALF_WRITTEN = r"""
int launch(const float* x, float* y, int n, void* stream) {
    for (int i = 0; i < n / 2 + 1; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return 0;
}
"""

INPUT_MODIFIED = r"""
int launch(const float* x, float* y, int n, void* stream) {
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    ((float*)x)[0] = 12345.0f;
    return 0;
}
"""

#: right for the first calls of a size (the other distributions' calls and the warm-up), then
#: replays its last output (a cache keyed by size): only the timed-call checks can catch it
CACHE_BY_SIZE = r"""
#include <stdlib.h>
#include <string.h>
static float* saved = 0; static int saved_n = -1; static int calls = 0;
int launch(const float* x, float* y, int n, void* stream) {
    if (n == saved_n && ++calls > 6) { memcpy(y, saved, sizeof(float) * n); return 0; }
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    free(saved); saved = malloc(sizeof(float) * n); memcpy(saved, y, sizeof(float) * n); saved_n = n; calls = calls;
    return 0;
}
"""

#: right on the first buffer set of the benchmark size (the sweep's and the first of each
#: window), stale (the previous output) on every other set: caught only if every call of a
#: window is checked
STALE_OFF_THE_FIRST_SLOT = r"""
#include <stdlib.h>
#include <string.h>
static float* saved = 0; static float* first = 0;
int launch(const float* x, float* y, int n, void* stream) {
    if (n == 20011 && !first) first = y;
    if (n == 20011 && y != first && saved) { memcpy(y, saved, sizeof(float) * n); return 0; }
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    if (n == 20011) { free(saved); saved = malloc(sizeof(float) * n); memcpy(saved, y, sizeof(float) * n); }
    return 0;
}
"""

#: every run within tolerance, but two runs on the same inputs differ in the last bit
NONDETERMINISTIC = r"""
#include <math.h>
static int seen[64]; static int count = 0;
int launch(const float* x, float* y, int n, void* stream) {
    int first = 1;                                   /* the first call of each size is one ulp off */
    for (int k = 0; k < count; ++k) if (seen[k] == n) first = 0;
    if (first && count < 64) seen[count++] = n;
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    for (int i = 0; i < n; ++i) if (first && y[i] > 0.0f) { y[i] = nextafterf(y[i], 2.0f * y[i]); break; }
    return 0;
}
"""

#: fuses a batch: on the first buffer set of a size (the first it saw) it computes the outputs of
#: every other set of that size it has seen from their inputs as they are now, and returns at
#: once from each of those sets' own calls.  Right wherever a window's inputs are all written
#: before its first call (a plain batch); wrong in a chained window (verdict/chain.py)
FUSE_AHEAD = r"""
#define MAXS 160
static const float* xs[MAXS]; static float* ys[MAXS]; static int ns[MAXS]; static int ahead[MAXS]; static int count = 0;
int launch(const float* x, float* y, int n, void* stream) {
    int me = -1, first = -1;
    for (int k = 0; k < count; ++k) {
        if (ns[k] == n && first < 0) first = k;
        if (ys[k] == y) me = k;
    }
    if (me < 0 && count < MAXS) { xs[count] = x; ys[count] = y; ns[count] = n; ahead[count] = 0; me = count++; }
    if (first < 0) first = me;
    if (me >= 0 && ahead[me]) { ahead[me] = 0; return 0; }
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    if (me == first)
        for (int k = 0; k < count; ++k) {
            if (k == me || ns[k] != n) continue;
            for (int i = 0; i < n; ++i) ys[k][i] = xs[k][i] > 0.0f ? xs[k][i] : 0.0f;
            ahead[k] = 1;
        }
    return 0;
}
"""

#: sleeps on every call; the per-candidate wall-clock budget ends it
SLEEPER = r"""
#include <time.h>
int launch(const float* x, float* y, int n, void* stream) {
    struct timespec t = {0, 400000000};
    nanosleep(&t, 0);
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return 0;
}
"""


def forged_reply(line: str) -> str:
    """Writes ``line`` on the reply pipe (the fd after the workdir and the command fd) as well as computing."""
    escaped = line.replace("\\", "\\\\").replace('"', '\\"')
    return r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int reply_fd(void) {
    char buf[4096]; FILE* f = fopen("/proc/self/cmdline", "rb"); if (!f) return -1;
    size_t len = fread(buf, 1, sizeof buf - 1, f); fclose(f); buf[len] = 0;
    int arg = 0, script = -1;
    for (size_t i = 0; i < len; i += strlen(buf + i) + 1, ++arg) {
        size_t l = strlen(buf + i);
        if (l >= 9 && strcmp(buf + i + l - 9, "runner.py") == 0) script = arg;
        if (script >= 0 && arg == script + 3) return atoi(buf + i);      /* WORKDIR CMD_FD REPLY_FD */
    }
    return -1;
}
int launch(const float* x, float* y, int n, void* stream) {
    const char* line = "%LINE%";
    int fd = reply_fd(); if (fd >= 0) { write(fd, line, strlen(line)); }
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return 0;
}
""".replace("%LINE%", escaped)


#: a thread writes a line on the reply pipe after a real reply went out, while no command is in
#: flight.  Ordered by calls, not by wall time (a 50 ms sleep once woke after the evaluator's last
#: command on a loaded 2-core CI machine, and a line nobody reads again cannot be caught - nor can
#: it change a verdict): the thread writes after the second call returned, and the third call
#: returns only once the line is out, so it always lands before the third reply.
LATE_LINE = forged_reply("").replace("int launch(", r"""
#include <pthread.h>
#include <time.h>
static volatile int calls_returned = 0, late_written = 0;
static void* late(void* arg) {
    while (calls_returned < 2) { struct timespec t = {0, 100000}; nanosleep(&t, 0); }
    struct timespec t = {0, 2000000}; nanosleep(&t, 0);      /* the second reply goes out first */
    int fd = reply_fd(); if (fd >= 0) write(fd, "{}\n", 3);
    __sync_synchronize(); late_written = 1;
    return 0;
}
int launch_unused(""", 1).replace("    const char* line = \"\";\n    int fd = reply_fd(); if (fd >= 0) { write(fd, line, strlen(line)); }\n", "") + r"""
static int started = 0;
int launch(const float* x, float* y, int n, void* stream) {
    if (!started) { pthread_t t; started = 1; pthread_create(&t, 0, late, 0); pthread_detach(t); }
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    while (calls_returned >= 2 && !late_written) { struct timespec t = {0, 100000}; nanosleep(&t, 0); }
    __sync_synchronize(); ++calls_returned;
    return 0;
}
"""


#: 2 ms of work on a host thread joined before launch returns: legitimate (several streams joined)
JOINED_THREAD = r"""
#include <pthread.h>
#include <time.h>
struct job { const float* x; float* y; int n; };
static void* work(void* arg) {
    struct job* j = (struct job*)arg;
    struct timespec t = {0, 2000000}; nanosleep(&t, 0);
    for (int i = 0; i < j->n; ++i) j->y[i] = j->x[i] > 0.0f ? j->x[i] : 0.0f;
    return 0;
}
int launch(const float* x, float* y, int n, void* stream) {
    struct job j = {x, y, n}; pthread_t t;
    pthread_create(&t, 0, work, &j); pthread_join(t, 0);
    return 0;
}
"""

#: the same 2 ms of work left running on a thread after launch returns (escaped work)
ESCAPED_THREAD = JOINED_THREAD.replace("pthread_create(&t, 0, work, &j); pthread_join(t, 0);",
                                       "static struct job keep; keep = j; pthread_create(&t, 0, work, &keep); "
                                       "pthread_detach(t);")


#: an honest relu that, from its first call on, leaves a host thread spinning for good: a stand-in
#: for a candidate's thread that would watch (and slow) the trusted windows between its commands
SPINNER = r"""
#include <pthread.h>
static volatile unsigned long spins = 0;
static void* spin(void* arg) { for (;;) ++spins; return 0; }
static int started = 0;
int launch(const float* x, float* y, int n, void* stream) {
    if (!started) { pthread_t t; started = 1; pthread_create(&t, 0, spin, 0); pthread_detach(t); }
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return 0;
}
"""

#: SLOW_BASELINE's relu (2 ms asleep a call) that, from its first call on, keeps four host threads
#: spinning while its runner serves (suite v4's keeps_the_host_awake_through_its_windows keeps one a
#: core): more of the host's CPU inside its windows than the one thread an honest runner serves
#: with (runner/host_usage.py)
SPINNERS = SLOW_BASELINE.replace("#include <time.h>", "#include <time.h>\n#include <pthread.h>\n"
                                 "static void* spin(void* arg) { volatile unsigned long n = 0; for (;;) ++n; return 0; }\n"
                                 "static int started = 0;").replace(
    "    struct timespec t", "    if (!started) { started = 1; for (int k = 0; k < 4; ++k) { pthread_t s; "
    "pthread_create(&s, 0, spin, 0); pthread_detach(s); } }\n    struct timespec t")
assert SPINNERS.count("pthread_create") == 1 and "nanosleep" in SPINNERS

#: relu that leaves "GPU work" queued after its first benchmark-shape call, as a kernel launched
#: between the runner's synchronize and its stop would keep running: on the fake device, a file
#: busy-<pid> in the device's folder while the runner lives (fake_device.SharedFileMemory.probe_ms)
WORK_AFTER_REPLY = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static int queued = 0;
int launch(const float* x, float* y, int n, void* stream) {
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    if (n == 20011 && !queued) {
        const char* dir = getenv("EVO_FSR_FAKE_DEVICE_DIR");
        char path[512];
        snprintf(path, sizeof path, "%s/busy-%d", dir ? dir : ".", (int)getpid());
        FILE* f = fopen(path, "w");
        if (f) { fclose(f); queued = 1; }
    }
    return 0;
}
"""

#: relu with a host thread that, from the fifth call at the benchmark size on, parks in one long
#: system call that only a fatal signal interrupts: madvise(MADV_POPULATE_READ) over 40 GB of
#: reserved, never-committed address space (the zero page mapped; ~80 MB of page tables, ~2.5 s
#: on this project's CPU machine).  SIGSTOP does not stop it, so it would run on beside the trusted
#: windows that follow the reply (the red team's finding, thirtieth session).
UNSTOPPABLE_THREAD = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <sys/mman.h>
static sem_t go;
static int started = 0, calls = 0;
static void* hog(void* arg) {
    for (;;) {
        sem_wait(&go);
        size_t size = (size_t)40 << 30;
        char* p = mmap(0, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) continue;
        madvise(p, size, 22 /* MADV_POPULATE_READ */);
        munmap(p, size);
    }
    return 0;
}
int launch(const float* x, float* y, int n, void* stream) {
    if (!started) { pthread_t t; started = 1; sem_init(&go, 0, 0); pthread_create(&t, 0, hog, 0); }
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    if (n == 20011 && ++calls >= 5) sem_post(&go);
    return 0;
}
"""

#: an honest relu whose first four calls at the benchmark size (the sweep's and the untimed
#: warm-up window) sleep 0.4 s each: were the number of timed windows set from the warm-up, it
#: would cut a launch-bound shape's windows, and widen the slack a forged claim hides in
SLOW_WARMUP = r"""
#include <time.h>
static int seen = 0;
int launch(const float* x, float* y, int n, void* stream) {
    if (n == 20011 && ++seen <= 4) {
        struct timespec t = {0, 400000000};
        nanosleep(&t, 0);
    }
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return 0;
}
"""

# An honest relu that keeps every input value it has seen (a hash set of bit patterns) and prints,
# for each call of a benchmark-sized n, the share of its values seen in earlier calls: what a sort
# or top-k that learns the universe of the timed inputs' values would exploit (SECURITY.md, "The
# timed inputs come from a fixed pool"; verdict/base_sets.py).
LEARNS_THE_UNIVERSE = r"""
#include <stdio.h>
#include <string.h>
#define ADV_SLOTS (1u << 23)
static unsigned adv_seen[ADV_SLOTS];            /* bit pattern + 1; 0: empty */
static unsigned* adv_slot(unsigned key) {       /* key's slot, or the empty one it would take */
    unsigned h = (key * 2654435761u) & (ADV_SLOTS - 1);
    while (adv_seen[h] && adv_seen[h] != key) h = (h + 1) & (ADV_SLOTS - 1);
    return &adv_seen[h];
}
static long adv_values = 0;
int launch(const float* x, float* y, int n, void* stream) {
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    if (n < 20000 || adv_values > (long)(ADV_SLOTS / 2)) return 0;
    long known = 0;
    for (int i = 0; i < n; ++i) {
        unsigned key; memcpy(&key, x + i, 4); key += 1u;
        known += *adv_slot(key) == key;
    }
    for (int i = 0; i < n; ++i) {                 /* then every value of this call is known */
        unsigned key; memcpy(&key, x + i, 4); key += 1u;
        unsigned* slot = adv_slot(key);
        if (*slot != key) { *slot = key; ++adv_values; }
    }
    printf("adv-universe: n=%d known=%.4f\n", n, (double)known / n);
    fflush(stdout);
    return 0;
}
"""
