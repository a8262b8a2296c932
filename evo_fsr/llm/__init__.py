"""LLM access: OpenAI-compatible clients (one model, several behind a bandit, a replay), prompts,
reply parsing and SEARCH/REPLACE edits."""
from __future__ import annotations

from .base import (BudgetExhausted, CallRecorder, ChatClient, LlmError, LlmHealth, LlmReply, LlmStopped, LlmUsage,
                   PreflightError, credit, health_of)
from .client import LlmClient
from .factory import make_client
from .parsing import ParsedReply, extract_kernel

__all__ = ["BudgetExhausted", "CallRecorder", "ChatClient", "LlmClient", "LlmError", "LlmHealth", "LlmReply",
           "LlmStopped", "LlmUsage", "ParsedReply", "PreflightError", "credit", "extract_kernel", "health_of",
           "make_client"]
