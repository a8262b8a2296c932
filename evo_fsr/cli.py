"""`evo-fsr` entry point: dispatches to the subcommands in evo_fsr/commands/."""
from __future__ import annotations

import importlib
import os
import sys

COMMANDS = {
    "evolve": ("evo_fsr.commands.evolve", "evolve a population of kernels (scripts/evolve.py)"),
    "eval": ("evo_fsr.commands.evaluate", "verdict on kernel files (scripts/evaluate.py)"),
    "tasks": ("evo_fsr.commands.tasks", "list the task library"),
    "report": ("evo_fsr.commands.report", "one self-contained HTML page on a run directory"),
    "export": ("evo_fsr.commands.export", "a Python module calling a kernel on torch tensors / CuPy arrays"),
    "import-kernelbench": ("evo_fsr.commands.import_kernelbench", "KernelBench problem files -> task folders"),
    "prompt": ("evo_fsr.commands.prompt", "print the prompt an LLM operator would send (no GPU needed)"),
}
TASKS_DIR_FLAG = "--tasks-dir"


def take_tasks_dirs(argv: list[str]) -> tuple[list[str], list[str]]:
    """(argv without every ``--tasks-dir DIR`` / ``--tasks-dir=DIR``, the DIRs in order)."""
    rest: list[str] = []
    dirs: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == TASKS_DIR_FLAG and i + 1 < len(argv):
            dirs.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith(TASKS_DIR_FLAG + "="):
            dirs.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
        i += 1
    return rest, dirs


def use_tasks_dirs(dirs: list[str]) -> None:
    """Put ``dirs`` first on the task search path (inherited by Ray workers started after this)."""
    from .tasks import TASKS_PATH_ENV

    current = [p for p in os.environ.get(TASKS_PATH_ENV, "").split(os.pathsep) if p]
    os.environ[TASKS_PATH_ENV] = os.pathsep.join([os.path.abspath(d) for d in dirs] + current)


def main(argv: list[str] | None = None) -> int:
    argv, tasks_dirs = take_tasks_dirs(list(sys.argv[1:] if argv is None else argv))
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: evo-fsr [--tasks-dir DIR] {" + ",".join(COMMANDS) + "} ...\n")
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:<19} {text}")
        print("\n  --tasks-dir DIR     also look for task folders in DIR (repeatable, any position; "
              "or $EVO_FSR_TASKS_PATH, ':'-separated)")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    for folder in tasks_dirs:
        if not os.path.isdir(folder):
            print(f"error: --tasks-dir {folder}: not a directory", file=sys.stderr)
            return 2
    if tasks_dirs:
        use_tasks_dirs(tasks_dirs)
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
