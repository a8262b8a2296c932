"""Prompt building within a token budget.

A prompt is a list of sections (the task brief, the parent with its feedback, its profile, its
lineage, inspirations, the library target, the instruction).  Each section has versions from
full to shortest ("" = left out); when the estimate (4 characters a token: an approximation,
not a tokenizer) is over ``budget_tokens``, sections are shortened in ``TRIM_ORDER``, least
important first: inspirations (the last one first), lineage, profiler metrics, the parent's
per-shape lines and long logs, the task notes.  The instruction, the parent's source and the
contract are never cut.  Templates (evo_fsr/llm/prompts/*.txt) use ``string.Template`` ($name)
so the braces of C++ code need no escaping.
"""
from __future__ import annotations

import functools
import string
from dataclasses import dataclass, field
from importlib import resources
from typing import Mapping, Protocol, Sequence

from ..types import EvalResult, GpuInfo
from .base import Messages
from .brief import TaskBrief
from .feedback import describe_baseline, describe_feedback, describe_resources, library_target
from .inspirations import LineageStep
from .ncu import NcuProfile

CHARS_PER_TOKEN = 4
#: Section keys in the order they are shortened (first = least important).
TRIM_ORDER = ("inspiration3", "inspiration2", "inspiration1", "lineage", "profile", "feedback_b", "feedback",
              "task")
MODES = ("rewrite", "diff", "crossover", "repair")
_INSTRUCTION = {"rewrite": "mutate", "diff": "diff", "crossover": "crossover", "repair": "repair"}


class Kernel(Protocol):
    """What a prompt needs of a kernel (an ``Individual`` fits)."""

    @property
    def id(self) -> str: ...

    source: str


@functools.lru_cache(maxsize=None)
def template(name: str) -> string.Template:
    text = resources.files("evo_fsr.llm").joinpath("prompts", f"{name}.txt").read_text(encoding="utf-8")
    return string.Template(text)


def describe_gpu(gpu: GpuInfo | None) -> str:
    if gpu is None:
        return "unknown (not probed yet); write portable code for sm_80 and newer"
    text = gpu.describe()
    return text.replace("measured bandwidth", "estimated copy bandwidth") if "(preset" in gpu.name else text


def estimate_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


@dataclass(frozen=True)
class PromptInputs:
    """Everything a prompt reads besides its kernels."""

    brief: TaskBrief | str                        # a TaskBrief, or a plain task description
    gpu: GpuInfo | None = None
    results: Mapping[str, EvalResult] = field(default_factory=dict)
    profiles: Mapping[str, NcuProfile] = field(default_factory=dict)
    budget_tokens: int = 12000

    def feedback(self, kernel: Kernel, *, log_chars: int = 3000, with_shapes: bool = True) -> str:
        result = self.results.get(kernel.id)
        brief = self.brief if isinstance(self.brief, TaskBrief) else None
        if result is None and brief is not None and brief.baseline_id == kernel.id:
            return describe_baseline(self.results)
        return describe_feedback(result, log_chars=log_chars, with_shapes=with_shapes)


@dataclass(frozen=True)
class Prompt:
    messages: Messages
    tokens: int                                   # estimate (4 characters a token)
    trimmed: tuple[str, ...] = ()                 # sections shortened or left out for the budget
    over_budget: bool = False                     # still over after every allowed cut

    @property
    def text(self) -> str:
        return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in self.messages)


@dataclass
class _Section:
    key: str
    role: str
    versions: list[str]
    level: int = 0

    @property
    def text(self) -> str:
        return self.versions[self.level]


def _assemble(sections: list[_Section]) -> Messages:
    messages = []
    for role in ("system", "user"):
        parts = [s.text.strip() for s in sections if s.role == role and s.text.strip()]
        messages.append({"role": role, "content": "\n\n".join(parts) + "\n"})
    return messages


def fit(sections: list[_Section], budget_tokens: int) -> Prompt:
    def size() -> int:
        return sum(estimate_tokens(m["content"]) for m in _assemble(sections))

    trimmed: list[str] = []
    by_key = {s.key: s for s in sections}
    for key in TRIM_ORDER:
        section = by_key.get(key)
        while section is not None and size() > budget_tokens and section.level < len(section.versions) - 1:
            section.level += 1
            if key not in trimmed:
                trimmed.append(key)
    tokens = size()
    return Prompt(_assemble(sections), tokens, tuple(trimmed), tokens > budget_tokens)


def _task_section(inputs: PromptInputs) -> _Section:
    if isinstance(inputs.brief, TaskBrief):
        full = inputs.brief.describe(inputs.gpu)
        versions = [full]
        if inputs.brief.notes:
            versions.append(full.replace(f"\n\nNotes: {inputs.brief.notes}", ""))
    else:
        versions = [f"Task:\n{inputs.brief.strip()}"]
    system = [template("system").substitute(task=v, gpu=describe_gpu(inputs.gpu)) for v in versions]
    return _Section("task", "system", system)


def _kernel_sections(inputs: PromptInputs, kernel: Kernel, title: str, key: str, label: str = "") -> list[_Section]:
    source = f"{title}\n```cuda\n{kernel.source.strip()}\n```"
    name = f"Evaluation{' of ' + label if label else ''}"
    versions = [f"{name}:\n{inputs.feedback(kernel)}",
                f"{name} (shortened):\n{inputs.feedback(kernel, log_chars=800, with_shapes=False)}"]
    sections = [_Section(f"source_{key}", "user", [source]), _Section(key, "user", versions)]
    profile = inputs.profiles.get(kernel.id)
    if profile is not None and key == "feedback":
        sections.append(_Section("profile", "user", [profile.describe(), ""]))
    return sections


def _lineage_section(lineage: Sequence[LineageStep]) -> list[_Section]:
    if len(lineage) < 2:
        return []
    text = ("Lineage of this kernel, newest first (what earlier edits achieved):\n"
            + "\n".join(f"  {step.describe()}" for step in lineage))
    return [_Section("lineage", "user", [text, ""])]


def _inspiration_sections(inputs: PromptInputs, inspirations: Sequence[Kernel]) -> list[_Section]:
    sections = []
    for number, kernel in enumerate(inspirations[:3], 1):
        result = inputs.results.get(kernel.id)
        verdict = (f"{result.geomean_speedup:.2f}x over the naive seed"
                   if result is not None and result.geomean_speedup is not None else "correct")
        text = (f"Inspiration {number}: another kernel of the population ({kernel.id}, {verdict}); "
                f"borrow what helps, do not copy it blindly.\n```cuda\n{kernel.source.strip()}\n```")
        if result is not None:
            text += f"\nIts evaluation: {result.summary}"
            if result.resources:
                text += "\n" + describe_resources(result.resources)
        sections.append(_Section(f"inspiration{number}", "user", [text, ""]))
    return sections


def build_prompt(mode: str, inputs: PromptInputs, parents: Sequence[Kernel], *,
                 inspirations: Sequence[Kernel] = (), lineage: Sequence[LineageStep] = ()) -> Prompt:
    """The prompt for one LLM call: ``mode`` is rewrite, diff, crossover or repair."""
    if mode not in MODES:
        raise ValueError(f"unknown prompt mode {mode!r} (known: {', '.join(MODES)})")
    sections = [_task_section(inputs)]
    if mode == "crossover":
        sections += _kernel_sections(inputs, parents[0], "Kernel A:", "feedback", "A")
        sections += _kernel_sections(inputs, parents[1], "Kernel B:", "feedback_b", "B")
    else:
        title = ("This kernel for the task failed evaluation:" if mode == "repair"
                 else "Here is a kernel for this task and what the evaluator measured on it:")
        sections += _kernel_sections(inputs, parents[0], title, "feedback")
        sections += _lineage_section(lineage)
    if mode != "repair":
        sections += _inspiration_sections(inputs, inspirations)
        sections.append(_Section("target", "user", [library_target(inputs.results)]))
    sections.append(_Section("instruction", "user", [template(_INSTRUCTION[mode]).template]))
    return fit(sections, inputs.budget_tokens)


def describe_prompt_budget(prompt: Prompt, budget: int) -> str:
    cut = f"; shortened: {', '.join(prompt.trimmed)}" if prompt.trimmed else ""
    over = " (still over budget)" if prompt.over_budget else ""
    return f"~{prompt.tokens} tokens of {budget}{over}{cut}"

