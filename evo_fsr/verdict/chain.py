"""Chained windows: a launch-bound shape's calls timed many to a window, each call's inputs made
on the GPU from a hash of the previous call's outputs, so that no call can start before the one
ahead of it is done (``timed_window.chained_window``, ``runner.Runner.arm``).

Why.  A launch-bound shape (speed-of-light time under ``profile.FUSABLE_FLOOR_MS``: topk's and
sort 2^20) was timed one call to a window, since a batch's k buffer sets all hold their inputs
before its first launch, and a kernel could compute every call in the first.  But one call is a
sliver of its window: on an H200 (thirty-first and thirty-second sessions, topk's quick shape) an
18 us call sat in a ~0.75 ms window whose overhead, estimated from trusted runners, was biased by
up to 160 us against the candidate's own.  The window bound then never bound, and a runner that
made ``cudaEventElapsedTime`` report 2 % of its time was credited x50 its honest twin.  Pairing
each window with a trusted spin twin's did not help: the twin's window less its claim sat 0-115 us
above the candidate's, honest or forging.

The chain: between call j and call j+1 of a window, the runner launches two trusted kernels of
this library on the harness stream: ``evo_fsr_chain_hash`` over every output buffer of call j
(a sum mod 2^64 of a strong mix of each 32-bit word with its place), and ``evo_fsr_chain_gen``,
which fills call j+1's input buffers with uniform floats in [-1, 1) drawn from that hash.  Nothing
of call j+1's inputs exists before call j's outputs do, so the calls cannot be fused or overlapped
(an output changed after its hash was taken, or inputs made any other way, are caught: after the
window the trusted side recomputes each call's inputs from the outputs it read back,
``expected_inputs``, and checks them bitwise and each output against the reference on them).
A window then holds ``CHAIN_CALLS`` calls, whose time dwarfs the overhead's bias, and the window
bound binds as on any batched shape.  The runner times each call by its own pair of events, so
the hash and the fill are outside the claims and inside the windows' overhead, which the twin
measures running the same chain.

The gate (thirty-fourth session).  The whole chain is enqueued before the window opens: the
trusted side poisons every slot, inputs included, flushes the L2 and sends ``arm``; the runner
enqueues ``evo_fsr_chain_gate``, a one-thread kernel that spins on a word of a page the trusted side
shares with it (a memfd, harness.py), then call 0's inputs drawn from that word, then every call,
link and event, and replies.  The window opens when the trusted side writes a fresh random seed
into the word (a host store: no trusted GPU work, so no hand-over between contexts until the
copy-out), and closes once the runner has synchronized (``finish``) and the last outputs are
copied.  The GPU runs the chain back to back, whatever the host's speed, so the links need no
pace.  Nothing of the chain's inputs exists before the seed does: a runner that skips or forges
the gate runs call 0 on other inputs, and is caught (call 0's inputs are checked bitwise against
the draw of the seed).  What was open before (thirty-third session): the links ran in the
candidate's process, from a host loop inside the window, with a 50 us pace a link so that the GPU
and not the host set the window's length; a kernel that patched them to copies without the pace
shortened each window by ~3 ms and its forged events read x3693 (suite v3,
``forges_and_drops_the_chain_pace``, H200).  The links still run in the candidate's process and
can still be replaced, but the room left is what a replacement can shave off a minimal hash and
draw, a few us a link (SECURITY.md).

Every input buffer must be float32 (uniform draws are valid inputs), with no ``inout`` buffer,
and the task's inputs i.i.d. per element (``timed_inputs: mix``): ``eligible``.  The draws are
exact in float32 (multiples of 2**-23), so the trusted side reproduces them bit for bit, in NumPy
or CuPy, from the same arithmetic.
"""
from __future__ import annotations

from typing import Any

from ..tasks import Task

#: the library's name in a runner's job (``chain.so`` in its workdir)
CHAIN_LIB = "chain"
#: calls in a chained window: enough that an overhead biased by ~150 us (H200) is ~2 us a call
CHAIN_CALLS = 64
#: the gate's longest wait (the trusted side writes its seed within milliseconds of the reply to
#: ``arm``; a gate never opened lets the chain run on a zero seed, which is caught, not hang)
GATE_TIMEOUT_S = 30.0

_GOLD_OUT = 0x9E3779B97F4A7C15
_GOLD_IN = 0xD1B54A32D192ED03
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_MASK64 = (1 << 64) - 1

_COMMON = r"""
#define EVO_FSR_MIX(x) (x ^= x >> 30, x *= 0xBF58476D1CE4E5B9ULL, x ^= x >> 27, x *= 0x94D049BB133111EBULL, x ^= x >> 31)
#define EVO_FSR_MAX_BUFFERS 8
"""

_CUDA = _COMMON + r"""
#define EVO_FSR_BLOCKS 128
#define EVO_FSR_GATE_TIMEOUT_NS %GATE_NS%LL
__device__ unsigned long long evo_fsr_partials[EVO_FSR_MAX_BUFFERS][EVO_FSR_BLOCKS];
__device__ unsigned long long evo_fsr_seed;
static int evo_fsr_hashed = 0;

// the gate: one thread spins on the shared word (host memory mapped into the device) until the
// trusted side writes its seed there, and keeps the seed for call 0's draw
__global__ void evo_fsr_gate_kernel(const volatile unsigned long long* word, long long timeout_ns) {
    unsigned long long t0, t, seen = *word;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (seen == 0ULL) {
        __nanosleep(64);
        seen = *word;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if ((long long)(t - t0) > timeout_ns) break;
    }
    evo_fsr_seed = seen;
}

__global__ void evo_fsr_hash_kernel(const unsigned* w, long long n, int b) {
    __shared__ unsigned long long part[256];
    unsigned long long sum = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned long long p = (unsigned long long)i + (unsigned long long)(b + 1) * 0x9E3779B97F4A7C15ULL;
        EVO_FSR_MIX(p);
        p ^= (unsigned long long)w[i];
        EVO_FSR_MIX(p);
        sum += p;
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) evo_fsr_partials[b][blockIdx.x] = part[0];
}

// the draw, from the hash of the previous call's outputs (every block sums the partials, mod 2^64
// in any order) or, for a window's first call, from the gate's seed
__global__ void evo_fsr_gen_kernel(float* x, long long n, int b, int hashed, int from_seed) {
    __shared__ unsigned long long part[256];
    unsigned long long s = 0;
    if (!from_seed)
        for (int j = threadIdx.x; j < hashed * EVO_FSR_BLOCKS; j += blockDim.x)
            s += evo_fsr_partials[j / EVO_FSR_BLOCKS][j % EVO_FSR_BLOCKS];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int r = blockDim.x / 2; r > 0; r >>= 1) {
        if (threadIdx.x < r) part[threadIdx.x] += part[threadIdx.x + r];
        __syncthreads();
    }
    const unsigned long long h = from_seed ? evo_fsr_seed : part[0];
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned long long p = (unsigned long long)i + (unsigned long long)(b + 1) * 0xD1B54A32D192ED03ULL;
        EVO_FSR_MIX(p);
        p ^= h;
        EVO_FSR_MIX(p);
        x[i] = (float)(unsigned)(p >> 40) * (1.0f / 8388608.0f) - 1.0f;
    }
}

extern "C" int evo_fsr_chain_gate(const void* word, void* stream) {
    evo_fsr_gate_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((const volatile unsigned long long*)word,
                                                           EVO_FSR_GATE_TIMEOUT_NS);
    return (int)cudaGetLastError();
}

extern "C" int evo_fsr_chain_hash(void* const* outs, const long long* nbytes, int count, void* stream) {
    if (count > EVO_FSR_MAX_BUFFERS) return 1;
    for (int b = 0; b < count; ++b)
        evo_fsr_hash_kernel<<<EVO_FSR_BLOCKS, 256, 0, (cudaStream_t)stream>>>((const unsigned*)outs[b], nbytes[b] / 4, b);
    evo_fsr_hashed = count;
    return (int)cudaGetLastError();
}

extern "C" int evo_fsr_chain_gen(void* const* ins, const long long* nbytes, int count, int from_seed, void* stream) {
    for (int b = 0; b < count; ++b) {
        long long n = nbytes[b] / 4;
        int blocks = (int)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
        evo_fsr_gen_kernel<<<blocks < 1 ? 1 : blocks, 256, 0, (cudaStream_t)stream>>>(
            (float*)ins[b], n, b, evo_fsr_hashed, from_seed);
    }
    return (int)cudaGetLastError();
}
"""

# the fake device (CPU tests): the same arithmetic in host C on the mapped buffers
_HOST = _COMMON + r"""
#include <time.h>
static unsigned long long evo_fsr_h = 0, evo_fsr_seed = 0;

/* the fake runner defers a chain's steps to ``finish`` (after the seed is written), so this
   seldom waits; the bound keeps a gate never opened from hanging */
int evo_fsr_chain_gate(const void* word, void* stream) {
    const volatile unsigned long long* w = (const volatile unsigned long long*)word;
    time_t t0 = time(0);
    while (*w == 0ULL && time(0) - t0 < %GATE_S%) { }
    evo_fsr_seed = *w;
    return 0;
}

int evo_fsr_chain_hash(void* const* outs, const long long* nbytes, int count, void* stream) {
    unsigned long long sum = 0;
    for (int b = 0; b < count; ++b) {
        const unsigned* w = (const unsigned*)outs[b];
        for (long long i = 0; i < nbytes[b] / 4; ++i) {
            unsigned long long p = (unsigned long long)i + (unsigned long long)(b + 1) * 0x9E3779B97F4A7C15ULL;
            EVO_FSR_MIX(p);
            p ^= (unsigned long long)w[i];
            EVO_FSR_MIX(p);
            sum += p;
        }
    }
    evo_fsr_h = sum;
    return 0;
}

int evo_fsr_chain_gen(void* const* ins, const long long* nbytes, int count, int from_seed, void* stream) {
    const unsigned long long h = from_seed ? evo_fsr_seed : evo_fsr_h;
    for (int b = 0; b < count; ++b) {
        float* x = (float*)ins[b];
        for (long long i = 0; i < nbytes[b] / 4; ++i) {
            unsigned long long p = (unsigned long long)i + (unsigned long long)(b + 1) * 0xD1B54A32D192ED03ULL;
            EVO_FSR_MIX(p);
            p ^= h;
            EVO_FSR_MIX(p);
            x[i] = (float)(unsigned)(p >> 40) * (1.0f / 8388608.0f) - 1.0f;
        }
    }
    return 0;
}
"""


def chain_source(task: Task, fake: bool = False) -> str:
    """The chain library's source: CUDA (compiled like the naive seed, the task header prepended,
    so it carries a ``launch`` of the task's signature, never called), or host C for the fake
    device."""
    if fake:
        return _HOST.replace("%GATE_S%", str(int(GATE_TIMEOUT_S)))
    return (_CUDA.replace("%GATE_NS%", str(int(GATE_TIMEOUT_S * 1e9)))
            + f"\n{task.signature()} {{ return 0; }}\n")


def eligible(task: Task) -> bool:
    """Whether ``task``'s launch-bound shapes can be chained: float32 inputs only, no ``inout``
    buffer, at most ``EVO_FSR_MAX_BUFFERS`` of either kind, inputs i.i.d. per element, and every
    output a whole number of 32-bit words."""
    if getattr(task, "timed_inputs", "") != "mix":
        return False
    ins = [a for a in task.args if a.role == "input"]
    outs = [a for a in task.args if a.role == "output"]
    if any(a.role == "inout" for a in task.args) or not ins or not outs or len(ins) > 8 or len(outs) > 8:
        return False
    return all(a.dtype == "float32" for a in ins) and all(a.dtype in ("float32", "int32", "uint32") for a in outs)


def _mix(xp: Any, x: Any) -> Any:
    u = xp.uint64
    x = x ^ (x >> u(30))
    x = x * u(_M1)
    x = x ^ (x >> u(27))
    x = x * u(_M2)
    return x ^ (x >> u(31))


def output_hash(xp: Any, outputs: list[Any]) -> int:
    """The hash ``evo_fsr_chain_hash`` takes of a call's output buffers (in the task's order)."""
    u = xp.uint64
    total = 0
    for b, out in enumerate(outputs):
        words = xp.ascontiguousarray(out).reshape(-1).view(xp.uint32).astype(u)
        place = _mix(xp, xp.arange(words.size, dtype=u) + u((b + 1) * _GOLD_OUT & _MASK64))
        total = (total + int(_mix(xp, place ^ words).sum(dtype=u))) & _MASK64
    return total


def inputs_from_hash(xp: Any, h: int, sizes: list[int]) -> list[Any]:
    """The float32 inputs ``evo_fsr_chain_gen`` draws from ``h`` (``sizes``: elements per buffer)."""
    u = xp.uint64
    made = []
    for b, n in enumerate(sizes):
        p = _mix(xp, xp.arange(n, dtype=u) + u((b + 1) * _GOLD_IN & _MASK64))
        p = _mix(xp, p ^ u(h))
        made.append((p >> u(40)).astype(xp.float32) * xp.float32(1.0 / 8388608.0) - xp.float32(1.0))
    return made


def drawn_inputs(task: Task, h: int, template: dict[str, Any], xp: Any) -> dict[str, Any]:
    """``template`` (an input set of the shape) with every input drawn from ``h`` as
    ``evo_fsr_chain_gen`` draws it: a window's first call's from the gate's seed."""
    ins = [a.name for a in task.args if a.role == "input"]
    drawn = inputs_from_hash(xp, h, [int(template[name].size) for name in ins])
    made = dict(template)
    for name, values in zip(ins, drawn):
        made[name] = values.reshape(template[name].shape)
    return made


def expected_inputs(task: Task, previous: dict[str, Any], template: dict[str, Any], xp: Any) -> dict[str, Any]:
    """The inputs a chained call must have run on: drawn from the hash of ``previous`` (the call
    before it, its outputs as read back), shaped as ``template`` (the window's first inputs)."""
    h = output_hash(xp, [previous[a.name] for a in task.args if a.role == "output"])
    return drawn_inputs(task, h, template, xp)


def chained_inputs(task: Task, first: dict[str, Any], captured: list[dict[str, Any]], xp: Any) -> list[dict[str, Any]]:
    """Every call's inputs in a chained window: ``first`` (drawn from the trusted seed), then each drawn
    from the outputs of the call before it as read back (``captured``, one per call)."""
    return [first, *(expected_inputs(task, taken, first, xp) for taken in captured[:-1])]


__all__ = ["CHAIN_CALLS", "CHAIN_LIB", "GATE_TIMEOUT_S", "chain_source", "chained_inputs",
           "drawn_inputs", "eligible", "expected_inputs", "inputs_from_hash", "output_hash"]
