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
 3. benchmark: per benchmark shape, outputs checked once more against the reference (a kernel
    must not special-case the timed shape), then candidate and baseline timed interleaved.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import compile as nvcc
from . import profile
from .gpu import gpu_info_from_probe
from .harness import RunnerDied, RunnerProcess, RunnerTimeout
from .tasks import Shape, Task, get_task
from .types import Candidate, EvalResult, GpuInfo, Mismatch, ShapeTiming, Status, geometric_mean
from .validate import check_outputs, compare_inputs_unchanged

log = logging.getLogger(__name__)

NP_DTYPES = {"float32": "<f4", "float64": "<f8", "float16": "<f2", "bfloat16": "<u2", "int8": "i1",
             "uint8": "u1", "int32": "<i4", "uint32": "<u4", "int64": "<i8"}
BENCHMARK_SEED = 20250101


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
    warmup: int = 3
    time_budget_s: float = 2.0                # per benchmark shape, both kernels together
    validation_timeout_s: float = 20.0        # one validation launch (reply) before TIMEOUT
    benchmark_timeout_s: float = 120.0
    compile_timeout_s: float = 180.0
    cache_dir: str | None = str(nvcc.DEFAULT_CACHE_DIR)
    reference_device: str = "auto"            # "auto" (CuPy for benchmark shapes if present) | "cpu"
    profile: bool = True                      # False: validate only (no timing)
    extra: tuple[tuple[str, Any], ...] = field(default=())


def compile_failure_result(candidate: Candidate, compiled: nvcc.CompileResult) -> EvalResult:
    first = compiled.log.strip().splitlines()[0] if compiled.log.strip() else "compile failed"
    return EvalResult(candidate_id=candidate.id, task=candidate.task, status=Status.COMPILE_ERROR,
                      summary=("compile timed out" if compiled.timed_out else f"compile error: {first}")[:300],
                      logs=(("compile", compiled.log),), compile_seconds=compiled.seconds)


def _scratch_root() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


class Evaluator:
    """Evaluates candidates of one task on the GPU this process sees (device 0)."""

    def __init__(self, task: str | Task, config: EvalConfig | None = None) -> None:
        self.task = get_task(task) if isinstance(task, str) else task
        self.config = config or EvalConfig()
        self.bench_shapes = self.config.shapes or self.task.benchmark(self.config.benchmark)
        self._gpu: GpuInfo | None = None
        self._baseline: nvcc.CompileResult | None = None
        self._bench_cache: dict[str, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = {}

    # -- lazily probed ------------------------------------------------------------------
    @property
    def gpu_info(self) -> GpuInfo:
        if self._gpu is None:
            work = Path(tempfile.mkdtemp(prefix="evo-fsr-probe-", dir=_scratch_root()))
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
        work = Path(tempfile.mkdtemp(prefix="evo-fsr-cand-", dir=_scratch_root()))
        session = _Session(self, candidate, work)
        try:
            (work / "candidate.so").write_bytes(compiled.binary)
            (work / "baseline.so").write_bytes(baseline.binary)
            (work / "job.json").write_text(self._job_json())
            status, summary, mismatch, timings = session.run()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        logs = [("compile", compiled.log)] if compiled.log else []
        logs += [(stage, text) for stage, text in session.logs if text]
        return EvalResult(
            candidate_id=candidate.id, task=self.task.name, status=status, summary=summary,
            timings=tuple(timings), mismatch=mismatch, logs=tuple(logs), gpu_name=gpu.name,
            compile_seconds=compiled.seconds, evaluate_seconds=time.perf_counter() - start,
            counters=tuple(session.counters.items()))

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

    def benchmark_case(self, shape: Shape, variant: int = 0) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Inputs (fixed seed) and reference of a benchmark shape, computed once per evaluator;
        the reference stays on the GPU when CuPy is used (``self.bench_xp``).  ``variant`` 1 is the
        second input set that alternates with the first while timing (issue 4)."""
        key = shape.label if variant == 0 else f"{shape.label}#{variant}"
        if key not in self._bench_cache:
            inputs = self.make_case(shape, BENCHMARK_SEED + variant)
            self._bench_cache[key] = (inputs, self.reference_for(inputs, shape, self.bench_xp))
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


class _Session:
    """One candidate's run through the stages; collects logs and counters."""

    def __init__(self, evaluator: Evaluator, candidate: Candidate, work: Path) -> None:
        self.ev, self.task, self.cfg = evaluator, evaluator.task, evaluator.config
        self.candidate, self.work = candidate, work
        self.logs: list[tuple[str, str]] = []
        self.counters: dict[str, int] = {}
        self._case_count = 0
        self._where = "starting"          # the stage, for crash and timeout summaries

    def run(self) -> tuple[Status, str, Mismatch | None, list[ShapeTiming]]:
        seed = self.cfg.validation_seed if self.cfg.validation_seed is not None else secrets.randbelow(2**31)
        self.counters["validation_seed"] = seed
        runner: RunnerProcess | None = None
        try:
            runner = RunnerProcess(self.work)
            verdict = self._validate(runner, seed)
            if verdict is None and self.cfg.profile:
                return self._benchmark(runner)
            if verdict is None:
                return Status.OK, f"correct on {len(self.task.validation)} validation shapes (not timed)", None, []
            return verdict
        except RunnerTimeout as exc:
            return Status.TIMEOUT, f"timeout: {exc} ({self._where})", None, []
        except RunnerDied as exc:
            return Status.CRASH, f"crash: {exc} ({self._where})", None, []
        finally:
            if runner is not None:
                runner.close()
                self.logs.append(("run", runner.log_text()))

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
        for s_index, shape in enumerate(self.task.validation):
            for trial in range(self.cfg.validation_seeds):
                self._where = f"validation shape {shape.label}"
                inputs = self.ev.make_case(shape, seed + 7919 * s_index + 104729 * trial)
                raw = self._launch_fresh(runner, shape, inputs, self.cfg.validation_timeout_s)
                self.counters["validation_launches"] = self.counters.get("validation_launches", 0) + 1
                if isinstance(raw, str):
                    return Status.CRASH, f"crash: {raw} ({self._where})", None, []
                expected = self.ev.reference_for(inputs, shape)
                mismatch = self._check(raw, inputs, expected, shape)
                if mismatch:
                    return Status.WRONG, f"wrong result: {mismatch.describe()}", mismatch, []
                if trial == 0:
                    firsts.append((shape, inputs, raw))
        for shape, inputs, raw in (firsts if self.cfg.determinism_check else []):
            self._where = f"determinism re-run on {shape.label}"
            again = self._launch_fresh(runner, shape, inputs, self.cfg.validation_timeout_s)
            if isinstance(again, str):
                return Status.CRASH, f"crash: {again} ({self._where})", None, []
            for name, out in raw.items():
                if name.startswith("after:"):
                    continue
                differ = np.flatnonzero(out.reshape(-1).view(np.uint8) != again[name].reshape(-1).view(np.uint8))
                if differ.size:
                    i = int(differ[0]) // out.dtype.itemsize
                    index = tuple(int(v) for v in np.unravel_index(i, out.shape))
                    mismatch = Mismatch(shape.label, name, index, float(again[name].reshape(-1)[i]),
                                        float(out.reshape(-1)[i]),
                                        "non-deterministic: a second run on the same inputs differs "
                                        "(data race or uninitialised read?)")
                    return Status.WRONG, f"wrong result: {mismatch.describe()}", mismatch, []
        return None

    def _benchmark(self, runner: RunnerProcess) -> tuple[Status, str, Mismatch | None, list[ShapeTiming]]:
        gpu = self.ev.gpu_info
        timings: list[ShapeTiming] = []
        for shape in self.ev.bench_shapes:
            self._where = f"benchmark shape {shape.label}"
            inputs, expected = self.ev.benchmark_case(shape)
            alt_inputs, alt_expected = self.ev.benchmark_case(shape, variant=1)   # issue 4
            # one folder per shape: the checked launch and the timing read the same input files
            # (were they changed in between, the timed outputs below would no longer match)
            folder = self._case(inputs)
            self._case(alt_inputs, folder / "alt")
            raw = self._launch(runner, "candidate", shape, folder, self.cfg.benchmark_timeout_s)
            if isinstance(raw, str):
                return Status.CRASH, f"crash: {raw} ({self._where})", None, timings
            mismatch = self._check(raw, inputs, expected, shape, self.ev.bench_xp)
            if mismatch:
                return Status.WRONG, f"wrong result on a benchmark shape: {mismatch.describe()}", mismatch, timings
            reply = runner.send({
                "op": "time", "lib": ["candidate", "baseline"], "dir": folder.name, "alt_dir": f"{folder.name}/alt",
                **self._spec(shape), "max_trials": self.cfg.max_trials, "min_trials": self.cfg.min_trials,
                "budget_s": self.cfg.time_budget_s, "warmup": self.cfg.warmup,
            }, self.cfg.benchmark_timeout_s + 10 * self.cfg.time_budget_s)
            if "error" in reply:
                shutil.rmtree(folder, ignore_errors=True)
                return Status.CRASH, f"crash while timing: {reply['error']} ({self._where})", None, timings
            # issue 4: the candidate's outputs from the timed calls (last trial of each input set)
            mismatch = None
            for index, (set_inputs, set_expected) in enumerate(((inputs, expected), (alt_inputs, alt_expected))):
                if str(index) not in reply.get("snapshots", {}) or mismatch:
                    continue
                snap = {a.name: np.load(folder / f"snap{index}_{a.name}.npy") for a in self.task.args
                        if a.role in ("output", "inout")}
                mismatch = self._check(snap, set_inputs, set_expected, shape, self.ev.bench_xp)
            shutil.rmtree(folder, ignore_errors=True)
            if mismatch:
                return (Status.WRONG, f"wrong result while timing (output cached across calls or work skipped?): "
                        f"{mismatch.describe()}", mismatch, timings)
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


def _scalar(value: Any, dtype: str) -> int | float:
    return int(value) if dtype.startswith("int") else float(value)
