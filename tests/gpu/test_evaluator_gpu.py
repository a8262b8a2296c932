"""Evaluator verdicts on real kernels (issue 2's done-when list).  Run with `pytest -m gpu`."""
from __future__ import annotations

import pytest

from evo_fsr.verdict.evaluate import EvalConfig, Evaluator
from evo_fsr.tasks import discover, get_task
from evo_fsr.types import Candidate, Status

from . import kernels

pytestmark = pytest.mark.gpu

QUICK = EvalConfig(benchmark="quick", max_trials=10, min_trials=5, time_budget_s=0.5, validation_timeout_s=10)


@pytest.fixture(scope="module")
def conv() -> Evaluator:
    return Evaluator("conv2d", QUICK)


def _eval(ev: Evaluator, source: str, label: str = ""):  # type: ignore[no-untyped-def]
    return ev.evaluate(Candidate(task="conv2d", source=source, label=label))


def test_naive_seed_is_correct_and_about_as_fast_as_itself(conv: Evaluator) -> None:
    result = _eval(conv, kernels.NAIVE)
    assert result.status is Status.OK, result.summary
    for t in result.timings:
        assert 0.8 < t.speedup < 1.25, t   # the same kernel against itself
        assert t.trials >= 5


def test_off_by_one_on_odd_shapes_is_wrong(conv: Evaluator) -> None:
    result = _eval(conv, kernels.OFF_BY_ONE)
    assert result.status is Status.WRONG
    assert result.mismatch is not None and "nan" in result.mismatch.reason


def test_kernel_that_writes_nothing_is_wrong(conv: Evaluator) -> None:
    result = _eval(conv, kernels.WRITES_NOTHING)
    assert result.status is Status.WRONG
    assert result.rejection == "wrong:unwritten-or-nonfinite"


def test_illegal_address_is_contained_then_next_candidate_is_fine(conv: Evaluator) -> None:
    result = _eval(conv, kernels.ILLEGAL_ADDRESS)
    assert result.status is Status.CRASH, result.summary
    assert _eval(conv, kernels.NAIVE).status is Status.OK


def test_infinite_loop_times_out_then_next_candidate_is_fine() -> None:
    ev = Evaluator("conv2d", EvalConfig(benchmark="quick", max_trials=5, min_trials=5, time_budget_s=0.2,
                                        validation_timeout_s=3))
    result = ev.evaluate(Candidate(task="conv2d", source=kernels.INFINITE_LOOP))
    assert result.status is Status.TIMEOUT, result.summary
    assert ev.evaluate(Candidate(task="conv2d", source=kernels.NAIVE)).status is Status.OK


def test_work_on_another_stream_is_charged(conv: Evaluator) -> None:
    result = _eval(conv, kernels.SIDE_STREAM)
    # the naive kernel on a side stream: its outputs are right, and its time is charged in full
    assert result.status is Status.OK, result.summary
    assert all(t.speedup < 1.25 for t in result.timings), [(t.shape_label, t.speedup) for t in result.timings]
    assert dict(result.counters).get("charged_shapes", 0) > 0
    # the completion mark (verdict/completion.py) does not wait for a non-blocking stream never
    # joined, so its hash is not that of the outputs copied: those windows are timed to the reply
    assert dict(result.counters).get("unmarked_windows", 0) > 0, result.counters


@pytest.mark.parametrize("task_name", discover())
def test_every_seed_of_every_task_is_correct(task_name: str) -> None:
    task = get_task(task_name)
    ev = Evaluator(task, EvalConfig(profile=False, validation_seeds=2))
    try:        # closed: an evaluator left open keeps its runners' CUDA contexts to the session's end
        for name, source in task.seeds().items():
            result = ev.evaluate(Candidate(task=task_name, source=source, label=name))
            assert result.status is Status.OK, f"{task_name}/{name}: {result.summary}\n{result.log('run')[-2000:]}"
    finally:
        ev.close()


def test_the_l2_flush_evicts_a_buffer_written_before_it() -> None:
    """The trusted flush (CupyMemory.flush_l2) leaves nothing of the inputs just loaded in L2: a
    dependent chase over 4096 lines of an 8 MiB buffer, rewritten before each pass, runs at the
    L2's latency per load without the flush and at DRAM's after it."""
    import statistics

    import cupy

    from evo_fsr.testing.l2_probe import Chase, make_chain
    from evo_fsr.verdict.memory import CupyMemory

    memory = CupyMemory()
    host, start = make_chain(8 * 2**20, 4096)
    source = cupy.asarray(host)
    buffer = cupy.empty_like(source)
    chase = Chase(cupy, buffer, start, 4096)
    hot, cold = [], []
    for _ in range(7):
        buffer[...] = source                 # written, as the evaluator writes a call's inputs
        memory.synchronize()
        hot.append(chase.ns_per_load())
        buffer[...] = source
        memory.flush_l2()
        cold.append(chase.ns_per_load())
    assert statistics.median(cold) > 1.5 * statistics.median(hot), (hot, cold)


def test_the_l2_flush_leaves_no_write_back_to_the_timed_call() -> None:
    """A memset flush (the evaluator's before the read pass) left the L2 dirty, and a 92 MB copy
    timed right after it paid for the write-back: 66.0 us against 59.5 us on an H100.  Fails if
    the trusted flush is no faster to follow than a memset of the same buffer."""
    import cupy

    from evo_fsr.testing.l2_probe import MemsetFlush, interleaved_medians
    from evo_fsr.verdict.memory import CupyMemory

    memory = CupyMemory()
    a = cupy.ones(46 * 10**6 // 4, dtype=cupy.float32)
    b = cupy.empty_like(a)
    stream = cupy.cuda.get_current_stream().ptr
    medians = interleaved_medians(cupy, {"memset": MemsetFlush(cupy), "trusted": memory.flush_l2}, lambda: cupy.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, a.nbytes, 3, stream), reps=25)
    assert medians["trusted"] < 0.97 * medians["memset"], medians
