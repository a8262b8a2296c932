"""One timed window (the Performance Profiler's unit of measurement): a shape's inputs loaded
and the L2 flushed on the trusted side, one command to a runner to call its library on one or
more buffer sets, the outputs copied out, all on the trusted clock (``timed_batch``); and what
went wrong in a call's reply (``call_error``).  The window is the bound on a runner's claims
(profile.py); what fills it is chosen by the workbench (bench.py) and the session (session.py)."""
from __future__ import annotations

import time
from typing import Any, Callable

from ..runner.harness import RunnerProcess
from .inputs import Slot
from .profile import CallTimes


def timed_batch(runner: RunnerProcess, slots: list[Slot], lib: str, inputs: list[dict[str, Any]],
                timeout_s: float, flush: bool = True, gate: Callable[[], None] | None = None,
                chained: bool = False) -> tuple[dict[str, Any], CallTimes | None, list[dict[str, Any]] | None]:
    """Load each slot's inputs, flush the L2 (trusted side), have ``runner`` call ``lib`` on the
    slots one after the other, copy every output out.  The trusted window runs from the moment
    the first inputs start to become visible to the runner (work done by anything of the
    candidate's from then on, a kernel left polling the inputs in another context included,
    falls inside it) to the end of the last copy of the outputs.  ``inputs`` are private arrays
    no runner can see, so their making (the fused mix, queued asynchronously) is finished before
    the window opens.  Inside it, that compute-bound kernel and a byte-wise poisoning of the
    outputs made the loading of one relu call of 16M elements take 0.83 ms (0.09 ms now, H100),
    overhead whose clock-dependent part drifted between the clean calibration and the timing and
    charged honest kernels up to 16 %.

    The inputs are read back (``after:``, compared bitwise with the private copy) once the window
    has closed: nothing a candidate does to them can earn time there, since the outputs are
    already taken, the next call's inputs are written afresh, and an input found changed is a
    rejection whenever it happens.  Inside the window those copies, and a synchronize per buffer
    set, were 0.2 ms of a relu call's 0.3 ms of overhead on an H100 (16M elements, a 0.07 ms
    kernel): the overhead's drift, which the window bound cannot tell from escaped work, scales
    with it.

    ``chained``: a chained window (chain.py): ``inputs`` holds the first call's only, the other
    slots are poisoned before the window, inputs included, and the runner draws each call's inputs
    from the one before; only the last call's outputs are copied inside the window.

    ``gate`` (the workbench's ``gpu_idle.IdleGate``) runs before the window opens: it waits until
    no other context has work on the GPU (a candidate's kernel queued after its runner's last
    synchronize would otherwise run into this window), or raises ``gpu_idle.GpuBusy``."""
    memory = slots[0].memory
    linked = slots[1:] if chained else []
    for slot in linked:             # a chained call's buffers: poisoned before the window opens
        slot.poison()
    memory.synchronize()
    if gate is not None:
        gate()
    start = time.perf_counter()
    for slot, values in zip(slots[:len(slots) - len(linked)], inputs, strict=True):
        slot.load(values, wait=False)
    if flush:
        memory.flush_l2()           # after the loads on the same stream; it waits
    else:
        memory.synchronize()
    message: dict[str, Any] = {"op": "call", "slot": slots[0].name, "lib": lib, "scalars": slots[0].scalars}
    if len(slots) > 1:
        message["more"] = [slot.name for slot in slots[1:]]
    if chained:
        message["chain"] = True
    sent = time.perf_counter()
    reply = runner.send(message, timeout_s)
    replied = time.perf_counter()
    if "error" in reply or reply["rc"] != 0 or reply["last_error"] != 0:
        return reply, None, None
    # a chained window's outputs but the last are copied after it: each was hashed into the next
    # call's inputs, so one changed after the hand-over is caught (chain.py), and the window holds
    # no trusted work that grows with its calls (whose noise would be a forger's room)
    captured: list[dict[str, Any]] = [{} for _ in linked] + [slot.take_outputs() for slot in slots[len(linked):]]
    memory.synchronize()
    window_ms = (time.perf_counter() - start) * 1e3
    runner.settle()                 # stopped since its reply (harness.py): nothing of it runs from here on
    for taken, slot in zip(captured, slots):
        if not taken:
            taken.update(slot.take_outputs())
        taken.update(slot.take_inputs())
    memory.synchronize()
    return reply, CallTimes(float(reply["event_ms"]), float(reply["event_all_ms"]), float(reply["host_ms"]),
                            window_ms, calls=len(slots), prep_ms=(sent - start) * 1e3,
                            send_ms=(replied - sent) * 1e3), captured


def call_error(reply: dict[str, Any]) -> str | None:
    """What went wrong in a call reply, or None."""
    if "error" in reply:
        return f"{reply.get('cuda_error') or 'error'}: {reply['error']}"
    if reply["rc"] != 0 or reply["last_error"] != 0:
        return (f"launch returned {reply['rc']}, last CUDA error {reply['last_error']} "
                f"{reply.get('last_error_name', '')}").strip()
    return None
