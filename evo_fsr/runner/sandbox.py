"""Sandbox for untrusted processes: the nvcc compile of a candidate and the candidate runner.

What is enforced here (see SECURITY.md for the threat model):
- a fresh process in its own session / process group, killed as a group on timeout;
- a private working directory (HOME and TMPDIR point into it);
- a scrubbed environment: only an allow-list of variables (no API keys, no OPENAI_*);
- resource limits (rlimits): CPU seconds, size of any file written, core dumps off;
- output captured through a pipe and bounded (head and tail kept), so a printf flood
  cannot fill a disk or the caller's memory;
- confinement (confine.py), each layer where the kernel permits it, with one logged warning per
  layer it refuses: an empty network namespace, a Landlock filesystem allow-list (for the
  runner, reads file by file: the standard library, glibc, libcudart and the driver, no vendor
  library unless SandboxPolicy.allow_vendor_libraries; for the compiler, system/Python/CUDA dirs; writes only in the workdir and to GPU device nodes; TCP and signals
  outside the sandbox denied), all capabilities dropped; and for the candidate runner, applied
  in-process after CUDA init, a seccomp filter (no exec, no fork, no sockets, no ptrace ...).
  The compiler is confined by a small exec wrapper (``python -I -S confine.py --exec ...``).
``EVO_FSR_SANDBOX=off`` turns the confinement layers off (with a warning), for debugging only.
"""
from __future__ import annotations

import functools
import glob
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Sequence

# the runner's file-level read allow-list, and the trusted side's check of what it mapped
from .libraries import MapsUnreadable, mapped_files, runner_read_rules, vendor_libraries  # noqa: F401

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
    max_processes: int | None = None        # RLIMIT_NPROC headroom over the user's current count
    # confinement layers (confine.py); each one only where the kernel permits it
    netns: bool = False                     # empty network namespace
    landlock: bool = False                  # filesystem allow-list (+ TCP, signal scoping)
    drop_caps: bool = False                 # no capabilities, even for a root evaluator
    seccomp: bool = False                   # syscall filter: applied in-process by the runner only
    confine_via_exec: bool = False          # wrap the command with ``confine.py --exec``
    extra_read: tuple[str, ...] = ()        # more read-only paths for the Landlock allow-list
    extra_write: tuple[str, ...] = ()       # more writable paths (the CPU tests' fake device memory)
    # Landlock reads file by file (libraries.runner_read_rules): only what the runner needs, so
    # no vendor library (cuBLAS, cuDNN, NCCL, nvrtc, torch's ...) can be opened; off: whole
    # system, Python and CUDA directories (the compiler's rights)
    exact_reads: bool = False
    allow_vendor_libraries: bool = False    # the user's opt-in: exact_reads is ignored
    cpus: tuple[int, ...] = ()              # the cores it runs on (runner/cores.py; with seccomp: kept)

    @classmethod
    def for_compiler(cls) -> "SandboxPolicy":
        return cls(cpu_seconds=600, file_size_bytes=512 * 2**20, max_processes=256,
                   netns=True, landlock=True, drop_caps=True, confine_via_exec=True)

    @classmethod
    def for_candidate(cls, allow_vendor_libraries: bool = False) -> "SandboxPolicy":
        return cls(cpu_seconds=600, file_size_bytes=1024 * 2**20,
                   env_set=(("PYTHONDONTWRITEBYTECODE", "1"),),
                   netns=True, landlock=True, drop_caps=True, seccomp=True, exact_reads=True,
                   allow_vendor_libraries=allow_vendor_libraries)

    @classmethod
    def unconfined(cls, base: "SandboxPolicy") -> "SandboxPolicy":
        from dataclasses import replace
        return replace(base, netns=False, landlock=False, drop_caps=False, seccomp=False,
                       confine_via_exec=False)


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


def _user_process_count() -> int:
    uid, count = os.getuid(), 0
    for entry in glob.glob("/proc/[0-9]*"):
        try:
            count += os.stat(entry).st_uid == uid
        except OSError:
            pass
    return count


def _rlimits(policy: SandboxPolicy) -> list[tuple[int, tuple[int, int]]]:
    # RLIMIT_NPROC counts all of the user's processes (and root ignores it): headroom over now
    nproc = (_user_process_count() + policy.max_processes
             if policy.max_processes and os.getuid() != 0 else None)
    limits = [(resource.RLIMIT_CORE, (0, 0))]
    if policy.cpu_seconds:
        limits.append((resource.RLIMIT_CPU, (policy.cpu_seconds, policy.cpu_seconds + 5)))
    if policy.file_size_bytes:
        limits.append((resource.RLIMIT_FSIZE, (policy.file_size_bytes, policy.file_size_bytes)))
    if nproc:
        limits.append((resource.RLIMIT_NPROC, (nproc, nproc)))
    return limits


def _set_rlimits(limits: list[tuple[int, tuple[int, int]]], set_one: Callable[[int, tuple[int, int]], Any]) -> None:
    for which, value in limits:
        try:
            set_one(which, value)
        except (ValueError, OSError):
            if which != resource.RLIMIT_NPROC:      # NPROC is headroom: best effort
                raise


def _limits(policy: SandboxPolicy):  # type: ignore[no-untyped-def]
    limits = _rlimits(policy)
    return lambda: _set_rlimits(limits, resource.setrlimit)   # in the child, between fork and exec


def _apply_limits_to(pid: int, policy: SandboxPolicy) -> None:
    """The same rlimits, set on a started process (``prlimit``)."""
    _set_rlimits(_rlimits(policy), lambda which, value: resource.prlimit(pid, which, value))


# -- confinement ---------------------------------------------------------------------------------
CONFINE_SCRIPT = Path(__file__).resolve().parent / "confine.py"
_warned: set[str] = set()
_warn_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning("%s", message)


def confinement_enabled() -> bool:
    if os.environ.get("EVO_FSR_SANDBOX", "").lower() in ("off", "0", "no", "false"):
        warn_once("disabled", "EVO_FSR_SANDBOX=off: candidate and compiler confinement (network namespace, "
                  "Landlock, capabilities, seccomp) is OFF; only process isolation, env scrub and rlimits remain")
        return False
    return sys.platform.startswith("linux")


@functools.lru_cache(maxsize=None)
def kernel_support() -> dict[str, Any]:
    """What this kernel allows, probed once per process (netns in a throwaway child)."""
    from . import confine
    support: dict[str, Any] = {"landlock_abi": confine.landlock_abi(), "netns": "off: not probed",
                               "seccomp": confine.AUDIT_ARCH is not None and os.path.exists("/proc/self/status"),
                               "kernel": os.uname().release}
    try:
        out = subprocess.run([sys.executable, "-I", "-S", str(CONFINE_SCRIPT), "--probe"], capture_output=True,
                             text=True, timeout=30, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        support["netns"] = json.loads(out.stdout)["netns"]
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as exc:
        support["netns"] = f"off: probe failed ({exc})"
    if support["landlock_abi"] <= 0:
        warn_once("landlock", f"sandbox: Landlock is not available on kernel {support['kernel']}: untrusted code "
                  "may READ any file this user can and reach /proc/<pid>/environ of this user's processes; "
                  "writes are limited only by file permissions")
    elif support["landlock_abi"] < 4:
        warn_once("landlock-net", f"sandbox: Landlock ABI {support['landlock_abi']} < 4: no TCP restriction "
                  "from Landlock (the network namespace and seccomp still apply where available)")
    if str(support["netns"]).startswith("off"):
        warn_once("netns", f"sandbox: no network namespace ({support['netns']}): the compiler is not cut off "
                  "from the network (the candidate runner still has the seccomp socket filter)")
    if not support["seccomp"]:
        warn_once("seccomp", f"sandbox: no seccomp filter for {os.uname().machine}: candidate host code may "
                  "fork, exec and open sockets")
    return support


def _safe_to_allow(path: str, forbidden: tuple[str, ...]) -> bool:
    """Never allow '/', a home directory, the repo, or any ancestor of them."""
    real = os.path.realpath(path)
    if real in ("/", "") or len(Path(real).parts) < 2:
        return False
    return not any(f == real or f.startswith(real.rstrip("/") + "/") for f in forbidden)


@functools.lru_cache(maxsize=None)
def read_allow_list(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Read/exec allow-list: system dirs, selected /etc files, /proc, /sys, Python, CUDA."""
    repo = str(Path(__file__).resolve().parent.parent)
    forbidden = tuple(os.path.realpath(p) for p in (repo, str(Path.home()), os.getcwd()))
    paths = ["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/proc", "/sys",
             "/dev/urandom", "/dev/random", "/dev/zero"]
    paths += [f"/etc/{name}" for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
                                          "nsswitch.conf", "passwd", "group", "host.conf", "gai.conf",
                                          "os-release", "nvidia", "alternatives")]
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(os.path.realpath(sys.executable))]
    try:
        import numpy
        candidates.append(str(Path(numpy.__file__).resolve().parent.parent))
    except ImportError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX", "VIRTUAL_ENV"):
        if os.environ.get(var):
            candidates.append(os.environ[var])
    candidates += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    for tool in ("nvcc", "gcc", "g++", "cc", "c++", "ld", "as"):
        found = shutil.which(tool)
        if found:
            candidates.append(str(Path(os.path.realpath(found)).parent.parent))
    try:
        from .cudart import _candidates as cudart_candidates
        candidates += [os.path.dirname(os.path.realpath(p)) for p in cudart_candidates() if os.path.isabs(p)][:3]
    except Exception:  # noqa: BLE001 - no runtime here: nothing more to allow
        pass
    candidates.append("/usr/local/cuda")
    candidates += list(extra)
    for path in candidates:
        real = os.path.realpath(path)
        if os.path.exists(real) and _safe_to_allow(real, forbidden) and real not in paths:
            paths.append(real)
    return tuple(p for p in paths if os.path.exists(p))


def device_allow_list() -> tuple[str, ...]:
    """Device nodes opened read-write: the GPU's, /dev/null and /dev/full."""
    return tuple(["/dev/null", "/dev/full"] + sorted(glob.glob("/dev/nvidia*")) + glob.glob("/dev/dxg"))


def confine_policy(policy: SandboxPolicy, workdir: str) -> dict[str, Any]:
    """The JSON policy confine.py applies, limited to what this kernel supports."""
    if not confinement_enabled() or not (policy.netns or policy.landlock or policy.drop_caps or policy.seccomp):
        return {}
    support = kernel_support()
    if policy.exact_reads and not policy.allow_vendor_libraries:
        rules = runner_read_rules(policy.extra_read)
        read, listable = list(rules.files + rules.trees), list(rules.listable)
    else:
        read, listable = list(read_allow_list(policy.extra_read)), []
    return {"netns": policy.netns and not str(support["netns"]).startswith("off"),
            "landlock": policy.landlock and support["landlock_abi"] > 0,
            "caps": policy.drop_caps, "seccomp": policy.seccomp and bool(support["seccomp"]),
            "read": read, "list": listable,
            # a runner reads its own /proc/<pid> and no other process's (confine.own_proc)
            "proc": "own" if policy.exact_reads else "all",
            # /proc/self resolves in the confined process to its own /proc/<pid>: the CUDA driver
            # writes there while it initialises (found on an H100, driver 13.0)
            "write": [os.path.realpath(workdir), "/proc/self", *map(os.path.realpath, policy.extra_write)],
            "devices": list(device_allow_list()), "cpus": list(policy.cpus)}


def report_confinement(status: dict[str, str], who: str = "candidate runner") -> None:
    """One warning per layer a sandboxed process reports as not applied."""
    for layer, state in sorted(status.items()):
        if state.startswith("off") and "disabled by policy" not in state:
            warn_once(f"{who}:{layer}", f"sandbox: {who}: {layer} not applied: {state}")


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
                    limits_after_start: bool = False,
                    ) -> tuple[subprocess.Popen, BoundedOutput]:  # type: ignore[type-arg]
    """Start ``cmd`` in a new session with a scrubbed environment and rlimits.

    ``limits_after_start``: set the rlimits with ``prlimit`` right after the start instead of
    between fork and exec.  Without a ``preexec_fn`` Python can start the child with vfork,
    much cheaper from a large parent (a CUDA context, torch); only for a command that runs no
    untrusted code before it is told to (the runner waits for its first command)."""
    cmd = list(cmd)
    if policy.confine_via_exec:
        confinement = confine_policy(policy, cwd)
        if confinement:
            cmd = [sys.executable, "-I", "-S", str(CONFINE_SCRIPT), "--exec", json.dumps(confinement), "--", *cmd]
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=scrubbed_env(policy, cwd), stdin=stdin, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True, pass_fds=tuple(pass_fds),
        preexec_fn=None if limits_after_start else _limits(policy), close_fds=True,
    )
    if limits_after_start:
        try:
            _apply_limits_to(proc.pid, policy)
        except BaseException:
            kill_group(proc)
            raise
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
