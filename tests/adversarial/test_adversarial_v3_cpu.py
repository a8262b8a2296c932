"""The v3 adversarial suite (cases_v3.py) without a GPU.

- every case and every honest equivalent compiles with compile.py against its task's prototype
  (sm_90), and none needs a vendor library at link time;
- the declarations hold together (classes, expectations, honest equivalents, holes, evidence that
  the sources really print, rejection codes that exist) and each source carries its mechanism;
- the claims the GPU cases rest on, checked where no GPU is needed: 3xTF32 is within matmul's
  tolerance while TF32 is not (NumPy emulation), the fast-math source differs from the seed only in
  its integrand, and a confined runner finds its sibling baseline runner and reads its scheduling
  state in /proc (the hog's side channel);
- the holes themselves, shown on the verdict's own functions (validate.compare_output,
  profile.single_call_floor_ms, profile.time_shape/summarise) with the numbers SECURITY.md reports:
  these call pytest.xfail while the hole is open and pass once it is closed.

Run with: python -m pytest -q tests/adversarial/test_adversarial_v3_cpu.py
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evo_fsr.runner.sandbox import SandboxPolicy
from evo_fsr.tasks import get_task
from evo_fsr.verdict import compile as nvcc
from evo_fsr.verdict import linkage, profile, validate
from evo_fsr.verdict.evaluate import EvalConfig
from evo_fsr.verdict.profile import CallTimes

from . import cases_v2 as v2
from . import cases_v3 as v3
from .test_adversarial_v2_cpu import RELU_ARGS, _run_launch

CASES = v3.build_cases()
ARCH = "sm_90"          # the project's GPUs (H100, H200); PDL and cluster launches need it
needs_nvcc = pytest.mark.skipif(nvcc.nvcc_path() is None, reason="nvcc not found")

#: every rejection code the verdict can give (SECURITY.md, "Reason codes")
KNOWN_CODES = {"compile_error", "compile_error:task-rule", "crash", "crash:sandbox-violation", "crash:vendor-library", "crash:evaluator",
               "timeout", "timeout:budget", "wrong:unwritten-or-nonfinite", "wrong:tolerance",
               "wrong:input-modified", "wrong:nondeterministic", "wrong:benchmark-shape", "wrong:timed-calls", "wrong:out-of-bounds",
               "flagged:under-floor", "flagged:work-after-reply"}
#: what each source must contain for its case to be the cheat it says it is
NEEDLES = {
    "fused_batch_and_hogged_single_baseline": ("adv_relu_sets<<<dim3(", "adv_hog_start()", "/proc/%d/stat",
                                               "evo-fsr-baseline-", "adv_getppid()", "adv_run < 2"),
    "fused_batch_and_gpu_work_after_reply": ("adv_relu_sets<<<dim3(", "adv_after(stream, 1000000ull)",
                                             "cudaStreamSynchronize(adv_after_target)", "adv_run % 2 == 0"),
    "gpu_work_outlives_the_reply": ("adv_after(stream, 20000000000ull)", "cudaStreamSynchronize(adv_after_target)",
                                    "cudaStreamNonBlocking"),
    "pdl_overlaps_the_calls_of_a_batch": ("cudaLaunchAttributeProgrammaticStreamSerialization",
                                          "griddepcontrol.launch_dependents"),
    "hogs_the_interleaved_baseline_via_proc": ("adv_hog_start()", "/proc/%d/stat", "cudaStreamQuery(s)"),
    "forges_and_runs_the_chain_links_itself": ("adv_dl_iterate_phdr(adv_find_links, 0)", '"evo_fsr_chain_gate"',
                                               "adv_jump(link, (void*)&adv_chain_link)", "cudaEventElapsedTime",
                                               "adv_mprotect", "ADV_FRACTION 0.02f", 'extern "C" int adv_chain_link(',
                                               "while (seen == 0ULL)"),
    "runs_the_chain_past_its_gate": ("adv_dl_iterate_phdr(adv_find_links, 0)", "evo_fsr_seed = 0x5EEDULL;",
                                     "adv_jump(gate, (void*)&adv_chain_gate)", 'extern "C" int adv_chain_gate('),
    "forges_within_one_slack_on_an_unbatched_shape": ("cudaEventElapsedTime", "adv_mprotect", "%%globaltimer",
                                                      "ADV_FRACTION 0.75f", "topk_radix"),
    "forges_half_its_time_on_an_unbatched_shape": ("cudaEventElapsedTime", "adv_mprotect", "%%globaltimer",
                                                   "ADV_FRACTION 0.50f", "topk_radix"),
    "forges_a_fifth_of_its_time_on_an_unbatched_shape": ("cudaEventElapsedTime", "adv_mprotect", "%%globaltimer",
                                                         "ADV_FRACTION 0.20f", "topk_radix"),
    "forges_a_fiftieth_of_its_time_on_an_unbatched_shape": ("cudaEventElapsedTime", "adv_mprotect", "%%globaltimer",
                                                            "ADV_FRACTION 0.02f", "topk_radix"),
    "skips_work_when_the_l2_is_cold": ("ld.global.cg.f32", "%%clock64", "ratio > 1.5"),
    "matmul_3xtf32_tensor_cores": ("precision::tf32", "__float_to_tf32(v - h)", "mma_sync"),
    "monte_carlo_fast_math_intrinsics": ("__expf(-v * v) * __cosf(3.0f * v)",),
    "monte_carlo_fast_exp_only": ("__expf(-v * v) * cosf(3.0f * v)",),
    "copy_turns_negative_zero_positive": ("__fadd_rn(src[i], 0.0f)",),
    "ok_pdl_within_one_call": ("griddepcontrol.wait", "cudaLaunchKernelEx"),
}


def _sources() -> dict[str, tuple[str, str]]:
    """name -> (task, source): every case and each distinct honest equivalent."""
    jobs = {c.name: (c.task, c.source) for c in CASES}
    for c in CASES:
        if c.expected == v3.NO_SPEEDUP:
            jobs.setdefault(f"honest:{c.task}:{hash(v3.honest_source(c))}", (c.task, v3.honest_source(c)))
    return jobs


@pytest.fixture(scope="module")
def compiled_v3(tmp_path_factory: pytest.TempPathFactory) -> dict[str, nvcc.CompileResult]:
    if nvcc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    cache = tmp_path_factory.mktemp("v3-cache")
    jobs = _sources()
    with cf.ThreadPoolExecutor(max(2, min(8, os.cpu_count() or 2))) as pool:
        futures = {name: pool.submit(nvcc.compile_source, src, get_task(task).header(), ARCH, cache_dir=cache,
                                     timeout_s=600) for name, (task, src) in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


@needs_nvcc
def test_every_v3_case_and_honest_equivalent_compiles(compiled_v3: dict[str, nvcc.CompileResult]) -> None:
    bad = {name: r.log[:800] for name, r in compiled_v3.items() if not r.ok}
    assert not bad, bad


@needs_nvcc
def test_no_v3_case_needs_a_vendor_library_at_link_time(compiled_v3: dict[str, nvcc.CompileResult]) -> None:
    for name, result in compiled_v3.items():
        if result.ok:
            assert linkage.check_needed(result.binary) is None, (name, linkage.dynamic_deps(result.binary))


def test_v3_declarations_hold_together() -> None:
    v2_names = {c.name for c in v2.build_cases()}
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)) and not set(names) & v2_names, "v3 names must be new"
    assert len(CASES) <= 17      # fifteen, the chain-link forger and the chain run past its gate (thirty-fourth session)
    for mechanism in v3.MECHANISMS:
        assert any(c.mechanism == mechanism for c in CASES), f"no case of class {mechanism}"
    for c in CASES:
        get_task(c.task)
        assert c.mechanism in v3.MECHANISMS, c.name
        assert c.expected in (v3.OK, v3.REJECTED, v3.NO_SPEEDUP), c.name
        assert (c.expected == v3.NO_SPEEDUP) == bool(c.honest), c.name
        assert c.note, c.name
        assert (c.expected == v3.OK) == (c.mechanism == "legit"), c.name
        assert not (c.hole and c.expected == v3.OK), c.name
        assert set(c.unsound) <= KNOWN_CODES and set(c.codes) <= KNOWN_CODES, c.name
        assert not set(c.codes) & set(c.unsound), c.name
        assert 'extern "C" int launch(' in c.source and c.source.count("static int honest_launch(") <= 1, c.name
        for text in c.evidence:                 # printed by the source itself (a printf format's prefix)
            assert text.split("%")[0] in c.source, (c.name, text)
        assert c.x86_only == ("adv_mprotect((void*)" in c.source), c.name
        if c.expected == v3.NO_SPEEDUP and not c.honest.startswith("seed:"):
            assert 'extern "C" int launch(' in c.honest, c.name


def test_each_v3_source_carries_its_mechanism() -> None:
    assert set(NEEDLES) == {c.name for c in CASES}
    for c in CASES:
        for needle in NEEDLES[c.name]:
            assert needle in c.source, (c.name, needle)


@needs_nvcc
def test_the_task_rule_refuses_cos_approx_before_anything_runs(compiled_v3: dict[str, nvcc.CompileResult]) -> None:
    """monte_carlo's forbidden_ptx: __cosf (cos.approx in the PTX) is refused, __expf alone is not
    (the accurate expf ends in ex2.approx too: the xfail case), and neither seed is."""
    from evo_fsr.verdict import task_rules
    task = get_task("monte_carlo")
    refusal = task_rules.forbidden_instruction(task, compiled_v3["monte_carlo_fast_math_intrinsics"])
    assert refusal is not None and "cos.approx" in refusal, refusal
    assert task_rules.forbidden_instruction(task, compiled_v3["monte_carlo_fast_exp_only"]) is None
    for seed in sorted((task.root / "seeds").glob("*.cu")):
        built = nvcc.compile_source(seed.read_text(), task.header(), ARCH, cache_dir=None, timeout_s=600)
        assert built.ok and "ex2.approx.ftz.f32" in built.ptx_instructions, seed.name   # the PTX was read
        assert task_rules.forbidden_instruction(task, built) is None, seed.name


def test_fast_math_source_differs_from_the_seed_only_in_its_integrand() -> None:
    case = next(c for c in CASES if c.name == "monte_carlo_fast_math_intrinsics")
    honest = v2.wrap("monte_carlo", "    return HONEST;", seed="persistent")
    assert "return expf(-v * v) * cosf(3.0f * v);" in honest
    cheat_lines = [ln for ln in case.source.splitlines() if ln not in honest.splitlines()]
    assert len(cheat_lines) == 1 and "__expf" in cheat_lines[0] and "__cosf" in cheat_lines[0], cheat_lines


# -- the claims the GPU cases rest on ------------------------------------------------------------------
def _tf32(a: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32 (wmma::__float_to_tf32): 10 mantissa bits, round to nearest, ties away."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def _mma_chain(pairs: list[tuple[np.ndarray, np.ndarray]], K: int) -> np.ndarray:
    """C accumulated in float32 over k-steps of 8, each step adding every (a, b) pair's 8-term
    products (exact TF32 products, summed in float64 then rounded), as the 3xTF32 kernel's chain
    of mma_sync does."""
    M, N = pairs[0][0].shape[0], pairs[0][1].shape[1]
    acc = np.zeros((M, N), dtype=np.float32)
    for k in range(0, K, 8):
        for a, b in pairs:
            acc = (acc.astype(np.float64) + a[:, k:k + 8].astype(np.float64) @ b[k:k + 8].astype(np.float64)
                   ).astype(np.float32)
    return acc


@pytest.mark.parametrize("M,K,N,case", [(64, 64, 64, "random"), (128, 2048, 96, "random"),
                                        (64, 512, 64, "large_magnitude")])
def test_3xtf32_is_within_the_matmul_tolerance_and_tf32_is_not(M: int, K: int, N: int, case: str) -> None:
    """The 3xTF32 case must be rejected for the task's rule, not for its accuracy: emulated, it is
    within fp32_strict's tolerance on every shape of its path (64^3 is a validation shape), while
    plain TF32 (v1's tf32_math) is not."""
    task = get_task("matmul")
    shape = task.make_shape({"M": M, "K": K, "N": N}, "emulated")
    inputs = task.make_inputs(shape.env, np.random.default_rng(M * K + N), case)
    ref = task.reference(inputs, shape.env)["C"]
    A, B = inputs["A"], inputs["B"]
    a_hi, b_hi = _tf32(A), _tf32(B)
    a_lo, b_lo = _tf32(A - a_hi), _tf32(B - b_hi)
    three = _mma_chain([(a_lo, b_hi), (a_hi, b_lo), (a_hi, b_hi)], K)
    one = _mma_chain([(a_hi, b_hi)], K)
    assert validate.compare_output("C", three, ref, task.tol, "emulated") is None
    assert validate.compare_output("C", one, ref, task.tol, "emulated") is not None


@needs_nvcc
def test_a_confined_runner_reads_its_sibling_baseline_runners_state(tmp_path: Path) -> None:
    """The hog cases find the baseline runner as the evaluator's other child with
    'evo-fsr-baseline-' in its command line and time their bursts by its state in /proc/<pid>/stat.
    Here a decoy with such a command line, started by this process as the evaluator starts its
    runners, and the cases' own /proc code in a runner confined as candidates are: while the
    decoy is found, the side channel is open.  Landlock now leaves a runner its own /proc/<pid>
    and no other process's (confine.own_proc), so only a kernel without Landlock finds it
    (xfail); the runner's own /proc/self/stat must stay readable."""
    probe = v2.wrap("relu", r'''
    int pids[64]; int k = adv_find_pids("evo-fsr-baseline-", adv_getppid(), pids, 64);
    FILE* f = fopen("proc_probe.txt", "w");
    if (!f) return 7;
    FILE* own = fopen("/proc/self/stat", "rb");             // its own /proc/<pid> stays readable
    fprintf(f, "ran %d self %d\n", k, own != 0);
    if (own) fclose(own);
    for (int i = 0; i < k; ++i) { char s = 0; int pp = 0; adv_stat(pids[i], &s, &pp); fprintf(f, "%d %c %d\n", pids[i], s, pp); }
    fclose(f);
    return 0;''', v3.HOG)
    built = nvcc.compile_source(probe, get_task("relu").header(), ARCH, cache_dir=None, timeout_s=600)
    assert built.ok, built.log[:800]
    decoy_dir = tmp_path / f"evo-fsr-baseline-decoy{os.getpid()}" / ".runner"
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", str(decoy_dir / "runner.py")])
    try:
        out = _run_launch(tmp_path / "work", built.binary, RELU_ARGS, SandboxPolicy.for_candidate())
        report = tmp_path / "work" / "proc_probe.txt"
        assert out.get("rc") == 0 and report.is_file(), out          # the probe ran, confined
        lines = report.read_text().splitlines()
        rows = [ln.split() for ln in lines[1:]]
        found = {int(r[0]): r[1] for r in rows}
    finally:
        decoy.kill()
        decoy.wait()
    assert lines[0].endswith("self 1"), lines[0]
    if decoy.pid in found:
        assert found[decoy.pid] in "SR", found
        assert not str(out["status"].get("landlock", "")).startswith("on"), (
            f"Landlock is on, yet the runner read its sibling's /proc/{decoy.pid}: {out['status']}")
        pytest.xfail(f"a confined runner found its sibling 'baseline runner' (pid {decoy.pid}, state "
                     f"{found[decoy.pid]}) in /proc: the hogs' side channel is open (confinement: {out['status']})")


# -- the holes, on the verdict's own functions ------------------------------------------------------------
def test_exact_compare_tells_a_negative_zero_from_a_positive_one() -> None:
    """A task whose values are moved (``bit_exact``: matrix_copy) compares signs too; one whose
    values may tie either way (sort: -0.0 and +0.0 in either order) compares values."""
    task = get_task("matrix_copy")
    assert task.bit_exact and not get_task("sort").bit_exact
    ref = np.array([[-0.0, 1.0, 1e-45]], dtype=np.float32).astype(np.float64)   # a denormal
    assert validate.compare_output("dst", np.array([[-0.0, 1.0, 0.0]], np.float32), ref, task.tol, "s",
                                   exact=True) is not None          # a flushed denormal is caught
    flipped = np.array([[0.0, 1.0, 1e-45]], np.float32)
    found = validate.compare_output("dst", flipped, ref, task.tol, "s", exact=True, bit_exact=task.bit_exact)
    assert found is not None and found.index == (0, 0)
    assert validate.compare_output("dst", flipped, ref, task.tol, "s", exact=True) is None
    assert validate.compare_output("dst", np.array([[-0.0, 1.0, 1e-45]], np.float32), ref, task.tol, "s",
                                   exact=True, bit_exact=True) is None


def _windows(rng: np.random.Generator, n: int, event_ms: float, call_ms: float, overhead_ms: float,
             spread_ms: float, extra_ms: float = 0.0, calls: int = 1) -> list[CallTimes]:
    """``n`` windows: the runner's claim ``event_ms``, the window the trusted side measures around a
    real ``call_ms`` with an overhead of ``overhead_ms`` +- ``spread_ms`` (normal), plus ``extra_ms``."""
    noise = rng.normal(0.0, spread_ms, n)
    return [CallTimes(event_ms, event_ms, event_ms + 0.01, overhead_ms + call_ms + extra_ms + float(e), calls)
            for e in noise]


def test_the_single_call_floor_survives_a_slowed_baseline() -> None:
    """The batch case's arithmetic: a call of 0.9 ms alone (16 blocks of relu on 16M elements), eight
    fused into a 0.9 ms window; single windows of 0.7 ms overhead around the call (SECURITY.md: 0.73-0.98
    ms single windows around a 0.05 ms relu call) and a naive baseline call of 0.07 ms.  Slowing the
    baseline's interleaved single windows by 1 ms must not take the floor below half its honest value."""
    rng = np.random.default_rng(11)
    cand = _windows(rng, profile.SINGLE_WINDOWS, 0.9, 0.9, 0.7, 0.03)
    clean = _windows(rng, profile.SINGLE_WINDOWS, 0.07, 0.07, 0.7, 0.03)
    honest_floor = profile.single_call_floor_ms(cand, clean)
    assert honest_floor > 0.6
    hogged = clean[:1] + _windows(rng, profile.SINGLE_WINDOWS - 1, 0.07, 0.07, 0.7, 0.03, extra_ms=1.0)
    floor = profile.single_call_floor_ms(cand, hogged)
    fused_per_call = 0.9 / 8
    if floor < 0.5 * honest_floor:
        pytest.xfail(f"{v3.HOLE_SINGLE_FLOOR}: floor {floor:.3f} ms instead of {honest_floor:.3f} ms, so the "
                     f"fused kernel is credited {max(floor, fused_per_call):.3f} ms a call for 0.9 ms of work")


def _forger_gain(fraction: float, factor: int, seeds: int = 20, fresh: bool = False) -> float:
    """A forger's median gain over the honest claim on topk's quick shape as an H200 timed it
    (twenty-sixth session, ``scripts/probe_slack.py``): an 18.5 us call in windows of ~0.9 ms
    overhead with a spread of 70 us (the pool's read 63-81 us), a naive baseline of 1.41 ms, and
    the evaluator's counts for a launch-bound shape: max_trials and clean_calls (the pool of twin
    windows) times ``factor``.  The forger claims ``fraction`` of its time.  ``fresh``: a shape
    charged twice is re-judged against a fresh pool (``EvalConfig.fresh_pool_retime``)."""
    config = EvalConfig()
    call_ms, overhead_ms, spread_ms, base_ms = 0.0185, 0.9, 0.070, 1.41
    windows, pool_calls = config.max_trials * factor, config.clean_calls * factor
    gains = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        pool = _windows(rng, pool_calls, base_ms, base_ms, overhead_ms, spread_ms)

        def credited(claim_ms: float) -> float:
            def timing_round() -> tuple[list[CallTimes], list[CallTimes]]:
                return (_windows(rng, windows, claim_ms, call_ms, overhead_ms, spread_ms),
                        _windows(rng, windows // config.baseline_every, base_ms, base_ms, overhead_ms, spread_ms))
            def fresh_pool() -> list[CallTimes]:
                return _windows(rng, pool_calls, base_ms, base_ms, overhead_ms, spread_ms)
            timed = profile.time_shape(timing_round, pool, fresh_pool=fresh_pool if fresh else None)
            return profile.summarise("s", timed.candidate, timed.baseline, timed.calibration, base_ms, 0.0,
                                     strict=timed.strict).median_ms
        gains.append(credited(call_ms) / credited(fraction * call_ms))
    return float(np.median(gains))


def test_a_claim_far_below_the_call_is_charged_on_an_unbatched_shape() -> None:
    """A runner claiming 5 % of its time on a launch-bound shape: with the counts of other shapes
    (30 windows, a pool of 8) the slack (~40 us on the H200) exceeds the whole 18.5 us call and the
    claim is credited as is (20x); over launch_bound_factor times both it is charged."""
    factor = EvalConfig().launch_bound_factor
    assert _forger_gain(0.05, 1) > 10.0                  # the model shows the hole the factor closes
    gain = _forger_gain(0.05, factor)
    assert gain < 1.0, f"a claim of 5 % credited x{gain:.2f} the honest claim at launch_bound_factor {factor}"


@pytest.mark.parametrize("fraction", [0.05, 0.25, 0.5, 0.75])
def test_the_fresh_pool_gives_a_forger_no_more_than_it_had(fraction: float) -> None:
    """``fresh_pool_retime`` re-judges a shape charged twice against a pool taken with the
    candidate's process dead.  A third round against that pool instead gave a 5 % claim on the
    launch-bound shape one more chance to escape: its median credit went from its whole time
    to the claim (x20), and a 25 % claim's escapes from 55 % to 77 % of evaluations.  Fails if
    the fresh pool raises the forger's median gain over 300 evaluations by more than 2 %."""
    off = _forger_gain(fraction, EvalConfig().launch_bound_factor, seeds=300)
    on = _forger_gain(fraction, EvalConfig().launch_bound_factor, seeds=300, fresh=True)
    assert on <= 1.02 * off, f"a claim of {fraction:.0%}: x{on:.2f} the honest claim with the fresh pool, x{off:.2f} without"


@pytest.mark.parametrize("fraction", [0.15, 0.25, 0.35, 0.5, 0.75])
def test_a_claim_inside_the_slack_gains_under_15_percent_on_an_unbatched_shape(fraction: float) -> None:
    """The forger's arithmetic at the evaluator's counts for a launch-bound shape (``_forger_gain``).
    A claim of 15-35 % gains most (the red team, thirtieth session: x5.4, x4.0 and x2.9 in this
    model, where SECURITY.md had cited only 50 % and 75 %): it escapes the charge in either of two
    rounds more often than not, and is then credited about its claim."""
    gain = _forger_gain(fraction, EvalConfig().launch_bound_factor)
    if gain > v3.MAX_SPEEDUP_OVER_HONEST:
        pytest.xfail(f"{v3.HOLE_SLACK_UNBATCHED}: a claim of {fraction:.0%} is credited x{gain:.2f} the honest claim")
    print(f"a claim of {fraction:.0%} of an 18.5 us call: x{gain:.3f} the honest claim")
