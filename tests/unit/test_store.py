from __future__ import annotations

import random

import pytest

from evo_fsr.search.store import RunStore, StoreError, rng_from_json, rng_state_to_json
from evo_fsr.types import source_id


def test_append_only_records_survive_a_torn_last_line(tmp_path) -> None:
    store = RunStore.create(tmp_path / "run", {"task": "conv2d"})
    store.append({"kind": "evaluated", "n": 1})
    store.append({"kind": "rejected", "n": 2})
    with open(store.candidates_path, "a") as handle:
        handle.write('{"kind": "evalu')                 # a driver killed mid-write
    assert [r["n"] for r in store.records()] == [1, 2]


def test_create_refuses_an_existing_run_and_open_needs_one(tmp_path) -> None:
    RunStore.create(tmp_path / "run", {"task": "conv2d"})
    with pytest.raises(StoreError, match="--resume"):
        RunStore.create(tmp_path / "run", {"task": "conv2d"})
    with pytest.raises(StoreError, match="not a run directory"):
        RunStore.open(tmp_path / "elsewhere")
    assert RunStore.open(tmp_path / "run").read_config() == {"task": "conv2d"}


def test_snapshots_latest_wins_and_unreadable_ones_are_skipped(tmp_path) -> None:
    store = RunStore.create(tmp_path / "run", {})
    store.save_snapshot(0, {"x": 0})
    store.save_snapshot(1, {"x": 1})
    assert store.latest_snapshot() == {"generation": 1, "x": 1}
    (store.snapshots_dir / "gen-0002.json").write_text("{broken")
    assert store.latest_snapshot()["x"] == 1
    assert not list(store.snapshots_dir.glob(".*tmp*"))


def test_kernels_best_and_rng_roundtrip(tmp_path) -> None:
    store = RunStore.create(tmp_path / "run", {})
    path = store.write_kernel("__global__ void k() {}")
    assert path.name == f"{source_id('__global__ void k() {}')}.cu"
    store.write_best("int x;", "line one\nline two")
    assert store.best_path.read_text() == "// line one\n// line two\nint x;"
    rng = random.Random(5)
    rng.random()
    clone = rng_from_json(__import__("json").loads(__import__("json").dumps(rng_state_to_json(rng))))
    assert [clone.random() for _ in range(3)] == [rng.random() for _ in range(3)]
