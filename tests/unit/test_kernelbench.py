"""`evo-fsr import-kernelbench` on problem files written in KernelBench's format
(tests/unit/kernelbench_problems/).  The AST checks, the naive seeds and the task writer need no
torch; the conversion itself does (those tests skip, with the reason, without it)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evo_fsr.commands import import_kernelbench as cli
from evo_fsr.kernelbench.problem import ProblemError, parse_problem
from evo_fsr.kernelbench.spec import TaskSpec, TensorSpec
from evo_fsr.kernelbench.writer import write_task
from evo_fsr.tasks import load_task
from evo_fsr.verdict.compile import compile_source

PROBLEMS = Path(__file__).resolve().parent / "kernelbench_problems"
CONVERTIBLE = {"19_ReLU.py": "generated", "1_Square_matrix_multiplication_.py": "generated",
               "5_Elementwise_add.py": "generated", "23_Softmax.py": "placeholder",
               "47_Sum_reduction_over_a_dimension.py": "placeholder", "55_conv_standard_2D.py": "placeholder",
               "99_Linear_Add.py": "placeholder"}
REFUSED = {"90_Two_outputs.py": "several outputs", "91_Inplace_relu.py": "in-place",
           "92_Argmax.py": "non-float output", "93_Index_gather.py": "non-float input",
           "94_Dropout.py": "non-deterministic"}


# -- no torch needed -------------------------------------------------------------------------
def test_problem_files_are_read_without_running_them() -> None:
    relu = parse_problem(PROBLEMS / "19_ReLU.py")
    assert relu.task_name == "kb_19_relu" and relu.forward_params == ("x",) and relu.issue is None
    assert relu.naive.kind == "unary" and "fmaxf" in relu.naive.expr and "ReLU activation" in relu.description
    mm = parse_problem(PROBLEMS / "1_Square_matrix_multiplication_.py")
    assert mm.naive.kind == "matmul" and mm.naive.operands == ("A", "B")
    assert parse_problem(PROBLEMS / "5_Elementwise_add.py").naive.expr == "+"
    assert parse_problem(PROBLEMS / "23_Softmax.py").naive is None       # softmax(x, dim=1): not one op
    assert parse_problem(PROBLEMS / "55_conv_standard_2D.py").naive is None


@pytest.mark.parametrize("name, words", [("90_Two_outputs.py", "several outputs (forward returns 2 values"),
                                         ("91_Inplace_relu.py", "in-place: forward calls relu_()"),
                                         ("93_Index_gather.py", "non-float input: get_inputs() calls torch.randint")])
def test_static_refusals_name_the_reason(name, words) -> None:
    assert words in parse_problem(PROBLEMS / name).issue


def test_in_place_patterns(tmp_path) -> None:
    body = {"x += 1\n        return x": "modifies its input 'x'", "x[0] = 0\n        return x": "writes into its input",
            "return torch.add(x, x, out=x)": "out=", "return x": None}
    for code, words in body.items():
        path = tmp_path / "p.py"
        path.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                        f"        {code}\ndef get_inputs():\n    return [torch.randn(3)]\n"
                        "def get_init_inputs():\n    return []\n")
        issue = parse_problem(path).issue
        assert (issue is None) if words is None else (words in issue)
    path = tmp_path / "q.py"
    path.write_text("import torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "        self.r = nn.ReLU(inplace=True)\n    def forward(self, x):\n        return self.r(x)\n"
                    "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    assert "inplace=True" in parse_problem(path).issue


@pytest.mark.parametrize("text, words", [("x = 1\n", "no `class Model"), ("def f(:\n", "not valid Python"),
                                         ("class Model:\n    def forward(self, x): pass\n", "no `def get_inputs()`")])
def test_not_a_kernelbench_file(tmp_path, text, words) -> None:
    path = tmp_path / "bad.py"
    path.write_text(text)
    with pytest.raises(ProblemError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_problem(path)


def _elementwise_spec(name: str) -> TaskSpec:
    problem = parse_problem(PROBLEMS / name)
    shape = ("x_0", "x_1")
    inputs = tuple(TensorSpec(p, shape) for p in problem.forward_params)
    return TaskSpec(problem=problem, inputs=inputs, output=TensorSpec("out", shape, "output"),
                    dims=(("x_0", 16), ("x_1", 16384)),
                    validation=(("small_odd", (("x_0", 5), ("x_1", 7))), ("ones", (("x_0", 1), ("x_1", 1)))))


def test_written_task_loads_and_its_naive_seed_compiles(tmp_path, nvcc_available) -> None:
    folder, why = write_task(_elementwise_spec("19_ReLU.py"), tmp_path)
    assert why == ""
    task = load_task(folder)
    assert task.signature() == ('extern "C" int launch(const float* x, float* out, int x_0, int x_1, '
                                'cudaStream_t stream)')
    assert [s.label for s in task.validation] == ["small_odd", "ones"]
    assert dict(task.benchmark()[0].dims) == {"x_0": 16, "x_1": 16384}
    assert task.bytes_of(task.benchmark()[0]) == 4 * 2 * 16 * 16384
    assert (folder / "problem.py").read_text() == (PROBLEMS / "19_ReLU.py").read_text()
    if not nvcc_available:
        pytest.skip("nvcc not found: the compile half of this test needs it")
    result = compile_source(task.baseline_source, task.header(), "sm_90", cache_dir=None)
    assert result.ok, result.log


def test_placeholder_seed_fails_to_compile_with_its_message(tmp_path, nvcc_available) -> None:
    folder, why = write_task(_elementwise_spec("23_Softmax.py"), tmp_path)
    assert "not one recognised operation" in why
    task = load_task(folder)
    assert "PLACEHOLDER" in task.baseline_source and "PLACEHOLDER" in (folder / "task.yaml").read_text()
    if not nvcc_available:
        pytest.skip("nvcc not found")
    result = compile_source(task.baseline_source, task.header(), "sm_90", cache_dir=None)
    assert not result.ok and "is a placeholder: write a naive kernel by hand" in result.log


def test_without_torch_static_refusals_are_listed_and_the_rest_needs_torch(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "torch_missing", lambda: True)
    assert cli.main([str(PROBLEMS), "-o", str(tmp_path / "t")]) == 2
    captured = capsys.readouterr()
    assert "not converted" in captured.out and "several outputs" in captured.out
    assert "pip install 'evo-fsr[kernelbench]'" in captured.err and not (tmp_path / "t").exists()


def test_bad_paths_are_one_line(tmp_path, capsys) -> None:
    assert cli.main([str(tmp_path / "nope.py"), "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "no such file" in err and "\n" not in err


# -- with torch ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    pytest.importorskip("torch", reason="converting KernelBench problems needs torch (extra `kernelbench`)")
    out = tmp_path_factory.mktemp("kb") / "tasks"
    code = cli.main([str(PROBLEMS), "-o", str(out)])
    return out, code


def test_every_problem_is_converted_or_refused_with_its_reason(imported, capsys) -> None:
    out, code = imported
    assert code == 1                                    # some could not be converted
    names = {p.name for p in out.iterdir()}
    for file, naive in CONVERTIBLE.items():
        task = load_task(out / parse_problem(PROBLEMS / file).task_name)
        assert (naive == "placeholder") == ("PLACEHOLDER" in task.baseline_source), file
    for file in REFUSED:
        assert parse_problem(PROBLEMS / file).task_name not in names
    assert len(names) == len(CONVERTIBLE)


@pytest.mark.parametrize("file", REFUSED)
def test_refusal_reasons(imported, capsys, file) -> None:
    out, _ = imported
    again = cli.main([str(PROBLEMS / file), "-o", str(out)])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("not converted")]
    assert again == 1 and len(lines) == 1 and REFUSED[file] in lines[0] and file in lines[0]


def _model_output(file: str, inputs: list, state: dict | None = None):
    import torch
    from evo_fsr.kernelbench.probe import load_module
    module = load_module(parse_problem(PROBLEMS / file))
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).double()
    if state:
        model.load_state_dict({k: torch.from_numpy(v).double() for k, v in state.items()}, strict=False)
    with torch.no_grad():
        return model(*[torch.from_numpy(np.asarray(x)).double() for x in inputs]).numpy()


def test_signature_shapes_and_reference_match_the_model(imported) -> None:
    import torch
    out, _ = imported
    conv = load_task(out / "kb_55_conv_standard_2d")
    args = {a.name: a for a in conv.args}
    assert [a.role for a in conv.args] == ["input", "input", "input", "output", "scalar", "scalar", "scalar", "stream"]
    assert args["p_conv2d_weight"].dims_of({}) == (8, 3, 3, 3)        # parameters: fixed sizes
    for shape in conv.validation + conv.benchmark():
        if shape in conv.benchmark() and max(dict(shape.dims).values()) > 64:
            continue
        rng = np.random.default_rng(3)
        inputs = conv.make_inputs(shape.env, rng, shape.case)
        expected = torch.nn.functional.conv2d(torch.from_numpy(inputs["x"]).double(),
                                              torch.from_numpy(inputs["p_conv2d_weight"]).double(),
                                              torch.from_numpy(inputs["p_conv2d_bias"]).double(), stride=2).numpy()
        got = conv.reference(inputs, shape.env)["out"]
        assert got.dtype == np.float64 and got.shape == args["out"].dims_of(shape.env) == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
        library = conv.reference_module.library({k: torch.from_numpy(v) for k, v in inputs.items()}, shape.env, torch)
        np.testing.assert_allclose(library["out"].numpy(), expected, rtol=1e-4, atol=1e-4)
    relu = load_task(out / "kb_19_relu")
    shape = relu.validation[0]
    x = relu.make_inputs(shape.env, np.random.default_rng(0), "random")["x"]
    assert x.shape == (5, 7) and x.dtype == np.float32 and x.min() < 0       # randn in get_inputs: normal
    np.testing.assert_array_equal(relu.reference({"x": x}, shape.env)["out"], np.maximum(x.astype(np.float64), 0))
    add = load_task(out / "kb_5_elementwise_add")
    drawn = add.make_inputs(add.validation[0].env, np.random.default_rng(0), "random")
    assert drawn["a"].min() >= 0                                             # torch.rand in get_inputs: uniform


@pytest.mark.parametrize("file, axes", [("47_Sum_reduction_over_a_dimension.py", ["x_0", 1, "x_2"]),
                                        ("99_Linear_Add.py", ["x_0", 50]),
                                        ("55_conv_standard_2D.py", ["x_0", 8, "(x_2 - 1) // 2", "(x_3 - 1) // 2"])])
def test_output_formulas_hold_on_every_validation_shape(imported, file, axes) -> None:
    out, _ = imported
    task = load_task(out / parse_problem(PROBLEMS / file).task_name)
    output = next(a for a in task.args if a.role == "output")
    assert [f.text if not f.text.isdigit() else int(f.text) for f in output.shape] == axes
    assert len(task.validation) >= 2 and any(min(dict(s.dims).values()) % 2 == 1 for s in task.validation)
    for shape in task.validation:
        inputs = task.make_inputs(shape.env, np.random.default_rng(1), "random")
        names = [a.name for a in task.args if a.role == "input"]
        params = {key: inputs[name] for name, key in task.reference_module.PARAMS}
        model_out = _model_output(file, [inputs[n] for n in names if not n.startswith("p_")], params)
        assert model_out.shape == output.dims_of(shape.env)


def test_imported_tasks_are_found_through_tasks_dir(imported, capsys, monkeypatch) -> None:
    from evo_fsr.cli import main as evo_main
    monkeypatch.setenv("EVO_FSR_TASKS_PATH", "")          # restored after the test (--tasks-dir sets it)
    out, _ = imported
    assert evo_main(["--tasks-dir", str(out), "tasks"]) == 0
    listing = capsys.readouterr().out
    assert "kb_19_relu" in listing and "relu " in listing and "INVALID" not in listing
