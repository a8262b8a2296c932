#!/usr/bin/env python3
"""Where a family's time goes, from Nsight Compute's hardware counters, per kernel it launches.

    python scripts/ncu_family.py --task softmax seed:regime seed:regime@CLUSTER_REG=0 \
        [--shapes long_rows square_4096] [--out ncu-logs]

The kernels are exported and compiled first (evo_fsr.export, in parallel). Then each (kernel,
shape) is one ``ncu`` run of this script's driver (``--driver``): it imports the export, makes the
shape's inputs with the task's own generator, calls the kernel once to warm up and once between
``cudaProfilerStart``/``Stop``, which ncu profiles with the L2 flushed before each replay (as the
benchmark flushes it) and the clocks left alone (``--clock-control none``, device/METHOD.md).
The table gives, per kernel launch: duration, DRAM bytes read and written (written bytes still
in the L2 when the kernel ends are not counted: outputs under ~50 MB read low), DRAM throughput,
achieved occupancy, registers, grid, block and cluster size, and the three largest warp stall
reasons. ``--copy-mb`` profiles an elementwise copy of that size first, for reference. The raw
CSV of every run is kept in ``--out``. A benchmark's "x of library" is
not this: ncu serialises and replays kernels; time them with bench_vs_library.py.
"""
from __future__ import annotations

import argparse
import csv
import importlib
import io
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block",
    "launch__grid_size",
    "launch__block_size",
    "launch__cluster_size",
)
STALLS = ("long_scoreboard", "barrier", "membar", "short_scoreboard", "wait", "math_pipe_throttle",
          "lg_throttle", "mio_throttle", "not_selected", "selected", "drain", "sleeping",
          "branch_resolving", "dispatch_stall", "no_instruction", "imc_miss", "tex_throttle", "misc")
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


@dataclass(frozen=True)
class KernelRow:
    """One profiled kernel launch."""

    name: str
    duration_us: float
    read_mb: float
    write_mb: float
    occupancy_pct: float
    registers: int
    shared_bytes: int
    grid: int
    block: int
    cluster: int
    stalls: tuple[tuple[str, float], ...]   # (reason, warps stalled per issue), largest first

    @property
    def dram_gbps(self) -> float:
        return (self.read_mb + self.write_mb) * 1e6 / (self.duration_us * 1e-6) / 1e9 if self.duration_us else 0.0


def _number(text: str) -> float:
    text = text.replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return 0.0


def parse_csv(text: str) -> list[KernelRow]:
    """ncu ``--csv --page raw`` (one row per kernel, a units row after the header) to rows;
    values are read in the units ncu prints (converted from its unit row)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if len(lines) < 2:
        return []
    table = list(csv.reader(io.StringIO("\n".join(lines))))
    header = table[0]
    if table[1] and table[1][0].strip() == "":      # the units row (its ID cell is empty)
        units, body = table[1], table[2:]
    else:
        units, body = [""] * len(header), table[1:]
    scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "msecond": 1e3, "ms": 1e3, "nsecond": 1e-3,
             "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3, "KB": 1e-3, "MB": 1.0, "GB": 1e3}

    def value(row: list[str], metric: str, unit_free: bool = False) -> float:
        if metric not in header:
            return 0.0
        i = header.index(metric)
        raw = _number(row[i]) if i < len(row) else 0.0
        unit = units[i].strip() if i < len(units) else ""
        return raw if unit_free else raw * scale.get(unit, 1.0)

    rows = []
    for row in body:
        name = row[header.index("Kernel Name")] if "Kernel Name" in header else "?"
        stalls = sorted(((s, value(row, STALL_METRIC.format(s), True)) for s in STALLS),
                        key=lambda item: -item[1])
        rows.append(KernelRow(
            name=name, duration_us=value(row, "gpu__time_duration.sum"),
            read_mb=value(row, "dram__bytes_read.sum"), write_mb=value(row, "dram__bytes_write.sum"),
            occupancy_pct=value(row, "sm__warps_active.avg.pct_of_peak_sustained_active", True),
            registers=int(value(row, "launch__registers_per_thread", True)),
            shared_bytes=int(round(value(row, "launch__shared_mem_per_block") * 1e6)),
            grid=int(value(row, "launch__grid_size", True)), block=int(value(row, "launch__block_size", True)),
            cluster=int(value(row, "launch__cluster_size", True)),
            stalls=tuple(stalls[:3])))
    return rows


def short_name(name: str, width: int = 40) -> str:
    base = name.split("(")[0]
    return base if len(base) <= width else base[:width - 1] + "~"


# -- the driver (runs under ncu) ---------------------------------------------------------------
def driver(task_name: str, package: str, shape_label: str, copy_mb: int) -> int:
    import numpy as np
    import torch

    if copy_mb > 0:                                     # the copy the table compares against
        src = torch.empty(copy_mb * (1 << 20) // 4, dtype=torch.float32, device="cuda").uniform_()
        dst = torch.empty_like(src)
        torch.mul(src, 1.0, out=dst)                    # a kernel (copy_ is a cudaMemcpy ncu does not see)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        torch.mul(src, 1.0, out=dst)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        return 0
    from evo_fsr.tasks import get_task
    from evo_fsr.verdict.inputs import make_case

    task = get_task(task_name)
    shape = next((s for _, shapes in task.benchmarks for s in shapes if s.label == shape_label), None)
    if shape is None:
        raise SystemExit(f"{task_name}: no benchmark shape {shape_label!r}")
    folder = Path(package)
    sys.path.insert(0, str(folder.parent))
    exported = importlib.import_module(folder.name)
    kernel = getattr(exported, exported.SPEC["function"])
    host = make_case(task, shape, 20261124)
    device = {k: torch.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in host.items()}
    given = [device[a.name] for a in task.args if a.role in ("input", "inout")]
    kernel(*given)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    kernel(*given)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


def export_all(task_name: str, specs: list[str], out: Path) -> list[Path]:
    """Each kernel exported and compiled for this GPU (in parallel, before any profiling)."""
    from concurrent.futures import ThreadPoolExecutor

    from evo_fsr.commands.evaluate import _load_source
    from evo_fsr.export.builder import export_kernel
    from evo_fsr.tasks import get_task
    from evo_fsr.verdict.compile import DEFAULT_ARCH, detect_arch

    task = get_task(task_name)
    arch = detect_arch() or DEFAULT_ARCH
    sources = [_load_source(task.seeds(), spec)[1] for spec in specs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        jobs = [pool.submit(export_kernel, task, source, out, f"k{i:02d}", (arch,)) for i, source in enumerate(sources)]
        return [job.result() for job in jobs]


# -- the profiler side ------------------------------------------------------------------------
def profile(args: list[str], ncu: str, timeout_s: float) -> tuple[list[KernelRow], str]:
    metrics = ",".join([*METRICS, *(STALL_METRIC.format(s) for s in STALLS)])
    cmd = [ncu, "--clock-control", "none", "--cache-control", "all", "--profile-from-start", "off",
           "--target-processes", "all", "--csv", "--page", "raw", "--metrics", metrics,
           sys.executable, str(Path(__file__).resolve()), "--driver", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    text = done.stdout + ("\n" + done.stderr if done.returncode else "")
    return parse_csv(done.stdout), text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task")
    p.add_argument("kernels", nargs="*", help="seed:NAME[@KNOB=V,...] or a .cu path (as evaluate.py)")
    p.add_argument("--shapes", nargs="*", help="benchmark shape labels (default: the default benchmark's)")
    p.add_argument("--out", type=Path, default=Path("ncu-logs"))
    p.add_argument("--copy-mb", type=int, default=256, help="size of the reference copy (0: none)")
    p.add_argument("--ncu", default="ncu")
    p.add_argument("--timeout-s", type=float, default=300.0, help="per ncu run")
    p.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--shape", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.driver:
        return driver(args.task or "", (args.kernels or [""])[0], args.shape or "", args.copy_mb)
    if not args.task or not args.kernels:
        p.error("--task and at least one kernel are required")
    from evo_fsr.tasks import get_task
    task = get_task(args.task)
    shapes = args.shapes or [s.label for s in dict(task.benchmarks)[task.default_benchmark]]
    args.out.mkdir(parents=True, exist_ok=True)
    runs: list[tuple[str, str, list[str]]] = []
    if args.copy_mb > 0:
        runs.append(("copy", f"{args.copy_mb} MB", ["--copy-mb", str(args.copy_mb)]))
    packages = export_all(args.task, args.kernels, args.out / "packages")
    runs += [(spec, shape, ["--task", args.task, str(package), "--shape", shape, "--copy-mb", "0"])
             for spec, package in zip(args.kernels, packages) for shape in shapes]
    print(f"{'kernel':<44} {'shape':<14} {'launch':<40} {'us':>8} {'rd MB':>8} {'wr MB':>8} {'GB/s':>7} "
          f"{'occ%':>5} {'regs':>4} {'grid':>6} {'blk':>4} {'cl':>2}  stalls (warps per issue)")
    for i, (spec, shape, extra) in enumerate(runs):
        try:
            rows, text = profile(extra, args.ncu, args.timeout_s)
        except subprocess.TimeoutExpired:
            print(f"{spec:<44} {shape:<14} ncu timed out after {args.timeout_s:.0f} s")
            continue
        (args.out / f"ncu_{i:02d}.csv").write_text(f"# {spec} {shape}\n{text}")
        if not rows:
            print(f"{spec:<44} {shape:<14} no kernel profiled (see {args.out}/ncu_{i:02d}.csv)")
        for row in rows:
            stalls = ", ".join(f"{s} {v:.1f}" for s, v in row.stalls)
            print(f"{spec[:44]:<44} {shape[:14]:<14} {short_name(row.name):<40} {row.duration_us:8.2f} "
                  f"{row.read_mb:8.1f} {row.write_mb:8.1f} {row.dram_gbps:7.0f} {row.occupancy_pct:5.1f} "
                  f"{row.registers:4d} {row.grid:6d} {row.block:4d} {row.cluster:2d}  {stalls}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
