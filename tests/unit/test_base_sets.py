"""Fresh timed inputs (verdict/base_sets.py, inputs.TimedInputs): on the device every timed call a
fresh draw, else base sets redrawn for every window; the device path's checks pass every task's
own generator and refuse draws unlike the host's, and no universe of values outlives a window."""
from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
import pytest

from evo_fsr.tasks import discover, get_task
from evo_fsr.verdict import base_sets
from evo_fsr.verdict.inputs import INPUT_ROLES, TimedInputs, make_case, timed_case
from strict_device import StrictDevice as Device


def _largest_validation_shape(task):
    def elements(shape) -> int:
        return sum(a.numel(shape.env) for a in task.args if a.role in INPUT_ROLES)
    return max(task.validation, key=elements)


MIX_TASKS = [name for name in discover() if get_task(name).timed_inputs == "mix"]


def _timed_cases(task) -> list[str]:
    """Every case a benchmark shape of any set is timed with (inputs.timed_case)."""
    return sorted({timed_case(task, shape) for _, shapes in task.benchmarks for shape in shapes})


@pytest.mark.parametrize("name", MIX_TASKS)
def test_every_mix_task_draws_on_the_device_path(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``mix`` task's generator, run with the array module's own generator for every case its
    benchmark shapes are timed with, gives arrays of the declared kinds whose distribution passes
    the checks against a host draw (else the task would silently keep fixed base sets on a GPU).
    The "device" is strict_device.py's CPU stand-in for CuPy: a host array mixed into a draw, or a
    generator method CuPy lacks, fails here as on a GPU.  No time limit; validation-sized dims."""
    monkeypatch.setattr(base_sets, "DEVICE_REDRAW_MAX_MS", float("inf"))
    task = get_task(name)
    validation = _largest_validation_shape(task)
    for case in _timed_cases(task):
        shape = dataclasses.replace(validation, case=case)
        host = make_case(task, shape, 1, case)
        drawn = make_case(task, shape, 2, case, Device())
        assert {a.name for a in task.args if a.role in INPUT_ROLES} <= set(drawn)
        elements = sum(int(drawn[a.name].size) for a in task.args if a.role in INPUT_ROLES)
        if elements < 2000:
            pytest.skip(f"{shape.label}: {elements} elements, too few to compare quantiles")
        assert base_sets.distribution_mismatch(host, drawn) is None, case
        assert base_sets.choose_redraw(task, shape, Device(), host, 1e9,
                                       lambda: make_case(task, shape, 3, case, Device())) == "device", case


@pytest.mark.parametrize("mistake, why", [
    ("np.arange(n) + rng.random(n)", "host numpy.ndarray mixed"),
    ("x[:2] = np.array([0.0, 1.0])", "host numpy.ndarray assigned"),
    ("rng.normal(0.0, 1.0, n)", "has no attribute 'normal'"),
])
def test_the_stand_in_fails_what_cupy_fails(mistake: str, why: str) -> None:
    """The three mistakes the GPU found in task generators (histogram, cross_entropy, reverse)
    each fail under the stand-in, as they did under CuPy."""
    rng, n, x = Device().random.default_rng(1), 100, Device().random.default_rng(2).random(100)
    with pytest.raises((TypeError, ValueError, AttributeError), match=why):
        exec(mistake, {"np": np, "rng": rng, "n": n, "x": x})


def _draws(values: np.ndarray) -> dict[str, np.ndarray]:
    return {"x": values}


@pytest.mark.parametrize("wrong, why", [
    (lambda rng, n: rng.random(n, dtype=np.float32), "quantile"),                              # uniform
    (lambda rng, n: np.sort(rng.standard_normal(n, dtype=np.float32)), "non-decreasing"),      # sorted
    (lambda rng, n: np.round(rng.standard_normal(n, dtype=np.float32)), "distinct"),           # ties
    (lambda rng, n: np.where(rng.random(n) < 0.3, np.float32(np.nan),
                             rng.standard_normal(n, dtype=np.float32)).astype(np.float32), "finite"),
    (lambda rng, n: rng.standard_normal(n // 2, dtype=np.float32), "x 32768"),                 # too short
    (lambda rng, n: rng.standard_normal(n).astype(np.float64), "float64"),                     # wrong dtype
])
def test_a_draw_unlike_the_hosts_is_refused(wrong, why: str) -> None:
    n = 1 << 16
    host = _draws(np.random.default_rng(0).standard_normal(n, dtype=np.float32))
    problem = base_sets.distribution_mismatch(host, _draws(wrong(np.random.default_rng(1), n)))
    assert problem is not None and why in problem, problem
    honest = _draws(np.random.default_rng(2).standard_normal(n, dtype=np.float32))
    assert base_sets.distribution_mismatch(host, honest) is None


def test_integer_draws_out_of_the_hosts_range_are_refused() -> None:
    rng = np.random.default_rng(0)
    host = {"bins": rng.integers(0, 256, 1 << 16).astype(np.int32)}
    assert base_sets.distribution_mismatch(host, {"bins": rng.integers(0, 256, 1 << 16).astype(np.int32)}) is None
    wider = rng.integers(0, 256, 1 << 16).astype(np.int32)
    wider[:1] = 300
    problem = base_sets.distribution_mismatch(host, {"bins": wider})
    assert problem is not None and "hard edge" in problem, problem


def test_integer_quantiles_may_sit_one_value_apart() -> None:
    """Two draws of cross_entropy's labels, integers(0, 10), put the median at 4 or at 5, about
    one pair in two (the GPU test found it): any two such draws pass, a shift by two does not."""
    draws = [{"labels": np.random.default_rng(seed).integers(0, 10, 1 << 20).astype(np.int32)}
             for seed in range(8)]
    assert len({float(np.median(d["labels"])) for d in draws}) == 2
    assert all(base_sets.distribution_mismatch(a, b) is None for a in draws for b in draws)
    shifted = {"labels": draws[1]["labels"] + 2}
    assert "quantile" in (base_sets.distribution_mismatch(draws[0], shifted) or "")


def test_integer_tails_may_differ_but_not_shift_or_turn_negative() -> None:
    """A clipped normal's extremes differ between two draws (histogram's gaussian case: 24..240
    against 32..229 on 3M values): a few values past a soft edge pass; many, or a negative one
    where the host has none, do not."""
    def clipped_normal(seed: int, mean: float = 128.0) -> dict[str, np.ndarray]:
        x = np.random.default_rng(seed).standard_normal(1 << 20) * 20.0 + mean
        return {"x": np.clip(np.rint(x), 0, 255).astype(np.int32)}
    host = clipped_normal(1)
    tails = [clipped_normal(seed) for seed in range(2, 12)]
    assert any(d["x"].min() < host["x"].min() or d["x"].max() > host["x"].max() for d in tails)
    assert all(base_sets.distribution_mismatch(host, d) is None for d in tails)
    negative = clipped_normal(2)
    negative["x"][7] = -1
    assert "negative" in (base_sets.distribution_mismatch(host, negative) or "")
    many = clipped_normal(3)
    many["x"][: 1 << 12] = 250
    assert "outside the host" in (base_sets.distribution_mismatch(host, many) or "")


def test_a_generator_that_leaves_the_device_falls_back(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A generator that returns host arrays (here: one that ignores the device's generator) is
    not used per window: the host redraws where that is quick, and otherwise the base sets stay
    fixed, with a log line naming the reason."""
    task = get_task("sort")
    shape = task.make_shape({"N": 100_003}, "bench")
    host = make_case(task, shape, 1, "random")

    class HostOnly(Device):
        ndarray = type("DeviceArray", (), {})     # no NumPy array is one of these

    def draw():
        return make_case(task, shape, 3, "random", HostOnly())

    assert base_sets.choose_redraw(task, shape, HostOnly(), host, 1.0, draw) == "host"
    with caplog.at_level(logging.INFO, logger="evo_fsr.verdict.base_sets"):
        assert base_sets.choose_redraw(task, shape, HostOnly(), host, 1e9, draw) == "fixed"
    assert "fixed base sets" in caplog.text and "no device draw (RuntimeError" in caplog.text
    # on a device, a mix task left with fixed base sets is a warning (the universe attack is open)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


def test_mix_rows_tasks_do_not_draw_on_the_device(caplog: pytest.LogCaptureFixture) -> None:
    """Linked rows (y built from X) are not seen whole by the marginal checks: host or fixed."""
    task = get_task("mse_loss")
    shape = task.make_shape({"n": 50_001}, "bench")
    host = make_case(task, shape, 1, "random")
    with caplog.at_level(logging.INFO, logger="evo_fsr.verdict.base_sets"):
        assert base_sets.choose_redraw(task, shape, Device(), host, 1e9,
                                       lambda: make_case(task, shape, 3, "random", Device())) == "fixed"
    assert [r.levelno for r in caplog.records] == [logging.INFO]     # expected for mix_rows: no warning


@pytest.mark.parametrize("how", ["device", "host"])
def test_no_universe_of_values_outlives_a_window(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack this closes: a sort that learns the 2n values of the base sets from earlier
    calls.  Drawn on the device, every call is a fresh draw (no two calls share their values);
    drawn by the host, the calls of a window mix one pair of base sets and the next window's
    values are (nearly) all new."""
    task = get_task("sort")
    shape = task.make_shape({"N": 20_011}, "bench")
    if how == "host":
        source = TimedInputs(task, shape, np)
    else:
        monkeypatch.setattr(base_sets, "HOST_REDRAW_MAX_MS", -1.0)   # the host never quick enough
        monkeypatch.setattr(base_sets, "DEVICE_REDRAW_MAX_MS", float("inf"))
        source = TimedInputs(task, shape, Device())
    assert source.redraw == how
    universe = set(np.concatenate([b["x"] for b in source.bases]).tolist())
    first = source.next()["x"]
    second = source.next()["x"]
    if how == "host":
        assert set(first.tolist()) <= universe and set(second.tolist()) <= universe
    else:
        assert len(set(first.tolist()) & set(second.tolist())) < 0.01 * first.size
        assert len(set(second.tolist()) & universe) < 0.01 * second.size
    source.new_window()
    later = source.next()["x"]
    assert len(set(later.tolist()) & (universe | set(first.tolist()))) < 0.01 * later.size
    if how == "host":
        assert set(later.tolist()) <= set(np.concatenate([b["x"] for b in source.bases]).tolist())


def test_fixed_base_sets_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where neither the device nor a quick host draw is available, the base sets are those of the
    first draw (as before): new_window changes nothing, and the calls still differ."""
    monkeypatch.setattr(base_sets, "HOST_REDRAW_MAX_MS", -1.0)
    task = get_task("sort")
    shape = task.make_shape({"N": 4099}, "bench")
    source = TimedInputs(task, shape, np)
    assert source.redraw == "fixed"
    before = [b["x"].copy() for b in source.bases]
    source.new_window()
    assert all(np.array_equal(a, b["x"]) for a, b in zip(before, source.bases))
    assert not np.array_equal(source.next()["x"], source.next()["x"])


def test_regenerate_tasks_need_no_base_sets() -> None:
    names = [n for n in discover() if get_task(n).timed_inputs == "regenerate"]
    for name in names:
        task = get_task(name)
        source = TimedInputs(task, _largest_validation_shape(task), np)
        assert source.bases == [] and source.redraw == "fixed"
        source.new_window()                       # nothing to redraw


@pytest.mark.parametrize("stalls, expected", [(1, "device"), (base_sets.DRAW_TIMINGS, "fixed")])
def test_one_stalled_draw_does_not_fix_the_base_sets(stalls: int, expected: str,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """The device draw's time is its fastest of a few: one draw held up by the host (a 1.4 ms draw
    once read 10.5 ms on an H200) still draws on the device, while a draw slow every time keeps
    the base sets fixed, saying why."""
    import time

    monkeypatch.setattr(base_sets, "DEVICE_REDRAW_MAX_MS", 40.0)
    task = get_task("sort")
    shape = task.make_shape({"N": 100_003}, "bench")
    host = make_case(task, shape, 1, "random")
    calls = []

    def draw():
        calls.append(1)
        if 2 <= len(calls) <= 1 + stalls:        # the first draw is the checked one, not timed
            time.sleep(0.06)
        return make_case(task, shape, len(calls) + 2, "random", Device())

    with caplog.at_level(logging.INFO, logger="evo_fsr.verdict.base_sets"):
        assert base_sets.choose_redraw(task, shape, Device(), host, 1e9, draw) == expected
    assert len(calls) == 1 + min(stalls + 1, base_sets.DRAW_TIMINGS)
    assert ("a device draw takes" in caplog.text) == (expected == "fixed")
