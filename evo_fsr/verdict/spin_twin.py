"""The spin twin: a trusted library with the task's ``launch`` signature that only keeps the GPU
busy for as long as it is told, for a window paired with each of a launch-bound shape's timed
windows (``EvalConfig.paired_twin``; ``TimingStage._timing_round``, ``profile.credit_terms``).

Why (thirty-first session, NVIDIA H200, topk's quick shape, an 18.5 us call in a ~0.8 ms window;
``scripts/probe_round_trip.py``, ``scripts/probe_twin_length.py``): the overhead subtracted from
a candidate's windows, taken from the naive twin's pool and the interleaved baseline's windows,
sat 2-160 us above the candidate's own windows less their events in the same evaluation.  It
grew with the length of the call in the window (the naive call takes ~1.5 ms) and was higher for
a runner timed one window in three than for one timed two in three; a pool taken on the
candidate's own runner before its library was loaded sat 15-100 us above as well.  So the window
bound fell below the claims, which were credited as they came: the v3 forgers
claiming 50 %, 20 % and 2 % of their time read x2.01, x5.00 and x50.8 their honest twin.

The pair: right after each timed candidate window, a trusted runner of this library is timed on
the candidate's buffer sets (inputs loaded, L2 flushed, outputs copied out, as for any window)
while its kernel spins on the GPU's clock for exactly the time the candidate claimed for that
window.  Its window is the candidate's as it would be were the claim true: the same call length,
the same moment, and the same place in the order (every window of either, but for the
interleaved baseline's, comes right after the other runner's).  ``window - paired window + claim`` estimates
the candidate's real time per window, whatever the overhead and its drift, and a claim cut
below the real time moves the paired window with it, not the estimate.
"""
from __future__ import annotations

from ..tasks import Task

#: the exported setter the runner calls when a ``call`` command carries ``spin_ns``
SPIN_SETTER = "evo_fsr_spin_ns"
#: the library's name in a runner's job (``spin.so`` in its workdir)
SPIN_LIB = "spin"

_CUDA = r"""
static long long evo_fsr_spin_value_ns = 0;
extern "C" void evo_fsr_spin_ns(long long ns) { evo_fsr_spin_value_ns = ns; }
// one warp spins on the GPU's global timer until ``ns`` have passed since it started
__global__ void evo_fsr_spin(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while ((long long)(t - t0) < ns);
}
%SIGNATURE% {
    evo_fsr_spin<<<1, 32, 0, %STREAM%>>>(evo_fsr_spin_value_ns);
    return (int)cudaGetLastError();
}
"""

# the fake device (CPU tests): a "kernel" is host C that runs inside ``launch``; it sleeps until
# the time is up (GPU work takes no CPU, and a busy-wait would be slowed by a loaded CI machine's
# other processes where the candidate's sleeping kernels are not)
_HOST = r"""
#include <errno.h>
#include <time.h>
static long long evo_fsr_spin_value_ns = 0;
void evo_fsr_spin_ns(long long ns) { evo_fsr_spin_value_ns = ns; }
%SIGNATURE% {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    long long ns = until.tv_nsec + evo_fsr_spin_value_ns;
    until.tv_sec += ns / 1000000000LL;
    until.tv_nsec = ns % 1000000000LL;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, 0) == EINTR) {}
    return 0;
}
"""

_HOST_TYPES = {"int32": "int", "int64": "long long", "float32": "float", "float64": "double"}


def spin_source(task: Task, fake: bool = False) -> str:
    """The spin twin's source for ``task`` (CUDA; host C for the fake device, whose ``launch``
    takes plain pointers), compiled like the naive seed (the task header is prepended to CUDA)."""
    stream = next((a.name for a in task.args if a.role == "stream"), None)
    if stream is None:
        raise ValueError(f"task {task.name!r} has no stream argument")
    if not fake:
        return _CUDA.replace("%SIGNATURE%", task.signature()).replace("%STREAM%", stream)
    params = []
    for i, arg in enumerate(task.args):
        ctype = _HOST_TYPES.get(arg.dtype, "int") if arg.role == "scalar" else "void*"
        params.append(f"{ctype} a{i}")
    return _HOST.replace("%SIGNATURE%", "int launch(" + ", ".join(params) + ")")


__all__ = ["SPIN_LIB", "SPIN_SETTER", "spin_source"]
