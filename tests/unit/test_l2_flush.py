"""The L2 flush's read pass (evo_fsr/verdict/l2_flush.py) without a GPU: its size, its launch
(grid, word count, stream) and that nvcc accepts its kernel.  That it evicts a buffer written
before it, and leaves no write-back to the next call, is measured on a GPU
(tests/gpu/test_evaluator_gpu.py, scripts/probe_flush.py)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from evo_fsr.verdict import l2_flush
from evo_fsr.verdict.l2_flush import ReadFlush, flush_bytes


class FakeCupy:
    """What ReadFlush uses of CuPy: device attributes, zeros, RawKernel, ExternalStream."""

    uint8, uint32 = "uint8", "uint32"

    def __init__(self, l2: int, sms: int) -> None:
        self.launches: list[tuple[Any, ...]] = []
        self.streams: list[int] = []
        self.current: int | None = None
        self.zeroed: list[tuple[int, str]] = []
        fake = self
        attributes = {"L2CacheSize": l2, "MultiProcessorCount": sms}

        class Stream:
            def __init__(self, ptr: int) -> None:
                self.ptr = ptr
                fake.streams.append(ptr)

            def __enter__(self) -> None:
                fake.current = self.ptr

            def __exit__(self, *exc: object) -> None:
                fake.current = None

        def kernel(source: str, name: str):  # type: ignore[no-untyped-def]
            assert name in source
            return lambda grid, block, args: fake.launches.append((grid, block, args, fake.current))

        self.cuda = SimpleNamespace(Device=lambda: SimpleNamespace(attributes=attributes), ExternalStream=Stream)
        self.RawKernel = kernel

    def zeros(self, n: int, dtype: str) -> tuple[int, str]:
        self.zeroed.append((n, dtype))
        return (n, dtype)

    @staticmethod
    def uint64(n: int) -> int:
        return n


def test_the_buffer_is_four_l2s_and_never_under_64_mib() -> None:
    assert flush_bytes(50 * 2**20) == 200 * 2**20
    assert flush_bytes(6 * 2**20) == 64 * 2**20
    assert flush_bytes(0) == 64 * 2**20
    assert flush_bytes(60_000_001) % 16 == 0 and flush_bytes(60_000_001) >= 240_000_004


def test_one_launch_reads_every_word_on_the_stream_asked_for() -> None:
    cupy = FakeCupy(l2=50 * 2**20, sms=132)
    flush = ReadFlush(cupy)
    assert cupy.zeroed[0] == (200 * 2**20, "uint8")        # zeroed once, at its making
    flush.run()
    flush.run(stream_ptr=0xABC)
    flush.run(stream_ptr=0xABC)
    (grid, block, args, stream), (_, _, args2, stream2), (_, _, _, stream3) = cupy.launches
    assert grid == (132 * l2_flush.BLOCKS_PER_SM,) and block == (l2_flush.THREADS,)
    assert args[1] == 200 * 2**20 // 16 and args2 == args      # every 16-byte word
    assert stream is None and stream2 == stream3 == 0xABC
    assert cupy.streams == [0xABC]                             # CuPy's view of the handle made once
    assert len(cupy.zeroed) == 2                               # buffer and flag, no more per flush


def test_nvcc_keeps_every_load_of_the_read_pass(tmp_path: Path) -> None:
    """Five 16-byte L2-cached loads in the PTX (four a step, one in the remainder loop): none was
    dropped as dead code."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    cu, ptx = tmp_path / "flush.cu", tmp_path / "flush.ptx"
    cu.write_text(l2_flush.READ_PASS_SOURCE)
    out = subprocess.run(["nvcc", "-arch=sm_90", "-O3", "-ptx", str(cu), "-o", str(ptx)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert ptx.read_text().count("ld.global.cg.v4.u32") == 5, ptx.read_text()[-3000:]


def test_the_chase_visits_each_chosen_line_once_then_loops() -> None:
    """evo_fsr/testing/l2_probe.make_chain: followed from its start, ``visits`` distinct 128-byte
    lines, one word each, then back to the start (so one pass is ``visits`` dependent loads)."""
    from evo_fsr.testing.l2_probe import LINE_WORDS, make_chain

    chain, start = make_chain(1 << 20, 1000, seed=3)
    assert chain.size == (1 << 20) // 4
    at, seen = start, []
    for _ in range(1000):
        seen.append(at)
        at = int(chain[at])
    assert at == start and len(set(seen)) == 1000
    assert all(word % LINE_WORDS == 0 for word in seen)
    with pytest.raises(ValueError, match="visits"):
        make_chain(1 << 12, 1000)
