"""The v3 adversarial suite (cases_v3.py) on a GPU, with v2's machinery (SuiteV2, config) and only
the public API: one Evaluator per task, every case and each honest equivalent (twice, the faster OK
result kept) through it.

- ``test_v3_case_outcome``: ``ok`` cases must be OK, ``rejected`` ones not OK, ``no-speedup`` ones
  not OK or OK with at most MAX_SPEEDUP_OVER_HONEST times their honest equivalent's speedup.  A case
  with a ``hole`` is marked xfail (strict=False): the assertion runs, and an XPASS says the hole
  was closed.
- ``test_v3_case_ran_as_designed`` (never xfail): the case exercised its mechanism (its ``evidence``
  in the runner's log, or, under Landlock, its ``blocked`` line: confinement stopped it first) and was
  not rejected for a reason that means the case itself is broken
  (``unsound``).  Read an outcome only next to this test's result.

Differences from v2's settings: no library timing (context only, and torch's start-up), and every
source compiled up front in parallel, so the suite stays within a few minutes on one GPU.

Run with: pytest -m gpu tests/adversarial/test_adversarial_v3_gpu.py -v -s
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import platform
import time
from collections import defaultdict

import pytest

from evo_fsr.tasks import get_task
from evo_fsr.runner import sandbox
from evo_fsr.types import Candidate, Status
from evo_fsr.verdict import compile as nvcc
from evo_fsr.verdict.evaluate import Evaluator

from . import cases_v3 as v3
from .test_adversarial_v2_gpu import SuiteV2, _detail, check_outcome, config, credit_note

pytestmark = pytest.mark.gpu

CASES = v3.build_cases()
#: a case's ``blocked`` line stands in for its evidence only where Landlock confines the runners
LANDLOCK_ON = sandbox.kernel_support()["landlock_abi"] > 0 and sandbox.confinement_enabled()
OVERRIDES = dict(library=False)


def _runs_here(case: v3.CaseV3) -> bool:
    return not case.x86_only or platform.machine() == "x86_64"


def _honest_key(case: v3.CaseV3) -> str:
    return f"{case.task}:{case.honest}" if case.honest.startswith("seed:") else f"{case.task}:{hash(case.honest)}"


class SuiteV3(SuiteV2):
    """v2's suite (results, honest, seconds, line) over the v3 cases; every source is compiled in a
    thread pool first, so that no compile competes for the host with a timed call."""

    def run(self, all_cases: list[v3.CaseV3] | None = None) -> None:  # type: ignore[override]
        cases = [c for c in (CASES if all_cases is None else all_cases) if _runs_here(c)]
        by_task: dict[str, list[v3.CaseV3]] = defaultdict(list)
        for case in cases:
            by_task[case.task].append(case)
        first_task = next(iter(by_task))
        evaluators: dict[str, Evaluator] = {}
        arch = nvcc.detect_arch()
        if arch is None:                            # no nvidia-smi: the evaluator's probe says
            evaluators[first_task] = Evaluator(first_task, config(**OVERRIDES))
            arch = evaluators[first_task].arch
        jobs = {(c.task, c.source) for c in cases}
        jobs |= {(c.task, v3.honest_source(c)) for c in cases if c.expected == v3.NO_SPEEDUP}
        with cf.ThreadPoolExecutor(max(2, min(16, os.cpu_count() or 2))) as pool:
            futures = {job: pool.submit(nvcc.compile_source, job[1], get_task(job[0]).header(), arch,
                                        cache_dir=None, timeout_s=300) for job in jobs}
            compiled = {job: f.result() for job, f in futures.items()}   # all built before anything is timed
        for task, task_cases in by_task.items():
            ev = evaluators.pop(task, None) or Evaluator(task, config(**OVERRIDES))
            try:
                for case in task_cases:
                    self._one(ev, case, compiled)
            finally:
                ev.close()

    def _one(self, ev: Evaluator, case: v3.CaseV3, compiled: dict[tuple[str, str], nvcc.CompileResult]) -> None:
        task = case.task
        start = time.perf_counter()
        self.results[case.name] = ev.evaluate(Candidate(task=task, source=case.source, label=case.name),
                                              compiled[(task, case.source)])
        self.seconds[case.name] = time.perf_counter() - start
        print(self.line(case), flush=True)      # as it goes: a suite cut by a time limit still tells
        if case.expected != v3.NO_SPEEDUP:
            return
        key = _honest_key(case)
        if key not in self.honest:              # twice, the faster OK result kept (as v2's _honest)
            source = v3.honest_source(case)
            runs = [ev.evaluate(Candidate(task=task, source=source, label=f"honest:{case.name}:{i}"),
                                compiled[(task, source)]) for i in range(2)]
            ok = [r for r in runs if r.status is Status.OK]
            self.honest[key] = max(ok, key=lambda r: r.geomean_speedup or 0.0) if ok else runs[0]
            print(f"{'  honest ' + key[:60]:46s} {self.honest[key].status.value:10s} "
                  f"x{self.honest[key].geomean_speedup or 0.0:7.2f}{credit_note(self.honest[key])}", flush=True)
        self.honest[case.name] = self.honest[key]


def run_suite(label: str, cases: list[v3.CaseV3]) -> SuiteV3:
    """Every case of ``cases`` through SuiteV3, the verdict table printed (suites v3 and v4)."""
    s = SuiteV3()
    s.run(cases)
    ran = [c for c in cases if c.name in s.results]
    honest = ", ".join(f"{c.name} x{s.honest[c.name].geomean_speedup or 0.0:.2f}" for c in ran if c.name in s.honest)
    print("\n".join(["", f"adversarial suite {label} verdicts:"] + [s.line(c) for c in ran]
                    + ["honest equivalents: " + honest]))
    return s


def case_named(cases: list[v3.CaseV3], name: str) -> v3.CaseV3:
    case = next(c for c in cases if c.name == name)
    if not _runs_here(case):
        pytest.skip("patches x86-64 machine code")
    return case


def check_case_outcome(suite: SuiteV3, case: v3.CaseV3, request: pytest.FixtureRequest) -> None:
    """``ok`` must be OK, ``rejected`` not, ``no-speedup`` not faster than its honest twin; xfail where
    the case declares a hole."""
    if case.hole:
        request.applymarker(pytest.mark.xfail(reason=case.hole, strict=False))
    check_outcome(case.name, case.expected, suite.results[case.name], lambda: suite.honest[case.name])


def check_ran_as_designed(suite: SuiteV3, case: v3.CaseV3) -> None:
    """The case exercised its mechanism (its evidence in the run log, or Landlock's ``blocked`` line)
    and was not rejected for a reason that means the case itself went wrong."""
    name, result = case.name, suite.results[case.name]
    assert result.rejection not in case.unsound, (
        f"{name}: rejected as {result.rejection}, which means the case itself went wrong, not that the verdict "
        f"caught it: {_detail(result)}")
    if result.status is Status.COMPILE_ERROR:        # never ran (a compile-stage fix of its hole)
        return
    log = result.log("run")
    missing = [text for text in case.evidence if text not in log]
    stopped = [text for text in case.blocked if text in log]
    if missing and stopped and LANDLOCK_ON:
        return                                        # confinement closed it before the verdict was needed
    assert not missing, (f"{name}: its mechanism did not fire (no {missing} in the run log), so its verdict "
                         f"({result.status.value} {result.rejection}) says nothing: {_detail(result)}")


@pytest.fixture(scope="module")
def suite_v3() -> SuiteV3:
    return run_suite("v3", CASES)


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_v3_case_outcome(suite_v3: SuiteV3, name: str, request: pytest.FixtureRequest) -> None:
    check_case_outcome(suite_v3, case_named(CASES, name), request)


@pytest.mark.parametrize("name", [c.name for c in CASES if c.evidence or c.unsound])
def test_v3_case_ran_as_designed(suite_v3: SuiteV3, name: str) -> None:
    check_ran_as_designed(suite_v3, case_named(CASES, name))
