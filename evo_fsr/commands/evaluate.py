"""`evo-fsr eval` / scripts/evaluate.py: the verdict on one kernel file, as a table."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..knobs import constraint_violation, parse_knobs, set_knobs
from ..verdict.compile import DEFAULT_ARCH, compile_source, detect_arch
from ..verdict.evaluate import EvalConfig, Evaluator
from ..verdict.gpu import driver_missing, free_memory_bytes
from ..report_lines import of_library, ratio, speed_line
from ..tasks import TaskError, get_task
from ..types import Candidate, EvalResult
from .common import UserError, fail, setup_logging


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evaluate.py", description=(
        "Compile, validate and profile one CUDA kernel candidate against a task's naive seed."))
    p.add_argument("kernel", nargs="+", help=(
        "path to a .cu file, or seed:NAME for one of the task's seeds; either may end in "
        "@KNOB=VALUE,... to set knobs, e.g. seed:lookback@LOAD=2,CACHE=1"))
    p.add_argument("--task", required=True, help="task name (see `evo-fsr tasks`)")
    p.add_argument("--shapes", help="benchmark set of the task (default: the task's default set)")
    p.add_argument("--shape", action="append", default=[], help="your own benchmark shape k=v,... (repeatable)")
    p.add_argument("--arch", help="nvcc target, e.g. sm_90 (default: the GPU's; sm_90 with --compile-only and no GPU)")
    p.add_argument("--compile-only", action="store_true", help="only run the Compilation Verifier (no GPU needed)")
    p.add_argument("--trials", type=int, default=50, help="max timed trials per shape (default 50)")
    p.add_argument("--seeds", type=int, default=2, help="validation input seeds per shape (default 2)")
    p.add_argument("--no-library", action="store_true", help="skip timing the library implementation (torch)")
    p.add_argument("--json", type=Path, help="also write the EvalResults as JSON to this file")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def _load_source(task_seeds: dict[str, str], spec: str) -> tuple[str, str]:
    """(label, source) of a kernel spec: ``seed:NAME`` or a .cu path, either optionally followed
    by ``@KNOB=VALUE,KNOB=VALUE`` (the source with those knobs set; a path that exists as given
    is taken whole, ``@`` and all)."""
    base, knobs = spec, ""
    if "@" in spec and (spec.startswith("seed:") or not Path(spec).is_file()):
        base, knobs = spec.split("@", 1)
    label, source = _load_base(task_seeds, base)
    if not knobs:
        return label, source
    return f"{label}@{knobs}", _with_knobs(spec, source, knobs)


def _load_base(task_seeds: dict[str, str], spec: str) -> tuple[str, str]:
    if spec.startswith("seed:"):
        name = spec[5:]
        if name not in task_seeds:
            raise UserError(f"{spec}: the task has no seed {name!r} (has: {', '.join(task_seeds)})")
        return name, task_seeds[name]
    path = Path(spec)
    if not path.is_file():
        raise UserError(f"{spec}: no such file")
    try:
        return path.name, path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{spec}: cannot read: {exc}") from None


def _with_knobs(spec: str, source: str, text: str) -> str:
    """``source`` with the knobs of ``KNOB=VALUE,...`` set; a malformed pair, an unknown knob, a
    value outside the knob's set or a broken knob constraint is a UserError naming it."""
    values: dict[str, str] = {}
    for pair in text.split(","):
        name, sep, value = pair.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UserError(f"{spec}: {pair!r} is not KNOB=VALUE")
        values[name.strip()] = value.strip()
    try:
        source = set_knobs(source, values)
    except KeyError as exc:             # an unknown knob: name the ones there are
        raise UserError(f"{spec}: {exc.args[0]} (has: {', '.join(parse_knobs(source)) or 'none'})") from None
    except ValueError as exc:           # a value outside the knob's set
        raise UserError(f"{spec}: {exc}") from None
    broken = constraint_violation(source)
    if broken:
        raise UserError(f"{spec}: {broken}")
    return source


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    try:
        check_counts(args)
        task = get_task(args.task)
        sources = [_load_source(task.seeds(), spec) for spec in args.kernel]
        free = free_memory_bytes() if args.shape and not args.compile_only else None
        shapes = tuple(task.parse_shape(s, free_memory_bytes=free) for s in args.shape)
        if args.shapes:
            task.benchmark(args.shapes)
    except (TaskError, UserError) as exc:
        return fail(str(exc))
    except KeyError as exc:
        return fail(str(exc.args[0]))
    if args.compile_only:
        return _compile_only(task, sources, args.arch)
    config = eval_config(args, shapes)
    evaluator = Evaluator(task, config)
    try:
        gpu = evaluator.gpu_info
    except Exception as exc:  # noqa: BLE001 - no GPU / no driver: one clear line
        evaluator.close()
        missing = driver_missing()
        if missing:
            return fail(f"no usable CUDA GPU: {missing}; "
                        "use --compile-only here, or evaluate on a machine with an NVIDIA GPU", code=3)
        return fail(f"no usable CUDA GPU ({str(exc).splitlines()[0][:200]}); "
                    "use --compile-only on a machine without one", code=3)
    print(f"GPU: {gpu.describe()}")
    results = []
    try:
        for label, source in sources:
            result = evaluator.evaluate(Candidate(task=task.name, source=source, label=label))
            results.append(result)
            _print_result(label, result, evaluator, with_library=not args.no_library)
    finally:
        evaluator.close()
    if args.json:
        args.json.write_text(json.dumps([r.to_dict() for r in results], indent=1))
    return 0 if all(r.status.correct for r in results) else 1


def check_counts(args: argparse.Namespace) -> None:
    """``--seeds`` and ``--trials`` below 1 are errors (0 seeds would skip validation)."""
    if args.seeds < 1:
        raise UserError(f"--seeds {args.seeds}: at least 1 validation input seed per shape is needed "
                        "(0 would skip validation)")
    if args.trials < 1:
        raise UserError(f"--trials {args.trials}: at least 1 timed trial per shape is needed")


def eval_config(args: argparse.Namespace, shapes: tuple) -> EvalConfig:  # type: ignore[type-arg]
    """The evaluator's configuration: ``--trials`` is honoured as given (the minimum number of
    trials is lowered to it, not the other way round)."""
    min_trials = min(EvalConfig.min_trials, args.trials)
    return EvalConfig(benchmark=args.shapes, shapes=shapes, arch=args.arch, max_trials=args.trials,
                      min_trials=min_trials, validation_seeds=args.seeds, library=not args.no_library)


def _compile_only(task, sources, arch: str | None) -> int:  # type: ignore[no-untyped-def]
    arch = arch or detect_arch() or DEFAULT_ARCH
    ok = True
    for label, source in sources:
        result = compile_source(source, task.header(), arch)
        status = "ok" if result.ok else "COMPILE_ERROR"
        print(f"{label}: {status} ({arch}, {result.seconds:.1f} s{', cached' if result.cached else ''})")
        if result.log:
            print("  " + result.log.replace("\n", "\n  "))
        ok &= result.ok
    return 0 if ok else 1


def _print_result(label: str, result: EvalResult, evaluator: Evaluator, with_library: bool) -> None:
    print(f"\n{label}: {result.status.value.upper()}  {result.summary}")
    if result.mismatch:
        print(f"  first mismatch: {result.mismatch.describe()}")
    if not result.timings:
        for stage, text in result.logs:
            if text.strip():
                print(f"  [{stage}] " + text.strip()[:1500].replace("\n", "\n  "))
        return
    print(library_table(result))
    overhead = result.overhead_seconds
    print(f"  evaluation wall time (compile excluded): {result.evaluate_seconds:.2f} s"
          + (f", of which timed kernel calls {result.evaluate_seconds - overhead:.2f} s" if overhead is not None else "")
          + f"; timed trials per shape: {result.timings[0].trials}")


def library_table(result: EvalResult, library_ms: dict[str, float | None] | None = None) -> str:
    """Per shape: times, speedup over naive, % of speed-of-light, the library's time (measured by
    the evaluator in the same run, ``ShapeTiming.library_ms``) and the kernel's speed relative to
    it; then both geomeans."""
    library_ms = library_ms or {}
    lines = [f"  {'shape':<28} {'median ms':>10} {'naive ms':>10} {'vs naive':>8} {'% SOL':>6} "
             f"{'library ms':>10} {'of library':>10}  flags"]
    for t in result.timings:
        lib = t.library_ms if t.library_ms > 0 else library_ms.get(t.shape_label)
        lib_txt = f"{lib:10.4f}" if lib else f"{'-':>10}"
        lines.append(f"  {t.shape_label[:28]:<28} {t.median_ms:10.4f} {t.baseline_median_ms:10.4f} "
                     f"{t.speedup:7.2f}x {100 * t.fraction_of_light:5.1f}% {lib_txt} "
                     f"{ratio(of_library(t, lib)):>10}  {'; '.join(t.flags)}")
    lines.append(f"  geomean: {speed_line(result, library_ms)}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
