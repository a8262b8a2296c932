#!/usr/bin/env python3
"""Where linear_regression's `gram` family spends its fixed cost: knob variants timed interleaved in
one process (CUDA events, the L2 flushed before every call), and per-block ``%globaltimer`` traces.

    python scripts/probe_gram.py [--shapes 4194304 16777216] [--reps 30] [--flush write read] [VARIANT ...]

A VARIANT is ``KNOB=V,KNOB=V`` (knobs of the seed; empty: the defaults), optionally prefixed by
``trace:``: each block stamps its start, its first tile's compute, the end of its stream and its
finish ticket into the workspace, the last block the end of its solve; printed as the launch
ramp, first-tile latency, stream end spread (the tail: the last block's stream end past the
median's), the block finish and the last block's solve, in us from the first block's start.
Traces need FINISH 1 (FINISH 0 keeps its partials in the workspace). Rows: median us per shape,
% of a ``cudaMemcpy`` of the same bytes (X and y), x of the first variant, x of the library
(``torch.linalg.solve(X.T @ X, X.T @ y)``) and each variant's error against a float64 solve.
``--flush``: how the L2 is emptied before each call, ``read`` (the evaluator's read pass: clean
lines) and/or ``write`` (a memset, the evaluator's before the twentieth session: the L2 is left
full of dirty lines the call's misses must write back); each mode times every call and traces
again. The copy moves half the bytes (read and written: the
same DRAM traffic as the kernel's reads), so its % is the kernel's share of copy bandwidth.
Needs torch and nvcc on a GPU host.
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_tools import GTIMER, build_all, flush_l2, interleaved_medians_us, print_rows  # noqa: E402

P = 10
TRACE_FIELDS = 4                       # per block: start, first compute, stream end, finish ticket
TRACE = [
    ("    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n",
     "    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n"
     "    const unsigned long long tr0 = gtimer();\n    unsigned long long tr1 = 0;\n"),
    ("    auto compute_rows = [&](long long r0, int s) {\n",
     "    auto compute_rows = [&](long long r0, int s) {\n        if (tr1 == 0) tr1 = gtimer();\n"),
    ("    __syncthreads();                                             // the stages become scratch\n",
     "    __syncthreads();                                             // the stages become scratch\n"
     "    const unsigned long long tr2 = gtimer();\n"),
    ("    if (tid == 0) last = atomicInc(&g_done, gridDim.x - 1) == gridDim.x - 1;   // wraps to 0: reset\n"
     "    __syncthreads();\n",
     "    if (tid == 0) last = atomicInc(&g_done, gridDim.x - 1) == gridDim.x - 1;   // wraps to 0: reset\n"
     "    __syncthreads();\n"
     f"    if (tid == 0) {{\n        unsigned long long* tr = reinterpret_cast<unsigned long long*>(workspace) + "
     f"blockIdx.x * {TRACE_FIELDS};\n"
     "        tr[0] = tr0; tr[1] = tr1; tr[2] = tr2; tr[3] = gtimer();\n    }\n"),
    ("    if (lane < P) beta[lane] = (float)(c / diag);\n",
     "    if (lane < P) beta[lane] = (float)(c / diag);\n"
     f"    if (lane == 0) reinterpret_cast<unsigned long long*>(workspace)[{TRACE_FIELDS} * gridDim.x] = gtimer();\n"),
]


def variant_source(base: str, spec: str) -> str:
    from evo_fsr.knobs import set_knobs

    probe, _, knobs = spec.rpartition(":")
    values = dict(pair.split("=", 1) for pair in knobs.split(",") if pair)
    source = set_knobs(base, values)
    if not probe:
        return source
    if probe != "trace":
        raise SystemExit(f"{spec}: unknown probe {probe!r} (have: trace)")
    if "#define FINISH 1 " not in source:
        raise SystemExit(f"{spec}: traces need FINISH 1 (FINISH 0 keeps its partials in the workspace)")
    for old, new in TRACE:
        if old not in source:
            raise SystemExit(f"{spec}: the trace's anchor is not in the seed: {old.strip()[:60]}")
        source = source.replace(old, new, 1)
    return GTIMER + source


def trace_summary(words, grid: int) -> str:  # type: ignore[no-untyped-def]
    """Per-block phases of one ``trace:`` call (ns from %globaltimer), in us from the first start."""
    import numpy as np

    t = np.asarray(words[:grid * TRACE_FIELDS], dtype=np.int64).reshape(grid, TRACE_FIELDS).astype(np.float64)
    solved = float(words[grid * TRACE_FIELDS])
    origin = t[:, 0].min()
    start, first, streamed, ticket = ((t[:, i] - origin) / 1e3 for i in range(TRACE_FIELDS))
    solved = (solved - origin) / 1e3

    def pct(v) -> str:  # type: ignore[no-untyped-def]
        return " / ".join(f"{np.percentile(v, q):.1f}" for q in (10, 50, 90)) + f" / {v.max():.1f}"

    return (f"{grid} blocks, span {solved:.1f} us; us p10 / p50 / p90 / max: start {pct(start)}; "
            f"first tile after start {pct(first - start)}; stream {pct(streamed - first)}; stream end {pct(streamed)} "
            f"(tail {streamed.max() - np.median(streamed):.1f}); finish {pct(ticket - streamed)}; "
            f"solve after the last ticket {solved - ticket.max():.1f}")


def main(argv: list[str] | None = None) -> int:
    import torch

    from evo_fsr.knobs import parse_knobs
    from evo_fsr.tasks import get_task

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("variants", nargs="*", default=[""])
    p.add_argument("--shapes", nargs="*", type=int, default=[1 << 22, 1 << 24])
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--flush", nargs="+", choices=("write", "read"), default=["read"])
    args = p.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False                  # fp32_strict, as the evaluator's library
    task = get_task("linear_regression")
    base = task.seeds()["gram"]
    sources = {spec or "defaults": variant_source(base, spec) for spec in args.variants}
    libs = build_all(task, sources, Path(tempfile.mkdtemp(prefix="probe-gram-")))
    stream = torch.cuda.current_stream()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    print(f"# {torch.cuda.get_device_name()}, {args.reps} rounds, medians")
    first = next(iter(libs))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    traced = {}                                        # the traced variants: rows a tile, blocks an SM
    for name in libs:
        if name.startswith("trace:"):
            knobs = {k: int(v.value) for k, v in parse_knobs(sources[name]).items()}
            traced[name] = (knobs["THREADS"] * knobs["ROWS_PER_THREAD"], knobs["BLOCKS_PER_SM"])
    rows: dict[str, list[str]] = {f"{name} [{mode}]": [] for mode in args.flush
                                  for name in [*libs, "library", "cudaMemcpy"]}
    for n in args.shapes:
        gen = torch.Generator(device="cuda").manual_seed(13)
        X = torch.randn(n, P, device="cuda", generator=gen)
        y = X @ torch.arange(1.0, P + 1, device="cuda") + 0.01 * torch.randn(n, device="cuda", generator=gen)
        beta = torch.empty(P, device="cuda")
        workspace = torch.zeros(65 * 4096, device="cuda")
        src = torch.cat([X.reshape(-1), y])[:(P + 1) * n // 2]    # read + written: the kernel's read bytes
        dst = torch.empty_like(src)
        calls = {name: (lambda lib=lib: lib.launch(ctypes.c_void_p(X.data_ptr()), ctypes.c_void_p(y.data_ptr()),
                                                    ctypes.c_void_p(beta.data_ptr()),
                                                    ctypes.c_void_p(workspace.data_ptr()), ctypes.c_int(n),
                                                    ctypes.c_void_p(stream.cuda_stream)))
                 for name, lib in libs.items()}
        calls["library"] = lambda: beta.copy_(torch.linalg.solve(X.T @ X, X.T @ y))
        calls["cudaMemcpy"] = lambda: dst.copy_(src)
        Xd = X.double()
        expected = torch.linalg.solve(Xd.T @ Xd, Xd.T @ y.double())
        errors = {}
        for name, call in calls.items():             # warm-up, and each variant's error
            if name == "cudaMemcpy":
                continue
            beta.zero_()
            call()
            torch.cuda.synchronize()
            errors[name] = float(((beta.double() - expected).norm() / expected.norm()).item())
        for mode in args.flush:
            for name, (tile_rows, blocks_per_sm) in traced.items():     # one call each
                grid = max(1, min(-(-n // tile_rows), sms * blocks_per_sm, 4096))   # launch()'s grid
                workspace.zero_()
                flush_l2(flush, mode)
                calls[name]()
                torch.cuda.synchronize()
                words = workspace.view(torch.int64)[:grid * TRACE_FIELDS + 1].cpu().numpy()
                if (words[:grid * TRACE_FIELDS] == 0).any():
                    print(f"n={n} {name} [{mode}]: fewer blocks than {grid} traced (the occupancy cap): skipped")
                    continue
                print(f"n={n} {name} [{mode}]: {trace_summary(words, grid)}")
            med = interleaved_medians_us(calls, args.reps, flush, mode)
            for name in calls:
                err = "" if name == "cudaMemcpy" else f" err {errors[name]:.0e}"
                rows[f"{name} [{mode}]"].append(f"{med[name]:8.1f} us {med['cudaMemcpy'] / med[name] * 100:5.1f}% "
                                                f"{med[first] / med[name]:4.2f}x {med['library'] / med[name]:5.2f}x lib{err}")
    print_rows("variant [flush]", args.shapes, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
