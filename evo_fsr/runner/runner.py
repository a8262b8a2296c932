"""The candidate runner: the only process that loads an untrusted kernel.

Started by evaluate.py as ``python runner.py WORKDIR CMD_FD REPLY_FD`` inside the sandbox,
one fresh process per candidate.  It never sees the reference: it reads inputs from .npy files
the trusted side wrote, runs ``launch``, and writes raw outputs and raw times back.  Every
verdict is computed by the trusted side from those raw data.

Commands (JSON lines on CMD_FD, one JSON reply each on REPLY_FD):
  {"op": "init"}                                   first: CUDA start-up (context, stream, events)
  {"op": "probe"}                                  device properties + measured bandwidth
  {"op": "run", "lib", "dir", "shapes", "scalars"} one launch on fresh, NaN-poisoned outputs
  {"op": "time", "lib": [cand, base], "dir", "rotations", "check_trials", ...}
                                                   interleaved, L2-flushed, event + host timing,
                                                   unseen (rotated) inputs on every timed call
  {"op": "exit"}
"""
from __future__ import annotations

import time

_STARTED = time.perf_counter()   # first thing: the start-up phases are reported in the init reply

import ctypes  # noqa: E402
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# --- sandbox hook (confine.py, see SECURITY.md) ----------------------------------------------
# Network namespace and Landlock go on here, while the process is still single-threaded (before
# CUDA starts threads, so every later thread inherits them); capabilities and seccomp go
# on in main() after CUDA init and before any candidate library is loaded.
_POLICY: dict[str, Any] = {}
_CONFINEMENT: dict[str, str] = {}
if __name__ == "__main__" and len(sys.argv) > 4:
    import confine as _confine  # noqa: E402 - the copy next to this file, in the workdir
    _POLICY = json.loads(Path(sys.argv[4]).read_text())
    _CONFINEMENT = _confine.startup(_POLICY)
# --- end sandbox hook ---------------------------------------------------------------------------

import npyfile  # noqa: E402 - the copy next to this file, standard library only
from cudart import (MEMCPY_DEVICE_TO_DEVICE, MEMCPY_DEVICE_TO_HOST,  # noqa: E402
                    MEMCPY_HOST_TO_DEVICE, CudaError, Runtime)

POISON_BYTE = 0xFF          # float32/64/16 NaN; -1 for signed integers
#: Device memory a runner keeps for reuse after a command frees it.  cudaMalloc and cudaFree take
#: driver-wide locks that another process creating its CUDA context holds for long stretches
#: (measured on 2 H200s: a validation's run commands spent 0.14 s in them alone, 0.27 s while the
#: other GPU's evaluator started runners); the runner serves one candidate, so what it reuses
#: never held another candidate's data.  Every output and workspace is NaN-poisoned before each
#: call and every input uploaded, so a reused block carries nothing a kernel could pass with.
SPARE_LIMIT_BYTES = 1 << 30
STAGING_MIN_BYTES = 4 << 20
SCALAR_CTYPES = {"int32": ctypes.c_int, "int64": ctypes.c_longlong,
                 "float32": ctypes.c_float, "float64": ctypes.c_double}


class CallPlan:
    """Per ``time`` command: (launch ptr, bytes, item size, base copy) of each input, in the
    order of ``rotations`` offsets, and (ptr, bytes) of each buffer to poison.  (A plain class:
    importing dataclasses would slow the runner's start-up.)"""

    __slots__ = ("inputs", "poisoned")

    def __init__(self, inputs: list[tuple[int, int, int, int]], poisoned: list[tuple[int, int]]) -> None:
        self.inputs = inputs
        self.poisoned = poisoned


class Runner:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.job = json.loads((workdir / "job.json").read_text())
        self.rt = Runtime()
        self.rt.set_device(int(self.job.get("device", 0)))
        self.stream = self.rt.stream_create()
        self.start_event, self.end_event = self.rt.event_create(), self.rt.event_create()
        self.flush_bytes = 0
        self.flush_ptr = 0
        self.staging_bytes = 0        # page-locked host buffer for copies in both directions
        self.staging_ptr = 0
        self.spare: dict[int, list[int]] = {}     # freed device blocks by size, for reuse
        self.spare_bytes = 0
        self.launchers: dict[str, Any] = {}

    # -- helpers --------------------------------------------------------------------------
    def launcher(self, lib: str) -> Any:
        if lib not in self.launchers:
            handle = ctypes.CDLL(str(self.workdir / self.job["libs"][lib]), mode=ctypes.RTLD_LOCAL)
            fn = handle.launch
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_void_p if a["role"] != "scalar" else SCALAR_CTYPES[a["dtype"]]
                           for a in self.job["args"]]
            self.launchers[lib] = fn
        return self.launchers[lib]

    def ensure_flush_buffer(self) -> None:
        if not self.flush_ptr:
            l2 = self.rt.attribute("l2_cache_size")
            self.flush_bytes = max(4 * l2, 64 * 2**20)   # write > 2x L2 before every trial
            self.flush_ptr = self.rt.malloc(self.flush_bytes)

    def alloc(self, nbytes: int) -> int:
        """A device block of ``nbytes``: a spare one of that size, else a new one."""
        blocks = self.spare.get(nbytes)
        if blocks:
            self.spare_bytes -= nbytes
            return blocks.pop()
        return self.rt.malloc(nbytes)

    def release(self, ptr: int, nbytes: int) -> None:
        """Keep a block for reuse (up to ``SPARE_LIMIT_BYTES`` in all), else free it."""
        if self.spare_bytes + nbytes > SPARE_LIMIT_BYTES:
            self.rt.free(ptr)
            return
        self.spare.setdefault(nbytes, []).append(ptr)
        self.spare_bytes += nbytes

    def staging(self, nbytes: int) -> memoryview:
        """The page-locked staging buffer, at least ``nbytes`` (grown by doubling)."""
        if nbytes > self.staging_bytes:
            size = max(nbytes, 2 * self.staging_bytes, STAGING_MIN_BYTES)
            if self.staging_ptr:
                self.rt.free_host(self.staging_ptr)
                self.staging_ptr, self.staging_bytes = 0, 0
            self.staging_ptr = self.rt.malloc_host(size)
            self.staging_bytes = size
        return memoryview((ctypes.c_char * nbytes).from_address(self.staging_ptr)).cast("B")

    def dump(self, path: Path, ptr: int, nbytes: int, shape: list[int], np_dtype: str) -> None:
        """Device buffer -> .npy file, through the page-locked staging buffer."""
        view = self.staging(nbytes)
        self.rt.memcpy_async(self.staging_ptr, ptr, nbytes, MEMCPY_DEVICE_TO_HOST, self.stream)
        self.rt.stream_synchronize(self.stream)
        with open(path, "wb") as f:
            npyfile.write_header(f, np_dtype, shape)
            if nbytes:
                f.write(view)

    def upload(self, msg: dict[str, Any]) -> dict[str, tuple[int, int]]:
        """(pointer, bytes) of every buffer; inputs/inouts from .npy (through the staging buffer),
        outputs/workspaces NaN-poisoned."""
        folder = self.workdir / msg["dir"]
        buffers: dict[str, tuple[int, int]] = {}
        for arg in self.job["args"]:
            if arg["role"] in ("scalar", "stream"):
                continue
            shape = msg["shapes"][arg["name"]]
            nbytes = math.prod(int(d) for d in shape) * npyfile.itemsize(arg["np_dtype"])
            ptr = self.alloc(nbytes)
            buffers[arg["name"]] = (ptr, nbytes)
            if arg["role"] in ("input", "inout"):
                npyfile.read_into(folder / f"{arg['name']}.npy", arg["np_dtype"], self.staging(nbytes))
                if nbytes:
                    self.rt.memcpy_async(ptr, self.staging_ptr, nbytes, MEMCPY_HOST_TO_DEVICE, self.stream)
                    self.rt.stream_synchronize(self.stream)     # before the staging buffer is reused
            else:
                self.rt.memset_async(ptr, POISON_BYTE, nbytes, self.stream)
        self.rt.stream_synchronize(self.stream)
        return buffers

    def call_args(self, msg: dict[str, Any], buffers: dict[str, tuple[int, int]]) -> list[Any]:
        args: list[Any] = []
        for arg in self.job["args"]:
            if arg["role"] == "stream":
                args.append(ctypes.c_void_p(self.stream))
            elif arg["role"] == "scalar":
                args.append(SCALAR_CTYPES[arg["dtype"]](msg["scalars"][arg["name"]]))
            else:
                args.append(ctypes.c_void_p(buffers[arg["name"]][0]))
        return args

    def free(self, buffers: dict[str, tuple[int, int]]) -> None:
        for ptr, nbytes in buffers.values():
            self.release(ptr, nbytes)

    # -- commands -------------------------------------------------------------------------
    def probe(self, msg: dict[str, Any]) -> dict[str, Any]:
        rt = self.rt
        info = {name: rt.attribute(name) for name in (
            "clock_rate_khz", "multiprocessor_count", "l2_cache_size", "compute_capability_major",
            "compute_capability_minor", "max_registers_per_block", "max_shared_memory_per_block",
            "max_shared_memory_per_block_optin", "memory_clock_rate_khz", "global_memory_bus_width")}
        info["name"] = rt.device_name()
        nbytes = 512 * 2**20
        src, dst = rt.malloc(nbytes), rt.malloc(nbytes)
        rt.memset_async(src, 1, nbytes, self.stream)
        times = []
        for i in range(12):
            rt.event_record(self.start_event, self.stream)
            rt.memcpy_async(dst, src, nbytes, MEMCPY_DEVICE_TO_DEVICE, self.stream)
            rt.event_record(self.end_event, self.stream)
            rt.stream_synchronize(self.stream)
            if i >= 2:
                times.append(rt.elapsed_ms(self.start_event, self.end_event))
        rt.free(src)
        rt.free(dst)
        info["copy_bandwidth_gbps"] = 2 * nbytes / (sorted(times)[len(times) // 2] * 1e-3) / 1e9
        return info

    def run(self, msg: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        fn = self.launcher(msg["lib"])
        buffers = self.upload(msg)
        t1 = time.perf_counter()
        rc = int(fn(*self.call_args(msg, buffers)))
        # device-wide: work that escaped the harness stream still lands in the outputs, so the
        # verdict on it is deterministic (the timing stage flags it as escaped-stream)
        self.rt.device_synchronize()
        err = self.rt.last_error()
        t2 = time.perf_counter()
        folder = self.workdir / msg["dir"]
        for arg in self.job["args"]:
            if arg["role"] in ("scalar", "stream", "workspace"):
                continue
            ptr, nbytes = buffers[arg["name"]]
            prefix = "out" if arg["role"] != "input" else "after"
            self.dump(folder / f"{prefix}_{arg['name']}.npy", ptr, nbytes, msg["shapes"][arg["name"]], arg["np_dtype"])
        t3 = time.perf_counter()
        self.free(buffers)
        t4 = time.perf_counter()
        return {"rc": rc, "last_error": err, "last_error_name": self.rt.error_name(err) if err else "",
                "phase_ms": {"upload": (t1 - t0) * 1e3, "launch": (t2 - t1) * 1e3, "dump": (t3 - t2) * 1e3,
                             "free": (t4 - t3) * 1e3}}

    def time(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Interleaved timing; every timed call sees inputs it has not seen before (issue 4).

        ``rotations[t]`` gives, per input buffer, an element offset: before trial ``t`` (untimed)
        each input is the uploaded set rotated by its offset, outputs are NaN-poisoned, L2 is
        flushed.  A cache keyed by pointer, shape, call count or input content cannot hit, and the
        candidate's outputs of the trials in ``check_trials`` (chosen by the trusted side, not
        known here in advance of the message) are kept and sent back, with its inputs as they
        were after trial ``inputs_after_trial``, for the trusted side to check.
        """
        t_start = time.perf_counter()
        phase_ms: dict[str, float] = {}
        self.ensure_flush_buffer()
        libs: list[str] = msg["lib"]
        fns = [self.launcher(lib) for lib in libs]
        buffers = self.upload(msg)
        args = self.call_args(msg, buffers)
        rt, stream = self.rt, self.stream
        rotations: list[list[int]] = msg.get("rotations") or []
        checks = {int(t) for t in msg.get("check_trials", ())}
        after_trial = int(msg.get("inputs_after_trial", -1))
        plan = self.call_plan(buffers)
        snaps: dict[int, dict[str, tuple[int, int]]] = {}
        phase_ms["upload"] = (time.perf_counter() - t_start) * 1e3
        t_warm = time.perf_counter()
        for _ in range(int(msg.get("warmup", 3))):
            for fn in fns:
                self.prepare_call(plan, None)
                fn(*args)
        rt.device_synchronize()
        phase_ms["warmup"] = (time.perf_counter() - t_warm) * 1e3
        event_ms: dict[str, list[float]] = {lib: [] for lib in libs}
        host_ms: dict[str, list[float]] = {lib: [] for lib in libs}
        max_trials, min_trials = int(msg["max_trials"]), int(msg["min_trials"])
        if rotations:
            max_trials = min(max_trials, len(rotations))
        t_loop = time.perf_counter()
        deadline = t_loop + float(msg["budget_s"])
        trial = 0
        while trial < max_trials and (trial < min_trials or time.perf_counter() < deadline):
            order = range(len(libs)) if trial % 2 == 0 else reversed(range(len(libs)))
            for i in order:
                # untimed: this trial's inputs, poisoned outputs, L2 flush
                self.prepare_call(plan, rotations[trial] if rotations else None)
                rt.memset_async(self.flush_ptr, trial & 0xFF, self.flush_bytes, stream)
                rt.device_synchronize()
                t0 = time.perf_counter()
                rt.event_record(self.start_event, stream)
                rc = fns[i](*args)
                rt.event_record(self.end_event, stream)
                rt.device_synchronize()        # device-wide: waits for work that escaped the stream
                t1 = time.perf_counter()
                if rc != 0:
                    return {"error": f"{libs[i]} launch returned {rc} ({rt.error_name(rc)})", "lib": libs[i]}
                err = rt.last_error()
                if err:
                    return {"error": f"{libs[i]}: {rt.error_name(err)}", "lib": libs[i]}
                event_ms[libs[i]].append(rt.elapsed_ms(self.start_event, self.end_event))
                host_ms[libs[i]].append((t1 - t0) * 1e3)
                if i == 0 and trial in checks:                # untimed: keep the candidate's outputs
                    snaps[trial] = self.snapshot(buffers, inputs=trial == after_trial)
            trial += 1
        phase_ms["trials"] = (time.perf_counter() - t_loop) * 1e3
        t_save = time.perf_counter()
        reply: dict[str, Any] = {"event_ms": event_ms, "host_ms": host_ms, "trials": trial,
                                 "snapshots": self.save_snapshots(msg, snaps)}
        self.free(buffers)
        for ptr, nbytes, _, base in plan.inputs:
            self.release(base, nbytes)
        for snap in snaps.values():
            for block, nbytes in snap.values():
                self.release(block, nbytes)
        phase_ms["save"] = (time.perf_counter() - t_save) * 1e3
        reply["phase_ms"] = phase_ms
        return reply

    # -- issue 4: unseen inputs on every timed call, outputs of some timed calls checked ---------
    def call_plan(self, buffers: dict[str, Any]) -> "CallPlan":
        """What ``prepare_call`` does before every call, worked out once per ``time`` command; a
        device copy of each uploaded input is the source of every trial's rotated inputs."""
        plan = CallPlan([], [])
        for arg in self.job["args"]:
            if arg["name"] not in buffers:
                continue
            ptr, nbytes = buffers[arg["name"]]
            if arg["role"] in ("input", "inout"):
                base = self.alloc(nbytes)
                self.rt.memcpy_async(base, ptr, nbytes, MEMCPY_DEVICE_TO_DEVICE, self.stream)
                plan.inputs.append((ptr, nbytes, npyfile.itemsize(arg["np_dtype"]), base))
            elif arg["role"] in ("output", "workspace"):
                plan.poisoned.append((ptr, nbytes))
        self.rt.stream_synchronize(self.stream)
        return plan

    def prepare_call(self, plan: "CallPlan", offsets: list[int] | None) -> None:
        """Inputs = the uploaded set, each rotated left by its offset in elements (np.roll(x, -s));
        outputs and workspaces NaN-poisoned."""
        for index, (ptr, nbytes, item, base) in enumerate(plan.inputs):
            shift = (int(offsets[index]) * item) % nbytes if offsets and nbytes else 0
            if shift:
                self.rt.memcpy_async(ptr, base + shift, nbytes - shift, MEMCPY_DEVICE_TO_DEVICE, self.stream)
                self.rt.memcpy_async(ptr + nbytes - shift, base, shift, MEMCPY_DEVICE_TO_DEVICE, self.stream)
            else:
                self.rt.memcpy_async(ptr, base, nbytes, MEMCPY_DEVICE_TO_DEVICE, self.stream)
        for ptr, nbytes in plan.poisoned:
            self.rt.memset_async(ptr, POISON_BYTE, nbytes, self.stream)

    def snapshot(self, buffers: dict[str, Any], inputs: bool) -> dict[str, tuple[int, int]]:
        """Device copies of the outputs (``out:<name>``) and, if asked, inputs (``after:<name>``)."""
        taken: dict[str, tuple[int, int]] = {}      # key -> (device copy, bytes)
        for arg in self.job["args"]:
            if arg["name"] not in buffers:
                continue
            if arg["role"] in ("output", "inout"):
                key = "out:" + arg["name"]
            elif arg["role"] == "input" and inputs:
                key = "after:" + arg["name"]
            else:
                continue
            ptr, nbytes = buffers[arg["name"]]
            taken[key] = (self.alloc(nbytes), nbytes)
            self.rt.memcpy_async(taken[key][0], ptr, nbytes, MEMCPY_DEVICE_TO_DEVICE, self.stream)
        return taken

    def save_snapshots(self, msg: dict[str, Any],
                       snaps: dict[int, dict[str, tuple[int, int]]]) -> list[int]:
        """Snapshots to ``snap<trial>_<name>.npy`` / ``after<trial>_<name>.npy`` in the case folder."""
        folder = self.workdir / msg["dir"]
        dtypes = {a["name"]: a["np_dtype"] for a in self.job["args"]}
        self.rt.stream_synchronize(self.stream)
        for trial, snap in sorted(snaps.items()):
            for key, (ptr, nbytes) in snap.items():
                kind, name = key.split(":", 1)
                self.dump(folder / f"{'snap' if kind == 'out' else 'after'}{trial}_{name}.npy", ptr,
                          nbytes, msg["shapes"][name], dtypes[name])
        return sorted(snaps)


def main(argv: list[str]) -> int:
    workdir, cmd_fd, reply_fd = Path(argv[1]), int(argv[2]), int(argv[3])
    commands = os.fdopen(cmd_fd, "r")
    replies = os.fdopen(reply_fd, "w")

    def reply(data: dict[str, Any]) -> None:
        replies.write(json.dumps(data) + "\n")
        replies.flush()

    # Python and the sandbox are up; CUDA starts with the first command, init
    python_ms = (time.perf_counter() - _STARTED) * 1e3
    first = commands.readline()
    if not first:
        return 0
    t_cuda = time.perf_counter()
    if json.loads(first).get("op") != "init":
        reply({"op": "init", "error": "protocol: the first command must be init", "confinement": _CONFINEMENT})
        return 3
    try:
        runner = Runner(workdir)
    except (CudaError, OSError) as exc:
        reply({"op": "init", "error": str(exc), "confinement": _CONFINEMENT})
        return 3
    t_confine = time.perf_counter()
    if _POLICY:  # sandbox hook: CUDA is up; no candidate code loaded yet
        _CONFINEMENT.update(_confine.after_init(_POLICY))
    startup_ms = {"imports": python_ms, "cuda": (t_confine - t_cuda) * 1e3,
                  "confine": (time.perf_counter() - t_confine) * 1e3}
    reply({"op": "init", "ok": True, "confinement": _CONFINEMENT, "startup_ms": startup_ms})
    for line in commands:
        msg = json.loads(line)
        op = msg["op"]
        if op == "exit":
            reply({"op": "exit", "ok": True})
            return 0
        try:
            result = getattr(runner, op)(msg)
        except CudaError as exc:
            reply({"op": op, "error": str(exc), "cuda_error": exc.name})
            return 4     # a CUDA fault poisons the context: this process must go
        except (OSError, ValueError, KeyError, AttributeError) as exc:
            reply({"op": op, "error": f"{type(exc).__name__}: {exc}"})
            return 5
        reply({"op": op, **result})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
