"""Several models behind one client: a UCB bandit picks each call's model by improvement per token.

Each model has its own budget (``llm.models[i].max_calls`` / ``max_tokens_total``) under the
run's (``llm.max_calls`` / ``max_tokens_total``).  After a child written by a call is
evaluated, the loop reports what it earned with ``credit(call_id, improvement)``
(``improvement(parent_result, child_result)``); a reply that gave no child earns nothing.
The value of a model is its total improvement per 1000 tokens spent, scaled by the best
model's value to 0..1; the bandit adds ``exploration * sqrt(ln(calls) / model calls)`` and
tries every model once first.  Credits are appended to calls.jsonl (``kind: credit``) so a
resumed run restores each model's spend and value.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

from ..types import TIER, EvalResult, Status
from .base import (Budget, BudgetExhausted, CallRecorder, LlmError, LlmHealth, LlmReply, LlmStopped, LlmUsage,
                   Messages)

log = logging.getLogger(__name__)


def score(result: EvalResult | None) -> float:
    """Fitness as one number: the tier (0 compile failure, 1 incorrect, 2 correct) plus, when
    correct, log2 of the geometric-mean speedup over the naive seed."""
    if result is None:
        return 0.0
    tier = float(TIER[result.status])
    if result.status is Status.OK and result.geomean_speedup:
        return tier + math.log2(max(result.geomean_speedup, 1e-3))
    return tier


def improvement(parent: EvalResult | None, child: EvalResult | None) -> float:
    """What a child earned over its (first) parent: the rise in ``score``, never negative."""
    return max(0.0, score(child) - score(parent))


@dataclass
class Arm:
    name: str
    calls: int = 0
    tokens: int = 0
    improvement: float = 0.0

    @property
    def value(self) -> float:
        """Improvement per 1000 tokens."""
        return self.improvement / max(self.tokens / 1000.0, 1e-9) if self.tokens else 0.0


class ModelBandit:
    """UCB1 over models, the reward being improvement per token (see the module text)."""

    def __init__(self, names: Sequence[str], exploration: float = 0.5) -> None:
        self.arms = {name: Arm(name) for name in names}
        self.exploration = exploration
        self._lock = threading.Lock()

    def choose(self, available: Sequence[str]) -> str:
        with self._lock:
            arms = [self.arms[n] for n in available]
            if not arms:
                raise ValueError("no model available")
            untried = [a for a in arms if a.calls == 0]
            if untried:
                return untried[0].name
            best = max(a.value for a in arms) or 1.0
            total = sum(a.calls for a in arms)
            scores = [a.value / best + self.exploration * math.sqrt(math.log(total) / a.calls) for a in arms]
            return arms[max(range(len(arms)), key=lambda i: (scores[i], -i))].name

    def spent(self, name: str, tokens: int) -> None:
        with self._lock:
            arm = self.arms[name]
            arm.calls += 1
            arm.tokens += tokens

    def reward(self, name: str, gain: float) -> None:
        with self._lock:
            self.arms[name].improvement += max(0.0, gain)

    def describe(self) -> str:
        with self._lock:
            return ", ".join(f"{a.name}: {a.calls} calls, {a.tokens} tokens, {a.value:.3g}/1k tokens"
                             for a in self.arms.values())


class MultiModelClient:
    """A ChatClient over several ``LlmClient``s; see the module text."""

    def __init__(self, clients: Sequence[Any], budget: Budget, exploration: float = 0.5,
                 recorder: CallRecorder | None = None) -> None:
        self.clients = {c.model: c for c in clients}
        self.budget = budget
        self.recorder = recorder
        self.bandit = ModelBandit(list(self.clients), exploration)
        self._model_of: dict[int, str] = {}
        self._lock = threading.Lock()
        if recorder:
            self._restore(recorder.entries())

    def _restore(self, entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            model = entry.get("model")
            if model not in self.clients:
                continue
            if entry.get("kind") == "credit":
                self.bandit.reward(model, float(entry.get("improvement", 0.0)))
            elif entry.get("origin") == "model" and "call" in entry:
                usage = entry.get("usage") or {}
                self.bandit.spent(model, int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0)))
                self._model_of[int(entry["call"])] = model

    @property
    def usage(self) -> LlmUsage:
        return self.budget.usage

    @property
    def health(self) -> LlmHealth:
        states = [c.health for c in self.clients.values()]
        if all(h.stopped for h in states):
            return LlmHealth(stopped=True, end_run=any(h.end_run for h in states),
                             consecutive_failures=min(h.consecutive_failures for h in states),
                             reason="every model stopped: " + "; ".join(h.reason for h in states))
        return LlmHealth(consecutive_failures=min(h.consecutive_failures for h in states))

    def describe(self) -> str:
        return f"{len(self.clients)} models chosen by a bandit: " + "; ".join(
            c.describe() for c in self.clients.values())

    def preflight(self, timeout_s: float) -> None:
        for client in self.clients.values():
            client.preflight(timeout_s)

    def complete(self, messages: Messages, *, operator: str) -> LlmReply:
        available = [name for name, c in self.clients.items() if not c.budget.exhausted() and not c.health.stopped]
        if not available:
            if all(c.health.stopped for c in self.clients.values()):
                raise LlmStopped(self.health.reason)
            raise BudgetExhausted("every model's budget is exhausted: " +
                                  "; ".join(c.budget.exhausted() or c.health.reason for c in self.clients.values()))
        self.budget.reserve()
        name = self.bandit.choose(available)
        try:
            reply = self.clients[name].complete(messages, operator=operator)
        except LlmError:
            self.budget.settle(0, 0, failed=True)
            self.bandit.spent(name, 0)
            raise
        self.budget.settle(reply.prompt_tokens, reply.completion_tokens)
        self.bandit.spent(name, reply.tokens)
        with self._lock:
            self._model_of[reply.call_id] = name
        return reply

    def credit(self, call_id: int, gain: float) -> None:
        """What the child of call ``call_id`` earned (``improvement``); recorded for resume."""
        with self._lock:
            name = self._model_of.get(call_id)
        if name is None:
            return
        self.bandit.reward(name, gain)
        if self.recorder:
            self.recorder.record({"kind": "credit", "credit_for": call_id, "model": name,
                                  "improvement": round(max(0.0, gain), 6), "time": time.time()})
        log.info("LLM models: %s", self.bandit.describe())
