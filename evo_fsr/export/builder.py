"""Write an exported kernel package: ``<out>/<name>/``.

    __init__.py    the function (named after the task), with a docstring giving the signature
    _runtime.py    argument checks, allocation, compile/load and the call (evo_fsr/export/runtime.py)
    _formulas.py   the task's shape formulas (evo_fsr/formulas.py)
    spec.json      the task's signature and derived dims
    kernel.cu      the kernel source; contract.h the task's prototype (force-included by nvcc)
    kernel_<arch>.so   compiled at export time for each --arch (optional; else nvcc at first call)
"""
from __future__ import annotations

import json
import keyword
import re
import shutil
from pathlib import Path

from .. import formulas
from ..tasks import Task
from ..types import source_id
from . import runtime

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ARCH_RE = re.compile(r"^sm_\d{2,3}[a-z]?$")


class ExportError(ValueError):
    """Bad export input (a name, an arch), said in one line."""


def spec_of(task: Task, source: str, note: str = "") -> dict:
    return {
        "task": task.name, "function": _py(task.name), "candidate_id": source_id(source), "note": note,
        "signature": task.signature(),
        "args": [{"name": a.name, "role": a.role, "dtype": a.dtype, "shape": [f.text for f in a.shape],
                  "value": a.value.text if a.value is not None else ""} for a in task.args],
        "derived": [[name, f.text] for name, f in task.derived],
    }


def _py(name: str) -> str:
    return name + "_" if keyword.iskeyword(name) else name


def init_source(spec: dict) -> str:
    """The package's __init__.py: one function with an explicit signature, calling the runtime."""
    args = [runtime.ArgSpec(a["name"], a["role"], a["dtype"], tuple(a["shape"]), a["value"]) for a in spec["args"]]
    positional = [a.py_name for a in args if a.role in ("input", "inout")]
    keywords = [a.py_name for a in args if a.role in ("output", "scalar")]
    params = ", ".join(positional + (["*"] + [f"{k}=None" for k in keywords] if keywords else []))
    call = ", ".join(positional + [f"{k}={k}" for k in keywords])
    lines = []
    for a in args:
        if a.role == "stream":
            continue
        what = f"{a.dtype} [{', '.join(a.shape)}]" if a.role != "scalar" else f"{a.dtype} = {a.value or a.name}"
        note = {"input": "read", "inout": "read and overwritten (returned)", "output": "returned; pass one to reuse it",
                "workspace": "scratch, allocated per call", "scalar": "inferred from the shapes when it can be"}[a.role]
        lines.append(f"        {a.py_name}: {what} ({a.role}: {note})")
    returned = [a.py_name for a in args if a.role in ("output", "inout")]
    fn = spec["function"]
    return f'''"""evo-fsr export of a kernel for task {spec["task"]} (candidate {spec["candidate_id"]}).
{spec.get("note", "")}
    {spec["signature"]};

Call ``{fn}(...)`` with torch tensors or CuPy arrays on one CUDA device: it runs on the caller's
current stream of that device and returns {", ".join(returned)}. Compiled by nvcc at the first
call (cached) unless kernel_<arch>.so for the device was shipped with this folder.
"""
from pathlib import Path as _Path
import json as _json

from ._runtime import ExportedKernel, KernelArgumentError, KernelBuildError

SPEC = _json.loads((_Path(__file__).parent / "spec.json").read_text())
_KERNEL = ExportedKernel(SPEC, _Path(__file__).parent)


def {fn}({params}):
    """{spec["task"]}: returns {", ".join(returned)}.

    Arguments:
{chr(10).join(lines)}
    Raises KernelArgumentError (a TypeError) naming the argument when a device, dtype,
    contiguity or shape is wrong; KernelBuildError when the kernel cannot be compiled or loaded.
    """
    return _KERNEL({call})


__all__ = ["{fn}", "KernelArgumentError", "KernelBuildError", "SPEC"]
'''


def export_kernel(task: Task, source: str, out_dir: Path | str, name: str | None = None,
                  archs: tuple[str, ...] = (), note: str = "") -> Path:
    """Write the package; compile ``kernel_<arch>.so`` for each arch (raises runtime.KernelBuildError)."""
    name = name or f"evo_{task.name}"
    if not NAME_RE.match(name) or keyword.iskeyword(name):
        raise ExportError(f"--name {name!r}: must be a Python identifier (letters, digits, _)")
    for arch in archs:
        if not ARCH_RE.match(arch):
            raise ExportError(f"--arch {arch!r}: expected sm_XY, e.g. sm_90")
    folder = Path(out_dir) / name
    folder.mkdir(parents=True, exist_ok=True)
    spec = spec_of(task, source, note)
    (folder / "spec.json").write_text(json.dumps(spec, indent=1))
    (folder / "kernel.cu").write_text(source)
    (folder / "contract.h").write_text(task.header())
    shutil.copyfile(runtime.__file__, folder / "_runtime.py")
    shutil.copyfile(formulas.__file__, folder / "_formulas.py")
    (folder / "__init__.py").write_text(init_source(spec))
    for stale in folder.glob("kernel_sm_*.so"):
        stale.unlink()
    shutil.rmtree(folder / "_build", ignore_errors=True)
    for arch in archs:
        built = runtime.compile_library(folder, arch, f"export-{arch}")
        built.replace(folder / f"kernel_{arch}.so")
    shutil.rmtree(folder / "_build", ignore_errors=True)
    return folder
