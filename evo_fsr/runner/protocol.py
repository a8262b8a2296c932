"""The runner wire protocol, shared by both sides (standard library only: the runner imports it
from its private copy in the workdir).

Commands travel as JSON lines on the command pipe, one JSON reply each on the reply pipe.  Every
command carries ``op`` and a fresh ``id``; its reply must echo both.  ``check_reply`` is the only
way the trusted side reads a reply: anything that does not match the schema of the command it
answers raises ``ProtocolError``, which the harness turns into the verdict
``crash:sandbox-violation``.  Nothing a candidate writes can raise anything else.

Commands (trusted side -> runner):
  init                                        CUDA start-up (context, stream, events)
  probe                                       device properties and measured copy bandwidth
  attach  {slot, buffers: [{name, handle, nbytes}]}
                                              open the trusted side's buffers (CUDA IPC handles)
  detach  {slot}                              close them
  call    {slot, lib, scalars, [more], [mark]}
                                              one launch on the attached buffers (then one on each
                                              slot in ``more``: a batch), timed with CUDA events on
                                              the harness stream and after a device-wide
                                              synchronize; the trusted side owns inputs and outputs,
                                              and flushes the L2 itself before a timed call;
                                              ``mark``: a key, the calls' completion mark
                                              (verdict/completion.py) enqueued after them
  arm     {slot, lib, scalars, more, [mark]}  a chained window (verdict/chain.py) enqueued behind
                                              the gate: every call's inputs drawn on the GPU, the
                                              first from the seed the trusted side writes into the
                                              shared gate page (init's ``gate_fd``), the others
                                              from a hash of the previous call's outputs; each call
                                              between its own events, the mark of the last call
                                              after them.  Reply: rc, last_error,
                                              ``complete`` (all enqueued before the reply)
  finish                                      the armed window awaited: a call's reply
  exit
"""
from __future__ import annotations

import math

INIT, PROBE, ATTACH, DETACH, CALL, ARM, FINISH, EXIT = (
    "init", "probe", "attach", "detach", "call", "arm", "finish", "exit")
OPS = (INIT, PROBE, ATTACH, DETACH, CALL, ARM, FINISH, EXIT)
#: the bytes of the gate's page, which the trusted side shares with a runner (``init``'s ``gate_fd``)
GATE_PAGE_BYTES = 4096
#: where in the gate's page a window's completion mark goes (verdict/completion.py): the key's
#: 64-bit word, then the hash's
MARK_OFFSET = 64
#: the roles of the buffers a mark samples (verdict/completion.py's MARKED_ROLES)
MARKED_ROLES = ("output", "inout")
#: A reply line longer than this is a protocol violation (a probe reply is ~1 KiB).
MAX_REPLY_BYTES = 1 << 16
RUNNER_FILES = ("runner.py", "protocol.py", "command_pipes.py", "cudart.py", "confine.py")


class ProtocolError(Exception):
    """A reply that breaks the protocol: forged, malformed, unsolicited or out of order."""


def _number(reply: dict, key: str, integer: bool = False, minimum: float | None = 0.0) -> None:
    value = reply.get(key)
    if isinstance(value, bool) or not isinstance(value, (int,) if integer else (int, float)):
        raise ProtocolError(f"{key!r} is {type(value).__name__}, not a number")
    if not math.isfinite(value) or (minimum is not None and value < minimum):
        raise ProtocolError(f"{key!r} = {value!r} is out of range")


def _text(reply: dict, key: str, limit: int = 4096) -> None:
    if not isinstance(reply.get(key, ""), str) or len(reply.get(key, "")) > limit:
        raise ProtocolError(f"{key!r} is not a short string")


def check_reply(command: dict, reply: object) -> dict:
    """``reply`` if it is a well-formed answer to ``command``, else ProtocolError.  An ``error``
    reply is well formed (a CUDA fault, a missing library): the caller decides what it means."""
    if not isinstance(reply, dict):
        raise ProtocolError("reply is not a JSON object")
    if reply.get("op") != command["op"] or reply.get("id") != command["id"]:
        raise ProtocolError(f"reply to {reply.get('op')!r}#{reply.get('id')!r} while awaiting "
                            f"{command['op']!r}#{command['id']}")
    if "error" in reply:
        _text(reply, "error")
        _text(reply, "cuda_error", 128)
        return reply
    op = command["op"]
    if op in (CALL, ARM, FINISH):
        for key in ("rc", "last_error"):
            _number(reply, key, integer=True, minimum=None)
        _text(reply, "last_error_name", 128)
    if op == ARM and not isinstance(reply.get("complete"), bool):
        raise ProtocolError("'complete' is not a boolean")
    if op in (CALL, FINISH):
        for key in ("event_ms", "event_all_ms", "host_ms"):
            _number(reply, key)
        if reply["event_all_ms"] < reply["event_ms"]:
            raise ProtocolError("event_all_ms < event_ms")
    elif op == PROBE:
        for key in ("clock_rate_khz", "multiprocessor_count", "l2_cache_size", "compute_capability_major",
                    "compute_capability_minor", "max_registers_per_block", "max_shared_memory_per_block",
                    "max_shared_memory_per_block_optin", "memory_clock_rate_khz", "global_memory_bus_width"):
            _number(reply, key, integer=True)
        _number(reply, "copy_bandwidth_gbps")
        _text(reply, "name", 256)
    elif op == INIT:
        for section in ("startup_ms", "confinement"):
            value = reply.get(section, {})
            if not isinstance(value, dict) or len(value) > 64:
                raise ProtocolError(f"{section!r} is not a small object")
        for key, value in reply.get("startup_ms", {}).items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ProtocolError(f"startup_ms[{key!r}] is not a number")
        for key, value in reply.get("confinement", {}).items():
            if not isinstance(value, str) or len(value) > 512:
                raise ProtocolError(f"confinement[{key!r}] is not a short string")
    if reply.get("ok") is not True and op in (INIT, ATTACH, DETACH, EXIT):
        raise ProtocolError(f"{op} reply without ok")
    return reply
