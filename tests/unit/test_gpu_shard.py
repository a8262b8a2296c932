"""tests/gpu/shard.py: the shares of a GPU test module are disjoint and together hold every item."""
from __future__ import annotations

import pytest

from tests.gpu.shard import shard


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shares_partition_the_items(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    items = [f"case{i}" for i in range(23)]
    seen: list[str] = []
    sizes = []
    for index in range(1, count + 1):
        monkeypatch.setenv("SOME_SHARD", f"{index}/{count}")
        part = shard(items, "SOME_SHARD")
        sizes.append(len(part))
        seen += part
    assert sorted(seen) == sorted(items)                 # every item once
    assert max(sizes) - min(sizes) <= 1                  # balanced


def test_unset_means_every_item(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOME_SHARD", raising=False)
    assert shard([3, 1, 2], "SOME_SHARD") == [3, 1, 2]


@pytest.mark.parametrize("spec", ["2", "0/2", "3/2", "a/b"])
def test_bad_spec_names_the_variable(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    monkeypatch.setenv("SOME_SHARD", spec)
    with pytest.raises(ValueError, match="SOME_SHARD"):
        shard([1, 2, 3], "SOME_SHARD")
