"""One candidate's run through the verdict stages, on its own runner, against the workbench.

1. validation: every (shape, distribution) of the task's validation plan, fresh secret inputs,
   outputs poisoned, inputs checked unchanged, float64 reference; the first mismatch ends it;
2. determinism: each validation shape's first inputs again; the outputs must equal the first run
   bitwise, or within the task's tolerance where the task says so (atomics reorder sums);
3. benchmark: per shape, a warm-up window, then timed windows up to a cap until their own median
   has spent the time budget (windows.enough_windows; no count is taken from an untimed call),
   each of the shape's batch size of calls (one, or several for short kernels: batching.batch_size);
   every timed call has fresh secret inputs and is checked; the trusted baseline runner is timed
   interleaved (one window every ``baseline_every``); credited times as in profile.py, and a
   shape whose claims disagree with the trusted window timed a second round (profile.time_shape),
   and, where that is charged too and ``EvalConfig.fresh_pool_retime`` is on, judged against a
   pool taken at once with the candidate's runner killed, a fresh one started for what follows
   (``Session._fresh_pool``);
   a batched shape also gets single-call windows, whose estimate its credit never goes under
   (profile.single_call_floor_ms: calls fused across a batch), taken in two more rounds where
   that floor binds, the median kept (profile.single_floor_retimed).
A wall-clock budget bounds the whole candidate; past it the verdict is TIMEOUT.
"""
from __future__ import annotations

import logging
import secrets
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..runner.harness import ProtocolViolation, RunnerDied, RunnerProcess, RunnerTimeout
from ..runner.libraries import MapsJudge, MapsUnreadable, mapped_files
from ..tasks import Shape
from ..types import GpuInfo, Mismatch, Status
from .bench import Workbench
from .timed_window import call_error, timed_batch
from .gpu_idle import ATTRIBUTION_WAIT_S, GpuBusy, shared_gpu
from .inputs import make_case, reference
from .stages import Stages, Stop, Verdict
from .timing_stage import TimingStage
from .validate import check_call, check_outputs


log = logging.getLogger(__name__)


class Session(TimingStage):
    def __init__(self, bench: Workbench, config: Any, gpu: GpuInfo, runner: RunnerProcess,
                 shapes: tuple[Shape, ...], stages: Stages, quiet: Callable[[], None] = lambda: None,
                 respawn: Callable[[], RunnerProcess] | None = None) -> None:
        self.bench, self.cfg, self.gpu, self.runner, self.shapes = bench, config, gpu, runner, shapes
        self.quiet = quiet
        self.respawn = respawn          # a fresh runner of the candidate's library (None: no fresh pool)
        self.task = bench.task
        self.stages = stages
        self.deadline = time.monotonic() + config.candidate_budget_s
        self.where = "starting"
        self.attached: set[str] = set()
        self.vendor_libraries: tuple[str, ...] = ()
        self._maps_judge: MapsJudge | None = None

    # -- plumbing -----------------------------------------------------------------------------
    def _timeout(self, command_s: float) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Stop(Verdict(Status.TIMEOUT, f"timeout: wall-clock budget of {self.cfg.candidate_budget_s:g} s "
                                                f"spent ({self.where})", "timeout:budget"))
        return min(command_s, left)

    def _send(self, message: dict[str, Any], command_s: float) -> dict[str, Any]:
        return self.runner.send(message, self._timeout(command_s))

    def _attach(self, slot: Any) -> None:
        if slot.name not in self.attached:
            reply = self._send(slot.attach_message(), 60)
            if "error" in reply:
                raise Stop(Verdict(Status.CRASH, f"crash: could not map the evaluator's buffers: {reply['error']}",
                                    "crash"))
            self.attached.add(slot.name)

    def _check_libraries(self) -> None:
        """Shared objects mapped into the runner besides its own needs and the candidate's library,
        read from outside (/proc/<pid>/maps) after every call: a vendor library without the
        user's opt-in is rejected; maps the runner hid are a sandbox violation."""
        try:
            paths = mapped_files(self.runner.pid)
        except MapsUnreadable as exc:
            raise Stop(Verdict(Status.CRASH, f"crash: the runner's memory map could not be read ({exc}); it hid "
                                              f"what it loaded ({self.where})", "crash:sandbox-violation")) from None
        if self._maps_judge is None:
            self._maps_judge = MapsJudge(own=[str(self.runner.workdir / "candidate.so")])
        found = self._maps_judge.foreign(paths)
        if found and not self.cfg.allow_vendor_libraries:
            names = ", ".join(sorted({Path(f.removesuffix(" (deleted)")).name for f in found}))
            raise Stop(Verdict(Status.CRASH, f"crash: vendor library loaded without the opt-in "
                                              f"(allow_vendor_libraries): {names} ({self.where})", "crash:vendor-library"))
        self.vendor_libraries = tuple(sorted(set(self.vendor_libraries) | {Path(f).name for f in found}))

    # -- the stages ---------------------------------------------------------------------------
    def run(self) -> Verdict:
        gate = self.bench.gate
        waits, waited_s = gate.waits, gate.waited_s
        try:
            return self._run()
        finally:
            if gate.waits > waits:
                self.stages.count("gpu_busy_waits", gate.waits - waits)
                self.stages.seconds["gpu_busy_wait"] = gate.waited_s - waited_s

    def _run(self) -> Verdict:
        try:
            with self.stages.stage("startup"):
                self.runner.ready()
            self._validate()
            if not self.cfg.profile:
                return Verdict(Status.OK, f"correct on {len(self.task.validation)} validation shapes (not timed)")
            return self._benchmark()
        except Stop as stop:
            return stop.verdict
        except GpuBusy as exc:
            return self._gpu_busy(exc)
        except ProtocolViolation as exc:
            return Verdict(Status.CRASH, f"crash: {exc} ({self.where})", "crash:sandbox-violation")
        except RunnerTimeout as exc:
            return Verdict(Status.TIMEOUT, f"timeout: {exc} ({self.where})", "timeout")
        except RunnerDied as exc:
            reason = "crash:sandbox-violation" if exc.returncode == -31 else "crash"      # -SIGSYS: seccomp
            return Verdict(Status.CRASH, f"crash: {exc} ({self.where})", reason)
        except Exception as exc:  # noqa: BLE001 - the trusted side's own GPU work failed (say, out of memory)
            log.warning("evaluator error while judging a candidate (%s)", self.where, exc_info=True)
            return Verdict(Status.CRASH, f"crash: the evaluator failed while judging this candidate: "
                                         f"{type(exc).__name__}: {str(exc)[:200]} ({self.where})", "crash:evaluator")

    def _gpu_busy(self, exc: GpuBusy) -> Verdict:
        """A window found the GPU busy for the whole wait (gpu_idle.py).  Every trusted process
        synchronizes before it replies, and the candidate's runner is stopped: kill it, and with
        it its context and every kernel it left queued.  An idle GPU then says the work was the
        candidate's; a GPU still busy, that another process shares it."""
        self.runner.close(wait=True)
        if self.bench.gate.idle_within(ATTRIBUTION_WAIT_S):
            return Verdict(Status.FLAGGED, f"timing not credible: the candidate left GPU work running after its "
                                           f"reply ({exc}; it ended when its process was killed) ({self.where})",
                           "flagged:work-after-reply")
        log.error("%s, and still after the candidate's runner was killed: another process is using this GPU", exc)
        return Verdict(Status.CRASH, shared_gpu(exc, f"and still after the candidate's process was killed "
                                                     f"({self.where})"), "crash:evaluator")

    def _call(self, slot: Any, inputs: dict[str, Any], command_s: float,
              flush: bool = True) -> tuple[Any, dict[str, Any]]:
        times, captured = self._timed([slot], [inputs], command_s, flush)
        return times, captured[0]

    def _timed(self, slots: list[Any], inputs: list[dict[str, Any]], command_s: float,
               flush: bool = True, chain_seed: int | None = None) -> tuple[Any, list[dict[str, Any]]]:
        timeout = self._timeout(command_s)
        try:
            reply, times, captured = timed_batch(self.runner, slots, "candidate", inputs, timeout, flush=flush,
                                                 gate=self.bench.gate, chain_seed=chain_seed)
        except RunnerTimeout:
            if timeout < command_s:
                raise Stop(Verdict(Status.TIMEOUT, f"timeout: wall-clock budget of {self.cfg.candidate_budget_s:g} "
                                                    f"s spent ({self.where})", "timeout:budget")) from None
            raise
        error = call_error(reply)
        if error is not None:
            raise Stop(Verdict(Status.CRASH, f"crash: {error} ({self.where})", "crash"))
        if not times.marked:
            # no completion mark that matched the outputs (completion.py): timed to the reply
            self.stages.count("unmarked_windows")
        with self.stages.stage("library_check"):
            self._check_libraries()
        return times, captured

    def _validate(self) -> None:
        firsts: dict[str, tuple[Shape, dict[str, np.ndarray], dict[str, Any]]] = {}
        with self.stages.stage("validate"):
            for shape, case in self.task.validation_plan(self.cfg.validation_seeds):
                self.where = f"validation shape {shape.label} ({case})"
                slot = self.bench.validation_slot(shape)
                self._attach(slot)
                inputs = make_case(self.task, shape, secrets.randbits(63), case)
                _, captured = self._call(slot, inputs, self.cfg.validation_timeout_s, flush=False)
                self.stages.count("validation_launches")
                self._no_overrun(slot)
                host = _to_host(captured)
                mismatch = check_call(self.task, host, inputs, reference(self.task, inputs, shape, np), shape, np)
                if mismatch:
                    raise Stop(Verdict(Status.WRONG, f"wrong result: {mismatch.describe()}", _reason(mismatch),
                                        mismatch))
                firsts.setdefault(shape.label, (shape, inputs, host))
        with self.stages.stage("determinism"):
            for shape, inputs, first in (firsts.values() if self.cfg.determinism_check else ()):
                self.where = f"determinism re-run on {shape.label}"
                _, captured = self._call(self.bench.validation_slot(shape), inputs, self.cfg.validation_timeout_s,
                                         flush=False)
                mismatch = self._same(shape, inputs, first, _to_host(captured))
                if mismatch:
                    raise Stop(Verdict(Status.WRONG, f"wrong result: {mismatch.describe()}", "wrong:nondeterministic",
                                        mismatch))

    def _no_overrun(self, slot: Any) -> None:
        """A call that wrote past a buffer's end (the canary every window puts there, Slot.guard) is wrong: in a user's program
        those bytes belong to another tensor.  Allocations are rounded up to 2 MiB (memory.py), so
        such writes never fault here (suite v4's relu_unchecked_tiles_past_the_end, OK x1.81 on an
        H200 before this check)."""
        where = slot.overrun()
        if where:
            raise Stop(Verdict(Status.WRONG, f"wrong: wrote past the end of a buffer ({self.where}): {where}",
                                "wrong:out-of-bounds"))

    def _same(self, shape: Shape, inputs: dict[str, Any], first: dict[str, Any],
              again: dict[str, Any]) -> Mismatch | None:
        """Bitwise equality, or for ``determinism: tolerance`` tasks, the first run taken as the
        reference of the re-run, judged as validation judges (the task's tolerance, its own
        ``compare`` for tied indices): a race moves results by far more than reordered rounding."""
        outputs = [k for k in first if not k.startswith("after:")]
        if self.task.determinism == "bitwise":
            for name in outputs:
                a, b = first[name].reshape(-1), again[name].reshape(-1)
                differ = np.flatnonzero(a.view(np.uint8) != b.view(np.uint8))
                if differ.size:
                    i = int(differ[0]) // a.dtype.itemsize
                    index = tuple(int(v) for v in np.unravel_index(i, first[name].shape))
                    return Mismatch(shape.label, name, index, float(b[i]), float(a[i]),
                                    "non-deterministic: a second run on the same inputs differs "
                                    "(data race or uninitialised read?)")
            return None
        exact = self.task.precision == "exact"
        expected = {k: (first[k] if exact else first[k].astype(np.float64)) for k in outputs}
        found = check_outputs({k: again[k] for k in outputs}, expected, inputs, shape.env, self.task.tol,
                              shape.label, exact=exact, custom_compare=self.task.custom_compare,
                              error_scale=self.task.error_scale, bit_exact=self.task.bit_exact)
        if found:
            return Mismatch(found.shape_label, found.output, found.index, found.got, found.expected,
                            "non-deterministic beyond the tolerance: a second run on the same inputs differs "
                            f"by more than reordered rounding ({found.reason})")
        return None

    def _sweep(self) -> None:
        """Each benchmark shape once with every other distribution the task allows (untimed)."""
        with self.stages.stage("sweep"):
            for shape in self.shapes:
                sb = self.bench.shape_bench(shape)
                self._sweep_calls(shape, sb.candidate_slot, sb.sweep)

    def _sweep_calls(self, shape: Shape, slot: Any, sets: dict[str, dict[str, Any]], when: str = "") -> None:
        """One untimed, checked call on ``slot`` per input set of ``sets``, each after an L2 flush,
        as a timed window's first call is: a kernel that tells a warm L2 from a cold one (suite v3's
        skips_work_when_the_l2_is_cold) cannot tell these calls from timed ones that way."""
        xp = self.bench.memory.xp
        self._attach(slot)
        for case, inputs in sets.items():
            self.where = f"benchmark shape {shape.label} ({case}{when})"
            _, captured = self._call(slot, inputs, self.cfg.benchmark_timeout_s, flush=True)
            self._no_overrun(slot)
            mismatch = check_call(self.task, captured, inputs, reference(self.task, inputs, shape, xp), shape, xp)
            if mismatch:
                raise Stop(Verdict(Status.WRONG, f"wrong result on a benchmark shape ({case} inputs{when}): "
                                                  f"{mismatch.describe()}", _sweep_reason(mismatch), mismatch))
            self.stages.count("sweep_calls")


def _to_host(captured: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: (v if isinstance(v, np.ndarray) else v.get()) for k, v in captured.items()}


def _sweep_reason(mismatch: Mismatch) -> str:
    """The sweep runs the benchmark shapes only: what passed validation and fails here is a
    kernel that is wrong (or does nothing) at the sizes that are timed."""
    return _reason(mismatch) if mismatch.output.startswith("input:") else "wrong:benchmark-shape"


def _reason(mismatch: Mismatch) -> str:
    if mismatch.output.startswith("input:"):
        return "wrong:input-modified"
    if mismatch.reason.startswith(("nan", "inf")):
        return "wrong:unwritten-or-nonfinite"
    return "wrong:tolerance"
