"""Which shared objects the candidate runner may load, and which ones it did (issue 11, mechanism 7).

Trusted side only (the runner never imports this).  Three uses:

- ``runner_read_rules()``: the runner's Landlock read allow-list, file by file where a directory
  would also hold other libraries: the Python standard library (its directory, minus
  site-packages), the dependency closure (``DT_NEEDED``, resolved as the loader does) of the
  Python executable, of its extension modules, of glibc and the C++ runtime, of ``libcudart``
  (the file cudart.py loads) and of the driver (``libcuda`` and the ``libnvidia-*`` /
  ``libcuda*`` files beside it, which it opens itself), plus data the runtime reads (locale,
  /proc, /sys, selected /etc files).  No CUDA toolkit directory, no site-packages, no
  ``LD_LIBRARY_PATH`` directory is granted whole, so cuBLAS, cuDNN, NCCL, nvrtc or torch's
  bundled libraries cannot be opened, hence not loaded.
- ``mapped_files(pid)``: the files mapped into a process (``/proc/<pid>/maps``); unreadable
  maps (the candidate made itself non-dumpable, or the process is gone) raise MapsUnreadable.
- ``vendor_libraries(paths)``: the shared objects among mapped paths that are neither the
  runner's own needs nor the candidate's library: what the trusted side reports (opt-in) or
  rejects (``crash:vendor-library``).
"""
from __future__ import annotations

import functools
import glob
import mmap
import os
import platform
import re
import struct
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..verdict.linkage import DynamicDeps, ElfError, dynamic_deps

#: Names of libraries that are not the candidate's own code, whatever directory they are in.
VENDOR_NAME = re.compile(
    r"^lib(?:cublas|cublasLt|cudnn|cufft|cufftw|curand|cusparse|cusparseLt|cusolver|cusolverMg|nccl|"
    r"nvrtc|nvrtc-builtins|nvJitLink|nvblas|npp\w*|nvjpeg|cutensor\w*|cudss|cufile\w*|cutlass|"
    r"torch\w*|c10\w*|caffe2\w*|shm|magma\w*|tensorrt\w*|nvinfer\w*|nvonnxparser|cupy\w*|"
    r"mkl\w*|openblas\w*|onednn|dnnl|triton\w*)[.\-_]", re.I)
#: Files the driver opens itself (dlopen), next to libcuda.so.1.
DRIVER_FILES = ("libcuda.so*", "libcuda-*", "libnvidia-*.so*", "libcudadebugger.so*", "libdxcore.so*",
                "libnvcuvid.so*", "libnvidia-ptxjitcompiler.so*")
BASE_SONAMES = ("libc.so.6", "libm.so.6", "libmvec.so.1", "libstdc++.so.6", "libgcc_s.so.1",
                "libpthread.so.0", "libdl.so.2", "librt.so.1", "libutil.so.1",
                "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1")
DATA_TREES = ("/proc", "/sys", "/usr/lib/locale", "/usr/share/locale", "/usr/share/zoneinfo",
              "/usr/share/nvidia", "/etc/nvidia", "/usr/lib/x86_64-linux-gnu/gconv",
              "/usr/lib/aarch64-linux-gnu/gconv", "/usr/lib64/gconv", "/usr/lib/gconv")
DATA_FILES = ("/dev/urandom", "/dev/random", "/dev/zero", "/usr/bin/nvidia-modprobe") + tuple(
    f"/etc/{name}" for name in ("ld.so.cache", "ld.so.conf", "ld.so.preload", "localtime", "nsswitch.conf",
                                "passwd", "group", "host.conf", "gai.conf", "os-release"))
PACKAGE_DIRS = ("site-packages", "dist-packages")


class MapsUnreadable(OSError):
    """/proc/<pid>/maps could not be read (non-dumpable process, gone, or empty)."""


@dataclass(frozen=True)
class ReadRules:
    files: tuple[str, ...]       # regular files: read + execute
    trees: tuple[str, ...]       # directories: read + execute of everything beneath
    listable: tuple[str, ...]    # directories whose entries may be listed (no file reads)

    def allows(self, path: str) -> bool:
        """Whether the runner may read ``path`` under these rules (its real path: a file granted,
        or a granted directory above it)."""
        real = os.path.realpath(path)
        if real in self._file_set():
            return True
        trees = self._tree_set()
        return any(str(parent) in trees for parent in (Path(real), *Path(real).parents))

    @functools.lru_cache(maxsize=None)
    def _file_set(self) -> frozenset[str]:
        return frozenset(self.files)

    @functools.lru_cache(maxsize=None)
    def _tree_set(self) -> frozenset[str]:
        return frozenset(self.trees)


def is_vendor_library(path: str) -> bool:
    """A library by its name (cuBLAS, cuDNN, NCCL, nvrtc, torch ...) or by where it lives
    (site-packages/nvidia/..., a CUDA toolkit's lib directory other than libcudart)."""
    name = os.path.basename(path.split(" (deleted)")[0])
    if VENDOR_NAME.match(name):
        return True
    parts = Path(path).parts
    if any(p in PACKAGE_DIRS for p in parts) and ".so" in name:
        return True
    return bool(re.search(r"/cuda[\w.\-]*/(lib64|lib|targets/[\w\-]+/lib)/", path)) and not name.startswith(("libcudart", "libcuda.", "libnvidia-"))


# -- the loader's search -------------------------------------------------------------------------
def _read_ld_cache(path: str = "/etc/ld.so.cache") -> dict[str, list[str]]:
    """soname -> paths, from glibc's ld.so.cache (format 1.1); {} when absent or unknown."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return {}
    magic = b"glibc-ld.so.cache1.1"
    start = data.find(magic)
    if start < 0 or len(data) < start + 48:
        return {}
    nlibs, = struct.unpack_from("<I", data, start + 20)
    out: dict[str, list[str]] = {}
    for i in range(nlibs):
        at = start + 48 + 24 * i
        if at + 24 > len(data):
            break
        _flags, key, value = struct.unpack_from("<iII", data, at)
        out.setdefault(_c_string(data, key), []).append(_c_string(data, value))
    return out


def _c_string(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    return data[offset:end if end >= 0 else len(data)].decode(errors="replace")


def _conf_dirs(path: str = "/etc/ld.so.conf", depth: int = 0) -> list[str]:
    dirs: list[str] = []
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return dirs
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line.startswith("include ") and depth < 4:
            for sub in sorted(glob.glob(line[len("include "):].strip())):
                dirs += _conf_dirs(sub, depth + 1)
        elif line.startswith("/"):
            dirs.append(line)
    return dirs


@functools.lru_cache(maxsize=None)
def _search_dirs() -> tuple[str, ...]:
    arch = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}.get(platform.machine(), "")
    dirs = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p] + _conf_dirs()
    dirs += [f"/lib/{arch}", f"/usr/lib/{arch}", "/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    out: list[str] = []
    for d in dirs:
        for sub in [d] + sorted(glob.glob(os.path.join(d, "glibc-hwcaps", "*"))):
            if os.path.isdir(sub) and sub not in out:
                out.append(sub)
    return tuple(out)


def resolve(name: str, origin: str = "", runpath: tuple[str, ...] = ()) -> list[str]:
    """Every file the loader could open for ``name`` (real paths): a path as is, else the name in
    the object's RPATH/RUNPATH (``$ORIGIN`` expanded), its own directory, the search
    directories and ld.so.cache."""
    if "/" in name:
        found = [name]
    else:
        extra = [d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for d in runpath]
        dirs = extra + ([origin] if origin else []) + list(_search_dirs())
        found = [os.path.join(d, name) for d in dirs] + _ld_cache().get(name, [])
    return sorted({os.path.realpath(p) for p in found if os.path.isfile(p)})


@functools.lru_cache(maxsize=None)
def _ld_cache() -> dict[str, list[str]]:
    return _read_ld_cache()


@functools.lru_cache(maxsize=4096)
def _deps_of(path: str) -> DynamicDeps:
    """Its dependencies, read through a mapping (the driver's libraries are ~100 MB)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return dynamic_deps(data)  # type: ignore[arg-type]
    except (OSError, ValueError, ElfError):
        return DynamicDeps(())


def closure(roots: Iterable[str]) -> set[str]:
    """``roots`` and every library they need, transitively (vendor libraries never included)."""
    todo = [os.path.realpath(r) for r in roots if os.path.isfile(r)]
    seen: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen or is_vendor_library(path):
            continue
        seen.add(path)
        deps = _deps_of(path)
        for name in deps.all:
            todo += resolve(name, os.path.dirname(path), deps.search)
    return seen


# -- what the runner needs -----------------------------------------------------------------------
def _stdlib_dirs() -> list[str]:
    dirs = []
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_path(key)
        if path and os.path.isdir(path):
            dirs.append(os.path.realpath(path))
    import _struct  # noqa: PLC0415 - an extension module: where lib-dynload is
    ext = getattr(_struct, "__file__", None)
    if ext:
        dirs.append(os.path.dirname(os.path.realpath(ext)))
    return list(dict.fromkeys(dirs))


def _cudart_files() -> list[str]:
    """The libcudart files cudart.py may load: every candidate of its search that exists (the
    runner's scrubbed environment may pick another than this process would)."""
    found: list[str] = []
    try:
        from .cudart import _candidates  # noqa: PLC0415
        for path in _candidates():
            for real in resolve(path):
                if real not in found and os.path.basename(real).startswith("libcudart"):
                    found.append(real)
    except Exception:  # noqa: BLE001 - no runtime on this machine: nothing to allow
        pass
    return found[:4]


def _driver_files() -> list[str]:
    files: list[str] = []
    for lib in resolve("libcuda.so.1") + resolve("libcuda.so"):
        for pattern in DRIVER_FILES:
            files += glob.glob(os.path.join(os.path.dirname(lib), pattern))
    return files


@functools.lru_cache(maxsize=None)
def runner_read_rules(extra: tuple[str, ...] = ()) -> ReadRules:
    """The runner's Landlock read allow-list without the vendor-library opt-in."""
    trees: list[str] = []
    cudart = _cudart_files()
    listable = [os.path.dirname(f) for f in cudart]     # cudart.py globs its directory
    roots = [sys.executable, *cudart, *_driver_files(), *extra]
    for soname in BASE_SONAMES:
        roots += resolve(soname)
    for std in _stdlib_dirs():
        children = os.listdir(std)
        if not any(c in PACKAGE_DIRS for c in children):
            trees.append(std)
        else:
            listable.append(std)
            trees += [os.path.join(std, c) for c in sorted(children) if c not in PACKAGE_DIRS]
        roots += glob.glob(os.path.join(std, "lib-dynload", "*.so")) + glob.glob(os.path.join(std, "*.so"))
    trees += [os.path.realpath(p) for p in DATA_TREES if os.path.isdir(p)]
    files = closure(roots) | {os.path.realpath(p) for p in DATA_FILES if os.path.exists(p)}
    files -= {f for f in files if is_vendor_library(f) or not os.path.isfile(f) and not f.startswith("/dev/")}
    trees += [os.path.realpath(p) for p in extra if os.path.isdir(p)]
    return ReadRules(tuple(sorted(files)), tuple(dict.fromkeys(trees)), tuple(dict.fromkeys(listable)))


# -- what a process has mapped -------------------------------------------------------------------
_MAPS_PATH_RE = re.compile(rb"^\S+ \S+ \S+ \S+ \S+ +(/[^\n]*)$", re.M)


def mapped_files(pid: int) -> list[str]:
    """The distinct files mapped into ``pid`` (``" (deleted)"`` kept where the kernel says so)."""
    try:
        with open(f"/proc/{int(pid)}/maps", "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise MapsUnreadable(exc.errno, f"/proc/{pid}/maps unreadable: {exc.strerror}") from None
    if not raw.strip():
        raise MapsUnreadable(0, f"/proc/{pid}/maps is empty (process exiting or not inspectable)")
    return [p.decode(errors="replace") for p in dict.fromkeys(_MAPS_PATH_RE.findall(raw))]


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def vendor_libraries(paths: Iterable[str], own: Iterable[str] = (),
                     rules: ReadRules | None = None) -> list[str]:
    """The shared objects among ``paths`` (from mapped_files) that are neither the runner's own
    needs (``rules``, default runner_read_rules()) nor the candidate's (``own``): any ELF file,
    whatever its name, and any deleted file that looks like a library."""
    rules = rules or runner_read_rules()
    mine = {os.path.realpath(p) for p in own}
    return [raw for raw in paths if _vendor(raw, rules, mine)]


def _vendor(raw: str, rules: ReadRules, mine: set[str]) -> bool:
    """A mapped path that is a shared object neither the runner nor the candidate (``mine``) needs."""
    return _foreign(raw, rules) and os.path.realpath(raw.removesuffix(" (deleted)")) not in mine


class MapsJudge:
    """``vendor_libraries`` over successive reads of one runner's maps (after every call), with
    the answer for each path the candidate cannot change kept between reads: a file the read
    rules grant or one installed on the system, and the candidate's own library.  A path it
    could have written (its workdir, /tmp) or a deleted mapping is judged again on every read."""

    def __init__(self, own: Iterable[str] = (), rules: ReadRules | None = None) -> None:
        self.rules = rules or runner_read_rules()
        self.mine = {os.path.realpath(p) for p in own}
        self.settled: set[str] = set()

    def foreign(self, paths: Iterable[str]) -> list[str]:
        found = []
        for raw in paths:
            if raw in self.settled:
                continue
            if raw.endswith(" (deleted)"):
                if _vendor(raw, self.rules, self.mine):
                    found.append(raw)
                continue
            real = os.path.realpath(raw)
            if real in self.mine:
                self.settled.add(raw)
            elif _foreign(raw, self.rules):
                found.append(raw)
            elif raw.startswith(("/dev/", "/memfd:", "/proc/", "/sys/")) or _kind(raw, self.rules) != "other" \
                    or _installed(raw):
                self.settled.add(raw)
        return found


def _foreign(raw: str, rules: ReadRules) -> bool:
    """Whether one mapped path is a shared object the runner does not need."""
    deleted = raw.endswith(" (deleted)")
    path = raw.removesuffix(" (deleted)")
    if path.startswith(("/dev/", "/memfd:", "/proc/", "/sys/")):
        return False
    if deleted:
        return ".so" in os.path.basename(path) or is_vendor_library(path)
    kind = _kind(path, rules)
    # an unknown ELF file counts where a candidate could have put one (a renamed copy of a vendor
    # library in its workdir, /tmp, ...); one installed on the system (under /usr, /lib, /opt, the
    # Python or CUDA prefix) that the driver maps is not the candidate's doing
    return kind == "vendor" or (kind == "other" and not _installed(path) and _is_elf(path))


def _installed(path: str) -> bool:
    real = os.path.realpath(path)
    return real.startswith(_SYSTEM_PREFIXES)


_SYSTEM_PREFIXES = tuple(dict.fromkeys(
    ["/usr/", "/lib/", "/lib32/", "/lib64/", "/libx32/", "/opt/", "/bin/", "/sbin/", "/etc/"]
    + [os.path.realpath(p).rstrip("/") + "/" for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)
       if os.path.realpath(p) not in ("/", "")]))


@functools.lru_cache(maxsize=8192)
def _kind(path: str, rules: ReadRules) -> str:
    """vendor | allowed | other (cached: the runner's allow-list and vendor names do not change)."""
    if is_vendor_library(path):
        return "vendor"
    return "allowed" if rules.allows(path) else "other"
