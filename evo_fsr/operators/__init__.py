"""Variation operators in a registry by name (probabilities come from ``OperatorConfig``)."""
from __future__ import annotations

from .base import Offspring, Operator, Outcome, Rejected, VariationContext
from .knobs import KNOB_EXPLORE, Exploration, KnobCrossover, KnobMutation, nearest_unseen_variant, random_knob_variant
from .llm_crossover import LlmCrossover
from .llm_mutate import LlmMutation
from .llm_repair import LlmRepair

REGISTRY: dict[str, Operator] = {op.name: op for op in (
    KnobMutation(), KnobCrossover(), LlmMutation(), LlmCrossover(), LlmRepair())}


def get_operator(name: str) -> Operator:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no operator named {name!r} (known: {', '.join(REGISTRY)})") from None


def register(operator: Operator) -> Operator:
    """Add (or replace) an operator; its name becomes a key of the operators config."""
    REGISTRY[operator.name] = operator
    return operator


__all__ = ["KNOB_EXPLORE", "REGISTRY", "Exploration", "KnobCrossover", "KnobMutation", "LlmCrossover",
           "LlmMutation", "LlmRepair", "Offspring", "Operator", "Outcome", "Rejected", "VariationContext",
           "get_operator", "nearest_unseen_variant", "random_knob_variant", "register"]
