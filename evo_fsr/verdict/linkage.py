"""Link check of a compiled candidate: which shared objects its ``.so`` asks the loader for.

Issue 11, mechanism 7: a candidate is a kernel, not a call into cuBLAS or cuDNN.  The loader
reads a shared object's dynamic section through its program headers (``PT_DYNAMIC``), not its
section headers, so this does the same: the ``DT_NEEDED`` entries (and ``DT_FILTER`` /
``DT_AUXILIARY``, which also make the loader open a library) are read from the dynamic segment,
their names from ``DT_STRTAB``.  Standard library only (``struct``); no ``readelf`` needed.

Allowed without the opt-in: the C and C++ runtimes (glibc's libc, libm, libmvec, libpthread, libutil,
libdl, librt, the dynamic loader, libstdc++, libgcc_s) and the CUDA runtime and driver
(libcudart, libcuda).  Anything else is a compile-stage rejection unless
``allow_vendor`` is set (``EvalConfig.allow_vendor_libraries``).
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .compile import CompileResult

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 15, 29
DT_AUXILIARY, DT_FILTER = 0x7FFFFFFD, 0x7FFFFFFF
MAX_DYNAMIC_ENTRIES = 1 << 16

#: Sonames a candidate may need: glibc, the C++ runtime, the CUDA runtime and driver.
ALLOWED_NEEDED = re.compile(
    r"^(?:lib(?:c|m|mvec|pthread|dl|rt|util|stdc\+\+|gcc_s|cudart|cuda)\.so(?:\.\d+)*"
    r"|ld-linux(?:-x86-64|-aarch64)?\.so(?:\.\d+)*)$")


class ElfError(ValueError):
    """The bytes are not a well-formed ELF shared object."""


@dataclass(frozen=True)
class DynamicDeps:
    needed: tuple[str, ...]          # DT_NEEDED, in order
    filters: tuple[str, ...] = ()    # DT_FILTER and DT_AUXILIARY (the loader opens these too)
    search: tuple[str, ...] = ()     # DT_RPATH / DT_RUNPATH directories (``$ORIGIN`` unexpanded)

    @property
    def all(self) -> tuple[str, ...]:
        return self.needed + self.filters


def _header(binary: bytes) -> tuple[str, int, int, int, int]:
    """(struct prefix, is64, phoff, phentsize, phnum) of an ELF file."""
    if len(binary) < 52 or binary[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    klass, data = binary[4], binary[5]
    if klass not in (1, 2) or data not in (1, 2):
        raise ElfError(f"unknown ELF class {klass} or data encoding {data}")
    end = "<" if data == 1 else ">"
    is64 = klass == 2
    if is64:
        if len(binary) < 64:
            raise ElfError("truncated ELF header")
        phoff, = struct.unpack_from(end + "Q", binary, 32)
        phentsize, phnum = struct.unpack_from(end + "HH", binary, 54)
    else:
        phoff, = struct.unpack_from(end + "I", binary, 28)
        phentsize, phnum = struct.unpack_from(end + "HH", binary, 42)
    return end, int(is64), phoff, phentsize, phnum


def dynamic_deps(binary: bytes) -> DynamicDeps:
    """The libraries the loader would open for this ELF object (raises ElfError if malformed)."""
    end, is64, phoff, phentsize, phnum = _header(binary)
    ph_fmt = end + ("IIQQQQQQ" if is64 else "IIIIIIII")
    if phentsize < struct.calcsize(ph_fmt) or phoff + phnum * phentsize > len(binary):
        raise ElfError("program headers out of range")
    loads: list[tuple[int, int, int]] = []      # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None      # (offset, filesz)
    for i in range(phnum):
        fields = struct.unpack_from(ph_fmt, binary, phoff + i * phentsize)
        if is64:
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = fields[:6]
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz = fields[:5]
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC:
            if dynamic is not None:
                raise ElfError("more than one PT_DYNAMIC segment")
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return DynamicDeps(())                  # statically linked: asks the loader for nothing
    dyn_fmt = end + ("qQ" if is64 else "iI")
    size = struct.calcsize(dyn_fmt)
    offset, filesz = dynamic
    if offset + filesz > len(binary):
        raise ElfError("dynamic segment out of range")
    entries: list[tuple[int, int]] = []
    for i in range(min(filesz // size, MAX_DYNAMIC_ENTRIES)):
        tag, value = struct.unpack_from(dyn_fmt, binary, offset + i * size)
        if tag == DT_NULL:
            break
        entries.append((tag & 0xFFFFFFFF if not is64 else tag, value))
    strtab = [v for t, v in entries if t == DT_STRTAB]
    strsz = [v for t, v in entries if t == DT_STRSZ]
    wanted = [(t, v) for t, v in entries if t in (DT_NEEDED, DT_FILTER, DT_AUXILIARY, DT_RPATH, DT_RUNPATH)]
    if not wanted:
        return DynamicDeps(())
    if len(strtab) != 1:
        raise ElfError("no single DT_STRTAB for the DT_NEEDED names")
    table = _file_offset(loads, strtab[0])
    limit = min(len(binary), table + strsz[0]) if strsz else len(binary)
    needed: list[str] = []
    filters: list[str] = []
    search: list[str] = []
    for tag, name_offset in wanted:
        start = table + name_offset
        stop = binary.find(b"\0", start, limit)
        if start >= limit or stop < 0:
            raise ElfError("a DT_NEEDED name lies outside the string table")
        name = binary[start:stop].decode("utf-8", errors="replace")
        if tag in (DT_RPATH, DT_RUNPATH):
            search += [d for d in name.split(":") if d]
        else:
            (needed if tag == DT_NEEDED else filters).append(name)
    return DynamicDeps(tuple(needed), tuple(filters), tuple(search))


def _file_offset(loads: list[tuple[int, int, int]], vaddr: int) -> int:
    for seg_vaddr, seg_offset, seg_filesz in loads:
        if seg_vaddr <= vaddr < seg_vaddr + seg_filesz:
            return seg_offset + (vaddr - seg_vaddr)
    raise ElfError(f"address {vaddr:#x} is in no loaded segment")


def is_allowed_needed(name: str) -> bool:
    """Whether a candidate may depend on ``name`` without the vendor-library opt-in.  A path
    (a name with '/') is never allowed: the loader would open exactly that file."""
    return "/" not in name and bool(ALLOWED_NEEDED.match(name))


def foreign_needed(binary: bytes) -> list[str]:
    """The library names this object needs beyond the allowed C/C++/CUDA runtime."""
    return [name for name in dynamic_deps(binary).all if not is_allowed_needed(name)]


def check_needed(binary: bytes, allow_vendor: bool = False) -> str | None:
    """A compile-stage rejection message, or None when the object may be run."""
    try:
        foreign = foreign_needed(binary)
    except ElfError as exc:
        return f"the compiled object is not a well-formed ELF shared object: {exc}"
    if not foreign or allow_vendor:
        return None
    return ("the compiled object links shared libraries outside the CUDA runtime: "
            + ", ".join(foreign[:8])
            + ". Vendor libraries (cuBLAS, cuDNN, ...) are not allowed: write the kernel yourself "
              "(the user can opt in with allow_vendor_libraries)")


def checked(result: "CompileResult", allow_vendor: bool) -> "CompileResult":
    """``result`` (a compile.CompileResult), made a failure when its object fails the link check."""
    if not result.ok:
        return result
    refusal = check_needed(result.binary, allow_vendor)
    if refusal is None:
        return result
    return replace(result, ok=False, binary=b"", log=refusal)
