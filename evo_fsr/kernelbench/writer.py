"""Write an imported task folder: task.yaml, reference.py, problem.py (the KernelBench file as
given) and seeds/naive.cu (generated, or a labelled placeholder).  No torch needed here."""
from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from .naive import naive_source
from .spec import TaskSpec

REFERENCE = '''"""{task}: KernelBench problem {file} (problem.py beside this file), imported by
evo-fsr import-kernelbench.  The reference runs the problem's Model in float64 with torch on the
CPU; the library timing is the Model itself in float32 on the GPU.  The Model's parameters are
initialised once with torch.manual_seed({seed}) and passed to the kernel as inputs.
Needs torch: pip install 'evo-fsr[kernelbench]'.
"""
from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any, Mapping

import numpy as np

#: forward inputs: (name, shape per axis: a dim name or a size, distribution as get_inputs drew it)
INPUTS = {inputs!r}
#: Model parameters and buffers passed as kernel inputs: (name, state_dict key)
PARAMS = {params!r}
OUTPUT = {output!r}
INIT_SEED = {seed}
_LOCK = threading.RLock()
_CACHE: dict[Any, Any] = {{}}


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise RuntimeError("task {task} needs torch: pip install 'evo-fsr[kernelbench]'") from None
    return torch


def _problem() -> Any:
    with _LOCK:
        if "problem" not in _CACHE:
            spec = importlib.util.spec_from_file_location("evo_fsr_kb_{task}", Path(__file__).with_name("problem.py"))
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            _CACHE["problem"] = module
        return _CACHE["problem"]


def _model(device: Any, dtype: Any) -> Any:
    key = ("model", str(device), str(dtype))
    with _LOCK:
        if key not in _CACHE:
            torch, problem = _torch(), _problem()
            torch.manual_seed(INIT_SEED)
            _CACHE[key] = problem.Model(*problem.get_init_inputs()).to(device=device, dtype=dtype)
        return _CACHE[key]


def _shape(axes: Any, dims: Mapping[str, Any]) -> tuple[int, ...]:
    return tuple(int(dims[a]) if a in dims else int(a) for a in axes)


def make_inputs(dims: Mapping[str, Any], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case != "random":
        raise ValueError(f"unknown case {{case!r}}")
    out = {{}}
    for name, axes, distribution in INPUTS:
        shape = _shape(axes, dims)
        out[name] = rng.random(shape, dtype=np.float32) if distribution == "uniform" \\
            else rng.standard_normal(shape, dtype=np.float32)
    if PARAMS:
        torch = _torch()
        state = _model("cpu", torch.float32).state_dict()
        for name, key in PARAMS:
            out[name] = state[key].detach().to(torch.float32).numpy().copy()
    return out


def _run(model: Any, tensors: Mapping[str, Any], torch: Any) -> Any:
    with torch.no_grad():
        if PARAMS:
            model.load_state_dict({{key: tensors[name] for name, key in PARAMS}}, strict=False)
        return model(*[tensors[name] for name, _, _ in INPUTS])


def reference(inputs: Mapping[str, Any], dims: Mapping[str, Any], xp: Any = np) -> dict[str, Any]:
    torch = _torch()
    host = {{k: np.asarray(v.get() if hasattr(v, "get") else v) for k, v in inputs.items()}}
    tensors = {{k: torch.from_numpy(np.ascontiguousarray(v)).to(torch.float64) for k, v in host.items()}}
    with _LOCK:
        result = _run(_model("cpu", torch.float64), tensors, torch)
    return {{OUTPUT: xp.asarray(result.detach().numpy())}}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The KernelBench Model itself in float32 (parameters loaded once per set of inputs)."""
    first = inputs[INPUTS[0][0]]
    model = _model(first.device, torch.float32)
    key = ("loaded", str(first.device), tuple(inputs[name].data_ptr() for name, _ in PARAMS))
    with torch.no_grad():
        if PARAMS and _CACHE.get(("params", str(first.device))) != key:
            model.load_state_dict({{k: inputs[name] for name, k in PARAMS}}, strict=False)
            _CACHE[("params", str(first.device))] = key
        return {{OUTPUT: model(*[inputs[name] for name, _, _ in INPUTS])}}
'''


def _axis(text: str) -> int | str:
    return int(text) if text.lstrip("-").isdigit() else text


def task_yaml(spec: TaskSpec, precision: str, naive_note: str) -> dict:
    problem = spec.problem
    source = problem.path.read_text()
    inputs_txt = "; ".join(f"{t.name} [{', '.join(t.shape)}]" for t in spec.inputs if t.kind == "input")
    params = [t for t in spec.inputs if t.kind == "param"]
    params_txt = ("; Model parameters passed as inputs (fixed values from the Model's initialisation): "
                  + "; ".join(f"{t.name} = state_dict()[{t.key!r}] [{', '.join(t.shape)}]" for t in params)) if params else ""
    description = (
        f"KernelBench problem {problem.path.name}: out = Model(*get_init_inputs()).forward(inputs), in float32, "
        f"all buffers dense row-major (C-contiguous). {problem.description}\n"
        f"Inputs: {inputs_txt}{params_txt}. Output {spec.output.name} [{', '.join(spec.output.shape)}], fully "
        f"overwritten. Dims passed as int scalars: {', '.join(d for d, _ in spec.dims) or 'none (fixed sizes)'}.\n"
        f"The problem file:\n{source}")
    signature = [{"name": t.name, "role": "input", "dtype": "float32", "shape": [_axis(a) for a in t.shape]}
                 for t in spec.inputs]
    signature.append({"name": spec.output.name, "role": "output", "dtype": "float32",
                      "shape": [_axis(a) for a in spec.output.shape]})
    signature += [{"name": d, "role": "scalar", "dtype": "int32"} for d, _ in spec.dims]
    signature.append({"name": "stream", "role": "stream"})
    validation = [{**dict(dims), "label": label} for label, dims in spec.validation]
    numel = [" * ".join(f"({a})" for a in t.shape) or "1" for t in (*spec.inputs, spec.output)]
    return {
        "name": problem.task_name, "description": description, "precision": precision,
        "signature": signature, "validation": validation,
        "benchmarks": {"kernelbench": [{**spec.benchmark, "label": "kernelbench"}]},
        "default_benchmark": "kernelbench",
        "flops": 0, "bytes": "4 * (" + " + ".join(numel) + ")",
        "notes": f"imported from KernelBench {problem.path.name} by evo-fsr import-kernelbench; FLOPs unknown (0: "
                 f"the speed of light counts bytes only); naive seed: {naive_note}",
    }


def write_task(spec: TaskSpec, tasks_dir: Path | str, precision: str = "fp32_strict") -> tuple[Path, str]:
    """Write the folder; returns (folder, "" when the naive seed was generated, else why not)."""
    folder = Path(tasks_dir) / spec.problem.task_name
    (folder / "seeds").mkdir(parents=True, exist_ok=True)
    naive, why = naive_source(spec)
    note = "generated" if not why else f"PLACEHOLDER (fails to compile; write it by hand): {why}"
    (folder / "task.yaml").write_text(yaml.safe_dump(task_yaml(spec, precision, note), sort_keys=False, width=110))
    inputs = [(t.name, list(t.shape), t.distribution) for t in spec.inputs if t.kind == "input"]
    params = [(t.name, t.key) for t in spec.inputs if t.kind == "param"]
    (folder / "reference.py").write_text(REFERENCE.format(task=spec.problem.task_name, file=spec.problem.path.name,
                                                          inputs=inputs, params=params, output=spec.output.name,
                                                          seed=spec.init_seed))
    shutil.copyfile(spec.problem.path, folder / "problem.py")
    (folder / "seeds" / "naive.cu").write_text(naive)
    return folder, why
