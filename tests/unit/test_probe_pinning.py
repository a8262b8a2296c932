"""scripts/probe_pinning.py: its specs resolve to the task's seed or the suite's case source, a
wrong one is refused by name, and a host that cannot be pinned stops the probe before any GPU work."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evo_fsr.runner import cores
from evo_fsr.tasks import get_task

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))
import probe_pinning  # noqa: E402


def test_a_seed_spec_is_the_tasks_seed_and_a_case_spec_the_cases_source():
    task, label, source = probe_pinning.resolve("topk:radix_select")
    assert (task, label) == ("topk", "topk:radix_select") and source == get_task("topk").seeds()["radix_select"]
    task, _, source = probe_pinning.resolve("v4:ok_v4_prefix_sum_cub_blockscan")
    assert task == "prefix_sum" and "BlockScan" in source


@pytest.mark.parametrize("spec, says", [("relu", "expected TASK:SEED"), ("relu:nope", "has no seed nope"),
                                        ("v4:nope", "no case of that name"),
                                        ("nope:naive", "no task named 'nope'")])
def test_a_wrong_spec_is_refused_by_name(spec: str, says: str):
    with pytest.raises(SystemExit, match=says):
        probe_pinning.resolve(spec)


def test_a_host_that_cannot_be_pinned_stops_the_probe(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setattr(cores, "host_plan", lambda: None)
    monkeypatch.setattr(probe_pinning, "Evaluator", None)           # reached only if it went on
    monkeypatch.setattr(sys, "argv", ["probe_pinning.py", "relu:vectorized"])
    assert probe_pinning.main() == 1
    assert "cannot be pinned" in capsys.readouterr().out
