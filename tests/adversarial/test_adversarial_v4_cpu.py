"""The v4 adversarial suite (cases_v4.py) without a GPU: every case and every honest equivalent
compiles with compile.py against its task's prototype (sm_90) and needs no vendor library; the
declarations hold together (unique names, known expectations, evidence printed by the source).

Run with: python -m pytest -q tests/adversarial/test_adversarial_v4_cpu.py
"""
from __future__ import annotations

import concurrent.futures as cf
import os

import pytest

from evo_fsr.tasks import get_task
from evo_fsr.verdict import compile as nvcc

from . import cases_v4 as v4
from .cases_v3 import NO_SPEEDUP, OK, REJECTED, honest_source

CASES = v4.build_cases()
needs_nvcc = pytest.mark.skipif(nvcc.nvcc_path() is None, reason="nvcc not found")


def test_declarations_hold_together() -> None:
    assert len({c.name for c in CASES}) == len(CASES)
    assert {c.expected for c in CASES} <= {OK, REJECTED, NO_SPEEDUP}
    assert any(c.expected == OK for c in CASES) and any(c.expected != OK for c in CASES)
    for case in CASES:
        get_task(case.task)                                   # a task that exists
        assert case.note, case.name
        for text in case.evidence:                            # what the run log must hold is printed by the source
            assert text.split("%")[0][:12] in case.source, (case.name, text)


@needs_nvcc
def test_every_case_and_honest_equivalent_compiles() -> None:
    jobs = {(c.task, c.source) for c in CASES} | {(c.task, honest_source(c)) for c in CASES if c.expected == NO_SPEEDUP}
    with cf.ThreadPoolExecutor(max(2, min(8, os.cpu_count() or 2))) as pool:
        futures = {job: pool.submit(nvcc.compile_source, job[1], get_task(job[0]).header(), "sm_90",
                                    cache_dir=None, timeout_s=300) for job in jobs}
        failed = {job[0]: f.result().log[:400] for job, f in futures.items() if not f.result().ok}
    assert not failed, failed
