"""scripts/probe_context_switch.py: its setups are checked before any process or context starts."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import probe_context_switch  # noqa: E402


def test_the_setups_are_read_in_order() -> None:
    assert probe_context_switch.parse_setups("default, stack:256,alloc:40,streams:16") == [
        "default", "stack:256", "alloc:40", "streams:16"]


@pytest.mark.parametrize("text", ["stack", "stack:", "alloc:2G", "default:1", "spin:3", ",", "streams:-1"])
def test_a_bad_setup_is_refused_by_name(text: str) -> None:
    with pytest.raises(SystemExit) as refused:
        probe_context_switch.parse_setups(text)
    assert "--setups" in str(refused.value)
