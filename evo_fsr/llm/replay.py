"""Replay: serve a recorded run's replies so it can be reproduced without an endpoint.

Replies are matched by prompt hash (first unused reply to the same prompt), else by order
among the unused replies of the same operator.  Every served reply is recorded with
``origin: "replay"`` and a ``replay:<model>`` model name: it is never presented as the work
of a model called now.
"""
from __future__ import annotations

import json
import threading
import time
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

from .base import Budget, CallRecorder, LlmError, LlmReply, LlmUsage, Messages, prompt_hash

UNLIMITED = 1 << 62


class ReplayClient:
    def __init__(self, recorded: list[dict[str, Any]], source: str, recorder: CallRecorder | None = None,
                 usage: LlmUsage | None = None) -> None:
        self.source = source
        self.recorder = recorder
        self.budget = Budget(UNLIMITED, UNLIMITED, usage)
        self._lock = threading.Lock()
        self._by_prompt: dict[str, deque[int]] = defaultdict(deque)
        self._by_operator: dict[str, deque[int]] = defaultdict(deque)
        self._entries = [e for e in recorded if isinstance(e.get("reply"), str)]
        self._used: set[int] = set()
        for index, entry in enumerate(self._entries):
            self._by_prompt[entry.get("prompt_sha", "")].append(index)
            self._by_operator[entry.get("operator", "")].append(index)
        self._next_id = (recorder.next_call_id() if recorder else 1)

    @classmethod
    def from_path(cls, path: Path | str, recorder: CallRecorder | None = None,
                  usage: LlmUsage | None = None) -> "ReplayClient":
        file = Path(path)
        if file.is_dir():
            file = file / "llm" / "calls.jsonl" if (file / "llm").is_dir() else file / "calls.jsonl"
        if not file.is_file():
            raise LlmError(f"replay: no recorded LLM calls at {file}")
        entries = []
        for line in file.read_text(encoding="utf-8").splitlines():
            if line.strip():
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return cls(entries, str(file), recorder, usage)

    @property
    def usage(self) -> LlmUsage:
        return self.budget.usage

    def describe(self) -> str:
        return f"replay of {self.source} ({len(self._entries)} recorded replies)"

    def complete(self, messages: Messages, *, operator: str) -> LlmReply:
        sha = prompt_hash(messages)
        with self._lock:
            index, match = self._take(self._by_prompt[sha]), "prompt"
            if index is None:
                index, match = self._take(self._by_operator[operator]), "order"
            call_id = self._next_id
            self._next_id += 1
        if index is None:
            self.budget.reserve()
            self.budget.settle(0, 0, failed=True)
            raise LlmError(f"replay exhausted: no recorded {operator} reply left in {self.source}")
        entry = self._entries[index]
        usage = entry.get("usage") or {}
        prompt_tokens, completion_tokens = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        self.budget.reserve()
        self.budget.settle(prompt_tokens, completion_tokens)
        model = f"replay:{entry.get('model', 'unknown')}"
        if self.recorder:
            self.recorder.record({"call": call_id, "operator": operator, "origin": "replay", "model": model,
                                  "replayed_from": self.source, "replayed_call": entry.get("call"),
                                  "match": match, "prompt_sha": sha, "messages": messages,
                                  "reply": entry["reply"], "usage": usage, "time": time.time()})
        return LlmReply(text=entry["reply"], call_id=call_id, model=model, prompt_tokens=prompt_tokens,
                        completion_tokens=completion_tokens, replayed=True)

    def _take(self, queue: deque[int]) -> int | None:
        while queue:
            index = queue.popleft()
            if index not in self._used:
                self._used.add(index)
                return index
        return None
