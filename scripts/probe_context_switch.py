#!/usr/bin/env python3
"""Run on a GPU host: what it costs a process to get the GPU right after another process used it.

    python3 scripts/probe_context_switch.py [--reps 200] [--gap-us 0,200,1000,5000] [--setups SETUPS]

Every timed window holds two hand-overs between CUDA contexts: the trusted side's loads and L2
flush, then the runner's calls in the runner's context, then the trusted side's copies of the
outputs.  probe_window_stamps.py (forty-second session, H200) found ~160 us between the runner's
calls' end event (placed on the host clock from the runner's ``t0`` by the events' elapsed time)
and the completion mark, and ~170 us to copy eight scalars out, both with a spread of a few us,
in every role.  The honest seed's end event fell 17 us *before* its last launch was issued, so
the start event ran late: the placement is off by a delay at the start of the runner's work.

This probe measures that delay alone.  Two processes, A (this one) and B (a child), each with its
own context, an empty kernel each.  Per rep, A runs its kernel and synchronizes, waits
``gap`` us, then tells B over a pipe; B launches its kernel and synchronizes; A then launches its
own again (the way back).  Printed, per gap: the median (and spread) host time from launch to
synchronize of B's kernel after A's, of A's after B's, and of each process's kernel when the
other has not touched the GPU for a while (the baseline).  ``--setups``: B is started once per
setup, each changing B's context before its first kernel the way a candidate's library could
(``default``; ``stack:BYTES``: cudaLimitStackSize; ``alloc:GIB``: that much device memory held;
``streams:N``: N streams made), to see whether the hand-over's cost is B's to shape.  Nothing in
the verdict changes.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_tools import spread  # noqa: E402

KERNEL = 'extern "C" __global__ void evo_fsr_switch_probe(int* p) { if (p && threadIdx.x == 0) p[0] += 1; }'


SETUP_KINDS = ("default", "stack", "alloc", "streams")


def parse_setups(text: str) -> list[str]:
    """``--setups``' entries, each checked before any process starts: a kind of SETUP_KINDS, and a
    whole number after the colon for all but ``default``."""
    setups = [entry.strip() for entry in text.split(",") if entry.strip()]
    for setup in setups:
        kind, colon, value = setup.partition(":")
        if kind not in SETUP_KINDS or (kind == "default") != (not colon) or (colon and not value.isdigit()):
            raise SystemExit(f"--setups: {setup!r} is not one of default, stack:BYTES, alloc:GIB, streams:N")
    if not setups:
        raise SystemExit("--setups: no setup given")
    return setups


def _setup(setup: str) -> list[object]:
    """B's context changed as ``setup`` says; what must stay alive for it."""
    import cupy  # noqa: PLC0415 - on the GPU host only
    kind, _, value = setup.partition(":")
    if kind == "stack":
        cupy.cuda.runtime.deviceSetLimit(cupy.cuda.runtime.cudaLimitStackSize, int(value))
    elif kind == "alloc":
        return [cupy.cuda.runtime.malloc(2**30) for _ in range(int(value))]
    elif kind == "streams":
        return [cupy.cuda.Stream(non_blocking=False) for _ in range(int(value))]
    return []


def _kernel() -> tuple[object, object]:
    import cupy  # noqa: PLC0415 - on the GPU host only
    fn = cupy.RawKernel(KERNEL, "evo_fsr_switch_probe")
    word = cupy.zeros(1, dtype=cupy.int32)
    fn((1,), (32,), (word,))
    cupy.cuda.Device().synchronize()
    return fn, word


def _launch_to_sync_us(fn: object, word: object) -> float:
    import cupy  # noqa: PLC0415
    start = time.perf_counter()
    fn((1,), (32,), (word,))  # type: ignore[operator]
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - start) * 1e6


def child(setup: str) -> int:
    """B: for every byte on stdin, one kernel launched and synchronized; its time on stdout."""
    keep = _setup(setup)  # noqa: F841 - held for the child's life
    fn, word = _kernel()
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    while sys.stdin.buffer.read(1):
        out.write(f"{_launch_to_sync_us(fn, word):.2f}\n")
        out.flush()
    return 0


def spin_us(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--gap-us", default="0,200,1000,5000", help="A's wait between its kernel and B's turn")
    parser.add_argument("--setups", default="default", help="comma-separated: default, stack:BYTES, alloc:GIB, streams:N")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    gaps = [float(g) for g in args.gap_us.split(",") if g.strip()]
    setups = parse_setups(args.setups)
    fn, word = _kernel()
    import cupy  # noqa: PLC0415
    print(f"# {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}; us from launch to synchronize, "
          f"median (spread), {args.reps} reps", flush=True)
    for setup in setups:
        print(f"## B's setup: {setup}", flush=True)
        measure(setup, gaps, args.reps, fn, word)
    return 0


def measure(setup: str, gaps: list[float], reps: int, fn: object, word: object) -> None:
    """One child with ``setup``: both processes alone, then the hand-overs per gap."""
    proc = subprocess.Popen([sys.executable, __file__, "--child", setup], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdin is not None and proc.stdout is not None
    if proc.stdout.readline().strip() != b"ready":
        raise SystemExit(f"the child process did not start (setup {setup})")

    def b_turn() -> float:
        proc.stdin.write(b"x")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        return float(proc.stdout.readline())  # type: ignore[union-attr]

    alone_a, alone_b = [], []
    for _ in range(reps):
        alone_a.append(_launch_to_sync_us(fn, word))
        spin_us(50)
    for _ in range(reps):
        alone_b.append(b_turn())
        spin_us(50)
    print(f"A alone (B idle)  {statistics.median(alone_a):7.1f} ({spread(alone_a):.1f})")
    print(f"B alone (A idle)  {statistics.median(alone_b):7.1f} ({spread(alone_b):.1f})")
    print("gap_us   B after A   A after B")
    for gap in gaps:
        b_after, a_after = [], []
        for _ in range(reps):
            _launch_to_sync_us(fn, word)
            spin_us(gap)
            b_after.append(b_turn())
            a_after.append(_launch_to_sync_us(fn, word))
            spin_us(200)
        print(f"{gap:6.0f}  {statistics.median(b_after):7.1f} ({spread(b_after):.1f})  "
              f"{statistics.median(a_after):7.1f} ({spread(a_after):.1f})", flush=True)
    proc.stdin.close()
    proc.wait(timeout=30)


if __name__ == "__main__":
    raise SystemExit(main())
