"""The v4 adversarial suite (cases_v4.py) on a GPU, with v3's machinery: one Evaluator per task,
every case (and each no-speedup case's honest equivalent, twice) through it; the same two tests as
v3 (the outcome, xfail where a ``hole`` is declared; and that the case exercised its mechanism).

Run with: pytest -m gpu tests/adversarial/test_adversarial_v4_gpu.py -v -s
"""
from __future__ import annotations

import pytest

from evo_fsr.types import EvalResult, Status

from . import cases_v4 as v4
from .test_adversarial_v2_gpu import check_outcome
from .test_adversarial_v3_gpu import LANDLOCK_ON, SuiteV3, _detail, _runs_here

pytestmark = pytest.mark.gpu

CASES = v4.build_cases()


@pytest.fixture(scope="module")
def suite_v4() -> SuiteV3:
    s = SuiteV3()
    s.run(CASES)
    ran = [c for c in CASES if c.name in s.results]
    honest = ", ".join(f"{c.name} x{s.honest[c.name].geomean_speedup or 0.0:.2f}" for c in ran if c.name in s.honest)
    print("\n".join(["", "adversarial suite v4 verdicts:"] + [s.line(c) for c in ran]
                    + ["honest equivalents: " + honest]))
    return s


def _case(name: str):
    case = next(c for c in CASES if c.name == name)
    if not _runs_here(case):
        pytest.skip("patches x86-64 machine code")
    return case


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_v4_case_outcome(suite_v4: SuiteV3, name: str, request: pytest.FixtureRequest) -> None:
    case = _case(name)
    if case.hole:
        request.applymarker(pytest.mark.xfail(reason=case.hole, strict=False))
    check_outcome(name, case.expected, suite_v4.results[name], lambda: suite_v4.honest[name])


@pytest.mark.parametrize("name", [c.name for c in CASES if c.evidence or c.unsound])
def test_v4_case_ran_as_designed(suite_v4: SuiteV3, name: str) -> None:
    case = _case(name)
    result: EvalResult = suite_v4.results[name]
    assert result.rejection not in case.unsound, (
        f"{name}: rejected as {result.rejection}, which means the case itself went wrong: {_detail(result)}")
    if result.status is Status.COMPILE_ERROR:
        return
    log = result.log("run")
    missing = [text for text in case.evidence if text not in log]
    stopped = [text for text in case.blocked if text in log]
    if missing and stopped and LANDLOCK_ON:
        return
    assert not missing, (f"{name}: its mechanism did not fire (no {missing} in the run log), so its verdict "
                         f"({result.status.value} {result.rejection}) says nothing: {_detail(result)}")
