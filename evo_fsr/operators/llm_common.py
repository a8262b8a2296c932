"""Shared step of the LLM operators: ask, parse, and turn the reply into an outcome."""
from __future__ import annotations

from ..llm.client import LlmError, Messages
from ..llm.parsing import extract_kernel
from .base import Offspring, Outcome, Rejected, VariationContext

EXCERPT_CHARS = 400


def ask_for_kernel(name: str, parents: tuple[str, ...], messages: Messages,
                   context: VariationContext) -> Outcome:
    if context.llm is None:
        return Rejected(name, parents, "no LLM configured")
    try:
        reply = context.llm.complete(messages, operator=name)
    except LlmError as exc:
        return Rejected(name, parents, f"llm: {exc}")
    parsed = extract_kernel(reply.text)
    if not parsed.ok:
        return Rejected(name, parents, f"unusable reply: {parsed.reason}", llm_call=reply.call_id,
                        reply_excerpt=reply.text[:EXCERPT_CHARS])
    return Offspring(parsed.source or "", name, parents, llm_call=reply.call_id, replayed=reply.replayed)
