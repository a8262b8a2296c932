"""LLM client for one OpenAI-compatible endpoint (the ``openai`` package).

- Retries are the openai client's own (``max_retries``: exponential backoff from 0.5 s, capped
  at 8 s, honouring Retry-After, on 408/409/429/5xx, timeouts and connection errors); every
  attempt (its status, or "no response") is recorded with the call, through the HTTP client's
  event hooks.
- ``timeout_s`` bounds each attempt; ``preflight`` checks at start, with one cheap request and
  a short timeout, that the endpoint answers, the key is accepted and the model exists.
- Caps on calls and tokens (``BudgetExhausted``), a concurrency limit (requests from worker
  threads overlap GPU evaluation), and a ``FailureGuard``: after
  ``max_consecutive_failures`` failed calls in a row the client stops (``health``).
- Every prompt and reply (or error) is appended to ``<run>/llm/calls.jsonl`` by a
  ``CallRecorder``.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from ..config import LlmConfig
from .base import (Budget, BudgetExhausted, CallIds, CallRecorder, ChatClient, FailureGuard, LlmError,
                   LlmHealth, LlmReply, LlmStopped, LlmUsage, Messages, PreflightError, prompt_hash)

log = logging.getLogger(__name__)

__all__ = ["BudgetExhausted", "CallRecorder", "ChatClient", "LlmClient", "LlmError", "LlmHealth", "LlmReply",
           "LlmStopped", "LlmUsage", "Messages", "PreflightError"]


class _Attempts(threading.local):
    """Per-thread log of the HTTP attempts of the call in progress (openai retries in-thread)."""

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] | None = None
        self.start = 0.0


class LlmClient:
    """Chat completions against one OpenAI-compatible endpoint."""

    def __init__(self, *, model: str, base_url: str | None, api_key: str | None, temperature: float = 0.7,
                 max_tokens: int = 8192, max_calls: int = 500, max_tokens_total: int = 5_000_000,
                 concurrency: int = 4, timeout_s: float = 120.0, retries: int = 2,
                 recorder: CallRecorder | None = None, usage: LlmUsage | None = None,
                 max_consecutive_failures: int = 0, end_run_on_failures: bool = False,
                 ids: CallIds | None = None) -> None:
        import openai  # imported here: only the LLM client needs it

        self._openai = openai
        self.model, self.base_url = model, base_url
        self.temperature, self.max_tokens = temperature, max_tokens
        self.timeout_s, self.retries = timeout_s, retries
        self.recorder = recorder
        self.budget = Budget(max_calls, max_tokens_total, usage, label=f"LLM ({model})")
        self.guard = FailureGuard(max_consecutive_failures, end_run_on_failures, where=self.endpoint)
        self._slots = threading.BoundedSemaphore(concurrency)
        self._ids = ids or CallIds(recorder.next_call_id() if recorder else 1)
        self._attempts = _Attempts()
        http = openai.DefaultHttpxClient(event_hooks={"request": [self._on_request],
                                                      "response": [self._on_response]})
        self._client = openai.OpenAI(api_key=api_key or "not-needed", base_url=base_url or None,
                                     timeout=timeout_s, max_retries=retries, http_client=http)

    @classmethod
    def from_config(cls, config: LlmConfig, recorder: CallRecorder | None, usage: LlmUsage | None = None, *,
                    model: str = "", base_url: str = "", api_key_env: str = "", max_calls: int = 0,
                    max_tokens_total: int = 0, ids: CallIds | None = None) -> "LlmClient":
        """The client for ``config`` (or for one of ``config.models``: the keyword overrides)."""
        env = api_key_env or config.api_key_env or "OPENAI_API_KEY"
        api_key = (config.api_key if not api_key_env else "") or os.environ.get(env, "")
        url = base_url or config.base_url or os.environ.get("OPENAI_BASE_URL", "")
        return cls(model=model or config.model, base_url=url or None, api_key=api_key or None,
                   temperature=config.temperature, max_tokens=config.max_tokens,
                   max_calls=max_calls or config.max_calls, max_tokens_total=max_tokens_total or config.max_tokens_total,
                   concurrency=config.concurrency, timeout_s=config.timeout_s, retries=config.retries,
                   recorder=recorder, usage=usage, max_consecutive_failures=config.max_consecutive_failures,
                   end_run_on_failures=config.on_failures == "end_run", ids=ids)

    @property
    def endpoint(self) -> str:
        return self.base_url or "https://api.openai.com/v1 (the openai default)"

    @property
    def usage(self) -> LlmUsage:
        return self.budget.usage

    @property
    def health(self) -> LlmHealth:
        return self.guard.health

    def describe(self) -> str:
        return f"{self.model} at {self.endpoint}"

    # -- HTTP attempt log -------------------------------------------------------------------
    def _on_request(self, request: Any) -> None:
        if self._attempts.log is not None:
            self._attempts.log.append({"at_s": round(time.perf_counter() - self._attempts.start, 3),
                                       "status": None})

    def _on_response(self, response: Any) -> None:
        if self._attempts.log:
            self._attempts.log[-1]["status"] = response.status_code

    def _begin_attempts(self) -> list[dict[str, Any]]:
        self._attempts.log, self._attempts.start = [], time.perf_counter()
        return self._attempts.log

    def _end_attempts(self, attempts: list[dict[str, Any]], error: str = "") -> list[dict[str, Any]]:
        self._attempts.log = None
        for attempt in attempts:                  # no response: a connection error or a timeout
            if attempt["status"] is None:
                attempt["status"] = "no response"
        if error and attempts and attempts[-1]["status"] == "no response":
            attempts[-1]["status"] = f"no response ({error.split(':')[0]})"
        return attempts

    # -- calls --------------------------------------------------------------------------------
    def complete(self, messages: Messages, *, operator: str) -> LlmReply:
        self.guard.check()
        self.budget.reserve()
        call_id = self._ids.next()
        entry: dict[str, Any] = {"call": call_id, "operator": operator, "origin": "model", "model": self.model,
                                 "base_url": self.base_url or "", "prompt_sha": prompt_hash(messages),
                                 "messages": messages, "temperature": self.temperature,
                                 "max_tokens": self.max_tokens, "time": time.time()}
        start = time.perf_counter()
        with self._slots:
            attempts = self._begin_attempts()
            try:
                response = self._client.chat.completions.create(
                    model=self.model, messages=messages, temperature=self.temperature, max_tokens=self.max_tokens)
                self._end_attempts(attempts)
            except Exception as exc:  # noqa: BLE001 - every failure of the request becomes an LlmError
                reason = self._reason(exc, len(attempts))
                self._end_attempts(attempts, reason)
                self.budget.settle(0, 0, failed=True)
                self.guard.failure(reason)
                self._record({**entry, "error": reason, "attempts": attempts,
                              "seconds": time.perf_counter() - start})
                raise LlmError(reason) from None
        choice = response.choices[0] if getattr(response, "choices", None) else None
        text = (choice.message.content if choice and choice.message else None) or ""
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        self.budget.settle(prompt_tokens, completion_tokens)
        self.guard.success()
        self._record({**entry, "reply": text, "attempts": attempts, "seconds": time.perf_counter() - start,
                      "finish_reason": getattr(choice, "finish_reason", None),
                      "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}})
        return LlmReply(text=text, call_id=call_id, model=self.model, prompt_tokens=prompt_tokens,
                        completion_tokens=completion_tokens)

    def _reason(self, exc: Exception, attempts: int) -> str:
        oa = self._openai
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        if isinstance(exc, oa.APITimeoutError):
            return f"APITimeoutError: no reply within {self.timeout_s:g} s{tries}"
        if isinstance(exc, oa.APIConnectionError):
            return f"APIConnectionError: cannot reach {self.endpoint}{tries}: {_cause(exc)}"
        if isinstance(exc, oa.APIStatusError):
            return f"HTTP {exc.status_code} from the LLM endpoint{tries}: {_short(exc)}"
        return f"LLM request failed{tries}: {type(exc).__name__}: {_short(exc)}"

    def _record(self, entry: dict[str, Any]) -> None:
        if self.recorder:
            self.recorder.record(entry)

    # -- preflight ------------------------------------------------------------------------------
    def preflight(self, timeout_s: float = 10.0) -> None:
        """One cheap request: the endpoint answers, the key is accepted, the model exists.

        GET models/<model>; where an endpoint has no models API (404/405), one chat completion
        of one token instead.  Raises ``PreflightError`` with one line naming the URL."""
        oa = self._openai
        quick = self._client.with_options(timeout=timeout_s, max_retries=0)
        where = f"LLM endpoint {self.endpoint}"
        try:
            try:
                quick.models.retrieve(self.model)
                return
            except oa.NotFoundError:
                listed = _listed_models(quick)
            if listed:
                raise PreflightError(f"{where}: model {self.model!r} is not served "
                                     f"(it serves: {', '.join(listed[:12])}{', ...' if len(listed) > 12 else ''})")
            quick.chat.completions.create(model=self.model, max_tokens=1,
                                          messages=[{"role": "user", "content": "Reply with OK."}])
        except PreflightError:
            raise
        except oa.AuthenticationError as exc:
            raise PreflightError(f"{where}: the API key was rejected (HTTP 401): {_short(exc)}") from None
        except oa.PermissionDeniedError as exc:
            raise PreflightError(f"{where}: access denied (HTTP 403): {_short(exc)}") from None
        except oa.NotFoundError as exc:
            raise PreflightError(f"{where}: model {self.model!r} not found (HTTP 404): {_short(exc)}") from None
        except oa.APITimeoutError:
            raise PreflightError(f"{where}: no reply within {timeout_s:g} s (llm.preflight_timeout_s)") from None
        except oa.APIConnectionError as exc:
            raise PreflightError(f"{where}: cannot connect: {_cause(exc)}") from None
        except oa.APIStatusError as exc:
            raise PreflightError(f"{where}: HTTP {exc.status_code}: {_short(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - a malformed answer is a failed preflight too
            raise PreflightError(f"{where}: unusable answer: {type(exc).__name__}: {_short(exc)}") from None


def _listed_models(client: Any) -> list[str]:
    """Model ids the endpoint lists; [] when it has no models API."""
    try:
        return sorted(str(m.id) for m in client.models.list())
    except Exception as exc:  # noqa: BLE001
        status = getattr(exc, "status_code", None)
        if status in (404, 405):
            return []
        raise


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def _cause(exc: BaseException) -> str:
    """The innermost cause's message (e.g. "[Errno 111] Connection refused")."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return _short(exc) or type(exc).__name__
