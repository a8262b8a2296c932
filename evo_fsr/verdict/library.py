"""A library implementation's time (PyTorch / cuDNN / cuBLAS), for context in verdict tables.

A task's reference.py may define ``library(inputs, dims, torch) -> outputs``.  It is timed here
in the trusted process, under the task's precision policy (TF32 off for fp32_strict) with
cudnn.benchmark on, with the same method as candidates: the L2 emptied before each trial by
the same read pass (l2_flush.py), CUDA events, median (the Workbench keeps the lowest of several
such rounds, bench.py), and in the same batch: ``batch`` calls back to back after one flush, each
on its own copy of the inputs and keeping its own outputs, per call, as a candidate's short
kernel is timed k launches to a window (bench.py).  A call timed alone after the flush ends with
its outputs still dirty in the L2, which no later call pays for; in a batch every call but the
last pays its predecessor's write-back.  On an H200 (probe_inproc.py --batch, twenty-eighth
session) that moved the layernorm seed's square_4096 call from 33.0 us alone to 36.2 us a call
in batches of 8, and torch's from 51.0 to 51.7 us: timed alone, the library against a batched
kernel read 1.41x where the two timed alike read 1.43x, and 1.55x where both were timed alone.
Its output is checked against the reference too, so a mis-specified library call cannot set the
bar.
"""
from __future__ import annotations

import logging
import statistics

import numpy as np

from ..tasks import Shape, Task
from .l2_flush import empty_l2
from .validate import check_outputs

log = logging.getLogger(__name__)


def library_median_ms(task: Task, shape: Shape, inputs: dict[str, np.ndarray], expected: dict[str, np.ndarray],
                      trials: int = 30, batch: int = 1) -> float | None:
    """Median ms a call of the task's library implementation, timed ``batch`` calls after one
    flush, or None (no torch, no GPU, none defined)."""
    fn = getattr(task.reference_module, "library", None)
    if fn is None:
        return None
    try:
        import torch  # noqa: PLC0415 - optional
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    strict = task.precision == "fp32_strict"
    torch.backends.cuda.matmul.allow_tf32 = not strict
    torch.backends.cudnn.allow_tf32 = not strict
    # the library at its best: cuDNN times its algorithms on the first call of a shape (the warm-up
    # calls below) and keeps the fastest.  Its heuristic pick alone varied between processes on an
    # H100: conv3_x 0.134 ms in one evaluator, 0.171 ms in another.
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dev) for k, v in inputs.items()}
    try:
        with torch.no_grad():
            out = fn(tensors, shape.env, torch)
            got = {k: v.detach().cpu().numpy() for k, v in out.items()}
            expected = {k: v if isinstance(v, np.ndarray) else v.get() for k, v in expected.items()}
            bad = check_outputs(got, expected, inputs, shape.env, task.tol, shape.label,
                                exact=task.precision == "exact", custom_compare=task.custom_compare,
                                error_scale=task.error_scale, bit_exact=task.bit_exact)
            if bad:
                log.warning("library implementation of %s disagrees with the reference: %s", task.name, bad.describe())
                return None
            del out, got
            # the batch's input sets: the same values, each in its own memory (as the candidate's
            # k buffer sets), so no call of a batch reads what an earlier one left in the L2
            sets = [tensors] + [{k: v.clone() for k, v in tensors.items()} for _ in range(max(1, batch) - 1)]
            stream = torch.cuda.current_stream().cuda_stream
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(3):
                fn(tensors, shape.env, torch)
            times = []
            for _ in range(trials):
                empty_l2(stream)            # the candidates' flush, on torch's stream
                start.record()
                kept = [fn(one, shape.env, torch) for one in sets]     # each call its own outputs
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / len(sets))
                del kept
            del sets, tensors
            torch.cuda.empty_cache()        # the batch's copies go back to the device, not to torch's cache
    except Exception as exc:  # noqa: BLE001 - context only: never fail a verdict over it
        log.warning("library timing failed for %s %s: %s", task.name, shape.label, exc)
        return None
    return float(statistics.median(times))
