"""Vendor libraries (issue 11, mechanism 7) without a GPU: the runner's Landlock file allow-list,
the link check of a compiled candidate, and the trusted side's reading of /proc/<pid>/maps.

Run with: python -m pytest tests/adversarial/test_vendor_libraries_cpu.py -q
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evo_fsr.runner import libraries, sandbox
from evo_fsr.runner.sandbox import SandboxPolicy, confine_policy, spawn_sandboxed
from evo_fsr.tasks import get_task
from evo_fsr.verdict import compile as nvcc
from evo_fsr.verdict import linkage

HERE = Path(__file__).resolve().parent
SUPPORT = sandbox.kernel_support()
HAS_LANDLOCK = SUPPORT["landlock_abi"] > 0 and sandbox.confinement_enabled()
needs_landlock = pytest.mark.skipif(not HAS_LANDLOCK, reason=f"kernel without Landlock: {SUPPORT}")
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not found")
needs_nvcc = pytest.mark.skipif(nvcc.nvcc_path() is None, reason="nvcc not found")

DUMMY_C = "int cublasSgemm_v2(void) { return 42; }\n"


def _clear_caches() -> None:
    sandbox.read_allow_list.cache_clear()
    libraries.runner_read_rules.cache_clear()
    libraries._search_dirs.cache_clear()


def _gcc_shared(src: str, out: Path, *link: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    c = out.with_suffix(".c")
    c.write_text(src)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(c), *link], check=True, capture_output=True)
    return out


@pytest.fixture()
def vendor_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A fake toolkit lib dir and a fake site-packages/nvidia/cublas/lib, each with a libcublas,
    on LD_LIBRARY_PATH (as torch and cupy wheels arrange): the old policy granted them whole."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found")
    toolkit = tmp_path / "cuda-13.0" / "lib64"
    wheel = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "nvidia" / "cublas" / "lib"
    libs = {"toolkit": _gcc_shared(DUMMY_C, toolkit / "libcublas.so.13"),
            "wheel": _gcc_shared(DUMMY_C, wheel / "libcublas.so.13"),
            "renamed": _gcc_shared(DUMMY_C, toolkit / "data.bin")}
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{toolkit}:{wheel}")
    _clear_caches()
    yield libs
    _clear_caches()


def _confined(work: Path, policy: SandboxPolicy, action: str, arg: str = "") -> tuple[int, dict]:
    private = work / ".runner"
    private.mkdir(parents=True, exist_ok=True)
    for name in ("confine.py", "cudart.py"):
        shutil.copyfile(sandbox.CONFINE_SCRIPT.parent / name, private / name)
    shutil.copyfile(HERE / "confined_child.py", private / "child.py")
    (private / "policy.json").write_text(json.dumps(confine_policy(policy, str(work))))
    proc, output = spawn_sandboxed([sys.executable, "-I", "-S", str(private / "child.py"),
                                    str(private / "policy.json"), action, arg], str(work), policy)
    code = proc.wait(timeout=60)
    lines = [ln for ln in output.text().splitlines() if ln.startswith("{")]
    return code, (json.loads(lines[-1]) if lines else {"raw": output.text()})


# -- Landlock: the runner's file-level read allow-list ----------------------------------------
@needs_landlock
@pytest.mark.parametrize("which", ["toolkit", "wheel", "renamed"])
def test_runner_cannot_open_or_dlopen_a_vendor_library(tmp_path: Path, vendor_dirs: dict[str, Path],
                                                       which: str) -> None:
    work = tmp_path / "work"
    lib = vendor_dirs[which]
    for action, target in (("read", str(lib)), ("dlopen", str(lib)), ("dlopen", lib.name),
                           ("read", f"/proc/self/root{lib}")):
        if which == "renamed" and action == "dlopen" and "/" not in target:
            continue                       # not a library name the loader searches for
        code, out = _confined(work, SandboxPolicy.for_candidate(), action, target)
        assert code == 0 and out.get("ok") is False, (action, target, out)
        assert out["status"]["landlock"].startswith("on"), out


@needs_landlock
def test_a_symlink_in_the_workdir_does_not_reach_a_vendor_library(tmp_path: Path,
                                                                  vendor_dirs: dict[str, Path]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "libmine.so").symlink_to(vendor_dirs["toolkit"])
    code, out = _confined(work, SandboxPolicy.for_candidate(), "dlopen", str(work / "libmine.so"))
    assert out.get("ok") is False, out


@needs_landlock
def test_opt_in_restores_the_directory_rights(tmp_path: Path, vendor_dirs: dict[str, Path]) -> None:
    policy = SandboxPolicy.for_candidate(allow_vendor_libraries=True)
    for which in ("toolkit", "wheel"):
        code, out = _confined(tmp_path / "work", policy, "dlopen", str(vendor_dirs[which]))
        assert code == 0 and out.get("ok") is True, (which, out)


@needs_landlock
def test_runner_still_loads_what_it_needs(tmp_path: Path) -> None:
    """Standard library, libc/libm/libstdc++/libgcc_s and libcudart (when installed) load confined."""
    code, out = _confined(tmp_path / "work", SandboxPolicy.for_candidate(), "runner_needs")
    assert code == 0 and out.get("ok") is True, out
    loaded = " ".join(out["value"])
    for name in ("libc.so.6", "libm.so.6", "libstdc++", "libgcc_s"):
        assert name in loaded, out
    if libraries._cudart_files():
        assert "libcudart" in loaded, out


@needs_landlock
def test_runner_still_reads_its_workdir_and_a_candidate_library_there(tmp_path: Path) -> None:
    work = tmp_path / "work"
    own = _gcc_shared("int launch(void) { return 0; }\n", work / "candidate.so")
    code, out = _confined(work, SandboxPolicy.for_candidate(), "dlopen", str(own))
    assert code == 0 and out.get("ok") is True, out


def test_exact_rules_grant_no_vendor_library_and_no_package_dir(vendor_dirs: dict[str, Path]) -> None:
    rules = libraries.runner_read_rules()
    for path in rules.files + rules.trees:
        assert not libraries.is_vendor_library(path), path
        assert "site-packages" not in Path(path).parts and "dist-packages" not in Path(path).parts, path
    for lib in vendor_dirs.values():
        assert not rules.allows(str(lib))
    assert rules.allows(os.path.realpath(sys.executable))
    libc = libraries.resolve("libc.so.6")
    assert libc and all(rules.allows(p) for p in libc)
    policy = confine_policy(SandboxPolicy.for_candidate(), "/tmp/evo-fsr-work")
    if policy:
        assert not any(str(lib.parent) in policy["read"] for lib in vendor_dirs.values())
        old = confine_policy(SandboxPolicy.for_candidate(allow_vendor_libraries=True), "/tmp/evo-fsr-work")
        assert str(vendor_dirs["toolkit"].parent) in old["read"]


def test_compiler_policy_keeps_directory_rights() -> None:
    policy = confine_policy(SandboxPolicy.for_compiler(), "/tmp/evo-fsr-work")
    if not policy:
        pytest.skip("confinement off here")
    assert "/usr" in policy["read"] and policy["list"] == []


# -- link check ---------------------------------------------------------------------------------
def test_classification_by_name_and_place() -> None:
    for path in ("/usr/lib/x86_64-linux-gnu/libcublas.so.12", "/opt/x/libcudnn_ops.so.9",
                 "/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2", "/x/libnvrtc.so.13",
                 "/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so", "/x/libc10_cuda.so",
                 "/usr/local/cuda-13.0/lib64/libcufft.so.12", "/usr/local/cuda/targets/x86_64-linux/lib/libfoo.so",
                 "/venv/lib/python3.11/site-packages/cupy_backends/cuda/libs/cublas.cpython-311.so"):
        assert libraries.is_vendor_library(path), path
    for path in ("/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/local/cuda/lib64/libcudart.so.13",
                 "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65", "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1",
                 "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/lib/python3.11/lib-dynload/_ctypes.so"):
        assert not libraries.is_vendor_library(path), path
    for name in ("libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libcudart.so.13", "libcuda.so.1",
                 "ld-linux-x86-64.so.2", "libpthread.so.0", "libdl.so.2", "librt.so.1"):
        assert linkage.is_allowed_needed(name), name
    for name in ("libcublas.so.13", "libcudnn.so.9", "libnccl.so.2", "libnvrtc.so.13", "libcudart_static.so",
                 "/tmp/libc.so.6", "libcufft.so.12", "libtorch.so", "libfoo.so"):
        assert not linkage.is_allowed_needed(name), name


@needs_gcc
def test_dynamic_deps_match_readelf(tmp_path: Path) -> None:
    dep = _gcc_shared(DUMMY_C, tmp_path / "lib" / "libcublas.so")
    obj = _gcc_shared("int cublasSgemm_v2(void);\nint launch(void) { return cublasSgemm_v2(); }\n",
                      tmp_path / "kernel.so", f"-L{dep.parent}", "-lcublas", "-lm", "-Wl,--no-as-needed",
                      f"-Wl,-rpath,{dep.parent}")
    deps = linkage.dynamic_deps(obj.read_bytes())
    if shutil.which("readelf"):
        out = subprocess.run(["readelf", "-d", str(obj)], capture_output=True, text=True).stdout
        expected = [ln.split("[", 1)[1].rstrip("]") for ln in out.splitlines() if "(NEEDED)" in ln]
        assert list(deps.needed) == expected
    assert "libcublas.so" in deps.needed and str(dep.parent) in deps.search
    refusal = linkage.check_needed(obj.read_bytes())
    assert refusal and "libcublas.so" in refusal and "libc.so" not in refusal.split(":", 1)[1]
    assert linkage.check_needed(obj.read_bytes(), allow_vendor=True) is None
    clean = _gcc_shared("int launch(void) { return 0; }\n", tmp_path / "clean.so", "-lm")
    assert linkage.check_needed(clean.read_bytes()) is None


def test_malformed_objects_are_refused() -> None:
    for blob in (b"", b"not an elf at all" * 10, b"\x7fELF\x02\x01" + b"\xff" * 100):
        assert linkage.check_needed(blob) is not None


@needs_nvcc
def test_a_candidate_linked_against_cublas_is_a_compile_rejection(tmp_path: Path) -> None:
    """End to end through compile.py: a (task-supplied) link flag that pulls in a libcublas
    makes the compile fail with a clear message, unless opted in; the seed itself passes."""
    task = get_task("relu")
    fake = tmp_path / "lib"
    _gcc_shared(DUMMY_C, fake / "libcublas.so")
    src = ('extern "C" int cublasSgemm_v2(void);\n'
           "__global__ void k(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x;"
           " if (i < n) y[i] = x[i] > 0 ? x[i] : 0; }\n"
           'extern "C" int launch(const float* x, float* y, int n, cudaStream_t s) {'
           " if (n < 0) return cublasSgemm_v2(); k<<<(n + 255) / 256, 256, 0, s>>>(x, y, n); return 0; }\n")
    flags = ("-Xlinker", "--no-as-needed", f"-L{fake}", "-lcublas")
    # the compiler's Landlock must be allowed to read the fake library dir
    policy = SandboxPolicy.for_compiler()
    from dataclasses import replace
    orig = SandboxPolicy.for_compiler
    try:
        SandboxPolicy.for_compiler = classmethod(lambda cls: replace(policy, extra_read=(str(fake),)))  # type: ignore[method-assign]
        refused = nvcc.compile_source(src, task.header(), "sm_90", cache_dir=tmp_path / "cache", extra_flags=flags)
        cached = nvcc.compile_source(src, task.header(), "sm_90", cache_dir=tmp_path / "cache", extra_flags=flags)
        opted = nvcc.compile_source(src, task.header(), "sm_90", cache_dir=tmp_path / "cache", extra_flags=flags,
                                    allow_vendor_libraries=True)
    finally:
        SandboxPolicy.for_compiler = orig  # type: ignore[method-assign]
    assert not refused.ok and "libcublas.so" in refused.log and "allow_vendor_libraries" in refused.log, refused.log
    assert not cached.ok and cached.cached, "a cache hit must be link-checked too"
    assert opted.ok and "libcublas.so" in linkage.dynamic_deps(opted.binary).needed
    seed = nvcc.compile_source(task.baseline_source, task.header(), "sm_90", cache_dir=None)
    assert seed.ok and linkage.check_needed(seed.binary) is None, linkage.dynamic_deps(seed.binary)


# -- the trusted side's maps check ---------------------------------------------------------------
def test_mapped_files_of_this_process_list_libc_and_no_vendor_library() -> None:
    maps = sandbox.mapped_files(os.getpid())
    assert any(os.path.basename(p).startswith("libc.so") or "/libc-" in p for p in maps), maps
    assert all(p.startswith("/") for p in maps) and len(maps) == len(set(maps))


@needs_gcc
def test_a_dlopened_vendor_library_shows_in_the_maps(tmp_path: Path) -> None:
    lib = _gcc_shared(DUMMY_C, tmp_path / "cuda-13.0" / "lib64" / "libcublas.so.13")
    renamed = _gcc_shared(DUMMY_C, tmp_path / "opt" / "innocent.dat")
    own = _gcc_shared("int launch(void) { return 0; }\n", tmp_path / "work" / "candidate.so")
    code = ("import ctypes, sys, time\nfor p in sys.argv[1:]: ctypes.CDLL(p)\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", code, str(lib), str(renamed), str(own)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        maps = sandbox.mapped_files(proc.pid)
        found = sandbox.vendor_libraries(maps, own=[str(own)])
    finally:
        proc.kill()
        proc.wait()
    assert str(lib) in found and str(renamed) in found, (found, maps)
    assert str(own) not in found and not any("libc.so" in p or "python" in p for p in found), found


@needs_gcc
def test_the_judge_of_successive_reads_keeps_only_what_the_candidate_cannot_change(tmp_path: Path) -> None:
    """The per-call check keeps its answer for system files only: a data file in a writable
    folder that turns into an ELF library between two reads (same path, same inode) is found on
    the second read, as vendor_libraries finds it."""
    own = _gcc_shared("int launch(void) { return 0; }\n", tmp_path / "work" / "candidate.so")
    data = tmp_path / "work" / "table.dat"
    data.write_bytes(b"just numbers\n" * 100)
    system = [m for m in sandbox.mapped_files(os.getpid()) if m.startswith(("/usr/", "/lib/", "/lib64/"))]
    assert system
    maps = system + [str(own), str(data)]
    judge = libraries.MapsJudge(own=[str(own)])
    assert judge.foreign(maps) == sandbox.vendor_libraries(maps, own=[str(own)]) == []
    assert str(data) not in judge.settled and str(own) in judge.settled
    assert set(system) <= judge.settled
    elf = _gcc_shared(DUMMY_C, tmp_path / "elf.so").read_bytes()
    with open(data, "r+b") as f:                       # in place: the inode does not change
        f.write(elf)
    assert judge.foreign(maps) == sandbox.vendor_libraries(maps, own=[str(own)]) == [str(data)]
    gone = str(tmp_path / "work" / "libcublas.so.13") + " (deleted)"
    assert judge.foreign(maps + [gone]) == [str(data), gone]


def test_unreadable_or_missing_maps_are_reported() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(sandbox.MapsUnreadable):
        sandbox.mapped_files(proc.pid)                  # gone (reaped)


def test_non_dumpable_process_maps_are_reported_unreadable() -> None:
    """A candidate that calls prctl(PR_SET_DUMPABLE, 0) hides its maps from a reader without
    CAP_SYS_PTRACE: that must surface as MapsUnreadable (the lead: a sandbox violation).  The
    reader drops every capability first, so the test means the same as root and as a user."""
    hide = ("import ctypes, sys, time\nsys.path[:0] = [sys.argv[1]]\nimport confine\n"
            "confine.drop_capabilities()\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")   # as the runner: no capabilities
    root = str(Path(__file__).resolve().parents[2])
    reader = ("import sys\nsys.path[:0] = [sys.argv[2], sys.argv[3]]\nimport confine\n"
              "assert confine.drop_capabilities() == 'on'\n"
              "from evo_fsr.runner import libraries\n"
              "try:\n    libraries.mapped_files(int(sys.argv[1])); print('READABLE')\n"
              "except libraries.MapsUnreadable as exc:\n    print('UNREADABLE', exc)\n")
    confine_dir = str(sandbox.CONFINE_SCRIPT.parent)
    hider = subprocess.Popen([sys.executable, "-I", "-S", "-c", hide, confine_dir], stdout=subprocess.PIPE, text=True)
    try:
        assert hider.stdout is not None and hider.stdout.readline().strip() == "ready"
        out = subprocess.run([sys.executable, "-I", "-c", reader, str(hider.pid), root, confine_dir],
                             capture_output=True, text=True, timeout=60)
        dumpable = subprocess.Popen([sys.executable, "-I", "-S", "-c", hide.replace("prctl(4, 0", "prctl(4, 1"),
                                     confine_dir],
                                    stdout=subprocess.PIPE, text=True)
        try:
            assert dumpable.stdout is not None and dumpable.stdout.readline().strip() == "ready"
            control = subprocess.run([sys.executable, "-I", "-c", reader, str(dumpable.pid), root, confine_dir],
                                     capture_output=True, text=True, timeout=60)
        finally:
            dumpable.kill()
            dumpable.wait()
    finally:
        hider.kill()
        hider.wait()
    assert out.stdout.startswith("UNREADABLE"), (out.stdout, out.stderr[-500:])
    assert control.stdout.startswith("READABLE"), (control.stdout, control.stderr[-500:])


@pytest.mark.skipif(shutil.which("ldconfig") is None or not os.path.exists("/etc/ld.so.cache"),
                    reason="no ldconfig or ld.so.cache here")
def test_ld_cache_parser_agrees_with_ldconfig() -> None:
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=60).stdout
    cache = libraries._read_ld_cache()
    pairs = [ln.strip().split(" => ") for ln in out.splitlines()[1:] if " => " in ln]
    assert pairs and cache
    for left, path in pairs[:200]:
        assert path in cache.get(left.split(" (", 1)[0], []), (left, path)


@needs_landlock
def test_the_real_runner_starts_under_the_file_allow_list(tmp_path: Path) -> None:
    """runner.py itself, confined with the file-level reads, gets as far as without confinement:
    its imports, libcudart and CUDA's start-up (here, without a GPU, the same CUDA error)."""
    from evo_fsr.runner.harness import RunnerDied, RunnerProcess
    if not libraries._cudart_files():
        pytest.skip("no libcudart on this machine")
    messages = {}
    for label, policy in (("confined", SandboxPolicy.for_candidate()),
                          ("unconfined", SandboxPolicy.unconfined(SandboxPolicy.for_candidate()))):
        work = tmp_path / label
        work.mkdir()
        (work / "job.json").write_text('{"args": [], "libs": {}}')
        try:
            with RunnerProcess(work, policy, init_timeout_s=60):
                messages[label] = "started"
        except RunnerDied as exc:
            messages[label] = str(exc)
    for bad in ("libcudart not found", "Permission denied", "No module named", "ImportError"):
        assert bad not in messages["confined"], messages
    assert messages["confined"] == messages["unconfined"], messages
