"""Fresh timed inputs (verdict/inputs.py): every call's content is new, drawn only from the two
secret base sets, and linked buffers stay linked under ``mix_rows``."""
from __future__ import annotations

import numpy as np

from evo_fsr.tasks import get_task
from evo_fsr.verdict.inputs import TimedInputs, mix


def test_mix_takes_each_element_from_one_rotated_base() -> None:
    a, b = np.arange(1000, dtype=np.float32), -np.arange(1000, dtype=np.float32) - 1
    out = mix(np, a, b, 7, 13, seed=42)
    from_a = out >= 0
    assert 300 < from_a.sum() < 700                         # a secret mask, about half from each
    idx = np.arange(1000)
    assert np.array_equal(out[from_a], a[(idx[from_a] + 7) % 1000])
    assert np.array_equal(out[~from_a], b[(idx[~from_a] + 13) % 1000])


def test_every_call_changes_order_invariant_answers() -> None:
    """Sums, sorted values and histograms (what a rotation cannot change) differ between calls."""
    task = get_task("sum_reduction")
    shape = task.make_shape({"N": 100_003}, "bench")
    source = TimedInputs(task, shape, np)
    sums = {float(np.sum(next(iter(source.next().values())), dtype=np.float64)) for _ in range(20)}
    assert len(sums) == 20


def test_mix_rows_keeps_linked_buffers_linked() -> None:
    """mse_loss's a is built from b element by element: the relation survives the mix."""
    task = get_task("mse_loss")
    assert task.timed_inputs == "mix_rows"
    shape = task.make_shape({"n": 50_001}, "bench")
    source = TimedInputs(task, shape, np)
    pairs = {(float(a), float(b)) for base in source.bases for a, b in zip(base["a"], base["b"])}
    for _ in range(3):
        fresh = source.next()
        assert {(float(a), float(b)) for a, b in zip(fresh["a"], fresh["b"])} <= pairs    # no pair broken up
        assert not np.array_equal(fresh["a"], source.bases[0]["a"])
