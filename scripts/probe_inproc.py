#!/usr/bin/env python3
"""Run on a GPU host: a kernel and the library timed the same way, in one process.

    python3 scripts/probe_inproc.py --task relu seed:vectorized seed:vectorized@CACHE=3 [--trials 60]
        [--shapes default] [--batch 1,8]

A diagnostic, not a verdict: each kernel is compiled by the Compilation Verifier, loaded into
this process (ctypes) and called on torch's buffers and stream exactly as verdict/library.py
times the library: the evaluator's L2 flush, CUDA events around one call, the median; kernels
and library interleaved call by call.  So "x of library" here has no runner, no CUDA IPC buffers
and no window bound in it: set beside the verdict's "x of library" (bench_vs_library.py), it
says how much of a gap is the kernel and how much is the way the verdict times it.  Each
kernel's output is compared with the library's (max abs difference printed); nothing is
validated: run untrusted kernels through scripts/evaluate.py, never through this script.

``--batch 1,8`` times each kernel and the library both ways: one call after the flush (as
verdict/library.py timed the library until the twenty-eighth session), and K calls back to back
on K buffer sets after one flush, per call (as the verdict times a short kernel: a batch of K
launches to a window, bench.py).  A call after the flush leaves its outputs dirty in the L2 when
its end event fires; in a batch, each later call pays for writing back its predecessor's.
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from evo_fsr.commands.evaluate import _load_source  # noqa: E402
from evo_fsr.runner.runner import SCALAR_CTYPES  # noqa: E402
from evo_fsr.task_model import Task  # noqa: E402
from evo_fsr.tasks import get_task  # noqa: E402
from evo_fsr.verdict.compile import compile_source, detect_arch  # noqa: E402
from evo_fsr.verdict.inputs import make_case, np_dtype, scalars_of  # noqa: E402
from evo_fsr.verdict.l2_flush import empty_l2  # noqa: E402

def load_kernel(task: Task, source: str, so: Path, label: str) -> ctypes.CDLL:
    result = compile_source(source, task.header(), detect_arch() or "sm_90")
    if not result.ok:
        raise SystemExit(f"error: {label}: does not compile:\n{result.log}")
    so.write_bytes(result.binary)
    lib = ctypes.CDLL(str(so))
    lib.launch.restype = ctypes.c_int
    return lib


def call_args(task: Task, scalars: dict, buffers: dict, stream: int) -> list:
    """launch's arguments for one shape, built once (not inside the timed loop)."""
    args: list = []
    for arg in task.args:
        if arg.role == "stream":
            args.append(ctypes.c_void_p(stream))
        elif arg.role == "scalar":
            args.append(SCALAR_CTYPES[arg.dtype](scalars[arg.name]))
        else:
            args.append(ctypes.c_void_p(buffers[arg.name].data_ptr()))
    return args


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("kernels", nargs="+", help="seed:NAME[@KNOB=VALUE,...] or a .cu file")
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--shapes", default=None, help="benchmark set (default: the task's)")
    parser.add_argument("--batch", type=lambda text: [int(k) for k in text.split(",")], default=[1],
                        help="calls back to back after one flush, per timing, comma-separated (each a separate row)")
    args = parser.parse_args()
    import torch  # noqa: PLC0415 - GPU host only

    task = get_task(args.task)
    library = getattr(task.reference_module, "library", None)
    if library is None:
        raise SystemExit(f"error: task {task.name} defines no library() in reference.py")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = task.precision != "fp32_strict"
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    stream = torch.cuda.current_stream().cuda_stream
    print(f"# {torch.cuda.get_device_name()}  task {task.name}  trials {args.trials}")
    with tempfile.TemporaryDirectory() as tmp:
        specs = [_load_source(task.seeds(), spec) for spec in args.kernels]
        with ThreadPoolExecutor(max_workers=8) as pool:     # nvcc runs, side by side
            libs = list(pool.map(lambda i: load_kernel(task, specs[i][1], Path(tmp) / f"k{i}.so", specs[i][0]),
                                 range(len(specs))))
        kernels = [(label, lib) for (label, _), lib in zip(specs, libs)]
        for shape in task.benchmark(args.shapes):
            env = shape.env
            inputs = make_case(task, shape, seed=1)
            most = max(args.batch)
            sets = [{k: torch.from_numpy(np.ascontiguousarray(v)).to(dev) for k, v in inputs.items()}
                    for _ in range(most)]                   # K buffer sets: same values, own memory
            with torch.no_grad():
                want = library(sets[0], env, torch)
            launch_sets = []
            for tensors in sets:
                buffers = dict(tensors)
                for arg in task.args:
                    if arg.role in ("output", "workspace"):
                        buffers[arg.name] = torch.empty(arg.numel(env), dtype=getattr(torch, np_dtype(arg.dtype).name),
                                                        device=dev)
                launch_sets.append((buffers, call_args(task, scalars_of(task, shape), buffers, stream)))
            kept: list = []     # the library's outputs of one timing: K calls hold K output buffers

            def library_call(j: int) -> None:
                kept.append(library(sets[j], env, torch))

            runs = [(label, lambda j, lib=lib: lib.launch(*launch_sets[j][1])) for label, lib in kernels]
            runs.append(("library", library_call))
            buffers = launch_sets[0][0]
            for label, fn in runs:      # warm-up, and each kernel's output against the library's
                for _ in range(3):
                    rc = fn(0)
                    if isinstance(rc, int) and rc != 0:
                        raise SystemExit(f"error: {label}: launch returned {rc}")
                kept.clear()
                torch.cuda.synchronize()
                if label != "library":
                    diffs = [float((buffers[k].reshape(v.shape).to(v.dtype) - v).abs().max()) for k, v in want.items()
                             if k in buffers and v.numel() == buffers[k].numel()]
                    print(f"  {shape.label} {label}: max |kernel - library| {max(diffs) if diffs else float('nan'):.3g}")
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times: dict[tuple[str, int], list[float]] = {(label, k): [] for label, _ in runs for k in args.batch}
            with torch.no_grad():
                for trial in range(args.trials):
                    order = runs if trial % 2 == 0 else runs[::-1]
                    for k in args.batch:
                        for label, fn in order:
                            empty_l2(stream)
                            start.record()
                            for j in range(k):
                                fn(j)
                            end.record()
                            end.synchronize()
                            kept.clear()
                            times[(label, k)].append(start.elapsed_time(end) / k)
            nbytes = task.bytes_of(shape)
            for k in args.batch:
                lib_ms = statistics.median(times[("library", k)])
                print(f"{shape.label} batch {k}: library {lib_ms * 1e3:.1f} us ({nbytes / lib_ms / 1e6:.0f} GB/s) a call")
                for label, _ in runs[:-1]:
                    ms = statistics.median(times[(label, k)])
                    print(f"  {label:50s} {ms * 1e3:8.1f} us {nbytes / ms / 1e6:6.0f} GB/s  x{lib_ms / ms:.3f} of library")
    return 0


if __name__ == "__main__":
    sys.exit(main())
