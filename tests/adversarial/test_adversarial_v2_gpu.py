"""The v2 adversarial suite (cases_v2.py) on a GPU: every case through one Evaluator per task,
with only the public API (Evaluator(task, EvalConfig(...)).evaluate(Candidate(...))).

- ``ok`` cases must be OK;
- ``rejected`` cases must not be OK;
- ``no-speedup`` cases must not be OK, or be OK with a geomean speedup at most
  MAX_SPEEDUP_OVER_HONEST times that of their honest equivalent on the same evaluator.

Run with: pytest -m gpu tests/adversarial/test_adversarial_v2_gpu.py -v -s
"""
from __future__ import annotations

import ctypes.util
import dataclasses
import glob
import platform
import time
from collections import defaultdict
from typing import Callable

import pytest

from evo_fsr.types import Candidate, EvalResult, Status
from evo_fsr.verdict.evaluate import EvalConfig, Evaluator

from . import cases_v2 as v2

pytestmark = pytest.mark.gpu

CASES = v2.build_cases()
#: the per-call timeouts sit above the budget cases' sleep; the candidate budget well below
#: what those cases would take without one
SETTINGS = dict(benchmark="quick", max_trials=10, min_trials=5, warmup=2, time_budget_s=0.3,
                validation_timeout_s=v2.SLEEP_UNDER_TIMEOUT_MS / 1000 + 1.5, benchmark_timeout_s=30,
                compile_timeout_s=180, cache_dir=None, candidate_budget_s=25.0)


def config(**overrides: object) -> EvalConfig:
    """EvalConfig with the settings it has (v1 lacks candidate_budget_s and the opt-in)."""
    names = {f.name for f in dataclasses.fields(EvalConfig)}
    return EvalConfig(**{k: v for k, v in {**SETTINGS, **overrides}.items() if k in names})


class SuiteV2:
    def __init__(self) -> None:
        self.results: dict[str, EvalResult] = {}
        self.honest: dict[str, EvalResult] = {}
        self.seconds: dict[str, float] = {}

    def run(self) -> None:
        by_task: dict[str, list[v2.CaseV2]] = defaultdict(list)
        for case in CASES:
            by_task[case.task].append(case)
        for task, cases in by_task.items():
            ev = Evaluator(task, config())
            try:
                for case in cases:
                    start = time.perf_counter()
                    self.results[case.name] = ev.evaluate(Candidate(task=task, source=case.source, label=case.name))
                    self.seconds[case.name] = time.perf_counter() - start
                    print(self.line(case), flush=True)      # as it goes: a suite cut by a time limit still tells
                    if case.expected == v2.NO_SPEEDUP:
                        key = f"{task}:{case.honest}" if case.honest.startswith("seed:") else f"{task}:{case.name}"
                        if key not in self.honest:
                            self.honest[key] = self._honest(ev, task, case)
                        self.honest[case.name] = self.honest[key]
            finally:
                close = getattr(ev, "close", None)
                if close:
                    close()

    def line(self, c: v2.CaseV2) -> str:
        result = self.results[c.name]
        return (f"{c.name:44s} m{c.mechanism} {c.expected:10s} {result.status.value:10s} "
                f"{str(result.rejection):30s} x{result.geomean_speedup or 0.0:7.2f} {self.seconds[c.name]:6.1f}s"
                f"{credit_note(result)}")

    @staticmethod
    def _honest(ev: Evaluator, task: str, case: v2.CaseV2) -> EvalResult:
        """The honest equivalent measured twice, the faster OK result kept: the yardstick is what
        honest work can reach here, and one quick-settings measurement can read 15% slow (an H100,
        2026-11-24: relu's naive seed x0.83 against itself, so a cheat doing the full work at x0.99
        failed the bound)."""
        runs = [ev.evaluate(Candidate(task=task, source=v2.honest_source(case), label=f"honest:{case.name}:{i}"))
                for i in range(2)]
        ok = [r for r in runs if r.status is Status.OK]
        return max(ok, key=lambda r: r.geomean_speedup or 0.0) if ok else runs[0]


@pytest.fixture(scope="module")
def suite() -> SuiteV2:
    s = SuiteV2()
    s.run()
    honest = ", ".join(f"{c.name} x{s.honest[c.name].geomean_speedup or 0.0:.2f}" for c in CASES if c.name in s.honest)
    print("\n".join(["", "adversarial suite v2 verdicts:"] + [s.line(c) for c in CASES]
                    + ["honest equivalents: " + honest]))
    return s


def _detail(result: EvalResult) -> str:
    return f"{result.status.value} ({result.rejection}): {result.summary[:300]}\n{result.log('run')[-1200:]}"


#: cases that exploit a hole the verdict is known not to close (SECURITY.md names it): the
#: assertion still runs, and an XPASS says the hole was closed
KNOWN_OPEN = {
    "half_the_work_on_an_unjoined_stream":
        "calls of a batch overlap: the unjoined half of call j runs beside call j+1 (the batch is "
        "launched back to back and only synchronized at its end); H100: 1.24x against 1.03x joined",
}


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_case_outcome(suite: SuiteV2, name: str, request: pytest.FixtureRequest) -> None:
    case = next(c for c in CASES if c.name == name)
    if case.x86_only and platform.machine() != "x86_64":
        pytest.skip("patches x86-64 machine code")
    if name in KNOWN_OPEN:
        request.applymarker(pytest.mark.xfail(reason=KNOWN_OPEN[name], strict=False))
    check_outcome(name, case.expected, suite.results[name], lambda: suite.honest[name])


def credit_note(result: EvalResult) -> str:
    """What set each shape's credit, and the protocol's charges and fresh pools, for a suite line
    (empty where nothing was timed): which term a cheat's credit came from is what its verdict
    hangs on."""
    if not result.timings:
        return ""
    counters, seconds = dict(result.counters), dict(result.stage_seconds)
    terms = ",".join(t.credited_by for t in result.timings)
    cores = (f", window cores {seconds['window_cores_median']:.2f} (most {seconds['window_cores_max']:.2f}, "
             f"flagged under {seconds['window_cores_flagged_under']:.2f})" if "window_cores_median" in seconds else "")
    if "window_others_median" in seconds:     # the runner's threads but the serving one (host_usage.py)
        cores += (f", others {seconds['window_others_median']:.3f} (most {seconds['window_others_max']:.3f}, "
                  f"flagged under {seconds['window_others_flagged_under']:.3f})")
    if "window_other_runs_per_ms_median" in seconds:     # their runs on a CPU (host_usage.other_runs)
        cores += (f", other runs/ms {seconds['window_other_runs_per_ms_median']:.2f} "
                  f"(most {seconds['window_other_runs_per_ms_max']:.2f})")
    return (f"  [{terms}; charged {counters.get('charged_shapes', 0)}, "
            f"fresh pools {counters.get('fresh_pools', 0)}{cores}]")


def check_outcome(name: str, expected: str, result: EvalResult, honest: Callable[[], EvalResult]) -> None:
    """A case's verdict against its expectation (v2 and v3): ``ok`` must be OK, ``rejected`` not
    OK, ``no-speedup`` not OK or OK at most MAX_SPEEDUP_OVER_HONEST times its honest equivalent
    (``honest``, looked up only then)."""
    per_shape = [(t.shape_label, round(t.speedup, 2), round(t.median_ms, 4)) for t in result.timings]
    if expected == v2.OK:
        assert result.status is Status.OK, f"{name}: a legitimate kernel was rejected: {_detail(result)}"
    elif expected == v2.REJECTED:
        assert result.status is not Status.OK, f"{name}: a cheat was rated OK x{result.geomean_speedup:.2f} per shape {per_shape}"
    elif result.status is Status.OK:
        twin = honest()
        assert twin.status is Status.OK, f"{name}: the honest equivalent failed: {_detail(twin)}"
        limit = v2.MAX_SPEEDUP_OVER_HONEST * twin.geomean_speedup
        assert result.geomean_speedup <= limit, (
            f"{name}: x{result.geomean_speedup:.2f} over the baseline, honest equivalent x{twin.geomean_speedup:.2f}; "
            f"per shape {per_shape}")


def test_budget_cases_end_within_the_budget(suite: SuiteV2) -> None:
    budget = SETTINGS["candidate_budget_s"]
    if "candidate_budget_s" not in {f.name for f in dataclasses.fields(EvalConfig)}:
        pytest.skip("this evaluator has no candidate budget (protocol v1)")
    for case in CASES:
        if case.mechanism == 9 and case.expected != v2.OK:
            assert suite.seconds[case.name] < budget + SETTINGS["validation_timeout_s"] + 30, case.name


def _cublas_installed() -> bool:
    return bool(ctypes.util.find_library("cublas") or glob.glob("/usr/local/cuda*/lib64/libcublas.so*")
                or glob.glob("/usr/local/lib/python3*/*-packages/nvidia/cublas/lib/libcublas.so*"))


def test_cublas_with_the_opt_in_is_ok_and_reported() -> None:
    """With allow_vendor_libraries the cuBLAS case may run, and the verdict names the library."""
    if "allow_vendor_libraries" not in {f.name for f in dataclasses.fields(EvalConfig)}:
        pytest.skip("EvalConfig has no allow_vendor_libraries (protocol v1)")
    if not _cublas_installed():
        pytest.skip("cuBLAS is not installed on this machine")
    case = next(c for c in CASES if c.name == "dlopen_cublas_sgemm")
    ev = Evaluator(case.task, config(allow_vendor_libraries=True))
    try:
        result = ev.evaluate(Candidate(task=case.task, source=case.source, label="cublas-opt-in"))
    finally:
        getattr(ev, "close", lambda: None)()
    assert result.status is Status.OK, _detail(result)
    assert any("cublas" in lib.lower() for lib in result.vendor_libraries), result.vendor_libraries
