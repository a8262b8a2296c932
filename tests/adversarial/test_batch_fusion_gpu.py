"""The batch's hole (SECURITY.md, "work fused across the calls of a batch"), as GPU reproductions:
a kernel whose shape is timed k calls to a window learns the k buffer sets (the same in every
window, in the same order) and computes all k calls in the first launch of each window, while
the other launches return at once.  Every output is right and every microsecond is inside the
events and the window, so nothing is forged; but where one call leaves the GPU idle, k fused
calls cost about as much as one.

* A launch-bound shape (relu on 64K elements, 0.16 us of traffic) is timed one call to a window
  (``batching.FUSABLE_FLOOR_MS``), so there is nothing to fuse: before that rule the fused cheat
  read 3.22x (tenth session) and 3.56x (twenty-first) against the honest seed's 1.0x, H100.
* The residual (xfail, not strict): a kernel that leaves the GPU idle by its own choice (16
  blocks) on a shape that is batched (relu on 4M elements), fused against the same kernel called
  honestly.  It read 7.2x (0.36x against 0.05x); with the single-call floor
  (``profile.single_call_floor_ms``) 0.06x against 0.05x, about 1.2x, over the 1.15x allowed:
  the floor's allowance (two standard errors, 5 %) is what is left.

``test_the_fused_cheats_compile`` (CPU, nvcc) checks that both build against relu's prototype.

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

#: one call of relu on 64K elements (256 KiB) is a few microseconds, mostly launch and tail
SMALL_N = 65536
#: relu on 4M elements (32 MiB, 10 us at the roof) is batched; 16 blocks leave most SMs idle
WIDE_N = 1 << 22
NARROW_BLOCKS = 16

FUSED_PRELUDE = r"""
#define ADV_MAX 16
struct adv_slots { const float* x[ADV_MAX]; float* y[ADV_MAX]; };
__global__ void adv_relu_sets(adv_slots s, long long n) {
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
static int adv_one(const float* x, float* y, long long n, int blocks, cudaStream_t stream) {
    adv_slots one; one.x[0] = x; one.y[0] = y;
    adv_relu_sets<<<dim3(blocks, 1), 256, 0, stream>>>(one, n);
    return (int)cudaGetLastError();
}
"""


def fused_body(size: int, blocks: int) -> str:
    """On ``size``: every buffer set of the window computed by its first launch (``blocks`` blocks a
    set), once the sets have come round; elsewhere, and until then, the honest call."""
    return f"""
    if (n != {size}) return HONEST;
    int i = adv_index(x, y);
    if (i < 0) return HONEST;
    if (adv_cycle == 0 && i == 0 && adv_nseen > 1) adv_cycle = adv_nseen;   // the first set came round again
    if (adv_cycle == 0) return {"HONEST" if blocks == 0 else f"adv_one(x, y, n, {blocks}, stream)"};
    if (i != 0) return 0;                     // computed by this window's first launch
    adv_relu_sets<<<dim3({blocks or 64}, adv_cycle), 256, 0, stream>>>(adv_seen, (long long)n);
    return (int)cudaGetLastError();"""


def fused_source() -> str:
    """The launch-bound case: the naive seed, but every call of a window fused into its first."""
    return wrap("relu", fused_body(SMALL_N, 0), FUSED_PRELUDE)


def narrow_sources() -> tuple[str, str]:
    """The residual case: a 16-block relu called honestly, and the same kernel fused."""
    honest = wrap("relu", f"    if (n != {WIDE_N}) return HONEST;\n"
                          f"    return adv_one(x, y, n, {NARROW_BLOCKS}, stream);", FUSED_PRELUDE)
    return honest, wrap("relu", fused_body(WIDE_N, NARROW_BLOCKS), FUSED_PRELUDE)


def judge(n: int, label: str, honest_source: str, fused: str) -> tuple[float, str, float]:
    task = get_task("relu")
    shape = task.make_shape({"n": n}, label)
    ev = Evaluator("relu", dataclasses.replace(config(), shapes=(shape,)))
    try:
        honest = ev.evaluate(Candidate(task="relu", source=honest_source, label="honest"))
        cheat = ev.evaluate(Candidate(task="relu", source=fused, label="fused"))
    finally:
        ev.close()
    assert honest.status is Status.OK, honest.summary
    print(f"\nbatch fusion, {label}: honest x{honest.geomean_speedup:.2f}, fused {cheat.status.value} "
          f"x{cheat.geomean_speedup or 0:.2f}")
    return honest.geomean_speedup, cheat.status.value, cheat.geomean_speedup or 0.0


@pytest.mark.gpu
def test_calls_of_a_launch_bound_shape_are_not_fused() -> None:
    """A launch-bound shape leaves a fusing kernel nothing to fuse: in chained windows (chain.py)
    the later calls' inputs do not exist at the first launch (the fused outputs are wrong), and
    with chained windows off it is timed one call to a window (not run on a GPU since the chain)."""
    honest, status, fused = judge(SMALL_N, "n_64K", get_task("relu").baseline_source, fused_source())
    if status == Status.OK.value:
        assert fused <= MAX_SPEEDUP_OVER_HONEST * honest


@pytest.mark.gpu
@pytest.mark.xfail(strict=False, reason="narrowed hole: calls of a batch fused where one call leaves "
                                        "the GPU idle gain up to the single-call floor's allowance (SECURITY.md)")
def test_calls_of_a_batched_shape_gain_nothing_fused() -> None:
    honest_source, fused = narrow_sources()
    honest, status, speedup = judge(WIDE_N, "n_4M", honest_source, fused)
    if status == Status.OK.value:
        assert speedup <= MAX_SPEEDUP_OVER_HONEST * honest


@pytest.mark.skipif(nvcc.nvcc_path() is None, reason="nvcc not found")
@pytest.mark.parametrize("which", ["launch_bound", "narrow_honest", "narrow_fused"])
def test_the_fused_cheats_compile(tmp_path, which: str) -> None:
    """CPU: the reproductions build against relu's launch prototype (so the GPU tests test the
    verdict, not a compile error)."""
    source = {"launch_bound": fused_source(), "narrow_honest": narrow_sources()[0],
              "narrow_fused": narrow_sources()[1]}[which]
    result = nvcc.compile_source(source, get_task("relu").header(), "sm_90", cache_dir=tmp_path,
                                 timeout_s=300)
    assert result.ok, result.log[:800]
