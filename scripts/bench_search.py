#!/usr/bin/env python3
"""Does the search earn its keep?  One seed family, one benchmark set, one GPU.

    python scripts/bench_search.py --task conv2d --family implicit_gemm [--shapes quick]
        [--checkpoints 64 128 320] [--exhaustive-limit 1000] [--sample 500] [--repeats 3]
        [--markdown out.md] [--synthetic] [--results results.jsonl [--deadline-s 540]]

Prints, for the family's knob space (only the combinations its constraints allow):
- the optimum: every valid combination evaluated when there are at most ``--exhaustive-limit``,
  else the best of ``--sample`` valid combinations drawn uniformly without replacement (the
  table says which, and how many);
- what evolve (generational, knob operators only, no LLM) has found after each checkpoint's
  number of evaluations;
- what random search (valid combinations drawn uniformly without replacement) has found after
  the same numbers;
as the geometric-mean speedup over the naive seed and as a share of the optimum, the median over
``--repeats`` runs with different seeds (each run's figures are listed too).

Every distinct candidate is evaluated once and its verdict reused (the optimum's pass, evolve and
random search share one cache), so the three compare the same measurements.  Evolve runs on a
copy of the task holding only the naive seed and this family; its population is ``--pop``
(default 32) and it runs until the last checkpoint's number of evaluations.

``--results PATH`` makes a long run resumable across processes: every verdict is appended to this
JSONL file (one line per distinct candidate, fsync'd before the next evaluation starts), and on
start every line already there is loaded into the cache, so those candidates are not evaluated
again.  Each line holds the task, family, benchmark set and GPU name of its run; lines of another
run are ignored (a warning says how many), as is a last line torn by a kill mid-write.  The
searches are seeded, so a rerun makes the same choices and finds its earlier verdicts in the file.
``--deadline-s SECONDS`` (with ``--results``) stops starting new evaluations once this much wall
time has passed: the script says how many distinct candidates are stored, prints "partial: run the
same command again to continue" and exits with code 3; verdicts already in the file are still
served, so the run that finds every verdict stored prints the table at once (code 0).  A long GPU
run is thus split into invocations of a few minutes each, repeated until one exits with 0.

``--synthetic`` runs everything on the CPU with evo_fsr/testing/synthetic.py (fitness from knob
positions, no nvcc, no GPU): a check of this script, not a measurement.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.config import load_config  # noqa: E402
from evo_fsr.knobs import KnobSpace  # noqa: E402
from evo_fsr.backend.inline import InlineBackend  # noqa: E402
from evo_fsr.search.loop import Evolution  # noqa: E402
from evo_fsr.search.store import RunStore  # noqa: E402
from evo_fsr.tasks import Task, get_task, load_task  # noqa: E402
from evo_fsr.types import Candidate, EvalResult, GpuInfo  # noqa: E402

DEFAULT_CHECKPOINTS = (64, 128, 320)
PROGRESS_EVERY = 50
COUNT_LIMIT = 200_000         # valid combinations are counted exactly in spaces up to this size
PREFETCH_CHUNK = 64           # sources compiled ahead in parallel, then evaluated one by one on the GPU
PARTIAL_EXIT = 3              # main's exit code when --deadline-s stopped the run before its end

log = logging.getLogger("bench_search")


def _now() -> float:
    """Seconds on a monotonic clock (the deadline's clock; tests replace it)."""
    return time.monotonic()


class DeadlineReached(Exception):
    """A new (uncached) evaluation would start after ``--deadline-s``."""

    def __init__(self, stored: int, new: int) -> None:
        super().__init__(f"deadline reached: {stored} distinct candidates stored ({new} evaluated in this run)")
        self.stored, self.new = stored, new


@dataclass
class ResultsFile:
    """The ``--results`` JSONL file: one verdict per line (``EvalResult.to_dict``), tagged with
    the run it belongs to (``key``: task, family, benchmark set, GPU) so that a file reused by
    mistake cannot mix runs.  Appends are flushed and fsync'd: a kill loses at most the line
    being written, which the next ``load`` cuts off with a warning."""

    path: Path
    key: dict[str, str]

    def load(self) -> dict[str, EvalResult]:
        """The verdicts of this run already in the file, by candidate id."""
        if not self.path.is_file():
            return {}
        self._cut_torn_tail()
        out: dict[str, EvalResult] = {}
        foreign = 0
        for number, record in self._records():
            if any(record.get(k) != v for k, v in self.key.items()):
                foreign += 1
                continue
            result = _result_of(record)
            if result is None:
                log.warning("%s:%d: skipping an unreadable verdict", self.path, number)
                continue
            out[record["id"]] = result
        if foreign:
            log.warning("%s: ignored %d line(s) of another run (not %s)", self.path, foreign,
                        ", ".join(f"{k} {v}" for k, v in self.key.items()))
        return out

    def append(self, candidate_id: str, result: EvalResult) -> None:
        """One line for this verdict, on disk before this returns."""
        record = {**self.key, "id": candidate_id, "fitness": list(result.fitness), "result": result.to_dict()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _records(self) -> Iterator[tuple[int, dict[str, Any]]]:
        with open(self.path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    log.warning("%s:%d: skipping an unreadable line", self.path, number)
                    continue
                if isinstance(record, dict):
                    yield number, record
                else:
                    log.warning("%s:%d: skipping a line that is not a JSON object", self.path, number)

    def _cut_torn_tail(self) -> None:
        """Cut a last line torn by a kill mid-write (the file does not end in a newline), so
        that the next append starts on a line of its own."""
        data = self.path.read_bytes()
        if not data or data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1
        with open(self.path, "rb+") as handle:
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())
        log.warning("%s: skipped and cut a torn last line (%d bytes) left by an interrupted write",
                    self.path, len(data) - keep)


def _result_of(record: dict[str, Any]) -> EvalResult | None:
    """The verdict of one line, or None when it is malformed or its fitness does not come back
    as written (``score`` must give a reloaded verdict the value of the original)."""
    try:
        result = EvalResult.from_dict(record["result"])
        fitness = tuple(float(v) for v in record["fitness"])
    except (KeyError, TypeError, ValueError):
        return None
    return result if isinstance(record.get("id"), str) and result.fitness == fitness else None


@dataclass
class CachedEvaluator:
    """Evaluates each distinct candidate once; ``calls`` counts every request (cache hits too),
    ``requested`` the distinct ids asked for, ``evaluated`` the new evaluations.
    ``prefetch`` compiles sources ahead in parallel with ``compile_fn`` (nvcc is the slow part
    of an exhaustive pass); their binaries are handed to ``evaluate_fn``.  With ``results``,
    the cache is what the file holds and each new verdict is appended to it before the next
    evaluation; with ``deadline`` (a ``_now()`` time), a new evaluation that would start after
    it raises ``DeadlineReached`` (cached verdicts are still served)."""

    evaluate_fn: Callable[..., EvalResult]
    compile_fn: Callable[[str], Any] | None = None
    cache: dict[str, EvalResult] = field(default_factory=dict)
    compiled: dict[str, Any] = field(default_factory=dict)
    calls: int = 0
    results: ResultsFile | None = None
    deadline: float | None = None
    requested: set[str] = field(default_factory=set)
    evaluated: int = 0

    def __post_init__(self) -> None:
        if self.results is not None:
            self.cache.update(self.results.load())

    def __call__(self, candidate: Candidate) -> EvalResult:
        self.calls += 1
        self.requested.add(candidate.id)
        if candidate.id not in self.cache:
            self._check_deadline()
            result = self.evaluate_fn(candidate, self.compiled.pop(candidate.id, None))
            if self.results is not None:
                self.results.append(candidate.id, result)
            self.cache[candidate.id] = result
            self.evaluated += 1
            if len(self.cache) % PROGRESS_EVERY == 0:
                print(f"  {len(self.cache)} distinct candidates evaluated", file=sys.stderr, flush=True)
        return self.cache[candidate.id]

    def _check_deadline(self) -> None:
        if self.deadline is not None and _now() > self.deadline:
            raise DeadlineReached(len(self.cache), self.evaluated)

    def prefetch(self, sources: Sequence[str], workers: int) -> None:
        if self.compile_fn is None:
            return
        todo = [s for s in sources if Candidate("", s).id not in self.cache]
        if todo:
            self._check_deadline()        # no compiling for evaluations that would not start
        with ThreadPoolExecutor(max(1, workers)) as pool:
            for source, result in zip(todo, pool.map(self.compile_fn, todo)):
                self.compiled[Candidate("", source).id] = result


def score(result: EvalResult) -> float:
    """The search's objective: geometric-mean speedup over naive of a correct verdict, else 0."""
    return result.fitness[1]


def best_after(scores: Sequence[float], checkpoints: Sequence[int]) -> list[float | None]:
    """Best score among the first n evaluations, per checkpoint n (None: fewer evaluations ran)."""
    out: list[float | None] = []
    for n in checkpoints:
        out.append(max(scores[:n], default=0.0) if len(scores) >= n else None)
    return out


def family_task(task: Task, family: str, folder: Path) -> Task:
    """A copy of ``task`` with only its naive seed and ``family`` (what evolve starts from)."""
    copy = folder / task.name
    shutil.copytree(task.root, copy, ignore=shutil.ignore_patterns("seeds", "__pycache__"))
    (copy / "seeds").mkdir()
    for name in ("naive", family):
        shutil.copy(task.root / "seeds" / f"{name}.cu", copy / "seeds" / f"{name}.cu")
    return load_task(copy)


def optimum(space: KnobSpace, task_name: str, evaluate: CachedEvaluator, limit: int, sample: int,
            rng: random.Random) -> tuple[float, str, int]:
    """(best score, how it was found, combinations evaluated)."""
    valid_total = sum(1 for _ in space.all_valid(limit=COUNT_LIMIT)) if _total(space) <= COUNT_LIMIT else None
    if valid_total is not None and valid_total <= limit:
        combos = list(space.all_valid(limit=COUNT_LIMIT))
        how = f"exhaustive: all {valid_total} valid combinations"
    else:
        combos = _distinct_valid(space, rng, sample)
        how = f"best of a uniform random sample of {len(combos)} valid combinations" + (
            f" (of {valid_total})" if valid_total is not None else "")
    sources = [space.render(v) for v in combos]
    for start in range(0, len(sources), PREFETCH_CHUNK):
        chunk = sources[start:start + PREFETCH_CHUNK]
        evaluate.prefetch(chunk, os.cpu_count() or 1)
        for source in chunk:
            evaluate(Candidate(task_name, source, "optimum"))
    scores = [score(evaluate.cache[Candidate(task_name, source).id]) for source in sources]
    return max(scores, default=0.0), how, len(combos)


def random_search(space: KnobSpace, task_name: str, evaluate: CachedEvaluator, budget: int,
                  rng: random.Random) -> list[float]:
    """Scores of ``budget`` valid combinations drawn uniformly without replacement, in draw order."""
    return [score(evaluate(Candidate(task_name, space.render(v), "random")))
            for v in _distinct_valid(space, rng, budget)]


def evolve_search(task: Task, evaluate: CachedEvaluator, gpu: GpuInfo | None, budget: int, pop: int,
                  seed: int, benchmark: str, folder: Path) -> list[float]:
    """Scores of evolve's evaluations in order (knob operators only), until ``budget`` of them."""
    scores: list[float] = []

    def counted(candidate: Candidate) -> EvalResult:
        result = evaluate(candidate)
        scores.append(score(result))
        return result

    gens = max(1, -(-budget // pop))              # ceil: pop per generation after the initial one
    config = load_config(overrides={"task": task.name, "pop": pop, "gens": gens, "seed": seed,
                                    "eval.benchmark": benchmark, "out": str(folder)})
    store = RunStore.create(folder, config.to_dict())
    engine = Evolution(config, task, InlineBackend(counted, gpu), store)
    engine.run()
    return scores[:budget]


def _total(space: KnobSpace) -> int:
    total = 1
    for knob in space.knobs:
        total *= len(knob.choices)
    return total


def _distinct_valid(space: KnobSpace, rng: random.Random, count: int) -> list[dict[str, str]]:
    seen: set[tuple[str, ...]] = set()
    out: list[dict[str, str]] = []
    for values in space.sample_valid(rng, count * 20, max_draws=count * 200):
        key = space.assignment(values)
        if key not in seen:
            seen.add(key)
            out.append(values)
            if len(out) == count:
                break
    return out


def _cell(value: float | None, best: float) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}x ({100 * value / best:.0f}%)" if best > 0 else f"{value:.3f}x"


def run(args: argparse.Namespace, deadline: float | None = None) -> str:
    """The table; raises ``DeadlineReached`` when ``deadline`` stops it before its end."""
    task = get_task(args.task)
    if args.family not in task.seeds():
        raise SystemExit(f"error: task {task.name} has no seed {args.family!r} (has: {', '.join(task.seeds())})")
    space = KnobSpace.of(task.seeds()[args.family])
    if not space.knobs:
        raise SystemExit(f"error: seed {args.family} has no knobs")
    checkpoints = sorted(args.checkpoints)
    if args.synthetic:
        from evo_fsr.testing.synthetic import SYNTHETIC_GPU, SyntheticEvaluator
        evaluate_fn: Callable[..., EvalResult] = SyntheticEvaluator(task.name).evaluate
        compile_fn: Callable[[str], Any] | None = None
        gpu: GpuInfo | None = SYNTHETIC_GPU
        closer: Callable[[], None] = lambda: None  # noqa: E731
    else:
        from evo_fsr.verdict.evaluate import EvalConfig, Evaluator
        evaluator = Evaluator(task, EvalConfig(benchmark=args.shapes, max_trials=args.trials))
        evaluate_fn, compile_fn = evaluator.evaluate, evaluator.compile
        gpu, closer = evaluator.gpu_info, evaluator.close
    try:
        evaluate = CachedEvaluator(evaluate_fn, compile_fn=compile_fn, deadline=deadline,
                                   results=results_file(args, task.name, gpu))
        if evaluate.results is not None:
            print(f"  {len(evaluate.cache)} verdicts loaded from {args.results}", file=sys.stderr, flush=True)
        best, how, examined = optimum(space, task.name, evaluate, args.exhaustive_limit, args.sample,
                                      random.Random(args.seed))
        evolve_runs, random_runs = [], []
        with tempfile.TemporaryDirectory(prefix="evo-fsr-bench-search-") as tmp:
            family = family_task(task, args.family, Path(tmp))
            for r in range(args.repeats):
                evolve_runs.append(best_after(evolve_search(family, evaluate, gpu, checkpoints[-1], args.pop,
                                                            args.seed + r, args.shapes, Path(tmp) / f"run{r}"),
                                              checkpoints))
                random_runs.append(best_after(random_search(space, task.name, evaluate, checkpoints[-1],
                                                            random.Random(args.seed + 1000 + r)), checkpoints))
    finally:
        closer()
    return table(task.name, args.family, args.shapes, gpu, space, best, how, examined, checkpoints,
                 evolve_runs, random_runs, distinct=len(evaluate.requested))


def results_file(args: argparse.Namespace, task_name: str, gpu: GpuInfo | None) -> ResultsFile | None:
    """The ``--results`` file of this run (None without one); its lines are tagged with ``key``."""
    if args.results is None:
        return None
    key = {"task": task_name, "family": args.family, "shapes": args.shapes, "gpu": gpu.name if gpu else ""}
    return ResultsFile(args.results, key)


def table(task: str, family: str, shapes: str, gpu: GpuInfo | None, space: KnobSpace, best: float, how: str,
          examined: int, checkpoints: Sequence[int], evolve_runs: list[list[float | None]],
          random_runs: list[list[float | None]], distinct: int) -> str:
    """The markdown table (medians over runs; each run's figures below it)."""
    def median(runs: list[list[float | None]], i: int) -> float | None:
        values = [run[i] for run in runs if run[i] is not None]
        return statistics.median(values) if len(values) == len(runs) and values else None

    lines = [f"bench_search: task {task}, family {family}, benchmark set {shapes}, "
             f"GPU {gpu.name if gpu else 'unknown'}",
             f"knob space: {len(space.knobs)} knobs, {_total(space)} combinations, "
             f"{100 * space.valid_fraction():.1f}% valid under {len(space.constraints)} constraints",
             f"optimum: {best:.3f}x over naive ({how}); distinct candidates evaluated: {distinct}", "",
             "| evaluations | evolve (knob operators) | random search |", "|---|---|---|"]
    for i, n in enumerate(checkpoints):
        lines.append(f"| {n} | {_cell(median(evolve_runs, i), best)} | {_cell(median(random_runs, i), best)} |")
    lines.append("")
    lines.append(f"geometric-mean speedup over the naive seed (share of the optimum); median of {len(evolve_runs)} "
                 "run(s); '-' where a search ended before that many evaluations")
    for r, (ev, rs) in enumerate(zip(evolve_runs, random_runs)):
        lines.append(f"run {r}: evolve " + ", ".join(_cell(v, best) for v in ev)
                     + "; random " + ", ".join(_cell(v, best) for v in rs))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="conv2d")
    p.add_argument("--family", default="implicit_gemm", help="a seed of the task with knobs")
    p.add_argument("--shapes", default="quick", help="benchmark set (default quick)")
    p.add_argument("--checkpoints", type=int, nargs="+", default=list(DEFAULT_CHECKPOINTS))
    p.add_argument("--exhaustive-limit", type=int, default=1000,
                   help="evaluate every valid combination when there are at most this many")
    p.add_argument("--sample", type=int, default=500, help="else the optimum of this many random valid ones")
    p.add_argument("--pop", type=int, default=32)
    p.add_argument("--repeats", type=int, default=1, help="evolve and random runs with different seeds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trials", type=int, default=30, help="max timed trials per shape")
    p.add_argument("--markdown", type=Path, help="also write the table here")
    p.add_argument("--synthetic", action="store_true", help="CPU only: the synthetic evaluator (no measurement)")
    p.add_argument("--results", type=Path,
                   help="JSONL file of verdicts: loaded on start, each new one appended (resumable runs)")
    p.add_argument("--deadline-s", type=float,
                   help=f"start no new evaluation after this many seconds; exit {PARTIAL_EXIT} (needs --results)")
    return p


def main(argv: list[str] | None = None) -> int:
    start = _now()
    args = build_parser().parse_args(argv)
    if min(args.checkpoints) < 1 or args.repeats < 1 or args.pop < 2:
        print("error: --checkpoints must be positive, --repeats at least 1, --pop at least 2", file=sys.stderr)
        return 2
    if args.deadline_s is not None and (args.results is None or args.deadline_s < 0):
        print("error: --deadline-s needs --results (else the verdicts are lost) and must not be negative",
              file=sys.stderr)
        return 2
    try:
        text = run(args, deadline=None if args.deadline_s is None else start + args.deadline_s)
    except DeadlineReached as stop:
        print(f"deadline of {args.deadline_s:g} s reached: {stop.stored} distinct candidates stored in "
              f"{args.results} ({stop.new} evaluated in this run)")
        print("partial: run the same command again to continue")
        return PARTIAL_EXIT
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
