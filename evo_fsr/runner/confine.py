"""In-process confinement of an untrusted process (Linux only; see SECURITY.md).

Standalone on purpose (standard library only, no evo_fsr imports): the candidate runner imports
a *copy* of this file from its private workdir, and sandbox.py runs it as a script that confines
itself and then execs the compiler:

    python -I -S confine.py --exec POLICY_JSON -- nvcc ...

Layers, each applied only where the kernel permits (a refusal is reported, never fatal):
- ``netns``: a new, empty network namespace (``unshare(CLONE_NEWNET)``, or with CLONE_NEWUSER when
  unprivileged): no interface but a down loopback, so no connection to anything;
- ``landlock``: filesystem allow-list (read/exec of the files and directories in the policy: for
  the candidate runner, file by file, so no vendor library can be opened, see libraries.py;
  read-write only in the workdir and on GPU device nodes), TCP bind/connect denied (ABI >= 4), signals and
  abstract unix sockets scoped to the sandbox (ABI >= 6).  Landlock also forbids ptrace-style
  access to processes outside the sandbox, which covers ``/proc/<pid>/environ`` of the evaluator;
- ``caps``: every capability dropped (bounding, ambient, effective, permitted, inheritable), so
  even a root evaluator hands the candidate no mount/reboot/module/raw-device powers;
- ``seccomp``: a BPF filter on all threads (TSYNC): execve/execveat/fork/vfork and clone without
  CLONE_THREAD kill the process; socket(), ptrace, process_vm_*, pidfd_*, io_uring, namespace,
  mount, module, reboot and clock calls fail with EPERM/EACCES; kill/tgkill only to itself;
  scheduling-policy and priority calls fail with EPERM (``_SCHEDULING``), and resource-limit,
  page-placement (and, unpinned, affinity) calls on another process (``_SELF_ONLY``);
- ``affinity`` (the policy's ``cpus``, runner/cores.py): the process runs on those cores only, set
  before any thread starts, and seccomp then refuses ``sched_setaffinity`` as well.

Landlock and the namespace go on first (single-threaded, before numpy or CUDA start threads);
capabilities and seccomp go on after CUDA initialisation (the driver may exec nvidia-modprobe
while it starts) and before the candidate's library is loaded.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import struct
import sys
from typing import Any

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

MACHINE = platform.machine()

# --- system call numbers ---------------------------------------------------------------------
_X86_64 = dict(socket=41, clone=56, fork=57, vfork=58, execve=59, kill=62, ptrace=101, syslog=103,
               capset=126, pivot_root=155, adjtimex=159, chroot=161, acct=163, settimeofday=164,
               mount=165, umount2=166, swapon=167, swapoff=168, reboot=169, sethostname=170,
               setdomainname=171, iopl=172, ioperm=173, init_module=175, delete_module=176, tkill=200,
               clock_settime=227, tgkill=234, kexec_load=246, add_key=248, request_key=249, keyctl=250,
               unshare=272, clock_adjtime=305, setns=308, process_vm_readv=310, process_vm_writev=311,
               finit_module=313, seccomp=317, kexec_file_load=320, bpf=321, execveat=322,
               userfaultfd=323, sched_setaffinity=203, setpriority=141, sched_setparam=142,
               sched_setscheduler=144, migrate_pages=256, move_pages=279, prlimit64=302, sched_setattr=314)
_AARCH64 = dict(umount2=39, mount=40, pivot_root=41, chroot=51, acct=89, capset=91, unshare=97,
                kexec_load=104, init_module=105, delete_module=106, clock_settime=112, syslog=116,
                ptrace=117, kill=129, tkill=130, tgkill=131, reboot=142, sethostname=161,
                setdomainname=162, settimeofday=170, adjtimex=171, socket=198, add_key=217,
                request_key=218, keyctl=219, clone=220, execve=221, swapon=224, swapoff=225,
                clock_adjtime=266, setns=268, process_vm_readv=270, process_vm_writev=271,
                finit_module=273, seccomp=277, bpf=280, execveat=281, userfaultfd=282, kexec_file_load=294,
                sched_setaffinity=122, sched_setparam=118, sched_setscheduler=119, setpriority=140,
                migrate_pages=238, move_pages=239, prlimit64=261, sched_setattr=274)
_COMMON = dict(pidfd_send_signal=424, io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
               open_tree=428, move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433,
               pidfd_open=434, clone3=435, pidfd_getfd=438, mount_setattr=442,
               landlock_create_ruleset=444, landlock_add_rule=445, landlock_restrict_self=446)
NR: dict[str, int] = {**({"x86_64": _X86_64, "aarch64": _AARCH64}.get(MACHINE, {})), **_COMMON}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}.get(MACHINE)

# --- Landlock ----------------------------------------------------------------------------------
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FS_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
FILE_ONLY = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1, 2


def _err(what: str) -> str:
    code = ctypes.get_errno()
    return f"{what}: {errno.errorcode.get(code, code)} ({os.strerror(code)})"


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is absent or disabled."""
    if "landlock_create_ruleset" not in NR or not sys.platform.startswith("linux"):
        return 0
    r = _libc.syscall(ctypes.c_long(NR["landlock_create_ruleset"]), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return int(r) if r > 0 else 0


def _fs_handled(abi: int) -> int:
    handled = (1 << 13) - 1                      # ABI 1: execute .. make_sym
    if abi >= 2:
        handled |= FS_REFER
    if abi >= 3:
        handled |= FS_TRUNCATE
    return handled                               # IOCTL_DEV (ABI 5) left unhandled: CUDA ioctls


def no_new_privs() -> None:
    _libc.prctl(38, 1, 0, 0, 0)                  # PR_SET_NO_NEW_PRIVS


def apply_landlock(read: list[str], write: list[str], devices: list[str], listable: list[str] = ()) -> str:
    """Restrict the calling thread (and all it starts later) to the allow-lists.  ``read`` holds
    directories (everything beneath) and single files (read + execute of that file only);
    ``listable`` directories may only be listed (their files are not readable through it)."""
    abi = landlock_abi()
    if abi <= 0:
        return "off: Landlock not supported or disabled by this kernel"
    handled = _fs_handled(abi)
    attr = struct.pack("=QQQ", handled, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                       SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _libc.syscall(ctypes.c_long(NR["landlock_create_ruleset"]), buf, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return "off: " + _err("landlock_create_ruleset")
    try:
        for paths, rights in ((read, FS_READ), (listable, FS_READ_DIR),
                              (devices, FS_READ | FS_WRITE_FILE | FS_TRUNCATE), (write, handled)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue                     # absent on this machine: nothing to allow
                try:
                    allowed = rights & handled
                    if not os.path.isdir(path):
                        allowed &= FILE_ONLY
                    if not allowed:
                        continue                 # e.g. a file in ``listable``: nothing to grant
                    rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, fd), 12)
                    if _libc.syscall(ctypes.c_long(NR["landlock_add_rule"]), ctypes.c_int(ruleset),
                                     ctypes.c_int(1), rule, ctypes.c_uint32(0)) < 0:
                        return "off: " + _err(f"landlock_add_rule({path})")
                finally:
                    os.close(fd)
        no_new_privs()
        if _libc.syscall(ctypes.c_long(NR["landlock_restrict_self"]), ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            return "off: " + _err("landlock_restrict_self")
    finally:
        os.close(ruleset)
    return f"on (ABI {abi})"


# --- network namespace -------------------------------------------------------------------------
CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000


def apply_netns() -> str:
    if _libc.unshare(CLONE_NEWNET) == 0:
        return "on"
    first = _err("unshare(CLONE_NEWNET)")
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        return "on (in a new user namespace)"
    return f"off: {first}; {_err('unshare(CLONE_NEWUSER|CLONE_NEWNET)')}"


# --- capabilities ------------------------------------------------------------------------------
def drop_capabilities() -> str:
    for cap in range(64):
        _libc.prctl(24, cap, 0, 0, 0)            # PR_CAPBSET_DROP (EINVAL past the last cap)
    _libc.prctl(47, 4, 0, 0, 0)                  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    header = ctypes.create_string_buffer(struct.pack("=Ii", 0x20080522, 0), 8)
    data = ctypes.create_string_buffer(bytes(24), 24)
    if "capset" not in NR or _libc.syscall(ctypes.c_long(NR["capset"]), header, data) < 0:
        return "off: " + _err("capset")
    return "on"


# --- seccomp -----------------------------------------------------------------------------------
RET_KILL_PROCESS, RET_ALLOW = 0x80000000, 0x7FFF0000


def RET_ERRNO(code: int) -> int:  # noqa: N802
    return 0x00050000 | code


_KILL = ("execve", "execveat", "fork", "vfork")
_EPERM = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_send_signal", "pidfd_open",
          "pidfd_getfd", "tkill", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot",
          "reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
          "bpf", "keyctl", "add_key", "request_key", "userfaultfd", "io_uring_setup", "io_uring_enter",
          "io_uring_register", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
          "mount_setattr", "swapon", "swapoff", "syslog", "acct", "settimeofday", "clock_settime",
          "adjtimex", "clock_adjtime", "sethostname", "setdomainname", "iopl", "ioperm")
#: scheduling policy and priority, refused outright (this process too): a thread of the candidate's
#: at SCHED_IDLE or nice 19 takes next to nothing from the serving thread on their one core while it
#: keeps that core out of deep idle (suite v4's awake-host spinners), and on another process (the
#: baseline's runner) it would change how trusted work is timed; at the default priority a thread
#: of its own shares the core with the serving thread, its own windows
_SCHEDULING = ("sched_setscheduler", "sched_setparam", "sched_setattr", "setpriority")
#: calls whose first argument names the process they change (resource limits, page placement):
#: allowed on this process only (0 or its pid), not on the baseline's runner or the evaluator
_SELF_ONLY = ("prlimit64", "migrate_pages", "move_pages")
CLONE_THREAD = 0x00010000


def seccomp_program(pid: int, pinned: bool = False) -> bytes:
    """The BPF filter (see the module docstring), as packed ``struct sock_filter``s; ``pinned``:
    ``sched_setaffinity`` fails too (the process's cores were chosen for it, ``apply_affinity``)."""
    LD, JEQ, JSET, JGE, RET = 0x20, 0x15, 0x45, 0x35, 0x06
    prog: list[tuple[int, int, int, int]] = []

    def ins(code: int, k: int, jt: int = 0, jf: int = 0) -> None:
        prog.append((code, jt, jf, k & 0xFFFFFFFF))

    def load_nr() -> None:
        ins(LD, 0)

    ins(LD, 4)                                   # seccomp_data.arch
    ins(JEQ, AUDIT_ARCH or 0, 1, 0)
    ins(RET, RET_KILL_PROCESS)
    load_nr()
    if MACHINE == "x86_64":
        ins(JGE, 0x40000000, 0, 1)               # x32 ABI numbers
        ins(RET, RET_KILL_PROCESS)
    for name in _KILL:
        if name in NR:
            ins(JEQ, NR[name], 0, 1)
            ins(RET, RET_KILL_PROCESS)
    for name in (*_EPERM, *_SCHEDULING, *(("sched_setaffinity",) if pinned else ())):
        if name in NR:
            ins(JEQ, NR[name], 0, 1)
            ins(RET, RET_ERRNO(errno.EPERM))
    ins(JEQ, NR["socket"], 0, 1)
    ins(RET, RET_ERRNO(errno.EACCES))
    ins(JEQ, NR["clone3"], 0, 1)                 # flags live in memory: make glibc fall back to clone
    ins(RET, RET_ERRNO(errno.ENOSYS))
    # clone: only threads (CLONE_THREAD in flags, argument 0)
    ins(JEQ, NR["clone"], 0, 4)
    ins(LD, 16)
    ins(JSET, CLONE_THREAD, 1, 0)
    ins(RET, RET_KILL_PROCESS)
    ins(RET, RET_ALLOW)
    # tgkill(tgid, tid, sig): only its own threads
    ins(JEQ, NR["tgkill"], 0, 4)
    ins(LD, 16)
    ins(JEQ, pid, 1, 0)
    ins(RET, RET_ERRNO(errno.EPERM))
    ins(RET, RET_ALLOW)
    # calls that name a process by argument 0: only this one, its pid or 0 (for kill, 0 is its own
    # process group, which is the sandbox's: the runner is a session of its own)
    for name in ("kill", *_SELF_ONLY, *(() if pinned else ("sched_setaffinity",))):
        if name in NR:
            ins(JEQ, NR[name], 0, 5)
            ins(LD, 16)
            ins(JEQ, pid, 2, 0)
            ins(JEQ, 0, 1, 0)
            ins(RET, RET_ERRNO(errno.EPERM))
            ins(RET, RET_ALLOW)
    ins(RET, RET_ALLOW)                          # everything else
    return b"".join(struct.pack("=HBBI", *p) for p in prog)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def apply_seccomp(pinned: bool = False) -> str:
    if AUDIT_ARCH is None or "seccomp" not in NR:
        return f"off: no seccomp filter for architecture {MACHINE}"
    program = seccomp_program(os.getpid(), pinned)
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
    no_new_privs()
    # SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC: every thread of the process
    r = _libc.syscall(ctypes.c_long(NR["seccomp"]), ctypes.c_uint(1), ctypes.c_uint(1), ctypes.byref(fprog))
    if r != 0:
        return "off: " + _err("seccomp(SET_MODE_FILTER, TSYNC)") if r < 0 else f"off: thread {r} refused TSYNC"
    return "on"


# --- cores -------------------------------------------------------------------------------------
def apply_affinity(cpus: list[int]) -> str:
    """Run on ``cpus`` only (runner/cores.py): set while single-threaded, so every thread started
    later inherits it; seccomp then refuses ``sched_setaffinity`` (``pinned``)."""
    try:
        os.sched_setaffinity(0, cpus)
    except (OSError, ValueError) as exc:
        return f"off: sched_setaffinity({cpus}): {exc}"
    return f"on: cores {sorted(os.sched_getaffinity(0))}"


# --- policy ------------------------------------------------------------------------------------
def own_proc(read: list[str], pid: int) -> list[str]:
    """``read`` with the ``/proc`` tree narrowed to this process's own ``/proc/<pid>`` and the
    entries that are no process's (cpuinfo, meminfo, sys, driver, ...): no other process's
    command line, state or status is readable.  The pid directories are the only entries left
    out, so what the CUDA driver reads at start-up stays readable; ``/proc/self`` resolves into
    ``/proc/<pid>``, which has the rule."""
    if "/proc" not in read:
        return read
    try:
        entries = sorted(os.listdir("/proc"))
    except OSError:
        return read
    kept = [f"/proc/{name}" for name in entries if not name.isdigit() or int(name) == pid]
    at = read.index("/proc")
    return read[:at] + kept + read[at + 1:]


def startup(policy: dict[str, Any]) -> dict[str, str]:
    """Namespace and Landlock: call while single-threaded, before numpy / CUDA / the candidate."""
    status: dict[str, str] = {}
    if policy.get("cpus"):
        status["affinity"] = apply_affinity(list(policy["cpus"]))
    status["netns"] = apply_netns() if policy.get("netns") else "off: disabled by policy"
    if policy.get("landlock"):
        read = list(policy.get("read", ()))
        if policy.get("proc") == "own":
            read = own_proc(read, os.getpid())
        status["landlock"] = apply_landlock(read, list(policy.get("write", ())),
                                            list(policy.get("devices", ())), list(policy.get("list", ())))
    else:
        status["landlock"] = "off: disabled by policy"
    return status


def after_init(policy: dict[str, Any]) -> dict[str, str]:
    """Capabilities and seccomp: after CUDA is up, before the candidate library is loaded."""
    return {"caps": drop_capabilities() if policy.get("caps") else "off: disabled by policy",
            "seccomp": apply_seccomp(bool(policy.get("cpus"))) if policy.get("seccomp") else "off: disabled by policy"}


def probe_netns() -> str:
    """Whether a network namespace can be made (run in a throwaway child: it changes the caller)."""
    return apply_netns()


def _main(argv: list[str]) -> int:
    if argv[1:2] == ["--probe"]:
        print(json.dumps({"netns": probe_netns(), "landlock_abi": landlock_abi()}))
        return 0
    if argv[1:2] != ["--exec"] or "--" not in argv:
        print("usage: confine.py --exec POLICY_JSON -- CMD ... | --probe", file=sys.stderr)
        return 2
    policy = json.loads(argv[2])
    cmd = argv[argv.index("--") + 1:]
    status = startup(policy)
    if policy.get("caps"):
        status["caps"] = drop_capabilities()
    failed = {k: v for k, v in status.items() if v.startswith("off:") and "disabled" not in v}
    if failed and policy.get("strict"):
        print(f"sandbox: confinement failed: {failed}", file=sys.stderr)
        return 126
    os.execvp(cmd[0], cmd)
    return 127


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
