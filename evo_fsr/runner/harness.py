"""Trusted side of the runner protocol: start a sandboxed runner, send commands, await replies.

Replies travel on a dedicated pipe (not stdout, which the candidate can write to).  A reply that
does not come within its timeout kills the runner's whole process group; a runner that dies
(segfault, abort, exit(0) from host code, CUDA fault) surfaces as ``RunnerDied`` with its
exit status and bounded output.  Every reply goes through ``protocol.check_reply``; a byte on the
reply pipe before a command was sent, a reply line over ``MAX_REPLY_BYTES``, or anything that is
not the well-formed answer to the command in flight kills the runner and raises
``ProtocolViolation`` (the verdict ``crash:sandbox-violation``): nothing the candidate writes can
raise anything else here.

A runner runs only while it serves a command: its process group is stopped (SIGSTOP) as soon as
a reply has come and continued (SIGCONT) just before the next command is written; ``settle``
waits until every thread of it is stopped.  Between its commands the evaluator times the trusted
baseline, and a candidate's thread left running there could watch for those windows and slow
them (the twenty-third session's suite v3 did, reading the baseline runner's state from /proc,
to lower its single-call floor).  Every runner is handled alike, trusted ones too, so the windows
of every role carry the same two signals.
"""
from __future__ import annotations

import json
import mmap
import os
import secrets
import select
import shutil
import signal
import struct
import sys
import time
from pathlib import Path
from typing import Any

from . import protocol
from .command_pipes import FEW_CORES
from .host_usage import CpuClock, RestCpu, other_runs, serving_thread_ns
from .protocol import GATE_PAGE_BYTES, MARK_OFFSET, MAX_REPLY_BYTES, RUNNER_FILES, ProtocolError
from .sandbox import (SandboxPolicy, confine_policy, kill_group, report_confinement,
                      spawn_sandboxed)

RUNNER_SCRIPT = Path(__file__).resolve().parent / "runner.py"
#: How long ``settle`` waits for every thread of a runner to stop before it counts the runner
#: ``unsettled`` (a thread inside a system call that cannot be interrupted stops when the call
#: returns), and how long in all before a thread still running is a protocol violation: nothing is
#: timed while a runner is not settled, so a thread parked in a long uninterruptible call (the
#: red team's madvise(MADV_POPULATE_READ) over 100 GB of reserved address space ran 6.7 s through
#: a SIGSTOP) gains nothing by it, and one that outlasts the limit ends the candidate.
SETTLE_TIMEOUT_S = 1.0
SETTLE_LIMIT_S = 10.0


class RunnerTimeout(Exception):
    pass


class RunnerDied(Exception):
    def __init__(self, message: str, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode


class ProtocolViolation(RunnerDied):
    """The runner (that is, code in the candidate's process) broke the protocol."""

    def __init__(self, message: str) -> None:
        super().__init__(f"protocol violation: {message}", None)


class RunnerProcess:
    """One runner process in ``workdir``; use as a context manager (always killed on exit)."""

    def __init__(self, workdir: Path, policy: SandboxPolicy | None = None, init_timeout_s: float = 60.0,
                 wait: bool = True, extra_files: tuple[Path, ...] = ()) -> None:
        """Start the runner (Python, sandbox, then its CUDA context on the first command,
        ``init``, sent at once).  ``wait`` awaits the start-up, else the first ``send`` (or
        ``ready``) does."""
        self.workdir = workdir
        self._init_timeout_s = init_timeout_s
        self._ready = False
        policy = policy or SandboxPolicy.for_candidate()
        # --- sandbox hook: private copy of the runner + its confinement policy -------------
        private = workdir / ".runner"
        private.mkdir(exist_ok=True)
        for name in RUNNER_FILES:
            shutil.copyfile(RUNNER_SCRIPT.parent / name, private / name)
        for path in extra_files:                  # the CPU tests' fake runtime
            shutil.copyfile(path, private / path.name)
        # -I -S: no user site, no site-packages (the runner needs only the standard library)
        argv = [sys.executable, "-I", "-S", str(private / "runner.py"), str(workdir)]
        confinement = confine_policy(policy, str(workdir))
        # --- end sandbox hook --------------------------------------------------------------
        self._pipes_closed = False
        cmd_r, self._cmd_w = os.pipe()
        self._reply_r, reply_w = os.pipe()
        argv += [str(cmd_r), str(reply_w)]
        # the gate's page (verdict/chain.py): shared with the runner, which maps it into the device
        gate_fd = os.memfd_create("evo-fsr-gate", os.MFD_CLOEXEC)
        os.ftruncate(gate_fd, GATE_PAGE_BYTES)
        self.gate_page = mmap.mmap(gate_fd, GATE_PAGE_BYTES)
        if confinement:
            (private / "policy.json").write_text(json.dumps(confinement))
            argv.append(str(private / "policy.json"))
        try:
            self.proc, self.output = spawn_sandboxed(argv, cwd=str(workdir), policy=policy,
                                                     pass_fds=(cmd_r, reply_w, gate_fd), limits_after_start=True)
        finally:
            os.close(cmd_r)
            os.close(reply_w)
            os.close(gate_fd)
        self.cpu = CpuClock(self.proc.pid)   # its threads' CPU, read around every timed window (host_usage.py)
        self._buffer = b""
        self._stopped = False             # SIGSTOP sent since the last command (``settle`` awaits it)
        self._settled = False             # and every thread seen stopped since (``settle``)
        self.unsettled = 0                # settles that timed out with a thread still running
        self.started = time.perf_counter()
        self.startup_ms: dict[str, float] = {}    # the runner's own start-up phases (init reply)
        self._init = self._command({"op": protocol.INIT, "gate_fd": gate_fd})
        try:
            os.write(self._cmd_w, (json.dumps(self._init) + "\n").encode())
        except BrokenPipeError:
            pass                        # it died: ready() reports how
        if wait:
            self.ready()

    def set_gate(self, seed: int) -> None:
        """Write the gate's word: 0 closes it (before ``arm``), a seed opens it (the window)."""
        struct.pack_into("<Q", self.gate_page, 0, seed)

    def await_mark(self, key: int, timeout_s: float) -> int | None:
        """Spin until the completion mark of ``key`` is in the gate's page and return its hash,
        read at once (verdict/completion.py: the hash is written before the key); None if a reply
        (or the runner's end) is on the reply pipe with no such mark (the caller reads the reply).
        Past ``timeout_s`` the runner's group is killed (``RunnerTimeout``).  A spin, not a sleep:
        the trusted side's wake-up is not part of any window."""
        deadline = time.monotonic() + timeout_s
        page, reply_fd, spins = self.gate_page, self._reply_r, 0
        while True:
            seen, digest = struct.unpack_from("<QQ", page, MARK_OFFSET)
            if seen == key:
                return int(digest)
            spins += 1
            if FEW_CORES:
                os.sched_yield()
            if spins & 31 == 0:
                if self._buffer or select.select([reply_fd], [], [], 0)[0]:
                    seen, digest = struct.unpack_from("<QQ", page, MARK_OFFSET)
                    return int(digest) if seen == key else None
                if time.monotonic() > deadline:
                    kill_group(self.proc)
                    raise RunnerTimeout(f"no completion mark and no reply within {timeout_s:.0f} s")

    def _command(self, message: dict[str, Any]) -> dict[str, Any]:
        """The message with a fresh, unpredictable id that its reply must echo."""
        return {**message, "id": secrets.randbits(48)}

    def ready(self) -> None:
        """Await the runner's start-up reply (once); raises RunnerDied / RunnerTimeout."""
        if not self._ready:
            reply = self.await_reply(self._init, self._init_timeout_s)
            if "confinement" in reply:
                report_confinement(reply["confinement"])
            if "error" in reply:
                raise RunnerDied(f"runner could not start: {reply['error']}", None)
            self.startup_ms = {str(k): float(v) for k, v in reply.get("startup_ms", {}).items()}
            self._ready = True
            self._stop()

    # -- stopped between commands (module docstring) ------------------------------------------
    def _signal(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _stop(self) -> None:
        """SIGSTOP the runner's process group (a reply has come); ``settle`` awaits the stop."""
        self._signal(signal.SIGSTOP)
        self._stopped = True

    def _continue(self) -> None:
        if self._stopped:
            self._signal(signal.SIGCONT)
            self._stopped = self._settled = False

    def rest_cpu(self) -> RestCpu:
        """``cpu_at_rest``, with the trusted time of that read, and the serving thread's own CPU
        nanoseconds and the other threads' runs read in the same stop, after it
        (``host_usage.serving_thread_ns``, ``other_runs``; -1 where not read), so that the /proc
        reads they take fall after the time of the read."""
        running = not self._stopped
        if running:
            self._stop()
        self.settle()
        total, at_s = self.cpu.ns(), time.perf_counter()
        serving = serving_thread_ns(self.proc.pid)
        runs = other_runs(self.proc.pid)
        if running:
            self._continue()
        return RestCpu(total, serving, at_s, runs)

    def cpu_at_rest(self) -> int:
        """The runner's CPU clock (``cpu``, nanoseconds) read while every thread of it is stopped;
        a running runner is stopped for the read (``settle``) and continued after it.  Exact only
        at rest: Linux brings another process's running threads' time up to date at the scheduler's
        tick (every 1-4 ms) and at their context switches, so a read while one runs misses up to a
        tick of it (a thread spinning through a 0.3 ms window read no CPU in 92 % of such windows
        and ~13 cores in the rest, a CPU machine at 250 Hz)."""
        return self.rest_cpu().total_ns

    def running_threads(self) -> list[int]:
        """The runner's threads that are neither stopped nor gone (``/proc/<pid>/task``)."""
        running = []
        try:
            tasks = os.listdir(f"/proc/{self.proc.pid}/task")
        except OSError:
            return []                   # gone
        for tid in tasks:
            try:
                with open(f"/proc/{self.proc.pid}/task/{tid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[-1].split()     # the name may hold ") "
            except OSError:
                continue                # the thread is gone
            if fields and fields[0] not in (b"T", b"t", b"Z", b"X"):
                running.append(int(tid))
        return running

    def settle(self, timeout_s: float | None = None) -> bool:
        """Wait until every thread of the runner is stopped (after a reply; nothing to wait for
        otherwise).  True at once; False, with ``unsettled`` counted, when one still ran after
        ``timeout_s`` (``SETTLE_TIMEOUT_S``).  One still running after ``SETTLE_LIMIT_S`` kills the
        runner's group: ``ProtocolViolation``.  It never returns while a thread of the runner
        runs, so nothing is timed beside one."""
        if not self._stopped or self._settled:
            return True
        start = time.monotonic()
        counted_after = SETTLE_TIMEOUT_S if timeout_s is None else timeout_s
        counted = False
        while running := self.running_threads():
            waited = time.monotonic() - start
            if waited > SETTLE_LIMIT_S:
                raise self._violation(f"{len(running)} thread(s) of the runner still ran {waited:.1f} s after "
                                      f"it was stopped (SIGSTOP) following its reply")
            if waited > counted_after and not counted:
                self.unsettled += 1
                counted = True
            time.sleep(1e-3 if counted else 20e-6)
        self._settled = True
        return not counted

    def __enter__(self) -> "RunnerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def send(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one command and return its checked reply (an ``error`` reply included)."""
        return self.collect(self.post(message), timeout_s)

    def wake(self) -> None:
        """Continue the runner and send it a wake-up line (no command): it spins on its command
        pipe from then on (command_pipes.SPIN_S), so a command sent soon after finds it running.  Before
        a window opens, so that no runner's wake-up, honest or not, is inside it."""
        self.ready()
        self._continue()
        try:
            os.write(self._cmd_w, b"\n")
        except BrokenPipeError:
            raise self._died() from None

    def post(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one command (the runner continued first); ``collect`` its reply."""
        self.ready()
        self._refuse_unsolicited()
        command = self._command(message)
        self._continue()
        try:
            os.write(self._cmd_w, (json.dumps(command) + "\n").encode())
        except BrokenPipeError:
            raise self._died() from None
        return command

    def collect(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """The checked reply to ``command`` (``post``); the runner is stopped once it has come."""
        reply = self.await_reply(command, timeout_s)
        self._stop()
        return reply

    def _violation(self, what: str) -> ProtocolViolation:
        kill_group(self.proc)
        return ProtocolViolation(what)

    def _refuse_unsolicited(self) -> None:
        """Nothing may be on the reply pipe before a command is sent (an early or forged reply)."""
        if self._buffer:
            raise self._violation("data on the reply pipe before the command was sent")
        ready, _, _ = select.select([self._reply_r], [], [], 0)
        if ready:
            chunk = os.read(self._reply_r, MAX_REPLY_BYTES)
            if not chunk:
                raise self._died()
            raise self._violation("data on the reply pipe before the command was sent")

    def await_reply(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_REPLY_BYTES:
                raise self._violation(f"a reply line over {MAX_REPLY_BYTES} bytes")
            left = deadline - time.monotonic()
            if left <= 0:
                kill_group(self.proc)
                raise RunnerTimeout(f"no reply within {timeout_s:.0f} s")
            ready, _, _ = select.select([self._reply_r], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._reply_r, 1 << 16)
            if not chunk:
                raise self._died()
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        if len(line) > MAX_REPLY_BYTES:
            raise self._violation(f"a reply line over {MAX_REPLY_BYTES} bytes")
        if self._buffer:
            raise self._violation("more than one reply line to one command")
        try:
            return protocol.check_reply(command, json.loads(line))
        except (ValueError, RecursionError):
            raise self._violation("malformed reply (not JSON)") from None
        except ProtocolError as exc:
            raise self._violation(str(exc)) from None

    def _died(self) -> RunnerDied:
        try:
            code = self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - still running after closing its pipe: kill it
            kill_group(self.proc)
            code = self.proc.returncode
        if code is not None and code < 0:
            try:
                what = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                what = f"killed by signal {-code}"
        else:
            what = f"exited with status {code}"
        return RunnerDied(f"candidate process {what}", code)

    def log_text(self, join_timeout_s: float = 1.0) -> str:
        """The runner's stdout and stderr, waiting up to ``join_timeout_s`` for their end."""
        return self.output.text(join_timeout_s=join_timeout_s)

    def close(self, wait: bool = True) -> None:
        """Kill the runner's process group at once: it holds nothing worth a graceful exit.  With
        ``wait=False`` the exit (the driver tearing down its CUDA context) is not awaited: call
        ``reap`` later, before anything that must not overlap it."""
        if wait:
            kill_group(self.proc)
        else:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._close_pipes()

    def reap(self) -> None:
        """Wait for a runner killed with ``close(wait=False)`` to be gone."""
        kill_group(self.proc)

    def _close_pipes(self) -> None:
        if self._pipes_closed:          # never close a descriptor number twice (it may be reused)
            return
        self._pipes_closed = True
        for fd in (self._cmd_w, self._reply_r):
            try:
                os.close(fd)
            except OSError:
                pass


__all__ = ["RunnerProcess", "RunnerTimeout", "RunnerDied", "ProtocolViolation"]
