"""The runner's device-block reuse and page-locked staging, with a fake CUDA runtime (no GPU)."""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evo_fsr import npyfile, runner


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


def _runner() -> runner.Runner:
    r = runner.Runner.__new__(runner.Runner)      # no CUDA start-up
    r.rt = FakeRuntime()
    r.spare, r.spare_bytes = {}, 0
    r.staging_ptr, r.staging_bytes = 0, 0
    return r


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
