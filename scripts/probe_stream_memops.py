"""What ordering a batch's calls on the GPU across two processes would cost (SECURITY.md, the
batch fusion hole): the parent (the evaluator's role, CuPy) and a child (the runner's role, the
runner's cudart binding) hand each call over with cuStreamWaitValue32/cuStreamWriteValue32 on an
IPC-shared flag word; the "kernel" is a memset of NBYTES.  Prints, per stream kind and calls per
window, the median wall time of plain back-to-back launches and of the ordered hand-over, and the
extra time per call.  On an H100 (driver 580): 262-279 us per call.

    python3 scripts/probe_stream_memops.py parent [NBYTES]      # on a GPU host, from the repo root
"""
import ctypes, json, os, subprocess, sys, time
import numpy as np

def memops():
    cu = ctypes.CDLL("libcuda.so.1")
    def get(name):
        for n in (name + "_v2", name):
            try:
                f = getattr(cu, n); break
            except AttributeError:
                continue
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        return f
    return get("cuStreamWaitValue32"), get("cuStreamWriteValue32")

def child():
    sys.path.insert(0, os.getcwd() + "/evo_fsr/runner")
    from cudart import Runtime
    rt = Runtime(); rt.set_device(0)
    wait, write = memops()
    s = rt.stream_create()
    msg = json.loads(sys.stdin.readline())
    flags = rt.ipc_open(bytes.fromhex(msg["flags"])); data = rt.ipc_open(bytes.fromhex(msg["data"]))
    nbytes = msg["nbytes"]
    print("ready", flush=True)
    for line in sys.stdin:
        m = json.loads(line)
        if m["op"] == "exit": break
        base, n, mode = m["base"], m["n"], m["mode"]
        rt.device_synchronize()
        t0 = time.perf_counter()
        for j in range(n):
            if mode == "ordered":
                assert wait(s, flags, base + j + 1, 0) == 0       # flag_in >= base+j+1
            rt.memset_async(data, j & 0xFF, nbytes, s)
            if mode == "ordered":
                assert write(s, flags + 64, base + j + 1, 0) == 0  # flag_done
        rt.device_synchronize()
        print(json.dumps({"host_ms": (time.perf_counter() - t0) * 1e3}), flush=True)

def parent():
    import cupy as cp
    wait, write = memops()
    nbytes = int(sys.argv[2]) if len(sys.argv) > 2 else 262144
    flags = cp.cuda.runtime.malloc(2 << 20); cp.cuda.runtime.memset(flags, 0, 2 << 20)
    data = cp.cuda.runtime.malloc(max(nbytes, 2 << 20))
    out = cp.cuda.runtime.malloc(max(nbytes, 2 << 20))
    h = lambda p: bytes(cp.cuda.runtime.ipcGetMemHandle(p)).hex()
    p = subprocess.Popen([sys.executable, __file__, "child"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.stdin.write(json.dumps({"flags": h(flags), "data": h(data), "nbytes": nbytes}) + "\n"); p.stdin.flush()
    assert p.stdout.readline().strip() == "ready"
    base = 0
    for label, stream in (("legacy", cp.cuda.Stream.null), ("nonblocking", cp.cuda.Stream(non_blocking=True))):
        for n in (8, 64):
            res = {"ordered": [], "plain": []}
            for rep in range(30):
                for mode in ("plain", "ordered"):
                    cp.cuda.runtime.deviceSynchronize()
                    t0 = time.perf_counter()
                    p.stdin.write(json.dumps({"op": "call", "base": base, "n": n, "mode": mode}) + "\n"); p.stdin.flush()
                    if mode == "ordered":
                        sp = stream.ptr
                        for j in range(n):
                            cp.cuda.runtime.memsetAsync(out, j, 4096, sp)        # "load inputs j"
                            assert write(sp, flags, base + j + 1, 0) == 0
                            assert wait(sp, flags + 64, base + j + 1, 0) == 0
                            cp.cuda.runtime.memcpyAsync(out, data, nbytes, 3, sp)   # "take outputs j"
                        base += n
                    reply = json.loads(p.stdout.readline())
                    stream.synchronize()
                    cp.cuda.runtime.deviceSynchronize()
                    wall = (time.perf_counter() - t0) * 1e3
                    if rep >= 3:
                        res[mode].append((wall, reply["host_ms"]))
            med = {m: np.median(np.array(v), axis=0) for m, v in res.items()}
            print(f"{label:12s} n={n:3d} plain wall {med['plain'][0]:.3f} child {med['plain'][1]:.3f} | ordered wall "
                  f"{med['ordered'][0]:.3f} child {med['ordered'][1]:.3f} | extra per call "
                  f"{(med['ordered'][0]-med['plain'][0])/n*1e3:.1f} us", flush=True)
    # check the flags really ordered: read done flag
    v = np.zeros(2, np.uint32); cp.cuda.runtime.memcpy(v.ctypes.data, flags + 64, 4, 2)
    print("done flag", int(v[0]), "base", base)
    p.stdin.write(json.dumps({"op": "exit"}) + "\n"); p.stdin.flush(); p.wait()

if __name__ == "__main__":
    child() if sys.argv[1:2] == ["child"] else parent()
