from __future__ import annotations

import json
import logging
import random

import pytest
import yaml

from evo_fsr.search.store import SNAPSHOT_FORMAT, RunStore, StoreError, rng_from_json, rng_state_to_json
from evo_fsr.types import source_id


def test_a_torn_last_record_is_cut_before_appending_with_one_warning(tmp_path, caplog) -> None:
    store = RunStore.create(tmp_path / "run", {"task": "conv2d"})
    store.append({"kind": "evaluated", "n": 1})
    store.append({"kind": "rejected", "n": 2})
    with open(store.candidates_path, "a") as handle:
        handle.write('{"kind": "evalu')                 # a driver killed mid-write
    caplog.set_level(logging.WARNING, logger="evo_fsr")
    reopened = RunStore.open(store.root)                 # what --resume does
    reopened.append({"kind": "evaluated", "n": 3})       # not glued onto the torn line
    assert [r["n"] for r in reopened.records()] == [1, 2, 3]
    RunStore.open(store.root)                            # a second resume: nothing left to warn about
    assert [r["n"] for r in RunStore.open(store.root).records()] == [1, 2, 3]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "torn last record (15 bytes)" in warnings[0]
    assert store.candidates_path.read_text().endswith('"n": 3}\n')


def test_a_torn_first_record_and_an_empty_file_are_handled(tmp_path) -> None:
    store = RunStore.create(tmp_path / "run", {})
    assert store.cut_torn_record() == 0                  # no file yet
    store.candidates_path.write_text('{"kin')
    assert store.cut_torn_record() == 5 and store.candidates_path.read_text() == ""
    assert store.cut_torn_record() == 0


def test_create_refuses_an_existing_run_and_open_needs_one(tmp_path) -> None:
    RunStore.create(tmp_path / "run", {"task": "conv2d"})
    with pytest.raises(StoreError, match="--resume"):
        RunStore.create(tmp_path / "run", {"task": "conv2d"})
    with pytest.raises(StoreError, match="not a run directory"):
        RunStore.open(tmp_path / "elsewhere")
    assert yaml.safe_load(RunStore.open(tmp_path / "run").config_path.read_text()) == {"task": "conv2d"}


def state(x: int) -> dict:
    return {"mode": "generational", "population": {"x": x}, "rng": [], "logbook": [], "counters": {},
            "llm_usage": {}, "policy": {}, "shape_elites": {}}


def test_snapshots_latest_wins_and_undecodable_ones_are_skipped(tmp_path) -> None:
    store = RunStore.create(tmp_path / "run", {})
    store.save_snapshot(0, state(0))
    store.save_snapshot(1, state(1))
    latest = store.latest_snapshot()
    assert latest.generation == 1 and latest.data == {"format": SNAPSHOT_FORMAT, "generation": 1, **state(1)}
    assert latest.path == store.snapshots_dir / "gen-0001.json"
    (store.snapshots_dir / "gen-0002.json").write_text("{broken")
    assert store.latest_snapshot().data["population"] == {"x": 1}
    assert not list(store.snapshots_dir.glob(".*tmp*"))


@pytest.mark.parametrize("change, words", [
    (lambda d: d.pop("format"), "snapshot without a format version"),
    (lambda d: d.update(format=99), "snapshot format 99 is not supported (this evo-fsr reads formats 1, 2)"),
    (lambda d: d.update(format="2"), "snapshot format '2' is not supported"),
    (lambda d: d.pop("shape_elites"), "snapshot without the key 'shape_elites'"),
    (lambda d: d.pop("population"), "snapshot without the key 'population'"),
    (lambda d: d.update(rng={}), "snapshot key 'rng' must be a JSON array, got dict"),
    (lambda d: d.update(generation="3"), "snapshot key 'generation' must be a JSON integer, got str"),
])
def test_a_snapshot_of_another_format_or_structure_is_refused(tmp_path, change, words) -> None:
    store = RunStore.create(tmp_path / "run", {})
    path = store.save_snapshot(0, state(0))
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    with pytest.raises(StoreError) as info:
        store.latest_snapshot()
    message = str(info.value)
    assert message.startswith(f"{path}: ") and words in message and message.endswith("cannot resume from it")
    path.write_text("[1, 2]")
    with pytest.raises(StoreError, match="not a snapshot"):
        store.latest_snapshot()


def test_a_format_1_snapshot_without_per_shape_elites_is_still_read(tmp_path) -> None:
    store = RunStore.create(tmp_path / "run", {})
    path = store.save_snapshot(0, state(0))
    data = json.loads(path.read_text())
    assert data["format"] == SNAPSHOT_FORMAT == 2
    del data["shape_elites"]
    path.write_text(json.dumps({**data, "format": 1}))
    snap = store.latest_snapshot()
    assert snap.format == 1 and "shape_elites" not in snap.data
    path.write_text(json.dumps({**data, "format": 2}))       # format 2 needs the key
    with pytest.raises(StoreError, match="without the key 'shape_elites'"):
        store.latest_snapshot()


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
