"""``evo-fsr evolve`` / ``python scripts/evolve.py``: run or resume an evolutionary search.

    python scripts/evolve.py --task conv2d --pop 32 [--gens 10] [--islands N] [--shapes quick]
        [--shape N=8,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,stride=1] [--config run.yaml]
        [--set llm.temperature=0.5] [--seed 0] [--llm-model M --llm-base-url URL]
        [--address ray://host:10001] [--out DIR] [--resume DIR] [--mode steady [--in-flight N]]

``--mode steady`` runs the loop (evo_fsr/search/loop.py) with the asynchronous steady-state
policy (evo_fsr/search/policies.py) instead of the generational one: ``--gens N`` then means N epochs of ``pop`` evaluated children each, and a
resumed steady run continues from its latest snapshot without reproducing it bit for bit
(results arrive in timing-dependent order); a generational run resumes reproducibly.

Without an LLM the run ends early (exit code 0, one warning line, repeated in the summary) once
no knob variant of any population member is left unevaluated; resuming such a run ends at once.

Bad input (a snapshot that cannot be resumed included) gives one line and exit code 2; a run
that cannot start (no GPU visible) one line and exit code 1; Ctrl-C (SIGINT) leaves a resumable
run, prints how to resume it and exits 130; SIGTERM (how schedulers stop jobs) does the same
and exits 143.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, NoReturn, Sequence

from ..config import MODES, ConfigError, RunConfig, apply_value, load_config, parse_set, read_yaml, validate
from ..backend.base import EvalBackend
from ..llm import ChatClient, LlmError, make_client
from ..report_lines import progress_best, speed_cell, speed_line
from ..search import llm_hooks, run_record
from ..search.llm_hooks import saved_llm_usage
from ..search.loop import Evolution
from ..search.policies import SteadyState
from ..search.rounds import EvolutionResult, GenerationReport
from ..verdict.gpu import free_memory_bytes
from ..search.store import RunStore, StoreError
from ..tasks import Shape, Task, TaskError, get_task
from ..types import EvalResult

log = logging.getLogger("evo_fsr.evolve")

BackendFactory = Callable[[RunConfig, Task], EvalBackend]
RESUMABLE_PREFIXES = ("gens", "llm.", "ray.", "evolution.in_flight")      # what may change on --resume
SUMMARY_ROWS = 10


class UsageError(Exception):
    """Bad command-line input (one line, exit code 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="evolve", description="Evolve fast, validated CUDA kernels for a task.")
    p.add_argument("--task", help="task name (a folder of tasks/)")
    p.add_argument("--pop", type=int, help="population size (default 32)")
    p.add_argument("--gens", type=int, help="generations after the initial one (default 10); "
                                           "with --mode steady, epochs of pop evaluated children")
    p.add_argument("--mode", choices=MODES,
                   help="generational (default): breed, evaluate and select a whole generation at a time; "
                        "steady: keep --in-flight children submitted and replace the island's worst as each "
                        "result arrives, so no GPU waits for a generation's slowest candidate "
                        "(config key evolution.mode; a resumed steady run continues but does not reproduce "
                        "bit-identically, as arrival order depends on timing)")
    p.add_argument("--in-flight", type=int, metavar="N",
                   help="steady mode: children kept submitted at once (default 0 = 4 x GPUs + 4, at most pop; "
                        "evolution.in_flight)")
    p.add_argument("--islands", type=int, help="island sub-populations (default: 1, or 2 when pop >= 16)")
    p.add_argument("--shapes", metavar="NAME", help="a benchmark set of the task (default: the task's default)")
    p.add_argument("--shape", metavar="K=V,...", action="append", default=[],
                   help="your own benchmark shape, e.g. N=8,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,stride=1 (repeatable)")
    p.add_argument("--config", metavar="YAML", help="run configuration file")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="sets",
                   help="override one config key, e.g. llm.temperature=0.5 (repeatable)")
    p.add_argument("--seed", type=int, help="random seed (default 0)")
    p.add_argument("--llm-model", help="model name at the OpenAI-compatible endpoint")
    p.add_argument("--llm-base-url", help="endpoint URL (default: $OPENAI_BASE_URL)")
    p.add_argument("--address", help="join this Ray cluster (default: $RAY_ADDRESS, else start a local one)")
    p.add_argument("--out", help="run directory (default populations/<task>/<YYYYmmdd-HHMMSS>-<seed>/)")
    p.add_argument("--resume", metavar="DIR",
                   help="continue the run in DIR from its latest snapshot (a generational run reproduces "
                        "the uninterrupted one; a steady run continues, not bit-identically)")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    return p


def _flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    pairs = {"task": args.task, "pop": args.pop, "gens": args.gens, "islands": args.islands,
             "seed": args.seed, "out": args.out, "eval.benchmark": args.shapes,
             "llm.model": args.llm_model, "llm.base_url": args.llm_base_url, "ray.address": args.address,
             "evolution.mode": args.mode, "evolution.in_flight": args.in_flight}
    overrides = {k: v for k, v in pairs.items() if v is not None}
    if args.shape:
        overrides["eval.shapes"] = [parse_shape(text) for text in args.shape]
    return overrides


def parse_shape(text: str) -> dict[str, Any]:
    """``N=8,C=64,label=mine`` -> {"N": 8, "C": 64, "label": "mine"}."""
    shape: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--shape {text}", part, "expected name=value")
        key = key.strip()
        try:
            shape[key] = int(value) if key not in ("label", "case") else value.strip()
        except ValueError:
            try:
                shape[key] = float(value)
            except ValueError:
                raise ConfigError(f"--shape {text}", key, f"{value!r} is not a number") from None
    return shape


def resolve_config(args: argparse.Namespace) -> tuple[RunConfig, RunStore | None]:
    overrides = _flag_overrides(args)
    if not args.resume:
        if "task" not in overrides and not args.config:
            raise UsageError("--task is required (or --resume DIR)")
        return load_config(args.config, overrides, args.sets), None
    store = RunStore.open(args.resume)
    config = load_config(store.config_path)
    if config.llm.api_key == "<redacted>":
        config = apply_value(config, "llm.api_key", "", source=str(store.config_path))
    explicit: dict[str, tuple[str, Any]] = {}
    if args.config:
        explicit.update({k: (args.config, v) for k, v in _flatten(read_yaml(args.config)).items()})
    explicit.update({k: (f"--{k}", v) for k, v in overrides.items()})
    for item in args.sets:
        key, value = parse_set(item)
        explicit[key] = (f"--set {item}", value)
    for key, (source, value) in explicit.items():
        changed = apply_value(config, key, value, source)
        if _lookup(changed, key) == _lookup(config, key):
            continue
        if not key.startswith(RESUMABLE_PREFIXES):
            raise ConfigError(source, key, f"cannot change when resuming (the run has {_lookup(config, key)!r}; "
                                           f"only gens, llm.*, ray.* and evolution.in_flight may change)")
        config = changed
    validate(config)
    return config, store


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _lookup(config: Any, key: str) -> Any:
    for part in key.split("."):
        config = getattr(config, part)
    return config


def resolve_shapes(config: RunConfig, task: Task) -> tuple[str | None, tuple[Shape, ...]]:
    """The benchmark set name and the user's shapes, checked against the task."""
    shapes = []
    for i, raw in enumerate(config.eval.shapes):
        try:
            shapes.append(task.make_shape(dict(raw), where=f"--shape #{i + 1}", free_memory_bytes=free_memory_bytes()))
        except TaskError as exc:
            raise ConfigError("eval.shapes", f"#{i + 1}", exc.problem) from None
    benchmark = config.eval.benchmark or None
    if benchmark:
        try:
            task.benchmark(benchmark)
        except KeyError as exc:
            raise ConfigError("--shapes", benchmark, str(exc.args[0])) from None
    return benchmark, tuple(shapes)


def default_run_dir(config: RunConfig) -> Path:
    return Path("populations") / config.task / f"{time.strftime('%Y%m%d-%H%M%S')}-{config.seed}"


def gpu_backend(config: RunConfig, task: Task) -> EvalBackend:
    """The Ray GPU pool with the real evaluator and nvcc compile tasks."""
    from ..backend.ray_pool import GpuPool, NvccCompile, TaskEvaluatorFactory, connect

    benchmark, shapes = resolve_shapes(config, task)
    owns_ray = connect(config.ray.address or None)       # fails here, in one line, without a GPU
    from ..verdict.evaluate import EvalConfig

    eval_config = EvalConfig(benchmark=benchmark, shapes=shapes, validation_seeds=config.eval.validation_seeds,
                             max_trials=config.eval.max_trials, compile_timeout_s=config.eval.compile_timeout_s,
                             candidate_budget_s=config.eval.candidate_budget_s,
                             allow_vendor_libraries=config.eval.allow_vendor_libraries,
                             gpu_shared=config.eval.gpu_shared)
    pool = GpuPool(TaskEvaluatorFactory(task.name, eval_config),
                   compile_fn=NvccCompile(task.header(), timeout_s=config.eval.compile_timeout_s,
                                          allow_vendor_libraries=config.eval.allow_vendor_libraries),
                   num_gpus=config.ray.num_gpus, hang_timeout_s=config.ray.hang_timeout_s,
                   address=config.ray.address or None, owns_ray=owns_ray)
    return pool.start()


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is: the run stops, resumable."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def progress_line(report: GenerationReport, gens: int, word: str = "gen",
                  best_result: EvalResult | None = None) -> str:
    best = progress_best(report.best_speedup, best_result)
    tokens = f"{report.llm_tokens / 1000:.1f}k" if report.llm_tokens >= 1000 else str(report.llm_tokens)
    return (f"{word} {report.generation:>3}/{gens}  best {best:>18}  valid {100 * report.valid_share:3.0f}%  "
            f"evals {report.evaluated} ({report.evals_per_minute:.1f}/min)  dups {report.duplicates}  "
            f"unusable {report.rejected}  llm {report.llm_calls} calls {tokens} tokens  [{report.seconds:.1f} s]")


def summary_table(result: EvolutionResult, engine: Evolution) -> str:
    lines = [f"{'rank':>4}  {'id':16}  {'naive / library':>20}  {'status':13}  {'operator':14}  {'gen':>3}  knobs"]
    for rank, ind in enumerate(result.hall_of_fame[:SUMMARY_ROWS], 1):
        res = engine.results.get(ind.id)
        status = res.status.value if res else "?"
        speed = speed_cell(res)
        knobs = " ".join(f"{k}={v}" for k, v in ind.knob_values.items())
        lines.append(f"{rank:>4}  {ind.id:16}  {speed:>20}  {status:13}  {ind.operator:14}  {ind.generation:>3}  {knobs}")
    lines.append("")
    lines.append("verdicts: " + verdict_counts(engine.results.values()))
    if result.stop_reason:
        lines.append(f"ended early: {result.stop_reason}")
    return "\n".join(lines)


def verdict_counts(results: Iterable[EvalResult]) -> str:
    """How many candidates got which verdict, e.g. 'ok 20, wrong:tolerance 3, compile_error 2':
    shows the user when the search is pushing against the evaluator."""
    counts = Counter(r.rejection or "ok" for r in results)
    return ", ".join(f"{code} {n}" for code, n in counts.most_common()) or "none"


def main(argv: Sequence[str] | None = None, *, backend_factory: BackendFactory | None = None) -> int:
    """Run the command; ``backend_factory`` replaces the Ray GPU pool (tests, synthetic runs)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(args_list)
    except UsageError as exc:
        print(f"evolve: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    backend: EvalBackend | None = None
    previous_sigterm = None
    try:
        config, store = resolve_config(args)
        task = get_task(config.task)
        resolve_shapes(config, task)
        if store is None:
            out = Path(config.out) if config.out else default_run_dir(config)
            if (out / "config.yaml").exists():
                raise StoreError(f"{out} already holds a run (use --resume {out} to continue it)")
        if config.llm.model or config.llm.models:       # a dead endpoint stops the run before Ray starts
            make_client(config.llm, None, preflight=config.llm.preflight)
        backend = (backend_factory or gpu_backend)(config, task)   # no GPU: fails before any file is written
        if threading.current_thread() is threading.main_thread():     # after Ray's own handler
            previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
        if store is None:
            store = RunStore.create(out, config.to_dict())
        llm = make_client(config.llm, store.llm_dir, usage=saved_llm_usage(store), preflight=False)   # checked above
        engine = Evolution(config, task, backend, store, llm=llm)
        word = engine.word
        short = "epoch" if word == "epoch" else "gen"
        engine.on_generation = lambda r: print(" ".join(filter(None, (progress_line(
            r, config.gens, short, engine.results.get(r.best_id or "")), llm_hooks.warning(llm)))), flush=True)
        if args.resume and engine.restore():
            print(f"resuming {store.root} after {word} {engine.generation}", file=sys.stderr)
        _announce_llm(llm)
        policy = engine.policy
        mode = f", steady-state with {policy.limit} in flight" if isinstance(policy, SteadyState) else ""
        print(f"evolving {task.name}: pop {config.pop}, {config.island_count} island(s), {config.gens} "
              f"{word}s{mode}, seed {config.seed}, run {store.root}", file=sys.stderr)
        try:
            result = run_record.recorded(store, config.to_dict(), engine.run, gpu_info=backend.gpu_info)
        except KeyboardInterrupt as exc:
            how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
            print(f"\n{how} after {word} {engine.generation}; continue with: "
                  f"python scripts/evolve.py --resume {store.root}", file=sys.stderr)
            return 143 if isinstance(exc, Terminated) else 130
    except (UsageError, ConfigError, TaskError, StoreError) as exc:
        print(f"evolve: error: {exc}", file=sys.stderr)
        return 2
    except (LlmError, RuntimeError, ImportError) as exc:    # WorkerError is a RuntimeError
        print(f"evolve: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
        if backend is not None:
            backend.close()
    print()
    print(summary_table(result, engine))
    if result.best is not None:
        speed = speed_line(result.best_result) if result.best_result else f"{result.best.speedup:.3f}x over naive"
        print(f"\nbest: {speed} -> {store.best_path}")
    else:
        print(f"\nno correct kernel found; every candidate is in {store.candidates_path}")
    return 0


def _announce_llm(llm: ChatClient | None) -> None:
    if llm is None:
        print("LLM: none configured (set --llm-model and --llm-base-url, or llm.model): "
              "evolving with the knob operators only", file=sys.stderr)
    else:
        print(f"LLM: {llm.describe()}", file=sys.stderr)
