"""Device memory owned by the trusted evaluator and lent to runners through CUDA IPC.

Every buffer a runner passes to ``launch`` is allocated here, in the evaluator's own CUDA context
(CuPy).  The runner opens it with the allocation's IPC handle; the evaluator writes the inputs,
poisons the outputs, and after the runner's reply copies the outputs into private arrays, which
no runner has a handle to.  So the outputs that are judged are read from memory the evaluator
owns, at a moment it chooses, and the inputs it checks are its own copies.

``TrustedMemory`` is the contract; ``CupyMemory`` is the real one.  The CPU tests use
``evo_fsr.testing.fake_device.SharedFileMemory`` (host memory in shared files, the same IPC
round trip through the runner's fake runtime).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .l2_flush import empty_l2


@dataclass(frozen=True)
class Block:
    """One allocation: its address in the evaluator's context, size, and IPC handle (hex)."""

    ptr: int
    nbytes: int
    handle: str


class TrustedMemory(Protocol):
    xp: Any                                   # the array module of ``view`` (cupy or numpy)

    def alloc(self, nbytes: int) -> Block: ...
    def free(self, block: Block) -> None: ...
    def view(self, block: Block, dtype: np.dtype, shape: tuple[int, ...]) -> Any: ...
    def fill(self, block: Block, byte: int) -> None: ...      # every byte of the block (stream-ordered)
    def slack(self, block: Block) -> Any | None: ...          # uint8 view of the allocation past nbytes, or None
    def fill_slack(self, block: Block, byte: int) -> None: ...  # every byte past nbytes (stream-ordered)
    def copy(self, view: Any) -> Any: ...                     # a private copy of a view (stream-ordered)
    def copy_into(self, out: Any, view: Any) -> None: ...     # the same into an array made before
    def synchronize(self) -> None: ...
    def flush_l2(self) -> None: ...
    def probe_ms(self) -> float: ...                          # a tiny kernel, launch to sync (gpu_idle.py)


#: Device allocations are whole multiples of this (the GPU's large-page size).
ALLOCATION_GRANULE = 2 * 2**20


def allocation_bytes(nbytes: int) -> int:
    """What to allocate for a buffer of ``nbytes``: rounded up to whole 2 MiB pages.  Measured on
    an H100 (driver 580): a cudaMalloc of 200,000,068 bytes (50,000,017 floats) opened through
    CUDA IPC in another process is read and written ~55 % slower there than in its own process
    (relu, 214 against 137 us), while a 2 MiB multiple runs the same through IPC.  Every runner
    sees its buffers through IPC, so an odd-sized benchmark shape was charged that slowdown,
    candidate and naive alike, and the library (timed in this process on its own buffers) was
    not.  The views keep the logical size."""
    n = max(int(nbytes), 1)
    return -(-n // ALLOCATION_GRANULE) * ALLOCATION_GRANULE


class CupyMemory:
    """Whole allocations (cudaMalloc, not CuPy's pool: an IPC handle names an allocation's base)
    on the current device, viewed as CuPy arrays."""

    def __init__(self) -> None:
        try:
            import cupy  # noqa: PLC0415 - the trusted evaluator process only
        except ImportError as exc:
            raise RuntimeError("the evaluator needs CuPy on a GPU host: pip install 'evo-fsr[cuda13]' "
                               "(or [cuda12] for a CUDA 12 driver)") from exc
        self.xp = cupy
        self._cupy = cupy
        self._probe: Any = None

    def alloc(self, nbytes: int) -> Block:
        rt = self._cupy.cuda.runtime
        ptr = int(rt.malloc(allocation_bytes(nbytes)))
        handle = bytes(rt.ipcGetMemHandle(ptr))
        return Block(ptr, int(nbytes), handle.hex())

    def free(self, block: Block) -> None:
        self._cupy.cuda.runtime.free(block.ptr)

    def view(self, block: Block, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
        cupy = self._cupy
        memory = cupy.cuda.UnownedMemory(block.ptr, max(block.nbytes, 1), self)
        return cupy.ndarray(shape, dtype=dtype, memptr=cupy.cuda.MemoryPointer(memory, 0))

    def slack(self, block: Block) -> Any:
        """The allocation's bytes past the buffer's end (``allocation_bytes``: up to 2 MiB), as a
        uint8 array: a kernel's writes past a buffer's end land there instead of faulting, so the
        validator guards them with a canary (``slot.Slot.guard``)."""
        cupy = self._cupy
        total = allocation_bytes(block.nbytes)
        memory = cupy.cuda.UnownedMemory(block.ptr, total, self)
        return cupy.ndarray((total - block.nbytes,), dtype=cupy.uint8,
                            memptr=cupy.cuda.MemoryPointer(memory, block.nbytes))

    def fill_slack(self, block: Block, byte: int) -> None:
        """The slack's bytes set to ``byte``: one memset on the current stream."""
        past = allocation_bytes(block.nbytes) - block.nbytes
        if past > 0:
            self._memset(block.ptr + block.nbytes, byte, past)

    def fill(self, block: Block, byte: int) -> None:
        """A memset on the current stream (an element-wise fill of a uint8 view runs one byte
        per thread: with it and the input making, loading a relu call of 16M elements took 0.83
        ms on an H100; 0.09 ms with neither in the window)."""
        self._memset(block.ptr, byte, block.nbytes)

    def copy(self, view: Any) -> Any:
        """A private copy: one device-to-device cudaMemcpyAsync on the current stream into a
        fresh array of CuPy's pool.  On an H100 eight 64 MiB copies took 0.41 ms this way and 0.69 ms as
        ``cupy.array(view, copy=True)``, inside every timed window (the outputs' copy)."""
        out = self._cupy.empty(view.shape, dtype=view.dtype)
        self.copy_into(out, view)
        return out

    def copy_into(self, out: Any, view: Any) -> None:
        """``copy`` into ``out`` (made before: a window's copies after its completion mark are
        only the memcpys, timed_window.py)."""
        cupy = self._cupy
        if view.nbytes:
            cupy.cuda.runtime.memcpyAsync(out.data.ptr, view.data.ptr, view.nbytes, 3,     # device to device
                                          cupy.cuda.get_current_stream().ptr)

    def _memset(self, ptr: int, byte: int, nbytes: int) -> None:
        cupy = self._cupy
        cupy.cuda.runtime.memsetAsync(ptr, int(byte) & 0xFF, nbytes, cupy.cuda.get_current_stream().ptr)

    def synchronize(self) -> None:
        self._cupy.cuda.runtime.deviceSynchronize()

    def flush_l2(self) -> None:
        """Empty the L2 (shared by every context on the GPU: ``l2_flush.empty_l2``) on CuPy's
        current stream, after the inputs' loads, and wait: done here, not in the runner, so that a
        candidate cannot skip it and run on inputs still hot in L2 from their upload."""
        empty_l2()
        self.synchronize()

    def probe_ms(self) -> float:
        """An empty kernel on CuPy's current stream, launch to synchronize, by the host clock
        (gpu_idle.py: another context's work makes it wait for the GPU's time slice)."""
        cupy = self._cupy
        if self._probe is None:
            self._probe = cupy.RawKernel('extern "C" __global__ void evo_fsr_idle_probe() {}', "evo_fsr_idle_probe")
            self._probe((1,), (32,), ())                # compiled and loaded outside the timing
            cupy.cuda.get_current_stream().synchronize()
        stream = cupy.cuda.get_current_stream()
        start = time.perf_counter()
        self._probe((1,), (32,), ())
        stream.synchronize()
        return (time.perf_counter() - start) * 1e3


def make_memory(kind: str = "cuda") -> TrustedMemory:
    if kind == "fake":
        from ..testing.fake_device import SharedFileMemory  # noqa: PLC0415 - CPU tests only
        return SharedFileMemory()
    return CupyMemory()
