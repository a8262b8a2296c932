"""runner/cores.py: each GPU's runner core, the trusted side's cores, and the GPU's host index."""
from __future__ import annotations

from pathlib import Path

import pytest

from evo_fsr.runner import cores
from evo_fsr.runner.cores import CORES_PER_GPU, CorePlan, device_index, device_minors, host_gpus, host_slot, plan


def test_every_gpu_of_a_host_gets_its_own_runner_core_and_the_trusted_side_none():
    allowed = list(range(64))
    plans = [plan(allowed, 8, i) for i in range(8)]
    assert all(p is not None for p in plans)
    runner = [p.runner for p in plans if p]
    assert len(set(runner)) == 8 and all(len(r) == 1 for r in runner)
    assert all(set(p.trusted) == set(range(56)) for p in plans if p)
    assert not set(sum(runner, ())) & set(plans[0].trusted)        # the evaluator keeps off every runner core
    assert plan([5, 3, 9, 7], 1, 0) == CorePlan(runner=(9,), trusted=(3, 5, 7))


def test_no_plan_with_too_few_cores_or_an_unknown_gpu():
    assert plan(range(CORES_PER_GPU * 2 - 1), 2, 0) is None
    assert plan(range(CORES_PER_GPU * 2), 2, 1) is not None
    assert plan(range(64), 2, 2) is None and plan(range(64), 2, -1) is None and plan(range(64), 0, 0) is None


def test_the_gpus_host_index_from_cuda_visible_devices(tmp_path: Path):
    for bus, uuid in (("0000:1b:00.0", "GPU-aaaa"), ("0000:0a:00.0", "GPU-bbbb")):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(f"Model: NVIDIA H200\nGPU UUID: {uuid}\n")
    gpus = host_gpus(tmp_path)
    assert gpus == ["0000:0a:00.0", "0000:1b:00.0"]
    assert device_index(None, gpus, tmp_path) == 0 and device_index("3,1", gpus, tmp_path) == 3
    assert device_index("GPU-aaaa", gpus, tmp_path) == 1 and device_index("GPU-BBBB,GPU-aaaa", gpus, tmp_path) == 0
    assert device_index("GPU-cccc", gpus, tmp_path) is None and device_index("MIG-x", gpus, tmp_path) is None
    assert host_gpus(tmp_path / "absent") == []


def test_pinning_is_on_by_default_and_the_environment_overrides_the_config(monkeypatch: pytest.MonkeyPatch):
    from evo_fsr.verdict.evaluate import EvalConfig

    monkeypatch.delenv(cores.PIN_ENV, raising=False)
    assert EvalConfig().pin_runners
    assert not cores.pinning_requested(False) and cores.pinning_requested(True)
    monkeypatch.setenv(cores.PIN_ENV, "1")
    assert cores.pinning_requested(False) and cores.pinning_requested(True)
    monkeypatch.setenv(cores.PIN_ENV, "0")
    assert not cores.pinning_requested(True) and not cores.pinning_requested(False)
    monkeypatch.setenv(cores.PIN_ENV, "yes")           # neither 0 nor 1: the config decides
    assert cores.pinning_requested(True) and not cores.pinning_requested(False)


def test_an_evaluator_pins_only_where_it_is_asked_and_the_host_has_a_plan(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(cores.PIN_ENV, raising=False)
    monkeypatch.setattr(cores, "host_plan", lambda: cores.CorePlan(runner=(3,), trusted=(0, 1, 2)))
    assert cores.pins(True) and not cores.pins(False)
    monkeypatch.setattr(cores, "host_plan", lambda: None)
    assert not cores.pins(True)


def _gpu_tree(root: Path, gpus: dict[str, tuple[str, str | None]]) -> list[str]:
    """A driver /proc tree: bus id -> (UUID, device minor or None for a file without the line)."""
    for bus, (uuid, minor) in gpus.items():
        (root / bus).mkdir()
        text = f"Model: \t\t NVIDIA H200\nGPU UUID: \t GPU-{uuid}\nBus Location: \t {bus}\n"
        (root / bus / "information").write_text(text + (f"Device Minor: \t {minor}\n" if minor is not None else ""))
    return host_gpus(root)


def test_a_gpus_slot_is_its_device_minor_so_containers_of_one_host_take_different_cores(tmp_path: Path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    # two containers of one 8-GPU host sharing its 64 cores, shown GPU 3 and GPU 6 (each its device 0)
    seen_one = _gpu_tree(one, {"0000:3d:00.0": ("cccc", "3")})
    seen_two = _gpu_tree(two, {"0000:9a:00.0": ("ffff", "6")})
    assert device_minors(seen_one, one) == [3]
    assert host_slot(None, seen_one, 64, one) == (3, 16) and host_slot("0", seen_two, 64, two) == (6, 16)
    a, b = plan(range(64), 16, 3), plan(range(64), 16, 6)
    assert a is not None and b is not None and a.runner != b.runner
    assert not set(a.runner + b.runner) & set(a.trusted)          # neither evaluator runs on either runner core


def test_a_high_minor_never_leaves_a_small_container_unpinned(tmp_path: Path):
    gpus = _gpu_tree(tmp_path, {"0000:9a:00.0": ("ffff", "5")})      # one GPU of a big host, 16 cores
    index, slots = host_slot(None, gpus, 16, tmp_path)
    assert (index, slots) == (1, 4) and plan(range(16), slots, index) == CorePlan(runner=(14,), trusted=tuple(range(12)))


def test_a_gpus_slot_falls_back_to_its_place_where_a_minor_does_not_read_or_minors_collide(tmp_path: Path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    gpus = _gpu_tree(one, {"0000:0a:00.0": ("aaaa", "0"), "0000:1b:00.0": ("bbbb", None)})
    assert device_minors(gpus, one) is None
    assert host_slot("1", gpus, 64, one) == (1, 2) and host_slot("GPU-aaaa", gpus, 64, one) == (0, 2)
    assert host_slot(None, [], 64, one) == (0, 1)                    # no /proc tree: one GPU, this one
    assert host_slot("5", gpus, 64, one) == (5, 2) and plan(range(64), 2, 5) is None   # out of range: refused
    gpus = _gpu_tree(two, {"0000:0a:00.0": ("aaaa", "0"), "0000:1b:00.0": ("bbbb", "4")})
    assert host_slot("1", gpus, 64, two) == (4, 16)
    assert host_slot("1", gpus, 16, two) == (1, 2)                   # 0 and 4 share a slot of 4: places


def test_equal_minors_are_not_trusted(tmp_path: Path):
    gpus = _gpu_tree(tmp_path, {"0000:0a:00.0": ("aaaa", "2"), "0000:1b:00.0": ("bbbb", "2")})
    assert device_minors(gpus, tmp_path) is None and host_slot("1", gpus, 64, tmp_path) == (1, 2)


def test_an_unplanned_host_warns_only_where_the_driver_lists_gpus(monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture):
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: {0, 1})
    for gpus, level in ((["0000:1b:00.0"], "WARNING"), ([], "INFO")):
        monkeypatch.setattr(cores, "host_gpus", lambda gpus=gpus: gpus)
        cores.host_plan.cache_clear()
        caplog.clear()
        with caplog.at_level("INFO", logger="evo_fsr.runner.cores"):
            assert cores.host_plan() is None
        assert [r.levelname for r in caplog.records] == [level] and "not pinned" in caplog.text
    cores.host_plan.cache_clear()
