"""`evo-fsr import-kernelbench PATH... -o TASKS_DIR`: KernelBench problem files -> task folders.

Exit code 0 when every problem was converted, 1 when some could not be (each listed with the
reason), 2 on bad input (no such path, not a KernelBench file) or when torch is missing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..kernelbench.probe import Unconvertible, derive_spec
from ..kernelbench.problem import Problem, ProblemError, parse_problem
from ..kernelbench.writer import write_task
from ..tasks import PRECISION_POLICIES, TaskError, load_task
from .common import fail, setup_logging


def problem_files(paths: list[str]) -> list[Path]:
    """The .py files named, or found (sorted) in the folders named; raises ProblemError."""
    files: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
            if not found:
                raise ProblemError(f"{path}: no .py problem files in this folder")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise ProblemError(f"{path}: no such file or directory")
    return files


def torch_missing() -> bool:
    try:
        import torch  # noqa: F401, PLC0415
    except ImportError:
        return True
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="evo-fsr import-kernelbench",
        description="Turn KernelBench problem files (a Model(nn.Module), get_inputs(), get_init_inputs()) into task "
                    "folders: signature from the tensors, reference = the Model in float64 (torch), validation "
                    "shapes derived (small and odd), the KernelBench shape as the benchmark, the Model itself as "
                    "the library timing. Needs torch (pip install 'evo-fsr[kernelbench]').")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="problem files or folders of them")
    parser.add_argument("-o", "--out", required=True, metavar="TASKS_DIR",
                        help="where to write the task folders (use with evo-fsr --tasks-dir TASKS_DIR)")
    parser.add_argument("--prefix", default="kb_", help="task name prefix (default kb_: 19_ReLU.py -> kb_19_relu)")
    parser.add_argument("--precision", default="fp32_strict", choices=list(PRECISION_POLICIES)[:2],
                        help="precision policy of the tasks (default fp32_strict)")
    parser.add_argument("--force", action="store_true", help="overwrite existing task folders")
    parser.add_argument("-v", "--verbose", action="store_true", help="log details")
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    try:
        problems = [parse_problem(p, args.prefix) for p in problem_files(args.paths)]
    except ProblemError as exc:
        return fail(str(exc))
    names = [p.task_name for p in problems]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        return fail(f"two problem files map to the task name {duplicates[0]!r}: import them separately")
    out = Path(args.out)
    refused: list[tuple[Problem, str]] = [(p, p.issue) for p in problems if p.issue]
    todo = [p for p in problems if not p.issue]
    if todo and torch_missing():
        for problem, reason in refused:
            print(f"not converted: {problem.path}: {reason}")
        return fail(f"torch is needed to convert {len(todo)} problem(s): pip install 'evo-fsr[kernelbench]'")
    converted: list[tuple[Problem, Path, str]] = []
    for problem in todo:
        folder = out / problem.task_name
        if (folder / "task.yaml").exists() and not args.force:
            refused.append((problem, f"{folder} exists (use --force to overwrite)"))
            continue
        try:
            spec = derive_spec(problem)
            folder, why = write_task(spec, out, args.precision)
            load_task(folder)                      # the loader must accept what was written
        except Unconvertible as exc:
            refused.append((problem, str(exc)))
            continue
        except TaskError as exc:
            refused.append((problem, f"the written task does not load: {exc}"))
            continue
        converted.append((problem, folder, why))
    for problem, folder, why in converted:
        seed = "naive seed generated" if not why else f"naive seed is a PLACEHOLDER ({why}): write it by hand"
        print(f"converted: {problem.path.name} -> {folder} ({seed})")
    for problem, reason in refused:
        print(f"not converted: {problem.path}: {reason}")
    placeholders = sum(1 for _, _, why in converted if why)
    print(f"\n{len(converted)} converted ({placeholders} with a placeholder naive seed), {len(refused)} not converted"
          + (f"; use them with: evo-fsr --tasks-dir {out} tasks" if converted else ""))
    return 0 if not refused else 1


if __name__ == "__main__":
    sys.exit(main())
