#!/usr/bin/env python3
"""What each way of emptying the L2 leaves behind, on one GPU, in one process, interleaved.

For each flush (none; ``memset``, the evaluator's before the twentieth session; ``read``, the
trusted flush now: CupyMemory.flush_l2, a read pass over four L2s; ``memset+read``):
  chase ns/load   a dependent chase over 4096 lines of an 8 MiB buffer written right before the
                  flush (as the evaluator writes a call's inputs): L2 latency if it survived
                  the flush, DRAM latency if it was evicted;
  copy us         a device-to-device copy of COPY_MB timed right after the flush (dirty lines
                  the flush left are written back inside it);
  flush us        the flush itself (it sits inside the trusted window, not inside the timing).

    python3 scripts/probe_flush.py [--reps 30] [--copy-mb 46 184]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evo_fsr.testing.l2_probe import Chase, MemsetFlush, interleaved_medians, make_chain, timed_us  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--copy-mb", type=float, nargs="+", default=[46.0, 184.0],
                        help="sizes of the copied buffer (MB each way)")
    args = parser.parse_args()

    import cupy

    from evo_fsr.verdict.memory import CupyMemory

    memory = CupyMemory()
    memset = MemsetFlush(cupy)
    nbytes = memset.buffer.nbytes
    stream = cupy.cuda.get_current_stream().ptr

    def memset_read() -> None:
        memset()
        memory.flush_l2()

    flushes = {"none": lambda: None, "memset": memset, "read (trusted)": memory.flush_l2, "memset+read": memset_read}
    props = cupy.cuda.runtime.getDeviceProperties(0)
    print(f"GPU: {props['name'].decode()}, L2 {props['l2CacheSize'] / 2**20:.0f} MiB, "
          f"flush buffer {nbytes / 2**20:.0f} MiB, {args.reps} rounds, medians")

    host, start = make_chain(8 * 2**20, 4096)
    source = cupy.asarray(host)
    buffer = cupy.empty_like(source)
    chase = Chase(cupy, buffer, start, 4096)
    ns: dict[str, list[float]] = {name: [] for name in flushes}
    own: dict[str, list[float]] = {name: [] for name in flushes}
    for _ in range(args.reps):
        for name, flush in flushes.items():
            buffer[...] = source
            own[name].append(timed_us(cupy, lambda: None, flush))
            cupy.cuda.runtime.deviceSynchronize()
            ns[name].append(chase.ns_per_load())

    copies = {}
    for mb in args.copy_mb:
        a = cupy.ones(int(mb * 1e6) // 4, dtype=cupy.float32)
        b = cupy.empty_like(a)
        copies[mb] = interleaved_medians(cupy, flushes, lambda a=a, b=b: cupy.cuda.runtime.memcpyAsync(
            b.data.ptr, a.data.ptr, a.nbytes, 3, stream), args.reps)
        del a, b

    head = f"{'flush':<16}{'chase ns/load':>14}{'flush us':>10}" + "".join(
        f"{f'copy {mb:g} MB us':>18}{'GB/s':>8}" for mb in copies)
    print(head)
    for name in flushes:
        cells = "".join(f"{c[name]:18.1f}{2 * mb * 1e6 / (c[name] * 1e-6) / 1e9:8.0f}" for mb, c in copies.items())
        print(f"{name:<16}{statistics.median(ns[name]):14.0f}{statistics.median(own[name]):10.1f}{cells}")


if __name__ == "__main__":
    main()
