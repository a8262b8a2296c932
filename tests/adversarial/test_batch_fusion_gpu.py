"""The batch's open hole (SECURITY.md, "Not closed: work fused across the calls of a batch"), as a
GPU reproduction: a short kernel whose shape is timed k calls to a window learns the k buffer sets
(the same in every window, in the same order) and computes all k calls in the first launch of
each window, while the other launches return at once.  Every output is right and every microsecond
is inside the events and the window, so nothing is forged; but on a tiny shape, where one call
leaves the GPU idle, k fused calls cost about as much as one.

Expected to fail until the hole is closed (xfail, not strict): it then passes, and the marker
goes.  On an H100 (tenth session) the fused cheat read 3.22x against the honest seed's 1.04x;
SECURITY.md says which fixes were measured and why none landed.
``test_the_fused_cheat_compiles`` (CPU, nvcc) checks that it builds against relu's prototype.

Run with: pytest -m gpu tests/adversarial/test_batch_fusion_gpu.py -v -s
"""
from __future__ import annotations

import dataclasses

import pytest

from evo_fsr.tasks import get_task
from evo_fsr.types import Candidate, Status
from evo_fsr.verdict import compile as nvcc
from evo_fsr.verdict.evaluate import Evaluator

from .cases_v2_blocks import MAX_SPEEDUP_OVER_HONEST, wrap
from .test_adversarial_v2_gpu import config

#: one call of relu on 64K elements (256 KiB) is a few microseconds, mostly launch and tail, so
#: its shape is batched (window overhead ~2 ms against the library's few microseconds)
SMALL_N = 65536

FUSED_PRELUDE = r'''
#define ADV_MAX 16
struct adv_slots { const float* x[ADV_MAX]; float* y[ADV_MAX]; };
__global__ void adv_relu_fused(adv_slots s, long long n) {
    const float* x = s.x[blockIdx.y];
    float* y = s.y[blockIdx.y];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = fmaxf(x[i], 0.0f);
}
static adv_slots adv_seen;
static int adv_nseen = 0, adv_cycle = 0;
static int adv_index(const float* x, float* y) {
    for (int i = 0; i < adv_nseen; ++i) if (adv_seen.x[i] == x && adv_seen.y[i] == y) return i;
    if (adv_nseen == ADV_MAX) return -1;
    adv_seen.x[adv_nseen] = x; adv_seen.y[adv_nseen] = y;
    return adv_nseen++;
}
'''

FUSED_BODY = f'''
    if (n != {SMALL_N}) return HONEST;
    int i = adv_index(x, y);
    if (i < 0) return HONEST;
    if (adv_cycle == 0 && i == 0 && adv_nseen > 1) adv_cycle = adv_nseen;   // the first set came round again
    if (adv_cycle == 0) return HONEST;
    if (i != 0) return 0;                     // computed by this window's first launch
    adv_relu_fused<<<dim3(64, adv_cycle), 256, 0, stream>>>(adv_seen, (long long)n);
    return (int)cudaGetLastError();'''


def fused_source() -> str:
    return wrap("relu", FUSED_BODY, FUSED_PRELUDE)


@pytest.mark.gpu
@pytest.mark.xfail(strict=False, reason="open hole: calls of a batch can be fused (SECURITY.md)")
def test_calls_fused_across_a_batch_gain_nothing() -> None:
    task = get_task("relu")
    shape = task.make_shape({"n": SMALL_N}, "n_64K")
    ev = Evaluator("relu", dataclasses.replace(config(), shapes=(shape,)))
    try:
        honest = ev.evaluate(Candidate(task="relu", source=task.baseline_source, label="honest"))
        fused = ev.evaluate(Candidate(task="relu", source=fused_source(), label="fused"))
    finally:
        ev.close()
    assert honest.status is Status.OK, honest.summary
    print(f"\nbatch fusion: honest x{honest.geomean_speedup:.2f}, fused {fused.status.value} "
          f"x{fused.geomean_speedup or 0:.2f}")
    if fused.status is Status.OK:
        assert fused.geomean_speedup <= MAX_SPEEDUP_OVER_HONEST * honest.geomean_speedup, fused.summary


@pytest.mark.skipif(nvcc.nvcc_path() is None, reason="nvcc not found")
def test_the_fused_cheat_compiles(tmp_path) -> None:
    """CPU: the reproduction builds against relu's launch prototype (so the GPU test tests the
    verdict, not a compile error)."""
    result = nvcc.compile_source(fused_source(), get_task("relu").header(), "sm_90", cache_dir=tmp_path,
                                 timeout_s=300)
    assert result.ok, result.log[:800]
