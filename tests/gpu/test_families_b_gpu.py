"""Seed families of issue 13, part B, on a GPU (`pytest -m gpu tests/gpu/test_families_b_gpu.py`).

1. Each family validates through the Evaluator (every validation shape, two input sets, the
   determinism re-run) at its default values and at knob combinations chosen to push the
   validation shapes through every regime of its ``launch()`` (warp / cached / looped / split
   rows, the scalar and vector paths, deep look-back chains, every aggregation mode).
2. Each family gives the right answer when every buffer pointer is only 4-byte aligned (the
   buffers start one element past a cudaMalloc boundary), which the Evaluator's own buffers never
   exercise: the scalar heads and fallbacks of the vector paths.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from evo_fsr.knobs import set_knobs
from evo_fsr.tasks import get_task
from evo_fsr.types import Candidate, Status
from evo_fsr.verdict.compile import compile_source
from evo_fsr.verdict.evaluate import EvalConfig, Evaluator
from evo_fsr.verdict.inputs import make_case, np_dtype, scalars_of
from evo_fsr.verdict.validate import check_outputs
from tests.gpu.shard import shard

pytestmark = pytest.mark.gpu

#: (task, seed): knob combinations besides the default, each forcing other regimes on the
#: validation shapes.
COMBOS: dict[tuple[str, str], list[dict[str, str]]] = {
    ("softmax", "regime"): [
        # the split regime (CLUSTER_SMEM_KB 0: no cluster), three vector widths
        {"WARP_ITEMS": "1", "THREADS": "128", "ITEMS": "4", "SPLIT_COLS": "2048", "VEC": "4", "CLUSTER_SMEM_KB": "0"},
        {"WARP_ITEMS": "32", "WARPS_PER_BLOCK": "8", "THREADS": "1024", "ITEMS": "16", "VEC": "1",
         "CLUSTER_SMEM_KB": "0"},
        {"WARP_ITEMS": "2", "THREADS": "256", "ITEMS": "4", "SPLIT_COLS": "4096", "VEC": "2", "CLUSTER_SMEM_KB": "0"},
        # the cluster regime: at 64 KB, 16 CTAs a row for 262144 columns, 8 for 65537 and 2 just
        # above the cached regime's length (1025 and 4099 columns; 1024 cached); at 192 KB, 2 CTAs
        # for 65537 and 8 for 262144, with float2 vectors
        {"THREADS": "256", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "64", "CLUSTER_THREADS": "256",
         "CLUSTER_REG": "0", "CLUSTER_TMA": "0", "CLUSTER_XCHG": "0"},
        {"THREADS": "128", "ITEMS": "8", "VEC": "2", "CLUSTER_SMEM_KB": "192", "CLUSTER_THREADS": "512",
         "CLUSTER_REG": "0", "CLUSTER_TMA": "0", "CLUSTER_XCHG": "0"},
        # the cluster regime with part of each chunk in registers (CLUSTER_REG), with and without
        # the TMA bulk loads (CLUSTER_TMA)
        {"THREADS": "256", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "64", "CLUSTER_THREADS": "256",
         "CLUSTER_REG": "16", "CLUSTER_TMA": "1", "CLUSTER_XCHG": "0"},
        {"THREADS": "128", "ITEMS": "8", "VEC": "1", "CLUSTER_SMEM_KB": "96", "CLUSTER_THREADS": "512",
         "CLUSTER_REG": "16", "CLUSTER_TMA": "0", "CLUSTER_XCHG": "0"},
        {"THREADS": "256", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "64", "CLUSTER_THREADS": "128",
         "CLUSTER_REG": "32", "CLUSTER_TMA": "1", "CLUSTER_XCHG": "0"},
        # CLUSTER_XCHG 1: the (max, sum) partials exchanged by st.async into every CTA's own shared
        # memory (one exchange mbarrier a CTA, relaxed cluster barriers only); the same shapes reach
        # the cluster regime as above. At 64 KB with a register part: 16 CTAs a row for 262144
        # columns (float4, bulk copies behind the register part, 16 slots), 4 for 65537 (staged) and
        # 2 for 1025 and 4099 (chunks in registers); at 192 KB, register-staged loads: 8 CTAs of
        # float2 for 262144 and 2 for 65537, 1025 and 4099
        {"THREADS": "256", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "64", "CLUSTER_THREADS": "256",
         "CLUSTER_REG": "16", "CLUSTER_TMA": "1", "CLUSTER_XCHG": "1"},
        {"THREADS": "128", "ITEMS": "8", "VEC": "2", "CLUSTER_SMEM_KB": "192", "CLUSTER_THREADS": "512",
         "CLUSTER_REG": "0", "CLUSTER_TMA": "0", "CLUSTER_XCHG": "1"},
        {"THREADS": "256", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "64", "CLUSTER_THREADS": "128",
         "CLUSTER_REG": "32", "CLUSTER_TMA": "1", "CLUSTER_XCHG": "1"},
    ],
    ("layernorm", "regime"): [
        # the split regime (CLUSTER_SMEM_KB 0: no cluster)
        {"WARP_ITEMS": "1", "THREADS": "128", "ITEMS": "4", "SPLIT_COLS": "2048", "VEC": "4", "CLUSTER_SMEM_KB": "0"},
        {"WARP_ITEMS": "32", "WARPS_PER_BLOCK": "8", "THREADS": "1024", "ITEMS": "16", "VEC": "1",
         "CLUSTER_SMEM_KB": "0"},
        {"WARP_ITEMS": "2", "THREADS": "256", "ITEMS": "4", "SPLIT_COLS": "4096", "VEC": "2", "CLUSTER_SMEM_KB": "0"},
        # the cluster regime (CLUSTER_SMEM_KB > 0): (count, mean, M2) merged through DSMEM (CLUSTER_XCHG
        # 0, release / acquire cluster barriers, named in each cluster entry since the default is 1)
        {"THREADS": "256", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "16", "CLUSTER_THREADS": "128",
         "CLUSTER_REG": "0", "CLUSTER_TMA": "1", "CLUSTER_XCHG": "0"},
        {"THREADS": "128", "ITEMS": "8", "VEC": "2", "CLUSTER_SMEM_KB": "64", "CLUSTER_THREADS": "256",
         "CLUSTER_REG": "16", "CLUSTER_TMA": "1", "CLUSTER_XCHG": "0"},
        {"THREADS": "256", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "32", "CLUSTER_THREADS": "512",
         "CLUSTER_REG": "8", "CLUSTER_TMA": "0", "CLUSTER_XCHG": "0"},
        {"THREADS": "256", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "128", "CLUSTER_THREADS": "1024",
         "CLUSTER_REG": "16", "CLUSTER_TMA": "1", "CLUSTER_XCHG": "0"},
        # CLUSTER_PERSIST 1: persistent clusters, two chunk buffers a CTA (the next row's bulk copies
        # in flight during this row's merge and write). THREADS * ITEMS < 1000 and WARP_ITEMS <= 16
        # send the validation shapes with cols % 4 == 0 into the cluster regime: 33 x 1000 runs on 9
        # clusters (33 % 9 = 6, up to 4 rows a cluster: both buffers, both parities), 4 x 1024 on one;
        # the third keeps the whole chunk in registers; the last two (CLUSTER_TMA 0, VEC 2) take the
        # fallback (one cluster a row)
        {"WARP_ITEMS": "16", "THREADS": "128", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "32",
         "CLUSTER_THREADS": "256", "CLUSTER_REG": "0", "CLUSTER_TMA": "1", "CLUSTER_PERSIST": "1",
         "CLUSTER_XCHG": "0"},
        {"WARP_ITEMS": "8", "THREADS": "128", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "16",
         "CLUSTER_THREADS": "128", "CLUSTER_REG": "0", "CLUSTER_TMA": "1", "CLUSTER_PERSIST": "1",
         "CLUSTER_XCHG": "0"},
        {"WARP_ITEMS": "4", "THREADS": "128", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "16",
         "CLUSTER_THREADS": "1024", "CLUSTER_REG": "8", "CLUSTER_TMA": "1", "CLUSTER_PERSIST": "1",
         "CLUSTER_XCHG": "0"},
        {"WARP_ITEMS": "16", "THREADS": "128", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "32",
         "CLUSTER_THREADS": "256", "CLUSTER_TMA": "0", "CLUSTER_PERSIST": "1",
         "CLUSTER_XCHG": "0"},
        {"WARP_ITEMS": "16", "THREADS": "128", "ITEMS": "4", "VEC": "2", "CLUSTER_SMEM_KB": "32",
         "CLUSTER_THREADS": "256", "CLUSTER_TMA": "1", "CLUSTER_PERSIST": "1",
         "CLUSTER_XCHG": "0"},
        # CLUSTER_XCHG 1 (one cluster a row): the (count, mean, M2) states exchanged by st.async into
        # every CTA's own shared memory. THREADS * ITEMS = 512 and WARP_ITEMS 16 send 33 x 1000 and
        # 4 x 1024 (float4) into the cluster regime too, not only the odd shapes: clusters of 2 for
        # them and for 777 and 4099 (scalar). The first keeps those chunks in registers (CLUSTER_REG
        # 8) and runs 3 x 65537 on 16 CTAs (16 slots); the second bulk-copies 1000 and 1024 (TMA, no
        # register part; 65537 takes the split regime at 16 KB); the third loads through registers
        # (CLUSTER_TMA 0, float4 for 1000 / 1024), 16 CTAs of 512 threads for 65537
        {"WARP_ITEMS": "16", "THREADS": "128", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "16",
         "CLUSTER_THREADS": "128", "CLUSTER_REG": "8", "CLUSTER_TMA": "1", "CLUSTER_XCHG": "1"},
        {"WARP_ITEMS": "16", "THREADS": "128", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "16",
         "CLUSTER_THREADS": "256", "CLUSTER_REG": "0", "CLUSTER_TMA": "1", "CLUSTER_XCHG": "1"},
        {"WARP_ITEMS": "16", "THREADS": "128", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "32",
         "CLUSTER_THREADS": "512", "CLUSTER_REG": "0", "CLUSTER_TMA": "0", "CLUSTER_XCHG": "1"},
        # CLUSTER_PERSIST 1 with CLUSTER_XCHG 1: two slot sets and two exchange mbarriers (rows k & 1),
        # the first persistent entry's shapes (33 x 1000 on 9 clusters: both sets, both parities)
        {"WARP_ITEMS": "16", "THREADS": "128", "ITEMS": "4", "VEC": "4", "CLUSTER_SMEM_KB": "32",
         "CLUSTER_THREADS": "256", "CLUSTER_REG": "0", "CLUSTER_TMA": "1", "CLUSTER_PERSIST": "1",
         "CLUSTER_XCHG": "1"},
        # the cached block-per-row regime with its registers capped for 2048 threads a SM
        # (CACHED_FULL 1; 0 in the last). WARP_ITEMS 1 sends every shape of more than 32 columns
        # and at most THREADS * ITEMS into it: 33 x 1000 (float4), 129 x 257 (scalar), 4 x 1024,
        # and the benchmark shapes square_4096 and rows_16k_d1024
        {"WARP_ITEMS": "1", "THREADS": "256", "ITEMS": "16", "VEC": "4", "CLUSTER_SMEM_KB": "0",
         "CACHED_FULL": "1"},
        {"WARP_ITEMS": "1", "THREADS": "128", "ITEMS": "8", "VEC": "1", "CLUSTER_SMEM_KB": "0",
         "CACHED_FULL": "1"},
        {"WARP_ITEMS": "1", "THREADS": "512", "ITEMS": "8", "VEC": "2", "CLUSTER_SMEM_KB": "0",
         "CACHED_FULL": "0"},
    ],
    # cross_entropy/tiled: the warp-chunk regime with run-time C (4 rows a lane, float4, read-only
    # loads) and with compile-time C (scalar coalesced loads, one row a lane), the earlier two
    # settings on the new code (C = 1000 takes the warp-per-row path in all of them)
    ("cross_entropy", "tiled"): [
        {"THREADS": "128", "SMALL_C": "16", "BLOCKS_PER_SM": "2", "VEC": "1", "FINISH": "0"},
        {"THREADS": "256", "SMALL_C": "64", "BLOCKS_PER_SM": "8", "VEC": "4", "ROWS_PER_THREAD": "1", "FINISH": "0"},
        {"THREADS": "128", "ROWS_PER_THREAD": "4", "FIXED_C": "0", "SMALL_C": "16", "BLOCKS_PER_SM": "8",
         "VEC": "4", "CACHE": "0"},
        {"THREADS": "512", "ROWS_PER_THREAD": "1", "FIXED_C": "10", "SMALL_C": "64", "BLOCKS_PER_SM": "2",
         "VEC": "1", "CACHE": "1"},
        # FINISH 1: the self-resetting counter and the last block's loads eight at a time
        {"FINISH": "1"},
        {"FINISH": "1", "THREADS": "512", "BLOCKS_PER_SM": "4", "FIXED_C": "0", "VEC": "1", "SMALL_C": "16"},
        # PREFETCH 1: the next chunk's float4s and labels in registers during this chunk's rows (C = 10;
        # the skewed slice at C = 16 with 128 threads); PREFETCH 2: a bulk-copy ring a warp, 2 and 3
        # stages (parities flip), past the 48 KB opt-in (clamped to one block), at 32 registers.
        # Partial chunks: N = 1000003 and 65537; misaligned logits: the 4-byte-aligned test below
        {"PREFETCH": "1"},
        {"PREFETCH": "1", "THREADS": "128", "ROWS_PER_THREAD": "4", "BLOCKS_PER_SM": "2", "CACHE": "0"},
        {"PREFETCH": "2"},
        {"PREFETCH": "2", "PIPE_STAGES": "3", "ROWS_PER_THREAD": "1"},
        {"PREFETCH": "2", "PIPE_STAGES": "3", "THREADS": "512", "ROWS_PER_THREAD": "4", "SMALL_C": "16",
         "BLOCKS_PER_SM": "2"},
        {"PREFETCH": "2", "ROWS_PER_THREAD": "1", "BLOCKS_PER_SM": "8", "FIXED_C": "10"},
    ],
    # maxpool3d/planes: the scalar-tap regime (0), the register-window regime (1) and the default
    # band regime (2) at its narrowest band and output groups
    ("maxpool3d", "planes"): [
        {"REGIME": "0", "THREADS": "64", "ITEMS": "8", "MIN_BLOCKS": "2"},
        {"REGIME": "1", "THREADS": "128", "ITEMS": "2", "OW_PER_THREAD": "8"},
        {"REGIME": "2", "THREADS": "512", "ITEMS": "1", "MIN_BLOCKS": "4", "OW_PER_THREAD": "2", "BAND": "4"},
    ],
    # prefix_sum/lookback: LOAD 0 (cub), 1 (direct blocked), 2 (float4 striped through swizzled
    # shared memory: ITEMS 8, 16, 24 swizzled, 12 not) and 3 (bulk copies, plain layout), with and
    # without CACHE (streaming hints / L2 evict-first), look-back backoff and a register bound;
    # LOAD and CACHE named in every entry, so that a change of the defaults moves no entry (and
    # EARLY_LOOKBACK 0 in the LOAD 3 ones: the resident kernel without the look-back warp)
    ("prefix_sum", "lookback"): [
        {"THREADS": "128", "ITEMS": "4", "SCAN_ALGO": "0", "LOAD": "0", "CACHE": "0"},
        {"THREADS": "512", "ITEMS": "8", "SCAN_ALGO": "1", "LOAD": "0", "CACHE": "1"},
        {"THREADS": "256", "ITEMS": "16", "SCAN_ALGO": "2", "LOAD": "1", "CACHE": "1"},
        {"THREADS": "256", "ITEMS": "24", "LOAD": "2", "CACHE": "0"},
        {"THREADS": "128", "ITEMS": "8", "SCAN_ALGO": "2", "LOAD": "2", "CACHE": "1"},
        {"THREADS": "512", "ITEMS": "12", "SCAN_ALGO": "1", "LOAD": "2", "CACHE": "1"},
        {"THREADS": "256", "ITEMS": "16", "LOAD": "2", "CACHE": "1"},
        {"THREADS": "256", "ITEMS": "24", "LOAD": "3", "CACHE": "1", "MIN_BLOCKS": "8", "EARLY_LOOKBACK": "0"},
        {"THREADS": "128", "ITEMS": "20", "LOAD": "3", "CACHE": "0", "BACKOFF_NS": "256", "MIN_BLOCKS": "6", "EARLY_LOOKBACK": "0"},
        {"THREADS": "512", "ITEMS": "4", "SCAN_ALGO": "0", "LOAD": "3", "BACKOFF_NS": "64", "MIN_BLOCKS": "4", "EARLY_LOOKBACK": "0"},
        # WINDOW 64 / 128: two and four status words a lane per look-back round (LOAD 1, 2, 0);
        # EARLY_LOOKBACK 1: the look-back warp beside the data warps from the block's start (LOAD 3:
        # bulk and scalar tiles, 128 and 512 data threads, with backoff and a register bound)
        {"THREADS": "128", "ITEMS": "8", "LOAD": "1", "CACHE": "0", "WINDOW": "64"},
        {"THREADS": "256", "ITEMS": "12", "LOAD": "2", "CACHE": "1", "WINDOW": "128", "BACKOFF_NS": "1024"},
        {"THREADS": "128", "ITEMS": "4", "SCAN_ALGO": "1", "LOAD": "0", "CACHE": "0", "WINDOW": "128"},
        {"THREADS": "256", "ITEMS": "32", "LOAD": "3", "CACHE": "0", "EARLY_LOOKBACK": "1", "BACKOFF_NS": "1024"},
        {"THREADS": "128", "ITEMS": "4", "LOAD": "3", "CACHE": "1", "EARLY_LOOKBACK": "1", "WINDOW": "64",
         "MIN_BLOCKS": "8"},
        {"THREADS": "512", "ITEMS": "8", "LOAD": "3", "CACHE": "0", "EARLY_LOOKBACK": "1", "BACKOFF_NS": "64"},
    ],
    ("histogram", "privatized"): [
        {"AGG": "0", "COPIES": "1", "VEC": "1", "THREADS": "256", "BLOCKS_PER_SM": "4", "ITEMS": "1"},
        {"AGG": "1", "COPIES": "16", "THREADS": "1024", "BLOCKS_PER_SM": "1", "ITEMS": "4", "VEC": "4"},
        # FINISH 1: no memset; the last block (a self-resetting ticket) moves the device bins to hist
        {"FINISH": "1"},
        {"FINISH": "1", "AGG": "0", "COPIES": "1", "VEC": "1", "THREADS": "256", "BLOCKS_PER_SM": "4", "ITEMS": "1"},
    ],
    ("monte_carlo", "persistent"): [
        {"VEC": "1", "ITEMS": "4", "THREADS": "1024", "BLOCKS_PER_SM": "1"},
        {"VEC": "4", "ITEMS": "1", "THREADS": "128", "BLOCKS_PER_SM": "8"},
        # FINISH 1: the self-resetting ticket (every validation shape in turn, grids of different
        # sizes: a ticket left stale by one would show) and the batched last-block loads
        {"FINISH": "1"},
        {"FINISH": "1", "VEC": "1", "ITEMS": "4", "THREADS": "1024", "BLOCKS_PER_SM": "2"},
    ],
    # linear_regression/gram: the cp.async ring at one stage (load, wait, compute), two stages with
    # 4-byte copies only, three stages past the 48 KB opt-in, four stages at 180 KB a block
    ("linear_regression", "gram"): [
        {"VEC": "1", "THREADS": "128", "ROWS_PER_THREAD": "1", "BLOCKS_PER_SM": "4", "STAGES": "1", "SPLIT": "0",
         "FINISH": "0"},
        {"VEC": "4", "THREADS": "512", "ROWS_PER_THREAD": "2", "BLOCKS_PER_SM": "1", "SPLIT": "0", "FINISH": "0"},
        {"THREADS": "256", "ROWS_PER_THREAD": "2", "STAGES": "3", "BLOCKS_PER_SM": "2", "VEC": "4"},
        {"THREADS": "128", "ROWS_PER_THREAD": "4", "STAGES": "2", "BLOCKS_PER_SM": "4", "VEC": "1"},
        # FINISH 1 (a self-resetting counter, sums in device doubles; every validation shape runs
        # in turn, so a counter left over by a call with another grid would show) and SPLIT 1
        # (one contiguous range of rows a block)
        {"SPLIT": "1", "FINISH": "1"},
        {"SPLIT": "0", "FINISH": "1", "THREADS": "512", "ROWS_PER_THREAD": "1", "BLOCKS_PER_SM": "1", "VEC": "1"},
        {"SPLIT": "1", "FINISH": "0", "STAGES": "3", "THREADS": "256", "ROWS_PER_THREAD": "2"},
        {"SPLIT": "1", "FINISH": "1", "THREADS": "128", "ROWS_PER_THREAD": "4", "STAGES": "4", "BLOCKS_PER_SM": "4",
         "VEC": "4"},
        # SPLIT 2 (a tile queue: a counter reset by the last block, so every validation shape in turn
        # shows a counter left over), with the ring of two, one and four stages and both finishes
        {"SPLIT": "2", "FINISH": "1"},
        {"SPLIT": "2", "FINISH": "0", "STAGES": "1", "THREADS": "128", "ROWS_PER_THREAD": "1", "BLOCKS_PER_SM": "4",
         "VEC": "1"},
        {"SPLIT": "2", "FINISH": "1", "STAGES": "4", "THREADS": "128", "ROWS_PER_THREAD": "4", "BLOCKS_PER_SM": "4"},
    ],
    # default: one CTA cached (N <= 32768), a cluster of 16 cached above (8 where 16 cannot be
    # scheduled), plain shared atomics; these: one CTA for every N (cached, then re-reading x past
    # 49152 keys), a cluster of 4 (uncached at N = 2^18), 2, the old defaults (8, match-any
    # aggregation), and 16 from N = 4097 up with 512 threads re-reading x from L2
    ("topk", "radix_select"): [
        {"SINGLE_MAX": "262144", "THREADS": "512", "ITEMS": "4", "RADIX_BITS": "11", "AGG": "0"},
        {"SINGLE_MAX": "4096", "CLUSTER": "4", "RADIX_BITS": "4", "ITEMS": "1", "AGG": "1"},
        {"SINGLE_MAX": "4096", "CLUSTER": "2", "CACHE": "0", "THREADS": "512", "ITEMS": "2"},
        {"CLUSTER": "8", "AGG": "1"},
        {"SINGLE_MAX": "4096", "CLUSTER": "16", "CACHE": "0", "THREADS": "512", "ITEMS": "4", "AGG": "0"},
    ],
    # sort/radix: every shape through the digit passes (N = 1 included), 5 passes (odd parity,
    # a 4-bit last digit), tiles of 512 (several per CTA); 8-bit digits scanned 2 per thread with
    # a 1024-key bitonic regime; 4-bit digits (8 passes) with the 8192-key bitonic regime; the
    # last two with programmatic dependent launch (PDL); the first finds a digit's lanes with
    # __match_any_sync, the others (default) with ballots.
    ("sort", "radix"): [
        {"RADIX_BITS": "7", "THREADS": "128", "ITEMS": "4", "BLOCKS_PER_SM": "1", "SMALL_N": "0", "MATCH": "0"},
        {"RADIX_BITS": "8", "THREADS": "128", "ITEMS": "16", "BLOCKS_PER_SM": "8", "SMALL_N": "1024", "PDL": "1"},
        {"RADIX_BITS": "4", "THREADS": "512", "ITEMS": "8", "BLOCKS_PER_SM": "4", "SMALL_N": "8192", "PDL": "1"},
    ],
}
# FAMILY_SHARD=i/n keeps every n-th case from the i-th (scripts/gpu_checks.sh runs each test in three
# processes: as two, one took 517 s of its 540 s on an H100 in the twenty-first session, mostly nvcc)
CASES = shard([(task, seed, i) for (task, seed), combos in COMBOS.items() for i in range(len(combos) + 1)],
              "FAMILY_SHARD")

_evaluators: dict[str, Evaluator] = {}


def _evaluator(task: str) -> Evaluator:
    """The task's evaluator, one open at a time (CASES are in task order): each holds runner
    processes with a CUDA context, and every task's evaluator kept open, in three processes
    beside six other test groups, ran an H200 to 106 contexts and into `cudaSetDevice` out of
    memory (forty-third session: 21 tests failed at runner start-up; each passed when run again)."""
    if task not in _evaluators:
        close_evaluators()
        _evaluators[task] = Evaluator(task, EvalConfig(profile=False, validation_seeds=2))
    return _evaluators[task]


def close_evaluators() -> None:
    while _evaluators:
        _evaluators.popitem()[1].close()


@pytest.fixture(scope="module", autouse=True)
def _close_at_end() -> Iterator[None]:
    yield
    close_evaluators()


def _variant(task: str, seed: str, index: int) -> str:
    source = get_task(task).seeds()[seed]
    return source if index == 0 else set_knobs(source, COMBOS[(task, seed)][index - 1])


@pytest.mark.parametrize("task, seed, index", CASES)
def test_family_combination_validates(task: str, seed: str, index: int) -> None:
    result = _evaluator(task).evaluate(Candidate(task=task, source=_variant(task, seed, index),
                                                 label=f"{seed}#{index}"))
    assert result.status is Status.OK, f"{task}/{seed}#{index}: {result.summary}\n{result.log('run')[-2000:]}"


_CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float, "float64": ctypes.c_double}


def run_with_4_byte_aligned_pointers(task: str, seed: str, index: int, workdir: Path) -> str | None:
    """Launches one family variant on every validation shape with buffers that start 4 bytes
    past a cudaMalloc boundary; the first mismatch as text, or None."""
    import cupy as cp
    spec = get_task(task)
    arch = f"sm_{cp.cuda.Device().compute_capability}"
    built = compile_source(_variant(task, seed, index), spec.header(), arch, cache_dir=None)
    if not built.ok:
        return f"compile error: {built.log}"
    library = workdir / "kernel.so"
    library.write_bytes(built.binary)
    launch = ctypes.CDLL(str(library)).launch
    launch.restype = ctypes.c_int
    stream = cp.cuda.Stream(non_blocking=True)
    for number, shape in enumerate(spec.validation):
        inputs = make_case(spec, shape, seed=1000 + number)
        scalars = scalars_of(spec, shape)
        keep, args, outputs = [], [], {}
        for arg in spec.args:
            if arg.role == "stream":
                args.append(ctypes.c_void_p(stream.ptr))
            elif arg.role == "scalar":
                args.append(_CTYPES[arg.dtype](scalars[arg.name]))
            else:
                count = arg.numel(shape.env)
                base = cp.full(count + 1, -1 if arg.dtype.startswith("int") else np.nan, dtype=np_dtype(arg.dtype))
                view = base[1:]                                   # 4 bytes past an aligned start
                if arg.role in ("input", "inout"):
                    view[...] = cp.asarray(inputs[arg.name].reshape(-1))
                if arg.role in ("output", "inout"):
                    outputs[arg.name] = (view, arg.dims_of(shape.env))
                keep.append(base)
                args.append(ctypes.c_void_p(view.data.ptr))
        cp.cuda.Device().synchronize()       # the buffers were filled on CuPy's stream, not this one
        code = launch(*args)
        if code != 0:
            return f"launch returned {code} on {shape.env}"
        stream.synchronize()
        got = {name: cp.asnumpy(view).reshape(dims) for name, (view, dims) in outputs.items()}
        expected = spec.reference(inputs, shape.env)
        found = check_outputs(got, expected, inputs, shape.env, spec.tol, shape.label or str(shape.env),
                              spec.precision == "exact", custom_compare=spec.custom_compare)
        if found is not None:
            return f"{shape.env}: {found}"
    return None


@pytest.mark.parametrize("task, seed, index", CASES)
def test_family_with_4_byte_aligned_pointers(task: str, seed: str, index: int, tmp_path: Path) -> None:
    # A child process per variant: a fault leaves a CUDA context unusable, and this one must not
    # take the rest of the session's GPU tests with it.
    pytest.importorskip("cupy")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    child = subprocess.run([sys.executable, "-m", "tests.gpu.test_families_b_gpu", task, seed, str(index),
                            str(tmp_path)], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, f"{task}/{seed}#{index}:\n{child.stdout[-3000:]}\n{child.stderr[-3000:]}"


if __name__ == "__main__":
    problem = run_with_4_byte_aligned_pointers(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
    print(problem or "ok")
    sys.exit(1 if problem else 0)
