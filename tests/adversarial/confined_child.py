"""Applies the candidate runner's confinement to itself (like runner.py, minus CUDA), then tries
one forbidden thing and prints a JSON line with what happened.  Run by test_adversarial_cpu.py:

    python -I confined_child.py POLICY_JSON_FILE ACTION [ARG]
"""
import json
import os
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import confine  # noqa: E402 - the copy next to this file

policy = json.load(open(sys.argv[1]))
status = confine.startup(policy)
status.update(confine.after_init(policy))
action, arg = sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else "")


def attempt(fn):
    try:
        return {"ok": True, "value": fn()}
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def write(path):
    with open(path, "w") as f:
        f.write("adversarial")
    return path


def read(path):
    with open(path, "rb") as f:
        return f.read(64).decode(errors="replace")


def connect(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(("127.0.0.1", int(port)))
    s.close()
    return "connected"


def thread():
    out = []
    t = threading.Thread(target=lambda: out.append(42))
    t.start()
    t.join()
    return out[0]


def dlopen(path):
    import ctypes
    ctypes.CDLL(path)
    return path


def runner_needs():
    """What the runner does after confinement: standard-library imports, libcudart, libc/libm."""
    import ctypes
    import glob  # noqa: F401
    import hashlib  # noqa: F401
    import json  # noqa: F401
    import math  # noqa: F401
    import select  # noqa: F401
    import shutil  # noqa: F401
    import struct  # noqa: F401
    import cudart
    loaded = [ctypes.CDLL("libc.so.6")._name, ctypes.CDLL("libm.so.6")._name,
              ctypes.CDLL("libstdc++.so.6")._name, ctypes.CDLL("libgcc_s.so.1")._name]
    try:
        loaded.append(cudart.load_library()._name)
    except OSError as exc:
        if "not found" not in str(exc) or "Permission" in str(exc) or "denied" in str(exc):
            raise
    return loaded


def affinity():
    """The cores this thread and a new one may run on, and whether the process can widen them."""
    out = []
    t = threading.Thread(target=lambda: out.append(sorted(os.sched_getaffinity(0))))
    t.start()
    t.join()
    try:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
        widened = sorted(os.sched_getaffinity(0))
    except OSError as exc:
        widened = f"{type(exc).__name__}: {exc}"
    return {"main": sorted(os.sched_getaffinity(0)), "thread": out[0], "widened": widened}


def reach(pid):
    """Scheduling, priority and limit calls on process ``pid`` (0: this one), most set to the value
    it already has (so nothing changes where one is wrongly allowed; ``sched_idle`` and ``nice``
    lower it, used on this process only): what each call answered."""
    import resource
    calls = {
        "setpriority": lambda: os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, pid)),
        "setpriority_user": lambda: os.setpriority(os.PRIO_USER, 0, os.getpriority(os.PRIO_USER, 0)),
        "sched_setscheduler": lambda: os.sched_setscheduler(pid, os.sched_getscheduler(pid), os.sched_param(0)),
        "sched_setparam": lambda: os.sched_setparam(pid, os.sched_param(0)),
        "prlimit": lambda: resource.prlimit(pid, resource.RLIMIT_CORE, resource.getrlimit(resource.RLIMIT_CORE)),
        "sched_idle": lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)),
        "nice": lambda: os.setpriority(os.PRIO_PROCESS, pid, 19),
    }
    return {name: attempt(call) for name, call in calls.items()}


actions = {
    "reach_parent": lambda: {k: v for k, v in reach(os.getppid()).items() if k not in ("sched_idle", "nice")},
    "reach_self": lambda: reach(0),
    "affinity": affinity,
    "dlopen": lambda: dlopen(arg),
    "runner_needs": runner_needs,
    "status": lambda: status,
    "write": lambda: write(arg),
    "read": lambda: read(arg),
    "environ": lambda: read(f"/proc/{os.getppid()}/environ"),
    "connect": lambda: connect(arg),
    "fork": lambda: os.fork(),
    "exec": lambda: os.execv("/bin/true", ["true"]),
    "system": lambda: os.system("true"),
    "kill_parent": lambda: os.kill(os.getppid(), 0),
    "kill_all": lambda: os.kill(-1, 0),
    "thread": thread,
    "env": lambda: dict(os.environ),
}
result = attempt(actions[action])
if action == "fork" and result.get("value") == 0:
    os._exit(0)
print(json.dumps({"status": status, **result}), flush=True)
