"""Measuring what an L2 flush leaves behind, on a GPU (CuPy): whether a buffer written before it is
still in L2 (a dependent pointer chase: each load waits for the last, so its time per load is
the L2's latency on a hit and DRAM's on a miss), and what the next call pays for it (a copy
timed right after it: dirty lines left by a flush are written back inside that call).

Used by tests/gpu/test_evaluator_gpu.py and scripts/probe_flush.py."""
from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

#: One thread follows the chain: ``at = chain[at]``, ``steps`` times, L2-cached loads (not L1).
CHASE_SOURCE = r"""
extern "C" __global__ void chase(const unsigned int* __restrict__ chain, unsigned int start, int steps,
                                 unsigned int* __restrict__ out) {
    unsigned int at = start;
    for (int s = 0; s < steps; ++s) at = __ldcg(chain + at);
    out[0] = at;
}
"""
LINE_WORDS = 32          # 128-byte lines of 4-byte words


def make_chain(nbytes: int, visits: int, seed: int = 0) -> tuple[np.ndarray, int]:
    """A buffer of ``nbytes`` whose words, followed from the start word returned, visit
    ``visits`` distinct 128-byte lines in a random order and then loop: one load per line."""
    lines = nbytes // (4 * LINE_WORDS)
    if not 1 < visits <= lines:
        raise ValueError(f"visits {visits}: between 2 and the {lines} lines of the buffer")
    order = np.random.default_rng(seed).choice(lines, size=visits, replace=False).astype(np.uint32) * LINE_WORDS
    chain = np.zeros(lines * LINE_WORDS, dtype=np.uint32)
    chain[order] = np.roll(order, -1)
    return chain, int(order[0])


class Chase:
    """The chase kernel on one device buffer; ``ns_per_load()`` times one pass of ``steps`` loads."""

    def __init__(self, cupy: Any, chain: Any, start: int, steps: int) -> None:
        self._cupy, self.chain, self.start, self.steps = cupy, chain, start, steps
        self._kernel = cupy.RawKernel(CHASE_SOURCE, "chase")
        self._out = cupy.zeros(1, dtype=cupy.uint32)

    def ns_per_load(self) -> float:
        cupy = self._cupy
        begin, end = cupy.cuda.Event(), cupy.cuda.Event()
        begin.record()
        self._kernel((1,), (1,), (self.chain, cupy.uint32(self.start), np.int32(self.steps), self._out))
        end.record()
        end.synchronize()
        return cupy.cuda.get_elapsed_time(begin, end) * 1e6 / self.steps


def timed_us(cupy: Any, before: Callable[[], object], call: Callable[[], object]) -> float:
    """``before()`` (a flush, say), a wait, then ``call()`` alone between CUDA events, in us."""
    before()
    cupy.cuda.runtime.deviceSynchronize()
    begin, end = cupy.cuda.Event(), cupy.cuda.Event()
    begin.record()
    call()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(begin, end) * 1e3


def interleaved_medians(cupy: Any, flushes: dict[str, Callable[[], object]], call: Callable[[], object],
                        reps: int) -> dict[str, float]:
    """Median us of ``call`` after each flush, the flushes taking turns in every round."""
    times: dict[str, list[float]] = {name: [] for name in flushes}
    for _ in range(reps):
        for name, flush in flushes.items():
            times[name].append(timed_us(cupy, flush, call))
    return {name: statistics.median(t) for name, t in times.items()}


class MemsetFlush:
    """The evaluator's flush before the twentieth session, for comparisons: persisting lines
    demoted, then a memset of a buffer the size of the read pass's (it evicts as well, and leaves
    the L2 full of dirty lines).  Queued on CuPy's current stream; it does not wait."""

    def __init__(self, cupy: Any) -> None:
        from evo_fsr.verdict.l2_flush import shared_flush  # noqa: PLC0415

        self._cupy = cupy
        self.buffer = cupy.empty(shared_flush().nbytes, dtype=cupy.uint8)

    def __call__(self) -> None:
        from evo_fsr.verdict.l2_flush import reset_persisting_l2  # noqa: PLC0415

        reset_persisting_l2()
        cuda = self._cupy.cuda
        cuda.runtime.memsetAsync(self.buffer.data.ptr, 1, self.buffer.nbytes, cuda.get_current_stream().ptr)
