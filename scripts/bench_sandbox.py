"""Per-candidate cost of the sandbox: confinement on vs off (EVO_FSR_SANDBOX=off).

    python scripts/bench_sandbox.py [--repeats 5]

Measures (median of repeats, seconds):
  compile     nvcc of the conv2d naive seed (no cache): adds the confine.py exec wrapper
              (python -I -S start, netns, Landlock, capabilities)
  spawn       runner process start -> CUDA init -> confinement -> init reply -> exit
              (needs a GPU; skipped without one)
  evaluate    a whole evaluate() of the naive seed, validation only (profile=False; needs a GPU)
The difference between the columns is the sandbox's added cost per candidate.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.verdict import compile as nvcc  # noqa: E402
from evo_fsr.runner import sandbox  # noqa: E402
from evo_fsr.tasks import get_task  # noqa: E402


def _timed(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench(repeats: int, gpu: bool) -> dict[str, float]:
    task = get_task("conv2d")
    out: dict[str, float] = {}
    arch = nvcc.detect_arch() or nvcc.DEFAULT_ARCH
    out["compile"] = _timed(lambda: nvcc.compile_source(task.baseline_source, task.header(), arch,
                                                        cache_dir=None), repeats)
    if gpu:
        from evo_fsr.verdict.evaluate import EvalConfig, Evaluator
        from evo_fsr.runner.harness import RunnerProcess
        from evo_fsr.types import Candidate

        def spawn() -> None:
            work = Path(tempfile.mkdtemp(prefix="evo-fsr-bench-", dir="/dev/shm"))
            try:
                (work / "job.json").write_text('{"args": [], "libs": {}}')
                with RunnerProcess(work):
                    pass
            finally:
                shutil.rmtree(work, ignore_errors=True)
        out["spawn"] = _timed(spawn, repeats)
        ev = Evaluator("conv2d", EvalConfig(profile=False, cache_dir=None))
        compiled = ev.compile(task.baseline_source)
        _ = ev.gpu_info, ev.baseline
        out["evaluate"] = _timed(lambda: ev.evaluate(Candidate("conv2d", task.baseline_source), compiled), repeats)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from tests.conftest import gpu_unavailable_reason  # noqa: PLC0415
    gpu = gpu_unavailable_reason() is None
    print(f"kernel {os.uname().release}; support: {sandbox.kernel_support()}; GPU: {gpu}")
    bench(1, gpu)                      # warm-up: page cache, CUDA driver, compiler binaries
    rows: dict[str, dict[str, float]] = {}
    for mode in ("on", "off"):
        if mode == "off":
            os.environ["EVO_FSR_SANDBOX"] = "off"
        else:
            os.environ.pop("EVO_FSR_SANDBOX", None)
        rows[mode] = bench(args.repeats, gpu)
    if gpu:   # runner spawn with one layer off at a time: where the cost goes
        from dataclasses import replace

        from evo_fsr.runner.harness import RunnerProcess
        from evo_fsr.runner.sandbox import SandboxPolicy

        def spawn_with(policy: SandboxPolicy) -> float:
            def once() -> None:
                work = Path(tempfile.mkdtemp(prefix="evo-fsr-bench-", dir="/dev/shm"))
                try:
                    (work / "job.json").write_text('{"args": [], "libs": {}}')
                    with RunnerProcess(work, policy=policy):
                        pass
                finally:
                    shutil.rmtree(work, ignore_errors=True)
            return _timed(once, args.repeats)
        base = SandboxPolicy.for_candidate()
        print(f"\nrunner spawn, all layers: {spawn_with(base):.3f}s")
        for layer in ("netns", "landlock", "drop_caps", "seccomp"):
            print(f"runner spawn without {layer:9s}: {spawn_with(replace(base, **{layer: False})):.3f}s")
        print(f"runner spawn, no layers: {spawn_with(SandboxPolicy.unconfined(base)):.3f}s")
    print(f"\n{'stage':10s} {'sandbox on':>12s} {'sandbox off':>12s} {'added':>10s}")
    for stage in rows["on"]:
        on, off = rows["on"][stage], rows["off"][stage]
        print(f"{stage:10s} {on:11.3f}s {off:11.3f}s {on - off:+9.3f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
