"""`evo-fsr export`: the generated package, its argument checks (on fake arrays), nvcc builds."""
from __future__ import annotations

import ctypes
import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from evo_fsr.commands.export import main as export_main
from evo_fsr.tasks import get_task

from run_fixtures import make_run  # tests/unit is on sys.path (pytest rootdir-less import)


@dataclass
class FakeArray:
    shape: tuple
    dtype: str = "float32"
    contiguous: bool = True
    device: int = 0
    ptr: int = 0x1000


class FakeAdapter:
    """Stands in for torch: arrays are FakeArray, the stream is 0xABC."""

    name = "fake"

    def __init__(self) -> None:
        self.allocated: list[FakeArray] = []

    def owns(self, obj):
        return isinstance(obj, FakeArray)

    def info(self, obj):
        from evo_fsr.export.runtime import BufferInfo
        return BufferInfo("fake", tuple(obj.shape), obj.dtype, obj.contiguous, obj.device)

    def pointer(self, obj):
        return obj.ptr

    def empty(self, shape, dtype, device):
        arr = FakeArray(tuple(shape), dtype, True, device, 0x9000 + len(self.allocated))
        self.allocated.append(arr)
        return arr

    def stream(self, device):
        return 0xABC

    def device_scope(self, device):
        import contextlib
        return contextlib.nullcontext()


def _import(folder: Path, alias: str):
    spec = importlib.util.spec_from_file_location(alias, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    spec.loader.exec_module(module)
    return module


def _export(tmp_path: Path, task: str, seed: str = "naive", *extra: str) -> Path:
    src = get_task(task).root / "seeds" / f"{seed}.cu"
    assert export_main([str(src), "--task", task, "-o", str(tmp_path), *extra]) == 0
    return tmp_path / f"evo_{task}"


@pytest.fixture
def fake_relu(tmp_path):
    folder = _export(tmp_path, "relu")
    module = _import(folder, f"exported_relu_{id(tmp_path)}")
    adapter = FakeAdapter()
    runtime = sys.modules[f"exported_relu_{id(tmp_path)}._runtime"]
    runtime.ADAPTERS.insert(0, adapter)
    calls = []
    module._KERNEL._launcher = lambda: (lambda *a: calls.append(a) or 0)
    return module, adapter, calls


def test_package_is_standalone_and_has_the_task_signature(tmp_path) -> None:
    folder = _export(tmp_path, "conv2d", "implicit_gemm")
    assert sorted(p.name for p in folder.iterdir()) == ["__init__.py", "_formulas.py", "_runtime.py", "contract.h",
                                                        "kernel.cu", "spec.json"]
    spec = json.loads((folder / "spec.json").read_text())
    task = get_task("conv2d")
    assert [a["name"] for a in spec["args"]] == [a.name for a in task.args]
    assert (folder / "contract.h").read_text() == task.header()
    assert (folder / "kernel.cu").read_text() == task.seeds()["implicit_gemm"]
    # importable without evo_fsr on the path: the runtime and formulas are copies
    code = (f"import sys; sys.path = [p for p in sys.path if 'evo' not in p and p not in ('', '.')]; "
            f"sys.path.insert(0, {str(tmp_path)!r}); import evo_conv2d, inspect; "
            f"assert 'evo_fsr' not in sys.modules; print(inspect.signature(evo_conv2d.conv2d))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    params = done.stdout.strip()
    assert params.startswith("(x, w, *, y=None, N=None") and "pad=None, stride=None" in params


def test_a_good_call_infers_dims_allocates_the_output_and_passes_the_stream(fake_relu) -> None:
    module, adapter, calls = fake_relu
    x = FakeArray((7,), ptr=0x1000)
    y = module.relu(x)
    assert y is adapter.allocated[0] and y.shape == (7,) and y.dtype == "float32"
    (args,) = calls
    assert [type(a) for a in args] == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p]
    assert [a.value for a in args] == [0x1000, y.ptr, 7, 0xABC]
    mine = FakeArray((7,), ptr=0x5000)
    assert module.relu(x, y=mine) is mine and calls[-1][1].value == 0x5000


@pytest.mark.parametrize("call, words", [
    (lambda m: m.relu(FakeArray((7,), dtype="float64")), "x must be float32, got float64"),
    (lambda m: m.relu(FakeArray((7,), contiguous=False)), "x must be contiguous"),
    (lambda m: m.relu(FakeArray((7,), device=-1)), "x is in host memory"),
    (lambda m: m.relu(FakeArray((2, 3))), "x must have 1 dim(s) [n], got shape (2, 3)"),
    (lambda m: m.relu(FakeArray((7,)), y=FakeArray((8,))), "y.shape[0] = 8 but x.shape[0] gives n = 7"),
    (lambda m: m.relu(FakeArray((7,)), y=FakeArray((7,), device=1)), "y is on cuda:1 but earlier arguments are on cuda:0"),
    (lambda m: m.relu(FakeArray((7,)), n=6), "n=6 disagrees with x.shape[0] = 7"),
    (lambda m: m.relu([1.0, 2.0]), "x must be a torch tensor or a CuPy array, got list"),
    (lambda m: m._KERNEL(FakeArray((7,)), bogus=1), "unexpected keyword 'bogus'"),
    (lambda m: m._KERNEL(), "takes 1 array argument(s) (x), got 0"),
])
def test_bad_calls_name_the_argument_and_the_problem(fake_relu, call, words) -> None:
    module, _, calls = fake_relu
    with pytest.raises(module.KernelArgumentError) as info:
        call(module)
    assert words in str(info.value) and str(info.value).startswith("relu(): ")
    assert not calls


def test_dims_that_shapes_cannot_give_must_be_passed(tmp_path) -> None:
    folder = _export(tmp_path, "conv2d")
    module = _import(folder, "exported_conv2d_dims")
    adapter = FakeAdapter()
    sys.modules["exported_conv2d_dims._runtime"].ADAPTERS.insert(0, adapter)
    calls = []
    module._KERNEL._launcher = lambda: (lambda *a: calls.append(a) or 0)
    x, w = FakeArray((2, 3, 9, 9)), FakeArray((4, 3, 3, 3))
    with pytest.raises(module.KernelArgumentError, match=r"cannot infer pad, stride from the array shapes"):
        module.conv2d(x, w)
    with pytest.raises(module.KernelArgumentError, match=r"w.shape\[1\] = 5 but x.shape\[1\] gives C = 3"):
        module.conv2d(x, FakeArray((4, 5, 3, 3)), pad=1, stride=1)
    y = module.conv2d(x, w, pad=1, stride=2)
    assert y.shape == (2, 4, 5, 5)                      # P = (9 + 2 - 3) // 2 + 1
    assert [a.value for a in calls[0][3:12]] == [2, 3, 9, 9, 4, 3, 3, 1, 2]


def test_a_failing_launch_raises(fake_relu) -> None:
    module, _, _ = fake_relu
    module._KERNEL._launch = lambda *a: 700
    with pytest.raises(RuntimeError, match="CUDA error 700"):
        module.relu(FakeArray((3,)))


def test_export_from_a_run_directory_takes_best_cu(tmp_path) -> None:
    run = make_run(tmp_path / "run", gens=1)
    assert export_main([str(run), "-o", str(tmp_path / "out")]) == 0
    folder = tmp_path / "out" / "evo_conv2d"
    assert (folder / "kernel.cu").read_text() == (run / "best.cu").read_text()
    assert "x over naive" in (folder / "__init__.py").read_text()          # best.cu's header travels along


@pytest.mark.parametrize("argv, words", [
    (["tasks/relu/seeds/naive.cu", "-o", "OUT"], "--task is required"),
    (["tasks/relu/seeds/naive.cu", "--task", "nope", "-o", "OUT"], "no task named 'nope'"),
    (["/no/such.cu", "--task", "relu", "-o", "OUT"], "no such file"),
    (["tasks/relu/seeds/naive.cu", "--task", "relu", "-o", "OUT", "--arch", "90"], "--arch '90'"),
    (["tasks/relu/seeds/naive.cu", "--task", "relu", "-o", "OUT", "--name", "1x"], "--name '1x'"),
    (["EMPTY", "-o", "OUT"], "not a run directory"),
])
def test_bad_input_is_one_line(tmp_path, capsys, monkeypatch, argv, words) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    (tmp_path / "empty").mkdir()
    argv = [a.replace("OUT", str(tmp_path / "o")).replace("EMPTY", str(tmp_path / "empty")) for a in argv]
    assert export_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and words in err and "\n" not in err


def test_shipped_so_is_compiled_with_nvcc_and_exports_launch(tmp_path, nvcc_available) -> None:
    if not nvcc_available:
        pytest.skip("nvcc not found")
    folder = _export(tmp_path, "relu", "naive", "--arch", "sm_90")
    so = folder / "kernel_sm_90.so"
    assert so.is_file() and not (folder / "_build").exists()
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    assert any(line.split()[-1] == "launch" for line in symbols.splitlines())
    module = _import(folder, "exported_relu_so")
    assert module._KERNEL.library_path("sm_90") == so
    # no shipped .so for another arch: nvcc at first use, cached in the package's _build/
    built = module._KERNEL.library_path("sm_80")
    assert built.parent == folder / "_build" and built.is_file()
    first = built.stat().st_mtime_ns
    assert module._KERNEL.library_path("sm_80") == built and built.stat().st_mtime_ns == first   # cached


def test_a_kernel_that_does_not_compile_fails_with_nvcc_output(tmp_path, nvcc_available, capsys) -> None:
    if not nvcc_available:
        pytest.skip("nvcc not found")
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" int launch(const float* x, float* y, int n, cudaStream_t s) { return oops; }\n')
    assert export_main([str(bad), "--task", "relu", "-o", str(tmp_path / "o"), "--arch", "sm_90"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: nvcc failed") and '"oops" is undefined' in err


def test_real_torch_tensors_are_described_and_host_memory_refused(tmp_path) -> None:
    torch = pytest.importorskip("torch", reason="torch not installed (optional)")
    from evo_fsr.export.runtime import TorchAdapter
    info = TorchAdapter().info(torch.zeros(3, 4).t())
    assert info.framework == "torch" and info.shape == (4, 3) and info.dtype == "float32"
    assert not info.contiguous and info.device == -1
    assert TorchAdapter().info(torch.zeros(2, dtype=torch.float64)).dtype == "float64"
    module = _import(_export(tmp_path, "relu"), "exported_relu_torch")
    with pytest.raises(module.KernelArgumentError, match="x is in host memory"):
        module.relu(torch.randn(5))
