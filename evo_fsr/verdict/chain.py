"""Chained windows: a launch-bound shape's calls timed many to a window, each call's inputs made
on the GPU from a hash of the previous call's outputs, so that no call can start before the one
ahead of it is done (``timed_window.chained_window``, ``runner.Runner.arm``).

Why.  A launch-bound shape (speed-of-light time under ``batching.FUSABLE_FLOOR_MS``: topk's and
sort 2^20) was timed one call to a window, since a batch's k buffer sets all hold their inputs
before its first launch, and a kernel could compute every call in the first.  But one call is a
sliver of its window: on an H200 (thirty-first and thirty-second sessions, topk's quick shape) an
18 us call sat in a ~0.75 ms window whose overhead, estimated from trusted runners, was biased by
up to 160 us against the candidate's own.  The window bound then never bound, and a runner that
made ``cudaEventElapsedTime`` report 2 % of its time was credited x50 its honest twin.  Pairing
each window with a trusted spin twin's did not help: the twin's window less its claim sat 0-115 us
above the candidate's, honest or forging.

The chain: between call j and call j+1 of a window, the runner launches a link, one trusted
kernel of this library on the harness stream (``evo_fsr_chain_link``): it hashes every output
buffer of call j (a sum mod 2^64 of a strong mix of each 32-bit word with its place), then, after a
grid-wide barrier (a cooperative launch, every block resident), fills call j+1's input buffers with
uniform floats in [-1, 1) drawn from that hash.  Nothing
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
draw: about one launch a link, since a link is one kernel (thirty-fifth session; it was a hash
per output buffer and a draw per input buffer).  Measured on an H200 (``probe_chain_links.py``):
topk's link 8.19 -> 3.16 us, 30.1 % -> 13.2 % of a chained call; sort's 13.16 -> 10.96 us,
15.6 % -> 13.1 %, mostly the mix's arithmetic over 2^20 words each way, which a fused copy must
do too (SECURITY.md).

Every input buffer must be float32 (uniform draws are valid inputs), with no ``inout`` buffer,
and the task's inputs i.i.d. per element (``timed_inputs: mix``): ``eligible``.  A draw is 53
random bits u, and ``2 * u * 2**-53 - 1`` is exact in double and rounded once to float (IEEE round
to nearest, the same in CUDA, C, NumPy and CuPy), so the trusted side reproduces the draws bit for
bit.  Values near zero keep their fine bits: until the thirty-fifth session the draws were
multiples of 2**-23, whose sort keys fit 24 bits (three radix passes instead of four, a speed-up
only on the draws).
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
#include <cuda_runtime.h>
#define EVO_FSR_THREADS 256
#define EVO_FSR_MAX_GRID 2048
#define EVO_FSR_BLOCKS_PER_SM 4
#define EVO_FSR_ITEMS 4                 // words a thread, where the grid is not capped
#define EVO_FSR_GATE_TIMEOUT_NS %GATE_NS%LL
#define EVO_FSR_BARRIER_TIMEOUT_NS 2000000000LL
#define EVO_FSR_LOCAL_HASH_WORDS 4096   // outputs this small are hashed whole by every block: no barrier
#define EVO_FSR_FROM_SEED 0
#define EVO_FSR_SHARED_HASH 1
#define EVO_FSR_LOCAL_HASH 2
// a link's buffers, by value in the kernel's parameters: pointers and sizes in 32-bit words
struct evo_fsr_buffers { const void* p[EVO_FSR_MAX_BUFFERS]; long long words[EVO_FSR_MAX_BUFFERS]; int count; };
__device__ unsigned long long evo_fsr_partials[EVO_FSR_MAX_GRID];
__device__ unsigned int evo_fsr_arrived;
__device__ unsigned long long evo_fsr_seed;
static unsigned int evo_fsr_expected = 0;  // blocks of every hashing link enqueued since the gate
static int evo_fsr_cap = 0;                // blocks one cooperative link may have on this device

// the gate: one thread spins on the shared word (host memory mapped into the device) until the
// trusted side writes its seed there, keeps the seed for call 0's draw, and resets the links' barrier
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
    evo_fsr_arrived = 0u;
}

// a block's sum mod 2^64 (any order gives the same), in thread 0
__device__ unsigned long long evo_fsr_block_sum(unsigned long long v, unsigned long long* part) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    __syncthreads();                                  // ``part`` free from an earlier use
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < EVO_FSR_THREADS / 32; ++w) v += part[w];
    return v;
}

// the grid's sum of every block's ``sum`` (thread 0's), in thread 0: each block publishes its
// partial and waits for ``target`` arrivals (every block resident: a cooperative launch)
__device__ unsigned long long evo_fsr_grid_sum(unsigned long long sum, unsigned long long* part, unsigned target) {
    if (threadIdx.x == 0) {
        evo_fsr_partials[blockIdx.x] = sum;
        __threadfence();
        atomicAdd(&evo_fsr_arrived, 1u);
        unsigned long long t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        while (*(volatile unsigned*)&evo_fsr_arrived < target) {
            __nanosleep(32);
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            if ((long long)(t - t0) > EVO_FSR_BARRIER_TIMEOUT_NS) break;   // a wrong hash, caught
        }
        __threadfence();
    }
    __syncthreads();
    unsigned long long s = 0;
    for (int j = threadIdx.x; j < (int)gridDim.x; j += EVO_FSR_THREADS) s += __ldcg(&evo_fsr_partials[j]);
    return evo_fsr_block_sum(s, part);
}

// one link, one kernel: the hash of call j's outputs, then call j+1's inputs drawn from it.
// ``mode``: EVO_FSR_SHARED_HASH, every block hashes a slice and publishes its partial, then a
// grid-wide barrier (the launch is cooperative, so every block is resident) and every block sums
// the partials; EVO_FSR_LOCAL_HASH (small outputs), every block hashes them whole, no barrier;
// EVO_FSR_FROM_SEED, no hash: the inputs drawn from the gate's seed (call 0)
__global__ void __launch_bounds__(EVO_FSR_THREADS) evo_fsr_link_kernel(evo_fsr_buffers outs, evo_fsr_buffers ins,
                                                                     int mode, unsigned target) {
    __shared__ unsigned long long part[EVO_FSR_THREADS / 32];
    __shared__ unsigned long long total;
    const long long stride = (long long)gridDim.x * EVO_FSR_THREADS;
    const long long first = (long long)blockIdx.x * EVO_FSR_THREADS + threadIdx.x;
    if (mode == EVO_FSR_FROM_SEED) {
        if (threadIdx.x == 0) total = evo_fsr_seed;
    } else {
        const bool local = mode == EVO_FSR_LOCAL_HASH;
        const long long from = local ? (long long)threadIdx.x : first, step = local ? EVO_FSR_THREADS : stride;
        unsigned long long sum = 0;
        for (int b = 0; b < outs.count; ++b) {
            const unsigned* w = (const unsigned*)outs.p[b];
            const unsigned long long base = (unsigned long long)(b + 1) * 0x9E3779B97F4A7C15ULL;
            for (long long i = from; i < outs.words[b]; i += step) {
                unsigned long long p = (unsigned long long)i + base;
                EVO_FSR_MIX(p);
                p ^= (unsigned long long)__ldcg(w + i);
                EVO_FSR_MIX(p);
                sum += p;
            }
        }
        sum = evo_fsr_block_sum(sum, part);
        if (!local) sum = evo_fsr_grid_sum(sum, part, target);
        if (threadIdx.x == 0) total = sum;
    }
    __syncthreads();
    const unsigned long long h = total;
    for (int b = 0; b < ins.count; ++b) {
        float* x = (float*)ins.p[b];
        const unsigned long long base = (unsigned long long)(b + 1) * 0xD1B54A32D192ED03ULL;
        for (long long i = first; i < ins.words[b]; i += stride) {
            unsigned long long p = (unsigned long long)i + base;
            EVO_FSR_MIX(p);
            p ^= h;
            EVO_FSR_MIX(p);
            x[i] = (float)(2.0 * ((double)(p >> 11) * (1.0 / 9007199254740992.0)) - 1.0);
        }
    }
}

extern "C" int evo_fsr_chain_gate(const void* word, void* stream) {
    evo_fsr_gate_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((const volatile unsigned long long*)word,
                                                           EVO_FSR_GATE_TIMEOUT_NS);
    evo_fsr_expected = 0;
    return (int)cudaGetLastError();
}

static int evo_fsr_pack(evo_fsr_buffers* into, void* const* ptrs, const long long* nbytes, int count, long long* most) {
    if (count < 0 || count > EVO_FSR_MAX_BUFFERS) return 1;
    into->count = count;
    for (int b = 0; b < count; ++b) {
        into->p[b] = ptrs[b];
        into->words[b] = nbytes[b] / 4;
        if (into->words[b] > *most) *most = into->words[b];
    }
    return 0;
}

// a link between two calls (``from_seed`` 0: the hash of ``outs``, the draw into ``ins``) or
// before call 0 (``from_seed`` 1: the draw from the gate's seed; ``outs`` unused), one kernel on
// ``stream`` (cooperative where its blocks share the hash)
extern "C" int evo_fsr_chain_link(void* const* outs, const long long* out_nbytes, int out_count,
                                  void* const* ins, const long long* in_nbytes, int in_count,
                                  int from_seed, void* stream) {
    if (evo_fsr_cap == 0) {
        int device = 0, sms = 0, per_sm = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, evo_fsr_link_kernel, EVO_FSR_THREADS, 0);
        per_sm = per_sm < EVO_FSR_BLOCKS_PER_SM ? per_sm : EVO_FSR_BLOCKS_PER_SM;
        evo_fsr_cap = sms * per_sm < EVO_FSR_MAX_GRID ? sms * per_sm : EVO_FSR_MAX_GRID;
        if (evo_fsr_cap < 1) { evo_fsr_cap = 0; return 2; }
    }
    evo_fsr_buffers o, in;
    long long most = 1;
    if (evo_fsr_pack(&o, outs, out_nbytes, from_seed ? 0 : out_count, &most) ||
        evo_fsr_pack(&in, ins, in_nbytes, in_count, &most))
        return 1;
    long long want = (most + (long long)EVO_FSR_ITEMS * EVO_FSR_THREADS - 1) / ((long long)EVO_FSR_ITEMS * EVO_FSR_THREADS);
    int grid = (int)(want < evo_fsr_cap ? want : evo_fsr_cap);
    // the barrier's count runs on from link to link (the gate resets it): a link waits for the
    // blocks of every hashing link since the gate, its own included
    long long out_words = 0;
    for (int b = 0; b < o.count; ++b) out_words += o.words[b];
    int mode = from_seed ? EVO_FSR_FROM_SEED
                         : out_words <= EVO_FSR_LOCAL_HASH_WORDS ? EVO_FSR_LOCAL_HASH : EVO_FSR_SHARED_HASH;
    unsigned target = 0;
    if (mode == EVO_FSR_SHARED_HASH) {
        target = (evo_fsr_expected += (unsigned)grid);
        void* args[] = {&o, &in, &mode, &target};
        cudaLaunchCooperativeKernel((const void*)evo_fsr_link_kernel, dim3(grid), dim3(EVO_FSR_THREADS), args, 0,
                                    (cudaStream_t)stream);
    } else {
        evo_fsr_link_kernel<<<grid, EVO_FSR_THREADS, 0, (cudaStream_t)stream>>>(o, in, mode, target);
    }
    return (int)cudaGetLastError();
}
"""

# the fake device (CPU tests): the same arithmetic in host C on the mapped buffers
_HOST = _COMMON + r"""
#include <time.h>
static unsigned long long evo_fsr_seed = 0;

/* the fake runner defers a chain's steps to ``finish`` (after the seed is written), so this
   seldom waits; the bound keeps a gate never opened from hanging */
int evo_fsr_chain_gate(const void* word, void* stream) {
    const volatile unsigned long long* w = (const volatile unsigned long long*)word;
    time_t t0 = time(0);
    while (*w == 0ULL && time(0) - t0 < %GATE_S%) { }
    evo_fsr_seed = *w;
    return 0;
}

int evo_fsr_chain_link(void* const* outs, const long long* out_nbytes, int out_count,
                       void* const* ins, const long long* in_nbytes, int in_count, int from_seed, void* stream) {
    unsigned long long h = evo_fsr_seed;
    if (out_count > EVO_FSR_MAX_BUFFERS || in_count > EVO_FSR_MAX_BUFFERS) return 1;
    if (!from_seed) {
        h = 0;
        for (int b = 0; b < out_count; ++b) {
            const unsigned* w = (const unsigned*)outs[b];
            for (long long i = 0; i < out_nbytes[b] / 4; ++i) {
                unsigned long long p = (unsigned long long)i + (unsigned long long)(b + 1) * 0x9E3779B97F4A7C15ULL;
                EVO_FSR_MIX(p);
                p ^= (unsigned long long)w[i];
                EVO_FSR_MIX(p);
                h += p;
            }
        }
    }
    for (int b = 0; b < in_count; ++b) {
        float* x = (float*)ins[b];
        for (long long i = 0; i < in_nbytes[b] / 4; ++i) {
            unsigned long long p = (unsigned long long)i + (unsigned long long)(b + 1) * 0xD1B54A32D192ED03ULL;
            EVO_FSR_MIX(p);
            p ^= h;
            EVO_FSR_MIX(p);
            x[i] = (float)(2.0 * ((double)(p >> 11) * (1.0 / 9007199254740992.0)) - 1.0);
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
    """The hash ``evo_fsr_chain_link`` takes of a call's output buffers (in the task's order)."""
    u = xp.uint64
    total = 0
    for b, out in enumerate(outputs):
        words = xp.ascontiguousarray(out).reshape(-1).view(xp.uint32).astype(u)
        place = _mix(xp, xp.arange(words.size, dtype=u) + u((b + 1) * _GOLD_OUT & _MASK64))
        total = (total + int(_mix(xp, place ^ words).sum(dtype=u))) & _MASK64
    return total


def inputs_from_hash(xp: Any, h: int, sizes: list[int]) -> list[Any]:
    """The float32 inputs ``evo_fsr_chain_link`` draws from ``h`` (``sizes``: elements per buffer)."""
    u = xp.uint64
    made = []
    for b, n in enumerate(sizes):
        p = _mix(xp, xp.arange(n, dtype=u) + u((b + 1) * _GOLD_IN & _MASK64))
        p = _mix(xp, p ^ u(h))
        unit = (p >> u(11)).astype(xp.float64) * xp.float64(1.0 / 9007199254740992.0)   # 53 bits, exact
        made.append((xp.float64(2.0) * unit - xp.float64(1.0)).astype(xp.float32))         # one rounding
    return made


def drawn_inputs(task: Task, h: int, template: dict[str, Any], xp: Any) -> dict[str, Any]:
    """``template`` (an input set of the shape) with every input drawn from ``h`` as
    ``evo_fsr_chain_link`` draws it: a window's first call's from the gate's seed."""
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
