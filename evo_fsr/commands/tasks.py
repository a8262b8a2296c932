"""`evo-fsr tasks`: the task library with benchmark sets."""
from __future__ import annotations

import argparse
import sys

from ..knobs import describe_space
from ..tasks import TaskError, discover, get_task
from .common import fail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="evo-fsr tasks", description="List the tasks and their benchmark sets.")
    parser.add_argument("name", nargs="?", help="show one task in detail")
    args = parser.parse_args(argv)
    if args.name:
        try:
            task = get_task(args.name)
        except TaskError as exc:
            return fail(str(exc))
        print(f"{task.name} ({task.precision})\n{task.description.strip()}\n\n{task.signature()};\n")
        print(f"validation shapes: {len(task.validation)}")
        for name, shapes in task.benchmarks:
            default = " (default)" if name == task.default_benchmark else ""
            print(f"benchmark set {name}{default}:")
            for s in shapes:
                print(f"  {s.label}: {task.flops_of(s) / 1e9:.3g} GFLOP, {task.bytes_of(s) / 1e6:.3g} MB")
        print(f"seeds: {', '.join(task.seeds())}")
        for seed, source in task.seeds().items():
            space = describe_space(source)
            if space:
                print(f"  {seed}: {space}")
        return 0
    errors = 0
    print(f"{'task':<18} {'precision':<12} {'seeds':<28} benchmark sets (default first)")
    for name in discover():
        try:
            task = get_task(name)
        except TaskError as exc:
            print(f"{name:<18} INVALID: {exc}")
            errors += 1
            continue
        sets = [task.default_benchmark] + [n for n, _ in task.benchmarks if n != task.default_benchmark]
        sets_txt = ", ".join(f"{n} ({len(task.benchmark(n))})" for n in sets)
        print(f"{name:<18} {task.precision:<12} {', '.join(task.seeds())[:28]:<28} {sets_txt}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
