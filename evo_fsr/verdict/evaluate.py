"""Where a verdict is reached: compile -> validate -> profile one candidate.

``Evaluator(task, config).evaluate(candidate)`` returns an ``EvalResult`` and never raises for a
bad candidate: compile errors, wrong answers, crashes and timeouts are statuses with logs.

One fresh, sandboxed runner process per candidate (harness.py / runner.py) loads the
candidate and the task's naive seed.  The trusted side (this module) generates the inputs,
computes the float64 reference, compares raw outputs (validate.py) and turns raw times into
statistics and flags (profile.py).

Stages:
 1. validation: every validation shape x ``validation_seeds`` fresh seeded inputs, NaN-poisoned
    outputs, inputs checked unchanged; the first mismatch ends it (WRONG);
 2. determinism: the first validation input set again, outputs must be bitwise equal (races,
    uninitialised reads);
 3. benchmark: per benchmark shape, candidate and baseline timed interleaved; every timed call
    sees inputs it has not seen before (the benchmark set rotated by a secret offset per trial),
    and the candidate's outputs of two secretly chosen timed calls are checked against the
    reference (a kernel must not special-case the timed shape, cache its outputs or skip work).

The runners come from ``runner_supply.RunnerSupply``: the next candidate's runner is started
ahead, the previous one is reaped before the next candidate runs, and nothing of ours starts or
stops while a candidate is timed.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import random
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from . import compile as nvcc
from . import profile
from .gpu import gpu_info_from_probe
from ..runner.harness import RunnerDied, RunnerProcess, RunnerTimeout
from ..runner.supply import RunnerSupply, scratch_root
from ..tasks import Shape, Task, get_task
from ..types import Candidate, EvalResult, GpuInfo, Mismatch, ShapeTiming, Status, geometric_mean
from .validate import check_outputs, compare_inputs_unchanged

log = logging.getLogger(__name__)

NP_DTYPES = {"float32": "<f4", "float64": "<f8", "float16": "<f2", "bfloat16": "<u2", "int8": "i1",
             "uint8": "u1", "int32": "<i4", "uint32": "<u4", "int64": "<i8"}
BENCHMARK_SEED = 20250101
LIVE_LOG_WAIT_S = 0.02      # for the output of a runner killed after its last reply


@dataclass(frozen=True)
class EvalConfig:
    benchmark: str | None = None              # benchmark set name (None: the task's default)
    shapes: tuple[Shape, ...] = ()            # the user's own benchmark shapes (override the set)
    arch: str | None = None                   # nvcc target; None: the GPU's
    validation_seeds: int = 2
    validation_seed: int | None = None        # None: fresh per evaluation (recorded in counters)
    determinism_check: bool = True
    max_trials: int = 50
    min_trials: int = 10
    warmup: int = 1                           # untimed calls of each kernel per shape (module load, caches)
    time_budget_s: float = 2.0                # per benchmark shape, both kernels together
    validation_timeout_s: float = 20.0        # one validation launch (reply) before TIMEOUT
    benchmark_timeout_s: float = 120.0
    compile_timeout_s: float = 180.0
    cache_dir: str | None = str(nvcc.DEFAULT_CACHE_DIR)
    reference_device: str = "auto"            # "auto" (CuPy for benchmark shapes if present) | "cpu"
    profile: bool = True                      # False: validate only (no timing)
    checked_timed_calls: int = 2              # timed calls per shape whose outputs are checked
    prespawn: bool = True                     # start the next candidate's runner ahead of time
    extra: tuple[tuple[str, Any], ...] = field(default=())


def compile_failure_result(candidate: Candidate, compiled: nvcc.CompileResult) -> EvalResult:
    first = compiled.log.strip().splitlines()[0] if compiled.log.strip() else "compile failed"
    return EvalResult(candidate_id=candidate.id, task=candidate.task, status=Status.COMPILE_ERROR,
                      summary=("compile timed out" if compiled.timed_out else f"compile error: {first}")[:300],
                      logs=(("compile", compiled.log),), compile_seconds=compiled.seconds)


class Evaluator:
    """Evaluates candidates of one task on the GPU this process sees (device 0)."""

    def __init__(self, task: str | Task, config: EvalConfig | None = None) -> None:
        self.task = get_task(task) if isinstance(task, str) else task
        self.config = config or EvalConfig()
        self.bench_shapes = self.config.shapes or self.task.benchmark(self.config.benchmark)
        self._gpu: GpuInfo | None = None
        self._baseline: nvcc.CompileResult | None = None
        self._bench_inputs: dict[str, dict[str, np.ndarray]] = {}
        self._bench_cache: dict[str, tuple[dict[str, np.ndarray], dict[str, Any]]] = {}
        self._plans: dict[str, TimingPlan] = {}
        # secret per evaluator: which rotations the timed calls see and which of them are checked
        self._plan_rng = random.Random(secrets.randbits(64))
        self.runners = RunnerSupply(self._job_json(), prespawn=self.config.prespawn)

    # -- lazily probed ------------------------------------------------------------------
    @property
    def gpu_info(self) -> GpuInfo:
        if self._gpu is None:
            work = Path(tempfile.mkdtemp(prefix="evo-fsr-probe-", dir=scratch_root()))
            try:
                (work / "job.json").write_text('{"args": [], "libs": {}}')
                with RunnerProcess(work) as runner:
                    reply = runner.send({"op": "probe"}, timeout_s=120)
                if "error" in reply:
                    raise RuntimeError(f"GPU probe failed: {reply['error']}")
                self._gpu = gpu_info_from_probe(reply)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            log.info("GPU: %s", self._gpu.describe())
        return self._gpu

    @property
    def arch(self) -> str:
        return self.config.arch or self.gpu_info.arch

    def compile(self, source: str) -> nvcc.CompileResult:
        return nvcc.compile_source(source, self.task.header(), self.arch, cache_dir=self.config.cache_dir,
                                   timeout_s=self.config.compile_timeout_s)

    @property
    def baseline(self) -> nvcc.CompileResult:
        if self._baseline is None:
            result = self.compile(self.task.baseline_source)
            if not result.ok:
                raise RuntimeError(f"task {self.task.name}: the naive seed does not compile:\n{result.log}")
            self._baseline = result
        return self._baseline

    # -- the verdict --------------------------------------------------------------------
    def evaluate(self, candidate: Candidate, compiled: nvcc.CompileResult | None = None) -> EvalResult:
        compiled = compiled or self.compile(candidate.source)
        if not compiled.ok:
            return compile_failure_result(candidate, compiled)
        gpu, baseline = self.gpu_info, self.baseline
        start = time.perf_counter()
        self.runners.reap_dying()       # the previous candidate's runner is gone, with its GPU memory
        reaped = time.perf_counter()
        work, runner = self.runners.take()
        session = _Session(self, candidate, work)
        session.stage_seconds["reap"] = reaped - start
        session.stage_seconds["startup"] = time.perf_counter() - reaped
        try:
            with session._stage("prepare"):
                (work / "candidate.so").write_bytes(compiled.binary)
                (work / "baseline.so").write_bytes(baseline.binary)
                self.runners.keep_ahead(1)      # if none was started after the previous timing
            status, summary, mismatch, timings = session.run(runner)
            for phase, ms in runner.startup_ms.items():     # this runner's own start-up (mostly ahead)
                session.stage_seconds[f"runner_start_{phase}"] = ms / 1e3
        finally:
            self.runners.timed_calls_done()
            with session._stage("cleanup"):
                shutil.rmtree(work, ignore_errors=True)
        logs = [("compile", compiled.log)] if compiled.log else []
        logs += [(stage, text) for stage, text in session.logs if text]
        return EvalResult(
            candidate_id=candidate.id, task=self.task.name, status=status, summary=summary,
            timings=tuple(timings), mismatch=mismatch, logs=tuple(logs), gpu_name=gpu.name,
            compile_seconds=compiled.seconds, evaluate_seconds=time.perf_counter() - start,
            counters=tuple(session.counters.items()),
            stage_seconds=tuple((k, round(v, 4)) for k, v in session.stage_seconds.items()))

    def close(self) -> None:
        """Stop the runners started ahead (also done at interpreter exit)."""
        self.runners.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: best effort
            pass

    def _job_json(self) -> str:
        args = [{"name": a.name, "role": a.role, "dtype": a.dtype, "np_dtype": NP_DTYPES.get(a.dtype, "")}
                for a in self.task.args]
        return json.dumps({"args": args, "libs": {"candidate": "candidate.so", "baseline": "baseline.so"},
                           "device": 0})

    # -- inputs and references (trusted side) -------------------------------------------
    def make_case(self, shape: Shape, seed: int) -> dict[str, np.ndarray]:
        inputs = self.task.make_inputs(shape.env, np.random.default_rng(seed), shape.case)
        for arg in self.task.args:
            if arg.role in ("input", "inout"):
                want = np.dtype(NP_DTYPES[arg.dtype])
                array = inputs.get(arg.name)
                if array is None or array.dtype != want or array.shape != arg.dims_of(shape.env):
                    raise RuntimeError(f"task {self.task.name}: make_inputs gave {arg.name} as "
                                       f"{getattr(array, 'dtype', None)} {getattr(array, 'shape', None)}, "
                                       f"declared {want} {arg.dims_of(shape.env)}")
        return inputs

    def reference_for(self, inputs: dict[str, np.ndarray], shape: Shape, xp: Any = np) -> dict[str, Any]:
        """float64 reference outputs, as ``xp`` arrays (NumPy on the CPU or CuPy on the GPU)."""
        if xp is np:
            return {k: np.asarray(v) for k, v in self.task.reference(inputs, shape.env, xp=np).items()}
        ref = self.task.reference({k: xp.asarray(v) for k, v in inputs.items()}, shape.env, xp=xp)
        return {k: xp.asarray(v) for k, v in ref.items()}

    def benchmark_inputs(self, shape: Shape) -> dict[str, np.ndarray]:
        """The benchmark input set of a shape (fixed seed), made once per evaluator."""
        if shape.label not in self._bench_inputs:
            self._bench_inputs[shape.label] = self.make_case(shape, BENCHMARK_SEED)
        return self._bench_inputs[shape.label]

    def benchmark_case(self, shape: Shape) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Benchmark inputs and their reference (on the GPU when CuPy is used, ``self.bench_xp``),
        computed once per evaluator."""
        key = shape.label
        if key not in self._bench_cache:
            inputs = self.benchmark_inputs(shape)
            self._bench_cache[key] = (inputs, self.reference_for(inputs, shape, self.bench_xp))
        return self._bench_cache[key]

    def timing_plan(self, shape: Shape) -> "TimingPlan":
        """Per trial, the element rotation of each input (all distinct, none zero where the buffer
        allows), and the trials whose candidate outputs are checked; secret, fixed per evaluator
        so that the references of the checked calls are computed once."""
        if shape.label not in self._plans:
            rng = self._plan_rng
            sizes = [int(np.prod(a.dims_of(shape.env), dtype=np.int64)) for a in self.task.args
                     if a.role in ("input", "inout")]
            trials = max(self.config.max_trials, self.config.min_trials)
            rotations: list[tuple[int, ...]] = []
            seen: set[tuple[int, ...]] = set()
            for _ in range(trials):
                offsets = tuple(rng.randrange(1, n) if n > 1 else 0 for n in sizes)
                for _retry in range(8):               # distinct input sets where the sizes allow it
                    if offsets not in seen:
                        break
                    offsets = tuple(rng.randrange(1, n) if n > 1 else 0 for n in sizes)
                seen.add(offsets)
                rotations.append(offsets)
            window = max(1, min(self.config.min_trials, trials))
            count = max(1, min(self.config.checked_timed_calls, window))
            checks = tuple(sorted(rng.sample(range(window), count)))
            self._plans[shape.label] = TimingPlan(tuple(rotations), checks, checks[0])
        return self._plans[shape.label]

    def checked_case(self, shape: Shape, trial: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Inputs of timed call ``trial`` (the benchmark set, rotated) and their reference."""
        key = f"{shape.label}@{trial}"
        if key not in self._bench_cache:
            offsets = self.timing_plan(shape).rotations[trial]
            base = self.benchmark_inputs(shape)
            names = [a.name for a in self.task.args if a.role in ("input", "inout")]
            rotated = {name: np.roll(base[name].reshape(-1), -off).reshape(base[name].shape)
                       for name, off in zip(names, offsets)}
            rotated.update({k: v for k, v in base.items() if k not in rotated})
            self._bench_cache[key] = (rotated, self.reference_for(rotated, shape, self.bench_xp))
        return self._bench_cache[key]

    @functools.cached_property
    def bench_xp(self) -> Any:
        """CuPy for benchmark references and comparisons when usable, else NumPy."""
        if self.config.reference_device == "cpu":
            return np
        try:
            import cupy  # noqa: PLC0415 - optional; only the trusted evaluator process imports it
            if cupy.cuda.runtime.getDeviceCount() > 0:
                return cupy
        except Exception:  # noqa: BLE001 - no CuPy or no usable GPU: NumPy on the CPU
            log.info("CuPy unavailable: benchmark references computed with NumPy on the CPU")
        return np


@dataclass(frozen=True)
class TimingPlan:
    """What the timed calls of one benchmark shape see, and which of them are checked."""

    rotations: tuple[tuple[int, ...], ...]     # per trial: element offset of each input buffer
    check_trials: tuple[int, ...]              # trials whose candidate outputs are checked
    inputs_after_trial: int                    # trial after which the inputs must be unchanged


class _Session:
    """One candidate's run through the stages; collects logs and counters."""

    def __init__(self, evaluator: Evaluator, candidate: Candidate, work: Path) -> None:
        self.ev, self.task, self.cfg = evaluator, evaluator.task, evaluator.config
        self.candidate, self.work = candidate, work
        self.logs: list[tuple[str, str]] = []
        self.counters: dict[str, int] = {}
        self.stage_seconds: dict[str, float] = {}
        self._case_count = 0
        self._where = "starting"          # the stage, for crash and timeout summaries

    @contextlib.contextmanager
    def _stage(self, name: str) -> Iterator[None]:
        """Wall seconds per stage, summed (``EvalResult.stage_seconds``)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stage_seconds[name] = self.stage_seconds.get(name, 0.0) + time.perf_counter() - start

    def run(self, runner: RunnerProcess) -> tuple[Status, str, Mismatch | None, list[ShapeTiming]]:
        seed = self.cfg.validation_seed if self.cfg.validation_seed is not None else secrets.randbelow(2**31)
        self.counters["validation_seed"] = seed
        died = False
        try:
            with self._stage("startup"):
                runner.ready()
            verdict = self._validate(runner, seed)
            if verdict is None and self.cfg.profile:
                return self._benchmark(runner)
            if verdict is None:
                return Status.OK, f"correct on {len(self.task.validation)} validation shapes (not timed)", None, []
            return verdict
        except RunnerTimeout as exc:
            died = True
            return Status.TIMEOUT, f"timeout: {exc} ({self._where})", None, []
        except RunnerDied as exc:
            died = True
            return Status.CRASH, f"crash: {exc} ({self._where})", None, []
        finally:
            with self._stage("close"):
                runner.close(wait=False)           # its exit is awaited before the next timing
                # a runner that answered everything has written all it will (its output is in the
                # pipe): no need to wait for the end of the output, which comes only once the
                # killed process has torn down its CUDA context
                self.logs.append(("run", runner.log_text(join_timeout_s=1.0 if died else LIVE_LOG_WAIT_S)))
                self.ev.runners.reap_later(runner)

    # -- stages ---------------------------------------------------------------------------
    def _case(self, inputs: dict[str, np.ndarray], folder: Path | None = None) -> Path:
        """A fresh folder holding the inputs as .npy files, for the runner to read."""
        if folder is None:
            self._case_count += 1
            folder = self.work / f"case{self._case_count}"
        folder.mkdir()
        for name, array in inputs.items():
            np.save(folder / f"{name}.npy", array)
        return folder

    def _add_runner_phases(self, prefix: str, reply: dict[str, Any]) -> None:
        """The runner's own phase times (``phase_ms``) as ``runner_[<prefix>_]<phase>`` stages."""
        for phase, ms in (reply.get("phase_ms") or {}).items():
            key = f"runner_{prefix + '_' if prefix else ''}{phase}"
            self.stage_seconds[key] = self.stage_seconds.get(key, 0.0) + float(ms) / 1e3

    def _spec(self, shape: Shape) -> dict[str, Any]:
        """Buffer shapes and scalar values of ``launch`` for one shape (part of a command)."""
        return {"shapes": {a.name: list(a.dims_of(shape.env)) for a in self.task.args if a.is_buffer},
                "scalars": {a.name: _scalar(a.value(shape.env), a.dtype) for a in self.task.args
                            if a.role == "scalar" and a.value is not None}}

    def _launch(self, runner: RunnerProcess, lib: str, shape: Shape, folder: Path,
                timeout_s: float) -> dict[str, np.ndarray] | str:
        """One launch on fresh buffers from ``folder``: the raw outputs (and the inputs as they came
        back, as ``after:<name>``), or an error."""
        reply = runner.send({"op": "run", "lib": lib, "dir": folder.name, **self._spec(shape)}, timeout_s)
        self._add_runner_phases("run", reply)
        if "error" in reply:
            return f"{reply.get('cuda_error') or 'error'}: {reply['error']}"
        if reply["rc"] != 0 or reply["last_error"] != 0:
            return (f"launch returned {reply['rc']}, last CUDA error {reply['last_error']} "
                    f"{reply.get('last_error_name', '')}").strip()
        raw = {}
        for arg in self.task.args:
            if arg.role in ("output", "inout"):
                raw[arg.name] = np.load(folder / f"out_{arg.name}.npy")
            elif arg.role == "input":
                raw["after:" + arg.name] = np.load(folder / f"after_{arg.name}.npy")
        return raw

    def _launch_fresh(self, runner: RunnerProcess, shape: Shape, inputs: dict[str, np.ndarray],
                      timeout_s: float) -> dict[str, np.ndarray] | str:
        folder = self._case(inputs)
        try:
            return self._launch(runner, "candidate", shape, folder, timeout_s)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _check(self, raw: dict[str, np.ndarray], inputs: dict[str, np.ndarray], expected: dict[str, Any],
               shape: Shape, xp: Any = np) -> Mismatch | None:
        read_only = {a.name: inputs[a.name] for a in self.task.args if a.role == "input" and "after:" + a.name in raw}
        changed = compare_inputs_unchanged(read_only, {k: raw["after:" + k] for k in read_only}, shape.label)
        if changed:
            return changed
        outputs = {k: xp.asarray(v) for k, v in raw.items() if not k.startswith("after:")}
        return check_outputs(outputs, expected, inputs, shape.env, self.task.tol, shape.label,
                             exact=self.task.precision == "exact", custom_compare=self.task.custom_compare, xp=xp)

    def _validate(self, runner: RunnerProcess, seed: int) -> tuple[Status, str, Mismatch | None, list] | None:
        # issue 4: the determinism re-run covers every validation shape (a race or uninitialised
        # read may show only on larger shapes), one input set per shape
        firsts: list[tuple[Shape, dict[str, np.ndarray], dict[str, np.ndarray]]] = []
        with self._stage("validate"):
            for s_index, shape in enumerate(self.task.validation):
                for trial in range(self.cfg.validation_seeds):
                    self._where = f"validation shape {shape.label}"
                    with self._stage("validate_inputs"):
                        inputs = self.ev.make_case(shape, seed + 7919 * s_index + 104729 * trial)
                    raw = self._launch_fresh(runner, shape, inputs, self.cfg.validation_timeout_s)
                    self.counters["validation_launches"] = self.counters.get("validation_launches", 0) + 1
                    if isinstance(raw, str):
                        return Status.CRASH, f"crash: {raw} ({self._where})", None, []
                    with self._stage("validate_check"):
                        expected = self.ev.reference_for(inputs, shape)
                        mismatch = self._check(raw, inputs, expected, shape)
                    if mismatch:
                        return Status.WRONG, f"wrong result: {mismatch.describe()}", mismatch, []
                    if trial == 0:
                        firsts.append((shape, inputs, raw))
        with self._stage("determinism"):
            for shape, inputs, raw in (firsts if self.cfg.determinism_check else []):
                self._where = f"determinism re-run on {shape.label}"
                again = self._launch_fresh(runner, shape, inputs, self.cfg.validation_timeout_s)
                if isinstance(again, str):
                    return Status.CRASH, f"crash: {again} ({self._where})", None, []
                mismatch = _first_difference(shape.label, raw, again)
                if mismatch:
                    return Status.WRONG, f"wrong result: {mismatch.describe()}", mismatch, []
        return None

    def _benchmark(self, runner: RunnerProcess) -> tuple[Status, str, Mismatch | None, list[ShapeTiming]]:
        gpu = self.ev.gpu_info
        # nothing of ours starts, stops or drives the GPU while the candidate is timed
        with self._stage("quiet_reap"):
            self.ev.runners.reap_dying()    # runners killed since this candidate began
        with self._stage("quiet_ahead"):
            self.ev.runners.await_ahead()   # the start-up of the runners ahead
        timings: list[ShapeTiming] = []
        for index, shape in enumerate(self.ev.bench_shapes):
            self._where = f"benchmark shape {shape.label}"
            plan = self.ev.timing_plan(shape)
            with self._stage("bench_inputs"):
                folder = self._case(self.ev.benchmark_inputs(shape))
            with self._stage("timing"):
                reply = runner.send({
                    "op": "time", "lib": ["candidate", "baseline"], "dir": folder.name, **self._spec(shape),
                    "max_trials": self.cfg.max_trials, "min_trials": self.cfg.min_trials,
                    "budget_s": self.cfg.time_budget_s, "warmup": self.cfg.warmup,
                    "rotations": [list(r) for r in plan.rotations], "check_trials": list(plan.check_trials),
                    "inputs_after_trial": plan.inputs_after_trial,
                }, self.cfg.benchmark_timeout_s + 10 * self.cfg.time_budget_s)
            if index == len(self.ev.bench_shapes) - 1:
                self.ev.runners.timed_calls_done()  # a runner ahead starts while the outputs are checked
            if "error" in reply:
                shutil.rmtree(folder, ignore_errors=True)
                return Status.CRASH, f"crash while timing: {reply['error']} ({self._where})", None, timings
            self._add_runner_phases("", reply)
            self.stage_seconds["timed_gpu"] = self.stage_seconds.get("timed_gpu", 0.0) + sum(
                sum(v) for v in reply["event_ms"].values()) / 1e3
            with self._stage("timed_check"):
                verdict = self._check_timed_calls(shape, plan, folder, reply)
            shutil.rmtree(folder, ignore_errors=True)
            if verdict is not None:
                return (*verdict, timings)
            floor = profile.speed_of_light_ms(self.task.flops_of(shape), self.task.bytes_of(shape), gpu,
                                              self.task.precision)
            timings.append(profile.summarise(shape.label, reply["event_ms"], reply["host_ms"], floor))
            self.counters["timed_trials"] = self.counters.get("timed_trials", 0) + timings[-1].trials
        flagged = [f"{t.shape_label}: {flag}" for t in timings for flag in t.flags]
        geomean = geometric_mean([t.speedup for t in timings])
        if flagged:
            self.logs.append(("profile", "\n".join(flagged)))
            return Status.FLAGGED, f"timing not credible: {flagged[0]}", None, timings
        return Status.OK, (f"correct; {geomean:.3g}x geomean speedup over naive on {len(timings)} shapes"), None, timings

    def _check_timed_calls(self, shape: Shape, plan: TimingPlan, folder: Path,
                           reply: dict[str, Any]) -> tuple[Status, str, Mismatch | None] | None:
        """The candidate's outputs of the checked timed calls against the reference of the inputs
        those calls saw.  Wrong on every checked call: wrong on the benchmark shape; wrong on some
        only: outputs cached across calls or work skipped."""
        taken = {int(t) for t in reply.get("snapshots", ())}
        missing = [t for t in plan.check_trials if t not in taken]
        if missing:
            return (Status.CRASH, f"crash: the runner returned no outputs of checked timed call(s) {missing} "
                                  f"({self._where})", None)
        outputs = [a.name for a in self.task.args if a.role in ("output", "inout")]
        inputs_checked = [a.name for a in self.task.args if a.role == "input"]
        failures: list[tuple[int, Mismatch]] = []
        for trial in plan.check_trials:
            inputs, expected = self.ev.checked_case(shape, trial)
            raw = {name: np.load(folder / f"snap{trial}_{name}.npy") for name in outputs}
            if trial == plan.inputs_after_trial:
                raw.update({"after:" + name: np.load(folder / f"after{trial}_{name}.npy") for name in inputs_checked})
            mismatch = self._check(raw, inputs, expected, shape, self.ev.bench_xp)
            if mismatch is not None:
                if mismatch.output.startswith("input:"):
                    return Status.WRONG, f"wrong result on a benchmark shape: {mismatch.describe()}", mismatch
                failures.append((trial, mismatch))
        if not failures:
            return None
        trial, mismatch = failures[0]
        if len(failures) == len(plan.check_trials):
            return Status.WRONG, f"wrong result on a benchmark shape: {mismatch.describe()}", mismatch
        return (Status.WRONG, f"wrong result while timing (output cached across calls or work skipped?), "
                              f"timed call {trial}: {mismatch.describe()}", mismatch)


def _first_difference(label: str, first: dict[str, np.ndarray], again: dict[str, np.ndarray]) -> Mismatch | None:
    """The first bit that differs between two runs on the same inputs (outputs only)."""
    for name, out in first.items():
        if name.startswith("after:"):
            continue
        differ = np.flatnonzero(out.reshape(-1).view(np.uint8) != again[name].reshape(-1).view(np.uint8))
        if differ.size:
            i = int(differ[0]) // out.dtype.itemsize
            index = tuple(int(v) for v in np.unravel_index(i, out.shape))
            return Mismatch(label, name, index, float(again[name].reshape(-1)[i]), float(out.reshape(-1)[i]),
                            "non-deterministic: a second run on the same inputs differs "
                            "(data race or uninitialised read?)")
    return None


def _scalar(value: Any, dtype: str) -> int | float:
    return int(value) if dtype.startswith("int") else float(value)
