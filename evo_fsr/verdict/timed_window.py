"""One timed window (the Performance Profiler's unit of measurement): a shape's inputs loaded
and the L2 flushed on the trusted side, one command to a runner to call its library on one or
more buffer sets, the outputs copied out, all on the trusted clock (``timed_batch``), or a chained
window enqueued before it opens and opened by the trusted side's seed (``chained_window``); and
what went wrong in a call's reply (``call_error``).  The window is the bound on a runner's claims
(profile.py); what fills it is chosen by the workbench (bench.py) and the session (session.py)."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ..runner.harness import RunnerProcess
from ..runner.host_usage import RestCpu, stop_credit_ms
from .completion import expected_hash, marked_outputs, new_key
from .slot import Slot
from .profile import CallTimes

log = logging.getLogger(__name__)


def timed_batch(runner: RunnerProcess, slots: list[Slot], lib: str, inputs: list[dict[str, Any]],
                timeout_s: float, flush: bool = True, gate: Callable[[], None] | None = None,
                chain_seed: int | None = None) -> tuple[dict[str, Any], CallTimes | None, list[dict[str, Any]] | None]:
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

    ``chain_seed``: a chained window (``chained_window``).

    ``gate`` (the workbench's ``gpu_idle.IdleGate``) runs before the window opens: it waits until
    no other context has work on the GPU (a candidate's kernel queued after its runner's last
    synchronize would otherwise run into this window), or raises ``gpu_idle.GpuBusy``."""
    if chain_seed is not None:
        return chained_window(runner, slots, lib, chain_seed, timeout_s, gate)
    memory = slots[0].memory
    for slot in slots:
        slot.guard()                # the canary past every buffer's end (outside the window)
    memory.synchronize()
    if gate is not None:
        gate()
    cpu_at = (runner.rest_cpu(), time.perf_counter())   # its CPU from here to just after the window
    runner.wake()                   # running, not asleep, when the command comes (command_pipes.SPIN_S)
    start = time.perf_counter()
    for slot, values in zip(slots, inputs, strict=True):
        slot.load(values, wait=False)
    if flush:
        memory.flush_l2()           # after the loads on the same stream; it waits
    else:
        memory.synchronize()
    key = new_key()
    message: dict[str, Any] = {"op": "call", "slot": slots[0].name, "lib": lib, "scalars": slots[0].scalars,
                               "mark": key}
    if len(slots) > 1:
        message["more"] = [slot.name for slot in slots[1:]]
    return _close_window(runner, slots, message, (start, cpu_at), timeout_s, copied_inside=len(slots), key=key)


def chained_window(runner: RunnerProcess, slots: list[Slot], lib: str, seed: int, timeout_s: float,
                   gate: Callable[[], None] | None = None
                   ) -> tuple[dict[str, Any], CallTimes | None, list[dict[str, Any]] | None]:
    """A chained window (chain.py), enqueued whole before it opens.  Every slot is poisoned,
    inputs included, the L2 flushed, the gate's word zeroed, and the runner ``arm``-ed: it
    enqueues the gate, call 0's draw from the word, and every call, link and event.  The window
    opens when the trusted side writes ``seed`` into the word (a host store: nothing of the trusted
    side runs on the GPU until the copy-out), and closes once the runner has synchronized
    (``finish``) and the last call's outputs are copied; the other calls' outputs are copied after
    it (each was hashed into the next call's inputs, so one changed after the hand-over is caught,
    and the window holds no trusted work that grows with its calls).  The caller checks call 0's
    inputs against the draw of ``seed`` (``chain.drawn_inputs``): a runner that ran its chain
    before the window, past the gate, drew them from another word."""
    memory = slots[0].memory
    for slot in slots:
        slot.poison()
        slot.guard()
    memory.synchronize()
    if gate is not None:
        gate()
    memory.flush_l2()
    runner.set_gate(0)
    key = new_key()
    message: dict[str, Any] = {"op": "arm", "slot": slots[0].name, "lib": lib, "scalars": slots[0].scalars,
                               "more": [slot.name for slot in slots[1:]], "mark": key}
    armed = runner.send(message, timeout_s)
    runner.settle()                 # nothing of the runner's host runs as the window opens
    cpu_at = (runner.rest_cpu(), time.perf_counter())
    start = time.perf_counter()
    runner.set_gate(seed)           # opened in every case: a gate left closed would hold the GPU
    if call_error(armed) is not None:
        return armed, None, None
    if not armed["complete"]:
        log.warning("a chained window of %d calls was not all enqueued within the arm's reply; the rest is "
                    "enqueued inside the window", len(slots))
    return _close_window(runner, slots, {"op": "finish"}, (start, cpu_at), timeout_s, copied_inside=1, key=key)


def _close_window(runner: RunnerProcess, slots: list[Slot], message: dict[str, Any],
                  opened: tuple[float, tuple[RestCpu, float]], timeout_s: float, copied_inside: int,
                  key: int) -> tuple[dict[str, Any], CallTimes | None, list[dict[str, Any]] | None]:
    """Send the command that ends a window opened at ``opened`` (the trusted clock, and the
    runner's CPU clock read at rest before it, with the trusted time of that read); the window
    ends once the calls' completion mark of ``key`` (completion.py) is in the gate's page and the
    last ``copied_inside`` slots' outputs, which it covers, are copied (a chained window's others
    after it: each was hashed into the next call's inputs, so one changed after the hand-over is
    caught, and the window holds no trusted work that grows with its calls).  The runner's CPU
    clock is read at rest again just after the window's end, wherever that falls (``cpu_span``).
    The reply is read after the window, then every other output and every input (``after:``) once
    the runner has settled.  A window with no mark before the reply, or a mark whose hash is not
    that of the outputs copied, is timed to the reply instead and its outputs copied again after
    it; and outputs that changed after their copy (found by copying them once more once the
    runner has settled) are taken from that copy, the window timed to it (``CallTimes.marked``
    False)."""
    memory = slots[0].memory
    start, cpu_at_start = opened
    inside = len(slots) - copied_inside
    deadline = time.monotonic() + timeout_s
    places = [slot.output_places() for slot in slots[inside:]]      # the copies' arrays, made before the command

    def copy_out(into: list[dict[str, Any]] | list[None]) -> tuple[list[dict[str, Any]], float]:
        """The last ``copied_inside`` slots' outputs copied (into ``into``'s arrays where given),
        awaited, and the moment they were (the window's end)."""
        taken = [{} for _ in slots[:inside]] + [slot.take_outputs(i) for slot, i in zip(slots[inside:], into)]
        memory.synchronize()
        return taken, time.perf_counter()

    sent = time.perf_counter()
    command = runner.post(message)
    digest = runner.await_mark(key, timeout_s)
    marked = digest is not None
    cpu = (-1.0, 0.0, -1.0)
    if marked:
        captured, end = copy_out(places)
        cpu = cpu_span(runner, cpu_at_start, end)
    reply = runner.collect(command, max(0.0, deadline - time.monotonic()))
    if call_error(reply) is not None:
        return reply, None, None
    if marked and expected_hash(memory.xp, key, marked_outputs(slots[0].task, captured[inside:])) != digest:
        marked = False
    if not marked:
        log.debug("a window of %d call(s) without its completion mark: timed to the reply", len(slots))
        captured, end = copy_out([None] * copied_inside)
        cpu = cpu_span(runner, cpu_at_start, end)       # to the reply, as the window
    runner.settle()                 # stopped since its reply (harness.py): nothing of it runs from here on
    again = [slot.take_outputs() for slot in slots[inside:]]
    memory.synchronize()
    if not all(_same_bytes(memory.xp, taken, later) for taken, later in zip(captured[inside:], again)):
        log.debug("outputs changed after the window's copy: the window is timed to their copy once settled")
        marked = False
        captured[inside:] = again
        end = time.perf_counter()
        cpu = cpu_span(runner, cpu_at_start, end)
    for taken, slot in zip(captured, slots):
        if not taken:
            taken.update(slot.take_outputs())
        taken.update(slot.take_inputs())
    memory.synchronize()
    return reply, CallTimes(float(reply["event_ms"]), float(reply["event_all_ms"]), float(reply["host_ms"]),
                            (end - start) * 1e3, calls=len(slots), prep_ms=(sent - start) * 1e3,
                            send_ms=(end - sent) * 1e3, marked=marked, runner_cpu_ms=cpu[0],
                            runner_span_ms=cpu[1], runner_serving_ms=cpu[2],
                            runner_other_runs=cpu[3]), captured


def cpu_span(runner: RunnerProcess, at_start: tuple[RestCpu, float], end: float
             ) -> tuple[float, float, float, int]:
    """The runner's CPU in ms from ``at_start`` (its clocks read at rest, every thread's and the
    serving thread's, and the trusted time of that read) to a read at rest just after ``end`` (the
    window's end), the trusted ms it was spent over (to the rest, but the wait for the stop counted
    at most ``host_usage.stop_credit_ms``: a thread held in an uninterruptible wait delays the stop
    at no CPU and would dilute the rest), the serving thread's CPU ms of it, and the other threads'
    runs on a CPU in it (``host_usage.other_runs``, at least 0). (-1, 0, -1, -1) where the process's
    clock could not be read; -1 for the serving thread's ms or the runs alone where those could not.
    Every runner is read alike, the trusted ones too (their figures are not judged), so that the
    windows of every role carry the same stops."""
    first, t_start = at_start
    last = runner.rest_cpu()
    if min(first.total_ns, last.total_ns) < 0:
        return -1.0, 0.0, -1.0, -1
    span_ms = (end - t_start) * 1e3 + min((last.at_s - end) * 1e3, stop_credit_ms((end - t_start) * 1e3))
    serving_ms = (last.serving_ns - first.serving_ns) * 1e-6 if min(first.serving_ns, last.serving_ns) >= 0 else -1.0
    runs = max(0, last.other_runs - first.other_runs) if min(first.other_runs, last.other_runs) >= 0 else -1
    return (last.total_ns - first.total_ns) * 1e-6, span_ms, serving_ms, runs


def _same_bytes(xp: Any, a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two copies of a slot's outputs hold the same bytes (NaNs included)."""
    return all(bool(xp.array_equal(xp.ascontiguousarray(a[name]).reshape(-1).view(xp.uint8),
                                   xp.ascontiguousarray(b[name]).reshape(-1).view(xp.uint8))) for name in a)


def call_error(reply: dict[str, Any]) -> str | None:
    """What went wrong in a call reply, or None."""
    if "error" in reply:
        return f"{reply.get('cuda_error') or 'error'}: {reply['error']}"
    if reply["rc"] != 0 or reply["last_error"] != 0:
        return (f"launch returned {reply['rc']}, last CUDA error {reply['last_error']} "
                f"{reply.get('last_error_name', '')}").strip()
    return None
