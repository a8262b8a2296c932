"""What the loop tells the LLM side and asks of it (kept out of loop.py and breeder.py):

- ``context_extras``: the prompt material operators read from ``VariationContext`` - the task
  brief (shapes with sizes, precision policy, fitness), the islands (inspirations), the known
  individuals (the parent's lineage) and the LLM settings;
- ``after_child``: an evaluated LLM child's record fields (how the reply became the source, which
  model wrote it) and the bandit's credit (improvement over the first parent);
- ``llm_usable`` / ``llm_ended``: the client's health (consecutive failures stop the LLM
  operators, or end the run, by ``llm.on_failures``).
"""
from __future__ import annotations

from typing import Any, Mapping

from ..llm import LlmUsage, credit, health_of
from ..llm.brief import TaskBrief
from ..llm.models import improvement
from ..operators import Offspring
from ..tasks import Task
from ..types import EvalResult
from .population import Population
from .store import RunStore


def task_brief(task: Task, benchmark: str | None) -> TaskBrief | None:
    try:
        return TaskBrief.from_task(task, benchmark or None)
    except (KeyError, ValueError):        # an unknown benchmark set: the description is sent instead
        return None


def context_extras(population: Population | None) -> dict[str, Any]:
    if population is None:
        return {}
    known = {ind.id: ind for ind in [*population.members, *population.hof]}
    return {"islands": tuple(tuple(island) for island in population.islands), "individuals": known}


def after_child(llm: Any, outcome: Offspring, results: Mapping[str, EvalResult], result: EvalResult) -> dict[str, Any]:
    """Record fields for an LLM child, and the bandit's credit for the call that wrote it."""
    if outcome.llm_call is None:
        return {}
    parent = results.get(outcome.parents[0]) if outcome.parents else None
    credit(llm, outcome.llm_call, improvement(parent, result))
    return {key: value for key, value in (("edit", outcome.edit), ("model", outcome.model)) if value}


def llm_usable(llm: Any) -> bool:
    return llm is not None and not health_of(llm).stopped


def llm_ended(llm: Any) -> str | None:
    """Why the run must end for the LLM (``llm.on_failures: end_run``), or None."""
    health = health_of(llm) if llm is not None else None
    if health is None or not health.end_run:
        return None
    return health.reason or "the LLM endpoint failed"


def warning(llm: Any) -> str:
    """For the progress line: why the LLM operators stopped ("" while they run)."""
    return health_of(llm).warning if llm is not None else ""


def saved_llm_usage(store: RunStore) -> LlmUsage | None:
    """LLM usage recorded in the latest snapshot (budgets continue across ``--resume``)."""
    snap = store.latest_snapshot()
    usage = snap.data.get("llm_usage") if snap else None
    return LlmUsage(**usage) if isinstance(usage, dict) else None
