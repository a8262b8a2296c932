"""Several models: the bandit's choices, per-model budgets, credit and its restoration."""
from __future__ import annotations

import json

import pytest

from evo_fsr.config import ConfigError, LlmConfig, ModelConfig, load_config
from evo_fsr.llm import credit, make_client
from evo_fsr.llm.base import BudgetExhausted
from evo_fsr.llm.models import ModelBandit, MultiModelClient, improvement, score
from evo_fsr.testing.chat_server import LocalChatServer
from evo_fsr.types import EvalResult, ShapeTiming, Status

MESSAGES = [{"role": "user", "content": "write a kernel"}]


def result(status: Status, speedup: float = 1.0) -> EvalResult:
    timing = ShapeTiming("s", 1.0 / speedup, 1.0, 1.0, 1.0, 10, 0.1)
    return EvalResult("id", "conv2d", status, "x", timings=(timing,) if status.correct else ())


def test_improvement_follows_the_fitness_order() -> None:
    compile_error, wrong, ok1, ok2 = (result(Status.COMPILE_ERROR), result(Status.WRONG), result(Status.OK, 1.0),
                                      result(Status.OK, 2.0))
    assert score(compile_error) < score(wrong) < score(ok1) < score(ok2)
    assert improvement(ok1, ok2) == pytest.approx(1.0)          # log2 of a 2x gain
    assert improvement(ok2, ok1) == 0.0 and improvement(ok1, wrong) == 0.0
    assert improvement(compile_error, ok1) == pytest.approx(2.0)


def test_bandit_tries_each_model_first_then_prefers_improvement_per_token() -> None:
    bandit = ModelBandit(["fast", "strong"], exploration=0.0)
    assert bandit.choose(["fast", "strong"]) == "fast"
    bandit.spent("fast", 1000)
    assert bandit.choose(["fast", "strong"]) == "strong"
    bandit.spent("strong", 4000)
    bandit.reward("fast", 0.5)                  # 0.5 per 1k tokens
    bandit.reward("strong", 1.0)                # 0.25 per 1k tokens: more gain, but dearer
    assert bandit.choose(["fast", "strong"]) == "fast"
    bandit.reward("strong", 3.0)                # 1.0 per 1k tokens
    assert bandit.choose(["fast", "strong"]) == "strong"
    assert bandit.choose(["fast"]) == "fast"    # an exhausted model is not offered


def test_bandit_exploration_returns_to_a_neglected_model() -> None:
    bandit = ModelBandit(["a", "b"], exploration=2.0)
    bandit.spent("a", 1000)
    bandit.reward("a", 1.0)
    bandit.spent("b", 1000)
    for _ in range(20):                         # a keeps earning, b is never tried again...
        bandit.spent("a", 1000)
        bandit.reward("a", 1.0)
    assert bandit.choose(["a", "b"]) == "b"     # ...until its uncertainty outweighs a's lead


@pytest.fixture
def two_models():
    server = LocalChatServer(lambda body: {"content": f"reply from {body['model']}",
                                           "prompt_tokens": 100 if body["model"] == "fast" else 900,
                                           "completion_tokens": 50})
    yield server
    server.close()


def multi(server, tmp_path, **kw) -> MultiModelClient:
    config = LlmConfig(base_url=server.base_url, preflight=False, retries=0,
                       models=(ModelConfig("fast"), ModelConfig("strong", max_calls=2)), bandit_exploration=0.0, **kw)
    client = make_client(config, tmp_path)
    assert isinstance(client, MultiModelClient)
    return client


def test_multi_model_client_follows_the_bandit_and_each_budget(two_models, tmp_path) -> None:
    client = multi(two_models, tmp_path)
    first, second = client.complete(MESSAGES, operator="a"), client.complete(MESSAGES, operator="a")
    assert (first.model, second.model) == ("fast", "strong") and (first.call_id, second.call_id) == (1, 2)
    credit(client, second.call_id, 2.0)        # strong: 2.0 per 950 tokens beats fast's 0 per 150
    assert client.complete(MESSAGES, operator="a").model == "strong"
    assert [client.complete(MESSAGES, operator="a").model for _ in range(2)] == ["fast", "fast"]  # strong's 2 calls spent
    assert client.usage.calls == 5 and client.usage.tokens == 150 * 3 + 950 * 2
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [c.get("model") for c in calls if "call" in c] == ["fast", "strong", "strong", "fast", "fast"]
    assert [c["credit_for"] for c in calls if c.get("kind") == "credit"] == [2]


def test_run_budget_caps_every_model(two_models, tmp_path) -> None:
    client = multi(two_models, tmp_path, max_calls=1)
    client.complete(MESSAGES, operator="a")
    with pytest.raises(BudgetExhausted):
        client.complete(MESSAGES, operator="a")


def test_resumed_client_restores_spend_credit_and_budgets(two_models, tmp_path) -> None:
    client = multi(two_models, tmp_path)
    client.complete(MESSAGES, operator="a")
    reply = client.complete(MESSAGES, operator="a")
    credit(client, reply.call_id, 2.0)
    again = multi(two_models, tmp_path)
    arms = again.bandit.arms
    assert (arms["fast"].tokens, arms["strong"].tokens, arms["strong"].improvement) == (150, 950, 2.0)
    assert again.clients["strong"].usage.calls == 1
    nxt = again.complete(MESSAGES, operator="a")
    assert nxt.model == "strong" and nxt.call_id == 3


def test_models_config_is_checked() -> None:
    config = load_config(overrides={"task": "conv2d", "llm.models": ["fast", {"model": "strong", "max_calls": 9}]})
    assert [m.model for m in config.llm.models] == ["fast", "strong"] and config.llm.models[1].max_calls == 9
    assert config.llm.enabled and config.to_dict()["llm"]["models"][1]["model"] == "strong"
    with pytest.raises(ConfigError, match=r"llm.models\[0\].modle: unknown key"):
        load_config(overrides={"task": "conv2d", "llm.models": [{"modle": "x"}]})
    with pytest.raises(ConfigError, match="each model may appear once"):
        load_config(overrides={"task": "conv2d", "llm.models": ["a", "a"]})
    with pytest.raises(ConfigError, match="llm.on_failures: must be one of stop_llm, end_run"):
        load_config(overrides={"task": "conv2d", "llm.on_failures": "panic"})
