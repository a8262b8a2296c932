"""Trusted "device" memory for CPU tests: host memory in files under /dev/shm, shared with the
runner's fake runtime (fake_cudart.py) by file name, as CUDA IPC shares device allocations."""
from __future__ import annotations

import itertools
import mmap
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..verdict.memory import Block

if TYPE_CHECKING:
    from ..verdict.compile import CompileResult

FAKE_CUDART = Path(__file__).with_name("fake_cudart.py")
HANDLE_BYTES = 64
#: ``SharedFileMemory.probe_ms``: a file of this prefix and a live pid in the device folder (the
#: runner's fake runtime names the folder in EVO_FSR_FAKE_DEVICE_DIR) is that process's queued GPU work
BUSY_PREFIX = "busy-"
BUSY_PROBE_MS = 2.1


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (or is stopped): neither gone nor a zombie."""
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


class SharedFileMemory:
    xp = np

    def __init__(self) -> None:
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.folder = Path(tempfile.mkdtemp(prefix="efd-", dir=shm))
        self._maps: dict[int, mmap.mmap] = {}
        self._counter = itertools.count()

    def alloc(self, nbytes: int) -> Block:
        path = self.folder / f"b{next(self._counter)}"
        with open(path, "wb") as f:
            f.truncate(max(int(nbytes), 1))
        with open(path, "r+b") as f:
            mapped = mmap.mmap(f.fileno(), max(int(nbytes), 1))
        raw = str(path).encode()
        if len(raw) > HANDLE_BYTES:
            raise OSError(f"fake device path too long for a handle: {path}")
        key = id(mapped)
        self._maps[key] = mapped
        return Block(key, int(nbytes), raw.ljust(HANDLE_BYTES, b"\0").hex())

    def free(self, block: Block) -> None:
        self._maps.pop(block.ptr, None)

    def view(self, block: Block, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self._maps[block.ptr], dtype=dtype, count=count).reshape(shape)

    def fill(self, block: Block, byte: int) -> None:
        mapped = self._maps[block.ptr]
        mapped[:block.nbytes] = bytes([int(byte) & 0xFF]) * block.nbytes

    def slack(self, block: Block) -> Any:
        return None                 # allocations are exact: a write past the end faults or reaches nothing

    def fill_slack(self, block: Block, byte: int) -> None: ...

    def copy(self, view: Any) -> Any:
        return np.array(view, copy=True)

    def copy_into(self, out: Any, view: Any) -> None:
        np.copyto(out, view)

    def synchronize(self) -> None: ...

    def flush_l2(self) -> None:
        self.flushes = getattr(self, "flushes", 0) + 1     # a host "device" has no L2 to flush; counted for tests

    def probe_ms(self) -> float:
        """The fake device's stand-in for GPU work still queued by another context: a file
        ``busy-<pid>`` in this folder (``BUSY_PREFIX``) while process ``pid`` lives.  A probe then
        takes a time slice (gpu_idle.py's measured 2.1 ms), else 10 us."""
        for path in self.folder.glob(BUSY_PREFIX + "*"):
            if _alive(int(path.name[len(BUSY_PREFIX):] or 0)):
                return BUSY_PROBE_MS
        return 0.01

    def close(self) -> None:
        self._maps.clear()
        shutil.rmtree(self.folder, ignore_errors=True)


def compile_host(source: str, arch: str = "host") -> "CompileResult":
    """A "kernel" for the fake device: C host code built into a shared object with gcc."""
    import subprocess  # noqa: PLC0415
    import time  # noqa: PLC0415

    from ..verdict.compile import CompileResult  # noqa: PLC0415

    work = Path(tempfile.mkdtemp(prefix="efd-cc-"))
    try:
        (work / "k.c").write_text(source)
        start = time.perf_counter()
        done = subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-pthread", "-o", str(work / "k.so"),
                               str(work / "k.c"), "-lm"], capture_output=True, text=True, timeout=120)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            return CompileResult(False, "", done.stderr[-4000:], seconds, arch)
        return CompileResult(True, "", done.stderr[-4000:], seconds, arch, binary=(work / "k.so").read_bytes())
    finally:
        shutil.rmtree(work, ignore_errors=True)
