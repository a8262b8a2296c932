"""LLM repair: a failed candidate and its error -> a fixed kernel (the FSR compile/validate loop)."""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, Sequence

from ..llm.prompts import repair_prompt
from .base import Operator, Outcome, Rejected, VariationContext
from .llm_common import ask_for_kernel

if TYPE_CHECKING:
    from ..search.population import Individual


class LlmRepair(Operator):
    name = "llm_repair"
    needs_llm = True
    wants_failed_parent = True

    def vary(self, parents: Sequence["Individual"], context: VariationContext,
             rng: random.Random | None = None) -> Outcome:
        parent = parents[0]
        result = context.feedback(parent.id)
        if result is not None and result.status.correct:
            return Rejected(self.name, (parent.id,), "the parent did not fail: nothing to repair")
        messages = repair_prompt(context.task_description, context.gpu_info, parent.source, result)
        return ask_for_kernel(self.name, (parent.id,), messages, context)
