"""Operators: knob operators (no LLM) and LLM operators against a local OpenAI-compatible server."""
from __future__ import annotations

import json
import random

import pytest

from evo_fsr.knobs import parse_knobs
from evo_fsr.llm.client import CallRecorder, LlmClient
from evo_fsr.operators import REGISTRY, Offspring, Rejected, VariationContext, get_operator, random_knob_variant
from evo_fsr.search.population import Individual
from evo_fsr.testing.synthetic import SYNTHETIC_GPU
from evo_fsr.testing.synthetic import SYNTHETIC_KERNEL as GOOD_KERNEL
from evo_fsr.types import EvalResult, Status


def ind(source: str) -> Individual:
    return Individual("conv2d", source)


def test_registry_by_name() -> None:
    assert set(REGISTRY) == {"knob_mutate", "knob_crossover", "llm_mutate", "llm_diff", "llm_crossover", "llm_repair"}
    assert get_operator("llm_crossover").arity == 2
    with pytest.raises(KeyError, match="known"):
        get_operator("nope")


def test_knob_mutation_stays_within_declared_sets(conv2d) -> None:
    parent = ind(conv2d.seeds()["implicit_gemm"])
    before = parse_knobs(parent.source)
    rng = random.Random(1)
    for _ in range(30):
        out = REGISTRY["knob_mutate"].vary([parent], VariationContext("conv2d", "d", knob_mutation_rate=0.5), rng)
        assert isinstance(out, Offspring) and out.parents == (parent.id,)
        after = parse_knobs(out.source)
        assert set(after) == set(before)
        assert all(after[n].value in before[n].choices for n in after)
        assert any(after[n].value != before[n].value for n in after)


def test_knob_operators_reject_sources_without_knobs(conv2d) -> None:
    naive = ind(conv2d.seeds()["naive"])
    ctx = VariationContext("conv2d", "d")
    assert isinstance(REGISTRY["knob_mutate"].vary([naive], ctx, random.Random(0)), Rejected)
    assert isinstance(REGISTRY["knob_crossover"].vary([naive, naive], ctx, random.Random(0)), Rejected)
    assert random_knob_variant(naive.source, random.Random(0)) is None


def test_knob_crossover_mixes_both_parents(conv2d) -> None:
    seed = conv2d.seeds()["implicit_gemm"]
    a = ind(seed)
    b = ind(random_knob_variant(seed, random.Random(3)) or "")
    a_vals, b_vals = a.knob_values, b.knob_values
    differing = [n for n in a_vals if a_vals[n] != b_vals[n]]
    assert len(differing) >= 2
    for s in range(20):
        out = REGISTRY["knob_crossover"].vary([a, b], VariationContext("conv2d", "d"), random.Random(s))
        child = Individual("conv2d", out.source).knob_values
        assert all(child[n] in (a_vals[n], b_vals[n]) for n in child)
        assert child != a_vals and child != b_vals


# -- LLM operators against the local server ---------------------------------------------------
@pytest.fixture
def llm_context(fake_openai, tmp_path):
    def make(**kw):
        client = LlmClient(model="m", base_url=fake_openai.base_url, api_key="k", timeout_s=kw.pop("timeout_s", 5),
                           retries=kw.pop("retries", 2),
                           recorder=CallRecorder(tmp_path / "calls.jsonl"), **kw)
        failed = EvalResult(candidate_id=ind("bad").id, task="conv2d", status=Status.COMPILE_ERROR,
                            summary="compile error", logs=(("compile", "error: expected ';'"),))
        return VariationContext("conv2d", "TASK TEXT", SYNTHETIC_GPU, client, {failed.candidate_id: failed})
    return make


def test_llm_mutation_good_reply(fake_openai, llm_context, conv2d) -> None:
    parent = ind(conv2d.seeds()["implicit_gemm"])
    out = REGISTRY["llm_mutate"].vary([parent], llm_context())
    assert isinstance(out, Offspring) and out.source.strip() == GOOD_KERNEL.strip()
    assert out.parents == (parent.id,) and out.llm_call == 1 and not out.replayed and out.model == "m"
    prompt = fake_openai.requests[0]["body"]["messages"]
    assert "TASK TEXT" in prompt[0]["content"] and "BLOCK_M" in prompt[1]["content"]


def test_llm_crossover_sends_both_parents(fake_openai, llm_context, conv2d) -> None:
    a, b = ind(conv2d.seeds()["implicit_gemm"]), ind(conv2d.seeds()["naive"])
    out = REGISTRY["llm_crossover"].vary([a, b], llm_context())
    assert isinstance(out, Offspring) and out.parents == (a.id, b.id)
    user = fake_openai.requests[0]["body"]["messages"][1]["content"]
    assert "Kernel A" in user and a.source.strip() in user and b.source.strip() in user


def test_llm_repair_sends_the_error_and_refuses_correct_parents(fake_openai, llm_context) -> None:
    ctx = llm_context()
    out = REGISTRY["llm_repair"].vary([ind("bad")], ctx)
    assert isinstance(out, Offspring)
    assert "expected ';'" in fake_openai.requests[0]["body"]["messages"][1]["content"]
    good = EvalResult(candidate_id=ind("fine").id, task="conv2d", status=Status.OK, summary="ok")
    ctx2 = VariationContext("conv2d", "d", None, ctx.llm, {good.candidate_id: good})
    assert isinstance(REGISTRY["llm_repair"].vary([ind("fine")], ctx2), Rejected)


def test_malformed_reply_is_rejected_with_reason_and_recorded(fake_openai, llm_context, tmp_path) -> None:
    fake_openai.script = [{"content": "Sorry, I can't do that."}]
    out = REGISTRY["llm_mutate"].vary([ind(GOOD_KERNEL)], llm_context())
    assert isinstance(out, Rejected) and "unusable reply" in out.reason and out.llm_call == 1
    assert "Sorry" in out.reply_excerpt
    assert "Sorry" in json.loads((tmp_path / "calls.jsonl").read_text())["reply"]


def test_malformed_http_body_is_a_rejection_not_a_crash(fake_openai, llm_context) -> None:
    fake_openai.script = [{"raw": "this is not json"}]
    out = REGISTRY["llm_mutate"].vary([ind(GOOD_KERNEL)], llm_context())
    assert isinstance(out, Rejected)


def test_429_then_success(fake_openai, llm_context) -> None:
    fake_openai.script = [{"status": 429}, {"status": 429}]
    out = REGISTRY["llm_mutate"].vary([ind(GOOD_KERNEL)], llm_context())
    assert isinstance(out, Offspring) and len(fake_openai.requests) == 3


def test_timeout_is_a_rejection(fake_openai, llm_context) -> None:
    fake_openai.script = [{"delay_s": 1.0, "content": "x"}, {"delay_s": 1.0, "content": "x"}]
    out = REGISTRY["llm_mutate"].vary([ind(GOOD_KERNEL)], llm_context(timeout_s=0.3, retries=1))
    assert isinstance(out, Rejected) and "no reply within 0.3 s after 2 attempts" in out.reason


def test_budget_running_out(fake_openai, llm_context) -> None:
    ctx = llm_context(max_calls=1)
    assert isinstance(REGISTRY["llm_mutate"].vary([ind(GOOD_KERNEL)], ctx), Offspring)
    out = REGISTRY["llm_mutate"].vary([ind(GOOD_KERNEL)], ctx)
    assert isinstance(out, Rejected) and "budget exhausted" in out.reason
    assert len(fake_openai.requests) == 1


def test_no_llm_is_a_rejection() -> None:
    out = REGISTRY["llm_mutate"].vary([ind(GOOD_KERNEL)], VariationContext("conv2d", "d"))
    assert isinstance(out, Rejected) and out.reason == "no LLM configured"
