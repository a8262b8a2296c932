"""The runner's device-block reuse, page-locked staging and its run/time commands, with a fake
CUDA runtime whose "device" memory is host memory (no GPU)."""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evo_fsr.runner import npyfile
from evo_fsr.runner import runner


class FakeRuntime:
    """Counts allocations; host "page-locked" blocks are real ctypes buffers."""

    def __init__(self) -> None:
        self.next_ptr = 0x1000
        self.mallocs: list[int] = []
        self.frees: list[int] = []
        self.host_blocks: dict[int, Any] = {}
        self.host_frees: list[int] = []

    def malloc(self, nbytes: int) -> int:
        self.mallocs.append(nbytes)
        self.next_ptr += max(nbytes, 1) + 256
        return self.next_ptr

    def free(self, ptr: int) -> None:
        self.frees.append(ptr)

    def malloc_host(self, nbytes: int) -> int:
        block = ctypes.create_string_buffer(nbytes)
        self.host_blocks[ctypes.addressof(block)] = block
        return ctypes.addressof(block)

    def free_host(self, ptr: int) -> None:
        self.host_frees.append(ptr)


class HostRuntime(FakeRuntime):
    """Device memory is host memory: copies and memsets really happen."""

    def malloc(self, nbytes: int) -> int:
        self.mallocs.append(nbytes)
        return self.malloc_host(nbytes)

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    def memset_async(self, ptr: int, byte: int, nbytes: int, stream: int) -> None:
        ctypes.memset(ptr, byte, nbytes)

    def attribute(self, name: str) -> int:
        return 1024

    def stream_synchronize(self, stream: int) -> None: ...
    def device_synchronize(self) -> None: ...
    def event_record(self, event: int, stream: int) -> None: ...
    def last_error(self) -> int: return 0
    def elapsed_ms(self, start: int, end: int) -> float: return 0.5


def _runner(rt: FakeRuntime | None = None) -> runner.Runner:
    r = runner.Runner.__new__(runner.Runner)      # no CUDA start-up
    r.rt = rt or FakeRuntime()
    r.spare, r.spare_bytes = {}, 0
    r.staging_ptr, r.staging_bytes = 0, 0
    r.flush_ptr, r.flush_bytes = 0, 0
    r.stream = r.start_event = r.end_event = 0
    return r


N = 16


def _doubling_kernel(x: ctypes.c_void_p, y: ctypes.c_void_p) -> int:
    """y = 2 x over N float32 values, like a launch() of the task's ABI."""
    src = np.frombuffer((ctypes.c_char * (4 * N)).from_address(x.value), dtype="<f4")
    dst = np.frombuffer((ctypes.c_char * (4 * N)).from_address(y.value), dtype="<f4")
    dst[:] = 2 * src
    return 0


def _host_runner(tmp_path: Path) -> runner.Runner:
    r = _runner(HostRuntime())
    r.workdir = tmp_path
    r.job = {"args": [{"name": "x", "role": "input", "dtype": "float32", "np_dtype": "<f4"},
                      {"name": "y", "role": "output", "dtype": "float32", "np_dtype": "<f4"}]}
    r.launchers = {"candidate": _doubling_kernel, "baseline": _doubling_kernel}
    (tmp_path / "case").mkdir()
    return r


def test_run_writes_outputs_and_inputs_after_and_reuses_its_blocks(tmp_path: Path) -> None:
    r = _host_runner(tmp_path)
    x = np.arange(N, dtype="<f4") + 0.5
    np.save(tmp_path / "case" / "x.npy", x)
    msg = {"op": "run", "lib": "candidate", "dir": "case", "shapes": {"x": [N], "y": [N]}, "scalars": {}}
    for _ in range(3):
        reply = r.run(msg)
        assert reply["rc"] == 0 and set(reply["phase_ms"]) == {"upload", "launch", "dump", "free"}
        assert np.array_equal(np.load(tmp_path / "case" / "out_y.npy"), 2 * x)
        assert np.array_equal(np.load(tmp_path / "case" / "after_x.npy"), x)
    assert r.rt.mallocs == [4 * N, 4 * N]          # x and y once; later runs reuse them
    assert r.spare_bytes == 8 * N


def test_time_snapshots_the_checked_calls_on_their_rotated_inputs(tmp_path: Path) -> None:
    r = _host_runner(tmp_path)
    x = np.arange(N, dtype="<f4") + 0.5
    np.save(tmp_path / "case" / "x.npy", x)
    reply = r.time({"op": "time", "lib": ["candidate", "baseline"], "dir": "case",
                    "shapes": {"x": [N], "y": [N]}, "scalars": {}, "max_trials": 4, "min_trials": 4,
                    "budget_s": 1.0, "warmup": 1, "rotations": [[1], [2], [3], [5]], "check_trials": [0, 2],
                    "inputs_after_trial": 0})
    assert reply["trials"] == 4 and reply["snapshots"] == [0, 2]
    assert reply["event_ms"]["candidate"] == [0.5] * 4
    folder = tmp_path / "case"
    assert np.array_equal(np.load(folder / "snap0_y.npy"), 2 * np.roll(x, -1))
    assert np.array_equal(np.load(folder / "snap2_y.npy"), 2 * np.roll(x, -3))
    assert np.array_equal(np.load(folder / "after0_x.npy"), np.roll(x, -1))
    # every device block went back to the spare list: buffers, input bases, snapshots
    assert r.rt.frees == [] and r.spare_bytes == sum(r.rt.mallocs[1:])    # [0] is the L2 flush buffer


def test_a_released_block_is_reused_for_the_same_size_only() -> None:
    r = _runner()
    a = r.alloc(4096)
    r.release(a, 4096)
    assert r.alloc(4096) == a                 # reused: no second cudaMalloc
    assert r.rt.mallocs == [4096]
    b = r.alloc(4096)                          # none spare now
    c = r.alloc(8192)
    assert len({a, b, c}) == 3 and r.rt.mallocs == [4096, 4096, 8192]
    assert r.rt.frees == []


def test_spare_blocks_are_capped_and_the_rest_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "SPARE_LIMIT_BYTES", 10_000)
    r = _runner()
    blocks = [r.alloc(4000) for _ in range(3)]
    for ptr in blocks:
        r.release(ptr, 4000)
    assert r.rt.frees == [blocks[2]]           # 12,000 bytes would pass the cap
    assert r.spare_bytes == 8000


def test_staging_grows_by_doubling_and_is_not_reallocated_below_its_size() -> None:
    r = _runner()
    view = r.staging(100)
    assert view.nbytes == 100 and r.staging_bytes == runner.STAGING_MIN_BYTES
    first = r.staging_ptr
    r.staging(runner.STAGING_MIN_BYTES)
    assert r.staging_ptr == first and r.rt.host_frees == []
    r.staging(runner.STAGING_MIN_BYTES + 1)
    assert r.rt.host_frees == [first] and r.staging_bytes == 2 * runner.STAGING_MIN_BYTES


def test_npy_data_read_straight_into_the_staging_buffer(tmp_path: Path) -> None:
    array = np.arange(24, dtype="<f4").reshape(2, 3, 4)
    np.save(tmp_path / "x.npy", array)
    r = _runner()
    npyfile.read_into(tmp_path / "x.npy", "<f4", r.staging(array.nbytes))
    got = ctypes.string_at(r.staging_ptr, array.nbytes)
    assert got == array.tobytes()
    with pytest.raises(ValueError, match="byte count"):
        npyfile.read_into(tmp_path / "x.npy", "<f4", r.staging(array.nbytes - 4))
