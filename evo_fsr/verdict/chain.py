"""Chained windows: a launch-bound shape's calls timed many to a window, each call's inputs made
on the GPU from a hash of the previous call's outputs, so that no call can start before the one
ahead of it is done (``timed_window.timed_batch``, ``runner.Runner.call``).

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

The pace: each link holds the GPU for at least ``CHAIN_PACE_US``.  The runner issues a call and a
link from Python in tens of us; were the GPU faster than that, a fast kernel's window would
measure the host loop, not the kernels, and an honest kernel would be charged the difference.
With the floor the host runs ahead and the GPU runs the window back to back.  (The first build,
whose fill summed the hash's partials in one thread, took ~58 us a link on an H200 by accident,
and was measured so: the v3 forgers claiming 50/20/2 % read x1.09/x1.05/x1.03 their honest twin,
against x1.99/x5.11/x51.0 at one call a window, and the honest topk and sort seeds kept their
credit within 4 %.)

Open (thirty-third session, SECURITY.md): the links run in the candidate's process.  This library
is loaded from its workdir at the first chained call, after its code has run, and loaded code can
be patched in process; a forger that draws the inputs without the pace shortens each window by
~63 x ``CHAIN_PACE_US`` (3.2 ms, more than topk's 64 calls), and its forged events then pass the
window bound.  The fix to build: the whole chain enqueued before the window behind a gate the
trusted side releases, no pace, minimal links.

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
#: the least a link (hash and draw) holds the GPU: longer than the runner's host loop takes to
#: issue a call and a link (tens of us in Python), so the GPU sets the pace and the host runs ahead
CHAIN_PACE_US = 50.0

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
#define EVO_FSR_PACE_NS %PACE_NS%LL
__device__ unsigned long long evo_fsr_partials[EVO_FSR_MAX_BUFFERS][EVO_FSR_BLOCKS];
static int evo_fsr_hashed = 0;

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

// the draw; block 0 of the last input's launch also holds the GPU for at least ``pace_ns`` from
// its start (EVO_FSR_PACE_NS: the link's floor, chain.py's CHAIN_PACE_US)
__global__ void evo_fsr_gen_kernel(float* x, long long n, int b, int hashed, long long pace_ns) {
    __shared__ unsigned long long part[256];
    unsigned long long t0 = 0, t = 0;
    if (pace_ns > 0 && blockIdx.x == 0 && threadIdx.x == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    unsigned long long s = 0;               // the hash: every block sums the partials (mod 2^64, any order)
    for (int j = threadIdx.x; j < hashed * EVO_FSR_BLOCKS; j += blockDim.x)
        s += evo_fsr_partials[j / EVO_FSR_BLOCKS][j % EVO_FSR_BLOCKS];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int r = blockDim.x / 2; r > 0; r >>= 1) {
        if (threadIdx.x < r) part[threadIdx.x] += part[threadIdx.x + r];
        __syncthreads();
    }
    const unsigned long long h = part[0];
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned long long p = (unsigned long long)i + (unsigned long long)(b + 1) * 0xD1B54A32D192ED03ULL;
        EVO_FSR_MIX(p);
        p ^= h;
        EVO_FSR_MIX(p);
        x[i] = (float)(unsigned)(p >> 40) * (1.0f / 8388608.0f) - 1.0f;
    }
    if (pace_ns > 0 && blockIdx.x == 0 && threadIdx.x == 0)
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while ((long long)(t - t0) < pace_ns);
}

extern "C" int evo_fsr_chain_hash(void* const* outs, const long long* nbytes, int count, void* stream) {
    if (count > EVO_FSR_MAX_BUFFERS) return 1;
    for (int b = 0; b < count; ++b)
        evo_fsr_hash_kernel<<<EVO_FSR_BLOCKS, 256, 0, (cudaStream_t)stream>>>((const unsigned*)outs[b], nbytes[b] / 4, b);
    evo_fsr_hashed = count;
    return (int)cudaGetLastError();
}

extern "C" int evo_fsr_chain_gen(void* const* ins, const long long* nbytes, int count, void* stream) {
    for (int b = 0; b < count; ++b) {
        long long n = nbytes[b] / 4;
        int blocks = (int)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
        evo_fsr_gen_kernel<<<blocks < 1 ? 1 : blocks, 256, 0, (cudaStream_t)stream>>>(
            (float*)ins[b], n, b, evo_fsr_hashed, b == count - 1 ? EVO_FSR_PACE_NS : 0LL);
    }
    return (int)cudaGetLastError();
}
"""

# the fake device (CPU tests): the same arithmetic in host C on the mapped buffers
_HOST = _COMMON + r"""
static unsigned long long evo_fsr_h = 0;

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

int evo_fsr_chain_gen(void* const* ins, const long long* nbytes, int count, void* stream) {
    for (int b = 0; b < count; ++b) {
        float* x = (float*)ins[b];
        for (long long i = 0; i < nbytes[b] / 4; ++i) {
            unsigned long long p = (unsigned long long)i + (unsigned long long)(b + 1) * 0xD1B54A32D192ED03ULL;
            EVO_FSR_MIX(p);
            p ^= evo_fsr_h;
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
        return _HOST
    return _CUDA.replace("%PACE_NS%", str(int(CHAIN_PACE_US * 1000))) + f"\n{task.signature()} {{ return 0; }}\n"


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


def expected_inputs(task: Task, previous: dict[str, Any], template: dict[str, Any], xp: Any) -> dict[str, Any]:
    """The inputs a chained call must have run on: drawn from the hash of ``previous`` (the call
    before it, its outputs as read back), shaped as ``template`` (the window's first inputs)."""
    h = output_hash(xp, [previous[a.name] for a in task.args if a.role == "output"])
    ins = [a.name for a in task.args if a.role == "input"]
    drawn = inputs_from_hash(xp, h, [int(template[name].size) for name in ins])
    made = dict(template)
    for name, values in zip(ins, drawn):
        made[name] = values.reshape(template[name].shape)
    return made


def chained_inputs(task: Task, first: dict[str, Any], captured: list[dict[str, Any]], xp: Any) -> list[dict[str, Any]]:
    """Every call's inputs in a chained window: ``first`` (the trusted side's), then each drawn
    from the outputs of the call before it as read back (``captured``, one per call)."""
    return [first, *(expected_inputs(task, taken, first, xp) for taken in captured[:-1])]


__all__ = ["CHAIN_CALLS", "CHAIN_LIB", "chain_source", "chained_inputs", "eligible", "expected_inputs",
           "inputs_from_hash", "output_hash"]
