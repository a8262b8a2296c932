"""Variation operators: the base class, their outcomes and the context they run in.

An operator turns parents into one ``Offspring`` (a new source) or a ``Rejected`` outcome with
the reason (an unusable LLM reply, no knobs to change, budget exhausted): rejected work is
recorded and costs no GPU time.  Knob operators draw from the engine's RNG in the engine
thread; LLM operators use no RNG and may run in worker threads.
"""
from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, Mapping, Sequence

from ..config import LlmConfig
from ..types import EvalResult, GpuInfo

if TYPE_CHECKING:
    from ..llm.base import ChatClient
    from ..llm.brief import TaskBrief
    from ..llm.ncu import NcuProfile
    from ..search.population import Individual


@dataclass(frozen=True)
class Offspring:
    source: str
    operator: str
    parents: tuple[str, ...]
    llm_call: int | None = None       # id of the recorded LLM call that wrote it
    replayed: bool = False            # the reply came from a recorded run
    edit: str = ""                    # how an LLM reply became this source (e.g. "2 SEARCH/REPLACE block(s) applied")
    model: str = ""                   # the model that wrote it (LLM operators)


@dataclass(frozen=True)
class Rejected:
    operator: str
    parents: tuple[str, ...]
    reason: str
    llm_call: int | None = None
    reply_excerpt: str = ""


Outcome = Offspring | Rejected


@dataclass(frozen=True)
class VariationContext:
    """What operators may read: the task text, the GPU, the LLM and feedback by candidate id.

    For the LLM operators' prompts the loop may also give: ``brief`` (shapes with sizes,
    precision policy, fitness definition; else ``task_description`` is sent), ``islands`` (the
    members of each island, for inspirations), ``individuals`` (every known individual by id,
    for the parent's lineage), ``profiles`` (Nsight Compute metrics by id) and ``llm_settings``
    (prompt budget, inspirations, lineage depth).
    """

    task_name: str
    task_description: str
    gpu_info: GpuInfo | None = None
    llm: "ChatClient | None" = None
    results: Mapping[str, EvalResult] = field(default_factory=dict)
    knob_mutation_rate: float = 0.3
    brief: "TaskBrief | None" = None
    islands: Sequence[Sequence["Individual"]] = ()
    individuals: Mapping[str, "Individual"] = field(default_factory=dict)
    profiles: Mapping[str, "NcuProfile"] = field(default_factory=dict)
    llm_settings: LlmConfig = field(default_factory=LlmConfig)

    def __post_init__(self) -> None:
        # A snapshot of the verdicts when the context is made (in the loop's thread): an LLM
        # operator building its prompt later in a worker thread must not see verdicts that
        # arrived meanwhile, or the prompt would depend on timing and a replay would differ.
        object.__setattr__(self, "results", MappingProxyType(dict(self.results)))

    def feedback(self, candidate_id: str) -> EvalResult | None:
        return self.results.get(candidate_id)


class Operator(ABC):
    name: ClassVar[str]
    arity: ClassVar[int] = 1            # parents it takes
    needs_llm: ClassVar[bool] = False
    wants_failed_parent: ClassVar[bool] = False   # repair: parent drawn among failed candidates

    @abstractmethod
    def vary(self, parents: Sequence["Individual"], context: VariationContext,
             rng: random.Random | None = None) -> Outcome:
        """One offspring or the reason there is none; never raises for bad input."""
