"""Compilation Verifier: one ``.cu`` candidate -> a shared object exporting ``launch``.

- The task's prototype is force-included (``-include``) so a ``launch`` with another
  signature is a compile error, not a silent ABI mismatch at run time.
- ``#include`` is limited to CUDA toolkit and C/C++ standard headers, by name (``<...>`` or
  ``"..."``, never a path): a candidate cannot pull a file of the user's into the build, and so
  into diagnostics fed back to an LLM.
- nvcc runs in its own process group in a private temp dir with a timeout; diagnostics are
  trimmed and the temp paths rewritten to ``kernel.cu``.
- Results (successes and failures) are cached by sha256(source, header, flags, nvcc version,
  arch) under ``cache_dir``; the shared object travels as bytes so a Ray worker on another
  node needs no shared file system.

Works without a GPU: the target arch comes from the caller, the GPU or a default (sm_90).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..knobs import constraint_violation
from ..runner.sandbox import SandboxPolicy, run_sandboxed
from . import linkage
from .ptxas import parse_ptxas, without_ptxas_info

log = logging.getLogger(__name__)

DEFAULT_ARCH = "sm_90"
DEFAULT_CACHE_DIR = Path(os.environ.get("EVO_FSR_CACHE", Path.home() / ".cache" / "evo-fsr")) / "kernels"
MAX_SOURCE_BYTES = 256 * 1024
MAX_DIAGNOSTIC_LINES = 40
MAX_DIAGNOSTIC_CHARS = 4000
BASE_FLAGS = ("-O3", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", "-lineinfo", "--cudart", "shared",
              "-Xptxas", "-v")                # ptxas -v: resource usage, parsed by ptxas.py

# Headers a candidate may include: the CUDA toolkit's own and the C/C++ standard library, by name
# (``<name>`` or ``"name"``: the workdir holds only kernel.cu and contract.h, so a quoted standard
# name still reaches the system's header).  Names, never paths: no ``..``, no leading ``/``.  The
# list closes no capability (a POSIX call can be declared by hand, and the confined nvcc reads only
# system, CUDA and Python directories): it keeps a user's files out of the build and its
# diagnostics portably, where Landlock is refused.  The whole standard library is allowed because
# legitimate kernels include <vector>, <iostream> or <stdexcept> for their host code as a matter of
# course (suite v4's ok_v4_reverse_iostream_vector_includes was refused before).
_STD_HEADERS = frozenset("""
    algorithm any array atomic barrier bit bitset cassert ccomplex cctype cerrno cfenv cfloat charconv chrono
    cinttypes ciso646 climits clocale cmath codecvt compare complex concepts condition_variable coroutine csetjmp
    csignal cstdalign cstdarg cstdbool cstddef cstdint cstdio cstdlib cstring ctgmath ctime cuchar cwchar cwctype
    deque exception execution expected filesystem format forward_list fstream functional future initializer_list
    iomanip ios iosfwd iostream istream iterator latch limits list locale map memory memory_resource mutex new
    numbers numeric optional ostream print queue random ranges ratio regex scoped_allocator semaphore set
    shared_mutex source_location span sstream stack stdexcept stop_token streambuf string string_view strstream
    syncstream system_error thread tuple type_traits typeindex typeinfo unordered_map unordered_set utility
    valarray variant vector version
    assert.h complex.h ctype.h errno.h fenv.h float.h inttypes.h iso646.h limits.h locale.h math.h setjmp.h
    signal.h stdalign.h stdarg.h stdbool.h stddef.h stdint.h stdio.h stdlib.h string.h tgmath.h time.h uchar.h
    wchar.h wctype.h
""".split())
# the toolkit's headers named without looking at the disk (the same answer on every machine)
_TOOLKIT_HEADER = re.compile(
    r"^(cuda[\w./]*|cuda/[\w./]+|cub/[\w./]+|thrust/[\w./]+|cooperative_groups(/[\w./]+)?(\.h)?|"
    r"mma\.h|sm_\d+_\w+\.h|crt/[\w.]+|device_\w+\.h|host_\w+\.h|driver_\w+\.h|builtin_types\.h|"
    r"vector_\w+\.h|math_constants\.h|math_functions\.h(pp)?|(texture|surface)_\w+\.h|library_types\.h|"
    r"channel_descriptor\.h|curand[\w]*\.h|nvtx3?/[\w./]+|nvfunctional)$"
)
_HEADER_NAME = re.compile(r"^[A-Za-z_][\w+-]*(/[\w+-][\w.+-]*)*(\.[\w]+)?$")


@functools.lru_cache(maxsize=None)
def toolkit_include_dirs() -> tuple[Path, ...]:
    """The CUDA toolkit's include directories (with CCCL's), where nvcc looks for ``<...>``."""
    homes: list[Path] = []
    nvcc = nvcc_path()
    if nvcc:
        homes.append(Path(nvcc).resolve().parent.parent)
    homes += [Path(h) for h in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if h]
    found: list[Path] = []
    for home in homes:
        for inc in [home / "include", *sorted(home.glob("targets/*/include"))]:
            for d in (inc, inc / "cccl"):
                if (d / "cuda_runtime.h").is_file() or (d / "cub").is_dir():
                    found.append(d.resolve())
    return tuple(dict.fromkeys(found))


def allowed_header(name: str) -> bool:
    """Whether ``#include <name>`` (or ``"name"``) names a standard or CUDA toolkit header."""
    name = name.strip()
    if not _HEADER_NAME.match(name) or ".." in name.split("/"):
        return False
    if name in _STD_HEADERS or _TOOLKIT_HEADER.match(name):
        return True
    for root in toolkit_include_dirs():          # any other header the toolkit ships
        path = (root / name).resolve()
        if path.is_file() and path.is_relative_to(root):
            return True
    return False


_INCLUDE_RE = re.compile(r"^\s*#\s*(include|include_next|import|embed)\b\s*(.*)$", re.M)
_INCBIN_RE = re.compile(r"\.incbin|__has_include|#\s*pragma\s+(push_macro|include_alias)", re.I)


@dataclass(frozen=True)
class CompileResult:
    ok: bool
    key: str                      # cache key (hex)
    log: str                      # trimmed diagnostics ("" when clean)
    seconds: float                # wall time of nvcc (0 on a cache hit)
    arch: str
    binary: bytes = b""           # the shared object, when ok
    cached: bool = False
    timed_out: bool = False
    resources: tuple[tuple[str, int], ...] = ()   # ptxas -v: registers, spill_stores_bytes, shared_bytes, ...
    ptx_instructions: tuple[str, ...] = ()  # the distinct PTX instructions nvcc generated (task_rules.py)


@functools.lru_cache(maxsize=None)
def nvcc_path() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return None


@functools.lru_cache(maxsize=None)
def nvcc_version() -> str:
    nvcc = nvcc_path()
    if not nvcc:
        return "none"
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"release [\d.]+, V([\d.]+)", out)
    return match.group(1) if match else out.strip().splitlines()[-1]


def check_source(source: str) -> str | None:
    """Why a source is refused before nvcc sees it, or None."""
    if len(source.encode()) > MAX_SOURCE_BYTES:
        return f"source is {len(source.encode())} bytes; the limit is {MAX_SOURCE_BYTES}"
    if "\x00" in source:
        return "source contains a NUL byte"
    original, source = source, preprocessor_view(source)   # issue 4: line splices, comments, digraphs
    for match in _INCLUDE_RE.finditer(source):
        directive, target = match.group(1), match.group(2).strip()
        line = source.count("\n", 0, match.start()) + 1
        inner = re.match(r'^(?:<([^<>"]+)>|"([^<>"]+)")', target)
        if directive != "include" or not inner or not allowed_header(inner.group(1) or inner.group(2)):
            return (f"kernel.cu:{line}: '#{directive} {target[:60]}' is not allowed: only CUDA toolkit and C/C++ "
                    "standard headers, by name, may be included")
    bad = _INCBIN_RE.search(source)
    if bad:
        line = source.count("\n", 0, bad.start()) + 1
        return f"kernel.cu:{line}: '{bad.group(0)}' is not allowed"
    return constraint_violation(original)          # knobs.py: declared knob constraints


def preprocessor_view(source: str) -> str:
    """The source as the preprocessor sees its directives: backslash-newlines spliced, comments
    replaced by a space (string, char and raw-string literals respected), ``%:`` read as ``#``.
    Without this ``#inc\\<newline>lude``, ``#/**/include`` or ``%:include`` would pass the check."""
    text = source.replace("\\\r\n", "").replace("\\\n", "")
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            out.append(" ")
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            kept = text[i:n if j < 0 else j]
            out.append(" " + "\n" * kept.count("\n"))   # keep line numbers
            i = n if j < 0 else j + 2
        elif ch == "R" and text.startswith('"', i + 1) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i + m.end())
                stop = n if end < 0 else end + len(m.group(1)) + 2
                out.append(text[i:stop])
                i = stop
            else:
                out.append(ch)
                i += 1
        elif ch in "\"'":
            j = i + 1
            while j < n and text[j] != ch and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("%:", i):
            out.append("#")
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def trim_diagnostics(text: str, workdir: str | Path) -> str:
    """Compiler output fit for feedback: temp paths -> kernel.cu, errors first, bounded."""
    text = text.replace(str(workdir) + "/", "").replace(str(workdir), "")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    keep = [ln for ln in lines if "error" in ln.lower()] or lines
    rest = [ln for ln in lines if ln not in keep]
    out = (keep + rest)[:MAX_DIAGNOSTIC_LINES]
    result = "\n".join(out)
    if len(lines) > MAX_DIAGNOSTIC_LINES:
        result += f"\n... ({len(lines) - MAX_DIAGNOSTIC_LINES} more lines)"
    return result[:MAX_DIAGNOSTIC_CHARS]


#: Bumped when a compile result gains a field older cache entries lack (their keys then miss).
CACHE_FORMAT = 2     # 2: ptx_instructions


def cache_key(source: str, header: str, arch: str, extra_flags: tuple[str, ...] = ()) -> str:
    material = json.dumps([source, header, arch, BASE_FLAGS, extra_flags, nvcc_version(), CACHE_FORMAT])
    return hashlib.sha256(material.encode()).hexdigest()


def compile_source(source: str, header: str, arch: str = DEFAULT_ARCH, *,
                   cache_dir: Path | str | None = DEFAULT_CACHE_DIR, timeout_s: float = 120.0,
                   extra_flags: tuple[str, ...] = (), allow_vendor_libraries: bool = False) -> CompileResult:
    """Compile one candidate.  Never raises for a bad candidate: failures are CompileResults.
    A shared object that needs a library beyond the C/C++ and CUDA runtimes (linkage.py) is
    refused unless ``allow_vendor_libraries`` (checked on cache hits too; not cached)."""
    key = cache_key(source, header, arch, extra_flags)
    cache = Path(cache_dir) if cache_dir else None
    if cache:
        hit = _cache_read(cache, key)
        if hit:
            return linkage.checked(hit, allow_vendor_libraries)
    refusal = check_source(source)
    if refusal:
        return CompileResult(ok=False, key=key, log=refusal, seconds=0.0, arch=arch)
    nvcc = nvcc_path()
    if not nvcc:
        return CompileResult(ok=False, key=key, arch=arch, seconds=0.0,
                             log="nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    result = _explain_launch(_run_nvcc(nvcc, source, header, arch, key, timeout_s, extra_flags), header)
    if cache and not result.timed_out:
        _cache_write(cache, result)
    return linkage.checked(result, allow_vendor_libraries)


def _run_nvcc(nvcc: str, source: str, header: str, arch: str, key: str, timeout_s: float,
              extra_flags: tuple[str, ...]) -> CompileResult:
    with tempfile.TemporaryDirectory(prefix="evo-fsr-nvcc-") as work:
        Path(work, "kernel.cu").write_text(source)
        Path(work, "contract.h").write_text(header)
        # -keep: the intermediate files stay in the workdir, kernel.ptx among them (task_rules.py)
        cmd = [nvcc, *BASE_FLAGS, f"-arch={arch}", "-include", "contract.h", *extra_flags, "-keep",
               "-o", "kernel.so", "kernel.cu"]
        start = time.perf_counter()
        outcome = run_sandboxed(cmd, cwd=work, timeout_s=timeout_s, policy=SandboxPolicy.for_compiler())
        seconds = time.perf_counter() - start
        resources = parse_ptxas(outcome.output)
        diagnostics = trim_diagnostics(without_ptxas_info(outcome.output), work)
        if outcome.timed_out:
            return CompileResult(ok=False, key=key, arch=arch, seconds=seconds, timed_out=True,
                                 log=f"compile timed out after {timeout_s:.0f} s\n{diagnostics}".strip())
        so = Path(work, "kernel.so")
        if outcome.returncode != 0 or not so.is_file():
            return CompileResult(ok=False, key=key, arch=arch, seconds=seconds,
                                 log=diagnostics or f"nvcc exited with {outcome.returncode}")
        binary = so.read_bytes()
        missing = _missing_launch(so)
        if missing:
            return CompileResult(ok=False, key=key, arch=arch, seconds=seconds, log=missing)
        return CompileResult(ok=True, key=key, arch=arch, seconds=seconds, log=diagnostics, binary=binary,
                             resources=resources, ptx_instructions=ptx_instructions(Path(work)))


# one PTX statement (the text between ``;``, braces and line ends): an optional label, an optional
# guard predicate, then the instruction with its modifiers
_PTX_INSTRUCTION_RE = re.compile(r"^\s*(?:[\w$]+:\s*)?(?:@!?%?[\w$]+\s+)?([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*)(?:\s|$)")


def ptx_instructions(work: Path) -> tuple[str, ...]:
    """The distinct instructions (with their modifiers: ``cos.approx.f32``) of every PTX file
    nvcc kept in ``work``: inline ``asm`` included, since nvcc pastes it into the PTX."""
    found: set[str] = set()
    for ptx in sorted(work.glob("*.ptx")):
        try:
            text = ptx.read_text(errors="replace")
        except OSError:
            continue
        text = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
        for statement in re.split(r"[;{}\n]", text):
            match = _PTX_INSTRUCTION_RE.match(statement)
            if match:
                found.add(match.group(1))
    return tuple(sorted(found))


_LAUNCH_PROBLEM_RE = re.compile(r'function "launch"|exports no `extern "C" launch`|'
                                r'declaration of (C )?function .?launch|"launch".*(incompatible|conflict)')
_PROTOTYPE_RE = re.compile(r'^extern "C" int launch\(.*\)', re.M)


def _explain_launch(result: CompileResult, header: str) -> CompileResult:
    """A failure about ``launch`` (nvcc's overload message, no exported symbol) with the task's
    expected prototype appended, so the author (or an LLM) sees what to write."""
    prototype = _PROTOTYPE_RE.search(header)
    if result.ok or not prototype or not _LAUNCH_PROBLEM_RE.search(result.log):
        return result
    hint = f"the task expects exactly this entry point: {prototype.group(0)};"
    return dataclasses.replace(result, log=f"{result.log}\n{hint}")


def _missing_launch(so: Path) -> str | None:
    """A reason if the shared object does not export ``launch`` (checked with nm, no dlopen)."""
    nm = shutil.which("nm")
    if not nm:
        return None
    out = subprocess.run([nm, "-D", "--defined-only", str(so)], capture_output=True, text=True, timeout=60)
    names = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    if "launch" not in names:
        return 'the shared object exports no `extern "C" launch` symbol (is it declared extern "C"?)'
    return None


def _cache_read(cache: Path, key: str) -> CompileResult | None:
    meta = cache / f"{key}.json"
    if not meta.is_file():
        return None
    try:
        data = json.loads(meta.read_text())
        binary = (cache / f"{key}.so").read_bytes() if data["ok"] else b""
    except (OSError, ValueError, KeyError):
        return None
    return CompileResult(ok=data["ok"], key=key, log=data["log"], seconds=0.0, arch=data["arch"],
                         binary=binary, cached=True,
                         resources=tuple((str(k), int(v)) for k, v in data.get("resources", ())),
                         ptx_instructions=tuple(str(i) for i in data.get("ptx_instructions", ())))


def _cache_write(cache: Path, result: CompileResult) -> None:
    try:
        cache.mkdir(parents=True, exist_ok=True)
        if result.ok:
            tmp = cache / f"{result.key}.so.tmp{os.getpid()}"
            tmp.write_bytes(result.binary)
            tmp.replace(cache / f"{result.key}.so")
        tmp = cache / f"{result.key}.json.tmp{os.getpid()}"
        tmp.write_text(json.dumps({"ok": result.ok, "log": result.log, "arch": result.arch,
                                   "seconds": result.seconds, "resources": [list(r) for r in result.resources],
                                   "ptx_instructions": list(result.ptx_instructions)}))
        tmp.replace(cache / f"{result.key}.json")
    except OSError as exc:  # a read-only or full cache must not fail the compile
        log.warning("compile cache not written (%s): %s", cache, exc)


def detect_arch() -> str | None:
    """The first visible GPU's arch (``sm_90``) via nvidia-smi, or None without a GPU."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = out.stdout.strip().splitlines()[:1]
    if out.returncode != 0 or not first or not re.match(r"^\d+\.\d+$", first[0].strip()):
        return None
    return "sm_" + first[0].strip().replace(".", "")

