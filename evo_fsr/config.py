"""Run configuration: frozen dataclasses, strict YAML loading and ``--set key=value`` overrides.

    task: conv2d
    pop: 32
    gens: 10
    islands: 0            # 0 = automatic: 1 island below 16 individuals, 2 from 16 up
    seed: 0
    evolution: {mode: generational, in_flight: 0}
    selection: {tournament_size: 3, elite: 1, hall_of_fame: 10, shape_elites: 1, shape_elite_rate: 0.25}
    migration: {interval: 3, size: 1}
    operators: {knob_mutate: 0.35, knob_crossover: 0.15, llm_mutate: 0.15, llm_diff: 0.15,
                llm_crossover: 0.1, llm_repair: 0.1}
    llm: {model: "", base_url: "", temperature: 0.7, ...}   # or models: [{model: fast}, {model: strong}]
    eval: {benchmark: "", shapes: [], validation_seeds: 2, max_trials: 30, compile_timeout_s: 180,
           candidate_budget_s: 120, allow_vendor_libraries: false, gpu_shared: false}
    ray: {address: "", num_gpus: 0, hang_timeout_s: 1800}

``evolution.mode`` picks the loop's policy (search/policies.py): ``generational`` (breed a
whole generation, evaluate all of it, select; a resumed run reproduces the next generation
exactly) or ``steady`` (keep ``evolution.in_flight`` children submitted and replace one
individual as each result arrives, so the GPUs never wait for a generation's slowest
candidate; an "epoch" of ``pop`` evaluated children stands in for a generation, ``gens``
counts epochs, and a resumed run continues but does not reproduce bit-identically, since
the arrival order depends on timing).  ``in_flight`` 0 means automatic: 4 x evaluator
workers + 4, so the compiles of new children overlap GPU evaluation.

Unknown keys, wrong types and out-of-range values raise ``ConfigError`` naming the source
(file or ``--set``), the dotted key and the problem, in one line.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, get_args, get_origin

import yaml

from .verdict.evaluate import EvalConfig

#: Islands used when ``islands`` is 0 (automatic): 2 from this population size up, else 1.
AUTO_TWO_ISLANDS_FROM = 16


class ConfigError(ValueError):
    """A configuration problem: ``source`` (file or flag), ``key`` (dotted) and ``problem``."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source, self.key, self.problem = source, key, problem
        super().__init__(f"{source}: {key}: {problem}" if key else f"{source}: {problem}")


#: The values of ``evolution.mode``.
EvolutionMode = Literal["generational", "steady"]
MODES: tuple[str, ...] = get_args(EvolutionMode)


@dataclass(frozen=True)
class EvolutionConfig:
    mode: EvolutionMode = "generational"   # or "steady": asynchronous steady-state (search/policies.py)
    in_flight: int = 0            # steady: candidates kept submitted; 0 = 4 x evaluator workers + 4


@dataclass(frozen=True)
class SelectionConfig:
    tournament_size: int = 3
    elite: int = 1                # best individuals of each island kept unchanged
    hall_of_fame: int = 10
    shape_elites: int = 1         # per benchmark shape, the fastest correct candidates kept (search/elites.py)
    shape_elite_rate: float = 0.25  # chance that a child's first parent is a per-shape elite (0 = tournament only)


@dataclass(frozen=True)
class MigrationConfig:
    interval: int = 3             # generations between ring migrations (0 = never)
    size: int = 1                 # individuals each island sends to the next


@dataclass(frozen=True)
class OperatorConfig:
    """Relative probabilities of the variation operators (renormalised over usable ones)."""

    knob_mutate: float = 0.35
    knob_crossover: float = 0.15
    llm_mutate: float = 0.15      # LLM edit mode: a full rewrite of the parent
    llm_diff: float = 0.15        # LLM edit mode: SEARCH/REPLACE edits of the parent
    llm_crossover: float = 0.1    # LLM edit mode: two parents -> one kernel
    llm_repair: float = 0.1
    knob_mutation_rate: float = 0.3   # chance that knob_mutate changes each knob
    init_llm_fraction: float = 0.25   # share of the initial population asked from the LLM

    def weights(self) -> dict[str, float]:
        return {"knob_mutate": self.knob_mutate, "knob_crossover": self.knob_crossover,
                "llm_mutate": self.llm_mutate, "llm_diff": self.llm_diff, "llm_crossover": self.llm_crossover,
                "llm_repair": self.llm_repair}


#: What the run does when ``llm.max_consecutive_failures`` calls in a row fail.
OnLlmFailures = Literal["stop_llm", "end_run"]


@dataclass(frozen=True)
class ModelConfig:
    """One model of several (``llm.models``); a bandit picks among them by improvement per token."""

    model: str = ""
    base_url: str = ""            # empty: llm.base_url
    api_key_env: str = ""         # empty: llm.api_key_env
    max_calls: int = 0            # this model's own caps; 0 = only the run's llm.max_calls
    max_tokens_total: int = 0     # 0 = only the run's llm.max_tokens_total


@dataclass(frozen=True)
class LlmConfig:
    model: str = ""               # empty: $OPENAI_MODEL, else no LLM (knob operators only)
    base_url: str = ""            # empty: $OPENAI_BASE_URL, else the openai default
    api_key_env: str = "OPENAI_API_KEY"
    api_key: str = ""             # prefer api_key_env; never written to the run directory
    models: tuple[ModelConfig, ...] = ()   # several models (e.g. a fast and a strong one); replaces model
    temperature: float = 0.7
    max_tokens: int = 8192        # per reply
    max_calls: int = 500          # per run
    max_tokens_total: int = 5_000_000
    concurrency: int = 4          # requests in flight (they overlap GPU evaluation)
    timeout_s: float = 120.0      # per attempt; a reply of max_tokens must fit in it
    retries: int = 2              # the openai client's own backoff (0.5 s doubling, Retry-After honoured)
    preflight: bool = True        # one cheap request at start: the model exists, the key is accepted
    preflight_timeout_s: float = 10.0
    max_consecutive_failures: int = 5   # failed calls in a row that stop the LLM operators (0 = never)
    on_failures: OnLlmFailures = "stop_llm"   # or end_run
    bandit_exploration: float = 0.5     # UCB exploration weight between several models
    prompt_tokens: int = 12000    # prompt budget (estimated at 4 characters a token); trimmed above
    inspirations: int = 3         # other good kernels shown with a mutation (0 = none)
    lineage_depth: int = 4        # ancestors of the parent shown (0 = none)
    profile_elites: int = 0       # Nsight Compute metrics for this many top kernels (0 = off)
    replay_from: str = ""         # a run directory (or its llm/calls.jsonl) to replay

    @property
    def enabled(self) -> bool:
        return bool(self.model or self.models or self.replay_from)


_EVAL_DEFAULTS = EvalConfig()


@dataclass(frozen=True)
class EvalSettings:
    """The ``eval`` keys a run may set; each becomes the ``verdict.evaluate.EvalConfig`` field of
    the same name, whose default it takes (one source of truth)."""

    benchmark: str = ""           # a benchmark set of the task ("" = the task's default)
    shapes: tuple[tuple[tuple[str, Any], ...], ...] = ()   # the user's own shapes (k=v dicts)
    validation_seeds: int = _EVAL_DEFAULTS.validation_seeds
    max_trials: int = _EVAL_DEFAULTS.max_trials
    compile_timeout_s: float = _EVAL_DEFAULTS.compile_timeout_s
    candidate_budget_s: float = _EVAL_DEFAULTS.candidate_budget_s     # wall clock per candidate
    allow_vendor_libraries: bool = _EVAL_DEFAULTS.allow_vendor_libraries   # cuBLAS & co (reported)
    gpu_shared: bool = _EVAL_DEFAULTS.gpu_shared   # other processes use the GPUs: no idle gate (gpu_idle.py)


@dataclass(frozen=True)
class RayConfig:
    address: str = ""             # "" = $RAY_ADDRESS, else start a local cluster
    num_gpus: int = 0             # evaluator actors; 0 = one per GPU of the cluster
    hang_timeout_s: float = 1800.0  # an evaluation running longer is a hung worker


@dataclass(frozen=True)
class RunConfig:
    task: str = ""
    pop: int = 32
    gens: int = 10
    islands: int = 0
    seed: int = 0
    out: str = ""                 # "" = populations/<task>/<YYYYmmdd-HHMMSS>-<seed>/
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    migration: MigrationConfig = field(default_factory=MigrationConfig)
    operators: OperatorConfig = field(default_factory=OperatorConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    eval: EvalSettings = field(default_factory=EvalSettings)
    ray: RayConfig = field(default_factory=RayConfig)

    @property
    def island_count(self) -> int:
        if self.islands:
            return self.islands
        return 2 if self.pop >= AUTO_TWO_ISLANDS_FROM else 1

    def to_dict(self, redact: bool = True) -> dict[str, Any]:
        """Plain data for config.yaml (the API key is never written)."""
        data = _to_plain(self)
        if redact and data["llm"]["api_key"]:
            data["llm"]["api_key"] = "<redacted>"
        return data


# -- loading ----------------------------------------------------------------------------------
def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
                sets: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Defaults <- YAML file <- ``overrides`` (dotted keys from CLI flags) <- ``--set`` items."""
    config = RunConfig()
    if path:
        config = merge(config, read_yaml(path), source=str(path))
    for key, value in (overrides or {}).items():
        config = apply_value(config, key, value, source=f"--{key.replace('_', '-')}")
    for item in sets:
        key, value = parse_set(item)
        config = apply_value(config, key, value, source=f"--set {item}")
    validate(config)
    return config


def read_yaml(path: str | Path) -> dict[str, Any]:
    file = Path(path)
    try:
        raw = yaml.safe_load(file.read_text())
    except OSError as exc:
        raise ConfigError(str(file), "", f"cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(str(file), "", f"not valid YAML: {' '.join(str(exc).split())}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(str(file), "", "the top level must be a mapping of keys to values")
    return raw


def parse_set(item: str) -> tuple[str, Any]:
    """``llm.temperature=0.5`` -> ("llm.temperature", 0.5); values are parsed as YAML scalars."""
    if "=" not in item:
        raise ConfigError(f"--set {item}", "", "expected key=value (e.g. llm.temperature=0.5)")
    key, text = item.split("=", 1)
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    return key.strip(), value


def merge(config: Any, raw: Mapping[str, Any], source: str, prefix: str = "") -> Any:
    """A copy of dataclass ``config`` with the nested mapping ``raw`` applied (strict keys)."""
    names = {f.name for f in dataclasses.fields(config)}
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if key not in names:
            raise ConfigError(source, dotted, f"unknown key (allowed: {', '.join(sorted(names))})")
        current = getattr(config, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, Mapping):
                raise ConfigError(source, dotted, "must be a mapping")
            changes[key] = merge(current, value, source, prefix=f"{dotted}.")
        else:
            changes[key] = _coerce(value, _field_type(type(config), key), source, dotted)
    return dataclasses.replace(config, **changes)


def apply_value(config: RunConfig, key: str, value: Any, source: str) -> RunConfig:
    """Set one dotted key (``selection.elite``) with a type check."""
    raw: Any = value
    for part in reversed(key.split(".")):
        raw = {part: raw}
    return merge(config, raw, source)


def _field_type(cls: type, name: str) -> Any:
    return typing.get_type_hints(cls)[name]


def _coerce(value: Any, kind: Any, source: str, key: str) -> Any:
    if get_origin(kind) is Literal:
        allowed = get_args(kind)
        if value in allowed:
            return value
        raise ConfigError(source, key, f"must be one of {', '.join(map(str, allowed))}, got {value!r}")
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(source, key, f"must be true or false, got {value!r}")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(source, key, f"must be an integer, got {value!r}")
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(source, key, f"must be a number, got {value!r}")
    if kind is str:
        if value is None:
            return ""
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(source, key, f"must be a string, got {value!r}")
    if get_args(kind)[:1] == (ModelConfig,):          # llm.models: a list of model mappings
        if not isinstance(value, (list, tuple)):
            raise ConfigError(source, key, "must be a list of models, each a mapping like {model: name}")
        models = []
        for i, item in enumerate(value):
            if isinstance(item, str):
                item = {"model": item}
            if not isinstance(item, Mapping):
                raise ConfigError(source, f"{key}[{i}]", "must be a model name or a mapping like {model: name}")
            models.append(merge(ModelConfig(), item, source, prefix=f"{key}[{i}]."))
        return tuple(models)
    # the other tuple-typed field: eval.shapes, a list of {dim: number} mappings
    if not isinstance(value, (list, tuple)):
        raise ConfigError(source, key, "must be a list of shapes, each a mapping like {N: 8, C: 64}")
    shapes = []
    for i, shape in enumerate(value):
        if isinstance(shape, Mapping):
            shape = tuple(shape.items())
        if not isinstance(shape, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in shape):
            raise ConfigError(source, f"{key}[{i}]", "each shape must be a mapping of dim names to numbers")
        for name, dim in shape:
            ok = isinstance(dim, (int, float)) and not isinstance(dim, bool)
            if not ok and not (name in ("label", "case") and isinstance(dim, str)):
                raise ConfigError(source, f"{key}[{i}].{name}", f"must be a number, got {dim!r}")
        shapes.append(tuple((str(n), d) for n, d in shape))
    return tuple(shapes)


def _check(ok: bool, key: str, problem: str) -> None:
    if not ok:
        raise ConfigError("config", key, problem)


def validate(config: RunConfig) -> None:
    """Range checks across keys; raises ConfigError naming the key."""
    _check(config.pop >= 2, "pop", f"must be at least 2, got {config.pop}")
    _check(config.gens >= 0, "gens", f"must be 0 or more, got {config.gens}")
    _check(config.islands >= 0, "islands", f"must be 0 (automatic) or more, got {config.islands}")
    size = config.pop // config.island_count
    _check(size >= 2, "islands", f"{config.island_count} islands leave fewer than 2 individuals each "
                                 f"in a population of {config.pop}")
    _check(config.evolution.mode in MODES, "evolution.mode", f"must be one of {', '.join(MODES)}")
    _check(config.evolution.in_flight >= 0, "evolution.in_flight",
           f"must be 0 (automatic) or more, got {config.evolution.in_flight}")
    sel = config.selection
    _check(sel.tournament_size >= 1, "selection.tournament_size", "must be at least 1")
    _check(0 <= sel.elite < size, "selection.elite", f"must be in 0..{size - 1} (island size {size})")
    _check(sel.hall_of_fame >= 1, "selection.hall_of_fame", "must be at least 1")
    _check(sel.shape_elites >= 1, "selection.shape_elites", "must be at least 1")
    _check(0 <= sel.shape_elite_rate <= 1, "selection.shape_elite_rate", "must be in 0..1")
    _check(config.migration.interval >= 0, "migration.interval", "must be 0 (never) or more")
    _check(0 <= config.migration.size < size, "migration.size", f"must be in 0..{size - 1}")
    ops = config.operators
    for name, weight in ops.weights().items():
        _check(weight >= 0, f"operators.{name}", f"must be a non-negative probability, got {weight}")
    _check(sum(ops.weights().values()) > 0, "operators", "at least one operator needs a probability > 0")
    _check(ops.knob_crossover + ops.knob_mutate > 0 or config.llm.enabled, "operators",
           "knob_mutate and knob_crossover are both 0 and no LLM is configured: nothing can vary")
    _check(0 <= ops.knob_mutation_rate <= 1, "operators.knob_mutation_rate", "must be in 0..1")
    _check(0 <= ops.init_llm_fraction <= 1, "operators.init_llm_fraction", "must be in 0..1")
    llm = config.llm
    _check(0 <= llm.temperature <= 2, "llm.temperature", "must be in 0..2")
    for key in ("max_tokens", "max_calls", "max_tokens_total", "concurrency"):
        _check(getattr(llm, key) >= 1, f"llm.{key}", "must be at least 1")
    _check(llm.timeout_s > 0, "llm.timeout_s", "must be positive")
    _check(llm.retries >= 0, "llm.retries", "must be 0 or more")
    _check(llm.preflight_timeout_s > 0, "llm.preflight_timeout_s", "must be positive")
    _check(llm.max_consecutive_failures >= 0, "llm.max_consecutive_failures", "must be 0 (never stop) or more")
    _check(llm.bandit_exploration >= 0, "llm.bandit_exploration", "must be 0 or more")
    _check(llm.prompt_tokens >= 1000, "llm.prompt_tokens", "must be at least 1000")
    for key in ("inspirations", "lineage_depth", "profile_elites"):
        _check(getattr(llm, key) >= 0, f"llm.{key}", "must be 0 or more")
    for i, m in enumerate(llm.models):
        _check(bool(m.model), f"llm.models[{i}].model", "must name a model")
        _check(m.max_calls >= 0 and m.max_tokens_total >= 0, f"llm.models[{i}]", "budgets must be 0 or more")
    names = [m.model for m in llm.models]
    _check(len(set(names)) == len(names), "llm.models", "each model may appear once")
    _check(config.eval.validation_seeds >= 1, "eval.validation_seeds", "must be at least 1")
    _check(config.eval.max_trials >= 1, "eval.max_trials", "must be at least 1")
    _check(config.eval.compile_timeout_s > 0, "eval.compile_timeout_s", "must be positive")
    _check(config.ray.num_gpus >= 0, "ray.num_gpus", "must be 0 (all) or more")
    _check(config.ray.hang_timeout_s > 0, "ray.hang_timeout_s", "must be positive")


def _to_plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: _to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple) and obj and all(isinstance(s, tuple) for s in obj):
        return [dict(s) if all(isinstance(p, tuple) for p in s) else list(s) for s in obj]
    if isinstance(obj, tuple):
        return [_to_plain(item) for item in obj]
    return obj
