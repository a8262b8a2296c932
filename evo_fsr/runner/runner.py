"""The runner: the process that loads a kernel library and calls its ``launch``.

Started by harness.py as ``python -I -S runner.py WORKDIR CMD_FD REPLY_FD [POLICY]`` inside the
sandbox: one fresh process per candidate, and one long-lived process per evaluator for the
baseline (the naive seed), which loads no candidate code.  It owns no evidence: every buffer it
passes to ``launch`` belongs to the trusted evaluator, which shares it through CUDA IPC, fills
the inputs, poisons the outputs and reads them back from its own side.  The runner only launches
and reports CUDA-event times, which the trusted side bounds with its own clock (protocol.py
lists the commands; verdict/evaluate.py says what is done with the replies).
"""
from __future__ import annotations

import time

_STARTED = time.perf_counter()   # first thing: the start-up phases are reported in the init reply

import ctypes  # noqa: E402
import json
import mmap
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

# --- sandbox hook (confine.py, see SECURITY.md) ----------------------------------------------
# Network namespace and Landlock go on here, while the process is still single-threaded (before
# CUDA starts threads, so every later thread inherits them); capabilities and seccomp go
# on in main() after CUDA init and before any kernel library is loaded.
_POLICY: dict[str, Any] = {}
_CONFINEMENT: dict[str, str] = {}
if __name__ == "__main__" and len(sys.argv) > 4:
    import confine as _confine  # noqa: E402 - the copy next to this file, in the workdir
    _POLICY = json.loads(Path(sys.argv[4]).read_text())
    _CONFINEMENT = _confine.startup(_POLICY)
# --- end sandbox hook ---------------------------------------------------------------------------

import protocol  # noqa: E402 - the copy next to this file, standard library only
from command_pipes import Commands, Replies  # noqa: E402 - the copy next to this file, standard library only

#: the chain library's name in a job's libs (verdict/chain.py's CHAIN_LIB)
CHAIN = "chain"
#: the completion mark's library name in a job's libs (verdict/completion.py's MARK_LIB)
MARK = "mark"
#: ``arm`` replies once the chain is enqueued, or after this long if the enqueue still runs (a
#: stream's queue of pending launches is bounded, and this one waits behind the gate until the
#: trusted side, awaiting the reply, opens it); the rest is enqueued inside the window.  0.1 s, not 0.5: a
#: launch that synchronizes (thrust with its own temporary storage) blocks behind the gate and cost
#: every chained window the whole wait (suite v4: sort 2^20 ran out of a 25 s budget)
ARM_REPLY_AFTER_S = 0.1
SCALAR_CTYPES = {"int32": ctypes.c_int, "int64": ctypes.c_longlong,
                 "float32": ctypes.c_float, "float64": ctypes.c_double}


def load_runtime(kind: str) -> Any:
    """The CUDA runtime binding (cudart.py), or the host-memory fake of the CPU tests."""
    if kind == "fake":
        import fake_cudart  # noqa: PLC0415 - copied next to this file by the CPU tests only
        return fake_cudart.Runtime()
    from cudart import Runtime  # noqa: PLC0415
    return Runtime()


class Runner:
    def __init__(self, workdir: Path, gate_fd: int = -1) -> None:
        self.workdir = workdir
        self.job = json.loads((workdir / "job.json").read_text())
        self.rt = load_runtime(self.job.get("runtime", "cuda"))
        self.rt.set_device(int(self.job.get("device", 0)))
        self.stream = self.rt.stream_create()
        self.start, self.end, self.end_all, self.between = (self.rt.event_create() for _ in range(4))
        self.slots: dict[str, dict[str, int]] = {}     # slot -> buffer name -> device pointer
        self.sizes: dict[str, dict[str, int]] = {}     # slot -> buffer name -> bytes
        self.call_events: list[tuple[int, int]] = []   # a chained window's events, a pair a call
        self.links: dict[tuple[str, ...], list[Any]] = {}   # chained windows' argument lists, per slot list
        self.marked: dict[tuple[str, ...], tuple[Any, Any, Any]] = {}   # the mark's buffers, per slot list
        self.launchers: dict[str, Any] = {}
        self.handles: dict[str, Any] = {}
        self.armed: dict[str, Any] | None = None       # the chained window enqueued by ``arm``
        # the gate's word (verdict/chain.py): a page the trusted side shares (harness.py), mapped
        # into the device
        self.gate_word = 0
        if gate_fd >= 0:
            self.gate_page = mmap.mmap(gate_fd, protocol.GATE_PAGE_BYTES)
            os.close(gate_fd)
            self.gate_word = self.rt.map_host(ctypes.addressof(ctypes.c_char.from_buffer(self.gate_page)),
                                              protocol.GATE_PAGE_BYTES)

    def launcher(self, lib: str) -> Any:
        if lib not in self.launchers:
            handle = ctypes.CDLL(str(self.workdir / self.job["libs"][lib]), mode=ctypes.RTLD_LOCAL)
            self.handles[lib] = handle
            fn = handle.launch
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_void_p if a["role"] != "scalar" else SCALAR_CTYPES[a["dtype"]]
                           for a in self.job["args"]]
            self.launchers[lib] = fn
        return self.launchers[lib]

    # -- commands -------------------------------------------------------------------------
    def probe(self, msg: dict[str, Any]) -> dict[str, Any]:
        rt = self.rt
        info: dict[str, Any] = {name: rt.attribute(name) for name in (
            "clock_rate_khz", "multiprocessor_count", "l2_cache_size", "compute_capability_major",
            "compute_capability_minor", "max_registers_per_block", "max_shared_memory_per_block",
            "max_shared_memory_per_block_optin", "memory_clock_rate_khz", "global_memory_bus_width")}
        info["name"] = rt.device_name()
        nbytes = int(msg.get("bytes", 512 * 2**20))
        src, dst = rt.malloc(nbytes), rt.malloc(nbytes)
        rt.memset_async(src, 1, nbytes, self.stream)
        times = []
        for i in range(12):
            rt.event_record(self.start, self.stream)
            rt.memcpy_async(dst, src, nbytes, 3, self.stream)       # device to device
            rt.event_record(self.end, self.stream)
            rt.stream_synchronize(self.stream)
            if i >= 2:
                times.append(rt.elapsed_ms(self.start, self.end))
        rt.free(src)
        rt.free(dst)
        median_ms = max(sorted(times)[len(times) // 2], 1e-6)
        info["copy_bandwidth_gbps"] = 2 * nbytes / (median_ms * 1e-3) / 1e9
        return info

    def attach(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Open the trusted side's buffers of one slot (a shape's set of launch buffers)."""
        self.detach(msg)
        opened: dict[str, int] = {}
        self.slots[str(msg["slot"])] = opened
        self.links.clear()
        self.sizes[str(msg["slot"])] = {str(buf["name"]): int(buf.get("nbytes", 0)) for buf in msg["buffers"]}
        for buf in msg["buffers"]:
            opened[str(buf["name"])] = self.rt.ipc_open(bytes.fromhex(buf["handle"]))
        self.marked.clear()
        self.trusted_lib(MARK)           # loaded outside any window
        return {"ok": True}

    def detach(self, msg: dict[str, Any]) -> dict[str, Any]:
        for ptr in self.slots.pop(str(msg["slot"]), {}).values():
            self.rt.ipc_close(ptr)
        self.sizes.pop(str(msg["slot"]), None)
        self.links.clear()
        self.marked.clear()
        return {"ok": True}

    def trusted_lib(self, name: str) -> Any:
        """A trusted library of the job (the chain's, the mark's), loaded once; None where its
        file is not in the workdir."""
        if name not in self.handles:
            path = self.workdir / self.job["libs"].get(name, f"{name}.so")
            if not path.exists():
                return None
            self.handles[name] = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
        return self.handles[name]

    def mark(self, msg: dict[str, Any], names: list[str]) -> None:
        """The completion mark of a window (verdict/completion.py), enqueued after its calls: one
        trusted kernel on the legacy default stream, behind ``end`` (recorded on the harness stream
        after the last call), that hashes a keyed sample of the outputs of the slots ``names`` and
        writes the hash and the command's key into the gate's page, where the trusted side waits
        for them: the window ends there, not at this runner's reply."""
        key = msg.get("mark")
        if not key or not self.gate_word:
            return
        lib = self.trusted_lib(MARK)
        if lib is None:
            return                      # no mark: the window is timed to the reply
        table = self.marked.get(tuple(names))
        if table is None:
            picked = [(str(name), a["name"]) for name in names for a in self.job["args"]
                      if a["role"] in protocol.MARKED_ROLES]
            ptrs = (ctypes.c_void_p * max(1, len(picked)))(*[self.slots[s][b] for s, b in picked])
            nbytes = (ctypes.c_longlong * max(1, len(picked)))(*[self.sizes[s][b] for s, b in picked])
            table = self.marked[tuple(names)] = (ptrs, nbytes, ctypes.c_int(len(picked)))
        # no mark where it fails (the trusted side then times the window to this reply)
        lib.evo_fsr_mark(ctypes.c_void_p(self.gate_word + protocol.MARK_OFFSET), ctypes.c_ulonglong(int(key)),
                         *table, ctypes.c_void_p(self.end))

    def chain_links(self, names: list[str]) -> list[Any]:
        """Per slot of a chained window (verdict/chain.py): its outputs (the link after its call
        hashes them) and its inputs (the link before its call draws them), each as the chain
        library's arguments ready to pass (pointer and byte arrays made before the window opens)."""
        if tuple(names) in self.links:
            return self.links[tuple(names)]
        if self.trusted_lib(CHAIN) is None:
            raise OSError(f"no {self.job['libs'][CHAIN]} in the runner's workdir")
        links = []
        for name in names:
            buffers, sizes = self.slots[str(name)], self.sizes[str(name)]
            per_role = []
            for role in ("output", "input"):
                picked = [a["name"] for a in self.job["args"] if a["role"] == role]
                ptrs = (ctypes.c_void_p * len(picked))(*[buffers[b] for b in picked])
                nbytes = (ctypes.c_longlong * len(picked))(*[sizes[b] for b in picked])
                per_role.append((ptrs, nbytes, ctypes.c_int(len(picked))))
            links.append(per_role)
        while len(self.call_events) < len(names):
            self.call_events.append((self.rt.event_create(), self.rt.event_create()))
        self.links[tuple(names)] = links
        return links

    def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        """One launch on the slot's buffers, then one on each slot of ``more`` (a batch: the
        trusted side times short kernels several calls to a window), back to back on the harness
        stream.  ``event_ms``: CUDA events around the launches on the harness stream;
        ``event_all_ms``: to an event recorded after a device-wide synchronize (work on any
        stream of this context); ``host_ms``: the host clock around both."""
        rt, stream = self.rt, self.stream
        fn = self.launcher(msg["lib"])
        calls = self._call_args(msg)
        rt.device_synchronize()
        t0 = time.perf_counter()
        rt.event_record(self.start, stream)
        rc = 0
        for i, args in enumerate(calls):
            rc = int(fn(*args))
            if rc != 0:
                break
            if i + 1 < len(calls):
                # a stream operation between two calls of a batch: a kernel of the next call
                # launched with programmatic stream serialization (PDL) then waits for all of
                # this call's work instead of overlapping it (adversarial v3,
                # pdl_overlaps_the_calls_of_a_batch); PDL inside one call is untouched
                rt.event_record(self.between, stream)
        rt.event_record(self.end, stream)
        if rc == 0:
            self.mark(msg, [msg["slot"], *msg.get("more", [])])
        rt.device_synchronize()          # every stream of this context
        rt.event_record(self.end_all, stream)
        rt.stream_synchronize(stream)
        t1 = time.perf_counter()
        err = rt.last_error()
        event_ms = rt.elapsed_ms(self.start, self.end)
        event_all_ms = max(rt.elapsed_ms(self.start, self.end_all), event_ms)
        return {"rc": rc, "last_error": err, "last_error_name": rt.error_name(err) if err else "",
                "event_ms": event_ms, "event_all_ms": event_all_ms, "host_ms": (t1 - t0) * 1e3}

    def _call_args(self, msg: dict[str, Any]) -> list[list[Any]]:
        """``launch``'s arguments for the slot and each slot of ``more``."""
        calls: list[list[Any]] = []
        for name in [msg["slot"], *msg.get("more", [])]:
            buffers = self.slots[str(name)]
            args: list[Any] = []
            for arg in self.job["args"]:
                if arg["role"] == "stream":
                    args.append(ctypes.c_void_p(self.stream))
                elif arg["role"] == "scalar":
                    args.append(SCALAR_CTYPES[arg["dtype"]](msg["scalars"][arg["name"]]))
                else:
                    args.append(ctypes.c_void_p(buffers[arg["name"]]))
            calls.append(args)
        return calls

    def arm(self, msg: dict[str, Any], reply_once: Callable[[dict[str, Any]], bool]) -> None:
        """A chained window (verdict/chain.py) enqueued on the harness stream behind the gate:
        ``evo_fsr_chain_gate`` (spins until the trusted side writes its seed into the shared word),
        call 0's inputs drawn from the seed, then each call between its own pair of events and,
        between two calls, one link (``evo_fsr_chain_link``: the hash of the outputs and the draw of
        the next call's inputs, one kernel).  Replies
        through ``reply_once`` when all is enqueued, or after ``ARM_REPLY_AFTER_S`` if the enqueue
        still runs (a full queue: it goes on inside the window); an error after that reply is
        reported by ``finish``.  The fake device runs the steps at ``finish`` instead."""
        rt, stream = self.rt, self.stream
        if not self.gate_word:
            reply_once({"error": "no gate page in this runner"})
            return
        fn = self.launcher(msg["lib"])
        calls = self._call_args(msg)
        names = [msg["slot"], *msg.get("more", [])]
        links = self.chain_links(names)
        chain = self.handles[CHAIN]
        gate, link = chain.evo_fsr_chain_gate, chain.evo_fsr_chain_link
        word, handle = ctypes.c_void_p(self.gate_word), ctypes.c_void_p(stream)
        events = self.call_events
        no_outputs = (None, None, ctypes.c_int(0))

        def steps() -> int:
            rc = int(gate(word, handle)) or int(link(*no_outputs, *links[0][1], ctypes.c_int(1), handle))
            for i, args in enumerate(calls):
                if rc != 0:
                    break
                rt.event_record(events[i][0], stream)
                rc = int(fn(*args))
                rt.event_record(events[i][1], stream)
                if rc == 0 and i + 1 < len(calls):
                    rc = int(link(*links[i][0], *links[i + 1][1], ctypes.c_int(0), handle))
            rt.event_record(self.end, stream)
            if rc == 0:
                self.mark(msg, names[-1:])      # the other calls' outputs are hashed into the links
            return rc

        self.armed = {"calls": len(calls), "rc": 0, "steps": None, "error": None}
        rt.device_synchronize()
        if getattr(rt, "defers_gated_work", False):
            self.armed["steps"] = steps
            reply_once({"rc": 0, "last_error": 0, "last_error_name": "", "complete": True})
            return
        timer = threading.Timer(ARM_REPLY_AFTER_S, reply_once, args=(
            {"rc": 0, "last_error": 0, "last_error_name": "", "complete": False},))
        timer.start()
        try:
            rc = steps()
        except RuntimeError as exc:           # CudaError
            timer.cancel()
            self.armed["error"] = str(exc)[:4000]
            if reply_once({"error": str(exc)[:4000], "cuda_error": str(getattr(exc, "name", ""))[:120]}):
                raise
            return
        timer.cancel()
        err = rt.last_error() if rc != 0 else 0
        self.armed["rc"] = rc
        reply_once({"rc": rc, "last_error": err, "last_error_name": rt.error_name(err) if err else "",
                    "complete": True})

    def finish(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The armed window's end: every stream of this context synchronized; ``event_ms``: the
        calls' own events summed (the chain's links between them left out), ``event_all_ms``: the
        same plus whatever ran on after the last call, ``host_ms``: the host clock around the wait."""
        rt, stream, armed = self.rt, self.stream, self.armed
        self.armed = None
        if armed is None:
            return {"error": "finish without arm"}
        if armed["error"]:
            return {"error": armed["error"]}
        t0 = time.perf_counter()
        rc = armed["rc"]
        if armed["steps"] is not None:
            rc = armed["steps"]()
        rt.device_synchronize()          # every stream of this context
        rt.event_record(self.end_all, stream)
        rt.stream_synchronize(stream)
        t1 = time.perf_counter()
        err = rt.last_error()
        calls_ms = event_all_ms = 0.0
        if rc == 0:
            calls_ms = sum(rt.elapsed_ms(a, b) for a, b in self.call_events[:armed["calls"]])
            event_all_ms = calls_ms + rt.elapsed_ms(self.end, self.end_all)
        return {"rc": rc, "last_error": err, "last_error_name": rt.error_name(err) if err else "",
                "event_ms": calls_ms, "event_all_ms": event_all_ms, "host_ms": (t1 - t0) * 1e3}


def main(argv: list[str]) -> int:
    workdir, cmd_fd, reply_fd = Path(argv[1]), int(argv[2]), int(argv[3])
    commands, replies = Commands(cmd_fd), Replies(reply_fd)
    reply = replies.send

    # Python and the sandbox are up; CUDA starts with the first command, init
    python_ms = (time.perf_counter() - _STARTED) * 1e3
    first = next(commands, "")
    if not first:
        return 0
    t_cuda = time.perf_counter()
    msg = json.loads(first)
    if msg.get("op") != protocol.INIT:
        reply(msg, {"error": "protocol: the first command must be init", "confinement": _CONFINEMENT})
        return 3
    try:
        runner = Runner(workdir, int(msg.get("gate_fd", -1)))
    except (OSError, RuntimeError, ValueError) as exc:
        reply(msg, {"error": str(exc)[:4000], "confinement": _CONFINEMENT})
        return 3
    t_confine = time.perf_counter()
    if _POLICY:  # sandbox hook: CUDA is up; no kernel library loaded yet
        _CONFINEMENT.update(_confine.after_init(_POLICY))
    startup_ms = {"imports": python_ms, "cuda": (t_confine - t_cuda) * 1e3,
                  "confine": (time.perf_counter() - t_confine) * 1e3}
    reply(msg, {"ok": True, "confinement": _CONFINEMENT, "startup_ms": startup_ms})
    for line in commands:
        msg = json.loads(line)
        op = msg["op"]
        if op == protocol.EXIT:
            reply(msg, {"ok": True})
            return 0
        if op not in (protocol.PROBE, protocol.ATTACH, protocol.DETACH, protocol.CALL, protocol.ARM, protocol.FINISH):
            reply(msg, {"error": f"unknown op {op!r}"})
            return 5
        reply_once = replies.once(msg)
        try:
            if op == protocol.ARM:
                runner.arm(msg, reply_once)
                continue
            result = getattr(runner, op)(msg)
        except RuntimeError as exc:       # CudaError: a CUDA fault poisons the context, this process goes
            reply_once({"error": str(exc)[:4000], "cuda_error": str(getattr(exc, "name", ""))[:120]})
            return 4
        except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
            reply_once({"error": f"{type(exc).__name__}: {exc}"[:4000]})
            return 5
        reply_once(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
