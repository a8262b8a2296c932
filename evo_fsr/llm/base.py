"""What every chat client shares: errors, replies, usage, budgets, the call recorder, health.

``client.py`` (a live endpoint), ``replay.py`` (a recorded run) and ``models.py`` (several
models behind a bandit) all build on this module and never import each other's internals.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

Messages = list[dict[str, str]]


class LlmError(RuntimeError):
    """No usable reply: the reason is the message (recorded, costs no GPU time)."""


class BudgetExhausted(LlmError):
    """The run's (or a model's) cap on LLM calls or tokens is reached."""


class LlmStopped(LlmError):
    """The LLM operators are stopped: too many consecutive failed calls (see ``LlmHealth``)."""


class PreflightError(LlmError):
    """The endpoint failed the start-up check: one line naming the URL and the problem."""


@dataclass(frozen=True)
class LlmReply:
    text: str
    call_id: int
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    replayed: bool = False          # served from a recorded run, not written by a model now

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class LlmUsage:
    calls: int = 0
    failed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class LlmHealth:
    """Whether the LLM operators may still call.  ``warning`` is for the progress line."""

    stopped: bool = False
    end_run: bool = False             # llm.on_failures is end_run and the client stopped
    consecutive_failures: int = 0
    reason: str = ""

    @property
    def warning(self) -> str:
        return f"LLM STOPPED: {self.reason}" if self.stopped else ""


class ChatClient(Protocol):
    """What operators need: one chat completion, or an LlmError."""

    def complete(self, messages: Messages, *, operator: str) -> LlmReply: ...

    @property
    def usage(self) -> LlmUsage: ...

    def describe(self) -> str: ...


def prompt_hash(messages: Messages) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def health_of(client: Any) -> LlmHealth:
    """A client's health; clients without one (test stubs) are always healthy."""
    health = getattr(client, "health", None)
    return health if isinstance(health, LlmHealth) else LlmHealth()


def credit(client: Any, call_id: int | None, improvement: float) -> None:
    """Tell a multi-model client what a call's child earned (no-op for other clients)."""
    fn = getattr(client, "credit", None)
    if fn is not None and call_id is not None:
        fn(call_id, improvement)


class CallRecorder:
    """Appends one JSON line per call (prompt, reply or error, usage, attempts, origin)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def entries(self) -> list[dict[str, Any]]:
        """The recorded calls (a torn or foreign line is skipped)."""
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict):
                out.append(entry)
        return out

    def next_call_id(self) -> int:
        with self._lock:
            return max((int(e.get("call", 0) or 0) for e in self.entries()), default=0) + 1

    def record(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, sort_keys=True) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())


class CallIds:
    """Thread-safe call ids, shared by every client that writes to one recorder."""

    def __init__(self, start: int = 1) -> None:
        self._value, self._lock = start - 1, threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._value += 1
            return self._value


class Budget:
    """Thread-safe counters and caps on calls and tokens."""

    def __init__(self, max_calls: int, max_tokens_total: int, usage: LlmUsage | None = None,
                 label: str = "LLM") -> None:
        self.max_calls, self.max_tokens_total, self.label = max_calls, max_tokens_total, label
        self._usage = usage or LlmUsage()
        self._lock = threading.Lock()

    @property
    def usage(self) -> LlmUsage:
        with self._lock:
            return self._usage

    def exhausted(self) -> str:
        """Why no call may start now, or ""."""
        u = self.usage
        if u.calls >= self.max_calls:
            return f"{self.label} call budget exhausted ({u.calls}/{self.max_calls} calls)"
        if u.tokens >= self.max_tokens_total:
            return f"{self.label} token budget exhausted ({u.tokens}/{self.max_tokens_total} tokens)"
        return ""

    def reserve(self) -> None:
        """Count one call now, or raise BudgetExhausted."""
        with self._lock:
            u = self._usage
            if u.calls >= self.max_calls:
                raise BudgetExhausted(f"{self.label} call budget exhausted ({u.calls}/{self.max_calls} calls)")
            if u.tokens >= self.max_tokens_total:
                raise BudgetExhausted(f"{self.label} token budget exhausted "
                                      f"({u.tokens}/{self.max_tokens_total} tokens)")
            self._usage = LlmUsage(u.calls + 1, u.failed_calls, u.prompt_tokens, u.completion_tokens)

    def settle(self, prompt_tokens: int, completion_tokens: int, failed: bool = False) -> None:
        with self._lock:
            u = self._usage
            self._usage = LlmUsage(u.calls, u.failed_calls + int(failed), u.prompt_tokens + prompt_tokens,
                                   u.completion_tokens + completion_tokens)


class FailureGuard:
    """Counts consecutive failed calls; after ``limit`` the client stops (0 = never).

    A stopped client refuses every later call at once with ``LlmStopped``.  With ``end_run``
    its ``health`` asks the loop to end the run instead of only dropping the LLM operators.
    """

    def __init__(self, limit: int, end_run: bool = False, where: str = "") -> None:
        self.limit, self.end_run, self.where = limit, end_run, where
        self._streak, self._reason, self._stopped = 0, "", False
        self._lock = threading.Lock()

    def check(self) -> None:
        with self._lock:
            if self._stopped:
                raise LlmStopped(self._reason)

    def success(self) -> None:
        with self._lock:
            self._streak = 0

    def failure(self, reason: str) -> None:
        with self._lock:
            self._streak += 1
            if self.limit and self._streak >= self.limit and not self._stopped:
                self._stopped = True
                where = f" at {self.where}" if self.where else ""
                self._reason = (f"{self._streak} consecutive failed calls{where} "
                                f"(last: {' '.join(reason.split())[:200]})")

    @property
    def health(self) -> LlmHealth:
        with self._lock:
            return LlmHealth(stopped=self._stopped, end_run=self._stopped and self.end_run,
                             consecutive_failures=self._streak, reason=self._reason)
