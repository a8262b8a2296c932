"""Adversarial suite v4: cheats written against the verdict as it stands after suite v3 (the
chained windows, fresh device draws, the gate), for classes v1-v3 do not cover, and legitimate
kernels in the styles a model or an engineer commonly writes, which every fix must keep OK.

The cases are ``CaseV3`` (cases_v3.py: expected, hole, evidence, unsound, blocked), in three files:

- ``cases_v4_timing.py``: claims or work that escape the timed calls (mechanism ``v4-timing``);
- ``cases_v4_correctness.py``: wrong or forbidden arithmetic judged correct (``v4-correctness``);
- ``cases_v4_legit.py``: legitimate kernels (``legit``; expected ``ok``).

The GPU test (test_adversarial_v4_gpu.py) runs them with v3's machinery; the CPU test compiles them.
"""
from __future__ import annotations

from . import cases_v4_correctness, cases_v4_legit, cases_v4_timing
from .cases_v3 import CaseV3


def build_cases() -> list[CaseV3]:
    cases = cases_v4_timing.build_cases() + cases_v4_correctness.build_cases() + cases_v4_legit.build_cases()
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return cases
