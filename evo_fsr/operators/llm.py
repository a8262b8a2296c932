"""The LLM operators: one call to the model, its reply turned into one child or a rejection.

Edit modes (their probabilities are ``operators.llm_mutate``, ``llm_diff``, ``llm_crossover``
and ``llm_repair``): a full rewrite of the parent, SEARCH/REPLACE edits of the parent
(``llm.diff``; a reply that is a whole file is taken as a rewrite, a diff that does not apply
is rejected with its reason), a crossover of two parents, and the repair of a failed parent.
Prompts carry the task brief, the parents' feedback, the parent's lineage and inspirations
from other islands (``llm.prompts``).  LLM operators draw no random numbers from the loop: the
inspirations' tie-breaks use an RNG seeded by the parent's id, so a replayed run sends the
same prompts.
"""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, ClassVar, Sequence

from ..llm.base import LlmError, LlmReply, health_of
from ..llm.diff import apply_reply
from ..llm.inspirations import choose_inspirations, lineage_of
from ..llm.parsing import extract_kernel
from ..llm.prompts import Prompt, PromptInputs, build_prompt
from .base import Offspring, Operator, Outcome, Rejected, VariationContext

if TYPE_CHECKING:
    from ..search.population import Individual

EXCERPT_CHARS = 400


def prompt_for(mode: str, parents: Sequence["Individual"], context: VariationContext) -> Prompt:
    """The prompt an LLM operator of ``mode`` sends for these parents in this context."""
    settings = context.llm_settings
    inputs = PromptInputs(brief=context.brief or context.task_description, gpu=context.gpu_info,
                          results=context.results, profiles=context.profiles, budget_tokens=settings.prompt_tokens)
    parent = parents[0]
    inspirations = []
    if mode in ("rewrite", "diff", "crossover") and context.islands:
        inspirations = [m for m in choose_inspirations(context.islands, parent, random.Random(parent.id),
                                                       settings.inspirations + len(parents) - 1)
                        if m.id not in {p.id for p in parents}][:settings.inspirations]
    lineage = lineage_of(parent, context.individuals, context.results, settings.lineage_depth) \
        if settings.lineage_depth and mode != "crossover" else []
    return build_prompt(mode, inputs, parents, inspirations=inspirations, lineage=lineage)


class LlmOperator(Operator):
    """Ask, then turn the reply into an outcome (``child``)."""

    needs_llm = True
    mode: ClassVar[str] = "rewrite"

    def vary(self, parents: Sequence["Individual"], context: VariationContext,
             rng: random.Random | None = None) -> Outcome:
        ids = tuple(p.id for p in parents[:self.arity])
        refusal = self.refuse(parents, context)
        if refusal:
            return Rejected(self.name, ids, refusal)
        if context.llm is None:
            return Rejected(self.name, ids, "no LLM configured")
        health = health_of(context.llm)
        if health.stopped:
            return Rejected(self.name, ids, f"llm: stopped: {health.reason}")
        prompt = prompt_for(self.mode, parents[:self.arity], context)
        try:
            reply = context.llm.complete(prompt.messages, operator=self.name)
        except LlmError as exc:
            return Rejected(self.name, ids, f"llm: {exc}")
        return self.child(reply, parents, ids)

    def refuse(self, parents: Sequence["Individual"], context: VariationContext) -> str:
        """Why this operator does not apply to these parents ("" when it does)."""
        return ""

    def child(self, reply: LlmReply, parents: Sequence["Individual"], ids: tuple[str, ...]) -> Outcome:
        parsed = extract_kernel(reply.text)
        if not parsed.ok:
            return Rejected(self.name, ids, f"unusable reply: {parsed.reason}", llm_call=reply.call_id,
                            reply_excerpt=reply.text[:EXCERPT_CHARS])
        return Offspring(parsed.source or "", self.name, ids, llm_call=reply.call_id, replayed=reply.replayed,
                         edit="full file", model=reply.model)


class LlmMutation(LlmOperator):
    """A parent's source and feedback plus the GPU's properties -> a rewritten kernel."""

    name = "llm_mutate"


class LlmDiff(LlmOperator):
    """A parent's source and feedback -> SEARCH/REPLACE edits applied to it."""

    name = "llm_diff"
    mode = "diff"

    def child(self, reply: LlmReply, parents: Sequence["Individual"], ids: tuple[str, ...]) -> Outcome:
        result = apply_reply(parents[0].source, reply.text)
        if not result.ok:
            return Rejected(self.name, ids, result.describe(), llm_call=reply.call_id,
                            reply_excerpt=reply.text[:EXCERPT_CHARS])
        return Offspring(result.source or "", self.name, ids, llm_call=reply.call_id, replayed=reply.replayed,
                         edit=result.describe(), model=reply.model)


class LlmCrossover(LlmOperator):
    """Two parents with their feedback -> one kernel combining their strengths."""

    name = "llm_crossover"
    arity = 2
    mode = "crossover"


class LlmRepair(LlmOperator):
    """A failed candidate and its error -> a fixed kernel (the FSR compile/validate loop)."""

    name = "llm_repair"
    mode = "repair"
    wants_failed_parent = True

    def refuse(self, parents: Sequence["Individual"], context: VariationContext) -> str:
        result = context.feedback(parents[0].id)
        if result is not None and result.status.correct:
            return "the parent did not fail: nothing to repair"
        return ""
