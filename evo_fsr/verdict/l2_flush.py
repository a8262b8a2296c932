"""How the L2 is emptied before every timed call: the candidate's, the baseline's and the library's.

A read pass over a private buffer of four L2s.  Every line the call could find hot (its inputs,
just written by the trusted side, or anything an earlier call left) is evicted, and what the L2
holds afterwards is clean: the timed call's misses evict lines that need no write-back.

The evaluator used to memset the buffer instead.  That evicts as well, but leaves the L2 full of
dirty lines, and every timed call then paid for writing them back to DRAM inside its window.
Measured in one process on an H100 (nineteenth session, scripts/probe_gram.py): a 92 MB copy
took 66.0 us after the memset and 59.5 us after a read pass, linear_regression at n=2^22
84.7 us and 74.6 us.  Candidate, baseline and library paid the same, so rankings held, but the
ratios of short calls were compressed and no kernel near the copy roof could show it.

Before the pass, persisting lines are demoted to normal (``reset_persisting_l2``), else an
access-policy window a candidate put on its inputs would keep them in L2 through it.

The buffer is zeroed once and only ever read; the kernel ORs every word into a flag it writes
only if a word is not zero, so the compiler cannot drop a load.  The pass reads with ``ld.cg``
(cached in L2, not in L1) at normal eviction priority.
"""
from __future__ import annotations

import ctypes
import logging
import warnings
from typing import Any

log = logging.getLogger(__name__)

#: The read pass: a grid-stride loop, four 16-byte loads in flight per thread per step.
READ_PASS_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(512)
l2_read_pass(const uint4* __restrict__ words, unsigned long long count, unsigned int* __restrict__ flag) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int seen = 0u;
    for (; i + 3 * stride < count; i += 4 * stride) {
        const uint4 a = __ldcg(words + i), b = __ldcg(words + i + stride);
        const uint4 c = __ldcg(words + i + 2 * stride), d = __ldcg(words + i + 3 * stride);
        seen |= a.x | a.y | a.z | a.w | b.x | b.y | b.z | b.w | c.x | c.y | c.z | c.w | d.x | d.y | d.z | d.w;
    }
    for (; i < count; i += stride) {
        const uint4 a = __ldcg(words + i);
        seen |= a.x | a.y | a.z | a.w;
    }
    if (seen != 0u) atomicOr(flag, seen);      // the buffer is zero: never taken, keeps every load
}
"""

#: Threads per block and blocks per SM of the read pass.
THREADS = 512
BLOCKS_PER_SM = 4
#: The buffer: this many L2s, and never less than MIN_BYTES.
L2_MULTIPLE = 4
MIN_BYTES = 64 * 2**20


def flush_bytes(l2_bytes: int) -> int:
    """The read buffer's size for an L2 of ``l2_bytes``: four L2s, at least 64 MiB, whole 16 B words."""
    n = max(L2_MULTIPLE * int(l2_bytes), MIN_BYTES)
    return -(-n // 16) * 16


class ReadFlush:
    """A zeroed buffer of ``flush_bytes(L2)`` on the current device and the kernel that reads it."""

    def __init__(self, cupy: Any) -> None:
        self._cupy = cupy
        attributes = cupy.cuda.Device().attributes
        self.nbytes = flush_bytes(int(attributes.get("L2CacheSize", 0)))
        self.blocks = max(1, int(attributes.get("MultiProcessorCount", 1))) * BLOCKS_PER_SM
        self._buffer = cupy.zeros(self.nbytes, dtype=cupy.uint8)
        self._flag = cupy.zeros(1, dtype=cupy.uint32)
        self._kernel = cupy.RawKernel(READ_PASS_SOURCE, "l2_read_pass")
        self._streams: dict[int, Any] = {}      # raw handle -> CuPy's view of it, made once

    def run(self, stream_ptr: int | None = None) -> None:
        """Queue the read pass on ``stream_ptr`` (a raw cudaStream_t, e.g. torch's current stream),
        or on CuPy's current stream; it does not wait."""
        cupy = self._cupy
        args = (self._buffer, cupy.uint64(self.nbytes // 16), self._flag)
        if stream_ptr is None:
            self._kernel((self.blocks,), (THREADS,), args)
            return
        stream = self._streams.get(int(stream_ptr))
        if stream is None:
            with warnings.catch_warnings():     # CuPy 14 deprecates it for objects with __cuda_stream__, not raw handles
                warnings.simplefilter("ignore", DeprecationWarning)
                stream = self._streams[int(stream_ptr)] = cupy.cuda.ExternalStream(int(stream_ptr))
        with stream:
            self._kernel((self.blocks,), (THREADS,), args)


_shared: ReadFlush | None = None


def shared_flush() -> ReadFlush:
    """This process's read flush (the library's timing uses it on torch's stream)."""
    global _shared
    if _shared is None:
        import cupy  # noqa: PLC0415 - trusted GPU process only

        _shared = ReadFlush(cupy)
    return _shared


def empty_l2(stream_ptr: int | None = None) -> None:
    """The flush before every timed call, the candidate's, the baseline's (``CupyMemory.flush_l2``)
    and the library's (library.py, on torch's stream): persisting lines demoted, then this
    process's read pass queued on ``stream_ptr`` (CuPy's current stream if None).  It does not wait."""
    reset_persisting_l2()
    shared_flush().run(stream_ptr)


_persisting_reset: Any = None


def reset_persisting_l2() -> bool:
    """Demote every persisting L2 line to normal (``cuCtxResetPersistingL2Cache``), so that the
    flush after it evicts them: a candidate that set an access-policy window on its inputs would
    otherwise find the next call's inputs, written in place by the evaluator, still in L2.  The
    set-aside is the device's, whoever's context marked the lines.  Best effort: where the driver
    lacks the call (or MIG disables the set-aside) there is nothing persisting to reset."""
    global _persisting_reset
    if _persisting_reset is None:
        try:
            _persisting_reset = ctypes.CDLL("libcuda.so.1").cuCtxResetPersistingL2Cache
            _persisting_reset.restype = ctypes.c_int
        except (OSError, AttributeError) as exc:
            log.warning("cannot reset persisting L2 lines before each timed call: %s", exc)
            _persisting_reset = False
    if _persisting_reset is False:
        return False
    status = int(_persisting_reset())
    if status != 0:
        log.warning("cuCtxResetPersistingL2Cache returned %d: persisting L2 lines are not reset", status)
        _persisting_reset = False
    return status == 0
