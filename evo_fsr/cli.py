"""`evo-fsr` entry point: dispatches to the subcommands in evo_fsr/commands/."""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "evolve": ("evo_fsr.commands.evolve", "evolve a population of kernels (scripts/evolve.py)"),
    "eval": ("evo_fsr.commands.evaluate", "verdict on kernel files (scripts/evaluate.py)"),
    "tasks": ("evo_fsr.commands.tasks", "list the task library"),
    "prompt": ("evo_fsr.commands.prompt", "print the prompt an LLM operator would send (no GPU needed)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: evo-fsr {" + ",".join(COMMANDS) + "} ...\n")
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:<8} {text}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
