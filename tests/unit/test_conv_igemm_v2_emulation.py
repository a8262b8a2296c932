"""tasks/conv2d/seeds/implicit_gemm_v2.cu's index math, emulated in NumPy against the reference.

No GPU here: tests/unit/conv_igemm_v2_emulator.py replays the kernel's gather, incremental
(c, r, s) walk, loaders, stage ring, tile mapping, epilogue and split-K on every validation
shape of tasks/conv2d/task.yaml (plus 1x1 stride-2, 1x1 vector, tiny and R != S cases), for the
seed's default knobs, hand-picked corner tilings and seeded random valid combinations.  The GPU
suite still has to validate the compiled kernel; this pins the arithmetic it must agree with.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from bank_model import conflict_free_128bit  # tests/unit is on sys.path
from conv_igemm_v2_emulator import Tiles, plan_splits, run
from evo_fsr.knobs import KnobSpace, parse_knobs
from evo_fsr.tasks import get_task

TASK = get_task("conv2d")
SOURCE = TASK.seeds()["implicit_gemm_v2"]
DEFAULTS = {name: knob.value for name, knob in parse_knobs(SOURCE).items()}
DIMS = ("N", "C", "H", "W", "K", "R", "S", "pad", "stride")

#: Corner tilings: one warp; BM > THREADS (two A rows per thread) with fewer B chunks than
#: threads; BK = 32 with 4x8 thread tiles.
CORNERS = [
    dict(WARPS_M="1", WARPS_N="1", LANES_M="8", TM="4", TN="4", BK="8", STAGES="2", SPLIT_K="2", A_LOAD_M="32"),
    dict(WARPS_M="4", WARPS_N="1", LANES_M="8", TM="8", TN="4", BK="8", STAGES="4", SPLIT_K="4", A_LOAD_M="128"),
    dict(WARPS_M="2", WARPS_N="2", LANES_M="4", TM="4", TN="8", BK="32", STAGES="3", SPLIT_K="1", A_LOAD_M="64"),
]
EXTRA_SHAPES = [
    dict(N=2, C=5, H=9, W=11, K=3, R=1, S=1, pad=0, stride=2),     # 1x1 stride 2: general path
    dict(N=1, C=8, H=6, W=6, K=20, R=1, S=1, pad=0, stride=1),     # 1x1 GEMM path, 16-byte filters
    dict(N=1, C=2, H=3, W=3, K=1, R=3, S=3, pad=0, stride=1),      # a single output
    dict(N=1, C=1, H=4, W=7, K=2, R=2, S=5, pad=1, stride=2),      # R != S, even R
]
SHAPES = [{k: int(v) for k, v in s.env.items() if k in DIMS} for s in TASK.validation] + EXTRA_SHAPES


def _random_valid(count: int, seed: int) -> list[dict[str, str]]:
    return KnobSpace.of(SOURCE).sample_valid(random.Random(seed), count)


def _emulate_and_compare(knobs: dict[str, str], shape: dict[str, int], **kwargs) -> None:
    rng = np.random.default_rng(sum(shape.values()))
    inputs = TASK.make_inputs(shape, rng, "random")
    want = TASK.reference(inputs, shape)["y"]
    got = run(Tiles.of(knobs), inputs["x"], inputs["w"], shape["pad"], shape["stride"], **kwargs)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10, err_msg=f"{knobs} {shape} {kwargs}")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(str(s[k]) for k in DIMS))
def test_default_knobs_match_reference_on_every_validation_shape(shape: dict[str, int]) -> None:
    _emulate_and_compare(DEFAULTS, shape)


@pytest.mark.parametrize("knobs", CORNERS + _random_valid(3, seed=12), ids=lambda k: "-".join(k.values()))
def test_other_tilings_match_reference(knobs: dict[str, str]) -> None:
    assert KnobSpace.of(SOURCE).valid(knobs), knobs
    for shape in SHAPES:
        _emulate_and_compare(knobs, shape)


@pytest.mark.parametrize("splits", [2, 3, 5])
def test_uneven_split_k_partitions_and_unaligned_filters(splits: int) -> None:
    """Split counts that do not divide the k-tiles, and the 4-byte filter path on KD % 4 == 0."""
    shape = dict(N=2, C=20, H=9, W=7, K=36, R=3, S=3, pad=1, stride=1)   # KD = 180
    _emulate_and_compare(CORNERS[0], shape, splits_override=splits)
    _emulate_and_compare(DEFAULTS, shape, splits_override=splits, w_aligned=False)


@pytest.mark.parametrize("knobs", [DEFAULTS, CORNERS[1]], ids=["default", "corner1"])
def test_scalar_epilogue_on_a_misaligned_output(knobs: dict[str, str]) -> None:
    """PQ % 4 == 0 but y not 16-byte aligned: the kernel falls back to scalar stores."""
    _emulate_and_compare(knobs, dict(N=2, C=3, H=8, W=6, K=9, R=3, S=3, pad=1, stride=1), out_aligned=False)


def test_split_k_engages_on_conv5_and_not_on_conv2() -> None:
    t = Tiles.of(DEFAULTS)
    shapes = {s.label: s.env for s in TASK.benchmark("resnet50")}
    conv5, conv2 = shapes["conv5_x"], shapes["conv2_x"]

    def plan(d):
        M = d["N"] * d["P"] * d["Q"]
        return plan_splits(t, M, d["K"], d["C"] * d["R"] * d["S"], sms=132)

    assert int(DEFAULTS["SPLIT_K"]) > 1
    assert plan(conv5)[0] > 1, "conv5_x (7x7 outputs) leaves the GPU idle without split-K"
    assert plan(conv2)[0] == 1


@pytest.mark.parametrize("lanes_m", ["4", "8"])
@pytest.mark.parametrize("bk", ["8", "16", "32"])
def test_fragment_loads_are_bank_conflict_free(lanes_m: str, bk: str) -> None:
    """The FFMA loop's float4 reads of As (m contiguous) and of the padded Bs rows (k contiguous)."""
    t = Tiles.of({**DEFAULTS, "LANES_M": lanes_m, "BK": bk})
    lane = np.arange(32)
    lane_m, lane_n = lane // t.LANES_N, lane % t.LANES_N
    for warp_m in range(t.WARPS_M):
        for warp_n in range(t.WARPS_N):
            a_col = warp_m * t.WM + lane_m * 4
            b_row = warp_n * t.WN + lane_n
            for k4 in range(0, t.BK, 4):
                for g in range(t.TM // 4):
                    for u in range(4):
                        assert conflict_free_128bit(4 * ((k4 + u) * t.BM + a_col + g * t.LANES_M * 4))
                for j in range(t.TN):
                    assert conflict_free_128bit(4 * ((b_row + j * t.LANES_N) * t.BS_LD + k4)), (t, j, k4)
    unpadded = (lane % 8) * 16 * 4                 # 8 lanes reading rows of 16 floats, no padding
    assert not conflict_free_128bit(unpadded), "the model cannot tell padding from none"


def test_every_valid_combination_fits_shared_memory_and_tiles() -> None:
    for values in KnobSpace.of(SOURCE).all_valid():
        t = Tiles.of(values)
        assert t.STAGES * (t.A_STAGE + t.B_STAGE) * 4 <= 227 * 1024, values
        assert t.BM % t.A_TM == 0 and t.THREADS % t.A_TM == 0 and t.TM % 4 == 0, values
