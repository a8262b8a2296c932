"""LLM client against a local OpenAI-compatible server (127.0.0.1 only), replay, parsing, prompts."""
from __future__ import annotations

import json

import pytest

from evo_fsr.config import LlmConfig
from evo_fsr.llm import make_client
from evo_fsr.llm.base import BudgetExhausted, CallRecorder, LlmError
from evo_fsr.llm.client import LlmClient
from evo_fsr.llm.feedback import describe_feedback
from evo_fsr.llm.parsing import extract_kernel
from evo_fsr.llm.replay import ReplayClient
from evo_fsr.testing.synthetic import SYNTHETIC_KERNEL as GOOD_KERNEL
from evo_fsr.types import EvalResult, Mismatch, ShapeTiming, Status


MESSAGES = [{"role": "user", "content": "write a kernel"}]


def client_for(server, tmp_path, **kw) -> LlmClient:
    options = dict(model="test-model", base_url=server.base_url, api_key="k", timeout_s=5.0, retries=2,
                   recorder=CallRecorder(tmp_path / "calls.jsonl"))
    options.update(kw)
    return LlmClient(**options)


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_good_reply_is_returned_counted_and_recorded(fake_openai, tmp_path) -> None:
    client = client_for(fake_openai, tmp_path, temperature=0.3, max_tokens=123)
    reply = client.complete(MESSAGES, operator="llm_mutate")
    assert GOOD_KERNEL.strip() in reply.text and not reply.replayed
    body = fake_openai.requests[0]["body"]
    assert fake_openai.requests[0]["path"] == "/v1/chat/completions"
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("test-model", 0.3, 123)
    assert client.usage.calls == 1 and client.usage.tokens == 150
    entry = json.loads((tmp_path / "calls.jsonl").read_text())
    assert entry["origin"] == "model" and entry["messages"] == MESSAGES and entry["reply"] == reply.text
    assert [a["status"] for a in entry["attempts"]] == [200]


@pytest.mark.parametrize("status", [429, 500, 503])
def test_openai_retries_then_success_with_each_attempt_recorded(fake_openai, tmp_path, status: int) -> None:
    fake_openai.script = [{"status": status}, {"content": "```cuda\nok\n```"}]
    reply = client_for(fake_openai, tmp_path).complete(MESSAGES, operator="llm_mutate")
    assert reply.text == "```cuda\nok\n```" and len(fake_openai.requests) == 2
    assert [a["status"] for a in json.loads((tmp_path / "calls.jsonl").read_text())["attempts"]] == [status, 200]


def test_timeout_then_success(fake_openai, tmp_path) -> None:
    fake_openai.script = [{"delay_s": 1.5, "content": "late"}, {"content": "on time"}]
    reply = client_for(fake_openai, tmp_path, timeout_s=0.5).complete(MESSAGES, operator="llm_mutate")
    assert reply.text == "on time"
    assert [a["status"] for a in records(tmp_path / "calls.jsonl")[0]["attempts"]] == ["no response", 200]


def test_retries_exhausted_gives_llm_error_and_records_it(fake_openai, tmp_path) -> None:
    fake_openai.script = [{"status": 500}] * 3
    client = client_for(fake_openai, tmp_path, retries=2)
    with pytest.raises(LlmError, match="HTTP 500 .*after 3 attempts"):
        client.complete(MESSAGES, operator="llm_mutate")
    assert len(fake_openai.requests) == 3 and client.usage.failed_calls == 1
    entry = json.loads((tmp_path / "calls.jsonl").read_text())
    assert "HTTP 500" in entry["error"] and [a["status"] for a in entry["attempts"]] == [500, 500, 500]


def test_client_errors_are_not_retried(fake_openai, tmp_path) -> None:
    fake_openai.script = [{"status": 400}]
    with pytest.raises(LlmError, match="HTTP 400"):
        client_for(fake_openai, tmp_path).complete(MESSAGES, operator="llm_mutate")
    assert len(fake_openai.requests) == 1


def test_default_timeout_is_minutes_not_half_an_hour() -> None:
    config = LlmConfig()
    worst_case_s = config.timeout_s * (config.retries + 1) + 8 * config.retries   # openai backoff caps at 8 s
    assert worst_case_s <= 10 * 60 and config.preflight_timeout_s <= 30


def test_call_and_token_budgets(fake_openai, tmp_path) -> None:
    client = client_for(fake_openai, tmp_path, max_calls=2)
    client.complete(MESSAGES, operator="a")
    client.complete(MESSAGES, operator="a")
    with pytest.raises(BudgetExhausted, match="call budget"):
        client.complete(MESSAGES, operator="a")
    assert len(fake_openai.requests) == 2
    tokens = client_for(fake_openai, tmp_path, max_tokens_total=100)
    tokens.complete(MESSAGES, operator="a")                 # 150 tokens used
    with pytest.raises(BudgetExhausted, match="token budget"):
        tokens.complete(MESSAGES, operator="a")


def test_call_ids_continue_after_the_recorded_ones(fake_openai, tmp_path) -> None:
    client_for(fake_openai, tmp_path).complete(MESSAGES, operator="a")
    again = client_for(fake_openai, tmp_path).complete(MESSAGES, operator="a")
    assert again.call_id == 2 and [r["call"] for r in records(tmp_path / "calls.jsonl")] == [1, 2]


def test_replay_serves_recorded_replies_labelled_as_replayed(fake_openai, tmp_path) -> None:
    live = client_for(fake_openai, tmp_path)
    other = [{"role": "user", "content": "another prompt"}]
    fake_openai.script = [{"content": "first"}, {"content": "second"}]
    live.complete(MESSAGES, operator="llm_mutate")
    live.complete(other, operator="llm_repair")
    sent = len(fake_openai.requests)
    replay = make_client(LlmConfig(replay_from=str(tmp_path / "calls.jsonl")), tmp_path / "replayed")
    assert isinstance(replay, ReplayClient)
    again = replay.complete(other, operator="llm_repair")
    assert again.text == "second" and again.replayed and again.model == "replay:test-model"
    assert replay.complete(MESSAGES, operator="llm_mutate").text == "first"
    with pytest.raises(LlmError, match="replay exhausted"):
        replay.complete(MESSAGES, operator="llm_mutate")
    assert len(fake_openai.requests) == sent                # no traffic while replaying
    replayed = records(tmp_path / "replayed" / "calls.jsonl")
    assert {r["origin"] for r in replayed} == {"replay"} and all(r["model"].startswith("replay:") for r in replayed)


def test_no_model_means_no_client(tmp_path) -> None:
    assert make_client(LlmConfig(), tmp_path) is None


def test_client_and_replay_do_not_import_each_other() -> None:
    import ast
    import pathlib

    import evo_fsr.llm as package
    folder = pathlib.Path(package.__file__).parent
    imports = {}
    for name in ("client", "replay", "models", "base"):
        tree = ast.parse((folder / f"{name}.py").read_text())
        imports[name] = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert "replay" not in imports["client"] and "client" not in imports["replay"]
    assert "client" not in imports["models"] and not {"client", "replay", "models"} & imports["base"]


# -- parsing --------------------------------------------------------------------------------
def test_parse_fenced_block_with_prose() -> None:
    parsed = extract_kernel(f"Here you go:\n```cuda\n{GOOD_KERNEL}```\nThis tiles by 16.")
    assert parsed.ok and parsed.source.strip() == GOOD_KERNEL.strip() and parsed.blocks == 1


def test_parse_picks_the_block_that_defines_launch() -> None:
    reply = f"Old loop:\n```cpp\nfor (int i = 0; i < n; ++i) acc += a[i];\n```\nNew:\n```cu\n{GOOD_KERNEL}```\n```bash\nnvcc x.cu\n```"
    parsed = extract_kernel(reply)
    assert parsed.ok and "extern \"C\" int launch" in parsed.source and parsed.blocks == 3


def test_parse_joins_kernel_and_host_split_over_blocks() -> None:
    kernel, host = GOOD_KERNEL.split('extern "C"')
    parsed = extract_kernel(f"```cuda\n{kernel}```\nand\n```cuda\nextern \"C\"{host}```")
    assert parsed.ok and "__global__" in parsed.source and "launch(" in parsed.source


def test_parse_unfenced_code_strips_prose() -> None:
    parsed = extract_kernel(f"Sure! The kernel:\n{GOOD_KERNEL}\nHope this helps.")
    assert parsed.ok and parsed.source.startswith("#include") and "Hope" not in parsed.source


def test_parse_strips_think_blocks() -> None:
    parsed = extract_kernel(f"<think>```cuda\nbad {{\n```</think>\n```cuda\n{GOOD_KERNEL}```")
    assert parsed.ok and "bad" not in parsed.source


@pytest.mark.parametrize("reply, reason", [
    ("", "empty reply"),
    ("I cannot help with that.", "no code block"),
    ("```python\nprint(1)\n```", "no CUDA/C++ code block"),
    ("```cuda\n__global__ void k() {}\n```", "no block defines `launch`"),
    (f"```cuda\n{GOOD_KERNEL[:-40]}", "truncated"),
    ("```cuda\nextern \"C\" int launch() { return 0; }\n```", "launches no CUDA kernel"),
])
def test_parse_unusable_replies_say_why(reply: str, reason: str) -> None:
    parsed = extract_kernel(reply)
    assert not parsed.ok and reason in parsed.reason


# -- feedback -------------------------------------------------------------------------------
def _result(status: Status) -> EvalResult:
    timing = ShapeTiming("conv2_x", 0.5, 2.0, 0.5, 2.0, 20, 0.1, ("below speed of light",))
    return EvalResult(candidate_id="abc", task="conv2d", status=status, summary="one line",
                      timings=(timing,) if status is Status.OK else (),
                      mismatch=Mismatch("17x19", "y", (0, 3), 1.5, 2.0, "abs err") if status is Status.WRONG else None,
                      logs=(("compile", "kernel.cu(3): error: identifier x undefined"),))


def test_feedback_has_timings_mismatch_and_diagnostics() -> None:
    ok = describe_feedback(_result(Status.OK))
    assert "speedup 4.00x" in ok and "20.0% of speed-of-light" in ok and "below speed of light" in ok
    wrong = describe_feedback(_result(Status.WRONG))
    assert "y[0,3] = 1.5" in wrong and "identifier x undefined" in wrong
    assert "Not evaluated yet" in describe_feedback(None)
