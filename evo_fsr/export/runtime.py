"""Runtime of an exported kernel: copied verbatim as ``_runtime.py`` into every exported package.

Standalone on purpose (stdlib + ``_formulas.py`` beside it; torch or CuPy imported only when
the caller passes their arrays): the exported folder works without evo-fsr installed.

``ExportedKernel(spec, folder)(*buffers, **keywords)`` checks every buffer's framework,
device, dtype, contiguity and shape against the task's signature, infers dims from the
shapes, allocates missing outputs and workspaces, and calls ``launch`` from the compiled
shared object (``kernel_<arch>.so`` shipped beside it, else nvcc at first call, cached) on the
caller's current stream.
"""
from __future__ import annotations

import ctypes
import hashlib
import keyword
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

try:  # inside an exported package
    from ._formulas import Formula  # type: ignore[import-not-found]
except ImportError:  # evo_fsr.export.runtime itself (tests)
    from ..formulas import Formula

BUFFER_ROLES = ("input", "output", "inout", "workspace")
CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float, "float64": ctypes.c_double}
NVCC_FLAGS = ("-O3", "-shared", "-Xcompiler", "-fPIC", "-std=c++17")


class KernelArgumentError(TypeError):
    """A call whose arguments do not fit the kernel's signature (the message says which and why)."""


class KernelBuildError(RuntimeError):
    """The kernel could not be compiled or loaded (no nvcc, nvcc failed, no shipped .so)."""


@dataclass(frozen=True)
class BufferInfo:
    framework: str
    shape: tuple[int, ...]
    dtype: str          # "float32", ...
    contiguous: bool
    device: int         # CUDA device index; -1 = host memory


class Adapter:
    """How to inspect and allocate one framework's arrays; torch and CuPy below, fakes in tests."""

    name = ""

    def owns(self, obj: Any) -> bool:
        return type(obj).__module__.split(".")[0] == self.name

    def info(self, obj: Any) -> BufferInfo: ...
    def pointer(self, obj: Any) -> int: ...
    def empty(self, shape: tuple[int, ...], dtype: str, device: int) -> Any: ...
    def stream(self, device: int) -> int: ...
    def device_scope(self, device: int) -> Any: ...


class TorchAdapter(Adapter):
    name = "torch"

    def info(self, obj: Any) -> BufferInfo:
        device = obj.device.index if obj.is_cuda else -1
        if obj.is_cuda and device is None:
            import torch  # noqa: PLC0415
            device = torch.cuda.current_device()
        return BufferInfo("torch", tuple(obj.shape), str(obj.dtype).replace("torch.", ""), obj.is_contiguous(), device)

    def pointer(self, obj: Any) -> int:
        return int(obj.data_ptr())

    def empty(self, shape: tuple[int, ...], dtype: str, device: int) -> Any:
        import torch  # noqa: PLC0415
        return torch.empty(shape, dtype=getattr(torch, dtype), device=f"cuda:{device}")

    def stream(self, device: int) -> int:
        import torch  # noqa: PLC0415
        return int(torch.cuda.current_stream(device).cuda_stream)

    def device_scope(self, device: int) -> Any:
        import torch  # noqa: PLC0415
        return torch.cuda.device(device)


class CupyAdapter(Adapter):
    name = "cupy"

    def info(self, obj: Any) -> BufferInfo:
        return BufferInfo("cupy", tuple(obj.shape), str(obj.dtype), bool(obj.flags.c_contiguous), int(obj.device.id))

    def pointer(self, obj: Any) -> int:
        return int(obj.data.ptr)

    def empty(self, shape: tuple[int, ...], dtype: str, device: int) -> Any:
        import cupy  # noqa: PLC0415
        with cupy.cuda.Device(device):
            return cupy.empty(shape, dtype=dtype)

    def stream(self, device: int) -> int:
        import cupy  # noqa: PLC0415
        with cupy.cuda.Device(device):
            return int(cupy.cuda.get_current_stream().ptr)

    def device_scope(self, device: int) -> Any:
        import cupy  # noqa: PLC0415
        return cupy.cuda.Device(device)


ADAPTERS: list[Adapter] = [TorchAdapter(), CupyAdapter()]


@dataclass(frozen=True)
class ArgSpec:
    name: str
    role: str
    dtype: str = ""
    shape: tuple[str, ...] = ()
    value: str = ""

    @property
    def py_name(self) -> str:
        return self.name + "_" if keyword.iskeyword(self.name) else self.name


def _describe_shape(arg: ArgSpec) -> str:
    return "[" + ", ".join(arg.shape) + "]"


class ExportedKernel:
    def __init__(self, spec: dict[str, Any], folder: Path | str,
                 launcher: Callable[[], Callable[..., int]] | None = None) -> None:
        self.spec = spec
        self.folder = Path(folder)
        self.function = str(spec["function"])
        self.args = tuple(ArgSpec(a["name"], a["role"], a.get("dtype", ""), tuple(a.get("shape", ())),
                                  a.get("value") or "") for a in spec["args"])
        self.derived = tuple((str(n), Formula(f)) for n, f in spec.get("derived", ()))
        self.positional = tuple(a for a in self.args if a.role in ("input", "inout"))
        self.keywords = tuple(a for a in self.args if a.role in ("output", "scalar"))
        self.returned = tuple(a for a in self.args if a.role in ("output", "inout"))
        self._launcher = launcher
        self._launch: Callable[..., int] | None = None
        self._lock = threading.Lock()

    # -- argument checking -------------------------------------------------------------------
    def _fail(self, message: str) -> KernelArgumentError:
        return KernelArgumentError(f"{self.function}(): {message}")

    def _adapter(self, obj: Any, arg: ArgSpec) -> Adapter:
        for adapter in ADAPTERS:
            if adapter.owns(obj):
                return adapter
        raise self._fail(f"{arg.py_name} must be a torch tensor or a CuPy array, got {type(obj).__name__}")

    def bind(self, buffers: tuple[Any, ...], keywords: dict[str, Any]) -> tuple[Adapter, int, dict[str, Any], dict[str, Any]]:
        """Check the call; returns (adapter, device, buffers by name incl. allocated ones, dims)."""
        if len(buffers) != len(self.positional):
            names = ", ".join(a.py_name for a in self.positional)
            raise self._fail(f"takes {len(self.positional)} array argument(s) ({names}), got {len(buffers)}")
        allowed = {a.py_name for a in self.keywords}
        unknown = sorted(set(keywords) - allowed)
        if unknown:
            raise self._fail(f"unexpected keyword {unknown[0]!r} (allowed: {', '.join(sorted(allowed)) or 'none'})")
        given = {a.name: b for a, b in zip(self.positional, buffers)}
        given.update({a.name: keywords[a.py_name] for a in self.keywords
                      if a.role == "output" and keywords.get(a.py_name) is not None})
        adapter: Adapter | None = None
        device: int | None = None
        infos: dict[str, BufferInfo] = {}
        for arg in self.args:
            if arg.name not in given:
                continue
            obj = given[arg.name]
            this = self._adapter(obj, arg)
            if adapter is not None and this is not adapter:
                raise self._fail(f"{arg.py_name} is a {this.name} array but earlier arguments are {adapter.name}: "
                                 f"do not mix frameworks")
            adapter = this
            info = this.info(obj)
            if info.device < 0:
                raise self._fail(f"{arg.py_name} is in host memory: move it to the GPU (.cuda() / cupy.asarray)")
            if device is not None and info.device != device:
                raise self._fail(f"{arg.py_name} is on cuda:{info.device} but earlier arguments are on cuda:{device}")
            device = info.device
            if info.dtype != arg.dtype:
                raise self._fail(f"{arg.py_name} must be {arg.dtype}, got {info.dtype}")
            if not info.contiguous:
                raise self._fail(f"{arg.py_name} must be contiguous (call .contiguous() / cupy.ascontiguousarray)")
            if len(info.shape) != len(arg.shape):
                raise self._fail(f"{arg.py_name} must have {len(arg.shape)} dim(s) {_describe_shape(arg)}, "
                                 f"got shape {info.shape}")
            infos[arg.name] = info
        assert adapter is not None and device is not None   # at least one input or inout buffer
        dims = self._dims(infos, keywords)
        for arg in self.args:
            if arg.name in infos:
                expected = tuple(int(Formula(f)(dims)) for f in arg.shape)
                if infos[arg.name].shape != expected:
                    shown = ", ".join(f"{k}={v}" for k, v in dims.items() if not isinstance(v, float) or v == int(v))
                    raise self._fail(f"{arg.py_name} must have shape {_describe_shape(arg)} = {expected} "
                                     f"(with {shown}), got {infos[arg.name].shape}")
        return adapter, device, given, dims

    def _dims(self, infos: dict[str, BufferInfo], keywords: dict[str, Any]) -> dict[str, Any]:
        dims: dict[str, Any] = {}
        source: dict[str, str] = {}
        for arg in self.args:
            if arg.name not in infos:
                continue
            for axis, (formula, size) in enumerate(zip(arg.shape, infos[arg.name].shape)):
                if formula.isidentifier():
                    if formula in dims and dims[formula] != size:
                        raise self._fail(f"{arg.py_name}.shape[{axis}] = {size} but {source[formula]} gives "
                                         f"{formula} = {dims[formula]}")
                    dims.setdefault(formula, size)
                    source.setdefault(formula, f"{arg.py_name}.shape[{axis}]")
        for arg in self.args:
            if arg.role == "scalar" and keywords.get(arg.py_name) is not None:
                value = keywords[arg.py_name]
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise self._fail(f"{arg.py_name} must be a number, got {value!r}")
                target = arg.value or arg.name
                if target.isidentifier():
                    if target in dims and dims[target] != value:
                        raise self._fail(f"{arg.py_name}={value} disagrees with {source[target]} = {dims[target]}")
                    dims[target] = value
        for name, formula in self.derived:
            if name not in dims:
                try:
                    dims[name] = formula(dims)
                except Exception:  # noqa: BLE001 - a missing dim: reported below
                    pass
        needed = {n for a in self.args for f in (*a.shape, *([a.value or a.name] if a.role == "scalar" else []))
                  for n in Formula(f).names}
        derived = dict(self.derived)
        for name in list(needed):      # a derived dim that could not be computed: ask for what it reads
            if name not in dims and name in derived:
                needed |= derived[name].names
        missing = sorted(n for n in needed - set(dims) if n not in derived)
        if missing:
            raise self._fail(f"cannot infer {', '.join(missing)} from the array shapes: pass "
                             + ", ".join(f"{m}=..." for m in missing))
        return dims

    # -- the call -----------------------------------------------------------------------------
    def __call__(self, *buffers: Any, **keywords: Any) -> Any:
        adapter, device, given, dims = self.bind(buffers, keywords)
        launch = self._load()
        with adapter.device_scope(device):
            values: list[Any] = []
            for arg in self.args:
                if arg.role in BUFFER_ROLES:
                    if arg.name not in given:
                        shape = tuple(int(Formula(f)(dims)) for f in arg.shape)
                        given[arg.name] = adapter.empty(shape, arg.dtype, device)
                    values.append(ctypes.c_void_p(adapter.pointer(given[arg.name])))
                elif arg.role == "scalar":
                    value = Formula(arg.value or arg.name)(dims)
                    values.append(CTYPES[arg.dtype](int(value) if arg.dtype.startswith("int") else float(value)))
                else:
                    values.append(ctypes.c_void_p(adapter.stream(device)))
            code = launch(*values)
        if code != 0:
            raise RuntimeError(f"{self.function}(): launch returned CUDA error {code}")
        out = tuple(given[a.name] for a in self.returned)
        return out[0] if len(out) == 1 else out

    # -- compiling and loading ----------------------------------------------------------------
    def _load(self) -> Callable[..., int]:
        with self._lock:
            if self._launch is None:
                self._launch = self._launcher() if self._launcher else self._load_library()
            return self._launch

    def _load_library(self) -> Callable[..., int]:
        path = self.library_path(current_arch())
        lib = ctypes.CDLL(str(path))
        fn = lib.launch
        fn.restype = ctypes.c_int
        return fn

    def library_path(self, arch: str) -> Path:
        """The shipped ``kernel_<arch>.so``, else one compiled with nvcc (cached by source and arch)."""
        shipped = self.folder / f"kernel_{arch}.so"
        if shipped.is_file():
            return shipped
        source = (self.folder / "kernel.cu").read_bytes() + (self.folder / "contract.h").read_bytes()
        key = hashlib.sha256(source + arch.encode() + " ".join(NVCC_FLAGS).encode()).hexdigest()[:16]
        for cache in (self.folder / "_build", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                      / "evo-fsr-export"):
            if (cache / f"{key}.so").is_file():
                return cache / f"{key}.so"
        return compile_library(self.folder, arch, key)


def nvcc() -> str:
    found = shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
                                     if os.environ.get("CUDA_HOME") else None)
    if not found or not os.path.isfile(found):
        raise KernelBuildError("nvcc not found: install the CUDA toolkit (or set CUDA_HOME), or export the kernel "
                               "with --arch to ship a compiled .so")
    return found


def compile_library(folder: Path, arch: str, key: str) -> Path:
    """nvcc kernel.cu (with contract.h force-included) -> <cache>/<key>.so; returns its path."""
    last_error = ""
    for cache in (folder / "_build", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evo-fsr-export"):
        try:
            cache.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=cache) as work:
                out = Path(work) / "kernel.so"
                cmd = [nvcc(), *NVCC_FLAGS, f"-arch={arch}", "-include", str(folder / "contract.h"),
                       str(folder / "kernel.cu"), "-o", str(out)]
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                if done.returncode != 0:
                    raise KernelBuildError(f"nvcc failed for {folder / 'kernel.cu'} ({arch}):\n"
                                           + (done.stderr or done.stdout)[-4000:])
                out.replace(cache / f"{key}.so")
            return cache / f"{key}.so"
        except PermissionError as exc:
            last_error = str(exc)
    raise KernelBuildError(f"no writable cache folder for the compiled kernel: {last_error}")


def current_arch() -> str:
    """sm_XY of the current CUDA device (torch, else CuPy)."""
    try:
        import torch  # noqa: PLC0415
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except ImportError:
        pass
    try:
        import cupy  # noqa: PLC0415
        return "sm_" + str(cupy.cuda.Device().compute_capability)
    except ImportError:
        pass
    raise KernelBuildError("neither torch nor CuPy can see a CUDA device")
