"""Temporary GPU check of task seeds (helper a). Not part of the project."""
import ctypes, os, subprocess, sys, tempfile, time, json
import numpy as np, cupy as cp
sys.path.insert(0, os.getcwd())
from evo_fsr.tasks import get_task
from evo_fsr.knobs import set_knobs

CT = {"float32": ctypes.c_float, "float64": ctypes.c_double, "int32": ctypes.c_int32, "int64": ctypes.c_int64}

def within(got, ref, tol, exact):
    got = np.asarray(got, np.float64); ref = np.asarray(ref, np.float64)
    if exact:
        bad = ~(got == ref)
        return (not bad.any()), (np.argwhere(bad)[0] if bad.any() else None), 0.0
    if not np.all(np.isfinite(got[np.isfinite(ref)])):
        return False, np.argwhere(~np.isfinite(got))[0], float("nan")
    nr = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300)
    rms = np.sqrt(np.mean(ref ** 2))
    ok_e = np.abs(got - ref) <= tol["atol"] * rms + tol["rtol"] * np.abs(ref)
    ok = nr <= tol["norm_rtol"] and ok_e.all()
    return ok, (None if ok_e.all() else np.argwhere(~ok_e)[0]), nr

def build(task, src, tag):
    d = tempfile.mkdtemp()
    open(f"{d}/k.cu", "w").write(src); open(f"{d}/c.h", "w").write(task.header())
    r = subprocess.run(["nvcc", "-O3", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", "--cudart", "shared",
                        "-arch=sm_90", "-include", "c.h", "-o", "k.so", "k.cu"], cwd=d, capture_output=True, text=True)
    if r.returncode: print("COMPILE FAIL", tag, r.stderr[-2000:]); return None
    lib = ctypes.CDLL(f"{d}/k.so"); f = lib.launch; f.restype = ctypes.c_int
    return f

def run_one(task, f, shape, seed, time_it=False):
    dims = shape.env
    rng = np.random.default_rng(seed)
    host = task.make_inputs(dims, rng, shape.case)
    dev, args, outs = {}, [], {}
    stream = cp.cuda.Stream(non_blocking=True)
    for a in task.args:
        if a.role in ("input", "inout"):
            h = host[a.name]; assert h.dtype == np.dtype(a.dtype) and h.shape == a.dims_of(dims), (a.name, h.dtype, h.shape)
            dev[a.name] = cp.asarray(h); args.append(ctypes.c_void_p(dev[a.name].data.ptr))
        elif a.role in ("output", "workspace"):
            shp = a.dims_of(dims) if a.role == "output" else (a.numel(dims),)
            arr = cp.full(shp, cp.nan, dtype=a.dtype); dev[a.name] = arr; args.append(ctypes.c_void_p(arr.data.ptr))
            if a.role == "output": outs[a.name] = arr
        elif a.role == "scalar":
            args.append(CT[a.dtype](a.value(dims)))
        else:
            args.append(ctypes.c_void_p(stream.ptr))
    cp.cuda.Device().synchronize()   # uploads and NaN fills ran on the legacy stream
    rc = f(*args); stream.synchronize(); cp.cuda.Device().synchronize()
    if rc: return f"launch rc={rc}", None
    ms = None
    if time_it:
        for _ in range(2): f(*args)
        e0, e1 = cp.cuda.Event(), cp.cuda.Event(); ts = []
        for _ in range(5):
            e0.record(stream); f(*args); e1.record(stream); e1.synchronize(); ts.append(cp.cuda.get_elapsed_time(e0, e1))
        ms = float(np.median(ts))
        # re-poison and re-run once for the correctness check
        for o in outs.values(): o.fill(cp.nan)
        cp.cuda.Device().synchronize()
        f(*args); stream.synchronize()
    ref = task.reference({k: dev[k] for k in host}, dims, xp=cp)
    for k, v in host.items():
        assert bool(cp.all(dev[k] == cp.asarray(v))), f"input {k} modified"
    tol = task.tol; exact = task.precision == "exact"
    msgs = []
    for name, o in outs.items():
        ok, idx, nr = within(cp.asnumpy(o), cp.asnumpy(ref[name]), tol, exact)
        if not ok:
            got = cp.asnumpy(o); r = cp.asnumpy(ref[name])
            i = tuple(idx) if idx is not None else None
            msgs.append(f"{name} MISMATCH norm={nr:.2e} idx={i} got={got[i] if i else ''} ref={r[i] if i else ''}")
    return ("; ".join(msgs) or "ok"), ms

only = sys.argv[1:] or None
names = "matmul softmax sigmoid relu layernorm maxpool3d attention mse_loss cross_entropy transpose".split()
variants = {("matmul", "tiled"): [{"BLOCK_M": "64", "BLOCK_N": "64", "BLOCK_K": "16", "THREAD_M": "4", "THREAD_N": "4"},
                                  {"BLOCK_M": "32", "BLOCK_N": "128", "BLOCK_K": "32", "THREAD_M": "2", "THREAD_N": "8"}],
            ("softmax", "block_online"): [{"THREADS": "1024", "UNROLL": "1"}, {"THREADS": "128", "UNROLL": "8"}]}
for n in names:
    if only and n not in only: continue
    t = get_task(n)
    for stem, src in t.seeds().items():
        srcs = [("default", src)] + [(str(v), set_knobs(src, v)) for v in variants.get((n, stem), [])]
        for vtag, s in srcs:
            tag = f"{n}/{stem}/{vtag}"
            f = build(t, s, tag)
            if f is None: continue
            for sh in t.validation:
                for seed in (1, 2):
                    res, _ = run_one(t, f, sh, seed)
                    if res != "ok" or seed == 1: print(f"VAL {tag} {sh.label} [{sh.case}] seed{seed}: {res}", flush=True)
            if vtag == "default":
                for sh in t.benchmark():
                    t0 = time.time(); res, ms = run_one(t, f, sh, 7, time_it=True)
                    print(f"BENCH {tag} {sh.label}: {res} {ms if ms is None else round(ms, 3)} ms (wall {time.time()-t0:.1f}s)", flush=True)
            cp.get_default_memory_pool().free_all_blocks()
