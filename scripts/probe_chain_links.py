#!/usr/bin/env python3
"""Run on a GPU host: what the links of a chained window cost beside the calls they join.

    python3 scripts/probe_chain_links.py [TASK ...] [--trials 20] [--shapes quick]

A chained window (verdict/chain.py) holds ``CHAIN_CALLS`` calls and, between two of them, a link:
``evo_fsr_chain_link``, one kernel that hashes the call's outputs and draws the next call's inputs
(until the thirty-fifth session, three or more kernels: a hash per output buffer and a draw per
input buffer; on an H200 they were 30.1 % of topk's chained call and 15.6 % of sort's).  The links run in the candidate's process and are inside the window's overhead, which the
calibration pool measures running the same chain; a candidate that replaced them with faster code
of its own (it can: SECURITY.md) could claim, at most, what it saves on them.  This measures that
room, in one process, with CUDA events on one stream, interleaved trial by trial:

- ``calls``: the seed's CHAIN_CALLS calls back to back (no links);
- ``links``: CHAIN_CALLS - 1 links back to back (no calls);
- ``chained``: calls and links alternating, as in a chained window.

Per shape it prints each median per call, and the links' share of a chained call: the most a
link-replacing forger could hide per call, and so the most it could be credited above its true
speed.  A diagnostic, not a verdict: the seeds are trusted code, run here without a runner.
"""
from __future__ import annotations

import argparse
import ctypes
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from evo_fsr.runner.runner import SCALAR_CTYPES  # noqa: E402
from evo_fsr.tasks import get_task  # noqa: E402
from evo_fsr.verdict import chain  # noqa: E402
from evo_fsr.verdict.compile import compile_source, detect_arch  # noqa: E402
from evo_fsr.verdict.inputs import make_case, np_dtype, scalars_of  # noqa: E402


#: a spin ahead of each timing (~20 ms at H200 clocks), longer than the host takes to enqueue a
#: window: the events then time the GPU's work, not the host's issue rate (the gated chain's way)
HOLD_CYCLES = 40_000_000


def load(source: str, header: str, so: Path, what: str) -> ctypes.CDLL:
    built = compile_source(source, header, detect_arch() or "sm_90", cache_dir=None)
    if not built.ok:
        raise SystemExit(f"error: {what} does not compile:\n{built.log}")
    so.write_bytes(built.binary)
    return ctypes.CDLL(str(so))


def pointer_list(arrays: list) -> tuple:
    return ((ctypes.c_void_p * len(arrays))(*[a.data_ptr() for a in arrays]),
            (ctypes.c_longlong * len(arrays))(*[a.numel() * a.element_size() for a in arrays]),
            ctypes.c_int(len(arrays)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="*", default=["topk", "sort"])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--shapes", default="quick")
    parser.add_argument("--layouts", default="",
                        help="links to try beside the library's own, as BLOCKS_PER_SM:ITEMS[:LOCAL_HASH_WORDS][,...] "
                             "(e.g. 8:4,4:4:0; the library's: 4:4:4096)")
    args = parser.parse_args()
    import torch  # noqa: PLC0415 - GPU host only

    dev = torch.device("cuda")
    stream = torch.cuda.current_stream().cuda_stream
    handle = ctypes.c_void_p(stream)
    calls = chain.CHAIN_CALLS
    print(f"# {torch.cuda.get_device_name()}  {calls} calls a window  trials {args.trials}")
    print(f"{'task/seed':24s} {'shape':16s} {'calls us':>9s} {'links us':>9s} {'chained us':>10s} {'link share':>10s}  links")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.tasks:
            task = get_task(name)
            if not chain.eligible(task):
                print(f"{name}: not chained (chain.eligible)")
                continue
            layouts = {"library": chain.chain_source(task)}
            for layout in filter(None, args.layouts.split(",")):
                per_sm, items, local = (layout.split(":") + ["4096"])[:3]
                source = chain.chain_source(task)
                for define, value in (("EVO_FSR_BLOCKS_PER_SM", per_sm), ("EVO_FSR_ITEMS", items),
                                      ("EVO_FSR_LOCAL_HASH_WORDS", local)):
                    source, count = re.subn(rf"#define {define} \d+", f"#define {define} {int(value)}", source)
                    if count != 1:
                        raise SystemExit(f"error: the chain's source has no #define {define} to vary")
                layouts[f"grid {per_sm}/SM, {items} a thread, local hash to {local} words"] = source
            libs = {label: load(source, task.header(), Path(tmp) / f"{name}-chain-{i}.so", f"the chain ({label})")
                    for i, (label, source) in enumerate(layouts.items())}
            seed_name = task.chain_twin or next(iter(task.seeds()))
            seed = load(task.seeds()[seed_name], task.header(), Path(tmp) / f"{name}-seed.so", seed_name)
            seed.launch.restype = ctypes.c_int
            for shape in task.benchmark(args.shapes):
                env = shape.env
                host = make_case(task, shape, seed=1)
                sets = []
                for _ in range(calls):
                    buffers = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dev) for k, v in host.items()}
                    for arg in task.args:
                        if arg.role in ("output", "workspace"):
                            buffers[arg.name] = torch.zeros(arg.numel(env), device=dev,
                                                            dtype=getattr(torch, np_dtype(arg.dtype).name))
                    launch_args = []
                    for arg in task.args:
                        if arg.role == "stream":
                            launch_args.append(handle)
                        elif arg.role == "scalar":
                            launch_args.append(SCALAR_CTYPES[arg.dtype](scalars_of(task, shape)[arg.name]))
                        else:
                            launch_args.append(ctypes.c_void_p(buffers[arg.name].data_ptr()))
                    outs = pointer_list([buffers[a.name] for a in task.args if a.role == "output"])
                    ins = pointer_list([buffers[a.name] for a in task.args if a.role == "input"])
                    sets.append((launch_args, outs, ins))
                # the gate's word, already open: the gate resets the links' barrier, as in a window
                open_word = torch.ones(1, dtype=torch.int64, device=dev)
                word = ctypes.c_void_p(open_word.data_ptr())

                def run(with_calls: bool, links_lib: ctypes.CDLL | None) -> None:
                    for j in range(calls):
                        if with_calls and seed.launch(*sets[j][0]) != 0:
                            raise SystemExit(f"error: {name}/{seed_name} launch failed")
                        if links_lib is not None and j + 1 < calls:
                            if links_lib.evo_fsr_chain_link(*sets[j][1], *sets[j + 1][2], ctypes.c_int(0),
                                                            handle) != 0:
                                raise SystemExit("error: a link failed")

                # every timing interleaved trial by trial: the calls alone, then per layout the
                # links alone and calls and links alternating
                modes: dict[tuple[str, str], tuple[bool, ctypes.CDLL | None]] = {("calls", ""): (True, None)}
                for label, lib in libs.items():
                    modes[("links", label)] = (False, lib)
                    modes[("chained", label)] = (True, lib)
                gate_lib = libs["library"]
                for flags in modes.values():     # warm-up
                    gate_lib.evo_fsr_chain_gate(word, handle)
                    run(*flags)
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                times: dict[tuple[str, str], list[float]] = {mode: [] for mode in modes}
                for trial in range(args.trials):
                    order = list(modes.items()) if trial % 2 == 0 else list(modes.items())[::-1]
                    for mode, (with_calls, lib) in order:
                        torch.cuda.synchronize()
                        torch.cuda._sleep(HOLD_CYCLES)      # the GPU held while the host enqueues, as
                        (lib or gate_lib).evo_fsr_chain_gate(word, handle)   # behind the gated chain's gate
                        start.record()
                        run(with_calls, lib)
                        end.record()
                        end.synchronize()
                        times[mode].append(start.elapsed_time(end) * 1e3)
                call_us = statistics.median(times[("calls", "")]) / calls
                for label in libs:
                    link_us = statistics.median(times[("links", label)]) / (calls - 1)
                    chained_us = statistics.median(times[("chained", label)]) / calls
                    share = 1.0 - call_us / chained_us if chained_us > 0 else float("nan")
                    print(f"{name + '/' + seed_name:24s} {shape.label:16s} {call_us:9.2f} {link_us:9.2f} "
                          f"{chained_us:10.2f} {100 * share:9.1f}%  {label}", flush=True)
    print("(calls / links / chained: us a call or link, median of the trials; link share: 1 - calls / chained,"
          " what a forger replacing the links could hide a call at most; each timing is enqueued behind a ~20 ms"
          " spin, so the events time the GPU's work, as in the gated chain)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
