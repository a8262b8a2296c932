"""What ordering a batch's calls across the evaluator's and the runner's CUDA contexts costs
(SECURITY.md, work fused across the calls of a batch).  The parent plays the evaluator (CuPy),
the child the runner (a relu kernel on IPC-shared buffers, CuPy too: only the hand-over is under
test).  Per window of K calls on N floats:

  plain   the child launches K kernels back to back on its stream (the protocol as it is);
  ce      the child's stream waits for ``ready >= base+j`` before call j (j > 0) and writes
          ``done = base+j+1`` after it (cuStreamWaitValue32 / cuStreamWriteValue32 on an
          IPC-shared flag word); the parent's stream waits for ``done >= base+j``, copies call
          j-1's outputs to a private snapshot and call j's private inputs into the shared buffer
          (cudaMemcpyAsync: the copy engine), then writes ``ready = base+j``;
  kernel  the same with the parent's copies made by a kernel (CuPy element-wise);
  spin    as ``ce``, but the child waits in a one-thread kernel spinning on the flag;
  host    nothing queued ahead on either side: the two hosts hand each call over through
          shared-memory flags, the parent copying between the child's calls.

Prints the medians of the child's GPU span (events around the K calls), the host wall and the
GPU time added per call against plain, and counts the snapshots that are not relu of their own
inputs (the ordering's proof).  NVIDIA H100 80GB HBM3, twenty-first session, 64 KiB-4 MiB a
call, eight calls a window: ce 245-259 us a call, kernel 246, host 262-278, spin 2.1 ms (a time
slice); no snapshot wrong.  (The ninth session's probe_stream_memops.py, memsets on both sides,
measured 262-279: the same as ``kernel``.)

    python3 scripts/probe_batch_chain.py [--n 65536] [--k 8] [--reps 30] [--modes ce kernel spin host]

Nothing on the parent's side may synchronize the device while its stream waits on the child (a
cudaMalloc or a module load would hang): the kernels are loaded and the arrays allocated first.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import select
import subprocess
import sys
import time

import numpy as np

RELU = r'''extern "C" __global__ void relu(const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}'''
WAIT = r'''extern "C" __global__ void wait_geq(const volatile unsigned* flag, unsigned target) {
    while (*flag < target) __nanosleep(200);
}'''
GEQ = 0


def memops():
    cu = ctypes.CDLL("libcuda.so.1")

    def get(name):
        for n in (name + "_v2", name):
            if hasattr(cu, n):
                f = getattr(cu, n)
                f.restype = ctypes.c_int
                f.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
                return f
        raise AttributeError(name)
    return get("cuStreamWaitValue32"), get("cuStreamWriteValue32")


def child() -> None:
    import cupy as cp
    wait, write = memops()
    msg = json.loads(sys.stdin.readline())
    n, k = msg["n"], msg["k"]
    opened = {}
    for name, h in msg["handles"].items():
        opened[name] = cp.cuda.runtime.ipcOpenMemHandle(bytes.fromhex(h))
    flags = opened["flags"]
    arr = lambda ptr: cp.ndarray((n,), cp.float32, cp.cuda.MemoryPointer(  # noqa: E731
        cp.cuda.UnownedMemory(ptr, 4 * n, None), 0))
    xs = [arr(opened[f"x{j}"]) for j in range(k)]
    ys = [arr(opened[f"y{j}"]) for j in range(k)]
    kern = cp.RawKernel(RELU, "relu")
    spin = cp.RawKernel(WAIT, "wait_geq")
    flag_view = cp.ndarray((128,), cp.uint32, cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(opened["flags"], 512, None), 0))
    shared = np.memmap(msg["shared"], np.uint32, "r+", shape=(32,))   # [0] go, [16] done
    s = cp.cuda.Stream(non_blocking=True)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    grid = ((n + 255) // 256,)
    print("ready", flush=True)
    for line in sys.stdin:
        m = json.loads(line)
        if m["op"] == "exit":
            break
        base, mode = m["base"], m["mode"]
        cp.cuda.runtime.deviceSynchronize()
        t0 = time.perf_counter()
        e0.record(s)
        for j in range(k):
            if mode == "host":
                while j > 0 and shared[0] < base + j:
                    pass
                kern(grid, (256,), (xs[j], ys[j], np.int64(n)), stream=s)
                s.synchronize()
                shared[16] = base + j + 1
                continue
            if mode == "spin" and j > 0:
                spin((1,), (1,), (flag_view, np.uint32(base + j)), stream=s)
            elif mode != "plain" and j > 0:
                assert wait(s.ptr, flags, base + j, GEQ) == 0
            kern(grid, (256,), (xs[j], ys[j], np.int64(n)), stream=s)
            if mode != "plain":
                assert write(s.ptr, flags + 256, base + j + 1, 0) == 0
        e1.record(s)
        cp.cuda.runtime.deviceSynchronize()
        print(json.dumps({"host_ms": (time.perf_counter() - t0) * 1e3,
                          "gpu_ms": cp.cuda.get_elapsed_time(e0, e1)}), flush=True)


def parent(args: argparse.Namespace) -> None:
    import cupy as cp
    wait, write = memops()
    n, k = args.n, args.k
    def own(count, dtype):
        # a whole allocation of its own (an IPC handle names an allocation; the open maps its base)
        nbytes = count * np.dtype(dtype).itemsize
        mem = cp.cuda.Memory(nbytes)
        cp.cuda.runtime.memset(mem.ptr, 0, nbytes)
        return cp.ndarray((count,), dtype, cp.cuda.MemoryPointer(mem, 0))
    flags = own(128, cp.uint32)
    xs = [own(n, cp.float32) for _ in range(k)]
    ys = [own(n, cp.float32) for _ in range(k)]
    stage = [cp.zeros(n, cp.float32) for _ in range(k)]
    snap = [cp.zeros(n, cp.float32) for _ in range(k)]
    h = lambda a: bytes(cp.cuda.runtime.ipcGetMemHandle(a.data.ptr)).hex()  # noqa: E731
    handles = {"flags": h(flags), **{f"x{j}": h(xs[j]) for j in range(k)}, **{f"y{j}": h(ys[j]) for j in range(k)}}
    shared = np.memmap(args.shared, np.uint32, "w+", shape=(32,))      # before the child maps it
    p = subprocess.Popen([sys.executable, __file__, "child"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.stdin.write(json.dumps({"n": n, "k": k, "handles": handles, "shared": args.shared}) + "\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "ready"
    stream = cp.cuda.Stream(non_blocking=True)
    fptr = flags.data.ptr
    base = 0
    rng = np.random.default_rng(1)
    modes = ("plain", *args.modes)
    res: dict[str, list] = {m: [] for m in modes}
    cp.add(ys[0], 0, out=snap[0])       # compiled and loaded now: a module load may synchronize
    cp.add(stage[0], 0, out=xs[0])
    cp.all(snap[0] == cp.maximum(stage[0], 0))
    cp.cuda.runtime.deviceSynchronize()
    bad = 0
    for rep in range(args.reps + 3):
        for mode in modes:
            if args.verbose:
                print(f"rep {rep} mode {mode}", file=sys.stderr, flush=True)
            with stream:
                for j in range(k):
                    stage[j][...] = cp.asarray(rng.standard_normal(n, dtype=np.float32))
                    ys[j].fill(np.nan)
            xs[0][...] = stage[0]
            cp.cuda.runtime.deviceSynchronize()
            t0 = time.perf_counter()
            if mode in ("ce", "kernel", "spin"):
                for j in range(1, k):
                    assert wait(stream.ptr, fptr + 256, base + j, GEQ) == 0
                    if mode in ("ce", "spin"):
                        cp.cuda.runtime.memcpyAsync(snap[j - 1].data.ptr, ys[j - 1].data.ptr, 4 * n, 3, stream.ptr)
                        cp.cuda.runtime.memcpyAsync(xs[j].data.ptr, stage[j].data.ptr, 4 * n, 3, stream.ptr)
                    else:
                        with stream:
                            # no allocation here: a cudaMalloc may synchronize the device,
                            # whose stream waits on the child that has not been called yet
                            cp.add(ys[j - 1], 0, out=snap[j - 1])
                            cp.add(stage[j], 0, out=xs[j])
                    assert write(stream.ptr, fptr, base + j, 0) == 0
                assert wait(stream.ptr, fptr + 256, base + k, GEQ) == 0
                cp.cuda.runtime.memcpyAsync(snap[k - 1].data.ptr, ys[k - 1].data.ptr, 4 * n, 3, stream.ptr)
            elif mode == "plain":
                for j in range(1, k):
                    xs[j][...] = stage[j]
                cp.cuda.runtime.deviceSynchronize()
                t0 = time.perf_counter()
            p.stdin.write(json.dumps({"op": "call", "base": base, "mode": mode}) + "\n")
            p.stdin.flush()
            if mode == "host":      # the hand-over on the host: nothing queued on either GPU side
                for j in range(1, k + 1):
                    while shared[16] < base + j:
                        pass
                    cp.cuda.runtime.memcpyAsync(snap[j - 1].data.ptr, ys[j - 1].data.ptr, 4 * n, 3, stream.ptr)
                    if j < k:
                        cp.cuda.runtime.memcpyAsync(xs[j].data.ptr, stage[j].data.ptr, 4 * n, 3, stream.ptr)
                    stream.synchronize()
                    shared[0] = base + j
            ready, _, _ = select.select([p.stdout], [], [], 10)
            if not ready:
                side = cp.cuda.Stream(non_blocking=True)
                seen = np.zeros(128, np.uint32)
                cp.cuda.runtime.memcpyAsync(seen.ctypes.data, fptr, 512, 2, side.ptr)
                side.synchronize()
                print(f"stuck: mode {mode} base {base} ready {seen[0]} done {seen[64]}", flush=True)
                p.kill()
                raise SystemExit(1)
            reply = json.loads(p.stdout.readline())
            stream.synchronize()
            wall = (time.perf_counter() - t0) * 1e3
            if mode != "plain":
                base += k
                for j in range(k):
                    if not bool(cp.all(snap[j] == cp.maximum(stage[j], 0))):
                        bad += 1
            if rep >= 3:
                res[mode].append((reply["gpu_ms"], wall))
    med = {m: np.median(np.array(v), axis=0) for m, v in res.items()}
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"{name}: relu n={n} ({4 * n >> 10} KiB), {k} calls a window, {args.reps} reps, medians")
    for m in modes:
        gpu, wall = med[m]
        extra = (gpu - med["plain"][0]) / k * 1e3
        print(f"  {m:7s} child gpu span {gpu * 1e3:9.1f} us  host wall {wall * 1e3:9.1f} us  "
              f"gpu extra per call {extra:8.1f} us")
    print(f"  snapshots wrong: {bad}")
    p.stdin.write(json.dumps({"op": "exit"}) + "\n")
    p.stdin.flush()
    p.wait()


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child()
    else:
        ap = argparse.ArgumentParser()
        ap.add_argument("--n", type=int, default=65536)
        ap.add_argument("--k", type=int, default=8)
        ap.add_argument("--reps", type=int, default=30)
        ap.add_argument("--verbose", action="store_true")
        ap.add_argument("--modes", nargs="*", default=["ce", "kernel", "host"], choices=["ce", "kernel", "spin", "host"])
        ap.add_argument("--shared", default="/dev/shm/probe_batch_chain")
        parent(ap.parse_args())
