"""Ray workers: one evaluator actor per GPU, compilation as CPU tasks, and the pool around them.

The only module that imports ray.  Per candidate:

    CPU task  compile_fn(candidate, arch) ──fail──▶ failure_fn(candidate, compiled)  (no GPU time)
                    │ ok (the shared object stays in Ray's object store)
                    ▼
    GPU actor evaluator.evaluate(candidate, compiled) ──▶ EvalResult

Compiles run in parallel with GPU evaluation.  The pool gives each actor one candidate at a
time, once the actor has started (a replacement that cannot be placed, e.g. after its node
died, gets no candidate); an actor that dies (or its node), or runs one candidate longer than
``hang_timeout_s``, is killed and replaced and its candidate re-queued once; a candidate that
loses two workers is recorded as CRASH (TIMEOUT when both workers hung).  The evaluator class is
injected as a picklable factory, so CPU tests run the whole pool with a synthetic evaluator on
a local cluster (one node, or a head and a worker node) with declared GPU resources.

A local cluster started here keeps Ray's default, token authentication, without Ray's warning
about that default at every start (``QuietTokenDefault``); ``RAY_AUTH_MODE`` still decides.
"""
from __future__ import annotations

import collections
import logging
import os
import socket
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

from ..verdict.compile import CompileResult
from ..types import Candidate, EvalResult, GpuInfo, Status

log = logging.getLogger(__name__)

MAX_WORKER_LOSSES = 2          # a candidate that kills this many workers is a CRASH
INFO_TIMEOUT_S = 600.0


class WorkerError(RuntimeError):
    """The pool cannot run: no GPU visible, no cluster, an evaluator that cannot start."""


class EvaluatorLike(Protocol):
    @property
    def gpu_info(self) -> GpuInfo: ...

    @property
    def arch(self) -> str: ...

    def evaluate(self, candidate: Candidate, compiled: CompileResult | None = None) -> EvalResult: ...


CompileFn = Callable[[Candidate, str], CompileResult]
FailureFn = Callable[[Candidate, CompileResult], EvalResult]


# -- defaults for real runs (imports deferred: the driver needs no CUDA libraries) ------------
@dataclass(frozen=True)
class TaskEvaluatorFactory:
    """Builds ``evaluate.Evaluator(task_name, eval_config)`` inside the GPU actor."""

    task_name: str
    eval_config: Any

    def __call__(self) -> EvaluatorLike:
        from ..verdict.evaluate import Evaluator
        return Evaluator(self.task_name, self.eval_config)


@dataclass(frozen=True)
class NvccCompile:
    """``compile.compile_source`` with the task's header, as a CPU task."""

    header: str
    timeout_s: float              # eval.compile_timeout_s (default: verdict's EvalConfig)
    cache_dir: str | None = None
    allow_vendor_libraries: bool = False     # eval.allow_vendor_libraries: the link check's opt-in

    def __call__(self, candidate: Candidate, arch: str) -> CompileResult:
        from ..verdict.compile import DEFAULT_CACHE_DIR, compile_source
        return compile_source(candidate.source, self.header, arch,
                              cache_dir=self.cache_dir or DEFAULT_CACHE_DIR, timeout_s=self.timeout_s,
                              allow_vendor_libraries=self.allow_vendor_libraries)


def evaluator_compile_failure(candidate: Candidate, compiled: CompileResult) -> EvalResult:
    from ..verdict.evaluate import compile_failure_result
    return compile_failure_result(candidate, compiled)


# -- Ray side ---------------------------------------------------------------------------------
class EvaluatorActor:
    """Holds one evaluator on one GPU (Ray sets CUDA_VISIBLE_DEVICES for ``num_gpus=1``)."""

    def __init__(self, factory: Callable[[], EvaluatorLike]) -> None:
        self.evaluator = factory()
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "?").split(",")[0]
        self.name = f"{socket.gethostname()}:gpu{gpu}:{os.getpid()}"

    def info(self) -> tuple[str, GpuInfo, int]:
        return self.evaluator.arch, self.evaluator.gpu_info, os.getpid()

    def evaluate(self, candidate: Candidate, compiled: CompileResult | None) -> EvalResult:
        started = time.time()
        result = self.evaluator.evaluate(candidate, compiled)
        return replace(result, worker=self.name, started_unix_s=started)


def _compile_task(compile_fn: CompileFn, failure_fn: FailureFn, candidate: Candidate,
                  arch: str) -> tuple[EvalResult | None, CompileResult | None]:
    """(failure verdict or None, compiled or None): the driver only fetches the first."""
    try:
        compiled = compile_fn(candidate, arch)
    except Exception as exc:  # a compiler wrapper bug is a compile failure of this candidate
        log.exception("compile task raised")
        compiled = CompileResult(ok=False, key="", log=f"internal compile error: {type(exc).__name__}: {exc}",
                                 seconds=0.0, arch=arch)
    if not compiled.ok:
        return failure_fn(candidate, compiled), None
    return None, compiled


#: The Ray logger that announces, at every local start, that token authentication is on by default.
RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


class QuietTokenDefault(logging.Filter):
    """Drops Ray's "Token authentication is enabled for this Ray cluster" notice (the default,
    not a problem); its other messages (a missing or invalid token) pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


_QUIET = QuietTokenDefault()


def connect(address: str | None = None) -> bool:
    """Join ``address`` ($RAY_ADDRESS) or start a local cluster, and require a GPU in it.
    Returns True when this call initialised Ray (the caller shuts it down)."""
    address = address if address is not None else (os.environ.get("RAY_ADDRESS") or None)
    started = False
    if not ray.is_initialized():
        auth_logger = logging.getLogger(RAY_AUTH_LOGGER)
        if _QUIET not in auth_logger.filters:
            auth_logger.addFilter(_QUIET)
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise WorkerError(f"cannot start or join a Ray cluster ({address or 'local'}): "
                              f"{' '.join(str(exc).split())[:300]}") from None
        started = True
    if int(ray.cluster_resources().get("GPU", 0)) == 0:
        if started:
            ray.shutdown()
        where = f"the Ray cluster at {address}" if address else "this machine"
        raise WorkerError(f"no GPU visible to Ray on {where}: evolve needs at least one CUDA GPU")
    return started


# -- the pool ---------------------------------------------------------------------------------
@dataclass
class _Job:
    candidate: Candidate
    compiled_ref: Any = None          # ObjectRef of the CompileResult (None: evaluator compiles)
    losses: int = 0
    reasons: list[str] = field(default_factory=list)


@dataclass
class _Worker:
    actor: Any
    job: _Job | None = None
    ref: Any = None
    started: float = 0.0
    starting: Any = None              # ObjectRef of actor.info() until the actor has started


class GpuPool:
    """Evaluation backend on Ray (``backend.base.EvalBackend``): submit candidates, poll results."""

    def __init__(self, evaluator_factory: Callable[[], EvaluatorLike], *, compile_fn: CompileFn | None = None,
                 failure_fn: FailureFn | None = None, num_gpus: int = 0, hang_timeout_s: float = 1800.0,
                 address: str | None = None, cpus_per_compile: float = 1.0, owns_ray: bool = False) -> None:
        self.evaluator_factory = evaluator_factory
        self.compile_fn, self.failure_fn = compile_fn, failure_fn or evaluator_compile_failure
        self.num_gpus, self.hang_timeout_s = num_gpus, hang_timeout_s
        self.address = address if address is not None else os.environ.get("RAY_ADDRESS", "")
        self.cpus_per_compile = cpus_per_compile
        self.arch = ""
        self._gpu_info: GpuInfo | None = None
        self._workers: list[_Worker] = []
        self._queue: collections.deque[_Job] = collections.deque()
        self._compiling: dict[Any, _Job] = {}        # failure-ref -> job
        self._done: list[tuple[Candidate, EvalResult]] = []
        self._started_ray = owns_ray        # shut Ray down on close
        self.replaced_workers = 0

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> "GpuPool":
        self._started_ray = connect(self.address or None) or self._started_ray
        gpus = int(ray.cluster_resources().get("GPU", 0))
        count = min(self.num_gpus or gpus, gpus)
        self._remote_actor = ray.remote(num_gpus=1, num_cpus=0, max_restarts=0)(EvaluatorActor)
        self._remote_compile = ray.remote(num_returns=2, num_cpus=self.cpus_per_compile,
                                          max_retries=1)(_compile_task)
        self._workers = [self._new_worker() for _ in range(count)]
        try:
            self.arch, self._gpu_info, _ = ray.get(self._workers[0].starting, timeout=INFO_TIMEOUT_S)
        except (RayError, GetTimeoutError) as exc:
            raise WorkerError(f"the GPU evaluator could not start: {' '.join(str(exc).split())[-300:]}") from None
        self._workers[0].starting = None
        log.info("GPU pool: %d evaluator actor(s) on %s, compiling for %s", count, self._gpu_info.name, self.arch)
        return self

    def close(self) -> None:
        for worker in self._workers:
            ray.kill(worker.actor, no_restart=True)
        self._workers.clear()
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
            self._started_ray = False

    @property
    def gpu_info(self) -> GpuInfo | None:
        return self._gpu_info

    @property
    def size(self) -> int:
        return len(self._workers)

    def pending(self) -> int:
        busy = sum(1 for w in self._workers if w.job is not None)
        return len(self._queue) + len(self._compiling) + busy + len(self._done)

    # -- the backend contract ----------------------------------------------------------
    def submit(self, candidate: Candidate) -> None:
        self._enqueue(_Job(candidate))
        self._dispatch()

    def poll(self, timeout_s: float) -> list[tuple[Candidate, EvalResult]]:
        """Results finished within ``timeout_s`` (possibly none); handles dead and hung workers."""
        self._dispatch()
        refs = list(self._compiling) + [w.ref for w in self._workers if w.ref is not None] + \
            [w.starting for w in self._workers if w.starting is not None]
        if refs and not self._done:
            ready, _ = ray.wait(refs, num_returns=1, timeout=timeout_s)
            if ready:   # collect everything else that is ready too, without waiting
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                self._collect(ref)
        self._check_hung()
        self._dispatch()
        done, self._done = self._done, []
        return done

    # -- internals ---------------------------------------------------------------------
    def _new_worker(self) -> _Worker:
        actor = self._remote_actor.remote(self.evaluator_factory)
        return _Worker(actor, starting=actor.info.remote())

    def _dispatch(self) -> None:
        for worker in self._workers:
            if worker.job is None and worker.starting is None and self._queue:
                job = self._queue.popleft()
                worker.job, worker.started = job, time.monotonic()
                worker.ref = worker.actor.evaluate.remote(job.candidate, job.compiled_ref)

    def _collect(self, ref: Any) -> None:
        job = self._compiling.pop(ref, None)
        if job is not None:
            try:
                failure = ray.get(ref)
            except RayError as exc:
                failure = _internal_failure(job.candidate, Status.COMPILE_ERROR, f"compile task failed: {exc}")
            if failure is not None:
                self._done.append((job.candidate, failure))
            else:
                self._queue.append(job)
            return
        starting = next((w for w in self._workers if w.starting is not None and w.starting == ref), None)
        if starting is not None:
            self._started(starting)
            return
        worker = next((w for w in self._workers if w.ref == ref), None)
        if worker is None or worker.job is None:
            return
        job = worker.job
        try:
            result = ray.get(ref)
        except RayActorError as exc:
            self._lose_worker(worker, f"evaluator worker died ({type(exc).__name__})")
            return
        except RayTaskError as exc:   # the evaluator raised: its bug, not the candidate's
            log.error("evaluator raised on %s: %s", job.candidate.id, exc)
            result = _internal_failure(job.candidate, Status.CRASH, f"evaluator raised: {_last_line(exc)}")
        except RayError as exc:       # e.g. its compiled object was lost with a node: compile again
            log.warning("candidate %s lost its input (%s); evaluating it again", job.candidate.id,
                        type(exc).__name__)
            worker.job, worker.ref = None, None
            self._enqueue(job, first=True)
            return
        worker.job, worker.ref = None, None
        self._done.append((job.candidate, result))

    def _started(self, worker: _Worker) -> None:
        """A new actor answered ``info`` (it can take candidates) or died starting (replaced)."""
        try:
            ray.get(worker.starting)
        except RayError as exc:
            log.warning("a replacement evaluator worker failed to start (%s); trying again", type(exc).__name__)
            ray.kill(worker.actor, no_restart=True)
            fresh = self._new_worker()
            worker.actor, worker.starting = fresh.actor, fresh.starting
            return
        worker.starting = None

    def _enqueue(self, job: _Job, first: bool = False) -> None:
        """Compile ``job`` (a CPU task), or queue it for the evaluator (``first``: at the front)."""
        if self.compile_fn is None:
            if first:
                self._queue.appendleft(job)
            else:
                self._queue.append(job)
            return
        failure_ref, compiled_ref = self._remote_compile.remote(self.compile_fn, self.failure_fn,
                                                                job.candidate, self.arch)
        job.compiled_ref = compiled_ref
        self._compiling[failure_ref] = job

    def _check_hung(self) -> None:
        now = time.monotonic()
        for worker in self._workers:
            if worker.job is not None and now - worker.started > self.hang_timeout_s:
                self._lose_worker(worker, f"evaluator worker hung (> {self.hang_timeout_s:.0f} s on one candidate)")

    def _lose_worker(self, worker: _Worker, reason: str) -> None:
        job = worker.job
        assert job is not None
        log.warning("%s on candidate %s; replacing the worker", reason, job.candidate.id)
        ray.kill(worker.actor, no_restart=True)
        fresh = self._new_worker()
        worker.actor, worker.starting, worker.job, worker.ref = fresh.actor, fresh.starting, None, None
        self.replaced_workers += 1
        job.losses += 1
        job.reasons.append(reason)
        if job.losses >= MAX_WORKER_LOSSES:
            hung = all("hung" in r for r in job.reasons)
            self._done.append((job.candidate, _internal_failure(
                job.candidate, Status.TIMEOUT if hung else Status.CRASH,
                f"lost {job.losses} evaluator workers: " + "; ".join(job.reasons))))
        else:
            self._queue.appendleft(job)


def _internal_failure(candidate: Candidate, status: Status, summary: str) -> EvalResult:
    return EvalResult(candidate_id=candidate.id, task=candidate.task, status=status, summary=summary,
                      logs=(("run", summary),))


def _last_line(exc: Exception) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(exc).__name__
