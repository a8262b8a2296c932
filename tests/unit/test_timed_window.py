"""What a timed window holds: the trusted side's fills are memsets, and the private inputs are
finished before the window opens (their making is not the candidate's time).  The L2 flush's
order: tests/unit/test_persisting_l2.py; its read pass: tests/unit/test_l2_flush.py."""
from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from evo_fsr.runner.host_usage import RestCpu
from evo_fsr.verdict.timed_window import timed_batch
from evo_fsr.verdict.memory import Block, CupyMemory

PENDING_S = 0.08    # the "mix kernel" still queued when timed_batch is called


class QueuedWorkMemory:
    """A device whose stream still holds PENDING_S of input making on the first synchronize."""
    xp = __import__("numpy")

    def __init__(self) -> None:
        self.pending = True
        self.events: list[str] = []

    def synchronize(self) -> None:
        self.events.append("sync")
        if self.pending:
            self.pending = False
            time.sleep(PENDING_S)

    def flush_l2(self) -> None:
        self.events.append("flush")


class StubSlot:
    def __init__(self, memory: QueuedWorkMemory, name: str) -> None:
        self.memory, self.name, self.scalars = memory, name, {}

    def guard(self) -> None:
        self.memory.events.append(f"guard {self.name}")

    def load(self, values: dict[str, Any], wait: bool = True) -> None:
        self.memory.events.append(f"load {self.name}")
        if wait:
            self.memory.synchronize()

    def output_places(self) -> dict[str, Any]:
        return {}

    def take_outputs(self, into: dict[str, Any] | None = None) -> dict[str, Any]:
        self.memory.events.append(f"outputs {self.name}")
        return {}

    def take_inputs(self) -> dict[str, Any]:
        self.memory.events.append(f"inputs {self.name}")
        return {}


class StubRunner:
    """A runner that replies at once and writes no completion mark (the window is timed to the reply)."""
    settled = 0

    def rest_cpu(self) -> RestCpu:   # its CPU clocks, not read here (CallTimes.runner_cpu_ms -1)
        return RestCpu(-1, -1, time.perf_counter())

    def wake(self) -> None: ...

    def post(self, message: dict[str, Any]) -> dict[str, Any]:
        return message

    def await_mark(self, key: int, timeout_s: float) -> int | None:
        return None

    def collect(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        return {"rc": 0, "last_error": 0, "event_ms": 0.5, "event_all_ms": 0.5, "host_ms": 0.6}

    def settle(self) -> bool:       # harness.RunnerProcess: wait until the stopped runner is still
        self.settled += 1
        return True


def test_the_private_inputs_are_made_before_the_window_opens() -> None:
    """Fails if timed_batch opens the window before the queued input making is done: the
    window would then hold PENDING_S of the evaluator's own work."""
    memory = QueuedWorkMemory()
    slots = [StubSlot(memory, "a"), StubSlot(memory, "b")]
    runner = StubRunner()
    reply, times, captured = timed_batch(runner, slots, "candidate", [{}, {}], 5.0)
    assert times is not None and times.calls == 2 and runner.settled == 1
    # the canary past every slot's end is queued before the synchronize, outside the window
    assert memory.events[:4] == ["guard a", "guard b", "sync", "load a"], memory.events
    assert times.window_ms < PENDING_S * 1e3 / 2, times.window_ms


def _cupy_memory(memset: list[tuple[int, int, int, int]]) -> CupyMemory:
    runtime = SimpleNamespace(memsetAsync=lambda ptr, value, size, stream: memset.append((ptr, value, size, stream)),
                              deviceSynchronize=lambda: None)
    cuda = SimpleNamespace(runtime=runtime, get_current_stream=lambda: SimpleNamespace(ptr=7))
    memory = object.__new__(CupyMemory)
    memory._cupy = SimpleNamespace(cuda=cuda)
    return memory


def test_fill_is_one_memset_of_the_logical_size_on_the_current_stream() -> None:
    calls: list[tuple[int, int, int, int]] = []
    _cupy_memory(calls).fill(Block(0x1000, 200_000_068, "00"), 0x1FF)
    assert calls == [(0x1000, 0xFF, 200_000_068, 7)]


def test_a_private_copy_is_one_device_to_device_memcpy_on_the_current_stream() -> None:
    """The outputs' copy inside every window: one cudaMemcpyAsync (0.41 ms for eight 64 MiB
    copies on an H100, 0.69 ms as an element-wise ``cupy.array(view, copy=True)``)."""
    copies: list[tuple[int, int, int, int, int]] = []
    memory = _cupy_memory([])
    memory._cupy.cuda.runtime.memcpyAsync = lambda dst, src, size, kind, stream: copies.append(
        (dst, src, size, kind, stream))
    fresh = SimpleNamespace(data=SimpleNamespace(ptr=0x2000))
    memory._cupy.empty = lambda shape, dtype: fresh
    view = SimpleNamespace(shape=(5,), dtype="float32", nbytes=20, data=SimpleNamespace(ptr=0x1000))
    assert memory.copy(view) is fresh
    assert copies == [(0x2000, 0x1000, 20, 3, 7)]


def _window(window_ms: float) -> "CallTimes":
    from evo_fsr.verdict.profile import CallTimes
    return CallTimes(0.02, 0.02, 0.03, window_ms, calls=1)


def test_a_round_stops_only_when_its_own_median_has_spent_the_budget() -> None:
    """windows.enough_windows: a round of launch-bound windows (~1 ms each, 1.4 ms baseline windows
    one in three) runs to its cap under a 2 s budget; it may stop at ``least`` windows only when
    over half of them are slow, and then they set the credit.  Fails if a few slow windows (or the
    warm-up before them) can end the round early."""
    from evo_fsr.verdict.windows import enough_windows, interleaved_windows

    enough = enough_windows(16, 2.0, 3)
    base = [_window(1.4)] * 6
    assert not enough([_window(1.0)] * 16, base)
    assert not enough([_window(1.0)] * 240, base * 13)                        # 240 x ~1.5 ms < 2 s
    assert not enough([_window(250.0)] * 7 + [_window(1.0)] * 9, base)         # 7 slow of 16: median fast
    assert enough([_window(250.0)] * 9 + [_window(1.0)] * 7, base)             # 9 slow of 16: median slow
    assert not enough([_window(250.0)] * 15, base)                              # under ``least``

    # through interleaved_windows: the slow windows come first, the round goes on to the cap
    times = iter([250.0] * 7 + [1.0] * 500)
    cand, basel = interleaved_windows(lambda: _window(next(times)), lambda: _window(1.4), 240, 3, enough)
    assert len(cand) == 240 and len(basel) == 80
    times = iter([250.0] * 500)
    cand, _ = interleaved_windows(lambda: _window(next(times)), lambda: _window(1.4), 240, 3, enough)
    assert len(cand) == 16
