"""LLM access: an OpenAI-compatible client with retries and budgets, replay, prompts, parsing."""
from __future__ import annotations

from .client import BudgetExhausted, LlmClient, LlmError, LlmReply, LlmUsage, make_client
from .parsing import ParsedReply, extract_kernel

__all__ = ["BudgetExhausted", "LlmClient", "LlmError", "LlmReply", "LlmUsage", "ParsedReply",
           "extract_kernel", "make_client"]
