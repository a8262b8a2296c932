"""On a GPU: the fused kernels of the per-call check agree with their array-operation
definitions, and are the ones in use (a kernel that failed its self-check would silently cost
the speed it was written for).  Run with `pytest -m gpu`."""
from __future__ import annotations

import secrets

import numpy as np
import pytest

from evo_fsr.verdict import inputs, validate

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")


@pytest.mark.parametrize("rows", [None, 64])
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8"])
def test_fused_mix_equals_the_array_form_and_is_used(rows: int | None, dtype: str) -> None:
    rng = secrets.SystemRandom()
    a = cp.asarray(np.random.default_rng(1).integers(0, 100, (64, 1000)).astype(dtype))
    b = cp.asarray(np.random.default_rng(2).integers(100, 200, (64, 1000)).astype(dtype))
    key_a, key_b, seed = inputs.permutation_key(rng), inputs.permutation_key(rng), rng.getrandbits(63)
    got = inputs.mix(cp, a, b, key_a, key_b, seed, rows=rows)
    assert inputs._mix_kernels[id(cp)] != "ops", "the fused mix kernel failed its self-check"
    assert bool(cp.array_equal(got, inputs._mix_ops(cp, a, b, key_a, key_b, seed, rows=rows)))


def _cases() -> list[tuple[str, np.ndarray, np.ndarray, float]]:
    rng = np.random.default_rng(7)
    ref = rng.standard_normal(1 << 20) * 10.0
    good = ref.astype(np.float32)
    one_off = good.copy()
    one_off[12345] *= np.float32(1.001)
    nan = good.copy()
    nan[777] = np.nan
    inf_ref = ref.copy()
    inf_ref[5] = np.inf
    tiny = np.full(1 << 16, 1e-40)
    return [("rounded", good, ref, 0.0), ("one element off", one_off, ref, 0.0), ("a NaN", nan, ref, 0.0),
            ("inf in the reference", good, inf_ref, 0.0), ("zeros forgiven by the floor", np.zeros_like(tiny, np.float32),
                                                          tiny, 1e-39),
            ("zeros not forgiven", np.zeros_like(tiny, np.float32), tiny, 0.0),
            ("norm-wise off", (ref * (1 + 3e-6)).astype(np.float32), ref, 0.0)]


@pytest.mark.parametrize("case", range(7))
def test_fused_tolerance_decides_as_the_array_operations(case: int) -> None:
    name, got, ref, floor = _cases()[case]
    tol = {"atol": 1e-6, "rtol": 1e-5, "norm_rtol": 1e-6}
    g, e = cp.asarray(got), cp.asarray(ref)
    fused = validate._within_tolerance_fused(g, e, tol, floor, cp)
    assert fused is not None, "the fused tolerance kernel is unusable"
    assert fused == validate._within_tolerance(validate.widen(g, cp), e, tol, floor, cp), name
    # and the whole comparison agrees with NumPy's
    on_gpu = validate.compare_output("y", g, e, tol, "s", xp=cp, floor=floor)
    on_cpu = validate.compare_output("y", got, ref, tol, "s", xp=np, floor=floor)
    assert (on_gpu is None) == (on_cpu is None), (name, on_gpu, on_cpu)
