"""Where a verdict is reached: compile -> validate -> profile one candidate.

``Evaluator(task, config).evaluate(candidate)`` returns an ``EvalResult`` and never raises for a
bad candidate: compile errors, wrong answers, crashes, timeouts and protocol violations are
statuses with a reason code and logs.

The protocol (SECURITY.md states it in full):
- the candidate runs in a fresh, sandboxed runner process (runner/), one per candidate, that
  loads nothing but the candidate; the naive seed runs in a separate, long-lived, trusted
  baseline runner (bench.py);
- every launch buffer belongs to this process (memory.py), lent through CUDA IPC: inputs written
  and outputs poisoned here before each call, outputs copied out here after it (inputs.py);
- validation draws from every input distribution the task allows; every timed call has fresh
  secret inputs and is checked (session.py);
- the time a call is credited with is bounded by this process's own clock (profile.py).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ..runner import cores
from ..runner.harness import RunnerProcess
from ..runner.sandbox import SandboxPolicy
from ..runner.supply import RunnerStartFailed, RunnerSupply
from ..tasks import Shape, Task, get_task
from ..types import Candidate, EvalResult, GpuInfo, Status
from . import compile as nvcc
from . import gpu_idle, task_rules
from .bench import LAUNCH_BOUND_FACTOR, Workbench
from .gpu import gpu_info_from_probe
from .inputs import NP_DTYPES
from .memory import TrustedMemory, make_memory
from .batching import FUSABLE_FLOOR_MS
from .roofline import speed_of_light_ms
from .chain import CHAIN_LIB, chain_source
from .completion import MARK_LIB, mark_source
from .session import Session
from .stages import Stages, Verdict

log = logging.getLogger(__name__)

LIVE_LOG_WAIT_S = 0.02      # for the output of a runner killed after its last reply
#: ``EvalConfig.fresh_pool_retime`` from the environment (the GPU suites take no run config)
FRESH_POOL_ENV = "EVO_FSR_FRESH_POOL_RETIME"
#: ``EvalConfig.chain_windows`` off from the environment (``0``: the probes' comparisons)
CHAIN_WINDOWS_ENV = "EVO_FSR_CHAIN_WINDOWS"
#: an honest runner serves with one thread through its windows (runner/host_usage.py); the rest
#: is room for the CUDA driver's own threads. On an H200 (2026-12-03) honest runners read at
#: most 1.10 in any window and no shape of theirs was crowded over 1.00 (SECURITY.md)
WINDOW_CORES_LIMIT = 1.25
#: the runner's threads but the serving one (host_usage.others_share): the CUDA driver's threads and
#: the harness's arm timer in an honest runner. On an H200 (2026-12-04) honest seeds and legitimate
#: cases read 0.003-0.059 at the median (most 0.117 in any window); the spinners of suite v4, at
#: the serving thread's priority since confine.py refuses scheduling changes, 0.22-0.99 (SECURITY.md)
WINDOW_OTHERS_LIMIT = 0.15


@dataclass(frozen=True)
class EvalConfig:
    benchmark: str | None = None              # benchmark set name (None: the task's default)
    shapes: tuple[Shape, ...] = ()            # the user's own benchmark shapes (override the set)
    arch: str | None = None                   # nvcc target; None: the GPU's
    validation_seeds: int = 2                 # input sets per validation shape
    determinism_check: bool = True
    max_trials: int = 30                      # timed calls of the candidate per shape, at most
    min_trials: int = 10                      # and at least (each one checked)
    time_budget_s: float = 2.0                # per shape: timed windows until their median has spent it (windows.enough_windows)
    batch_max: int = 8                        # launches per timed window for short kernels, at most
    fusable_floor_ms: float = FUSABLE_FLOOR_MS  # shapes with a speed-of-light time under this: never batched
    launch_bound_factor: int = LAUNCH_BOUND_FACTOR  # such shapes: this many times max_trials and clean_calls
    min_windows: int = 16                     # timed windows per shape, at least
    baseline_every: int = 3                   # one interleaved baseline call per this many candidate calls
    clean_calls: int = 8                      # baseline calls per shape with no candidate code loaded
    clean_refresh: int = 50                   # candidates between two clean baseline measurements
    validation_timeout_s: float = 20.0        # one validation launch (reply) before TIMEOUT
    benchmark_timeout_s: float = 120.0
    candidate_budget_s: float = 120.0         # wall clock for one candidate's whole evaluation
    compile_timeout_s: float = 180.0
    cache_dir: str | None = str(nvcc.DEFAULT_CACHE_DIR)
    profile: bool = True                      # False: validate only (no timing)
    prespawn: bool = True                     # start the next candidate's runner ahead of time
    library: bool = True                      # time the vendor library (torch) per shape (lowest round; bench.py)
    allow_vendor_libraries: bool = False      # candidates may load cuBLAS, cuDNN, ... (reported)
    device: str = "cuda"                      # "fake": host memory and a fake runtime (CPU tests)
    probe_bytes: int = 512 * 2**20            # the bandwidth probe's copy size
    baseline_source: str | None = None        # the kernel speedups are relative to (None: the naive seed)
    gpu_shared: bool = False                  # other processes use this GPU: no idle gate (gpu_idle.py;
                                              # also EVO_FSR_GPU_SHARED=1)
    fresh_pool_retime: bool = False           # a shape charged twice: kill the candidate's runner, take a
                                              # fresh pool, judge both rounds against it (profile.time_shape;
                                              # also EVO_FSR_FRESH_POOL_RETIME=1). Off: on an H200 the one
                                              # honest charge it met stayed (SECURITY.md)
    chain_windows: bool = True                # launch-bound shapes: chain.CHAIN_CALLS calls a window, each
                                              # one's inputs drawn from the outputs of the one before
                                              # (chain.py; EVO_FSR_CHAIN_WINDOWS=0: one call a window)
    chain_twin_source: str | None = None      # the chained shapes' calibration twin (None: the task's
                                              # chain_twin seed; "" or no seed declared: the baseline)
    window_cores_limit: float = WINDOW_CORES_LIMIT  # host CPU per window second a candidate's runner may take
                                              # (runner/host_usage.py); over it in more than a quarter of one
                                              # shape's windows: flagged:host-threads
    window_others_limit: float = WINDOW_OTHERS_LIMIT  # of that, cores its threads but the serving one may
                                              # take (host_usage.others_share); judged alike
    pin_runners: bool = True                  # every runner on one core of its GPU's own, the evaluator's
                                              # thread off them (runner/cores.py; EVO_FSR_PIN_RUNNERS=0 or 1
                                              # overrides; off with a warning under 4 cores a GPU, and off
                                              # where gpu_shared)


def compile_failure_result(candidate: Candidate, compiled: nvcc.CompileResult,
                           reason: str = "compile_error") -> EvalResult:
    first = compiled.log.strip().splitlines()[0] if compiled.log.strip() else "compile failed"
    return EvalResult(candidate_id=candidate.id, task=candidate.task, status=Status.COMPILE_ERROR,
                      summary=("compile timed out" if compiled.timed_out else f"compile error: {first}")[:300],
                      logs=(("compile", compiled.log),), compile_seconds=compiled.seconds, reason=reason)


class Evaluator:
    """Evaluates candidates of one task on the GPU this process sees (device 0)."""

    def __init__(self, task: str | Task, config: EvalConfig | None = None) -> None:
        self.task = get_task(task) if isinstance(task, str) else task
        self.config = config or EvalConfig()
        self.bench_shapes = self.config.shapes or self.task.benchmark(self.config.benchmark)
        self._gpu: GpuInfo | None = None
        self._trusted_builds: dict[str, nvcc.CompileResult] = {}    # what -> binary (``_trusted_build``)
        self._bench: Workbench | None = None
        self._memory: TrustedMemory | None = None
        self.extra_files: tuple[Path, ...] = ()
        # candidates: file-by-file reads, no vendor library unless the user opts in; the baseline
        # (trusted code) gets the same walls without the opt-in
        self.policy = SandboxPolicy.for_candidate(allow_vendor_libraries=self.config.allow_vendor_libraries)
        self.baseline_policy = SandboxPolicy.for_candidate()
        if self.config.device == "fake":        # CPU tests: the runners share the fake memory's folder
            from ..testing.fake_device import FAKE_CUDART  # noqa: PLC0415 - CPU tests only
            self._memory = make_memory("fake")
            self.extra_files = (FAKE_CUDART,)
            shared = (str(self._memory.folder),)
            self.policy = replace(self.policy, extra_write=shared)
            self.baseline_policy = replace(self.baseline_policy, extra_write=shared)
        self.gpu_shared = self.config.gpu_shared or gpu_idle.shared_from_env()
        # a GPU shared on purpose has other processes' evaluators on it, and one runner core a GPU
        # would hold all their runners (runner/cores.py)
        if cores.pinning_requested(self.config.pin_runners) and not self.gpu_shared:
            plan = cores.pinned_plan()
            if plan is not None:
                self.policy = replace(self.policy, cpus=plan.runner)
                self.baseline_policy = replace(self.baseline_policy, cpus=plan.runner)
        self.runners = RunnerSupply(self._job("candidate"), prespawn=self.config.prespawn,
                                    extra_files=self.extra_files, policy=self.policy)

    def _job(self, lib: str) -> str:
        args = [{"name": a.name, "role": a.role, "dtype": a.dtype, "np_dtype": NP_DTYPES.get(a.dtype, "")}
                for a in self.task.args]
        libs = {lib: f"{lib}.so", CHAIN_LIB: f"{CHAIN_LIB}.so", MARK_LIB: f"{MARK_LIB}.so"}
        return json.dumps({"args": args, "libs": libs, "device": 0, "runtime": self.config.device})

    @property
    def bench(self) -> Workbench:
        if self._bench is None:
            memory = self._memory or make_memory(self.config.device)
            self._bench = Workbench(self.task, memory, self._job, self.extra_files, lambda: self.baseline.binary,
                                    self.config.clean_refresh, self.config.library, self.baseline_policy,
                                    gpu_shared=self.gpu_shared,
                                    chain_binary=(lambda: self.chain.binary) if self.chain_windows else None,
                                    chain_twin_binary=(lambda: self.chain_twin.binary) if self._chain_twin_source else None,
                                    mark_binary=lambda: self.mark.binary)
        return self._bench

    @property
    def gpu_info(self) -> GpuInfo:
        if self._gpu is None:
            reply = self.bench.baseline_runner.send({"op": "probe", "bytes": self.config.probe_bytes}, 120)
            if "error" in reply:
                raise RuntimeError(f"GPU probe failed: {reply['error']}")
            self._gpu = gpu_info_from_probe(reply)
            log.info("GPU: %s", self._gpu.describe())
        return self._gpu

    @property
    def arch(self) -> str:
        return self.config.arch or self.gpu_info.arch

    def compile(self, source: str) -> nvcc.CompileResult:
        if self.config.device == "fake":
            from ..testing.fake_device import compile_host  # noqa: PLC0415 - CPU tests only
            return compile_host(source, self.arch)          # the same dependency on the probe as nvcc
        return nvcc.compile_source(source, self.task.header(), self.arch, cache_dir=self.config.cache_dir,
                                   timeout_s=self.config.compile_timeout_s,
                                   allow_vendor_libraries=self.config.allow_vendor_libraries)

    @property
    def chain_windows(self) -> bool:
        return self.config.chain_windows and os.environ.get(CHAIN_WINDOWS_ENV, "") != "0"

    def _trusted_build(self, what: str, source: Callable[[], str]) -> nvcc.CompileResult:
        """Trusted code (the baseline, the chain library, the chain twin), compiled once, on first
        use; raises naming the task and ``what`` where it does not compile."""
        if what not in self._trusted_builds:
            result = self.compile(source())
            if not result.ok:
                raise RuntimeError(f"task {self.task.name}: {what} does not compile:\n{result.log}")
            self._trusted_builds[what] = result
        return self._trusted_builds[what]

    @property
    def chain(self) -> nvcc.CompileResult:
        """The chain library (chain.py)."""
        return self._trusted_build("the chain library",
                                   lambda: chain_source(self.task, fake=self.config.device == "fake"))

    @property
    def mark(self) -> nvcc.CompileResult:
        """The completion mark's library (completion.py)."""
        return self._trusted_build("the completion mark's library",
                                   lambda: mark_source(self.task, fake=self.config.device == "fake"))

    @property
    def _chain_twin_source(self) -> str:
        """The chained shapes' calibration twin's source ("": the baseline's twin)."""
        configured = self.config.chain_twin_source
        return (self.task.chain_twin_source or "") if configured is None else configured

    @property
    def chain_twin(self) -> nvcc.CompileResult:
        """The chain twin's binary (bench.py: ``ShapeBench.fast_twin``)."""
        return self._trusted_build(f"the chain twin ({self.task.chain_twin or 'configured'} seed)",
                                   lambda: self._chain_twin_source)

    @property
    def baseline(self) -> nvcc.CompileResult:
        return self._trusted_build("the naive seed", lambda: self.config.baseline_source or self.task.baseline_source)

    # -- the verdict --------------------------------------------------------------------
    def evaluate(self, candidate: Candidate, compiled: nvcc.CompileResult | None = None) -> EvalResult:
        compiled = compiled or self.compile(candidate.source)
        if not compiled.ok:
            return compile_failure_result(candidate, compiled)
        broken = task_rules.forbidden_instruction(self.task, compiled)     # before any of it runs
        if broken is not None:
            return compile_failure_result(candidate, replace(compiled, log=broken), task_rules.REASON)
        gpu, bench = self.gpu_info, self.bench
        start = time.perf_counter()
        stages = Stages()
        with stages.stage("reap"):
            self.runners.reap_dying()       # the previous candidate's runner is gone, with its GPU memory
        with stages.stage("allocate"):
            bench.allocate(self.task.validation, self.bench_shapes if self.config.profile else (), sweep=True)
        if self.config.profile:
            try:
                with stages.stage("clean_baseline"):     # no candidate code is loaded anywhere now
                    self._quiet()
                    bench.refresh_clean(self.bench_shapes, self.config.clean_calls, self.config.benchmark_timeout_s,
                                        floor_ms=lambda shape: speed_of_light_ms(self.task.flops_of(shape),
                                                                                 self.task.bytes_of(shape), gpu,
                                                                                 self.task.precision),
                                        batch_max=self.config.batch_max, every=self.config.baseline_every,
                                        fusable_floor_ms=self.config.fusable_floor_ms,
                                        launch_bound_factor=self.config.launch_bound_factor)
            except gpu_idle.GpuBusy as exc:         # nothing of the candidate's exists yet: not its failure
                log.error("%s before a candidate was loaded: is another process using this GPU?", exc)
                verdict = Verdict(Status.CRASH, gpu_idle.shared_gpu(exc, "before any of the candidate's code was "
                                                                         "loaded"), "crash:evaluator")
                return self._result(candidate, compiled, verdict, None, stages, gpu, time.perf_counter() - start)
        try:
            with stages.stage("startup"):
                work, runner = self.runners.take()
        except RunnerStartFailed as exc:        # before any of the candidate's code: not its failure
            log.error("%s", exc)
            verdict = Verdict(Status.CRASH, f"crash: the evaluator could not start a runner (the candidate's "
                                            f"code had not run): {str(exc)[-300:]}", "crash:evaluator")
            return self._result(candidate, compiled, verdict, None, stages, gpu, time.perf_counter() - start)
        respawned: list[tuple[Path, RunnerProcess]] = []
        try:
            with stages.stage("prepare"):
                (work / "candidate.so").write_bytes(compiled.binary)
                bench.write_runner_libs(work)
                self.runners.keep_ahead(1)      # if none was started after the previous timing

            def respawn() -> RunnerProcess:
                """A fresh runner of the same library (``Session._fresh_pool``)."""
                fresh_work, fresh = self.runners.take()
                respawned.append((fresh_work, fresh))
                (fresh_work / "candidate.so").write_bytes(compiled.binary)
                bench.write_runner_libs(fresh_work)
                return fresh

            fresh_pool = self.config.fresh_pool_retime or os.environ.get(FRESH_POOL_ENV, "") == "1"
            session = Session(bench, self.config, gpu, runner, self.bench_shapes, stages, quiet=self._quiet,
                              respawn=respawn if fresh_pool else None)
            verdict = session.run()
            for phase, ms in runner.startup_ms.items():     # this runner's own start-up (mostly ahead)
                stages.seconds[f"runner_start_{phase}"] = ms / 1e3
        finally:
            for used_work, used in [(work, runner), *respawned]:
                used.close(wait=False)          # its exit is awaited before the next candidate
                stages.logs.append(("run", used.log_text(join_timeout_s=LIVE_LOG_WAIT_S)))
                self.runners.reap_later(used)
                shutil.rmtree(used_work, ignore_errors=True)
            self.runners.timed_calls_done()
            bench.candidates += 1
        return self._result(candidate, compiled, verdict, session, stages, gpu, time.perf_counter() - start)

    def _quiet(self) -> None:
        """Before timing: nothing of ours starts or stops while a candidate is timed."""
        self.runners.reap_dying()
        self.runners.await_ahead()

    def _result(self, candidate: Candidate, compiled: nvcc.CompileResult, verdict: Verdict, session: Session | None,
                stages: Stages, gpu: GpuInfo, seconds: float) -> EvalResult:
        logs = [("compile", compiled.log)] if compiled.log else []
        logs += [(stage, text) for stage, text in stages.logs if text]
        return EvalResult(
            candidate_id=candidate.id, task=self.task.name, status=verdict.status, summary=verdict.summary,
            timings=verdict.timings, mismatch=verdict.mismatch, logs=tuple(logs), gpu_name=gpu.name,
            compile_seconds=compiled.seconds, evaluate_seconds=seconds,
            counters=tuple(stages.counters.items()),
            stage_seconds=tuple((k, round(v, 4)) for k, v in stages.seconds.items()),
            reason=verdict.reason, resources=tuple(compiled.resources),
            vendor_libraries=session.vendor_libraries if session is not None else ())

    def close(self) -> None:
        """Stop the runners (also done at interpreter exit)."""
        self.runners.close()
        if self._bench is not None:
            self._bench.close()
            self._bench = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: best effort
            pass


__all__ = ["EvalConfig", "Evaluator", "compile_failure_result"]
