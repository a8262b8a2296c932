#!/usr/bin/env python3
"""What checking one timed call costs the trusted side, per benchmark shape, on the GPU: the
fresh inputs (``TimedInputs.next``), the float64 reference and the comparison, each a median of
``--repeat`` synchronised runs.  The candidate's output is the reference itself, narrowed to the
output dtype, so the comparison takes its passing path as it does for a correct kernel.

    python scripts/profile_check.py --task conv2d [--shapes resnet50] [--repeat 10]
    python scripts/profile_check.py --task conv2d --reference-from old_reference.py   # A/B a rewrite
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _median_ms(fn, repeat: int, sync) -> float:  # type: ignore[no-untyped-def]
    fn()
    sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="conv2d")
    parser.add_argument("--shapes", default=None, help="benchmark set (default: the task's)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--cpu", action="store_true", help="NumPy on the CPU (a dry run of the script)")
    parser.add_argument("--reference-from", type=Path, default=None,
                        help="a reference.py whose reference() is timed beside the task's")
    args = parser.parse_args()

    import numpy as np
    if args.cpu:
        cp, sync, device = np, (lambda: None), "CPU (NumPy)"
    else:
        import cupy as cp
        sync = cp.cuda.Device().synchronize
        device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()

    from evo_fsr.tasks import get_task
    from evo_fsr.verdict.inputs import TimedInputs, reference
    from evo_fsr.verdict.validate import check_outputs, widen

    task = get_task(args.task)
    other = None
    if args.reference_from is not None:
        spec = importlib.util.spec_from_file_location("other_reference", args.reference_from)
        if spec is None or spec.loader is None:
            raise SystemExit(f"{args.reference_from}: not a Python file")
        other = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(other)
    print(f"{device}; task {task.name}; median of {args.repeat}")
    head = f"{'shape':<12} {'inputs ms':>10} {'reference ms':>13} {'compare ms':>11}"
    print(head + (f" {'other ref ms':>13}" if other else ""))
    outs = [a for a in task.args if a.role in ("output", "inout")]
    for shape in task.benchmark(args.shapes):
        timed = TimedInputs(task, shape, cp)
        inputs = timed.next()
        t_inputs = _median_ms(timed.next, args.repeat, sync)
        t_ref = _median_ms(lambda: reference(task, inputs, shape, cp), args.repeat, sync)
        expected = reference(task, inputs, shape, cp)
        got = {a.name: expected[a.name].astype(np.dtype(np.float32) if a.dtype == "float32" else expected[a.name].dtype)
               for a in outs}
        t_cmp = _median_ms(lambda: check_outputs(got, expected, inputs, shape.env, task.tol, shape.label,
                                                 exact=task.precision == "exact", custom_compare=task.custom_compare,
                                                 xp=cp, error_scale=task.error_scale), args.repeat, sync)
        line = f"{shape.label:<12} {t_inputs:>10.3f} {t_ref:>13.3f} {t_cmp:>11.3f}"
        if other is not None:
            wide = {k: widen(v, cp) if v.dtype == np.float32 and not args.cpu else v for k, v in inputs.items()}
            t_other = _median_ms(lambda: other.reference(wide, shape.env, xp=cp), args.repeat, sync)
            theirs = other.reference(wide, shape.env, xp=cp)
            diff = max(float(cp.abs(theirs[k] - expected[k]).max() / max(float(cp.abs(expected[k]).max()), 1e-300))
                       for k in expected)
            line += f" {t_other:>13.3f}  (max rel diff {diff:.1e})"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
