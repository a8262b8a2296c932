"""An exported kernel matches torch's operator on the GPU (run with `pytest -m gpu`)."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from evo_fsr.commands.export import main as export_main
from evo_fsr.tasks import get_task

pytestmark = pytest.mark.gpu


def _exported(tmp_path: Path, task: str, seed: str):
    source = get_task(task).root / "seeds" / f"{seed}.cu"
    name = f"gpu_{task}_{seed}"
    assert export_main([str(source), "--task", task, "-o", str(tmp_path), "--name", name]) == 0
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.parametrize("task, seed", [("relu", "naive"), ("softmax", "naive"), ("softmax", "block_online")])
def test_exported_kernel_matches_torch_on_the_current_stream(tmp_path, task, seed) -> None:
    torch = pytest.importorskip("torch", reason="the export GPU test compares with torch")
    module = _exported(tmp_path, task, seed)
    fn = getattr(module, task)
    shape = (1000003,) if task == "relu" else (129, 4099)
    x = torch.randn(shape, device="cuda") * 10
    expected = torch.relu(x) if task == "relu" else torch.softmax(x.double(), dim=-1).float()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):           # runs on the caller's current stream
        y = fn(x)
    stream.synchronize()
    assert y.shape == x.shape and y.dtype == torch.float32 and y.device == x.device
    torch.testing.assert_close(y, expected, rtol=3e-5, atol=1e-6)
    out = torch.empty_like(x)
    assert fn(x, y=out) is out
    torch.cuda.synchronize()
    torch.testing.assert_close(out, expected, rtol=3e-5, atol=1e-6)
    with pytest.raises(module.KernelArgumentError, match="must be contiguous"):
        fn(x.t() if x.dim() == 2 else x[::2])
    with pytest.raises(module.KernelArgumentError, match="host memory"):
        fn(x.cpu())
    with pytest.raises(module.KernelArgumentError, match="must be float32"):
        fn(x.double())


def test_exported_kernel_on_cupy_arrays(tmp_path) -> None:
    cupy = pytest.importorskip("cupy", reason="CuPy not installed")
    module = _exported(tmp_path, "relu", "naive")
    x = cupy.random.standard_normal(4097, dtype=cupy.float32)
    y = module.relu(x)
    cupy.cuda.get_current_stream().synchronize()
    assert cupy.array_equal(y, cupy.maximum(x, 0))
