"""What an evaluator keeps across candidates: trusted memory, the baseline runner, and per shape
the launch buffers, the secret timed-input sets and the baseline's calibration.

The baseline (the task's naive seed) runs in its own long-lived runner process that never loads
candidate code, so no candidate can patch or starve it from inside.  Its "clean" time per shape
is measured while no candidate code is loaded anywhere (before a candidate's first call, every
``clean_refresh`` candidates); a candidate's speedup uses the lower of that and the baseline's
time interleaved with the candidate (profile.summarise).  At the same moments the shape's
calibration windows (what a window costs beyond its launches, profile.py) are taken the way a
candidate is timed, with a second trusted runner of the naive seed, the twin, in the candidate's
place (``Workbench.calibration_round``); for a chained shape (chain.py), a runner of the task's
``chain_twin`` seed instead (``ShapeBench.fast_twin``).
"""
from __future__ import annotations

import collections
import logging
import secrets
import shutil
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..runner.harness import RunnerProcess
from ..runner.libraries import mapped_files
from ..runner.sandbox import SandboxPolicy
from ..runner.supply import scratch_root
from ..tasks import Shape, Task
from . import library
from .gpu_idle import IdleGate
from .inputs import TimedInputs, make_case, reference, timed_case
from .slot import Slot
from .memory import TrustedMemory
from .batching import FUSABLE_FLOOR_MS, batch_size, sizing_call_ms
from .profile import CallTimes
from .timed_window import call_error, timed_batch
from .chain import CHAIN_CALLS, CHAIN_LIB, chained_inputs, drawn_inputs, eligible
from .completion import MARK_LIB
from .validate import check_call
from .windows import interleaved_windows

log = logging.getLogger(__name__)

#: Trusted baseline calls kept per shape for the calibration of the credited time.
CALIBRATION_POOL = 64
#: A launch-bound shape (timed one call to a window, ``batching.batch_size``) takes this many times
#: the calibration windows and the timed calls of another: its windows are short, and one
#: standard error of a window (the slack a claim may hide in) is a large share of a ~20 us call
#: unless the medians are taken over many (``EvalConfig.launch_bound_factor``).
LAUNCH_BOUND_FACTOR = 8


@dataclass
class ShapeBench:
    """One benchmark shape: buffers for the candidate and for the baseline (``batch`` sets of
    each: short kernels are timed several launches to a window), timed inputs, and the
    baseline's trusted windows (``calibration``) and clean median per call."""

    shape: Shape
    candidate_slots: list[Slot]
    baseline_slots: list[Slot]
    inputs: TimedInputs
    calibration: collections.deque = field(default_factory=lambda: collections.deque(maxlen=CALIBRATION_POOL))
    clean_ms: float = 0.0
    clean_at_candidate: int = -1
    library_ms: float = 0.0
    batch: int = 0                  # launches per timed window; 0 until the first clean measurement
    launch_bound: bool = False      # speed-of-light time under the fusable floor: one call a window, more windows
    chained: bool = False           # a launch-bound shape timed in chained windows instead (chain.py)
    #: the calibration pool is the chain twin's (a fast seed's), not the naive seed's: on topk's
    #: chained quick shape (H200, thirty-third session) the naive twin's ~1.4 ms calls put the
    #: pool's window less events 100-300 us (of ~5.4 ms) above an honest ~20 us kernel's own, and
    #: a forger claiming 75 % of its time (344 us a window) escaped the bound in 2 of 9 judgements
    fast_twin: bool = False
    sweep: dict[str, dict[str, Any]] = field(default_factory=dict)   # distribution -> inputs (device)
    #: a second draw of those sets (every non-timed distribution), checked at a secret window of each timing
    #: round (timing_stage.py): the sweep above runs before the warm-up, always as the shape's first
    #: calls, so a kernel that counted its calls was honest for those and wrong from then on
    #: (suite v4's softmax_unshifted_after_the_sweep: OK x121 on an H200 before this set)
    late_sweep: dict[str, dict[str, Any]] = field(default_factory=dict)

    def window_inputs(self, slots: list[Slot]) -> tuple[list[dict[str, Any]], int | None]:
        """Fresh inputs for a window on ``slots``, and its chain's seed where it is chained (None
        otherwise): then the first call's inputs only, those the runner must draw from the seed."""
        if self.chained and len(slots) > 1:
            seed = secrets.randbits(64) | 1
            return [drawn_inputs(self.inputs.task, seed, self.inputs.bases[0], self.inputs.xp)], seed
        self.inputs.new_window()
        return [self.inputs.next() for _ in slots], None

    @property
    def candidate_slot(self) -> Slot:
        return self.candidate_slots[0]

    @property
    def baseline_slot(self) -> Slot:
        return self.baseline_slots[0]


def lower_positive(a: float, b: float) -> float:
    """The lower of two times where 0 means unknown."""
    return min(a, b) if a > 0 and b > 0 else a or b


class Workbench:
    """Per-evaluator resources shared by its candidates' sessions."""

    def __init__(self, task: Task, memory: TrustedMemory, job: Callable[[str], str], extra_files: tuple[Path, ...],
                 baseline_binary: Callable[[], bytes], clean_refresh: int, measure_library: bool,
                 policy: SandboxPolicy | None = None, gpu_shared: bool = False,
                 chain_binary: Callable[[], bytes] | None = None,
                 chain_twin_binary: Callable[[], bytes] | None = None,
                 mark_binary: Callable[[], bytes] | None = None) -> None:
        self.task, self.memory, self.policy = task, memory, policy
        #: before every timed window, the candidate's included: no other context's work on the GPU
        self.gate = IdleGate(memory.probe_ms, shared=gpu_shared)
        self._job, self._extra_files, self._baseline_binary = job, extra_files, baseline_binary
        #: the chain library (chain.py; None: launch-bound shapes are timed one call a window)
        self.chain_binary = chain_binary if chain_binary is not None and eligible(task) else None
        #: the fast seed whose runner (role ``chain_twin``) takes a chained shape's calibration
        self.chain_twin_binary = chain_twin_binary if self.chain_binary is not None else None
        #: the completion mark's library (completion.py), in every runner's workdir
        self.mark_binary = mark_binary
        self.clean_refresh, self.measure_library = clean_refresh, measure_library
        self._validation: dict[str, Slot] = {}
        self._shapes: dict[str, ShapeBench] = {}
        self._runners: dict[str, tuple[Path, RunnerProcess]] = {}
        self._attached: dict[str, set[str]] = {}
        self.candidates = 0

    # -- the trusted runners: the baseline, and its twins for the calibration ----------------
    @property
    def baseline_runner(self) -> RunnerProcess:
        """The trusted baseline runner (started, or restarted if it died)."""
        return self._trusted("baseline")

    def _trusted(self, role: str) -> RunnerProcess:
        """A trusted runner: of the baseline's binary, ``baseline`` (timed beside candidates) or
        ``twin`` (in the candidate's place during the calibration; idle otherwise); or of the chain
        twin's, ``chain_twin`` (a chained shape's calibration).  Each loads its binary as the
        library ``baseline``."""
        held = self._runners.get(role)
        if held is not None and held[1].proc.poll() is None:
            return held[1]
        self._stop(role)
        work = Path(tempfile.mkdtemp(prefix=f"evo-fsr-{role}-", dir=scratch_root()))
        (work / "job.json").write_text(self._job("baseline"))
        # the library is written before the first call (the runner loads it then): the GPU probe,
        # which the baseline's compile needs (arch), runs on the baseline runner first
        self._runners[role] = (work, RunnerProcess(work, policy=self.policy, extra_files=self._extra_files))
        self._attached[role] = set()
        return self._runners[role][1]

    def attach_baseline(self, *slots: Slot) -> RunnerProcess:
        return self._attach("baseline", slots)

    def _attach(self, role: str, slots: tuple[Slot, ...]) -> RunnerProcess:
        runner = self._trusted(role)
        work = self._runners[role][0]
        if not (work / "baseline.so").exists():
            binary = self.chain_twin_binary if role == "chain_twin" else self._baseline_binary
            assert binary is not None, "no chain twin: calibration_round takes the naive twin"
            (work / "baseline.so").write_bytes(binary())
        self.write_runner_libs(work)
        for slot in slots:
            if slot.name not in self._attached[role]:
                reply = runner.send(slot.attach_message(), 60)
                if "error" in reply:
                    raise RuntimeError(f"the trusted {role} runner could not attach {slot.name}: {reply['error']}")
                self._attached[role].add(slot.name)
        return runner

    def write_runner_libs(self, work: Path) -> None:
        """The trusted libraries in a runner's workdir: the completion mark's (completion.py), and
        the chain library where a shape is chained (chain.py)."""
        if self.mark_binary is not None and not (work / f"{MARK_LIB}.so").exists():
            (work / f"{MARK_LIB}.so").write_bytes(self.mark_binary())
        if self.chain_binary is not None and not (work / f"{CHAIN_LIB}.so").exists() and any(
                b.chained for b in self._shapes.values()):
            (work / f"{CHAIN_LIB}.so").write_bytes(self.chain_binary())

    def _stop(self, role: str) -> None:
        held = self._runners.pop(role, None)
        if held is not None:
            held[1].close()
            shutil.rmtree(held[0], ignore_errors=True)

    # -- buffers --------------------------------------------------------------------------------
    def validation_slot(self, shape: Shape) -> Slot:
        key = shape.label
        if key not in self._validation:
            self._validation[key] = Slot(self.memory, self.task, shape, f"v:{key}")
        return self._validation[key]

    def shape_bench(self, shape: Shape) -> ShapeBench:
        key = shape.label
        if key not in self._shapes:
            self._shapes[key] = ShapeBench(shape, [Slot(self.memory, self.task, shape, f"c:{key}")],
                                           [Slot(self.memory, self.task, shape, f"b:{key}")],
                                           TimedInputs(self.task, shape, self.memory.xp))
        return self._shapes[key]

    def _grow_batch(self, bench: ShapeBench, k: int) -> None:
        """Buffer sets 2..k of a shape, for the candidate and the baseline (before any candidate
        code runs: ``refresh_clean`` is called before a candidate's runner is taken)."""
        key = bench.shape.label
        for j in range(len(bench.candidate_slots), k):
            bench.candidate_slots.append(Slot(self.memory, self.task, bench.shape, f"c:{key}#{j}"))
            bench.baseline_slots.append(Slot(self.memory, self.task, bench.shape, f"b:{key}#{j}"))
        bench.batch = k

    def allocate(self, validation: tuple[Shape, ...], shapes: tuple[Shape, ...], sweep: bool) -> None:
        """Every trusted buffer, before any candidate code runs (a candidate that takes the GPU's
        memory cannot make the evaluator's own allocations fail)."""
        for shape in validation:
            self.validation_slot(shape)
        for shape in shapes:
            bench = self.shape_bench(shape)
            if sweep and not bench.sweep:
                bench.sweep = self._sweep_inputs(shape)
                bench.late_sweep = self._sweep_inputs(shape)

    def _sweep_inputs(self, shape: Shape) -> dict[str, dict[str, Any]]:
        """One input set per distribution other than the benchmark's, at a benchmark shape, from
        secret seeds: a kernel that dispatches on the benchmark's sizes to a path that is right
        only for the benchmark's distribution fails on these (each is used once per candidate:
        ``ShapeBench.sweep`` before the warm-up, ``late_sweep`` at a secret timed window)."""
        xp = self.memory.xp
        names = [d for d in self.task.distributions if d != timed_case(self.task, shape)]
        return {name: {k: xp.asarray(v) for k, v in make_case(self.task, shape, secrets.randbits(63), name).items()}
                for name in names}

    # -- clean baseline times and the calibration (no candidate code loaded anywhere) ----------
    def refresh_clean(self, shapes: tuple[Shape, ...], calls: int, timeout_s: float,
                      floor_ms: Callable[[Shape], float] = lambda shape: 0.0, batch_max: int = 1,
                      every: int = 3, fusable_floor_ms: float = FUSABLE_FLOOR_MS,
                      launch_bound_factor: int = LAUNCH_BOUND_FACTOR) -> None:
        """Before a candidate's code is loaded, for every shape that has none or whose is
        ``clean_refresh`` candidates old: the calibration windows and the baseline's clean time
        (``calibration_round``); then the library's time, a round after those windows at every
        refresh (two the first time), each timed in the shape's batch (``library.py``: as many
        calls after one flush as the candidate's windows hold), keeping the lowest round median:
        noise only slows a round,
        and one slow round, kept for a whole run, once read cuDNN's stem at 0.18 ms instead of
        0.099 (1.94x "of library" for 1.36x).  The first time, also the shape's batch size
        (``batching.batch_size``: from the window overhead of a few single calls and the library's
        time alone, else the speed-of-light floor; one call for a launch-bound shape, whose calls could
        fuse) and its extra buffer sets.  A launch-bound shape takes ``launch_bound_factor`` times
        ``calls`` calibration windows (``LAUNCH_BOUND_FACTOR``)."""
        for shape in shapes:
            bench = self.shape_bench(shape)
            if bench.clean_at_candidate >= 0 and self.candidates - bench.clean_at_candidate < self.clean_refresh:
                continue
            if bench.batch == 0:
                single = self._single_windows(bench, min(calls, 3), timeout_s)
                sizing_ms = self._library_ms(bench, 1) if self.measure_library else 0.0
                overhead = statistics.median(t.window_ms - t.event_ms for t in single)
                floor = floor_ms(shape)
                seed_ms = statistics.median(t.event_ms for t in single)
                k = batch_size(overhead, sizing_call_ms(sizing_ms, seed_ms, floor), batch_max, floor_ms=floor,
                               fusable_floor_ms=fusable_floor_ms)
                self._grow_batch(bench, k)
                bench.launch_bound = k == 1 and 0 < floor < fusable_floor_ms
                if bench.launch_bound and self.chain_binary is not None:    # chain.py: many calls a window
                    self._grow_batch(bench, CHAIN_CALLS)
                    bench.launch_bound, bench.chained, k = False, True, CHAIN_CALLS
                    bench.fast_twin = self.chain_twin_binary is not None
                    if not bench.fast_twin:
                        log.warning("%s: chained windows calibrated by the naive seed's twin (%s/task.yaml names no "
                                    "chain_twin): a claim a quarter under a fast kernel's time can pass the window "
                                    "bound (SECURITY.md, known gaps)", shape.label, self.task.name)
                if self.measure_library:        # the first of two rounds, in the shape's batch
                    bench.library_ms = sizing_ms if k == 1 else self._library_ms(bench, k)
                if k > 1:
                    log.info("%s: timed %d launches to a window (window overhead %.3f ms)", shape.label, k, overhead)
            pool_calls = calls * max(1, launch_bound_factor) if bench.launch_bound else calls
            twin, base = self.calibration_round(bench, pool_calls, every, timeout_s)
            if self.measure_library:
                bench.library_ms = lower_positive(bench.library_ms, self._library_ms(bench, max(1, bench.batch)))
            bench.calibration.extend(twin)
            clean = base if bench.fast_twin else twin + base      # the baseline's seed's windows
            bench.clean_ms = statistics.median(t.event_ms for t in clean) / twin[0].calls
            bench.clean_at_candidate = self.candidates

    def fresh_pool(self, bench: ShapeBench, calls: int, every: int, timeout_s: float) -> list[CallTimes]:
        """A calibration round taken now (``calibration_round``: ``calls`` twin windows, the
        baseline's interleaved), for a shape charged in two rounds (``profile.time_shape``),
        once the candidate's runner is dead: no process of a candidate's is alive, so these
        windows are as clean as ``refresh_clean``'s and join the shape's pool.  Returns the
        twin's windows."""
        twin, _ = self.calibration_round(bench, calls, every, timeout_s)
        bench.calibration.extend(twin)
        return twin

    def _single_windows(self, bench: ShapeBench, calls: int, timeout_s: float) -> list[CallTimes]:
        """``calls`` single-call baseline windows after one to warm up (before the batch size is
        set, ``baseline_window`` times one call: they size the batch)."""
        runner = self.attach_baseline(bench.baseline_slot)
        return [self.baseline_window(runner, bench, timeout_s) for _ in range(calls + 1)][1:]

    def calibration_round(self, bench: ShapeBench, calls: int, every: int,
                          timeout_s: float) -> tuple[list[CallTimes], list[CallTimes]]:
        """Trusted windows taken the way a candidate is timed (session.py): the twin runner in
        the candidate's place, on the candidate's buffer sets, every call of its windows checked
        and its memory map read, and the baseline runner's windows interleaved one every
        ``every``.  Back-to-back baseline windows, as this calibration was taken until the eighth
        session, ran 0.2-0.4 ms (of ~3 ms) below the timing's windows on an H100 (relu, 16M, eight
        calls a window): honest kernels were charged, and a runner reporting 1 us for every call
        was credited 1.52x the naive seed it ran.  Returns the twin's windows (the calibration
        pool: the candidate's role) and the baseline's, ``calls`` twin windows after a warm-up
        window of each."""
        k = max(1, bench.batch)
        twin = self._attach("chain_twin" if bench.fast_twin else "twin", tuple(bench.candidate_slots[:k]))
        base = self.attach_baseline(*bench.baseline_slots[:k])
        self._twin_window(twin, bench, timeout_s)
        self.baseline_window(base, bench, timeout_s)
        return interleaved_windows(lambda: self._twin_window(twin, bench, timeout_s),
                                   lambda: self.baseline_window(base, bench, timeout_s), calls, every)

    def _twin_window(self, twin: RunnerProcess, bench: ShapeBench, timeout_s: float) -> CallTimes:
        slots = bench.candidate_slots[:max(1, bench.batch)]
        inputs, chain_seed = bench.window_inputs(slots)
        reply, call, captured = timed_batch(twin, slots, "baseline", inputs, timeout_s, gate=self.gate,
                                            chain_seed=chain_seed)
        who = f"chain twin ({self.task.chain_twin or 'configured'} seed)" if bench.fast_twin else "naive seed's twin"
        if call is None or captured is None:
            raise RuntimeError(f"the {who} failed on {bench.shape.label}: {call_error(reply)}")
        if not call.marked:
            log.warning("a window of the %s on %s had no completion mark that matched its outputs "
                        "(completion.py): it is timed to the reply, and the calibration with it", who, bench.shape.label)
        mapped_files(twin.pid)          # as the candidate's memory map is read after each call
        xp = self.memory.xp
        if chain_seed is not None:
            inputs = chained_inputs(self.task, inputs[0], captured, xp)
        for values, taken in zip(inputs, captured):
            mismatch = check_call(self.task, taken, values, reference(self.task, values, bench.shape, xp),
                                  bench.shape, xp)
            if mismatch is not None:
                raise RuntimeError(f"the {who} is wrong on {bench.shape.label}: {mismatch.describe()}")
        return call

    def baseline_window(self, runner: RunnerProcess, bench: ShapeBench, timeout_s: float,
                        calls: int = 0) -> CallTimes:
        """One timed window of the trusted baseline on the shape's batch of buffer sets (attached
        to ``runner``; ``calls``: the first so many, else the whole batch), each with fresh inputs."""
        slots = bench.baseline_slots[:calls or max(1, bench.batch)]
        inputs, chain_seed = bench.window_inputs(slots)
        reply, call, _ = timed_batch(runner, slots, "baseline", inputs, timeout_s, gate=self.gate,
                                     chain_seed=chain_seed)
        if call is None:
            raise RuntimeError(f"the naive seed failed on {bench.shape.label}: {call_error(reply)}")
        return call

    def _library_ms(self, bench: ShapeBench, batch: int) -> float:
        """The library's time a call, ``batch`` calls to a timing as the candidate's windows
        (library.py; 1: alone, to size the batch)."""
        host = bench.inputs.first_base_host()
        xp = self.memory.xp
        expected = reference(self.task, {k: xp.asarray(v) for k, v in host.items()}, bench.shape, xp)
        ms = library.library_median_ms(self.task, bench.shape, host, expected, batch=batch)
        return float(ms or 0.0)

    def close(self) -> None:
        for role in list(self._runners):
            self._stop(role)
        for slot in [*self._validation.values(), *(s for b in self._shapes.values() for s in b.candidate_slots),
                     *(s for b in self._shapes.values() for s in b.baseline_slots)]:
            slot.free()
        self._validation.clear()
        self._shapes.clear()
