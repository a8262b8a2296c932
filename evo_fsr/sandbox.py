"""Sandbox for untrusted processes: the nvcc compile of a candidate and the candidate runner.

What is enforced here (see SECURITY.md for the threat model):
- a fresh process in its own session / process group, killed as a group on timeout;
- a private working directory (HOME and TMPDIR point into it);
- a scrubbed environment: only an allow-list of variables (no API keys, no OPENAI_*);
- resource limits (rlimits): CPU seconds, size of any file written, core dumps off;
- output captured through a pipe and bounded (head and tail kept), so a printf flood
  cannot fill a disk or the caller's memory.
"""
from __future__ import annotations

import logging
import os
import resource
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Sequence

log = logging.getLogger(__name__)

#: Variables a sandboxed process may see (prefix match where the name ends with '*').
BASE_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
                 "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_*", "PYTHONPATH",
                 "VIRTUAL_ENV", "CONDA_PREFIX")


@dataclass(frozen=True)
class SandboxPolicy:
    cpu_seconds: int | None = None          # RLIMIT_CPU
    file_size_bytes: int | None = None      # RLIMIT_FSIZE (any single file written)
    env_keep: tuple[str, ...] = BASE_ENV_KEEP
    env_set: tuple[tuple[str, str], ...] = field(default=())
    output_head_bytes: int = 64 * 1024
    output_tail_bytes: int = 8 * 1024

    @classmethod
    def for_compiler(cls) -> "SandboxPolicy":
        return cls(cpu_seconds=600, file_size_bytes=512 * 2**20)

    @classmethod
    def for_candidate(cls) -> "SandboxPolicy":
        return cls(cpu_seconds=600, file_size_bytes=1024 * 2**20,
                   env_set=(("PYTHONDONTWRITEBYTECODE", "1"),))


@dataclass(frozen=True)
class Outcome:
    returncode: int
    output: str
    timed_out: bool
    seconds: float


def scrubbed_env(policy: SandboxPolicy, workdir: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for name, value in os.environ.items():
        for pattern in policy.env_keep:
            if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
                env[name] = value
    env.update({"HOME": workdir, "TMPDIR": workdir, "TMP": workdir, "TEMP": workdir})
    env.update(dict(policy.env_set))
    return env


def _limits(policy: SandboxPolicy):  # type: ignore[no-untyped-def]
    def apply() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if policy.cpu_seconds:
            resource.setrlimit(resource.RLIMIT_CPU, (policy.cpu_seconds, policy.cpu_seconds + 5))
        if policy.file_size_bytes:
            resource.setrlimit(resource.RLIMIT_FSIZE, (policy.file_size_bytes, policy.file_size_bytes))
    return apply


class BoundedOutput:
    """Drains a pipe on a thread, keeping the first and last bytes and counting the rest."""

    def __init__(self, stream: IO[bytes], head_bytes: int, tail_bytes: int) -> None:
        self._stream, self._head_max, self._tail_max = stream, head_bytes, tail_bytes
        self._head = bytearray()
        self._tail = bytearray()
        self.dropped_bytes = 0
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            chunk = self._stream.read1(65536) if hasattr(self._stream, "read1") else self._stream.read(65536)
            if not chunk:
                break
            room = self._head_max - len(self._head)
            if room > 0:
                self._head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self._tail += chunk
                if len(self._tail) > self._tail_max:
                    cut = len(self._tail) - self._tail_max
                    self.dropped_bytes += cut
                    del self._tail[:cut]

    def text(self, join_timeout_s: float = 2.0) -> str:
        self._thread.join(join_timeout_s)
        head = self._head.decode(errors="replace")
        tail = self._tail.decode(errors="replace")
        if self.dropped_bytes:
            return f"{head}\n... [{self.dropped_bytes} bytes of output dropped] ...\n{tail}"
        return head + tail


def kill_group(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    """SIGKILL the whole process group of ``proc`` (started with a new session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.error("process group %d did not die after SIGKILL", proc.pid)


def spawn_sandboxed(cmd: Sequence[str], cwd: str, policy: SandboxPolicy,
                    pass_fds: Sequence[int] = (), stdin: int | None = subprocess.DEVNULL,
                    ) -> tuple[subprocess.Popen, BoundedOutput]:  # type: ignore[type-arg]
    proc = subprocess.Popen(
        list(cmd), cwd=cwd, env=scrubbed_env(policy, cwd), stdin=stdin, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True, pass_fds=tuple(pass_fds),
        preexec_fn=_limits(policy), close_fds=True,
    )
    assert proc.stdout is not None
    return proc, BoundedOutput(proc.stdout, policy.output_head_bytes, policy.output_tail_bytes)


def run_sandboxed(cmd: Sequence[str], cwd: str, timeout_s: float, policy: SandboxPolicy) -> Outcome:
    """Run to completion (or timeout, which kills the process group)."""
    start = time.perf_counter()
    proc, output = spawn_sandboxed(cmd, cwd, policy)
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        kill_group(proc)  # also reaps grandchildren left behind (cicc, ptxas ...)
    return Outcome(returncode=proc.returncode if proc.returncode is not None else -9,
                   output=output.text(), timed_out=timed_out, seconds=time.perf_counter() - start)
