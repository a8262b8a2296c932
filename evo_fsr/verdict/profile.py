"""Performance Profiler (trusted side): credited times and the speed-of-light floor.

Each timed call yields four numbers (``CallTimes``): three reported by the runner - CUDA events
around ``launch`` on the harness stream (``event_ms``), to an event recorded after a device-wide
synchronize (``event_all_ms``: work on any stream of the runner's context), the runner's host
clock - and one measured here, in the trusted process, that the runner cannot touch:
``window_ms``, from the moment the call's inputs start to be written (nothing of the candidate's
can see them before) to the end of the trusted side's copy of the outputs.  A runner is untrusted (the candidate runs in it), so its numbers are a claim; the
window is a bound.  Over the timed calls of one shape, the time credited is

    max(median(event_ms), median(event_all_ms) - gap_ms, median(window_ms) - overhead_ms - slack_ms)

where ``gap_ms`` (median device-wide tail) and ``overhead_ms`` (median of window - event) are
calibrated on the trusted baseline runner's calls of the same shape in the same run, and
``slack_ms`` is one standard error of the difference of two medians (the candidate's window and
the baseline's overhead): 1.2533 * sigma * sqrt(1/n_candidate + 1/n_baseline), with sigma the
robust spread (IQR / 1.349) of the baseline's per-call overhead, capped at one IQR.  So work left
on another stream, in another context, on a host thread after ``launch`` returns, or times forged
on the reply pipe are measured and charged, not estimated and allowed: hiding work on fewer than
half of the calls does not move a median, and hiding it on more moves the window's median.

A shape whose credit exceeds its claims (``charged``) is timed again (session.py).  If the second
round's claims agree with the window, that round is its timing: an honest kernel's unlucky round
costs it nothing.  If they disagree again, the claims are set aside (``strict``): both rounds are
credited ``median(window) - overhead_ms``, the window's own estimate with no allowance and the
lowest of three overhead estimates (``strict_calibration``), and never less than the baseline's
time scaled by the ratio of the two roles' window medians (``window_ratio_floor_ms``), so a
runner that forges its times gains nothing on average and, on one evaluation, no more than the
noise of that ratio.  What a runner can still hide is a claim below its
time by less than ``slack_ms``, which is why the allowance is one standard error, not two: an
honest round is charged about one time in six and timed again, and twice in a row about one in
forty.  (With two standard errors and six windows of eight relu calls, on an H100, a runner that
reported 1 us for every call was credited 1.23x the speed of the naive seed it ran.)

The calibration of a candidate's shape is the pool of trusted windows taken before it plus at
most half as many of the baseline windows interleaved with its own, with the spread of the pool
alone (``own_share_calibration``): a candidate that slowed the trusted side's copies while the
baseline ran cannot raise the overhead subtracted from its own windows beyond the pool's upper
quartile, nor stretch the slack; and its overhead is never above the interleaved baseline
windows' own, since the pool's conditions drift (a candidate can only raise those windows, which
the lower of the two ignores).  The pool holds the windows of the calibration rounds alone
(bench.py: a twin runner of the naive seed timed in the candidate's place, in the timing's
pattern, before any candidate code runs); no window of a candidate's timing joins it.

Short kernels are timed in batches (``batching.batch_size``): a window holds k launches on k buffer sets,
each with its own fresh inputs and each checked, so the window's overhead and ``slack_ms`` are
shared by k calls and what a forger hides per call is ``slack_ms / k``; but not launch-bound
shapes (speed-of-light time under ``batching.FUSABLE_FLOOR_MS``), whose k calls a kernel could compute in
the batch's first launch for about the price of one; those take ``bench.LAUNCH_BOUND_FACTOR``
times the timed calls and the calibration windows instead, since one standard error of their
windows (the runner's round trip: a spread of 63-81 us around an 18.5 us topk call on an H200)
is the slack.  Medians (never per-call
maxima, which would charge honest kernels every scheduling hiccup).
``under-floor``: faster than max(bytes/roof, flops/peak) is not credible (``memory_roof_gbps``).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from ..types import ShapeTiming


@dataclass(frozen=True)
class CallTimes:
    """One window: ``calls`` launches back to back (a batch; 1 but for short kernels)."""

    event_ms: float             # runner: CUDA events around the launches, harness stream
    event_all_ms: float         # runner: to an event after a device-wide synchronize
    host_ms: float              # runner: host clock around both
    window_ms: float            # trusted: first input written .. trusted copy of the last outputs done
    calls: int = 1              # launches in the window
    # the window's parts on the trusted clock (0: not recorded), for diagnostics only, never
    # credited: its start .. the inputs loaded and the L2 flushed; the command sent .. the
    # outputs copied after its completion mark (the reply read, where it had none)
    prep_ms: float = 0.0
    send_ms: float = 0.0
    # the window ended at the calls' completion mark (completion.py); False: at the runner's
    # reply (no mark, or one whose hash was not that of the outputs copied)
    marked: bool = True
    # the runner process's CPU, every thread's, read at rest just before it was woken for the
    # window and just after the window closed, and the trusted ms between those reads (the wait
    # for the stop capped; runner/host_usage.py; -1 and 0: not read)
    runner_cpu_ms: float = -1.0
    runner_span_ms: float = 0.0
    # the serving thread's own CPU over the same span (host_usage.serving_thread_ns; -1: not read)
    runner_serving_ms: float = -1.0
    # the runner's other threads' runs on a CPU over the same span (host_usage.other_runs; -1: not read)
    runner_other_runs: int = -1


@dataclass(frozen=True)
class Calibration:
    """From trusted (baseline) calls: what the claim and the bound differ by when nothing hides."""

    gap_ms: float               # median(event_all - event)
    overhead_ms: float          # median(window - event)
    spread_ms: float            # robust per-call standard deviation of (window - event): IQR / 1.349
    calls: int                  # trusted calls it was taken from

    @classmethod
    def of(cls, calls: Sequence[CallTimes]) -> "Calibration":
        if not calls:
            raise ValueError("calibration needs at least one trusted call")
        gaps = [c.event_all_ms - c.event_ms for c in calls]
        overheads = [c.window_ms - c.event_ms for c in calls]
        quartiles = statistics.quantiles(overheads, n=4) if len(overheads) >= 2 else [overheads[0]] * 3
        return cls(gap_ms=max(0.0, statistics.median(gaps)), overhead_ms=max(0.0, statistics.median(overheads)),
                   spread_ms=max(0.0, quartiles[2] - quartiles[0]) / 1.349, calls=len(calls))

    def slack_ms(self, candidate_calls: int) -> float:
        """``SLACK_STANDARD_ERRORS`` standard errors of median(candidate window) -
        median(baseline overhead), and never more than one call's interquartile range."""
        n = max(1, candidate_calls)
        standard_error = 1.2533 * self.spread_ms * math.sqrt(1.0 / n + 1.0 / max(1, self.calls))
        return min(SLACK_STANDARD_ERRORS * standard_error, 1.349 * self.spread_ms)


#: The allowance of the window bound, in standard errors of the difference of two medians.
SLACK_STANDARD_ERRORS = 1.0


#: What set a shape's credited time (``ShapeTiming.credited_by``): its own stream's events (the
#: claim held), the device-wide tail, the trusted window, the window with the claims set aside
#: (``strict``), the baseline scaled by the window ratio, or the single-call floor.
CREDIT_TERMS = ("events", "device-wide", "window", "window-strict", "window-ratio", "single-call")


def credit_terms(calls: Sequence[CallTimes], calibration: Calibration, strict: bool = False) -> dict[str, float]:
    """The three terms of ``credited_ms`` by name (``CREDIT_TERMS``)."""
    bound = statistics.median(c.window_ms for c in calls) - calibration.overhead_ms
    return {"events": statistics.median(c.event_ms for c in calls),
            "device-wide": statistics.median(c.event_all_ms for c in calls) - calibration.gap_ms,
            "window-strict" if strict else "window": bound if strict else bound - calibration.slack_ms(len(calls))}


def credited_ms(calls: Sequence[CallTimes], calibration: Calibration, strict: bool = False) -> float:
    """The time credited to a shape's calls (see the module docstring); ``strict``: the claims
    were charged in two rounds, so the window's estimate is credited with no allowance."""
    return max(credit_terms(calls, calibration, strict).values())


def charged(calls: Sequence[CallTimes], calibration: Calibration, margin: float = 1.02) -> bool:
    """Whether the credit exceeds what the calls' own stream events claimed (escaped or forged time)."""
    return credited_ms(calls, calibration) > margin * statistics.median(c.event_ms for c in calls) + 1e-3


@dataclass(frozen=True)
class ShapeCalls:
    """One shape's timed windows as they are credited (``time_shape``)."""

    candidate: tuple[CallTimes, ...]
    baseline: tuple[CallTimes, ...]
    calibration: Calibration
    strict: bool                # the claims were charged in both rounds and set aside
    rounds: int


Round = Callable[[], tuple[list[CallTimes], list[CallTimes]]]


def own_share_calibration(prior: Sequence[CallTimes], own: Sequence[CallTimes]) -> Calibration:
    """The calibration of one candidate's shape: the trusted windows taken before it (the clean
    ones and earlier candidates' interleaved ones) and at most half as many of the baseline
    windows interleaved with its own.  Those run in the timing's conditions, which the clean
    ones do not quite share; but the candidate's process is alive during them, and one that
    slowed the trusted side's copies while the baseline ran (and not while it ran itself) would
    raise the overhead subtracted from its own windows.  With its windows at most a third of the
    set, it moves the medians no further than the upper quartile of the rest; and the spread
    (hence the slack) is the earlier windows' alone, since a third is enough to stretch an
    interquartile range without bound.  ``prior`` is never empty: the clean windows come first.

    And the overhead is never more than that of the interleaved baseline windows alone: those
    share the candidate's very conditions, and the pool's drifts.  On an H200 (forty-first
    session, ``scripts/probe_rounds.py``, monte_carlo 2^24, eight calls to a window of ~1.4 ms,
    twelve fresh evaluators) the pool's overhead sat up to 120 us above the interleaved
    baseline's, and three forgers claiming 15-30 % under their time (suite v4's early replier,
    first-round forger and host-awake spinner) went uncharged in the first round of 6-9 of 12
    evaluations; with the lower of the two, in 2-3 of 12, and the honest seed was charged in 2
    of 12 (1 before).  A candidate can only raise the baseline's windows (slowing them), which
    the lower of the two ignores, so no candidate is credited more by it than before."""
    mixed = Calibration.of([*prior, *own[:max(1, len(prior) // 2)]])
    overhead_ms = mixed.overhead_ms
    if own:
        overhead_ms = min(overhead_ms, max(0.0, statistics.median(c.window_ms - c.event_ms for c in own)))
    return replace(mixed, overhead_ms=overhead_ms, spread_ms=Calibration.of(prior).spread_ms)


def strict_calibration(calibration: Calibration, prior: Sequence[CallTimes],
                       own: Sequence[CallTimes], fresh: Sequence[CallTimes] = ()) -> Calibration:
    """The calibration of a shape whose claims were set aside: the lowest of three overhead
    estimates, the one its claims were judged with, the pool's alone (the twin's windows, taken
    in the candidate's role) and that of the baseline windows interleaved with its own (its very
    conditions; a candidate can only raise theirs, which the lowest ignores).  On an H100 (relu,
    16M, eight calls a window) a runner reporting 1 us per call ran windows 0.1-0.3 ms below a
    pool of back-to-back clean windows and was credited 1.07-1.52x the naive seed it ran.

    ``fresh``: a pool taken right after the second charge with the candidate's process killed
    (``time_shape``).  It is as clean as the old pool and shares the conditions of the rounds
    it follows, so it replaces the estimates that rest on the old pool: the lower of its
    overhead and the interleaved windows' (which a candidate can only raise)."""
    if fresh:
        estimates = [Calibration.of(fresh).overhead_ms]
    else:
        estimates = [calibration.overhead_ms, Calibration.of(prior).overhead_ms]
    if own:
        estimates.append(statistics.median(c.window_ms - c.event_ms for c in own))
    return replace(calibration, overhead_ms=max(0.0, min(estimates)))


def time_shape(timing_round: Round, pool: Sequence[CallTimes],
               fresh_pool: Callable[[], Sequence[CallTimes]] | None = None,
               mix_interleaved: bool = True) -> ShapeCalls:
    """One round of candidate windows with baseline windows interleaved (``timing_round``), and
    a second when the first is ``charged`` (see the module docstring).  ``pool``: the shape's
    trusted calibration windows (``own_share_calibration``), taken by the twin before any
    candidate code ran; nothing of a candidate's timing joins it (a baseline window
    interleaved with a candidate is taken in the baseline's role, a runner called one window in
    three, whose overhead ran above the candidate's on an H100).

    ``fresh_pool`` (``EvalConfig.fresh_pool_retime``; None: off): where the second round is
    charged too, a pool taken at once, with no process of the candidate's alive (session.py
    kills its runner first and starts a fresh one after), whose overhead the strict credit
    subtracts instead of the old pool's (``strict_calibration``).  The overhead of every trusted
    window can drift after the pool was taken, in both roles alike (dot_product 2^24 on an H200,
    twenty-eighth and twenty-ninth sessions: 85-170 us over a 1.46-1.56 ms pool, which charged
    an honest kernel in both rounds and credited it 52.6 us a call for 35.5).  The interleaved
    baseline's windows share that drift but may be slowed by the candidate (copy-engine
    transfers the idle gate does not see); a pool taken after its process is dead shares the
    drift and nothing of the candidate's.  Not a third round: where one round's escape is
    likely (a launch-bound shape, whose slack is most of its call), a third chance to escape
    raised a 5 % claim's median credit from its whole time to the claim in the CPU model
    (tests/adversarial/test_adversarial_v3_cpu.py); re-judging the two charged rounds gives a
    forger nothing: against a clean pool its windows still hold its whole time.

    ``mix_interleaved=False``: the calibration is the pool's alone, none of the interleaved
    baseline windows mixed in; for a pool taken by a twin other than the baseline's seed (a
    chained shape's fast twin, bench.py), whose overhead the baseline's windows do not share."""
    prior = list(pool)
    mixed = (lambda windows: windows) if mix_interleaved else (lambda windows: [])
    candidate, baseline = timing_round()
    calibration = own_share_calibration(prior, mixed(baseline))
    rounds, strict = 1, False
    if charged(candidate, calibration):
        again, baseline_again = timing_round()
        calibration = own_share_calibration(prior, mixed(baseline_again + baseline))   # the latest first
        rounds, strict = 2, charged(again, calibration)
        candidate = candidate + again if strict else again
        baseline = baseline + baseline_again
        if strict:
            fresh = list(fresh_pool()) if fresh_pool is not None else []
            calibration = strict_calibration(calibration, prior, baseline, fresh)
    return ShapeCalls(tuple(candidate), tuple(baseline), calibration, strict=strict, rounds=rounds)


def window_ratio_floor_ms(candidate: Sequence[CallTimes], baseline: Sequence[CallTimes], base_ms: float) -> float:
    """The least a shape whose claims were set aside is credited, per call: the baseline's time
    scaled by the ratio of the two medians of trusted windows taken in the same rounds,
    interleaved.  With the same overhead O in both, (O + t) / (O + t_base) lies between t /
    t_base and 1 for a faster kernel, so the floor is at or above its real time: a forger's
    reward is bounded by the noise of a ratio of whole windows (a few %), not by that of a
    window minus an overhead estimate, which on a kernel a quarter of its window is four times
    larger.  On an H100 (relu 16M, eight calls a window, 70 us a call in 300 us windows) a
    runner reporting 1 us a call was credited 0.91-1.19x the naive seed under the window-minus-
    overhead credit alone, in ten fresh evaluators, and 1.22x in one run of the adversarial suite.
    The price falls on honest kernels that are charged twice (none of ten naive evaluations in
    that run, with the read-pass flush): a fast kernel's credit is compressed towards 1x.  A
    candidate that slows the baseline's windows only lowers the floor, which ``max`` ignores."""
    cand = statistics.median(c.window_ms for c in candidate)
    base = statistics.median(c.window_ms for c in baseline) if baseline else 0.0
    return base_ms * cand / base if base > 0 and base_ms > 0 else 0.0


#: Single-call windows of each role taken per batched shape (``single_call_floor_ms``).
SINGLE_WINDOWS = 8
#: The single-call floor's allowance, in standard errors of the difference of two medians.
SINGLE_FLOOR_STANDARD_ERRORS = 2.0
#: ... and the share of the single-call estimate it credits at most (an honest call alone lacks
#: the launch pipelining of a batch: a few us slower than one of a batch).
SINGLE_FLOOR_SHARE = 0.95
#: A floor over this multiple of the batched credit has its single-call windows taken in two
#: more rounds (``single_floor_retimed``).
SINGLE_FLOOR_RETIME = 1.1


def single_floor_retimed(single_round: Callable[[], float], credit_ms: float) -> tuple[float, bool]:
    """The single-call floor of a batched shape (``single_round``: one round of single-call
    windows and its ``single_call_floor_ms``), and whether more rounds were taken: where the
    first round's floor binds (over ``SINGLE_FLOOR_RETIME`` times the batched credit
    ``credit_ms``), the median of it and two more rounds'.  On an H200 (twenty-third session) the candidate's single windows
    of one round sat 0.05-0.15 ms above the baseline's interleaved with them for the whole
    round, in windows of 0.7-1.2 ms, and the next round's mostly did not: the first round's
    floor bound an honest kernel in 6 of 24 shapes (sum_reduction's persistent seed read 0.63x
    to 1.07x the naive seed over eight evaluations in one evaluator).  The median, not the
    lowest: a kernel that fuses a batch pays for its whole call alone in every round, and one
    that spoils one round (slowing the baseline's windows in it, or by luck) moves the median
    of three no lower than its other rounds; the lowest of two let the 4M-element fusion
    reproduction read 2x its honest twin (H200), against ~1.2x with one round."""
    floor_ms = single_round()
    if credit_ms <= 0 or floor_ms <= SINGLE_FLOOR_RETIME * credit_ms:
        return floor_ms, False
    return statistics.median([floor_ms, single_round(), single_round()]), True


def single_call_floor_ms(candidate: Sequence[CallTimes], baseline: Sequence[CallTimes]) -> float:
    """The least a batched shape is credited per call: what single-call windows prove a call of
    the candidate costs.  A kernel that fuses a batch's k calls into its first launch (SECURITY.md)
    pays for one call in a window of one, so its batch credit (fused / k) is undone here.  The
    estimate is the candidate's single window less the baseline's taken interleaved, plus the
    baseline's own call (its events: the trusted runner's), less ``SINGLE_FLOOR_STANDARD_ERRORS``
    standard errors (the baseline's spread of window minus events), times ``SINGLE_FLOOR_SHARE``.
    The baseline's runner, called one window in two here, carries at least the candidate's
    overhead, so the estimate errs low; a candidate that slows the baseline's windows only lowers
    it, and it is combined with ``max``."""
    if not candidate or not baseline:
        return 0.0
    if any(c.calls != 1 for c in [*candidate, *baseline]):
        raise ValueError("single-call windows hold one call")
    spread = Calibration.of(baseline).spread_ms
    error = 1.2533 * spread * math.sqrt(1.0 / len(candidate) + 1.0 / len(baseline))
    estimate = (statistics.median(c.window_ms for c in candidate) - statistics.median(c.window_ms for c in baseline)
                + statistics.median(c.event_ms for c in baseline))
    return max(0.0, SINGLE_FLOOR_SHARE * (estimate - SINGLE_FLOOR_STANDARD_ERRORS * error))


def summarise(shape_label: str, candidate: Sequence[CallTimes], baseline: Sequence[CallTimes],
              calibration: Calibration, baseline_clean_ms: float, floor_ms: float,
              library_ms: float = 0.0, strict: bool = False, single_floor_ms: float = 0.0,
              ratio_reference: Sequence[CallTimes] = ()) -> ShapeTiming:
    """One shape's timing, per call (windows of ``calls`` launches: every window of a shape,
    the baseline's and the calibration's included, has the same number).  The baseline's time
    is the lower of its interleaved credit and its median with no candidate process alive
    (``baseline_clean_ms``, per call): a candidate that slows the GPU while the baseline runs
    gains nothing.  ``strict``: the candidate's claims were set aside (``credited_ms``), and it is
    credited at least ``window_ratio_floor_ms``; a batched shape, at least ``single_floor_ms``
    (``single_call_floor_ms``).  ``credited_by`` names the term that set the credit
    (``CREDIT_TERMS``): an honest kernel's is "events"; any other says a bound took over.

    ``ratio_reference``: trusted windows of the shape's batch whose own events give the time a
    call the window ratio scales (``window_ratio_floor_ms``) in place of the interleaved
    baseline's: a chained shape's pool, taken by a fast twin (bench.py).  A chained window is
    mostly links (chain.py: ~85 % of topk's quick shape with a ~20 us call on an H200), so the
    ratio to the naive baseline's windows credits a fast kernel several times its time (a
    charged forger read x0.20 its honest twin); against a twin as fast as itself the ratio is
    about 1, and the floor about its own time."""
    k = candidate[0].calls
    if any(c.calls != k for c in [*candidate, *baseline, *ratio_reference]):
        raise ValueError(f"{shape_label}: windows of different batch sizes")
    terms = {name: ms / k for name, ms in credit_terms(candidate, calibration, strict).items()}
    base_interleaved = credited_ms(baseline, calibration) / k
    base = min(base_interleaved, baseline_clean_ms) if baseline_clean_ms > 0 else base_interleaved
    if strict and ratio_reference:
        reference_ms = statistics.median(c.event_ms for c in ratio_reference) / k
        terms["window-ratio"] = window_ratio_floor_ms(candidate, ratio_reference, reference_ms)
    elif strict:
        terms["window-ratio"] = window_ratio_floor_ms(candidate, baseline, base)
    terms["single-call"] = single_floor_ms
    cand = max(terms.values())
    # the first term within a nanosecond of the credit: events before the bounds they equal
    credited_by = next(name for name, ms in terms.items() if ms >= cand - 1e-6)
    flags = []
    if cand < floor_ms:
        flags.append(f"under-floor: {cand:.4g} ms is below the speed-of-light floor {floor_ms:.4g} ms")
    return ShapeTiming(shape_label=shape_label, median_ms=cand, baseline_median_ms=base,
                       host_median_ms=statistics.median(c.window_ms for c in candidate) / k,
                       baseline_host_median_ms=statistics.median(c.window_ms for c in baseline) / k,
                       trials=len(candidate) * k, speed_of_light_ms=floor_ms, flags=tuple(flags),
                       library_ms=library_ms, credited_by=credited_by)
