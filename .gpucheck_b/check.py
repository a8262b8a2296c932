"""Temporary GPU check of the task-library-B seeds (not part of the repo)."""
import ctypes, os, subprocess, sys, time, json, traceback
import numpy as np
import cupy as cp
sys.path.insert(0, os.getcwd())
from evo_fsr.tasks import get_task

TASKS = sys.argv[1].split(",") if len(sys.argv) > 1 else ["matrix_copy", "reverse", "topk", "sort", "sum_reduction", "dot_product", "prefix_sum", "monte_carlo", "histogram", "linear_regression"]
BENCH = os.environ.get("BENCH", "1") == "1"
OUT = os.environ.get("OUT", "/tmp")

def within(got, ref, tol, exact):
    got = np.asarray(got, dtype=np.float64).ravel(); ref = np.asarray(ref, dtype=np.float64).ravel()
    if exact:
        bad = np.flatnonzero(~(got == ref))
        return (None if bad.size == 0 else (int(bad[0]), got[bad[0]], ref[bad[0]], "exact"))
    fin = np.isfinite(ref)
    badnan = np.flatnonzero(fin & ~np.isfinite(got))
    if badnan.size: return (int(badnan[0]), got[badnan[0]], ref[badnan[0]], "nan/inf")
    diff = np.abs(got - ref)
    nr = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300)
    rms = np.sqrt(np.mean(ref * ref))
    bound = tol["atol"] * rms + tol["rtol"] * np.abs(ref)
    bad = np.flatnonzero(diff > bound)
    if bad.size: return (int(bad[0]), got[bad[0]], ref[bad[0]], f"elementwise (norm {nr:.2e})")
    if nr > tol["norm_rtol"]: return (-1, nr, tol["norm_rtol"], "norm")
    return None

def build(task, src):
    d = f"/tmp/build_{task.name}"; os.makedirs(d, exist_ok=True)
    open(f"{d}/k.cu", "w").write(src); open(f"{d}/contract.h", "w").write(task.header())
    r = subprocess.run(["nvcc", "-O3", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", "-arch=sm_90", "--cudart", "shared",
                        "-include", "contract.h", "-o", "k.so", "k.cu"], cwd=d, capture_output=True, text=True)
    if r.returncode: raise RuntimeError(r.stderr)
    lib = ctypes.CDLL(f"{d}/k.so"); return lib.launch

CT = {"int32": ctypes.c_int, "int64": ctypes.c_longlong, "float32": ctypes.c_float, "float64": ctypes.c_double}
NP = {"float32": np.float32, "int32": np.int32, "int64": np.int64, "float64": np.float64}

def run_shape(task, fn, shape, seed, check=True, time_it=False):
    dims = shape.env
    rng = np.random.default_rng(seed)
    inputs = task.make_inputs(dims, rng, shape.case)
    dev, args, types, outs = {}, [], [], []
    stream = cp.cuda.Stream(non_blocking=True)
    for a in task.args:
        if a.role in ("input", "inout"):
            arr = cp.asarray(inputs[a.name]); assert arr.dtype == NP[a.dtype] and arr.shape == a.dims_of(dims), (a.name, arr.dtype, arr.shape)
            dev[a.name] = arr
        elif a.role in ("output", "workspace"):
            shp = a.dims_of(dims)
            arr = cp.empty(shp, dtype=NP[a.dtype])
            if a.dtype.startswith("float"): arr.fill(np.nan)
            else: arr.fill(-12345)
            dev[a.name] = arr
        if a.is_buffer:
            args.append(ctypes.c_void_p(dev[a.name].data.ptr)); types.append(ctypes.c_void_p)
        elif a.role == "scalar":
            v = a.value(dims); args.append(CT[a.dtype](v)); types.append(CT[a.dtype])
        else:
            args.append(ctypes.c_void_p(stream.ptr)); types.append(ctypes.c_void_p)
    fn.argtypes = types; fn.restype = ctypes.c_int
    cp.cuda.Device().synchronize()
    res = {}
    if check:
        rc = fn(*args); stream.synchronize(); cp.cuda.Device().synchronize()
        if rc: return {"error": f"rc={rc}"}
        for a in task.args:
            if a.role == "input" and not cp.array_equal(dev[a.name], cp.asarray(inputs[a.name])):
                return {"error": f"input {a.name} modified"}
        xp = cp if np.prod(task.args[0].dims_of(dims)) > 2_000_000 else np
        ref = task.reference({k: (cp.asarray(v) if xp is cp else v) for k, v in inputs.items()}, dims, xp=xp)
        ref = {k: (cp.asnumpy(v) if xp is cp else np.asarray(v)) for k, v in ref.items()}
        outs = {a.name: cp.asnumpy(dev[a.name]) for a in task.args if a.role in ("output", "inout")}
        if task.custom_compare:
            bad = task.custom_compare(outs, ref, inputs, dims, task.tol)
        else:
            bad = None
            for name, r in ref.items():
                bad = within(outs[name], r, task.tol, task.precision == "exact")
                if bad: bad = (name,) + bad; break
        res["bad"] = bad
        if not task.precision == "exact" and not task.custom_compare:
            name = list(ref)[0]
            g, r = outs[name].astype(np.float64).ravel(), ref[name].ravel()
            res["relerr"] = float(np.linalg.norm(g - r) / np.linalg.norm(r))
    if time_it:
        for _ in range(2): fn(*args)
        stream.synchronize()
        ts = []
        for _ in range(5):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(stream); fn(*args); e1.record(stream); e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1))
        res["ms"] = float(np.median(ts))
        res["GBps"] = task.bytes_of(shape) / res["ms"] / 1e6
    del dev
    cp.get_default_memory_pool().free_all_blocks()
    return res

report = {}
for name in TASKS:
    t0 = time.time()
    task = get_task(name)
    try:
        fns = {stem: build(task, src) for stem, src in task.seeds().items()}
    except Exception as e:
        print(name, "BUILD FAIL", e); continue
    for stem, fn in fns.items():
        for shape in task.validation:
            for seed in (0, 1, 2):
                try:
                    r = run_shape(task, fn, shape, seed)
                except Exception:
                    r = {"error": traceback.format_exc()[-800:]}
                ok = not r.get("error") and not r.get("bad")
                if not ok or seed == 0:
                    print(f"{name}/{stem} val {shape.label} {shape.case} seed{seed}: {'OK' if ok else 'FAIL'} {r}", flush=True)
        if BENCH:
            for set_name, shapes in task.benchmarks:
                if set_name == "quick": continue
                for shape in shapes:
                    try:
                        r = run_shape(task, fn, shape, 0, check=True, time_it=True)
                    except Exception:
                        r = {"error": traceback.format_exc()[-800:]}
                    ok = not r.get("error") and not r.get("bad")
                    print(f"{name}/{stem} bench {set_name}/{shape.label}: {'OK' if ok else 'FAIL'} {r}", flush=True)
    print(f"-- {name} done in {time.time()-t0:.1f}s", flush=True)
