"""The benchmark stage of a session (session.py): per shape a warm-up, timed rounds with the
trusted baseline interleaved, a second round where the claims disagree with the trusted window
(``profile.time_shape``), and single-call windows under a batched shape's credit.  A shape is
judged against the calibration pool the trusted twin took before any candidate code ran
(``Workbench.calibration_round``), or, where ``EvalConfig.fresh_pool_retime`` is on, a fresh one
(``_fresh_pool``)."""
from __future__ import annotations

import itertools
import logging
import secrets
import shutil
import statistics
from typing import Any

from ..runner.harness import RunnerProcess
from ..runner.host_usage import crowded, flagged_under, others_share, window_cores
from ..tasks import Shape
from ..types import ShapeTiming, Status, geometric_mean
from . import profile
from .gpu_idle import GpuBusy, shared_gpu
from .inputs import reference
from .chain import chained_inputs
from .roofline import speed_of_light_ms
from .stages import Stop, Verdict
from .validate import check_call
from .windows import enough_windows, interleaved_windows

log = logging.getLogger(__name__)


class TimingStage:
    """Session's benchmark stage (a mixin: the attributes and plumbing are Session's)."""

    def _benchmark(self) -> Verdict:
        cfg, xp = self.cfg, self.bench.memory.xp
        timings: list[ShapeTiming] = []
        charged = 0
        self.window_cores: dict[str, list[float | None]] = {}     # per shape (runner/host_usage.py)
        self.window_others: dict[str, list[float | None]] = {}    # its other threads' share, per shape
        self.window_other_runs: list[float] = []                  # their runs on a CPU per ms of a window's span
        self._sweep()
        with self.stages.stage("quiet"):
            self.quiet()
            self.runner.settle()
        for shape in self.shapes:
            self.where = f"benchmark shape {shape.label}"
            sb = self.bench.shape_bench(shape)
            k = max(1, sb.batch)
            slots = sb.candidate_slots[:k]
            for slot in slots:
                self._attach(slot)
            baseline = self.bench.attach_baseline(*sb.baseline_slots[:k])
            with self.stages.stage("warmup"):
                # warm-ups only: no count is taken from them (windows.enough_windows)
                self._checked_window(sb, slots, shape, xp, cfg.benchmark_timeout_s, first_call=True)
                self.bench.baseline_window(baseline, sb, cfg.benchmark_timeout_s)
            # the number of timed windows: as many calls as the time budget allows within
            # [min_trials, max_trials], k to a window, and never fewer than min_windows windows; a
            # launch-bound shape (one call a window) up to launch_bound_factor times max_trials, so
            # that the slack its claims may hide in (one standard error of the window's median) is
            # a small share of its call.  The budget is spent at the timed windows' own median,
            # as they come, so that no untimed call of the candidate's can shorten the round
            most = cfg.max_trials * max(1, cfg.launch_bound_factor) if sb.launch_bound else cfg.max_trials
            windows = max(cfg.min_windows, -(-most // k))
            least = max(cfg.min_windows, -(-cfg.min_trials // k))
            fresh = (lambda: self._fresh_pool(sb, slots, shape, xp)) if self.respawn is not None else None
            timed = profile.time_shape(lambda: self._timing_round(sb, slots, shape, xp, baseline, windows, least),
                                       sb.calibration, fresh_pool=fresh, mix_interleaved=not sb.fast_twin)
            self.stages.count("retimed_shapes", timed.rounds - 1)
            charged += int(timed.strict)
            floor = speed_of_light_ms(self.task.flops_of(shape), self.task.bytes_of(shape), self.gpu,
                                              self.task.precision)
            single = 0.0
            if k > 1 and not sb.chained:       # a chained window's calls cannot fuse (chain.py)
                credit = profile.summarise(shape.label, timed.candidate, timed.baseline, timed.calibration,
                                           sb.clean_ms, floor, strict=timed.strict).median_ms
                single, retimed = profile.single_floor_retimed(
                    lambda: self._single_call_floor(sb, slots[0], shape, xp, baseline), credit)
                self.stages.count("single_retimed", int(retimed))
            timings.append(profile.summarise(shape.label, timed.candidate, timed.baseline, timed.calibration,
                                             sb.clean_ms, floor, sb.library_ms, strict=timed.strict,
                                             single_floor_ms=single,
                                             ratio_reference=tuple(sb.calibration) if sb.fast_twin else ()))
        self.stages.count("charged_shapes", charged)
        self.stages.count("unsettled", self.runner.unsettled)     # a thread still ran after its stop
        host = self._host_threads()
        if host is not None:
            self.stages.logs.append(("profile", host))
            return Verdict(Status.FLAGGED, host, "flagged:host-threads", timings=tuple(timings))
        flagged = [f"{t.shape_label}: {flag}" for t in timings for flag in t.flags]
        if flagged:
            self.stages.logs.append(("profile", "\n".join(flagged)))
            return Verdict(Status.FLAGGED, f"timing not credible: {flagged[0]}", "flagged:under-floor",
                           timings=tuple(timings))
        geomean = geometric_mean([t.speedup for t in timings])
        return Verdict(Status.OK, f"correct; {geomean:.3g}x geomean speedup over naive on {len(timings)} shapes",
                       timings=tuple(timings))

    def _host_threads(self) -> str | None:
        """Why the candidate's runner took more of the host's CPU inside its windows than the one
        thread an honest runner serves with (runner/host_usage.py: threads of its own kept the
        host's cores awake through them), or None: judged shape by shape."""
        cores = [c for per_shape in self.window_cores.values() for c in per_shape if c is not None]
        if cores:
            self.stages.seconds["window_cores_median"] = statistics.median(cores)
            self.stages.seconds["window_cores_max"] = max(cores)
            # the lowest limit no shape would be set aside under (the room an honest runner leaves)
            self.stages.seconds["window_cores_flagged_under"] = max(
                f for f in map(flagged_under, self.window_cores.values()) if f is not None)
        others = [c for per_shape in self.window_others.values() for c in per_shape if c is not None]
        if others:
            self.stages.seconds["window_others_median"] = statistics.median(others)
            self.stages.seconds["window_others_max"] = max(others)
            self.stages.seconds["window_others_flagged_under"] = max(
                f for f in map(flagged_under, self.window_others.values()) if f is not None)
        if self.window_other_runs:      # measured, not judged (host_usage.other_runs)
            self.stages.seconds["window_other_runs_per_ms_median"] = statistics.median(self.window_other_runs)
            self.stages.seconds["window_other_runs_per_ms_max"] = max(self.window_other_runs)
        if not cores and self.window_cores:
            log.warning("the runner's CPU clock could not be read in any window: threads that keep the host "
                        "awake are not judged (runner/host_usage.py)")
        limit = self.cfg.window_cores_limit
        for label, per_shape in self.window_cores.items():
            why = crowded(per_shape, limit)
            if why is not None:
                return (f"timing not credible: on {label}, {why}; an honest runner serves with one thread, and "
                        f"threads of its own that keep the host's cores awake shorten the host steps of its "
                        f"windows against the twin's and the baseline's")
        limit = self.cfg.window_others_limit
        for label, per_shape in self.window_others.items():
            why = crowded(per_shape, limit, "of a core in threads but the serving one")
            if why is not None:
                return (f"timing not credible: on {label}, {why}; an honest runner's other threads (the CUDA "
                        f"driver's) take next to none, and threads of its own that keep its core awake shorten "
                        f"the host steps of its windows against the twin's and the baseline's")
        return None

    def _timing_round(self, sb: Any, slots: list[Any], shape: Shape, xp: Any, baseline: RunnerProcess,
                      windows: int, least: int) -> tuple[list[profile.CallTimes], list[profile.CallTimes]]:
        """Up to ``windows`` checked candidate windows, at least ``least`` and then until the time
        budget is spent at their median (windows.enough_windows), with one trusted baseline window
        interleaved every ``baseline_every`` (before or after, alternately; the calibration's twin
        is timed in the same pattern, bench.calibration_round)."""
        cfg = self.cfg
        # before a secret one of the round's first ``least`` windows (every round has that many),
        # one untimed checked call per non-timed distribution (ShapeBench.late_sweep, a second
        # draw): a kernel honest only in the shape's first calls, where the sweep before the
        # warm-up sits, fails them (one distribution drawn at random was too few: suite v4's
        # softmax cheat passes its `ties`)
        # on a secret one of the window's buffer sets: the set a kernel saw first (the sweep's) is
        # not the only one its checked calls use, so its pointers do not tell it which calls to fear
        late_at = secrets.randbelow(max(1, least))
        late_slot = slots[secrets.randbelow(len(slots))]
        count = itertools.count()

        def candidate() -> profile.CallTimes:
            if next(count) == late_at and sb.late_sweep:
                self._sweep_calls(shape, late_slot, sb.late_sweep, when=", between timed windows")
            return self._checked_window(sb, slots, shape, xp, cfg.benchmark_timeout_s)

        with self.stages.stage("timing"):
            cand_calls, base_calls = interleaved_windows(
                candidate,
                lambda: self.bench.baseline_window(baseline, sb, cfg.benchmark_timeout_s), windows, cfg.baseline_every,
                enough_windows(least, cfg.time_budget_s, cfg.baseline_every))
        self.stages.count("timed_calls", len(cand_calls) * len(slots))
        self.stages.seconds["timed_gpu"] = self.stages.seconds.get("timed_gpu", 0.0) + sum(
            c.event_all_ms for c in cand_calls + base_calls) / 1e3
        return cand_calls, base_calls

    def _fresh_pool(self, sb: Any, slots: list[Any], shape: Shape, xp: Any) -> list[profile.CallTimes]:
        """A shape charged in two rounds (``profile.time_shape``, ``EvalConfig.fresh_pool_retime``):
        kill the candidate's runner and await its exit, which ends its context and every kernel
        or copy-engine transfer it left queued (the idle gate does not see a host-to-device copy);
        take a calibration pool as large as the shape's (``Workbench.fresh_pool``) with no
        process of the candidate's alive, against which the two rounds are judged; then start a
        fresh runner of its library, attach the shape's buffers and warm it up with one checked
        window, for the shape's single-call windows and the shapes after it."""
        assert self.respawn is not None
        cfg = self.cfg
        self.where = f"benchmark shape {shape.label}, fresh pool"
        with self.stages.stage("fresh_pool"):
            self.stages.count("unsettled", self.runner.unsettled)
            self.runner.close(wait=True)
            # and its files (the workdir holds whatever it wrote, up to RLIMIT_FSIZE a file, on a
            # tmpfs: memory it could fill in its last call to slow the pool after it)
            shutil.rmtree(self.runner.workdir, ignore_errors=True)
            calls = max(cfg.clean_calls, len(sb.calibration))
            try:
                pool = self.bench.fresh_pool(sb, calls, cfg.baseline_every, self._timeout(cfg.benchmark_timeout_s))
            except GpuBusy as exc:      # the candidate's process and context are gone: not its work
                raise Stop(Verdict(Status.CRASH, shared_gpu(exc, f"while a fresh pool was taken with the "
                                                                  f"candidate's runner gone ({self.where})"),
                                    "crash:evaluator")) from None
            self.runner = self.respawn()
            self.attached.clear()
            self._maps_judge = None
            self.runner.ready()
            for slot in slots:
                self._attach(slot)
            self._checked_window(sb, slots, shape, xp, cfg.benchmark_timeout_s)
        self.stages.count("fresh_pools")
        self.where = f"benchmark shape {shape.label}"
        return pool

    def _single_call_floor(self, sb: Any, slot: Any, shape: Shape, xp: Any, baseline: RunnerProcess) -> float:
        """A batched shape's single-call windows (``profile.SINGLE_WINDOWS`` of the candidate's,
        each checked, and as many of the baseline's, alternately first) and the floor they put
        under its credit (``profile.single_call_floor_ms``: calls fused across a batch)."""
        timeout_s = self.cfg.benchmark_timeout_s
        with self.stages.stage("timing_single"):
            cand_calls, base_calls = interleaved_windows(
                lambda: self._checked_window(sb, [slot], shape, xp, timeout_s),
                lambda: self.bench.baseline_window(baseline, sb, timeout_s, calls=1), profile.SINGLE_WINDOWS, 1)
        self.stages.count("single_calls", len(cand_calls))
        return profile.single_call_floor_ms(cand_calls, base_calls)

    def _checked_window(self, sb: Any, slots: list[Any], shape: Shape, xp: Any, command_s: float,
                        first_call: bool = False) -> profile.CallTimes:
        """One timed window of ``len(slots)`` calls, each with fresh inputs, each checked (a
        chained window's: each call's inputs as the chain must have drawn them, chain.py)."""
        inputs, seed = sb.window_inputs(slots)
        times, captured = self._timed(slots, inputs, command_s, chain_seed=seed)
        self.window_cores.setdefault(shape.label, []).append(window_cores(times.runner_cpu_ms, times.runner_span_ms))
        self.window_others.setdefault(shape.label, []).append(
            others_share(times.runner_cpu_ms, times.runner_serving_ms, times.runner_span_ms))
        if times.runner_other_runs >= 0 and times.runner_span_ms > 0:
            self.window_other_runs.append(times.runner_other_runs / times.runner_span_ms)
        if seed is not None:
            inputs = chained_inputs(self.task, inputs[0], captured, xp)
        with self.stages.stage("timed_check"):
            for values, taken in zip(inputs, captured):
                mismatch = check_call(self.task, taken, values, reference(self.task, values, shape, xp), shape, xp)
                if mismatch is not None:
                    break
        if mismatch is None:
            return times
        if mismatch.output.startswith("input:"):
            what = ("a chained call ran on other inputs than the chain drew for it (from the window's seed or "
                    "the previous call's outputs: a call run before its window, or its inputs changed)"
                    if seed is not None else "wrong result on a benchmark shape")
            raise Stop(Verdict(Status.WRONG, f"{what}: {mismatch.describe()}", "wrong:input-modified", mismatch))
        if first_call:
            raise Stop(Verdict(Status.WRONG, f"wrong result on a benchmark shape: {mismatch.describe()}",
                                "wrong:benchmark-shape", mismatch))
        raise Stop(Verdict(Status.WRONG, "wrong result while timing (outputs cached across calls, work skipped, "
                                          f"or a race?): {mismatch.describe()}", "wrong:timed-calls", mismatch))
