"""The completion mark: where a timed window ends (timed_window.py).

Why.  Until the thirty-eighth session a window ended when the runner's reply had come and the
trusted side had copied the outputs.  The reply path (the runner's Python after its launches,
its synchronizes, the JSON on the pipe, the trusted side's wake-up; 100-200 us on an H200) sat
inside every window, and the overhead subtracted from a candidate's windows was the twin's,
whose runner replies after its work.  A runner that replied with its calls still queued (suite
v4, ``replies_before_its_calls_are_done``: its synchronizes patched) overlapped that path with
its GPU work; its window fell below the twin's by the overlap, and a claim forged by as much
stood: x2.01 against the honest kernel's x1.42 (monte_carlo 2^24, H200).

The mark.  After a window's calls the runner enqueues one trusted kernel of this library
(``evo_fsr_mark``) on the legacy default stream, behind an event recorded on the harness stream
after the last call: so it runs once the calls' work is done on the harness stream and on every
blocking stream of the context (the legacy stream, the per-thread default stream, streams made
with ``cudaStreamCreate``, non-blocking streams joined to the harness stream).  It hashes a
keyed sample of every output word of the window's calls (``SAMPLES`` words a buffer, its first
and its last among them, all of a buffer that small) and writes the hash, then the window's key,
into the page the trusted side shares with the runner (harness.py's gate page, at
``protocol.MARK_OFFSET``).  The trusted side spins on that page; the window ends when the key
appears and the outputs are copied.  The reply is read after the window: no runner's host path,
honest or not, is inside any window, so replying early gains nothing.

Why the hash.  The key is in the command, so a runner can write the mark at any time, from the
host too; the hash makes a mark written before the outputs are final worthless.  After the
window the trusted side recomputes it from the outputs it copied (``expected_hash``): a mark
taken from other bytes (the poison, or outputs still being written) does not match.  A window
whose mark is missing or does not match is timed to the runner's reply instead, and its outputs
are copied again after the reply (``timed_window``): that window holds the reply path, which the
subtracted overhead (taken from marked windows) does not, so a runner that skips or forges its
mark is charged more, not less.  This also times, and charges, an honest kernel that leaves
work on a non-blocking stream it never joins (the harness cannot see such work before the reply).

After the reply, once the runner is stopped, the outputs are copied once more and compared
bitwise with the window's copy: outputs that changed after it (work the mark did not wait for, or
a kernel that marked early and finished its rest after the trusted side woke) are taken from the
later copy, and the window is timed to it.

What a runner can still shave.  The key is in the command, so a runner can compute the sampled
words first (they are keyed, but the key is known), write a right mark, and finish the rest
while the trusted side issues its copies: it gains the trusted side's path from seeing the mark to
the copies being queued, one memcpy issue per output buffer (the copies' arrays are made before
the command), since the copies then wait for the candidate's context (contexts time-slice) or
read unfinished outputs, which the later copy or the reference catches.  Measured on an H200
(thirty-eighth session, suite v4): the early replier read x1.11 (charged) against its honest
twin's x1.43, where it read x2.01-2.04 before.
"""
from __future__ import annotations

import secrets
from typing import Any, Sequence

from ..tasks import Task
from ..runner.protocol import MARKED_ROLES
from .chain import _COMMON as _CHAIN_COMMON, _GOLD_IN, _GOLD_OUT, _MASK64, _mix   # the chain links' mix

#: the library's name in a runner's job (``mark.so`` in its workdir)
MARK_LIB = "mark"
#: output words sampled per buffer (every word of a smaller buffer)
SAMPLES = 512
#: output buffers a mark covers (a window's calls times the task's outputs); beyond, the last ones
MAX_BUFFERS = 64

_G_PLACE, _G_DRAW = _GOLD_OUT, _GOLD_IN

_COMMON = _CHAIN_COMMON + r"""
#define EVO_FSR_MARK_SAMPLES %SAMPLES%LL
#define EVO_FSR_MARK_BUFFERS %BUFFERS%
#define EVO_FSR_MARK_PLACE %PLACE%ULL
#define EVO_FSR_MARK_DRAW %DRAW%ULL
"""

# the sample's j-th word of buffer ``id`` (1-based) of ``words`` words, and its term of the hash;
# shared by the CUDA and the host C versions (``HD``: the qualifier)
_TERM = r"""
static HD unsigned long long evo_fsr_mark_place(unsigned long long key, unsigned long long id, long long words,
                                                long long j) {
    if (words <= EVO_FSR_MARK_SAMPLES || j == 0) return (unsigned long long)j;
    if (j == 1) return (unsigned long long)(words - 1);
    unsigned long long x = key + id * EVO_FSR_MARK_DRAW + (unsigned long long)j;
    EVO_FSR_MIX(x);
    return x % (unsigned long long)words;
}
static HD unsigned long long evo_fsr_mark_term(unsigned long long key, unsigned long long id, unsigned long long place,
                                               unsigned word) {
    unsigned long long p = (place + id * EVO_FSR_MARK_PLACE) ^ key;
    EVO_FSR_MIX(p);
    p ^= (unsigned long long)word;
    EVO_FSR_MIX(p);
    return p;
}
"""

_CUDA = _COMMON + r"""
#include <cuda_runtime.h>
#define HD __device__
""" + _TERM + r"""
#define EVO_FSR_MARK_THREADS 256
struct evo_fsr_marked { const unsigned* p[EVO_FSR_MARK_BUFFERS]; long long words[EVO_FSR_MARK_BUFFERS]; int count; };

// the window's running sum and the blocks done (the mark's windows follow one another on the
// legacy stream; the last block resets both)
__device__ unsigned long long evo_fsr_mark_sum;
__device__ unsigned int evo_fsr_mark_done;

// one block a buffer: its sample's terms summed, added to the window's sum; the last block to
// finish writes the hash, then the key, into the shared page (host memory mapped into the
// device), each store made visible to the host before the next
__global__ void __launch_bounds__(EVO_FSR_MARK_THREADS) evo_fsr_mark_kernel(evo_fsr_marked bufs, unsigned long long key,
                                                                          volatile unsigned long long* page) {
    __shared__ unsigned long long part[EVO_FSR_MARK_THREADS / 32];
    const int f = blockIdx.x;
    const long long words = bufs.words[f];
    const long long n = words < EVO_FSR_MARK_SAMPLES ? words : EVO_FSR_MARK_SAMPLES;
    unsigned long long sum = 0;
    for (long long j = threadIdx.x; j < n; j += EVO_FSR_MARK_THREADS) {
        const unsigned long long place = evo_fsr_mark_place(key, (unsigned long long)(f + 1), words, j);
        sum += evo_fsr_mark_term(key, (unsigned long long)(f + 1), place, __ldcv(bufs.p[f] + place));
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < EVO_FSR_MARK_THREADS / 32; ++w) sum += part[w];
        atomicAdd(&evo_fsr_mark_sum, sum);
        __threadfence();
        if (atomicAdd(&evo_fsr_mark_done, 1u) == gridDim.x - 1) {
            const unsigned long long total = atomicExch(&evo_fsr_mark_sum, 0ULL);
            evo_fsr_mark_done = 0u;
            page[1] = total;
            __threadfence_system();
            page[0] = key;
            __threadfence_system();
        }
    }
}

// the mark of a window: on the legacy default stream, behind ``after`` (an event the runner
// recorded on the harness stream after the last call); ``page``: the key's word, the hash's after
// it.  No mark where a CUDA error is pending (the call's reply reports it) or no buffer is given.
extern "C" int evo_fsr_mark(void* page, unsigned long long key, void* const* ptrs, const long long* nbytes, int count,
                            void* after) {
    if (cudaPeekAtLastError() != cudaSuccess) return 0;
    evo_fsr_marked bufs;
    const int first = count > EVO_FSR_MARK_BUFFERS ? count - EVO_FSR_MARK_BUFFERS : 0;
    bufs.count = count - first;
    if (bufs.count <= 0) return 0;
    for (int f = 0; f < bufs.count; ++f) {
        bufs.p[f] = (const unsigned*)ptrs[first + f];
        bufs.words[f] = nbytes[first + f] / 4;
    }
    cudaError_t err = cudaStreamWaitEvent(cudaStreamLegacy, (cudaEvent_t)after, 0);
    if (err != cudaSuccess) return (int)err;
    evo_fsr_mark_kernel<<<bufs.count, EVO_FSR_MARK_THREADS, 0, cudaStreamLegacy>>>(bufs, key,
                                                                                 (volatile unsigned long long*)page);
    return (int)cudaGetLastError();
}
"""

# the fake device (CPU tests): the same arithmetic in host C on the mapped buffers, at once
_HOST = _COMMON + r"""
#define HD
""" + _TERM + r"""
int evo_fsr_mark(void* page, unsigned long long key, void* const* ptrs, const long long* nbytes, int count,
                 void* after) {
    const int first = count > EVO_FSR_MARK_BUFFERS ? count - EVO_FSR_MARK_BUFFERS : 0;
    unsigned long long sum = 0;
    for (int f = 0; f < count - first; ++f) {
        const unsigned* w = (const unsigned*)ptrs[first + f];
        const long long words = nbytes[first + f] / 4;
        const long long n = words < EVO_FSR_MARK_SAMPLES ? words : EVO_FSR_MARK_SAMPLES;
        for (long long j = 0; j < n; ++j) {
            const unsigned long long place = evo_fsr_mark_place(key, (unsigned long long)(f + 1), words, j);
            sum += evo_fsr_mark_term(key, (unsigned long long)(f + 1), place, w[place]);
        }
    }
    if (count - first <= 0) return 0;
    volatile unsigned long long* out = (volatile unsigned long long*)page;
    out[1] = sum;
    __sync_synchronize();
    out[0] = key;
    return 0;
}
"""


def mark_source(task: Task, fake: bool = False) -> str:
    """The mark library's source: CUDA (compiled like the naive seed, the task header prepended,
    so it carries a ``launch`` of the task's signature, never called), or host C for the fake
    device."""
    fill = {"%SAMPLES%": str(SAMPLES), "%BUFFERS%": str(MAX_BUFFERS), "%PLACE%": hex(_G_PLACE),
            "%DRAW%": hex(_G_DRAW)}
    source = _HOST if fake else _CUDA
    for token, value in fill.items():
        source = source.replace(token, value)
    return source if fake else source + f"\n{task.signature()} {{ return 0; }}\n"


def new_key() -> int:
    """A window's key: random, never 0 (the page's word before any mark)."""
    return secrets.randbits(63) | 1


def sample_places(xp: Any, key: int, index: int, words: int) -> Any:
    """The words of buffer ``index`` (0-based, of the mark's buffers) that the mark samples."""
    u = xp.uint64
    n = min(words, SAMPLES)
    j = xp.arange(n, dtype=u)
    if words <= SAMPLES:
        return j
    x = _mix(xp, u((key + (index + 1) * _G_DRAW) & _MASK64) + j)
    places = x % u(words)
    places[0] = 0
    if n > 1:
        places[1] = words - 1
    return places


def expected_hash(xp: Any, key: int, outputs: Sequence[Any]) -> int:
    """The hash ``evo_fsr_mark`` writes for ``outputs`` (every output buffer of the window's
    marked calls, call by call in the task's order, as arrays of ``xp``)."""
    u = xp.uint64
    buffers = list(outputs)[-MAX_BUFFERS:]
    total = 0
    for index, out in enumerate(buffers):
        flat = xp.ascontiguousarray(out).reshape(-1).view(xp.uint8)
        words = flat.size // 4
        if words == 0:
            continue
        w = flat[:words * 4].view(xp.uint32)
        places = sample_places(xp, key, index, words)
        p = _mix(xp, (places + u((index + 1) * _G_PLACE & _MASK64)) ^ u(key))
        p = _mix(xp, p ^ w[places].astype(u))
        total = (total + int(p.sum(dtype=u))) & _MASK64
    return total


def marked_outputs(task: Task, captured: Sequence[dict[str, Any]]) -> list[Any]:
    """The buffers a mark covers, from the window's marked calls' copied outputs (in call order)."""
    names = [a.name for a in task.args if a.role in MARKED_ROLES]
    return [taken[name] for taken in captured for name in names]


__all__ = ["MARKED_ROLES", "MARK_LIB", "MAX_BUFFERS", "SAMPLES", "expected_hash", "mark_source", "marked_outputs", "new_key",
           "sample_places"]
