"""Building blocks of the v2 adversarial suite (see cases_v2.py): the case type, the seed
wrapper and the host/device snippets the cheats share."""

from __future__ import annotations

import re
from dataclasses import dataclass

from evo_fsr.tasks import get_task

OK, REJECTED, NO_SPEEDUP = "ok", "rejected", "no-speedup"
MAX_SPEEDUP_OVER_HONEST = 1.15
#: per-call sleep of the budget cases, just under the GPU test's per-call timeout
SLEEP_UNDER_TIMEOUT_MS = 3000


@dataclass(frozen=True)
class CaseV2:
    name: str
    task: str
    mechanism: int                 # 1-9: the mechanism this attacks (or, for "ok", guards)
    source: str
    expected: str                  # ok | rejected | no-speedup
    note: str
    honest: str = ""               # no-speedup: "seed:naive" or a complete honest source
    codes: tuple[str, ...] = ()    # likely rejection codes (documentation; any non-OK passes)
    x86_only: bool = False         # patches x86-64 machine code (skipped elsewhere)


# -- building blocks ---------------------------------------------------------------------------
def prototype(task: str) -> str:
    line = next(ln for ln in get_task(task).header().splitlines() if 'extern "C" int launch(' in ln)
    return line.strip().rstrip(";")


def arg_names(task: str) -> str:
    params = prototype(task).split("(", 1)[1].rsplit(")", 1)[0]
    return ", ".join(re.split(r"[\s*]+", p.strip())[-1] for p in params.split(","))


def seed_helper(task: str, seed: str = "naive") -> str:
    src = get_task(task).seeds()[seed] if seed != "naive" else get_task(task).baseline_source
    assert src.count('extern "C" int launch(') == 1, (task, seed)
    return src.replace('extern "C" int launch(', "static int honest_launch(")


def wrap(task: str, body: str, prelude: str = "", seed: str = "naive") -> str:
    """The seed as ``honest_launch`` + ``prelude`` + a ``launch`` whose body is ``body``
    (``HONEST`` in it stands for the call of the seed with the same arguments)."""
    body = body.replace("HONEST", f"honest_launch({arg_names(task)})")
    return f"{seed_helper(task, seed)}\n{prelude}\n{prototype(task)} {{\n{body}\n}}\n"


POSIX = r'''
extern "C" void* adv_dlopen(const char*, int) __asm__("dlopen");
extern "C" void* adv_dlsym(void*, const char*) __asm__("dlsym");
extern "C" int adv_mprotect(void*, unsigned long, int) __asm__("mprotect");
extern "C" int adv_getpagesize(void) __asm__("getpagesize");
extern "C" long adv_readlink(const char*, char*, unsigned long) __asm__("readlink");
extern "C" long adv_write(int, const void*, unsigned long) __asm__("write");
extern "C" int adv_usleep(unsigned) __asm__("usleep");
extern "C" int adv_pthread_create(unsigned long*, const void*, void* (*)(void*), void*) __asm__("pthread_create");
extern "C" int adv_pthread_detach(unsigned long) __asm__("pthread_detach");
struct adv_timespec { long sec; long nsec; };
extern "C" int adv_clock_gettime(int, adv_timespec*) __asm__("clock_gettime");
static double adv_now_ms() { adv_timespec t; adv_clock_gettime(1, &t); return t.sec * 1e3 + t.nsec * 1e-6; }
static void adv_detached(void* (*fn)(void*), void* arg) { unsigned long th; if (adv_pthread_create(&th, 0, fn, arg) == 0) adv_pthread_detach(th); }
'''
SPIN = r'''
__global__ void adv_spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
'''
#: per-shape call counter (no <map>: the include allow-list has none)
COUNTER = r'''
static long long adv_keys[64]; static int adv_counts[64]; static int adv_nkeys = 0;
static int adv_count(long long key) {
    for (int i = 0; i < adv_nkeys; ++i) if (adv_keys[i] == key) return ++adv_counts[i];
    if (adv_nkeys < 64) { adv_keys[adv_nkeys] = key; adv_counts[adv_nkeys++] = 1; }
    return 1;
}
'''
FILL = r'''
__global__ void adv_fill(float* p, long long n, float v) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) p[i] = v;
}
'''




def honest_source(case: CaseV2) -> str:
    """The honest equivalent of a no-speedup case."""
    if case.honest.startswith("seed:"):
        name = case.honest[len("seed:"):]
        return get_task(case.task).baseline_source if name == "naive" else get_task(case.task).seeds()[name]
    return case.honest
