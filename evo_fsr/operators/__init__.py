"""Variation operators in a registry by name (probabilities come from ``OperatorConfig``)."""
from __future__ import annotations

from .base import Offspring, Operator, Outcome, Rejected, VariationContext
from .knobs import KNOB_EXPLORE, Exploration, KnobCrossover, KnobMutation, nearest_unseen_variant, random_knob_variant
from .llm import LlmCrossover, LlmDiff, LlmMutation, LlmOperator, LlmRepair, prompt_for

REGISTRY: dict[str, Operator] = {op.name: op for op in (
    KnobMutation(), KnobCrossover(), LlmMutation(), LlmDiff(), LlmCrossover(), LlmRepair())}


def get_operator(name: str) -> Operator:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no operator named {name!r} (known: {', '.join(REGISTRY)})") from None


__all__ = ["KNOB_EXPLORE", "REGISTRY", "Exploration", "KnobCrossover", "KnobMutation", "LlmCrossover", "LlmDiff",
           "LlmMutation", "LlmOperator", "LlmRepair", "Offspring", "Operator", "Outcome", "Rejected",
           "VariationContext", "get_operator", "nearest_unseen_variant", "random_knob_variant", "prompt_for"]
