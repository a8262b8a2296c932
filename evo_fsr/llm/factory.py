"""The chat client a run uses: a replay, several models behind a bandit, one model, or none."""
from __future__ import annotations

from pathlib import Path

from ..config import LlmConfig
from .base import Budget, CallIds, CallRecorder, ChatClient, LlmUsage
from .client import LlmClient
from .models import MultiModelClient
from .replay import ReplayClient


def model_usage(recorder: CallRecorder | None, model: str) -> LlmUsage | None:
    """One model's usage so far, from the recorded calls (budgets continue across --resume)."""
    if recorder is None:
        return None
    calls = failed = prompt = completion = 0
    for entry in recorder.entries():
        if entry.get("origin") == "model" and entry.get("model") == model and "call" in entry:
            usage = entry.get("usage") or {}
            calls += 1
            failed += int("error" in entry)
            prompt += int(usage.get("prompt_tokens", 0))
            completion += int(usage.get("completion_tokens", 0))
    return LlmUsage(calls, failed, prompt, completion)


def make_client(config: LlmConfig, record_dir: Path | str | None, usage: LlmUsage | None = None,
                preflight: bool | None = None) -> ChatClient | None:
    """The client for ``config`` (None: knob operators only).  A live endpoint is checked first
    (``llm.preflight``; ``preflight`` overrides it) and a failure raises ``PreflightError``."""
    recorder = CallRecorder(Path(record_dir) / "calls.jsonl") if record_dir else None
    if config.replay_from:
        return ReplayClient.from_path(config.replay_from, recorder=recorder, usage=usage)
    client: LlmClient | MultiModelClient
    if config.models:
        ids = CallIds(recorder.next_call_id() if recorder else 1)
        clients = [LlmClient.from_config(config, recorder, model_usage(recorder, m.model), model=m.model,
                                         base_url=m.base_url, api_key_env=m.api_key_env, max_calls=m.max_calls,
                                         max_tokens_total=m.max_tokens_total, ids=ids)
                   for m in config.models]
        client = MultiModelClient(clients, Budget(config.max_calls, config.max_tokens_total, usage),
                                  exploration=config.bandit_exploration, recorder=recorder)
    elif config.model:
        client = LlmClient.from_config(config, recorder, usage)
    else:
        return None
    if config.preflight if preflight is None else preflight:
        client.preflight(config.preflight_timeout_s)
    return client
