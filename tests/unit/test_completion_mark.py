"""The completion mark (verdict/completion.py): the host C library computes the hash the trusted
side recomputes, and a window ends at a mark that matches its outputs, or at the reply when the
mark is missing or does not match."""
from __future__ import annotations

import ctypes
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from evo_fsr.runner import host_usage
from evo_fsr.runner.host_usage import CpuClock
from evo_fsr.verdict import completion
from evo_fsr.verdict.timed_window import timed_batch

REPLY_DELAY_S = 0.03


@pytest.fixture(scope="module")
def host_mark(tmp_path_factory: pytest.TempPathFactory) -> Any:
    if not shutil.which("gcc"):
        pytest.skip("gcc is needed for the host mark library")
    from evo_fsr.testing.fake_device import compile_host

    built = compile_host(completion.mark_source(SimpleNamespace(), fake=True))
    assert built.ok, built.log
    path = Path(tmp_path_factory.mktemp("mark")) / "mark.so"
    path.write_bytes(built.binary)
    lib = ctypes.CDLL(str(path))
    lib.evo_fsr_mark.restype = ctypes.c_int
    return lib


def _host_hash(lib: Any, key: int, buffers: list[np.ndarray]) -> tuple[int, int]:
    page = (ctypes.c_ulonglong * 2)()
    ptrs = (ctypes.c_void_p * len(buffers))(*[b.ctypes.data for b in buffers])
    nbytes = (ctypes.c_longlong * len(buffers))(*[b.nbytes for b in buffers])
    assert lib.evo_fsr_mark(ctypes.c_void_p(ctypes.addressof(page)), ctypes.c_ulonglong(key), ptrs, nbytes,
                            ctypes.c_int(len(buffers)), ctypes.c_void_p(0)) == 0
    return int(page[0]), int(page[1])


@pytest.mark.parametrize("sizes", [(1,), (7, 300), (512,), (513, 100_003), (4096,) * 70])
def test_the_host_library_and_the_trusted_side_take_the_same_hash(host_mark: Any, sizes: tuple[int, ...]) -> None:
    """Fails if the host C mark and ``expected_hash`` differ in any of: the places sampled (every
    word of a small buffer; the first, the last and keyed draws of a large one), the terms, the
    buffers covered past ``MAX_BUFFERS``."""
    rng = np.random.default_rng(sum(sizes))
    buffers = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    key = completion.new_key()
    tag, digest = _host_hash(host_mark, key, buffers)
    assert tag == key
    assert digest == completion.expected_hash(np, key, buffers)


def test_the_hash_sees_a_sampled_word_change_and_another_key(host_mark: Any) -> None:
    """Fails if the hash ignores the buffer's last word (always sampled), or does not depend on the key."""
    buffers = [np.arange(100_000, dtype=np.float32)]
    key = completion.new_key()
    digest = completion.expected_hash(np, key, buffers)
    changed = [buffers[0].copy()]
    changed[0][-1] = -1.0
    assert completion.expected_hash(np, key, changed) != digest
    assert completion.expected_hash(np, key ^ 2, buffers) != digest
    places = completion.sample_places(np, key, 0, 100_000)
    assert places.size == completion.SAMPLES and places[0] == 0 and places[1] == 99_999
    assert len(set(places.tolist())) > completion.SAMPLES * 0.9


# -- the window's end -----------------------------------------------------------------------------
class Memory:
    xp = np

    def synchronize(self) -> None: ...
    def flush_l2(self) -> None: ...


class Slot:
    """One output ``y`` whose bytes the test sets; its copies are numpy arrays."""

    def __init__(self, memory: Memory, name: str, task: Any) -> None:
        self.memory, self.name, self.task, self.scalars = memory, name, task, {}
        self.y = np.zeros(2000, dtype=np.float32)
        self.copies = 0

    def guard(self) -> None: ...
    def load(self, values: dict[str, Any], wait: bool = True) -> None: ...

    def output_places(self) -> dict[str, Any]:
        return {"y": np.empty_like(self.y)}

    def take_outputs(self, into: dict[str, Any] | None = None) -> dict[str, Any]:
        self.copies += 1
        if into is None:
            return {"y": self.y.copy()}
        np.copyto(into["y"], self.y)
        return into

    def take_inputs(self) -> dict[str, Any]:
        return {}


class Runner:
    """Replies ``REPLY_DELAY_S`` after the command; ``kind``: the mark it writes ("right": the
    hash of the slots' outputs, "wrong": another, "none": no mark before the reply)."""

    def __init__(self, slots: list[Slot], kind: str, late_write: bool = False) -> None:
        self.slots, self.kind, self.page, self.late_write = slots, kind, (0, 0), late_write
        self.settled = 0
        self.cpu = CpuClock(os.getpid())       # this process stands in for the runner's

    def rest_cpu(self) -> host_usage.RestCpu:
        return host_usage.RestCpu(self.cpu.ns(), host_usage.serving_thread_ns(os.getpid()), time.perf_counter())

    def wake(self) -> None: ...

    def post(self, message: dict[str, Any]) -> dict[str, Any]:
        key = int(message["mark"])
        digest = completion.expected_hash(np, key, [s.y for s in self.slots])
        self.page = {"right": (key, digest), "wrong": (key, digest ^ 1), "none": (0, 0)}[self.kind]
        return message

    def await_mark(self, key: int, timeout_s: float) -> int | None:
        return self.page[1] if self.page[0] == key else None

    def collect(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        time.sleep(REPLY_DELAY_S)
        return {"rc": 0, "last_error": 0, "event_ms": 0.01, "event_all_ms": 0.01, "host_ms": 0.02}

    def settle(self) -> bool:
        self.settled += 1
        if self.late_write:             # work that went on after the window's copy
            self.slots[1].y[7] = -1.0
        return True


def _window(kind: str, late_write: bool = False) -> tuple[Any, list[Slot], list[dict[str, Any]]]:
    task = SimpleNamespace(args=[SimpleNamespace(name="x", role="input"), SimpleNamespace(name="y", role="output")])
    memory = Memory()
    slots = [Slot(memory, "a", task), Slot(memory, "b", task)]
    slots[1].y[:] = 3.0
    _, times, captured = timed_batch(Runner(slots, kind, late_write), slots, "candidate", [{}, {}], 5.0)
    assert times is not None and captured is not None and len(captured) == 2
    return times, slots, captured


def test_a_window_ends_at_a_mark_that_matches_its_outputs() -> None:
    """Fails if the window still waits for the reply when the mark came and matched."""
    times, slots, _ = _window("right")
    assert times.marked and times.window_ms < REPLY_DELAY_S * 1e3 / 2, times
    assert [s.copies for s in slots] == [2, 2]      # in the window, and once more after the settle
    assert 0.0 < times.runner_cpu_ms <= times.runner_span_ms * 1.5 + 0.5, times     # the runner's CPU, read around it
    assert times.window_ms <= times.runner_span_ms <= times.window_ms + 5.0, times


@pytest.mark.parametrize("kind", ["wrong", "none"])
def test_a_window_without_a_matching_mark_is_timed_to_the_reply(kind: str) -> None:
    """Fails if a mark whose hash is not the outputs' (or no mark) ends the window before the
    reply, or if the outputs checked are not copied again after the reply."""
    times, slots, _ = _window(kind)
    assert not times.marked and times.window_ms >= REPLY_DELAY_S * 1e3, times
    assert 0.0 <= times.runner_cpu_ms < times.runner_span_ms / 2, times     # CPU, not wall: the reply's sleep is not in it
    assert [s.copies for s in slots] == ([3, 3] if kind == "wrong" else [2, 2])


def test_outputs_that_change_after_the_window_s_copy_are_taken_from_a_later_copy() -> None:
    """Fails if outputs written after the window's copy (work the mark did not wait for, or a
    kernel that finished its rest once the trusted side had woken) are checked as first copied,
    or the window keeps the mark's end."""
    times, slots, captured = _window("right", late_write=True)
    assert not times.marked and times.window_ms >= REPLY_DELAY_S * 1e3, times
    assert captured[1]["y"][7] == -1.0
