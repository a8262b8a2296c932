"""`evo-fsr export (RUN_DIR|FILE.cu) [--task T] -o DIR`: a kernel as a Python package for torch / CuPy."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..export.builder import ExportError, export_kernel
from ..export.builder import _py as py_name
from ..export.runtime import KernelBuildError
from ..search.store import RunStore, StoreError
from ..tasks import TaskError, get_task
from .common import fail, setup_logging

USAGE_NOTE = """example:
  evo-fsr export populations/relu/20261123-120000-0 -o exported --arch sm_90
  PYTHONPATH=exported python3 -c "import torch, evo_relu; print(evo_relu.relu(torch.randn(5, device='cuda')))"
"""


def resolve(kernel: str, task_name: str | None) -> tuple[str, str, str]:
    """(task name, source, note) from a run directory (its best.cu) or a .cu file."""
    path = Path(kernel)
    if path.is_dir():
        store = RunStore(path)
        if not store.config_path.is_file():
            raise StoreError(f"{path} is not a run directory (no config.yaml) nor a .cu file")
        run_task = str(store.read_config().get("task", ""))
        if task_name and run_task and task_name != run_task:
            raise StoreError(f"--task {task_name}: the run in {path} is for task {run_task!r}")
        if not store.best_path.is_file():
            raise StoreError(f"{path} has no best.cu yet (no correct kernel found)")
        source = store.best_path.read_text()
        header = [line[3:] for line in source.splitlines() if line.startswith("// ")][:2]
        return task_name or run_task, source, " ".join(header)
    if not path.is_file():
        raise StoreError(f"{path}: no such file or directory")
    if not task_name:
        raise StoreError(f"--task is required with a .cu file ({path})")
    try:
        return task_name, path.read_text(), f"exported from {path.name}"
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{path}: cannot read: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="evo-fsr export", epilog=USAGE_NOTE, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write a small Python package that calls a kernel on torch tensors or CuPy arrays, on the "
                    "caller's current stream, checking shapes, dtypes, contiguity and device.")
    parser.add_argument("kernel", metavar="RUN_DIR|FILE.cu", help="a run directory (its best.cu) or a kernel file")
    parser.add_argument("--task", help="the task whose signature the kernel implements (default: the run's task)")
    parser.add_argument("-o", "--out", required=True, metavar="DIR", help="folder to write the package into")
    parser.add_argument("--name", help="package name (default evo_<task>)")
    parser.add_argument("--arch", action="append", default=[], metavar="sm_XY",
                        help="compile and ship kernel_<arch>.so now (repeatable; needs nvcc here, not at the user's)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log details")
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    try:
        task_name, source, note = resolve(args.kernel, args.task)
        task = get_task(task_name)
        folder = export_kernel(task, source, args.out, name=args.name, archs=tuple(args.arch), note=note)
    except (StoreError, TaskError, ExportError) as exc:
        return fail(str(exc))
    except KernelBuildError as exc:
        return fail("\n".join(str(exc).splitlines()[:25]), 1)
    print(f"wrote {folder}: from {folder.name} import {py_name(task.name)}  (PYTHONPATH={Path(args.out)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
