"""The credit rules on windows recorded on a GPU (evo_fsr/verdict/replay.py).

``recorded/rounds_h200_monte_carlo_2026-12-02.json.gz``: ``scripts/probe_rounds.py`` on an NVIDIA
H200 (forty-first session), monte_carlo 2^24 with suite v4's settings, twelve fresh evaluators, each
judging three forgers of the window bound and the honest persistent seed they are built on; every
round's windows and the shape's pool.  Under the rules of the recording (the pool's overhead, mixed
with at most half as many interleaved baseline windows) the forgers' median credits were x2.03,
x1.61 and x1.69 against the honest x1.43; a rule that lets them gain again fails here.
"""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from evo_fsr.verdict.replay import Replayed, load, replay

RECORDING = Path(__file__).parent / "recorded" / "rounds_h200_monte_carlo_2026-12-02.json.gz"
FORGERS = ("replies_before_its_calls_are_done", "forges_only_in_the_first_round",
           "keeps_the_host_awake_through_its_windows")


@pytest.fixture(scope="module")
def replayed() -> dict[str, list[Replayed]]:
    results = [replay(record) for record in load(RECORDING)]
    by_job: dict[str, list[Replayed]] = {}
    for r in results:
        by_job.setdefault(r.job, []).append(r)
    assert sorted(by_job) == sorted([*FORGERS, "honest"]) and all(len(v) == 12 for v in by_job.values())
    return by_job


@pytest.mark.parametrize("forger", FORGERS)
def test_a_forger_of_the_window_gains_nothing_on_the_median(replayed: dict[str, list[Replayed]], forger: str) -> None:
    """Its median credit over the twelve evaluations is below the honest seed's."""
    honest = statistics.median(r.speedup for r in replayed["honest"])
    assert statistics.median(r.speedup for r in replayed[forger]) < honest


def test_a_forger_is_charged_in_most_first_rounds(replayed: dict[str, list[Replayed]]) -> None:
    """Each forger's first round is charged in at least 9 of 12 (3, 6 and 6 under the recording's rules)."""
    assert all(sum(r.charged_first for r in replayed[f]) >= 9 for f in FORGERS)


def test_the_honest_seed_keeps_its_credit(replayed: dict[str, list[Replayed]]) -> None:
    """The honest seed: its first round charged in at most 2 of 12 and its claims set aside in at most
    2, its median credit that of its own claims (x1.42-1.45 in the evaluations not charged)."""
    honest = replayed["honest"]
    assert sum(r.charged_first for r in honest) <= 2 and sum(r.strict for r in honest) <= 2
    assert statistics.median(r.speedup for r in honest) == pytest.approx(1.43, abs=0.02)
