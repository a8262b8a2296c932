"""LLM client for any OpenAI-compatible endpoint (the ``openai`` package).

- Retries with exponential backoff (honouring Retry-After) on 429, 5xx, timeouts and
  connection errors; other 4xx fail at once.
- Caps on calls and tokens per run (``BudgetExhausted``), a concurrency limit (requests from
  worker threads overlap GPU evaluation).
- Every prompt and reply (or error) is appended to ``<run>/llm/calls.jsonl`` by a
  ``CallRecorder``; ``replay.ReplayClient`` serves a recorded run's replies instead.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from ..config import LlmConfig

log = logging.getLogger(__name__)

Messages = list[dict[str, str]]
MAX_BACKOFF_S = 60.0


class LlmError(RuntimeError):
    """No usable reply: the reason is the message (recorded, costs no GPU time)."""


class BudgetExhausted(LlmError):
    """The run's cap on LLM calls or tokens is reached."""


@dataclass(frozen=True)
class LlmReply:
    text: str
    call_id: int
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    replayed: bool = False          # served from a recorded run, not written by a model now


@dataclass(frozen=True)
class LlmUsage:
    calls: int = 0
    failed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ChatClient(Protocol):
    """What operators need: one chat completion, or an LlmError."""

    def complete(self, messages: Messages, *, operator: str) -> LlmReply: ...

    @property
    def usage(self) -> LlmUsage: ...

    def describe(self) -> str: ...


def prompt_hash(messages: Messages) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


class CallRecorder:
    """Appends one JSON line per call (prompt, reply or error, usage, origin) to a file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def next_call_id(self) -> int:
        with self._lock:
            if not self.path.is_file():
                return 1
            return sum(1 for line in self.path.open(encoding="utf-8") if line.strip()) + 1

    def record(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, sort_keys=True) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())


class Budget:
    """Thread-safe counters and caps on calls and tokens."""

    def __init__(self, max_calls: int, max_tokens_total: int, usage: LlmUsage | None = None) -> None:
        self.max_calls, self.max_tokens_total = max_calls, max_tokens_total
        self._usage = usage or LlmUsage()
        self._lock = threading.Lock()

    @property
    def usage(self) -> LlmUsage:
        with self._lock:
            return self._usage

    def reserve(self) -> None:
        """Count one call now, or raise BudgetExhausted."""
        with self._lock:
            u = self._usage
            if u.calls >= self.max_calls:
                raise BudgetExhausted(f"LLM call budget exhausted ({u.calls}/{self.max_calls} calls)")
            if u.tokens >= self.max_tokens_total:
                raise BudgetExhausted(f"LLM token budget exhausted ({u.tokens}/{self.max_tokens_total} tokens)")
            self._usage = LlmUsage(u.calls + 1, u.failed_calls, u.prompt_tokens, u.completion_tokens)

    def settle(self, prompt_tokens: int, completion_tokens: int, failed: bool = False) -> None:
        with self._lock:
            u = self._usage
            self._usage = LlmUsage(u.calls, u.failed_calls + int(failed), u.prompt_tokens + prompt_tokens,
                                   u.completion_tokens + completion_tokens)


class LlmClient:
    """Chat completions against one OpenAI-compatible endpoint."""

    def __init__(self, *, model: str, base_url: str | None, api_key: str | None, temperature: float = 0.7,
                 max_tokens: int = 8192, max_calls: int = 500, max_tokens_total: int = 5_000_000,
                 concurrency: int = 4, timeout_s: float = 300.0, retries: int = 4,
                 recorder: CallRecorder | None = None, backoff_s: float = 1.0,
                 usage: LlmUsage | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        import openai  # imported here: only the LLM client needs it

        self._openai = openai
        self.model, self.base_url = model, base_url
        self.temperature, self.max_tokens = temperature, max_tokens
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.recorder = recorder
        self.budget = Budget(max_calls, max_tokens_total, usage)
        self._slots = threading.BoundedSemaphore(concurrency)
        self._sleep = sleep
        self._jitter = random.Random()
        self._ids = _Counter(recorder.next_call_id() if recorder else 1)
        self._client = openai.OpenAI(api_key=api_key or "not-needed", base_url=base_url or None,
                                     timeout=timeout_s, max_retries=0)

    @classmethod
    def from_config(cls, config: LlmConfig, recorder: CallRecorder | None,
                    usage: LlmUsage | None = None) -> "LlmClient":
        api_key = config.api_key or os.environ.get(config.api_key_env or "OPENAI_API_KEY", "")
        base_url = config.base_url or os.environ.get("OPENAI_BASE_URL", "")
        return cls(model=config.model, base_url=base_url or None, api_key=api_key or None,
                   temperature=config.temperature, max_tokens=config.max_tokens, max_calls=config.max_calls,
                   max_tokens_total=config.max_tokens_total, concurrency=config.concurrency,
                   timeout_s=config.timeout_s, retries=config.retries, recorder=recorder, usage=usage)

    @property
    def usage(self) -> LlmUsage:
        return self.budget.usage

    def describe(self) -> str:
        return f"{self.model} at {self.base_url or 'the OpenAI default endpoint'}"

    def complete(self, messages: Messages, *, operator: str) -> LlmReply:
        self.budget.reserve()
        call_id = self._ids.next()
        entry: dict[str, Any] = {"call": call_id, "operator": operator, "origin": "model", "model": self.model,
                                 "base_url": self.base_url or "", "prompt_sha": prompt_hash(messages),
                                 "messages": messages, "temperature": self.temperature,
                                 "max_tokens": self.max_tokens, "time": time.time()}
        start = time.perf_counter()
        with self._slots:
            try:
                response, attempts = self._request_with_retries(messages)
            except LlmError as exc:
                self.budget.settle(0, 0, failed=True)
                self._record({**entry, "error": str(exc), "seconds": time.perf_counter() - start})
                raise
        choice = response.choices[0] if response.choices else None
        text = (choice.message.content if choice and choice.message else None) or ""
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        self.budget.settle(prompt_tokens, completion_tokens)
        self._record({**entry, "reply": text, "attempts": attempts, "seconds": time.perf_counter() - start,
                      "finish_reason": getattr(choice, "finish_reason", None),
                      "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}})
        return LlmReply(text=text, call_id=call_id, model=self.model, prompt_tokens=prompt_tokens,
                        completion_tokens=completion_tokens)

    def _request_with_retries(self, messages: Messages) -> tuple[Any, int]:
        oa = self._openai
        for attempt in range(self.retries + 1):
            try:
                response = self._client.chat.completions.create(
                    model=self.model, messages=messages, temperature=self.temperature,
                    max_tokens=self.max_tokens)
                return response, attempt + 1
            except (oa.APITimeoutError, oa.APIConnectionError) as exc:   # timeout is a connection error
                reason, retry_after = f"{type(exc).__name__}: {exc}", None
            except oa.APIStatusError as exc:
                if exc.status_code not in (408, 409, 429) and exc.status_code < 500:
                    raise LlmError(f"HTTP {exc.status_code} from the LLM endpoint: {_short(exc)}") from None
                reason, retry_after = f"HTTP {exc.status_code}: {_short(exc)}", _retry_after(exc)
            except (oa.OpenAIError, ValueError) as exc:
                raise LlmError(f"LLM request failed: {type(exc).__name__}: {exc}") from None
            if attempt == self.retries:
                raise LlmError(f"LLM request failed after {attempt + 1} attempts: {reason}")
            delay = retry_after if retry_after is not None else self.backoff_s * 2 ** attempt
            delay = min(MAX_BACKOFF_S, delay) * (1 + 0.25 * self._jitter.random())
            log.info("LLM request failed (%s); retry %d/%d in %.1f s", reason, attempt + 1, self.retries, delay)
            self._sleep(delay)
        raise AssertionError("unreachable")

    def _record(self, entry: dict[str, Any]) -> None:
        if self.recorder:
            self.recorder.record(entry)


class _Counter:
    def __init__(self, start: int) -> None:
        self._value, self._lock = start - 1, threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._value += 1
            return self._value


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def _retry_after(exc: Any) -> float | None:
    try:
        value = exc.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


def make_client(config: LlmConfig, record_dir: Path | str | None,
                usage: LlmUsage | None = None) -> ChatClient | None:
    """The client a run uses: replay, a live endpoint, or None (knob operators only)."""
    recorder = CallRecorder(Path(record_dir) / "calls.jsonl") if record_dir else None
    if config.replay_from:
        from .replay import ReplayClient
        return ReplayClient.from_path(config.replay_from, recorder=recorder, usage=usage)
    if not config.model:
        return None
    return LlmClient.from_config(config, recorder, usage)
