"""Prompt contents: task brief, feedback (library, ptxas, Nsight Compute), inspirations, lineage,
the token budget, and `evo-fsr prompt`."""
from __future__ import annotations

import dataclasses
import json
import random

import pytest

from evo_fsr.commands.prompt import main as prompt_main
from evo_fsr.config import LlmConfig
from evo_fsr.llm.brief import TaskBrief
from evo_fsr.llm.feedback import describe_feedback, describe_resources
from evo_fsr.llm.gpus import PRESETS
from evo_fsr.llm.inspirations import choose_inspirations, lineage_of
from evo_fsr.llm.ncu import NcuProfile, ncu_command, parse_ncu_csv
from evo_fsr.llm.prompts import PromptInputs, build_prompt
from evo_fsr.operators import VariationContext, prompt_for
from evo_fsr.search.population import Individual
from evo_fsr.testing.synthetic import SYNTHETIC_GPU
from evo_fsr.types import EvalResult, ShapeTiming, Status


def kernel(body: str, fitness=(2.0, 1.0), operator="llm_mutate", parents=(), generation=1) -> Individual:
    source = f'__global__ void k() {{ {body} }}\nextern "C" int launch() {{ k<<<1, 1>>>(); return 0; }}\n'
    return Individual("conv2d", source, fitness=fitness, operator=operator, parents=parents, generation=generation)


def ok(ind: Individual, speedup: float, library_ms: float = 0.0, resources=()) -> EvalResult:
    timings = tuple(ShapeTiming(label, 1.0 / speedup, 1.0, 1.0 / speedup, 1.0, 20, 0.05, library_ms=library_ms)
                    for label in ("conv2_x", "stem"))
    return EvalResult(ind.id, "conv2d", Status.OK, "correct", timings=timings, resources=resources)


@pytest.fixture(scope="module")
def brief(conv2d) -> TaskBrief:
    return TaskBrief.from_task(conv2d)


# -- the task brief --------------------------------------------------------------------------------
def test_brief_has_shape_sizes_precision_policy_and_fitness(brief, conv2d) -> None:
    text = brief.describe(PRESETS["h100"])
    assert "conv2_x: N=32 C=64 H=56 W=56 K=64 R=3 S=3 pad=1 stride=1 P=56 Q=56" in text
    assert "stem: N=8 C=3 H=224 W=224 K=64 R=7 S=7 pad=3 stride=2" in text and "ms on the target GPU" in text
    assert "fp32_strict" in text and "no TF32" in text
    assert "<= 1e-05 * rms(ref) + 0.0001 * |ref|" in text and "||got - ref|| / ||ref|| <= 1e-05" in text
    assert "geometric mean" in text and "fails to compile ranks below" in text and "naive seed is 1.00x" in text
    assert conv2d.signature() in text


def test_brief_names_the_tasks_forbidden_ptx(brief) -> None:
    from evo_fsr.tasks import get_task
    text = TaskBrief.from_task(get_task("monte_carlo")).describe()
    assert "Refused before it runs" in text and "cos.approx (" in text and "sin.approx (" in text
    assert "Refused before it runs" not in brief.describe()          # conv2d has no PTX rule


def test_brief_follows_the_chosen_benchmark_set(conv2d) -> None:
    quick = TaskBrief.from_task(conv2d, "quick").describe()
    assert "set quick" in quick and "conv4_x_b8: N=8 C=256" in quick and "conv2_x:" not in quick


# -- feedback -----------------------------------------------------------------------------------
def test_feedback_carries_library_resources_and_profile() -> None:
    parent = kernel("a")
    resources = (("registers", 168), ("spill_stores_bytes", 64), ("spill_loads_bytes", 64), ("shared_bytes", 32768))
    profile = NcuProfile(("k",), (("achieved occupancy %", 23.5),), (("long scoreboard", 4.2),))
    text = describe_feedback(ok(parent, 2.0, library_ms=0.25, resources=resources), profile=profile)
    assert "library 0.2500 ms (0.50x of the library's speed)" in text
    assert "168 registers per thread" in text and "64 B spill stores" in text and "Registers spill" in text
    assert "achieved occupancy % 23.5" in text and "long scoreboard 4.20" in text
    assert describe_resources(()) == ""


def test_naive_seed_at_generation_0_is_the_baseline_not_unevaluated(brief, conv2d) -> None:
    naive = Individual("conv2d", conv2d.baseline_source, operator="seed")
    other = kernel("x")
    alone = PromptInputs(brief).feedback(naive)
    assert "Not evaluated" not in alone and "baseline of every speedup (1.00x" in alone
    timed = PromptInputs(brief, results={other.id: ok(other, 2.0)}).feedback(naive)
    assert "conv2_x 1.0000 ms" in timed                           # the seed's times from other verdicts
    assert "Not evaluated yet" in PromptInputs(brief).feedback(other)


# -- inspirations and lineage --------------------------------------------------------------------------
def test_inspirations_are_the_best_of_other_islands_then_the_most_different() -> None:
    parent = kernel("float a = x[i];", (2.0, 1.5))
    home = [parent, kernel("home best", (2.0, 9.0))]
    best1, weak1 = kernel("float a = x[i]; y[i] = a;", (2.0, 3.0)), kernel("float a = x[i]; z;", (2.0, 1.1))
    best2, odd2 = kernel("float a = x[i]; w;", (2.0, 2.0)), kernel("int totally; different(tokens, here);", (2.0, 1.2))
    broken = kernel("broken", (1.0, 0.0))
    islands = [home, [weak1, best1], [odd2, best2, broken]]
    chosen = choose_inspirations(islands, parent, random.Random(0), 3)
    assert chosen[:2] == [best1, best2] and chosen[2] is odd2       # top of each island, then diversity
    assert all(m.id != parent.id and m.correct for m in choose_inspirations(islands, parent, random.Random(1), 9))
    assert choose_inspirations(islands, parent, random.Random(0), 0) == []
    assert choose_inspirations([home], parent, random.Random(0), 2) == [home[1]]     # one island: its others


def test_lineage_follows_first_parents_with_verdicts() -> None:
    seed = kernel("seed", operator="seed", generation=0)
    child = kernel("child", parents=(seed.id,), operator="knob_mutate", generation=1)
    grandchild = kernel("grandchild", parents=(child.id,), operator="llm_diff", generation=2)
    known = {k.id: k for k in (seed, child, grandchild)}
    results = {seed.id: ok(seed, 1.0), child.id: EvalResult(child.id, "conv2d", Status.WRONG, "bad")}
    steps = lineage_of(grandchild, known, results, depth=4)
    assert [s.operator for s in steps] == ["llm_diff", "knob_mutate", "seed"]
    assert [s.verdict for s in steps] == ["not evaluated", "wrong", "1.00x"]
    assert len(lineage_of(grandchild, known, results, depth=1)) == 2


# -- whole prompts and the budget -----------------------------------------------------------------------
def _context(brief, budget: int = 12000):
    seed = kernel("seed " * 5, operator="seed", generation=0)
    parent = kernel("parent body " * 30, parents=(seed.id,), operator="llm_mutate", generation=3)
    others = [kernel(f"inspiration {i} " + "pad " * 400, (2.0, 2.0 + i)) for i in range(3)]
    results = {parent.id: ok(parent, 1.5, library_ms=0.4, resources=(("registers", 40),)), seed.id: ok(seed, 1.0)}
    results.update({o.id: ok(o, 2.0 + i) for i, o in enumerate(others)})
    context = VariationContext("conv2d", "d", SYNTHETIC_GPU, None, results, brief=brief,
                               islands=((parent, seed), tuple(others)), individuals={seed.id: seed, parent.id: parent},
                               llm_settings=LlmConfig(prompt_tokens=budget))
    return context, parent, others


def test_mutation_prompt_has_everything_within_budget(brief) -> None:
    context, parent, others = _context(brief)
    prompt = prompt_for("rewrite", [parent], context)
    system, user = prompt.messages[0]["content"], prompt.messages[1]["content"]
    assert "P=56 Q=56" in system and "fp32_strict" in system and "132 SMs" in system
    assert parent.source.strip() in user and "speedup 1.50x" in user and "40 registers per thread" in user
    assert "Lineage of this kernel" in user and "by seed): 1.00x" in user
    assert all(f"Inspiration {i}" in user for i in (1, 2, 3)) and others[2].source.strip() in user
    assert "Its evaluation: correct" in user
    assert "Target to beat: the vendor library" in user and "conv2_x 0.4000 ms" in user
    assert "complete new file" in user and prompt.trimmed == () and prompt.tokens <= 12000


def test_over_budget_trims_inspirations_first_then_lineage(brief) -> None:
    context, parent, _ = _context(brief)
    full = prompt_for("rewrite", [parent], context)
    tight = prompt_for("rewrite", [parent], VariationContext(**{**context.__dict__,
                                                                "llm_settings": LlmConfig(prompt_tokens=full.tokens - 300)}))
    assert tight.trimmed == ("inspiration3",) and "Inspiration 2" in tight.text and "Inspiration 3" not in tight.text
    tiny = prompt_for("rewrite", [parent], VariationContext(**{**context.__dict__,
                                                               "llm_settings": LlmConfig(prompt_tokens=1000)}))
    assert tiny.trimmed[:4] == ("inspiration3", "inspiration2", "inspiration1", "lineage")
    assert "Inspiration" not in tiny.text and "Lineage" not in tiny.text
    assert parent.source.strip() in tiny.text and "complete new file" in tiny.text      # never cut


def test_crossover_and_repair_prompts(brief) -> None:
    context, parent, others = _context(brief)
    cross = build_prompt("crossover", PromptInputs(brief, results=context.results), [parent, others[0]])
    assert "Kernel A:" in cross.text and "Evaluation of B:" in cross.text and others[0].source.strip() in cross.text
    failed = kernel("broken")
    result = EvalResult(failed.id, "conv2d", Status.COMPILE_ERROR, "nvcc failed", logs=(("compile", "error: x"),))
    repair = build_prompt("repair", PromptInputs(brief, results={failed.id: result}), [failed])
    assert "failed evaluation" in repair.text and "error: x" in repair.text and "Inspiration" not in repair.text
    with pytest.raises(ValueError, match="unknown prompt mode"):
        build_prompt("poem", PromptInputs(brief), [parent])


# -- Nsight Compute -----------------------------------------------------------------------------------
# Written for this test in the layout of `ncu --csv --metrics ...` (one row per launch and metric);
# not captured from a GPU.
NCU_CSV = """==PROF== Connected to process 4242
==PROF== Profiling "conv_tiled" - 0: 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3","host","conv_tiled(const float *, float *)","1","7","(256, 1, 1)","(3136, 1, 1)","0","9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%","41.20"
"0","4242","python3","host","conv_tiled(const float *, float *)","1","7","(256, 1, 1)","(3136, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","78.50"
"0","4242","python3","host","conv_tiled(const float *, float *)","1","7","(256, 1, 1)","(3136, 1, 1)","0","9.0","Command line profiler metrics","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","ratio","6.10"
"0","4242","python3","host","conv_tiled(const float *, float *)","1","7","(256, 1, 1)","(3136, 1, 1)","0","9.0","Command line profiler metrics","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio","ratio","1,250.00"
"1","4242","python3","host","conv_tiled(const float *, float *)","1","7","(256, 1, 1)","(3136, 1, 1)","0","9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%","42.80"
"""


def test_ncu_csv_is_parsed_into_the_prompt_line() -> None:
    profile = parse_ncu_csv(NCU_CSV)
    assert profile is not None and profile.kernels == ("conv_tiled",)
    assert dict(profile.metrics) == {"achieved occupancy %": pytest.approx(42.0), "DRAM throughput %": 78.5}
    assert profile.stalls[0] == ("barrier", 1250.0) and profile.stalls[1] == ("long scoreboard", 6.1)
    assert "achieved occupancy % 42.0" in profile.describe() and "barrier 1250.00" in profile.describe()
    assert parse_ncu_csv("==PROF== no kernels were profiled") is None
    cmd = ncu_command(["python3", "-m", "runner"], launch_count=2)
    assert cmd[:2] == ["ncu", "--csv"] and "dram__throughput.avg.pct_of_peak_sustained_elapsed" in cmd[3]
    assert cmd[-3:] == ["python3", "-m", "runner"] and LlmConfig().profile_elites == 0     # off by default


# -- evo-fsr prompt ---------------------------------------------------------------------------------
def test_prompt_command_prints_shapes_precision_fitness_and_library_target(capsys) -> None:
    assert prompt_main(["--task", "conv2d"]) == 0
    out = capsys.readouterr().out
    assert "conv2_x: N=32 C=64 H=56 W=56 K=64 R=3 S=3 pad=1 stride=1" in out
    assert "Precision policy: fp32_strict" in out and "How fitness is computed" in out
    assert "Target to beat: the vendor library" in out and "Not evaluated" not in out


def test_prompt_command_modes_gpu_and_parent(tmp_path, capsys, conv2d) -> None:
    parent = tmp_path / "k.cu"
    parent.write_text(conv2d.seeds()["implicit_gemm"])
    gpu = tmp_path / "gpu.json"
    gpu.write_text(json.dumps(dataclasses.asdict(SYNTHETIC_GPU)))
    assert prompt_main(["--task", "conv2d", "--operator", "diff", "--parent", str(parent), "--gpu", str(gpu)]) == 0
    out = capsys.readouterr().out
    assert "<<<<<<< SEARCH" in out and "BLOCK_M" in out and SYNTHETIC_GPU.name in out
    assert prompt_main(["--task", "conv2d", "--operator", "crossover", "--gpu-preset", "h200", "--json"]) == 0
    messages = json.loads(capsys.readouterr().out)
    assert "H200" in messages[0]["content"] and "Kernel B:" in messages[1]["content"]


@pytest.mark.parametrize("argv, words", [
    (["--task", "nope"], "no task named 'nope'"),
    (["--task", "conv2d", "--shapes", "nope"], "no benchmark set 'nope'"),
    (["--task", "conv2d", "--parent", "/no/such.cu"], "/no/such.cu: cannot read the parent"),
    (["--task", "conv2d", "--run", "/no/such/run"], "no candidates.jsonl"),
])
def test_prompt_command_errors_are_one_line(argv, words, capsys) -> None:
    assert prompt_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and words in err


def test_prompt_command_bad_gpu_file(tmp_path, capsys) -> None:
    bad = tmp_path / "gpu.yaml"
    bad.write_text("name: x\nsm_cnt: 3\n")
    assert prompt_main(["--task", "conv2d", "--gpu", str(bad)]) == 2
    assert "sm_cnt: unknown key" in capsys.readouterr().err


def test_prompt_command_takes_feedback_from_a_run(tmp_path, capsys) -> None:
    from evo_fsr.commands.evolve import main as evolve_main
    from evo_fsr.backend.inline import InlineBackend
    from evo_fsr.testing.synthetic import SyntheticEvaluator

    run = tmp_path / "run"
    assert evolve_main(["--task", "conv2d", "--pop", "4", "--gens", "0", "--out", str(run)],
                       backend_factory=lambda c, t: InlineBackend(SyntheticEvaluator(t.name).evaluate,
                                                                  SYNTHETIC_GPU)) == 0
    capsys.readouterr()
    assert prompt_main(["--task", "conv2d", "--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert "Status: ok." in out and "Per benchmark shape:" in out and "This is the task's naive seed" not in out
