#!/usr/bin/env python3
"""Where prefix_sum's `lookback` family loses to a copy: its knob variants beside leave-a-stage-out
probes, timed interleaved in one process (CUDA events, the L2 flushed before every call).

    python scripts/probe_scan.py [--shapes 67108864 16777216] [--reps 30] [VARIANT ...]

A VARIANT is ``KNOB=V,KNOB=V`` (knobs of the seed; empty: the defaults), optionally prefixed by a
probe: ``nolb:`` skips the look-back (every tile's prefix taken as 0: wrong sums, the chain's cost
left out) and ``copy:`` also skips both passes over the tile (the bulk load and bulk store of the
resident tile alone: the data movement of LOAD 3 at that tile size); ``trace:`` (combinable:
``trace+nolb:``) stamps each tile's phases with ``%globaltimer`` into the workspace past the status
words and prints their percentiles and the look-back's L2 polls (rounds and re-polls). Probes
act on the LOAD 3 kernel without the look-back warp (EARLY_LOOKBACK 0 is set for them).  Probes are timing
instruments only; their outputs are not checked.  Rows: median us per shape, % of a
``cudaMemcpy`` of the same bytes and x of ``torch.cumsum`` (same process, same rounds).  Needs
torch and nvcc on a GPU host.
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

TRACE_OFFSET_WORDS = 1 << 15          # the trace's first 64-bit word in the status array (past the last tile's)
TRACE_FIELDS = 8                      # per tile: start, landed, look-back start, look-back end, end, polls
NO_LOOKBACK = ("            before = op(aggregate);                // the same on every lane",
               "            before = 0.0f; (void)op;               // probe: no look-back")

PROBES = {
    "trace": [("struct NoHook {\n    __device__ __forceinline__ void operator()() const {}\n};\n",
               GTIMER + "struct NoHook {\n    unsigned calls = 0;\n"
               "    __device__ __forceinline__ void operator()() { ++calls; }\n};\n"),
              ("        if (lane == 0) publish(status + tile, epoch, FLAG_PREFIX, exclusive + aggregate);\n",
               "        if (lane == 0) publish(status + tile, epoch, FLAG_PREFIX, exclusive + aggregate);\n"
               f"        if (lane == 0) words[{TRACE_OFFSET_WORDS} + tile * {TRACE_FIELDS} + 5] = none.calls;\n"),
              ("    const bool bulk_in = VEC_X && valid == TILE, bulk_out = VEC_Y && valid == TILE;\n",
               "    const unsigned long long tr0 = gtimer();\n    unsigned long long tr1 = 0, tr2 = 0, tr3 = 0;\n"
               "    const bool bulk_in = VEC_X && valid == TILE, bulk_out = VEC_Y && valid == TILE;\n"),
              ("    if (bulk_in) bulk_load_wait(&landed);\n", "    if (bulk_in) bulk_load_wait(&landed);\n    tr1 = gtimer();\n"),
              ("            LookBack op{words, generation};\n", "            LookBack op{words, generation};\n            tr2 = gtimer();\n"),
              ("        const float warp_before = exclusive_of(inclusive, lane);\n",
               "        tr3 = gtimer();\n        const float warp_before = exclusive_of(inclusive, lane);\n"),
              ("    store_tile(y, stage, base, valid, bulk_out, BlockSync{});\n",
               "    store_tile(y, stage, base, valid, bulk_out, BlockSync{});\n"
               "    if (threadIdx.x == 0 && bulk_out) {             // after its bulk store's reads\n"
               f"        unsigned long long* tr = words + {TRACE_OFFSET_WORDS} + tile * {TRACE_FIELDS};\n"
               "        tr[0] = tr0; tr[1] = tr1; tr[2] = tr2; tr[3] = tr3; tr[4] = gtimer();\n    }\n")],
    "nolb": [NO_LOOKBACK],
    "copy": [NO_LOOKBACK,
             ("    if (bulk_in) bulk_load_wait(&landed);\n",
              "    if (bulk_in) bulk_load_wait(&landed);\n"
              "    if (bulk_out) {                               // probe: the tile straight back out\n"
              "        asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");\n"
              "        __syncthreads();\n"
              "        if (threadIdx.x == 0) bulk_store_and_wait(y + base, stage, TILE * 4u);\n"
              "        return;\n"
              "    }\n")],
}


def variant_source(base: str, spec: str) -> str:
    from evo_fsr.knobs import set_knobs

    probe, _, knobs = spec.rpartition(":")
    values = dict(pair.split("=", 1) for pair in knobs.split(",") if pair)
    if probe:                                # the probes patch the resident kernel without the look-back warp
        if values.setdefault("EARLY_LOOKBACK", "0") != "0":
            raise SystemExit(f"{spec}: the probes act on EARLY_LOOKBACK 0 only")
    source = set_knobs(base, values)
    for name in [p for p in probe.split("+") if p]:
        if name not in PROBES:
            raise SystemExit(f"{spec}: unknown probe {name!r} (have: {', '.join(PROBES)})")
        for old, new in PROBES[name]:
            if old not in source:
                raise SystemExit(f"{spec}: the probe's anchor is not in the seed (LOAD 3 only): {old.strip()[:60]}")
            source = source.replace(old, new, 1)
    return source


def trace_summary(trace, tiles: int) -> str:  # type: ignore[no-untyped-def]
    """Per-tile phases of a ``trace:`` call (ns from %globaltimer), as percentiles in us."""
    import numpy as np

    t = np.asarray(trace, dtype=np.int64).reshape(-1, TRACE_FIELDS)[:tiles]
    t = t[t[:, 4] != 0]                               # full tiles (the bulk-store path) only
    if len(t) == 0:
        return "no traced tiles"
    start, landed, lb0, lb1, end = (t[:, i].astype(np.float64) for i in range(5))
    looked = lb0 > 0
    span = end.max() - start.min()
    phases = {"life": end - start, "load": landed - start, "pass1": np.where(looked, lb0, lb1) - landed,
              "lookback": np.where(looked, lb1 - lb0, 0.0), "after": end - lb1}
    cells = [f"{name} {' / '.join(f'{np.percentile(v, q) / 1e3:.2f}' for q in (10, 50, 90))}"
             for name, v in phases.items()]
    order = np.sort(start)
    steps = np.diff(order)
    tick = steps[steps > 0].min() / 1e3 if (steps > 0).any() else 0.0
    return (f"tiles {len(t)}, span {span / 1e3:.1f} us, alive {phases['life'].sum() / span:.0f} on average, "
            f"polls {t[:, 5].mean():.2f} (max {t[:, 5].max()}: rounds and re-polls), timer tick {tick:.3f} us; "
            f"us p10 / p50 / p90: " + "; ".join(cells))


def main(argv: list[str] | None = None) -> int:
    import torch

    from evo_fsr.knobs import parse_knobs
    from evo_fsr.tasks import get_task

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("variants", nargs="*", default=[""])
    p.add_argument("--shapes", nargs="*", type=int, default=[1 << 26, 1 << 24, 100000007])
    p.add_argument("--reps", type=int, default=30)
    args = p.parse_args(argv)
    task = get_task("prefix_sum")
    base = task.seeds()["lookback"]
    folder = Path(tempfile.mkdtemp(prefix="probe-scan-"))
    sources = {spec or "defaults": variant_source(base, spec) for spec in args.variants}
    libs = build_all(task, sources, folder)
    stream = torch.cuda.current_stream()
    flush = None                                   # the evaluator's read pass (probe_tools.flush_l2) needs no buffer here
    print(f"# {torch.cuda.get_device_name()}, {args.reps} rounds, medians")
    rows: dict[str, list[str]] = {name: [] for name in [*libs, "torch.cumsum", "cudaMemcpy"]}
    for n in args.shapes:
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        workspace = torch.zeros(n // 32 + 1024, device="cuda")
        calls = {name: (lambda lib=lib: lib.launch(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()),
                                                    ctypes.c_void_p(workspace.data_ptr()), ctypes.c_int(n),
                                                    ctypes.c_void_p(stream.cuda_stream)))
                 for name, lib in libs.items()}
        calls["torch.cumsum"] = lambda: torch.cumsum(x, 0, out=y)
        calls["cudaMemcpy"] = lambda: y.copy_(x)
        expected = torch.cumsum(x.double(), 0)
        errors = {}
        for name, call in calls.items():             # warm-up, and the real variants' error
            call()
            torch.cuda.synchronize()
            errors[name] = float(((y.double() - expected).abs().max() / expected.abs().max()).item())
        for name, lib in libs.items():                 # the traced variants' phases, one call each
            if name.split(":")[0].split("+")[0] != "trace":
                continue
            knobs = {k: int(v.value) for k, v in parse_knobs(sources[name]).items()}
            tiles = -(-n // (knobs["THREADS"] * knobs["ITEMS"]))
            flush_l2(flush)
            workspace.zero_()
            calls[name]()
            torch.cuda.synchronize()
            words = workspace.view(torch.int64)
            trace = words[TRACE_OFFSET_WORDS:TRACE_OFFSET_WORDS + tiles * TRACE_FIELDS].cpu().numpy()
            print(f"n={n} {name}: {trace_summary(trace, tiles)}")
        med = interleaved_medians_us(calls, args.reps, flush)
        for name in calls:
            err = "" if name == "cudaMemcpy" else f" err {errors[name]:.0e}"
            rows[name].append(f"{med[name]:8.1f} us {med['cudaMemcpy'] / med[name] * 100:5.1f}% "
                              f"{med['torch.cumsum'] / med[name]:4.2f}x{err}")
    print_rows("variant", args.shapes, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
