"""The v2 adversarial suite (cases_v2.py) without a GPU: every case and every honest equivalent
compiles with compile.py against its task's launch prototype, the suite covers every mechanism
of issue 11 and every legitimate kind, and the host-side behaviour that needs no GPU is checked:
forged replies really reach a pipe (so the GPU verdicts test the protocol, not a dud), and a
dlopen of cuBLAS is stopped by the runner's sandbox unless the user opts in.

Run with: python -m pytest tests/adversarial/test_adversarial_v2_cpu.py -q
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import json
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest

from evo_fsr.runner import sandbox
from evo_fsr.runner.sandbox import SandboxPolicy, confine_policy, spawn_sandboxed
from evo_fsr.tasks import get_task
from evo_fsr.verdict import compile as nvcc
from evo_fsr.verdict import linkage

from . import cases_v2 as v2
from .test_vendor_libraries_cpu import HAS_LANDLOCK, _clear_caches, _gcc_shared

HERE = Path(__file__).resolve().parent
CASES = v2.build_cases()
needs_nvcc = pytest.mark.skipif(nvcc.nvcc_path() is None, reason="nvcc not found")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, nvcc.CompileResult]:
    if nvcc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    cache = tmp_path_factory.mktemp("v2-cache")
    jobs = [(c.name, c.task, c.source) for c in CASES]
    honest = {(c.task, v2.honest_source(c)): c.name for c in CASES if c.expected == v2.NO_SPEEDUP}
    jobs += [(f"honest:{name}", task, src) for (task, src), name in honest.items()]   # one per distinct source
    with cf.ThreadPoolExecutor(max(2, min(8, os.cpu_count() or 2))) as pool:
        results = pool.map(lambda j: nvcc.compile_source(j[2], get_task(j[1]).header(), "sm_90", cache_dir=cache,
                                                         timeout_s=300), jobs)
        return {name: r for (name, _, _), r in zip(jobs, results)}


@needs_nvcc
def test_every_case_and_honest_equivalent_compiles(compiled: dict[str, nvcc.CompileResult]) -> None:
    bad = {name: r.log[:600] for name, r in compiled.items() if not r.ok}
    assert not bad, bad


@needs_nvcc
def test_no_case_needs_a_vendor_library_at_link_time(compiled: dict[str, nvcc.CompileResult]) -> None:
    """The vendor cases load cuBLAS/cuDNN/nvrtc with dlopen, invisible to the link check: the
    runner's Landlock allow-list and the maps check are what stop them."""
    for name, result in compiled.items():
        if result.ok:
            assert linkage.check_needed(result.binary) is None, (name, linkage.dynamic_deps(result.binary))


def test_suite_covers_every_mechanism_and_every_legitimate_kind() -> None:
    cheats = collections.Counter(c.mechanism for c in CASES if c.expected != v2.OK)
    for mechanism in range(1, 10):
        assert cheats[mechanism] >= 3, (mechanism, cheats)
    assert sum(cheats.values()) >= 40
    legit = " ".join(c.name + " " + c.source for c in CASES if c.expected == v2.OK)
    for needle in ("atomicAdd", "cudaStreamWaitEvent", "cudaGraphLaunch", "cudaLaunchCooperativeKernel",
                   "cudaFuncAttributeMaxDynamicSharedMemorySize", "cub::BlockReduce", "cub::DeviceReduce",
                   "cub::DeviceRadixSort", "grid.sync()"):
        assert needle in legit, needle
    for case in CASES:
        assert case.expected in (v2.OK, v2.REJECTED, v2.NO_SPEEDUP), case.name
        assert case.task in get_task(case.task).name and case.note, case.name
        assert (case.expected == v2.NO_SPEEDUP) == bool(case.honest), case.name


def test_cub_is_an_allowed_include() -> None:
    assert nvcc.check_source("#include <cub/cub.cuh>\n#include <cooperative_groups.h>\n") is None


def test_public_seed_answers_match_the_evaluators_inputs() -> None:
    """The 'answers for the public seed' cheat embeds real answers (else it would test nothing)."""
    sums = dict(v2.public_seed_sums())
    assert sums, "no benchmark shape small enough to precompute"
    case = next(c for c in CASES if c.name == "answers_for_the_public_seed")
    for n, total in sums.items():
        assert f"N == {n}" in case.source and repr(total) in case.source
        assert abs(total - 1.0 * n) < 0.01 * n          # U(-1, 3): mean 1


# -- host-side behaviour without a GPU --------------------------------------------------------
def _run_launch(work: Path, so: bytes, args: list, policy: SandboxPolicy | None, extra_fds: tuple[int, ...] = ()
                ) -> dict:
    private = work / ".runner"
    private.mkdir(parents=True, exist_ok=True)
    for name in ("confine.py", "cudart.py"):
        shutil.copyfile(sandbox.CONFINE_SCRIPT.parent / name, private / name)
    shutil.copyfile(HERE / "launch_child.py", private / "child.py")
    (work / "candidate.so").write_bytes(so)
    policy_arg = "-"
    if policy is not None:
        (private / "policy.json").write_text(json.dumps(confine_policy(policy, str(work))))
        policy_arg = str(private / "policy.json")
    proc, output = spawn_sandboxed([sys.executable, "-I", "-S", str(private / "child.py"), policy_arg,
                                    str(work / "candidate.so"), json.dumps(args), *map(str, extra_fds)],
                                   str(work), policy or SandboxPolicy.for_candidate(), pass_fds=extra_fds)
    code = proc.wait(timeout=120)
    lines = [ln for ln in output.text().splitlines() if ln.startswith("{")]
    return {"code": code, **(json.loads(lines[-1]) if lines else {"raw": output.text()[-2000:]})}


RELU_ARGS = [["p", 0], ["p", 0], ["i", 0], ["p", 0]]


@needs_nvcc
@pytest.mark.parametrize("name", ["forged_reply_on_argv_fds", "forged_reply_on_every_pipe", "oversized_garbage_reply"])
def test_forged_replies_reach_the_pipe(tmp_path: Path, compiled: dict[str, nvcc.CompileResult], name: str) -> None:
    read_end, write_end = os.pipe()
    chunks: list[bytes] = []

    def drain() -> None:                       # as the evaluator would: keep reading the pipe
        while chunk := os.read(read_end, 1 << 20):
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        out = _run_launch(tmp_path / "work", compiled[name].binary, RELU_ARGS, SandboxPolicy.for_candidate(),
                          extra_fds=(write_end,))
    finally:
        os.close(write_end)
        reader.join(30)
        os.close(read_end)
    data = b"".join(chunks)
    assert out["code"] == 0 and "rc" in out, out
    if name == "oversized_garbage_reply":
        assert len(data) >= 1 << 16 and set(data) == {ord("{")}, len(data)
    else:
        assert b'"op": "run"' in data and data.endswith(b"\n"), data[:200]


FAKE_CUBLAS = r'''
#include <stdio.h>
int cublasCreate_v2(void** h) { *h = (void*)1; return 0; }
int cublasSetStream_v2(void* h, void* s) { (void)h; (void)s; return 0; }
int cublasSgemm_v2(void) { FILE* f = fopen("SGEMM_CALLED", "w"); if (f) { fputs("yes", f); fclose(f); } return 0; }
'''


@needs_nvcc
@pytest.mark.skipif(not HAS_LANDLOCK, reason="kernel without Landlock: the sandbox layer cannot be shown here")
@pytest.mark.parametrize("name", ["dlopen_cublas_sgemm", "dlopen_cublas_from_wheel_and_toolkit_paths"])
def test_cublas_dlopen_is_stopped_unless_opted_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  compiled: dict[str, nvcc.CompileResult], name: str) -> None:
    """A fake libcublas (records a call to sgemm) in a wheel-like dir on LD_LIBRARY_PATH: the
    confined candidate cannot load it; with allow_vendor_libraries it can, and calls sgemm."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found")
    fake_dir = tmp_path / "site-packages" / "nvidia" / "cublas" / "lib"
    for soname in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
        _gcc_shared(FAKE_CUBLAS, fake_dir / soname)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_dir))
    _clear_caches()
    try:
        args = [["p", 0], ["p", 0], ["p", 0], ["i", 1], ["i", 1], ["i", 1], ["p", 0]]
        denied = _run_launch(tmp_path / "denied", compiled[name].binary, args, SandboxPolicy.for_candidate())
        allowed = _run_launch(tmp_path / "allowed", compiled[name].binary, args,
                              SandboxPolicy.for_candidate(allow_vendor_libraries=True))
    finally:
        _clear_caches()
    assert denied["code"] == 0 and "rc" in denied, denied
    assert denied["status"]["landlock"].startswith("on"), denied
    assert not (tmp_path / "denied" / "SGEMM_CALLED").exists(), "the confined candidate reached cuBLAS"
    assert allowed["code"] == 0 and (tmp_path / "allowed" / "SGEMM_CALLED").exists(), allowed
