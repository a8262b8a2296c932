"""LLM mutation: a parent's source and feedback plus the GPU's properties -> a rewritten kernel."""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, Sequence

from ..llm.prompts import mutate_prompt
from .base import Operator, Outcome, VariationContext
from .llm_common import ask_for_kernel

if TYPE_CHECKING:
    from ..search.population import Individual


class LlmMutation(Operator):
    name = "llm_mutate"
    needs_llm = True

    def vary(self, parents: Sequence["Individual"], context: VariationContext,
             rng: random.Random | None = None) -> Outcome:
        parent = parents[0]
        messages = mutate_prompt(context.task_description, context.gpu_info, parent.source,
                                 context.feedback(parent.id))
        return ask_for_kernel(self.name, (parent.id,), messages, context)
