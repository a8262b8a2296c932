"""Runner processes for an evaluator: one fresh, sandboxed process per candidate, started ahead.

The next candidate's runner starts (Python, sandbox, CUDA context) while the current candidate
is still being checked, so its start-up is off the critical path; evaluate.py says when:

- ``take()`` before a candidate: the runner started ahead once it is up (one that failed to
  start is discarded), else a new one, awaited; a runner's start-up runs no candidate code
  (the candidate's library is written into its workdir after ``take``), so a start that fails
  is the evaluator's failure, retried ``START_ATTEMPTS`` times before ``RunnerStartFailed``;
- ``keep_ahead(1)`` at prepare and ``timed_calls_done()`` once a candidate's timed calls are
  over (``keep_ahead(2)``): the runners ahead;
- ``reap_later(runner)`` when a candidate is done: killed without waiting; ``reap_dying()``
  awaits those exits, before the next candidate runs anything (its GPU memory is free) and
  before any timing;
- ``await_ahead()`` before a timing: every runner ahead has finished starting.  Nothing of ours
  starts or stops while a candidate is timed.  (Measured on an H100: a sandboxed runner
  starting up while another candidate was timed added about 1.6 ms of host time to each timed
  call, falsely flagging escaped-stream work.)
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections import deque
from pathlib import Path

from .harness import RunnerDied, RunnerProcess, RunnerTimeout
from .sandbox import SandboxPolicy

log = logging.getLogger(__name__)

Spare = tuple[Path, RunnerProcess]        # (private workdir, runner process)

#: Fresh runners tried in ``take`` when none started ahead is up, and the pause before each
#: retry.  On an H200 (twenty-third and twenty-fourth sessions), with nine GPU test processes
#: at once, runners failed in ``cudaSetDevice`` with out of memory while the GPU's memory peaked
#: at 56 of 143 GB and the host's at 16 of 128 GB; every one of them started when tried again.
START_ATTEMPTS = 3
START_RETRY_PAUSE_S = (0.5, 2.0)


class RunnerStartFailed(RunnerDied):
    """No runner could be started: the evaluator's failure (no candidate code had run)."""


def scratch_root() -> str | None:
    """Where runner workdirs go: /dev/shm when writable, else the system temp folder."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


class RunnerSupply:
    """Runners of one evaluator; ``job_json`` is written into each workdir as job.json."""

    def __init__(self, job_json: str, prespawn: bool = True, extra_files: tuple[Path, ...] = (),
                 policy: SandboxPolicy | None = None) -> None:
        self.job_json = job_json
        self.prespawn = prespawn
        self.extra_files = extra_files
        self.policy = policy
        # runners started ahead, the next candidate's first (at most two: the next candidate's,
        # and the one started once the current candidate's timed calls are done)
        self._ahead: deque[Spare] = deque()
        self._dying: list[RunnerProcess] = []     # killed runners whose exit is not yet awaited

    def _new(self) -> Spare:
        work = Path(tempfile.mkdtemp(prefix="evo-fsr-cand-", dir=scratch_root()))
        (work / "job.json").write_text(self.job_json)
        try:
            return work, RunnerProcess(work, policy=self.policy, wait=False, extra_files=self.extra_files)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise

    def take(self) -> Spare:
        """A runner that is up: the one started ahead, else a fresh one, awaited.  One that fails
        to start (say, the GPU memory was still held by the previous candidate, or CUDA could
        not create its context while other processes started theirs) is discarded and a fresh
        one tried, ``START_ATTEMPTS`` in all, with a pause before each retry; then
        ``RunnerStartFailed``.  The candidate's code is not loaded by then, so none of this is
        the candidate's to answer for."""
        while self._ahead:
            spare = self._ahead.popleft()
            if self._up_or_discarded(spare):
                return spare
        errors: list[str] = []
        for attempt in range(START_ATTEMPTS):
            if attempt:
                time.sleep(START_RETRY_PAUSE_S[min(attempt, len(START_RETRY_PAUSE_S)) - 1])
            try:
                spare = self._new()
            except OSError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            error = self._start_error(spare)
            if error is None:
                if attempt:
                    log.warning("a runner started on try %d of %d (before: %s)", attempt + 1, START_ATTEMPTS,
                                "; ".join(errors))
                return spare
            errors.append(error)
        raise RunnerStartFailed(f"no runner could be started in {START_ATTEMPTS} tries: {'; '.join(errors)}", None)

    def _up_or_discarded(self, spare: Spare) -> bool:
        """Wait for a runner started ahead; True when it is up, else it is discarded."""
        error = self._start_error(spare)
        if error is not None:
            log.warning("a runner started ahead failed to start (%s); the next candidate starts its own", error)
        return error is None

    def _start_error(self, spare: Spare) -> str | None:
        """Await ``spare``'s start-up: None when it is up, else why not (and it is discarded)."""
        try:
            spare[1].ready()
            return None
        except (RunnerDied, RunnerTimeout) as exc:
            self._discard(spare)
            return str(exc)

    def keep_ahead(self, count: int) -> None:
        """Start runners until ``count`` are ahead (at prepare, 1: the first candidate, or the
        runner ahead failed; its start-up then overlaps this candidate's validation)."""
        if not self.prespawn:
            return
        try:
            while len(self._ahead) < count:
                self._ahead.append(self._new())
        except OSError as exc:
            log.warning("could not start a runner ahead (the next one starts on demand): %s", exc)

    def timed_calls_done(self) -> None:
        """A candidate's timed calls are over (or it was not timed): start the runner of the
        candidate after the next one now, while this candidate's outputs are checked and the
        next one is validated; ``await_ahead`` awaits its start-up before the next timing."""
        self.keep_ahead(2)

    def await_ahead(self) -> None:
        """Wait for the start-up of every runner ahead; one that failed is discarded."""
        for spare in list(self._ahead):
            if not self._up_or_discarded(spare):
                self._ahead.remove(spare)

    def reap_later(self, runner: RunnerProcess) -> None:
        """``runner`` was killed without waiting; ``reap_dying`` awaits its exit."""
        self._dying.append(runner)

    def reap_dying(self) -> None:
        while self._dying:
            self._dying.pop().reap()

    def _discard(self, spare: Spare) -> None:
        spare[1].close()
        shutil.rmtree(spare[0], ignore_errors=True)

    def close(self) -> None:
        """Await the killed runners and stop the runners started ahead."""
        self.reap_dying()
        while self._ahead:
            self._discard(self._ahead.popleft())
