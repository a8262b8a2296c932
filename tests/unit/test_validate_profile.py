"""Trusted-side verdict pieces: output comparison rules and timing statistics/flags."""
from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np
import pytest

from evo_fsr.verdict import gpu as gpu_module
from evo_fsr.verdict.batching import FUSABLE_FLOOR_MS, batch_size, sizing_call_ms
from evo_fsr.verdict.profile import (SINGLE_WINDOWS, CallTimes, Calibration, charged, credited_ms,
                                     single_call_floor_ms, single_floor_retimed, summarise, time_shape)
from evo_fsr.verdict.roofline import memory_roof_gbps, speed_of_light_ms
from evo_fsr.tasks import PRECISION_POLICIES
from evo_fsr.types import EvalResult, GpuInfo, Mismatch, ShapeTiming, Status
from evo_fsr.verdict.validate import check_outputs, compare_inputs_unchanged, compare_output

TOL = PRECISION_POLICIES["fp32_strict"]
RNG = np.random.default_rng(0)
REF = RNG.standard_normal((64, 33))


def test_float32_of_the_reference_passes() -> None:
    assert compare_output("y", REF.astype(np.float32), REF, TOL, "s") is None


def test_unwritten_element_is_caught_as_nan() -> None:
    got = REF.astype(np.float32)
    got[5, 7] = np.nan
    m = compare_output("y", got, REF, TOL, "s")
    assert m is not None and m.index == (5, 7) and m.reason.startswith("nan")


def test_fp16_precision_downgrade_fails_fp32_strict() -> None:
    assert compare_output("y", REF.astype(np.float16), REF, TOL, "s") is not None


def test_all_zero_output_fails_even_with_loose_tolerance() -> None:
    loose = {"norm_rtol": 0.5, "rtol": 0.5, "atol": 0.5}
    assert compare_output("y", np.zeros_like(REF, dtype=np.float32), REF, loose, "s") is not None


def test_inf_where_reference_finite_fails_and_matching_inf_passes() -> None:
    got = REF.astype(np.float32)
    got[0, 0] = np.inf
    assert compare_output("y", got, REF, TOL, "s") is not None
    ref = REF.copy()
    ref[0, 0] = np.inf
    assert compare_output("y", got, ref, TOL, "s") is None


def test_exact_policy_needs_equality() -> None:
    ref = np.arange(10, dtype=np.int32)
    got = ref.copy()
    assert compare_output("h", got, ref, TOL, "s", exact=True) is None
    got[3] += 1
    m = compare_output("h", got, ref, TOL, "s", exact=True)
    assert m is not None and m.index == (3,)


def test_modified_input_is_reported() -> None:
    x = RNG.standard_normal(10).astype(np.float32)
    after = x.copy()
    after[4] = 0
    m = compare_inputs_unchanged({"x": x}, {"x": after}, "s")
    assert m is not None and m.output == "input:x" and m.index == (4,)
    assert compare_inputs_unchanged({"x": x}, {"x": x.copy()}, "s") is None


def test_custom_compare_takes_over() -> None:
    calls = []

    def compare(outputs, expected, inputs, dims, tol):  # type: ignore[no-untyped-def]
        calls.append(1)
        return ("v", (2,), 1.0, 2.0, "custom says no")

    m = check_outputs({"v": np.zeros(3)}, {"v": np.zeros(3)}, {}, {}, TOL, "s", False, compare)
    assert calls and m is not None and m.reason == "custom says no"


GPU = GpuInfo(name="Test GPU", compute_capability="9.0", sm_count=132, shared_memory_per_block_bytes=49152,
              shared_memory_per_block_optin_bytes=232448, registers_per_block=65536, l2_cache_bytes=50 * 2**20,
              memory_bandwidth_gbps=3000.0, fp32_peak_tflops=60.0, tensor_peak_tflops=900.0)


def test_speed_of_light_floor_is_the_larger_of_memory_and_compute() -> None:
    mem = speed_of_light_ms(flops=0, nbytes=3e9, gpu=GPU, precision="fp32_strict")
    assert mem == pytest.approx(0.8, rel=1e-6)     # 3 GB at 3000 GB/s / 0.8 (a part with no datasheet roof)
    comp = speed_of_light_ms(flops=60e9, nbytes=0, gpu=GPU, precision="fp32_strict")
    assert comp == pytest.approx(1.0)
    assert speed_of_light_ms(flops=60e9, nbytes=0, gpu=GPU, precision="fp16") < comp


def _calls(event: float, extra_all: float = 0.002, overhead: float = 0.05, n: int = 5) -> list[CallTimes]:
    return [CallTimes(event, event + extra_all, event + extra_all + 0.01, event + extra_all + overhead) for _ in range(n)]


def test_honest_calls_are_credited_their_stream_events() -> None:
    calibration = Calibration.of(_calls(2.0))
    honest = summarise("s", _calls(1.0), _calls(2.0), calibration, baseline_clean_ms=2.0, floor_ms=0.1)
    assert honest.median_ms == pytest.approx(1.0) and honest.speedup == pytest.approx(2.0) and not honest.flags
    assert honest.credited_by == "events"


def test_escaped_work_is_charged_not_allowed() -> None:
    """Work on another stream (device-wide tail) and work the runner's events never saw (the
    trusted window) are both credited to the candidate."""
    calibration = Calibration.of(_calls(2.0))
    side_stream = summarise("s", _calls(0.01, extra_all=1.5), _calls(2.0), calibration, 2.0, 0.001)
    assert side_stream.median_ms == pytest.approx(1.51, rel=0.01) and side_stream.credited_by == "device-wide"
    forged = [CallTimes(0.01, 0.011, 0.02, 1.6) for _ in range(5)]      # claims 10 us, the window saw 1.6 ms
    bound = summarise("s", forged, _calls(2.0), calibration, 2.0, 0.001)
    assert bound.median_ms == pytest.approx(1.6 - calibration.overhead_ms - calibration.slack_ms(len(forged)))
    assert bound.credited_by == "window"
    strict = summarise("s", forged, _calls(2.0), calibration, 2.0, 0.001, strict=True)
    assert strict.credited_by in ("window-strict", "window-ratio")
    floored = summarise("s", _calls(1.0), _calls(2.0), calibration, 2.0, 0.1, single_floor_ms=1.5)
    assert floored.median_ms == pytest.approx(1.5) and floored.credited_by == "single-call"
    assert charged(forged, calibration) and not charged(_calls(1.0), calibration)


def test_hiding_work_on_a_minority_of_calls_does_not_move_the_median() -> None:
    calibration = Calibration.of(_calls(2.0))
    mixed = _calls(1.0, n=3) + [CallTimes(0.01, 0.012, 0.02, 1.06) for _ in range(2)]
    assert credited_ms(mixed, calibration) == pytest.approx(1.0)


def test_a_slowed_baseline_does_not_raise_the_speedup() -> None:
    calibration = Calibration.of(_calls(2.0))
    slowed = summarise("s", _calls(1.0), _calls(6.0), calibration, baseline_clean_ms=2.0, floor_ms=0.1)
    assert slowed.baseline_median_ms == pytest.approx(2.0) and slowed.speedup == pytest.approx(2.0)


def test_under_floor_is_flagged() -> None:
    calibration = Calibration.of(_calls(2.0))
    too_fast = summarise("s", _calls(0.05), _calls(2.0), calibration, 2.0, floor_ms=0.1)
    assert any(f.startswith("under-floor") for f in too_fast.flags)


def _result(status: Status, speedups: list[float]) -> EvalResult:
    timings = tuple(ShapeTiming(f"s{i}", 1.0 / s, 1.0, 1.0 / s, 1.0, 10, 0.01) for i, s in enumerate(speedups))
    return EvalResult(candidate_id="x", task="t", status=status, summary="", timings=timings)


def test_fitness_orders_compile_failure_below_incorrect_below_correct() -> None:
    compile_error = _result(Status.COMPILE_ERROR, [])
    wrong = _result(Status.WRONG, [])
    flagged = _result(Status.FLAGGED, [100.0])
    slow, fast = _result(Status.OK, [1.0, 1.0]), _result(Status.OK, [2.0, 8.0])
    ordered = sorted([fast, flagged, compile_error, slow, wrong], key=lambda r: r.fitness)
    assert ordered[0] is compile_error and ordered[-1] is fast and ordered[-2] is slow
    assert fast.geomean_speedup == pytest.approx(4.0)
    assert flagged.fitness[1] == 0.0        # a time that is not credible earns nothing


def test_eval_result_round_trips_through_dict() -> None:
    r = EvalResult(candidate_id="abc", task="conv2d", status=Status.WRONG, summary="wrong",
                   mismatch=Mismatch("s", "y", (1, 2), 1.0, 2.0, "r"), logs=(("compile", "ok"),),
                   counters=(("validation_launches", 3),), worker="host:gpu1:42", started_unix_s=1.7e9)
    assert EvalResult.from_dict(r.to_dict()) == r
    assert r.rejection == "wrong:tolerance"


def test_flushed_subnormals_are_forgiven_only_up_to_n_times_flt_min() -> None:
    """sum_reduction's denormals case: a sum whose subnormal addends were flushed (fp32 atomicAdd
    does) passes; the same floor forgives nothing at a normal magnitude."""
    from evo_fsr.tasks import get_task
    task = get_task("sum_reduction")
    rng = np.random.default_rng(3)
    x = (rng.random(1000, dtype=np.float32) * np.float32(4) - np.float32(1)) * np.float32(1e-41)
    expected = {"out": np.array([x.astype(np.float64).sum()])}
    flushed = {"out": np.zeros(1, dtype=np.float32)}
    assert check_outputs(flushed, expected, {"x": x}, {"N": 1000}, task.tol, "s", exact=False) is None
    no_floor = dict(task.tol, flush_floor_per_input=0.0)
    assert check_outputs(flushed, expected, {"x": x}, {"N": 1000}, no_floor, "s", exact=False) is not None
    tiny = x / np.float32(1e-41) * np.float32(1e-30)          # small_magnitude: normal floats
    expected_tiny = {"out": np.array([tiny.astype(np.float64).sum()])}
    assert check_outputs(flushed, expected_tiny, {"x": tiny}, {"N": 1000}, task.tol, "s", exact=False) is not None


def _float32_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The textbook float32 computation a legitimate kernel does (max-shifted log-sum-exp)."""
    m = logits.max(axis=1)
    s = np.exp(logits - m[:, None]).sum(axis=1, dtype=np.float32)
    loss = (m + np.log(s)) - logits[np.arange(len(labels)), labels]
    return np.array([loss.astype(np.float32).mean(dtype=np.float32)], dtype=np.float32)


def test_a_cancelling_cross_entropy_row_is_judged_by_the_scale_of_its_terms() -> None:
    """Seen on an H100: one row of large_magnitude logits whose label holds the maximum by far has
    a true loss of 2.9e-12 and any float32 kernel returns 0.0; the relative tolerance rejected
    the task's own seed.  The task's error_scale forgives ulps of the terms; a loss that is off
    by more (a wrong label, a missing max shift, an fp16 computation) still fails."""
    from evo_fsr.tasks import get_task
    task = get_task("cross_entropy")
    logits = np.array([[-120.0, 35.0, 8.5, -60.0, 2.0, 0.0, 9.0, -3.0, 4.0, 7.25]], dtype=np.float32)
    labels = np.array([1], dtype=np.int32)
    inputs, dims = {"logits": logits, "labels": labels}, {"N": 1, "C": 10}
    expected = task.reference(inputs, dims)
    assert 0 < float(expected["out"][0]) < 1e-10
    got = {"out": _float32_cross_entropy(logits, labels)}
    assert float(got["out"][0]) == 0.0
    args = (inputs, dims, task.tol, "one_row", False)
    assert check_outputs(got, expected, *args, error_scale=task.error_scale) is None
    assert check_outputs(got, expected, *args) is not None          # the bare relative tolerance
    assert check_outputs({"out": np.array([1e-3], np.float32)}, expected, *args, error_scale=task.error_scale)
    # an ordinary batch: the forgiven amount is far below the loss, so a 1e-3 relative error fails
    rng = np.random.default_rng(5)
    batch = {"logits": (rng.standard_normal((4096, 10)) * 2).astype(np.float32),
             "labels": rng.integers(0, 10, 4096).astype(np.int32)}
    bdims = {"N": 4096, "C": 10}
    ref = task.reference(batch, bdims)
    good = {"out": _float32_cross_entropy(batch["logits"], batch["labels"])}
    assert check_outputs(good, ref, batch, bdims, task.tol, "b", False, error_scale=task.error_scale) is None
    off = {"out": (good["out"] * np.float32(1.001)).astype(np.float32)}
    assert check_outputs(off, ref, batch, bdims, task.tol, "b", False, error_scale=task.error_scale) is not None


def test_slack_is_the_noise_of_medians_not_of_one_call() -> None:
    """The allowance shrinks with the number of calls compared: a runner forging its times hides
    at most one standard error of the medians, far less than one call's spread."""
    base = [CallTimes(1.0, 1.002, 1.01, 1.0 + 0.05 + 0.02 * ((i * 7) % 10) / 9) for i in range(30)]
    calibration = Calibration.of(base)
    quartiles = statistics.quantiles([c.window_ms - c.event_ms for c in base], n=4)
    iqr = quartiles[2] - quartiles[0]
    assert 0 < calibration.slack_ms(30) < 0.5 * iqr
    assert calibration.slack_ms(30) < calibration.slack_ms(5) <= calibration.slack_ms(1) <= iqr + 1e-12
    forged = [CallTimes(0.5, 0.502, 0.51, c.window_ms) for c in base]          # claims half of its 1 ms
    assert credited_ms(forged, calibration) > 0.97


def test_the_batch_is_sized_by_the_faster_of_the_library_and_the_naive_seed() -> None:
    """monte_carlo 2^24 on an H200: torch 0.267 ms a call, the naive seed 0.049 ms, 0.744 ms of
    window overhead.  Sized by torch alone the windows held three calls; by the faster of the two
    trusted calls, eight (batch_max).  With the library off, the floor sizes it, as before."""
    assert sizing_call_ms(0.267, 0.049, 0.014) == 0.049
    assert batch_size(0.744, sizing_call_ms(0.267, 0.049, 0.014), 8) == 8
    assert batch_size(0.744, 0.267, 8) == 3                 # the library's call alone
    assert sizing_call_ms(0.1, 10.0, 0.02) == 0.1            # conv2d: the library is the faster
    assert sizing_call_ms(0.0, 0.049, 0.014) == 0.014        # library not timed: the floor
    assert sizing_call_ms(0.267, 0.0, 0.014) == 0.267        # no seed time: the library's


def test_batch_size_shares_the_window_overhead_between_short_calls() -> None:
    assert batch_size(0.3, 0.05, 8) == 6                  # six 50-us calls to a 0.3-ms overhead
    assert batch_size(0.3, 0.01, 8) == 8                  # capped
    assert batch_size(0.3, 0.5, 8) == 1                   # long kernels: one call a window
    assert batch_size(0.3, 0.0, 8) == 1 and batch_size(0.3, 0.05, 1) == 1


def test_a_launch_bound_shape_is_timed_one_call_to_a_window() -> None:
    """Its calls could be fused into the first launch of a batch (SECURITY.md); the floor decides,
    not the expected time (the library's, which a launch-bound shape's overhead dwarfs)."""
    assert batch_size(0.3, 0.005, 8, floor_ms=0.0002) == 1            # topk, 1 MiB: 0.3 us of traffic
    assert batch_size(0.3, 0.005, 8, floor_ms=FUSABLE_FLOOR_MS * 0.99) == 1
    assert batch_size(0.3, 0.05, 8, floor_ms=FUSABLE_FLOOR_MS) == 6   # at the threshold: batched
    assert batch_size(0.3, 0.05, 8, floor_ms=0.0) == 6                # floor unknown: as before


def test_a_forger_hides_at_most_slack_over_k_per_call_in_a_batch() -> None:
    """Windows of k calls: the window's overhead and slack are shared by k calls, so claiming
    half of the time gains at most slack / k per call (fails if summarise credits per window,
    or divides the claim but not the window)."""
    k = 8
    spread = [0.2 * ((i * 7) % 10) / 9 for i in range(30)]             # 0.2 ms of host noise
    base = [CallTimes(k * 0.05, k * 0.05 + 0.002, k * 0.05 + 0.01, k * 0.05 + 0.3 + s, calls=k) for s in spread]
    calibration = Calibration.of(base)
    forged = [CallTimes(k * 0.025, k * 0.025 + 0.001, k * 0.03, c.window_ms, calls=k) for c in base]
    timing = summarise("s", forged, base[:10], calibration, 0.05, 0.001)
    assert timing.median_ms >= 0.05 - calibration.slack_ms(30) / k - 1e-9
    assert timing.median_ms > 0.04 and timing.trials == 30 * k
    single = [CallTimes(0.025, 0.026, 0.03, 0.05 + 0.3 + s) for s in spread]   # the same claim, unbatched
    one = Calibration.of([CallTimes(0.05, 0.052, 0.06, 0.05 + 0.3 + s) for s in spread])
    assert summarise("s", single, single[:10], one, 0.05, 0.001).median_ms < timing.median_ms


class _DeviceArray:
    """Stands for a CuPy array: refuses implicit conversion to NumPy, as CuPy does."""

    def __init__(self, a: np.ndarray) -> None:
        self.a, self.size, self.dtype = a, a.size, a.dtype

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed")


class _DeviceXp:
    @staticmethod
    def asnumpy(a):
        return a.a if isinstance(a, _DeviceArray) else np.asarray(a)


def test_a_tasks_own_compare_gets_host_arrays_for_device_data() -> None:
    """The GPU path hands device arrays to check_outputs; a task's compare (topk's) works on
    NumPy, for the inputs too (on an H100 every topk sweep call raised before this)."""
    from evo_fsr.tasks import get_task
    task = get_task("topk")
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    order = np.argsort(-x, kind="stable")[:10]
    outputs = {"values": x[order], "indices": order.astype(np.int32)}
    expected = task.reference({"x": x}, {"N": 1000, "K": 10})
    device = {k: _DeviceArray(np.asarray(v)) for k, v in outputs.items()}
    found = check_outputs(device, {k: _DeviceArray(np.asarray(v)) for k, v in expected.items()},
                          {"x": _DeviceArray(x)}, {"N": 1000, "K": 10}, task.tol, "s", exact=True,
                          custom_compare=task.custom_compare, xp=_DeviceXp)
    assert found is None
    wrong = dict(device, values=_DeviceArray(np.sort(x)[:10]))
    assert check_outputs(wrong, expected, {"x": _DeviceArray(x)}, {"N": 1000, "K": 10}, task.tol, "s",
                         exact=True, custom_compare=task.custom_compare, xp=_DeviceXp) is not None


def _noisy(event: float, window_true_ms: float, n: int, shift: float = 0.0, seed: int = 0) -> list[CallTimes]:
    """n windows of a call that takes ``window_true_ms`` on the device, reporting ``event`` as its
    time; the window's overhead is 0.3 ms with a spread of ~0.02 ms (plus ``shift``)."""
    rng = np.random.default_rng(seed)
    return [CallTimes(event, event + 0.002, event + 0.01, window_true_ms + 0.3 + shift + 0.02 * rng.standard_normal())
            for _ in range(n)]


class _Rounds:
    """Timing rounds served in order: (candidate windows, interleaved baseline windows)."""

    def __init__(self, *rounds: tuple[list[CallTimes], list[CallTimes]]) -> None:
        self.rounds, self.taken = list(rounds), 0

    def __call__(self) -> tuple[list[CallTimes], list[CallTimes]]:
        self.taken += 1
        return self.rounds.pop(0)


def test_a_shape_whose_claims_agree_is_timed_once() -> None:
    pool = _noisy(0.5, 0.5, 32, seed=1)
    rounds = _Rounds((_noisy(0.5, 0.5, 16, seed=2), _noisy(0.5, 0.5, 6, seed=3)))
    timed = time_shape(rounds, pool)
    assert rounds.taken == 1 and timed.rounds == 1 and not timed.strict
    assert len(pool) == 32          # nothing of a candidate's timing joins the calibration


def test_an_honest_unlucky_round_is_timed_again_and_not_charged() -> None:
    """Fails without the second round: the first round's windows ran 0.1 ms slow (a host
    hiccup), which the bound charged to an honest kernel."""
    pool = _noisy(0.5, 0.5, 32, seed=1)
    unlucky = _noisy(0.5, 0.5, 16, shift=0.1, seed=4)
    assert charged(unlucky, Calibration.of(pool))
    rounds = _Rounds((unlucky, _noisy(0.5, 0.5, 6, seed=5)), (_noisy(0.5, 0.5, 16, seed=6), _noisy(0.5, 0.5, 6, seed=7)))
    timed = time_shape(rounds, pool)
    assert rounds.taken == 2 and not timed.strict and len(timed.candidate) == 16
    assert not charged(timed.candidate, timed.calibration)
    assert credited_ms(timed.candidate, timed.calibration, timed.strict) <= 1.02 * 0.5 + 1e-3


def test_claims_charged_twice_are_set_aside_and_the_window_credited_without_allowance() -> None:
    """A runner that reports 1 us for a 0.5 ms call: charged in both rounds, it is credited the
    window's own estimate.  Fails if the allowance is kept: with it, the forger is credited
    about one standard error less than its time, on every shape, every time."""
    pool = _noisy(0.5, 0.5, 32, seed=1)
    rounds = _Rounds((_noisy(0.001, 0.5, 16, seed=8), _noisy(0.5, 0.5, 6, seed=9)),
                     (_noisy(0.001, 0.5, 16, seed=10), _noisy(0.5, 0.5, 6, seed=11)))
    timed = time_shape(rounds, pool)
    assert rounds.taken == 2 and timed.strict and len(timed.candidate) == 32 and len(timed.baseline) == 12
    assert len(pool) == 32
    strict = credited_ms(timed.candidate, timed.calibration, strict=True)
    lenient = credited_ms(timed.candidate, timed.calibration)
    assert strict == pytest.approx(0.5, abs=0.01)
    assert lenient == pytest.approx(strict - timed.calibration.slack_ms(32)) and lenient < strict
    shape = summarise("s", timed.candidate, timed.baseline, timed.calibration, 0.5, 0.001, strict=True)
    assert shape.median_ms >= strict and shape.median_ms == pytest.approx(0.5, abs=0.01)


def _drifted(seed: int, n: int, event: float = 0.5) -> list[CallTimes]:
    """Windows whose trusted overhead drifted 0.1 ms above the pool's, in every role alike
    (dot_product 2^24 on an H200, twenty-ninth session: 137 us over a 1.56 ms pool)."""
    return _noisy(event, 0.5, n, shift=0.1, seed=seed)


def test_an_honest_kernel_charged_twice_by_a_drift_is_judged_against_a_fresh_pool() -> None:
    """An honest kernel whose windows and the baseline's drifted after the pool was taken is
    charged in both rounds.  With ``fresh_pool`` (a pool taken at once, the candidate's process
    dead, in the drift), its strict credit subtracts the drifted overhead: its own time.  Fails
    without the fresh pool: the old pool's overhead charges it the drift as its own time."""
    pool = _noisy(0.5, 0.5, 32, seed=1)
    rounds = [(_drifted(50, 16), _drifted(51, 6)), (_drifted(52, 16), _drifted(53, 6))]
    off = time_shape(_Rounds(*rounds), pool)
    assert off.strict and off.rounds == 2
    assert credited_ms(off.candidate, off.calibration, strict=True) > 0.58       # the drift charged

    taken: list[int] = []

    def fresh() -> list[CallTimes]:
        taken.append(len(taken))
        return _drifted(56, 32)

    timed = time_shape(_Rounds(*rounds), pool, fresh_pool=fresh)
    assert taken == [0] and timed.rounds == 2 and timed.strict and len(timed.candidate) == 32
    assert credited_ms(timed.candidate, timed.calibration, strict=True) == pytest.approx(0.5, abs=0.02)
    assert len(pool) == 32


def test_no_fresh_pool_is_taken_unless_the_second_round_is_charged_too() -> None:
    """The fresh pool costs a runner's start-up: it is taken only on a second charge.  Fails if
    it is taken after the first."""
    pool = _noisy(0.5, 0.5, 32, seed=1)
    taken: list[int] = []

    def fresh() -> list[CallTimes]:
        taken.append(1)
        return _noisy(0.5, 0.5, 32, seed=57)

    once = time_shape(_Rounds((_noisy(0.5, 0.5, 16, seed=58), _noisy(0.5, 0.5, 6, seed=59))), pool, fresh_pool=fresh)
    unlucky = time_shape(_Rounds((_drifted(60, 16), _drifted(61, 6)), (_noisy(0.5, 0.5, 16, seed=62),
                                                                        _noisy(0.5, 0.5, 6, seed=63))),
                         pool, fresh_pool=fresh)
    assert (once.rounds, unlucky.rounds) == (1, 2) and not once.strict and not unlucky.strict
    assert taken == []


def test_a_forger_charged_twice_gains_nothing_from_the_fresh_pool() -> None:
    """A runner reporting 1 us for a 0.5 ms call, which slows the baseline's interleaved windows
    (+2 ms, copy-engine transfers the idle gate does not see): against a clean fresh pool it is
    credited its whole time.  Fails if the interleaved windows' overhead may replace the lower
    of the two (the forger is then credited nothing), or if the claims or the slack count."""
    pool = _noisy(0.5, 0.5, 32, seed=1)
    hogged = [[CallTimes(c.event_ms, c.event_all_ms, c.host_ms, c.window_ms + 2.0) for c in _noisy(0.5, 0.5, 6, seed=s)]
              for s in (65, 67)]
    rounds = _Rounds((_noisy(0.001, 0.5, 16, seed=64), hogged[0]), (_noisy(0.001, 0.5, 16, seed=66), hogged[1]))
    timed = time_shape(rounds, pool, fresh_pool=lambda: _noisy(0.5, 0.5, 32, seed=70))
    assert rounds.taken == 2 and timed.strict and len(timed.candidate) == 32 and len(timed.baseline) == 12
    assert timed.calibration.overhead_ms == pytest.approx(Calibration.of(_noisy(0.5, 0.5, 32, seed=70)).overhead_ms)
    assert credited_ms(timed.candidate, timed.calibration, strict=True) == pytest.approx(0.5, abs=0.02)


def test_a_candidate_that_slows_the_baselines_windows_cannot_raise_its_own_calibration() -> None:
    """A forger that reports 1 us and slows the trusted side's copies (+2 ms) whenever the
    baseline runs, never while it runs itself: its 12 interleaved baseline windows outnumber
    the 8 clean ones.  Fails if they may: the overhead subtracted from its windows is then 2 ms
    too large and it is credited nothing."""
    from evo_fsr.verdict.profile import own_share_calibration
    clean = _noisy(0.5, 0.5, 8, seed=12)
    hogged = [CallTimes(c.event_ms, c.event_all_ms, c.host_ms, c.window_ms + 2.0) for c in _noisy(0.5, 0.5, 6, seed=13)]
    hogged_again = [CallTimes(c.event_ms, c.event_all_ms, c.host_ms, c.window_ms + 2.0) for c in _noisy(0.5, 0.5, 6, seed=14)]
    pool = list(clean)
    rounds = _Rounds((_noisy(0.001, 0.5, 16, seed=15), hogged), (_noisy(0.001, 0.5, 16, seed=16), hogged_again))
    timed = time_shape(rounds, pool)
    quartiles = statistics.quantiles([c.window_ms - c.event_ms for c in clean], n=4)
    assert timed.calibration.overhead_ms <= quartiles[2] + 1e-9
    assert timed.strict and credited_ms(timed.candidate, timed.calibration, strict=True) > 0.45
    assert len(pool) == 8           # its claims were set aside: its windows calibrate no one after it
    assert own_share_calibration(clean, hogged + hogged_again).calls == 12      # 8 + at most 4 of its own


def test_a_pool_that_drifted_above_the_rounds_does_not_hide_a_forged_claim() -> None:
    """The pool's overhead 0.1 ms above the conditions of the rounds (on an H200, monte_carlo
    2^24: up to 120 us above the interleaved baseline's, probe_rounds.py), and a runner that
    claims 0.42 ms of its 0.5 ms windows: the 0.08 ms it hides is inside the drift.  The baseline
    windows interleaved with its own show the rounds' overhead; fails if the calibration
    subtracts the pool's (mixed with at most half as many of them) alone: never charged."""
    from evo_fsr.verdict.profile import own_share_calibration
    pool = _noisy(0.5, 0.5, 8, shift=0.1, seed=21)
    for seed in range(5):
        rounds = _Rounds(*((_noisy(0.42, 0.5, 16, seed=22 + 2 * seed + r), _noisy(0.5, 0.5, 6, seed=40 + 2 * seed + r))
                           for r in range(2)))
        timed = time_shape(rounds, pool)
        assert timed.strict and credited_ms(timed.candidate, timed.calibration, strict=True) > 0.48
        honest = time_shape(_Rounds((_noisy(0.5, 0.5, 16, seed=60 + seed), _noisy(0.5, 0.5, 6, seed=70 + seed))), pool)
        assert not honest.strict and credited_ms(honest.candidate, honest.calibration) == pytest.approx(0.5, rel=0.02)
    # never above the pool's share: a candidate that slows the baseline's windows gains nothing
    slowed = [CallTimes(c.event_ms, c.event_all_ms, c.host_ms, c.window_ms + 2.0) for c in _noisy(0.5, 0.5, 6, seed=80)]
    assert (own_share_calibration(pool, slowed).overhead_ms
            == pytest.approx(Calibration.of([*pool, *slowed[:4]]).overhead_ms))


def test_slowed_baseline_windows_of_a_kernel_whose_claims_stood_do_not_join_the_pool() -> None:
    """An honest-looking kernel (its claims agree with the clock) that slows the trusted side's
    copies while the baseline runs: fails if its windows join the pool, where they would raise
    the calibration of every candidate after it."""
    pool = _noisy(0.5, 0.5, 32, seed=1)
    hogged = [CallTimes(c.event_ms, c.event_all_ms, c.host_ms, c.window_ms + 2.0) for c in _noisy(0.5, 0.5, 6, seed=17)]
    honest = _noisy(0.5, 0.5, 6, seed=18)
    timed = time_shape(_Rounds((_noisy(0.5, 0.5, 16, seed=19), hogged[:3] + honest[:3])), pool)
    assert not timed.strict and timed.rounds == 1
    assert len(pool) == 32 and all(c.window_ms - c.event_ms < 1.0 for c in pool)


def test_claims_set_aside_are_credited_with_the_lower_overhead_estimate() -> None:
    """A runner that reports 1 us, whose windows run 0.2 ms below the calibration's overhead (on
    an H100 the pool ran 0.1-0.3 ms above a forger's windows, which was credited 1.52x the
    naive seed it ran); the baseline windows interleaved with its own show the lower overhead.
    Fails if the calibration's overhead alone is subtracted: it is credited 0.3 ms for 0.5 ms."""
    pool = _noisy(0.5, 0.5, 32, shift=0.2, seed=1)
    rounds = _Rounds((_noisy(0.001, 0.5, 16, seed=12), _noisy(0.5, 0.5, 6, seed=13)),
                     (_noisy(0.001, 0.5, 16, seed=14), _noisy(0.5, 0.5, 6, seed=15)))
    timed = time_shape(rounds, pool)
    assert timed.strict
    assert credited_ms(timed.candidate, timed.calibration, strict=True) == pytest.approx(0.5, abs=0.02)
    # and a candidate can only raise its own windows' overhead: that estimate is then ignored
    slowed = _Rounds((_noisy(0.001, 0.5, 16, seed=12), _noisy(0.5, 0.5, 6, shift=2.0, seed=13)),
                     (_noisy(0.001, 0.5, 16, seed=14), _noisy(0.5, 0.5, 6, shift=2.0, seed=15)))
    timed = time_shape(slowed, _noisy(0.5, 0.5, 32, seed=1))
    assert timed.strict
    assert credited_ms(timed.candidate, timed.calibration, strict=True) == pytest.approx(0.5, abs=0.02)


def test_claims_set_aside_are_not_judged_against_the_colder_baseline_windows() -> None:
    """The pool (the twin, in the candidate's role) matches a 1 us forger's real overhead; the
    baseline windows interleaved with it ran 0.15 ms slower (a runner called one window in
    three: on an H100 they read above the candidate's).  Fails if the pool's own estimate is
    not among those the strict credit takes the lowest of: the mix of the two is credited."""
    pool = _noisy(0.5, 0.5, 32, seed=21)
    rounds = _Rounds((_noisy(0.001, 0.5, 16, seed=22), _noisy(0.5, 0.5, 6, shift=0.15, seed=23)),
                     (_noisy(0.001, 0.5, 16, seed=24), _noisy(0.5, 0.5, 6, shift=0.15, seed=25)))
    timed = time_shape(rounds, pool)
    assert timed.strict
    assert timed.calibration.overhead_ms == pytest.approx(Calibration.of(pool).overhead_ms)


# -- the memory roof of the floor ------------------------------------------------------------
def test_floor_uses_the_datasheet_roof_where_known() -> None:
    known = replace(GPU, memory_roof_gbps=3350.0)
    assert memory_roof_gbps(known) == 3350.0        # above 3000 / 0.9
    assert speed_of_light_ms(flops=0, nbytes=3.35e9, gpu=known, precision="fp32_strict") == pytest.approx(1.0)
    faster = replace(GPU, memory_bandwidth_gbps=3600.0, memory_roof_gbps=3350.0)
    assert memory_roof_gbps(faster) == pytest.approx(4000.0)   # a faster part under a matching name: copy / 0.9
    assert memory_roof_gbps(GPU) == pytest.approx(3750.0)      # no roof known: copy / 0.8


def test_a_read_only_kernel_at_the_h200_roof_is_not_under_the_floor() -> None:
    """What an H200 measured on 2026-11-24: the evaluator's probe copied at about 4.07 TB/s, and
    dot_product's persistent seed (THREADS 1024, VEC 4, ITEMS 2) was credited 0.1769 ms on N =
    1e8 + 7, 4.52 TB/s of reads.  The old floor (copy / 0.9 = 0.1770 ms) flagged it; with the
    datasheet roof (4.8 TB/s) the floor is 0.1667 ms.  A time 10 % under the roof is still flagged."""
    h200 = replace(GPU, name="NVIDIA H200", memory_bandwidth_gbps=4070.0,
                   memory_roof_gbps=gpu_module.datasheet_memory_roof_gbps("NVIDIA H200"))
    nbytes = 2 * 4 * (10**8 + 7) + 4
    floor = speed_of_light_ms(flops=2 * (10**8 + 7), nbytes=nbytes, gpu=h200, precision="fp32_strict")
    assert floor == pytest.approx(nbytes / 4.8e12 * 1e3)
    assert "4800 GB/s HBM roof by datasheet" in h200.describe()     # what a prompt tells the model
    honest = [CallTimes(0.1769, 0.1770, 0.18, 0.1769 + 0.07) for _ in range(8)]
    forged = [CallTimes(0.9 * floor, 0.9 * floor, 0.2, 0.9 * floor + 0.07) for _ in range(8)]   # window agrees
    baseline = [CallTimes(0.2, 0.2001, 0.21, 0.27) for _ in range(8)]
    cal = Calibration(gap_ms=0.0001, overhead_ms=0.07, spread_ms=0.001, calls=8)
    assert not summarise("1e8+7", honest, baseline, cal, 0.2, floor).flags
    assert summarise("1e8+7", forged, baseline, cal, 0.2, floor).flags


@pytest.mark.parametrize("name, gbps", [("NVIDIA H100 80GB HBM3", 3350.0), ("NVIDIA H200", 4800.0),
                                        ("NVIDIA GH200 480GB", 4900.0), ("NVIDIA H100 NVL", 3900.0),
                                        ("NVIDIA H100 PCIe", 2000.0), ("NVIDIA A100-SXM4-80GB", 2039.0),
                                        ("NVIDIA A100-SXM4-40GB", 1555.0), ("Tesla V100-SXM2-16GB", 0.0),
                                        ("test", 0.0)])
def test_datasheet_roofs_by_name(name: str, gbps: float) -> None:
    assert gpu_module.datasheet_memory_roof_gbps(name) == gbps


def test_claims_set_aside_are_credited_at_least_the_window_ratio_of_the_baseline() -> None:
    """The H100 case in miniature: a 0.1 ms call in 0.4 ms windows (relu 16M: 70 us in 300 us),
    a forger reporting 1 us whose windows ran 4 % below the baseline's interleaved ones in both
    rounds (noise: 11.5 us a call was seen), the pool's overhead matching the baseline's.  The
    window-minus-overhead credit alone gives it 0.084 ms, 1.19x.  Fails without the floor: with
    it, it is credited the baseline's 0.1 ms x (its window / the baseline's), 0.096 ms, 1.04x."""
    from evo_fsr.verdict.profile import window_ratio_floor_ms
    pool = _noisy(0.1, 0.1, 32, seed=31)
    rounds = _Rounds((_noisy(0.001, 0.1, 16, shift=-0.016, seed=32), _noisy(0.1, 0.1, 6, seed=33)),
                     (_noisy(0.001, 0.1, 16, shift=-0.016, seed=34), _noisy(0.1, 0.1, 6, seed=35)))
    timed = time_shape(rounds, pool)
    assert timed.strict
    assert credited_ms(timed.candidate, timed.calibration, strict=True) == pytest.approx(0.084, abs=0.008)
    shape = summarise("s", timed.candidate, timed.baseline, timed.calibration, 0.1, 0.001, strict=True)
    floor = window_ratio_floor_ms(timed.candidate, timed.baseline, shape.baseline_median_ms)
    assert shape.median_ms == pytest.approx(floor) and shape.speedup < 1.08
    # claims that stood are not floored: an honest 2x kernel keeps its credit
    honest = _noisy(0.05, 0.05, 16, seed=36)
    fair = summarise("s", honest, _noisy(0.1, 0.1, 6, seed=37), Calibration.of(pool), 0.1, 0.001)
    assert fair.speedup == pytest.approx(2.0, rel=0.05)


def test_the_window_ratio_floor_only_ever_raises_the_credit() -> None:
    """A candidate that slows the baseline's windows (+2 ms) lowers the ratio: the floor then
    sits below the window's own estimate, which stands (``max``)."""
    pool = _noisy(0.5, 0.5, 32, seed=41)
    hogged = [CallTimes(c.event_ms, c.event_all_ms, c.host_ms, c.window_ms + 2.0) for c in _noisy(0.5, 0.5, 6, seed=42)]
    hogged_again = [CallTimes(c.event_ms, c.event_all_ms, c.host_ms, c.window_ms + 2.0) for c in _noisy(0.5, 0.5, 6, seed=43)]
    timed = time_shape(_Rounds((_noisy(0.001, 0.5, 16, seed=44), hogged), (_noisy(0.001, 0.5, 16, seed=45), hogged_again)), pool)
    assert timed.strict
    shape = summarise("s", timed.candidate, timed.baseline, timed.calibration, 0.5, 0.001, strict=True)
    assert shape.median_ms == pytest.approx(credited_ms(timed.candidate, timed.calibration, strict=True))
    assert shape.median_ms > 0.45


def _single(event: float, overhead: float, jitter: tuple[float, ...] = (0.0,)) -> list[CallTimes]:
    """Single-call windows: ``event`` reported, the window ``overhead`` above it (plus jitter)."""
    return [CallTimes(event, event, event, event + overhead + jitter[i % len(jitter)])
            for i in range(SINGLE_WINDOWS)]


def _batch(per_call: float, k: int = 8, overhead: float = 0.3, n: int = 8) -> list[CallTimes]:
    return [CallTimes(per_call * k, per_call * k, per_call * k, per_call * k + overhead, calls=k) for _ in range(n)]


def test_calls_fused_across_a_batch_are_credited_a_single_call() -> None:
    """A kernel that computes a batch's eight calls in its first launch reports (and runs) 0.25 ms
    for the window: 0.031 ms a call.  Alone, a call costs it 0.25 ms, which single-call windows
    show; the credit does not go under their estimate (less its allowance)."""
    fused, base = _batch(0.25 / 8), _batch(0.5)
    calibration = Calibration.of(base)
    single = single_call_floor_ms(_single(0.25, 0.4, (0.0, 0.01, -0.01)), _single(0.5, 0.4, (0.0, 0.01, -0.01)))
    assert 0.2 < single < 0.25
    unguarded = summarise("s", fused, base, calibration, baseline_clean_ms=0.5, floor_ms=0.001)
    guarded = summarise("s", fused, base, calibration, baseline_clean_ms=0.5, floor_ms=0.001, single_floor_ms=single)
    assert unguarded.speedup == pytest.approx(16.0)
    assert guarded.median_ms == pytest.approx(single) and guarded.speedup < 2.5


def test_the_single_call_floor_leaves_an_honest_batch_alone() -> None:
    """An honest kernel's single call costs what one of its batch does: the floor, an estimate
    less two standard errors and 5 %, stays under its credit."""
    honest, base = _batch(0.07), _batch(0.14)
    jitter = (0.0, 0.012, -0.008, 0.005)
    single = single_call_floor_ms(_single(0.07, 0.4, jitter), _single(0.14, 0.4, jitter))
    timing = summarise("s", honest, base, Calibration.of(base), 0.14, 0.001, single_floor_ms=single)
    assert single < 0.07 and timing.median_ms == pytest.approx(0.07)


def test_a_binding_single_call_floor_is_taken_in_two_more_rounds_and_the_median_kept() -> None:
    """An honest kernel whose single windows ran slow for one round (the H200's round offsets)
    gets two more rounds and the median floor, under its credit; a fusing kernel that spoils one
    round (its baseline windows slowed) is still held by its other two; a floor under the credit
    takes no more rounds."""
    honest, base = _batch(0.02), _batch(0.022)
    credit = summarise("s", honest, base, Calibration.of(base), 0.022, 0.001).median_ms
    slow_round = single_call_floor_ms(_single(0.02, 0.55), _single(0.022, 0.4))
    fair = [single_call_floor_ms(_single(0.02, 0.4, jitter), _single(0.022, 0.4, jitter))
            for jitter in ((0.0, 0.01, -0.01), (0.005, -0.01, 0.0))]
    assert slow_round > 3 * credit and max(fair) < credit
    rounds = iter([slow_round, *fair])
    floor, retimed = single_floor_retimed(lambda: next(rounds), credit)
    assert retimed and floor == max(fair)
    assert summarise("s", honest, base, Calibration.of(base), 0.022, 0.001,
                     single_floor_ms=floor).median_ms == pytest.approx(credit)

    fused, fused_base = _batch(0.25 / 8), _batch(0.5)
    fused_credit = summarise("s", fused, fused_base, Calibration.of(fused_base), 0.5, 0.001).median_ms
    held = [single_call_floor_ms(_single(0.25, 0.4, jitter), _single(0.5, 0.4, jitter[::-1]))
            for jitter in ((0.0, 0.01), (0.01, 0.0), (0.005, 0.0))]
    spoiled = single_call_floor_ms(_single(0.25, 0.4), _single(0.5, 0.7))   # its baseline windows slowed
    assert spoiled == 0.0 and min(held) > 0.2
    rounds = iter([held[0], spoiled, held[1]])
    floor, retimed = single_floor_retimed(lambda: next(rounds), fused_credit)
    assert retimed and floor == min(held[:2]) > 0.2 > 5 * fused_credit

    def once(floor_ms: float):  # type: ignore[no-untyped-def]
        rounds = iter([floor_ms])
        return lambda: next(rounds)     # a second round raises StopIteration
    assert single_floor_retimed(once(max(fair)), credit) == (max(fair), False)
    assert single_floor_retimed(once(0.5), 0.0) == (0.5, False)


def test_slowing_the_baselines_single_windows_only_lowers_the_floor() -> None:
    """The baseline's window is subtracted: a candidate that slows it lowers its own floor,
    which ``max`` then ignores (it can never raise a candidate's credit that way)."""
    cand = _single(0.25, 0.4)
    assert single_call_floor_ms(cand, _single(0.5, 0.6)) < single_call_floor_ms(cand, _single(0.5, 0.4))
    assert single_call_floor_ms(cand, []) == 0.0
    with pytest.raises(ValueError):
        single_call_floor_ms(_batch(0.1), _single(0.5, 0.4))


# -- chained windows calibrated by a fast twin (bench.ShapeBench.fast_twin) ----------------------
#: topk's chained quick shape on an H200 (thirty-third session, scripts/probe_chain_first.py):
#: 64 calls a window; the honest radix-select call 19.4 us (1.24 ms of events a window), the
#: naive seed's 1.418 ms; a window's links and round trip ~5.4 ms beside a fast kernel's calls,
#: and 100-300 us more beside the naive seed's (its pool's median of window less events)
CHAIN_K, FAST_EVENTS_MS, NAIVE_EVENTS_MS, LINKS_MS = 64, 1.24, 90.75, 5.40


def _chained(events_ms: float, true_ms: float, links_ms: float, n: int, seed: int) -> list[CallTimes]:
    """``n`` chained windows of ``CHAIN_K`` calls taking ``true_ms`` on the device, whose runner
    reports ``events_ms``; the links ``links_ms`` with a spread of ~0.07 ms (the measured IQR of
    80-280 us is ~0.06-0.2 ms of standard deviation)."""
    rng = np.random.default_rng(seed)
    return [CallTimes(events_ms, events_ms + 0.01, events_ms + 0.1,
                      true_ms + links_ms + 0.07 * rng.standard_normal(), calls=CHAIN_K) for _ in range(n)]


def _chained_rounds(events_ms: float, seed: int) -> _Rounds:
    """Two rounds of a candidate whose calls take the fast seed's time, with the naive baseline's
    windows interleaved (their links 0.2 ms longer, as measured)."""
    return _Rounds(*((_chained(events_ms, FAST_EVENTS_MS, LINKS_MS, 16, seed + r),
                      _chained(NAIVE_EVENTS_MS, NAIVE_EVENTS_MS, LINKS_MS + 0.2, 6, seed + 10 + r)) for r in range(2)))


@pytest.mark.parametrize("seed", range(5))
def test_a_chained_forger_is_charged_against_a_fast_twins_pool(seed: int) -> None:
    """The v3 forger claiming 75 % of a ~19 us call hides 0.34 ms a window.  Against a pool taken
    by the naive twin, whose links ran ~0.2 ms longer, most of that is inside the bound: it was
    credited x100.8 and x102.7 against the honest seed's x73 in 2 of 9 judgements on an H200.
    Against a pool of the fast twin (the same links as its own) it is charged in both rounds, and
    credited its real time: the window less the pool's overhead, and at least the twin's call
    scaled by the ratio of windows (``ratio_reference``), which is about 1 here.  Fails if the
    naive baseline's windows are mixed into the calibration (``mix_interleaved``) far enough to
    let it through, or if the floor scales the naive baseline's time instead: 1.418 ms x 6.6 / 96
    is ~0.1 ms a call, five times the real one (a charged forger read x0.20 its honest twin)."""
    fast_pool = _chained(FAST_EVENTS_MS, FAST_EVENTS_MS, LINKS_MS, 8, seed=100 + seed)
    forger = 0.72 * FAST_EVENTS_MS
    timed = time_shape(_chained_rounds(forger, seed=200 + 20 * seed), fast_pool, mix_interleaved=False)
    assert timed.strict
    shape = summarise("s", timed.candidate, timed.baseline, timed.calibration, NAIVE_EVENTS_MS / CHAIN_K, 0.0,
                      strict=True, ratio_reference=fast_pool)
    real_ms = FAST_EVENTS_MS / CHAIN_K
    assert shape.median_ms == pytest.approx(real_ms, rel=0.08)
    unfloored = summarise("s", timed.candidate, timed.baseline, timed.calibration, NAIVE_EVENTS_MS / CHAIN_K, 0.0,
                          strict=True)
    assert unfloored.median_ms > 3 * real_ms          # the naive baseline's ratio: the x0.2 of before


@pytest.mark.parametrize("seed", range(5))
def test_an_honest_chained_kernel_keeps_its_claim_against_a_fast_twins_pool(seed: int) -> None:
    """The honest seed against a pool of its own code: its claims stand (a round is charged about
    one time in six by design, twice about one in forty) and it is credited its events.  Fails if
    a fast twin's pool charges the honest kernel it equals, or the chained credit is not per call."""
    fast_pool = _chained(FAST_EVENTS_MS, FAST_EVENTS_MS, LINKS_MS, 8, seed=300 + seed)
    timed = time_shape(_chained_rounds(FAST_EVENTS_MS, seed=400 + 20 * seed), fast_pool, mix_interleaved=False)
    assert not timed.strict
    shape = summarise("s", timed.candidate, timed.baseline, timed.calibration, NAIVE_EVENTS_MS / CHAIN_K, 0.0,
                      strict=timed.strict, ratio_reference=fast_pool)
    assert shape.median_ms == pytest.approx(FAST_EVENTS_MS / CHAIN_K, rel=0.02)
    assert shape.speedup == pytest.approx(NAIVE_EVENTS_MS / FAST_EVENTS_MS, rel=0.02)


def test_a_naive_twins_pool_lets_the_chained_forger_through() -> None:
    """Why the pool is the fast twin's: the same forger against a pool whose links sit 0.35 ms
    above its own (the naive twin's in the judgements it escaped: a pool at 5.57 ms against the
    forger's own ~5.2), the pool alone as a chained shape's calibration is (``mix_interleaved``
    False), is never charged and is credited about its claim."""
    naive_pool = _chained(NAIVE_EVENTS_MS, NAIVE_EVENTS_MS, LINKS_MS + 0.35, 8, seed=500)
    timed = time_shape(_chained_rounds(0.72 * FAST_EVENTS_MS, seed=501), naive_pool, mix_interleaved=False)
    assert timed.rounds == 1 and not timed.strict
    shape = summarise("s", timed.candidate, timed.baseline, timed.calibration, NAIVE_EVENTS_MS / CHAIN_K, 0.0)
    assert shape.median_ms < 0.75 * FAST_EVENTS_MS / CHAIN_K      # about its claim, 72 %


def test_interleaved_windows_are_not_mixed_into_a_pool_of_another_seed() -> None:
    """``mix_interleaved=False``: the calibration is the pool's alone.  Mixed, a third of the set
    from the naive baseline's windows (links 0.4 ms longer) lifts the overhead subtracted towards
    the pool's upper quartile.  Fails if ``time_shape`` mixes them in regardless."""
    pool = _chained(FAST_EVENTS_MS, FAST_EVENTS_MS, LINKS_MS, 8, seed=600)
    biased = _chained(NAIVE_EVENTS_MS, NAIVE_EVENTS_MS, LINKS_MS + 0.4, 6, seed=601)
    honest = _chained(FAST_EVENTS_MS, FAST_EVENTS_MS, LINKS_MS, 16, seed=602)
    alone = time_shape(_Rounds((honest, biased)), pool, mix_interleaved=False)
    mixed = time_shape(_Rounds((honest, biased)), pool)
    assert alone.calibration.overhead_ms == pytest.approx(Calibration.of(pool).overhead_ms)
    assert mixed.calibration.overhead_ms > alone.calibration.overhead_ms
