"""A host-memory stand-in for the runner's CUDA runtime binding (runner/cudart.py), for CPU tests.

"Device" memory is host memory; an IPC handle names a file that the trusted side's fake device
memory (testing/fake_device.py) maps too, so the runner and the trusted side share buffers as
they do through CUDA IPC on a GPU.  Events read the host clock; synchronizes do nothing (every
"kernel" is host code that has finished when ``launch`` returns, unless it starts a thread).
Kernel libraries are host C code built with gcc.  Standard library only: the runner loads it.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import time

IPC_HANDLE_BYTES = 64


class CudaError(RuntimeError):
    def __init__(self, call: str, code: int, name: str, text: str) -> None:
        self.call, self.code, self.name = call, code, name
        super().__init__(f"{call} failed: {name} ({code}): {text}")


class Runtime:
    #: a "kernel" runs when launched, on the host: a chained window's steps, queued behind the gate
    #: on a GPU, wait for ``finish`` instead (runner.Runner.arm)
    defers_gated_work = True

    def __init__(self) -> None:
        self.blocks: dict[int, object] = {}
        self.maps: dict[int, mmap.mmap] = {}
        self.events: dict[int, float] = {}
        self.next_event = 1

    def set_device(self, index: int) -> None: ...
    def stream_create(self) -> int: return 7
    def device_synchronize(self) -> None: ...
    def stream_synchronize(self, stream: int) -> None: ...
    def last_error(self) -> int: return 0
    def error_name(self, code: int) -> str: return f"fake{code}"
    def device_name(self, device: int = 0) -> str: return "Fake CPU device"

    def attribute(self, name: str, device: int = 0) -> int:
        return {"compute_capability_major": 9, "compute_capability_minor": 0,
                "multiprocessor_count": 4, "clock_rate_khz": 1_000_000}.get(name, 1 << 20)

    def malloc(self, nbytes: int) -> int:
        block = ctypes.create_string_buffer(max(int(nbytes), 1))
        self.blocks[ctypes.addressof(block)] = block
        return ctypes.addressof(block)

    def free(self, ptr: int) -> None:
        self.blocks.pop(ptr, None)

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    def memset_async(self, ptr: int, byte: int, nbytes: int, stream: int) -> None:
        ctypes.memset(ptr, byte, nbytes)

    def event_create(self) -> int:
        self.next_event += 1
        return self.next_event

    def event_record(self, event: int, stream: int) -> None:
        self.events[event] = time.perf_counter()

    def elapsed_ms(self, start: int, end: int) -> float:
        return max(0.0, (self.events[end] - self.events[start]) * 1e3)

    def ipc_open(self, handle: bytes) -> int:
        if len(handle) != IPC_HANDLE_BYTES:
            raise ValueError(f"an IPC handle has {IPC_HANDLE_BYTES} bytes, not {len(handle)}")
        path = handle.rstrip(b"\0").decode()
        # the device's folder, for host kernels that model GPU work left queued (fake_device.BUSY_PREFIX)
        os.environ.setdefault("EVO_FSR_FAKE_DEVICE_DIR", os.path.dirname(path))
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            mapped = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        ptr = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
        self.maps[ptr] = mapped
        return ptr

    def map_host(self, ptr: int, nbytes: int) -> int:
        return ptr                   # "device" memory is host memory

    def ipc_close(self, ptr: int) -> None:
        self.maps.pop(ptr, None)     # the mapping stays valid until garbage collected: no use-after-free here
