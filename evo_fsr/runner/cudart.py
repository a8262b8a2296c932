"""A small ctypes binding of the CUDA runtime (libcudart), used by the candidate runner.

The runner is the process that loads untrusted kernels; it must start fast and depend on as
little as possible, so it talks to the runtime directly instead of importing CuPy or torch.
Candidates are built with ``--cudart shared`` and so share this runtime instance.
"""
from __future__ import annotations

import ctypes
import glob
import os
import shutil
from pathlib import Path
from typing import Iterator

MEMCPY_HOST_TO_DEVICE = 1
MEMCPY_DEVICE_TO_HOST = 2
MEMCPY_DEVICE_TO_DEVICE = 3
STREAM_NON_BLOCKING = 1

# cudaDeviceAttr values (driver_types.h)
ATTR = {
    "max_threads_per_block": 1, "max_shared_memory_per_block": 8, "clock_rate_khz": 13,
    "multiprocessor_count": 16, "memory_clock_rate_khz": 36, "global_memory_bus_width": 37,
    "l2_cache_size": 38, "compute_capability_major": 75, "compute_capability_minor": 76,
    "max_registers_per_block": 12, "max_shared_memory_per_block_optin": 97,
}


IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
HOST_REGISTER_MAPPED = 2        # cudaHostRegisterMapped
IPC_HANDLE_BYTES = 64


class IpcMemHandle(ctypes.Structure):
    """cudaIpcMemHandle_t: 64 opaque bytes, passed by value."""

    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]


class CudaError(RuntimeError):
    def __init__(self, call: str, code: int, name: str, text: str) -> None:
        self.call, self.code, self.name = call, code, name
        super().__init__(f"{call} failed: {name} ({code}): {text}")


def _candidates() -> Iterator[str]:
    """Where libcudart may be, most specific first (lazily: the runner stops at the first that
    loads, without spawning ``ldconfig`` for ``find_library``)."""
    if os.environ.get("EVO_FSR_CUDART"):
        yield os.environ["EVO_FSR_CUDART"]
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        homes.append(str(Path(nvcc).resolve().parent.parent))
    homes.append("/usr/local/cuda")
    for home in filter(None, homes):
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            yield from sorted(glob.glob(os.path.join(home, sub, "libcudart.so*")), reverse=True)
    import ctypes.util  # noqa: PLC0415 - last resort only: it may spawn ldconfig
    name = ctypes.util.find_library("cudart")
    if name:
        yield name


def load_library() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    raise OSError("libcudart not found (set CUDA_HOME or EVO_FSR_CUDART): " + "; ".join(errors[:3]))


class Runtime:
    """Thin, checked wrappers over the runtime calls the harness needs."""

    def __init__(self) -> None:
        self.lib = lib = load_library()
        lib.cudaGetErrorName.restype = ctypes.c_char_p
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        lib.cudaEventElapsedTime.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p]
        for name in ("cudaMemcpyAsync",):
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        lib.cudaMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
        lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        lib.cudaFree.argtypes = [ctypes.c_void_p]
        lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
        lib.cudaEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.cudaEventSynchronize.argtypes = [ctypes.c_void_p]
        lib.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), IpcMemHandle, ctypes.c_uint]
        lib.cudaIpcCloseMemHandle.argtypes = [ctypes.c_void_p]

    def check(self, call: str, code: int) -> None:
        if code != 0:
            raise CudaError(call, code, self.error_name(code), self.error_text(code))

    def error_name(self, code: int) -> str:
        return (self.lib.cudaGetErrorName(code) or b"?").decode()

    def error_text(self, code: int) -> str:
        return (self.lib.cudaGetErrorString(code) or b"?").decode()

    def set_device(self, index: int) -> None:
        self.check("cudaSetDevice", self.lib.cudaSetDevice(index))

    def attribute(self, name: str, device: int = 0) -> int:
        value = ctypes.c_int()
        self.check("cudaDeviceGetAttribute", self.lib.cudaDeviceGetAttribute(ctypes.byref(value), ATTR[name], device))
        return value.value

    def device_name(self, device: int = 0) -> str:
        # cudaDeviceProp is large and its layout changes between versions; name is its first field.
        buf = ctypes.create_string_buffer(8192)
        self.check("cudaGetDeviceProperties", self.lib.cudaGetDeviceProperties(buf, device))
        return buf.value.decode(errors="replace")

    def _allocate(self, call: str, nbytes: int) -> int:
        ptr = ctypes.c_void_p()
        self.check(call, getattr(self.lib, call)(ctypes.byref(ptr), max(int(nbytes), 1)))
        return int(ptr.value or 0)

    def malloc(self, nbytes: int) -> int:
        return self._allocate("cudaMalloc", nbytes)

    def free(self, ptr: int) -> None:
        self.check("cudaFree", self.lib.cudaFree(ctypes.c_void_p(ptr)))

    def stream_create(self) -> int:
        stream = ctypes.c_void_p()
        self.check("cudaStreamCreateWithFlags",
                   self.lib.cudaStreamCreateWithFlags(ctypes.byref(stream), STREAM_NON_BLOCKING))
        return int(stream.value or 0)

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        self.check("cudaMemcpyAsync", self.lib.cudaMemcpyAsync(dst, src, nbytes, kind, stream))

    def memset_async(self, ptr: int, byte: int, nbytes: int, stream: int) -> None:
        self.check("cudaMemsetAsync", self.lib.cudaMemsetAsync(ptr, byte, nbytes, stream))

    def stream_synchronize(self, stream: int) -> None:
        self.check("cudaStreamSynchronize", self.lib.cudaStreamSynchronize(stream))

    def device_synchronize(self) -> None:
        self.check("cudaDeviceSynchronize", self.lib.cudaDeviceSynchronize())

    def last_error(self) -> int:
        return int(self.lib.cudaGetLastError())

    def event_create(self) -> int:
        event = ctypes.c_void_p()
        self.check("cudaEventCreate", self.lib.cudaEventCreate(ctypes.byref(event)))
        return int(event.value or 0)

    def event_record(self, event: int, stream: int) -> None:
        self.check("cudaEventRecord", self.lib.cudaEventRecord(event, stream))

    def elapsed_ms(self, start: int, end: int) -> float:
        value = ctypes.c_float()
        self.check("cudaEventElapsedTime", self.lib.cudaEventElapsedTime(ctypes.byref(value), start, end))
        return float(value.value)

    def ipc_open(self, handle: bytes) -> int:
        """Map another process's device allocation (its cudaIpcGetMemHandle bytes) into this one."""
        if len(handle) != IPC_HANDLE_BYTES:
            raise ValueError(f"an IPC handle has {IPC_HANDLE_BYTES} bytes, not {len(handle)}")
        raw = IpcMemHandle()
        ctypes.memmove(ctypes.addressof(raw), handle, IPC_HANDLE_BYTES)
        ptr = ctypes.c_void_p()
        self.check("cudaIpcOpenMemHandle",
                   self.lib.cudaIpcOpenMemHandle(ctypes.byref(ptr), raw, IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return int(ptr.value or 0)

    def ipc_close(self, ptr: int) -> None:
        self.check("cudaIpcCloseMemHandle", self.lib.cudaIpcCloseMemHandle(ctypes.c_void_p(ptr)))

    def map_host(self, ptr: int, nbytes: int) -> int:
        """Page-locked host memory at ``ptr`` (page-aligned: a shared mapping) made visible to the
        device: its device address (cudaHostRegister, mapped, then cudaHostGetDevicePointer)."""
        self.check("cudaHostRegister", self.lib.cudaHostRegister(ctypes.c_void_p(ptr), ctypes.c_size_t(nbytes),
                                                                 ctypes.c_uint(HOST_REGISTER_MAPPED)))
        device = ctypes.c_void_p()
        self.check("cudaHostGetDevicePointer",
                   self.lib.cudaHostGetDevicePointer(ctypes.byref(device), ctypes.c_void_p(ptr), ctypes.c_uint(0)))
        return int(device.value or 0)
