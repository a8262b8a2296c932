"""Faults at the LLM endpoint: the preflight at start, and consecutive failures during a run."""
from __future__ import annotations

import json
import time

import pytest

from evo_fsr.commands.evolve import main as evolve_main
from evo_fsr.config import LlmConfig
from evo_fsr.llm import make_client
from evo_fsr.llm.base import CallRecorder, LlmError, LlmStopped, PreflightError
from evo_fsr.llm.client import LlmClient
from evo_fsr.operators import REGISTRY, Offspring, Rejected, VariationContext
from evo_fsr.backend.inline import InlineBackend
from evo_fsr.search.population import Individual
from evo_fsr.testing.chat_server import LocalChatServer, SilentServer, refused_url
from evo_fsr.testing.synthetic import SYNTHETIC_GPU, SyntheticEvaluator
from evo_fsr.testing.synthetic import SYNTHETIC_KERNEL as GOOD_KERNEL

MESSAGES = [{"role": "user", "content": "write a kernel"}]
REPLY = {"content": f"```cuda\n{GOOD_KERNEL}```"}


def live(base_url: str, **kw) -> LlmClient:
    options = dict(model="m", base_url=base_url, api_key="k", timeout_s=5.0, retries=0)
    options.update(kw)
    return LlmClient(**options)


# -- preflight ----------------------------------------------------------------------------------
def test_preflight_passes_with_one_cheap_request(fake_openai) -> None:
    live(fake_openai.base_url).preflight(timeout_s=2)
    assert fake_openai.model_queries == ["/v1/models/m"] and fake_openai.requests == []


def test_preflight_refused_connection_fails_fast_naming_the_url() -> None:
    url = refused_url()
    start = time.monotonic()
    with pytest.raises(PreflightError) as info:
        live(url).preflight(timeout_s=5)
    message = str(info.value)
    assert time.monotonic() - start < 5 and url in message and "cannot connect" in message and "\n" not in message


def test_preflight_silent_server_fails_within_its_timeout() -> None:
    server = SilentServer()
    try:
        start = time.monotonic()
        with pytest.raises(PreflightError, match=r"no reply within 0\.5 s"):
            live(server.base_url, timeout_s=300).preflight(timeout_s=0.5)
        assert time.monotonic() - start < 3        # the preflight's timeout, not the calls' 300 s
    finally:
        server.close()


def test_preflight_unknown_model_names_the_served_ones() -> None:
    server = LocalChatServer(lambda body: REPLY, models=["fast-model", "strong-model"])
    try:
        with pytest.raises(PreflightError, match="model 'm' is not served .*fast-model, strong-model"):
            live(server.base_url).preflight()
        live(server.base_url, model="fast-model").preflight()
    finally:
        server.close()


def test_preflight_rejected_key() -> None:
    server = LocalChatServer(lambda body: REPLY, api_key="right")
    try:
        with pytest.raises(PreflightError, match="API key was rejected"):
            live(server.base_url, api_key="wrong").preflight()
        live(server.base_url, api_key="right").preflight()
    finally:
        server.close()


def test_make_client_runs_the_preflight_unless_turned_off(tmp_path) -> None:
    config = LlmConfig(model="m", base_url=refused_url(), preflight_timeout_s=2)
    with pytest.raises(PreflightError):
        make_client(config, tmp_path)
    assert make_client(config, tmp_path, preflight=False) is not None


def synthetic(config, task):
    return InlineBackend(SyntheticEvaluator(task.name).evaluate, SYNTHETIC_GPU)


def test_evolve_stops_within_seconds_on_a_dead_endpoint(tmp_path, capsys) -> None:
    url = refused_url()
    start = time.monotonic()
    code = evolve_main(["--task", "conv2d", "--pop", "4", "--gens", "1", "--out", str(tmp_path / "run"),
                        "--llm-model", "m", "--llm-base-url", url], backend_factory=synthetic)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 1 and time.monotonic() - start < 10
    assert err[-1].startswith("evolve: ") and url in err[-1] and "cannot connect" in err[-1]


# -- consecutive failures -----------------------------------------------------------------------------
def test_consecutive_failures_stop_the_client_and_a_success_resets_the_count(tmp_path) -> None:
    script = [{"status": 500}, REPLY, {"status": 500}, {"status": 500}, REPLY]
    server = LocalChatServer(lambda body: script.pop(0))
    try:
        client = live(server.base_url, max_consecutive_failures=2, recorder=CallRecorder(tmp_path / "c.jsonl"))
        with pytest.raises(LlmError):
            client.complete(MESSAGES, operator="a")
        client.complete(MESSAGES, operator="a")                  # the streak restarts
        assert not client.health.stopped
        for _ in range(2):
            with pytest.raises(LlmError, match="HTTP 500"):
                client.complete(MESSAGES, operator="a")
        health = client.health
        assert health.stopped and not health.end_run and "2 consecutive failed calls" in health.warning
        assert server.base_url in health.reason
        sent = len(server.requests)
        with pytest.raises(LlmStopped):
            client.complete(MESSAGES, operator="a")
        assert len(server.requests) == sent                      # a stopped client sends nothing
    finally:
        server.close()


def test_end_run_on_failures_is_reported_by_health(tmp_path) -> None:
    config = LlmConfig(model="m", base_url=refused_url(), max_consecutive_failures=1, on_failures="end_run",
                       retries=0, preflight=False)
    client = make_client(config, tmp_path)
    with pytest.raises(LlmError, match="cannot reach"):
        client.complete(MESSAGES, operator="a")
    assert client.health.stopped and client.health.end_run


def test_a_stopped_client_makes_llm_operators_reject_at_once(tmp_path) -> None:
    config = LlmConfig(model="m", base_url=refused_url(), max_consecutive_failures=1, retries=0, preflight=False)
    client = make_client(config, tmp_path)
    context = VariationContext("conv2d", "d", None, client, {})
    parent = Individual("conv2d", GOOD_KERNEL)
    first = REGISTRY["llm_mutate"].vary([parent], context)
    assert isinstance(first, Rejected) and "cannot reach" in first.reason
    second = REGISTRY["llm_diff"].vary([parent], context)
    assert isinstance(second, Rejected) and second.reason.startswith("llm: stopped: 1 consecutive failed calls")
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == 1 and "error" in calls[0]
    assert not isinstance(first, Offspring)


def test_a_call_to_a_silent_server_fails_within_its_timeout(tmp_path) -> None:
    server = SilentServer()
    try:
        client = live(server.base_url, timeout_s=0.5, retries=1, recorder=CallRecorder(tmp_path / "c.jsonl"))
        start = time.monotonic()
        with pytest.raises(LlmError, match=r"no reply within 0\.5 s after 2 attempts"):
            client.complete(MESSAGES, operator="a")
        assert time.monotonic() - start < 4               # 2 x 0.5 s plus openai's short backoff
        entry = json.loads((tmp_path / "c.jsonl").read_text())
        assert [a["status"] for a in entry["attempts"]] == ["no response", "no response (APITimeoutError)"]
    finally:
        server.close()
