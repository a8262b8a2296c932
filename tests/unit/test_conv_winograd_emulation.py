"""conv2d's Winograd F(2x2, 3x3) path (implicit_gemm_v2.cu, knob WINOGRAD: its filter tile, 0 off), emulated in NumPy.

tests/unit/conv_winograd_emulator.py replays the kernel's tile mapping, gathers, transforms,
shared-memory slots, fragment reads and epilogue; in float64 it must match the reference to
rounding on every 3x3 stride-1 validation shape and on shapes that cut every tile edge (K not a
multiple of the filter tile, C not a multiple of 8, odd P and Q, pad 0, tiles spanning images).
The GPU suite still validates the compiled kernel; this pins the arithmetic it must agree with.
"""
from __future__ import annotations

import numpy as np
import pytest

from bank_model import conflict_free_128bit  # tests/unit is on sys.path
from conv_winograd_emulator import run, smem_floats
from evo_fsr.knobs import parse_knobs
from evo_fsr.tasks import get_task

TASK = get_task("conv2d")
SOURCE = TASK.seeds()["implicit_gemm_v2"]
KNOBS = parse_knobs(SOURCE)
DIMS = ("N", "C", "H", "W", "K", "R", "S", "pad", "stride")
WINOGRAD_SHAPES = [
    {k: int(v) for k, v in s.env.items() if k in DIMS} for s in TASK.validation
    if s.env["R"] == 3 and s.env["S"] == 3 and s.env["stride"] == 1
] + [
    dict(N=3, C=9, H=6, W=5, K=70, R=3, S=3, pad=1, stride=1),     # K tail, C tail, odd Q, tiles span images
    dict(N=1, C=17, H=3, W=3, K=1, R=3, S=3, pad=0, stride=1),     # one output, C over two steps + tail
    dict(N=2, C=8, H=10, W=9, K=33, R=3, S=3, pad=2, stride=1),    # pad 2: P, Q grow
]


def _compare(bk: int, shape: dict[str, int]) -> None:
    rng = np.random.default_rng(sum(shape.values()) + bk)
    inputs = TASK.make_inputs(shape, rng, "random")
    want = TASK.reference(inputs, shape)["y"]
    got = run(bk, inputs["x"], inputs["w"], shape["pad"])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10, err_msg=f"WINOGRAD={bk} {shape}")


def test_the_knobs_exist_and_winograd_is_the_default() -> None:
    assert KNOBS["WINOGRAD"].choices == ("0", "32", "64") and KNOBS["WINOGRAD"].value != "0"
    assert any(s["H"] > 3 for s in WINOGRAD_SHAPES) and len(WINOGRAD_SHAPES) >= 6


@pytest.mark.parametrize("bk", [32, 64])
@pytest.mark.parametrize("shape", WINOGRAD_SHAPES, ids=lambda s: "x".join(str(s[k]) for k in DIMS))
def test_emulated_winograd_matches_reference(bk: int, shape: dict[str, int]) -> None:
    _compare(bk, shape)


@pytest.mark.parametrize("bk", [32, 64])
def test_shared_memory_fits_and_matches_the_kernel_formula(bk: int) -> None:
    main = 2 * (16 * 8 * 32 + 16 * 8 * bk) * 4
    epi = 16 * bk * 36 * 4
    assert smem_floats(bk) * 4 == max(main, epi) <= 227 * 1024


def test_float32_transforms_stay_inside_fp32_strict_on_a_deep_layer() -> None:
    """C = 512 as conv5_x (fewer images): the transforms in float32 (NumPy's summation order,
    not the GPU's) keep the error far inside the task's tolerance."""
    shape = dict(N=1, C=512, H=7, W=7, K=32, R=3, S=3, pad=1, stride=1)
    rng = np.random.default_rng(5)
    inputs = TASK.make_inputs(shape, rng, "random")
    want = TASK.reference(inputs, shape)["y"]
    got = run(32, inputs["x"], inputs["w"], 1, dtype=np.float32).astype(np.float64)
    tol = TASK.tol
    err = np.abs(got - want)
    bound = tol["atol"] * np.sqrt(np.mean(want * want)) + tol["rtol"] * np.abs(want)
    assert (err / bound).max() < 0.5, (err / bound).max()     # measured 0.18
    assert np.linalg.norm(err) / np.linalg.norm(want) < 0.2 * tol["norm_rtol"]   # measured 7e-7


def test_a_wrong_transform_is_caught() -> None:
    """The comparison can fail: swapping the sign of one B^T row breaks it."""
    import conv_winograd_emulator as emu
    original = emu._bt4
    emu._bt4 = lambda a, b, c, d: [a - c, b + c, b - c, b - d]
    try:
        with pytest.raises(AssertionError):
            _compare(32, WINOGRAD_SHAPES[1])
    finally:
        emu._bt4 = original


def _lanes(source: str) -> tuple[np.ndarray, np.ndarray]:
    """lt, lk of each lane, as the kernel's source assigns them (the two mappings it may use)."""
    lane = np.arange(32)
    if "const int lt = lane & 3, lk = lane >> 2;" in source:
        return lane & 3, lane >> 2
    assert "const int lt = lane >> 3, lk = lane & 7;" in source, "unknown lane mapping"
    return lane >> 3, lane & 7


@pytest.mark.parametrize("bk", [32, 64])
def test_fragment_reads_and_epilogue_stores_are_bank_conflict_free(bk: int) -> None:
    lt, lk = _lanes(SOURCE)
    m_ld = 32 + 4
    for c in range(8):
        assert conflict_free_128bit(4 * (c * 32 + 4 * lt))                  # V fragment
        for g in range(bk // 32):
            assert conflict_free_128bit(4 * (c * bk + 4 * (lk + 8 * g)))     # U fragment
    for j in range(bk // 8):                                                         # epilogue
        k = lk * 4 + (j & 3) + 32 * (j >> 2)
        for half in range(2):
            assert conflict_free_128bit(4 * (k * m_ld + 16 * half + 4 * lt)), (bk, j)
    # the model tells the mappings apart: lanes 0-7 sharing lt store 4-way conflicted rows
    old_lt, old_lk = np.arange(32) >> 3, np.arange(32) & 7
    assert not conflict_free_128bit(4 * ((old_lk * 4) * m_ld + 4 * old_lt))
