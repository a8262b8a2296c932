"""The v4 adversarial suite (cases_v4.py) on a GPU, with v3's machinery: one Evaluator per task,
every case (and each no-speedup case's honest equivalent, twice) through it; the same two tests as
v3 (the outcome, xfail where a ``hole`` is declared; and that the case exercised its mechanism).

Run with: pytest -m gpu tests/adversarial/test_adversarial_v4_gpu.py -v -s
"""
from __future__ import annotations

import pytest

from . import cases_v4 as v4
from .test_adversarial_v3_gpu import SuiteV3, case_named, check_case_outcome, check_ran_as_designed, run_suite

pytestmark = pytest.mark.gpu

CASES = v4.build_cases()


@pytest.fixture(scope="module")
def suite_v4() -> SuiteV3:
    return run_suite("v4", CASES)


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_v4_case_outcome(suite_v4: SuiteV3, name: str, request: pytest.FixtureRequest) -> None:
    check_case_outcome(suite_v4, case_named(CASES, name), request)


@pytest.mark.parametrize("name", [c.name for c in CASES if c.evidence or c.unsound])
def test_v4_case_ran_as_designed(suite_v4: SuiteV3, name: str) -> None:
    check_ran_as_designed(suite_v4, case_named(CASES, name))
