"""LLM crossover: two parents with their feedback -> one kernel combining their strengths."""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, Sequence

from ..llm.prompts import crossover_prompt
from .base import Operator, Outcome, VariationContext
from .llm_common import ask_for_kernel

if TYPE_CHECKING:
    from ..search.population import Individual


class LlmCrossover(Operator):
    name = "llm_crossover"
    arity = 2
    needs_llm = True

    def vary(self, parents: Sequence["Individual"], context: VariationContext,
             rng: random.Random | None = None) -> Outcome:
        a, b = parents[0], parents[1]
        messages = crossover_prompt(context.task_description, context.gpu_info, a.source, context.feedback(a.id),
                                    b.source, context.feedback(b.id))
        return ask_for_kernel(self.name, (a.id, b.id), messages, context)
